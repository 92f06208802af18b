"""``dump_graphs``: rewrite a graph and write everything needed to see what the rewrite did.

Output tree (``out_dir``)::

    <run>/<NNN>_<pass>_before.pbtxt   every pass's input and output (DumpInstrument layout;
    <run>/<NNN>_<pass>_after.pbtxt    DUMP_GE_GRAPH / DUMP_GRAPH_LEVEL apply)
    final.pbtxt                       the rewritten graph
    placement.json                    the placement report (npu_adapter.report.placement)
    report.html                       the same for a person, self-contained
    graph/partition.dot, .svg         the partitioned graph (overview when large)
    graph/<cluster>.dot, .svg         drill-down of each cluster (the largest MAX_DRILLDOWNS)
    tensorboard/{before,after,placement}/events.out.tfevents.0.npu-adapter
    timings.json                      only with timings=True (not deterministic)

Two dumps of the same graph with the same options and environment are byte-identical, except
``timings.json`` (wall times) and the SVGs when Graphviz is installed on one run and not on the
other. Files of an earlier dump that this one would not write (per-pass files of another level,
drawings of clusters that are gone) are removed first; nothing else in ``out_dir`` is touched.
"""

import dataclasses
import json
import os
import re
import time
import typing

from npu_adapter.graph.names import sanitize_filename
from npu_adapter.pipeline.dump_instruments import (
    PassDumpInstrument,
    ProgressInstrument,
    StageCaptureInstrument,
    write_text,
)
from npu_adapter.pipeline.dump_settings import (
    check_content_level,
    check_count_level,
    read_dump_settings,
)
from npu_adapter.report import drawing as drawing_mod
from npu_adapter.report.html import render_report_html
from npu_adapter.report.placement import placement_report, report_json
from npu_adapter.report.tensorboard import EVENT_FILE_NAME, placement_graph, write_graph_event_file

__all__ = ["dump_graphs", "DumpGraphsResult", "MAX_DRILLDOWNS", "as_graph_input"]

MAX_DRILLDOWNS = 40
"""At most this many clusters (the largest) get a drill-down drawing."""

_PASS_FILE_RE = re.compile(r"\A\d{3}_[A-Za-z0-9_\-]+\.pbtxt\Z")
_DRAWING_RE = re.compile(r"\A[A-Za-z0-9_\-]+\.(dot|svg)\Z")
_TOP_FILES = ("final.pbtxt", "placement.json", "report.html", "timings.json")
_TB_RUNS = ("before", "after", "placement")


@dataclasses.dataclass
class DumpGraphsResult:
    """What :func:`dump_graphs` wrote.

    Attributes:
        out_dir: the output directory.
        result: the :class:`~npu_adapter.pipeline.result.RewriteResult`.
        report: the placement report (the dict written as ``placement.json``).
        files: every file written, relative to ``out_dir`` with ``/`` separators, sorted.
        pass_dumps: absolute paths of the per-pass dumps, in pass order.
        renderer: ``"dot"`` or ``"builtin"`` (how the SVGs were laid out), or None.
        timings: ``(stage, seconds)`` pairs (rewrite passes and report stages).
    """

    out_dir: str
    result: typing.Any
    report: dict
    files: list
    pass_dumps: list
    renderer: typing.Optional[str] = None
    timings: list = dataclasses.field(default_factory=list)

    def path(self, relative):
        """Absolute path of ``relative`` (e.g. ``"report.html"``) inside ``out_dir``."""
        return os.path.join(self.out_dir, *relative.split("/"))


def as_graph_input(graph_def_or_model, fetches=None, feeds=None):
    """``(graph_def, fetches, feeds, model name)`` for a GraphDef, ``tf.Graph``, MetaGraphDef,
    model path or :class:`~npu_adapter.model_io.LoadedModel`.

    A model's signature fills ``fetches``/``feeds`` only when ``fetches`` and ``feeds`` are None.
    """
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import meta_graph_pb2

    from npu_adapter import model_io

    value = graph_def_or_model
    if isinstance(value, (str, os.PathLike)):
        value = model_io.load_model(value)
    if isinstance(value, model_io.LoadedModel):
        if fetches is None and feeds is None:
            fetches, feeds = value.fetches or None, value.feeds or None
        return value.graph_def, fetches, feeds, value.name
    if isinstance(value, graph_pb2.GraphDef):
        return value, fetches, feeds, None
    if isinstance(value, meta_graph_pb2.MetaGraphDef):
        return value.graph_def, fetches, feeds, None
    if hasattr(value, "as_graph_def"):
        return value.as_graph_def(), fetches, feeds, None
    raise TypeError("dump_graphs takes a GraphDef, a tf.Graph, a MetaGraphDef or the path of a "
                    f"model file; got {type(graph_def_or_model).__name__}")


def _remove(path):
    if os.path.isfile(path):
        os.remove(path)


def _clean_previous(out_dir, run):
    """Remove files an earlier dump_graphs wrote here (only names we write)."""
    for name in _TOP_FILES:
        _remove(os.path.join(out_dir, name))
    run_dir = os.path.join(out_dir, run)
    if os.path.isdir(run_dir):
        for name in sorted(os.listdir(run_dir)):
            if _PASS_FILE_RE.match(name):
                _remove(os.path.join(run_dir, name))
    graph_dir = os.path.join(out_dir, "graph")
    if os.path.isdir(graph_dir):
        for name in sorted(os.listdir(graph_dir)):
            if _DRAWING_RE.match(name):
                _remove(os.path.join(graph_dir, name))
    for tb_run in _TB_RUNS:
        _remove(os.path.join(out_dir, "tensorboard", tb_run, EVENT_FILE_NAME))


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    return path


def _drawings(client, report, out_dir, renderer, draw_limit, write_files):
    """Render the partition drawing and the drill-downs; returns (svg, drawing, cluster svgs,
    renderer used, files)."""
    files = []
    used = None
    main = drawing_mod.partition_drawing(client, report, draw_limit)
    svg, dot_text, used = drawing_mod.render(main, renderer)
    stems = set()

    def save(draw, svg_text, dot_source):
        stem = sanitize_filename(draw.name)
        if stem in stems:
            return
        stems.add(stem)
        if write_files:
            files.append(_write(os.path.join(out_dir, "graph", stem + ".dot"), dot_source))
            files.append(_write(os.path.join(out_dir, "graph", stem + ".svg"), svg_text))

    save(main, svg, dot_text)
    by_size = sorted(report["clusters"], key=lambda c: (-c["size"], c["name"]))
    cluster_svgs = {}
    for cluster in by_size[:MAX_DRILLDOWNS]:
        draw = drawing_mod.cluster_drawing(client, report, cluster, draw_limit)
        if draw.name == main.name:
            draw.name = "cluster_" + draw.name
        c_svg, c_dot, _ = drawing_mod.render(draw, used)
        cluster_svgs[cluster["name"]] = c_svg
        save(draw, c_svg, c_dot)
    return svg, main, cluster_svgs, used, files


def dump_graphs(graph_def_or_model, config=None, out_dir=None, *, fetches=None, feeds=None,
                targets=None, backend="cpu", run_name=None, graph_num=1, html=True, dot=True,
                tensorboard=True, renderer="auto", content_level=None, count_level=None,
                environ=None, shapes=True, timings=False, draw_limit=None, progress=None,
                model_name=None):
    """Rewrite a graph and write its dumps and placement report into ``out_dir``.

    Args:
        graph_def_or_model: a ``GraphDef``, ``tf.Graph``, ``MetaGraphDef``, a model path
            (``.pb``, ``.pbtxt``, ``.meta``, SavedModel directory; see
            :mod:`npu_adapter.model_io`) or a ``LoadedModel``.
        config: ``NpuConfig``, ``ConfigProto``, dict of options or None (defaults).
        out_dir: the output directory (created); default: the config's
            ``npu_adapter_dump_dir``.
        fetches, feeds, targets: the run signature (see :func:`npu_adapter.rewrite`); a model's
            signature is used when none is given.
        backend: backend name or instance.
        run_name: directory of the per-pass dumps (default ``graph_<graph_num>``).
        graph_num: the ``N`` of the ``GeOp<N>_<k>`` cluster names.
        html, dot, tensorboard: write ``report.html``, the ``graph/`` files, the TensorBoard runs.
        renderer: ``"auto"`` (Graphviz ``dot`` when installed), ``"dot"`` or ``"builtin"``.
        content_level, count_level: override ``DUMP_GE_GRAPH`` / ``DUMP_GRAPH_LEVEL`` for the
            per-pass dumps (the ``PRINT_MODEL`` files always follow the environment).
        environ: environment mapping to read the dump variables from (default ``os.environ``).
        shapes: infer static shapes of the boundary tensors (imports the graph into TensorFlow).
        timings: also write ``timings.json`` (wall times; not deterministic).
        draw_limit: most boxes per drawing before collapsing (default
            :data:`~npu_adapter.report.drawing.DRAW_LIMIT`).
        progress: callable taking one message string per stage (for long runs).
        model_name: name shown in the reports (default: the model file's base name).

    Returns:
        A :class:`DumpGraphsResult`.

    Raises:
        Everything :func:`npu_adapter.rewrite` raises; ``ModelFileError`` for a bad model path;
        ``NpuConfigError`` for bad dump levels; ``ValueError`` when there is no ``out_dir``.
    """
    from npu_adapter.api import as_npu_config, rewrite
    from npu_adapter.backends import get_backend

    started = time.perf_counter()
    stage_times = []

    def say(message):
        if progress is not None:
            progress(message)

    def stage(name, since):
        now = time.perf_counter()
        stage_times.append((name, now - since))
        return now

    t = time.perf_counter()
    graph_def, fetches, feeds, loaded_name = as_graph_input(graph_def_or_model, fetches, feeds)
    t = stage("load", t)
    npu_config = as_npu_config(config)
    if out_dir is None:
        out_dir = npu_config.get("npu_adapter_dump_dir") or None
    if not out_dir:
        raise ValueError("dump_graphs needs out_dir (or the option npu_adapter_dump_dir)")
    out_dir = os.fspath(out_dir)
    settings = read_dump_settings(environ)
    content = settings.content_level if content_level is None else check_content_level(
        content_level, "content_level")
    count = settings.count_level if count_level is None else check_count_level(
        count_level, "count_level")
    backend_obj = get_backend(backend) if isinstance(backend, str) else backend
    run = sanitize_filename(run_name or f"graph_{int(graph_num)}")
    os.makedirs(out_dir, exist_ok=True)
    _clean_previous(out_dir, run)

    say(f"rewriting {len(graph_def.node)} nodes with backend {backend_obj.name}")
    pass_dump = PassDumpInstrument(out_dir, run, content, count)
    capture = StageCaptureInstrument()
    instruments = [capture, pass_dump]
    if progress is not None:
        instruments.append(ProgressInstrument(say))
    result = rewrite(graph_def, npu_config, fetches=fetches, feeds=feeds, targets=targets,
                     backend=backend_obj, graph_num=graph_num, instruments=instruments)
    t = stage("rewrite", t)
    client = capture.input if capture.input is not None else graph_def
    written = list(pass_dump.files)
    written.append(write_text(os.path.join(out_dir, "final.pbtxt"), result.graph_def, content))

    say("building the placement report")
    report = placement_report(result, client, model=model_name or loaded_name,
                              backend=backend_obj, config=npu_config,
                              fetches=list(fetches or ()), feeds=list(feeds or ()),
                              shapes=shapes)
    written.append(_write(os.path.join(out_dir, "placement.json"), report_json(report)))
    t = stage("report", t)

    used = None
    if html or dot:
        say("drawing the partitioned graph")
        limit = draw_limit or drawing_mod.DRAW_LIMIT
        svg, main, cluster_svgs, used, files = _drawings(client, report, out_dir, renderer,
                                                         limit, dot)
        written.extend(files)
        t = stage("draw", t)
        if html:
            page = render_report_html(report, partition_svg=svg, partition_drawing=main,
                                      renderer=used, cluster_svgs=cluster_svgs)
            written.append(_write(os.path.join(out_dir, "report.html"), page))
            t = stage("html", t)
    if tensorboard:
        say("writing TensorBoard runs")
        tb = os.path.join(out_dir, "tensorboard")
        from npu_adapter.pipeline.dump_content import apply_content_level

        for tb_run, graph in (("before", client), ("after", result.graph_def),
                              ("placement", placement_graph(client, report))):
            written.append(write_graph_event_file(os.path.join(tb, tb_run),
                                                  apply_content_level(graph, content)))
        t = stage("tensorboard", t)
    all_times = [(f"pass:{name}", seconds) for name, seconds in result.timings] + stage_times
    all_times.append(("total", time.perf_counter() - started))
    if timings:
        text = json.dumps([{"stage": name, "seconds": round(s, 6)} for name, s in all_times],
                          indent=1) + "\n"
        written.append(_write(os.path.join(out_dir, "timings.json"), text))
    say(f"done in {all_times[-1][1]:.1f} s")
    relative = sorted({os.path.relpath(p, out_dir).replace(os.sep, "/") for p in written})
    return DumpGraphsResult(out_dir=out_dir, result=result, report=report, files=relative,
                            pass_dumps=list(pass_dump.files), renderer=used, timings=all_times)
