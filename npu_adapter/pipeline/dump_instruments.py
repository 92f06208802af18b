"""Dump instruments: the per-pass tree and the original's ``PRINT_MODEL`` files.

Dumps are written around passes, never inside them (so that passes stay pure functions).
Both instruments apply the
content level (``DUMP_GE_GRAPH``) and the count level (``DUMP_GRAPH_LEVEL``) of
:mod:`npu_adapter.pipeline.dump_settings`. Text is deterministic (``to_text``: attributes sorted
by key, nodes in GraphDef order) and every file-name part is sanitised, so nothing is written
outside the chosen directory and the same rewrite always produces the same bytes."""

import os
import time

from npu_adapter.graph.names import sanitize_filename, unique_name
from npu_adapter.graph.serialize import to_text
from npu_adapter.pipeline.dump_content import (
    apply_content_level,
    function_graph_def,
    functions_called,
)
from npu_adapter.pipeline.dump_settings import (
    CONTENT_FULL,
    COUNT_ALL,
    COUNT_FIRST,
    COUNT_LAST,
    COUNT_NO_SUBGRAPHS,
    read_dump_settings,
)
from npu_adapter.pipeline.instruments import PassInstrument
from npu_adapter.vocabulary import GEOP_OP

__all__ = [
    "rewrite_dump_instruments",
    "rewrite_dump_instruments",
    "PassDumpInstrument",
    "CompatDumpInstrument",
    "StageCaptureInstrument",
    "ProgressInstrument",
    "write_text",
]


def write_text(path, graph_def, content_level=CONTENT_FULL, text=None):
    """Write ``graph_def`` at ``content_level`` as deterministic text to ``path``.

    ``text``: the text already made for this graph and level (it is not made again).
    """
    if text is None:
        text = to_text(apply_content_level(graph_def, content_level))
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    return path


class PassDumpInstrument(PassInstrument):
    """Writes ``<out_dir>/<run>/<NNN>_<pass>_before.pbtxt`` and ``..._after.pbtxt``.

    ``count_level`` (``DUMP_GRAPH_LEVEL``): 1 also writes one GraphDef per function subgraph
    (``<NNN>_<pass>_<stage>_fn_<function>.pbtxt``: every function of the first input, then the
    functions each pass adds or changes); 2 only the graphs; 3 only the last graph (the output of
    the last pass, or the input of the pass that failed); 4 only the first (the pipeline input).
    When a pass fails, its input has been written already (levels 1, 2), so the failure can be
    reproduced from the dump.

    Attributes:
        files: paths written, in order.
    """

    def __init__(self, out_dir, run_name="run", content_level=CONTENT_FULL,
                 count_level=COUNT_ALL):
        self.out_dir = os.fspath(out_dir)
        self.run_name = sanitize_filename(run_name)
        self.content_level = content_level
        self.count_level = count_level
        self.files = []
        self._stems = set()
        self._last = None
        self._cached = None

    @property
    def directory(self):
        """``<out_dir>/<run>``."""
        return os.path.join(self.out_dir, self.run_name)

    def _path(self, stem):
        os.makedirs(self.directory, exist_ok=True)
        return os.path.join(self.directory, unique_name(stem, self._stems) + ".pbtxt")

    def _text(self, graph_def):
        # A pass's input is the previous pass's output, and a pass that changes nothing returns
        # its input: the same object is printed once (text printing dominates dump time).
        if self._cached is None or self._cached[0] is not graph_def:
            self._cached = (graph_def, to_text(apply_content_level(graph_def,
                                                                   self.content_level)))
        return self._cached[1]

    def _write(self, index, pass_, stage, graph_def, previous=None, functions=False):
        stem = f"{index:03d}_{sanitize_filename(pass_.name)}_{stage}"
        self.files.append(write_text(self._path(stem), graph_def, text=self._text(graph_def)))
        if functions:
            self._write_functions(stem, graph_def, previous)

    def _write_functions(self, stem, graph_def, previous):
        functions = {f.signature.name: f for f in graph_def.library.function}
        old = {} if previous is None else {f.signature.name: f
                                           for f in previous.library.function}
        for fdef in graph_def.library.function:
            name = fdef.signature.name
            if name in old and old[name] == fdef:
                continue
            body = function_graph_def(fdef, functions)
            path = self._path(f"{stem}_fn_{sanitize_filename(name)}")
            self.files.append(write_text(path, body, self.content_level))

    def before_pass(self, index, pass_, graph_def, ctx):
        first = self._last is None
        if self.count_level in (COUNT_ALL, COUNT_NO_SUBGRAPHS) or (
                self.count_level == COUNT_FIRST and first):
            # The input of a later pass is the previous output: its functions were written then.
            self._write(index, pass_, "before", graph_def,
                        functions=first and self.count_level == COUNT_ALL)
        self._last = (index, pass_, "before", graph_def)

    def after_pass(self, index, pass_, graph_def, result, ctx):
        if self.count_level in (COUNT_ALL, COUNT_NO_SUBGRAPHS):
            self._write(index, pass_, "after", result.graph_def, previous=graph_def,
                        functions=self.count_level == COUNT_ALL)
        self._last = (index, pass_, "after", result.graph_def)

    def exit_pipeline(self, ctx, ok):
        if self.count_level == COUNT_LAST and self._last is not None:
            self._write(*self._last)
        self._last = None
        self._cached = None


class CompatDumpInstrument(PassInstrument):
    """The files the original writes with ``PRINT_MODEL=1`` (docs/original-adapter.md, 12),
    for one rewrite.

    ``BeforeSubGraph_<n>.pbtxt`` is the graph the pipeline received, ``AfterSubGraph_<n>.pbtxt``
    the graph after ``encapsulate`` (``GeOp`` nodes and their functions, as the original's
    partition pass leaves it; the final graph when no ``encapsulate`` ran), ``TF_<GeOp>.pbtxt``
    the GraphDef of each cluster's function (what GeOp hands to GE) and, at count level 1,
    ``TF_Subgraph_<function>.pbtxt`` for every function a cluster calls. Count level 3 writes
    only ``AfterSubGraph``, level 4 only ``BeforeSubGraph``.

    Attributes:
        directory: where the files went (set when the pipeline starts).
        files: paths written.
    """

    def __init__(self, settings, graph_num):
        self.settings = settings
        self.graph_num = int(graph_num)
        self.directory = None
        self.files = []
        self._before = None
        self._after = None
        self._final = None

    def enter_pipeline(self, ctx):
        device = None
        config = getattr(ctx, "config", None)
        if config is not None:
            device = config.get("session_device_id")
        path = self.settings.compat_path(session_device_id=device)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            path = "./"  # the original falls back to the working directory as well
        self.directory = path

    def before_pass(self, index, pass_, graph_def, ctx):
        if self._before is None:
            self._before = graph_def

    def after_pass(self, index, pass_, graph_def, result, ctx):
        if pass_.name == "encapsulate":
            self._after = result.graph_def
        self._final = result.graph_def

    def _write(self, stem, graph_def):
        path = os.path.join(self.directory, sanitize_filename(stem) + ".pbtxt")
        self.files.append(write_text(path, graph_def, self.settings.content_level))

    def exit_pipeline(self, ctx, ok):
        level = self.settings.count_level
        if self._before is not None and level != COUNT_LAST:
            self._write(f"BeforeSubGraph_{self.graph_num}", self._before)
        after = self._after if self._after is not None else self._final
        if ok and after is not None and level != COUNT_FIRST:
            self._write(f"AfterSubGraph_{self.graph_num}", after)
            if level in (COUNT_ALL, COUNT_NO_SUBGRAPHS):
                self._write_clusters(after, level == COUNT_ALL)

    def _write_clusters(self, graph_def, subgraphs):
        functions = {f.signature.name: f for f in graph_def.library.function}
        nested = {}
        for node in graph_def.node:
            if node.op != GEOP_OP or "function" not in node.attr:
                continue
            fdef = functions.get(node.attr["function"].func.name)
            if fdef is None:
                continue
            self._write(f"TF_{node.name}", function_graph_def(fdef, functions))
            for name in functions_called(fdef, functions):
                nested.setdefault(name, True)
        if subgraphs:
            for name in nested:
                self._write(f"TF_Subgraph_{name}",
                            function_graph_def(functions[name], functions))


class StageCaptureInstrument(PassInstrument):
    """Keeps the pipeline's input (``input``) and the output of ``encapsulate`` (``partitioned``,
    the graph with ``GeOp`` nodes); used by the reports."""

    def __init__(self):
        self.input = None
        self.partitioned = None

    def before_pass(self, index, pass_, graph_def, ctx):
        if self.input is None:
            self.input = graph_def

    def after_pass(self, index, pass_, graph_def, result, ctx):
        if pass_.name == "encapsulate":
            self.partitioned = result.graph_def


class ProgressInstrument(PassInstrument):
    """Calls ``report(message)`` after each pass with its name and wall time."""

    def __init__(self, report):
        self.report = report
        self._start = None

    def before_pass(self, index, pass_, graph_def, ctx):
        self._start = time.perf_counter()

    def after_pass(self, index, pass_, graph_def, result, ctx):
        seconds = time.perf_counter() - self._start
        self.report(f"pass {index:03d} {pass_.name}: {seconds:.2f} s")


def rewrite_dump_instruments(dump_dir, graph_num, environ=None):
    """Instruments ``rewrite`` adds for dumping, with the environment read now.

    * ``dump_dir`` given: every pass's input and output in ``<dump_dir>/graph_<graph_num>/``
      (:class:`PassDumpInstrument`), at the ``DUMP_GE_GRAPH`` content level and the
      ``DUMP_GRAPH_LEVEL`` count level;
    * ``PRINT_MODEL=1``: the original's ``BeforeSubGraph_<n>``/``AfterSubGraph_<n>``/
      ``TF_<GeOp>`` files in ``DUMP_GRAPH_PATH`` or under ``NPU_COLLECT_PATH``
      (:class:`CompatDumpInstrument`).

    Args:
        dump_dir: directory for the per-pass dumps, or None.
        graph_num: the rewrite's graph number (names the run directory and the original's files).
        environ: mapping to read the variables from (default ``os.environ``).

    Raises:
        NpuConfigError: an invalid ``DUMP_GE_GRAPH``, ``DUMP_GRAPH_LEVEL``, ``ASCEND_DEVICE_ID``
            or ``DEVICE_ID``.
    """
    settings = read_dump_settings(environ)
    instruments = []
    if dump_dir:
        instruments.append(PassDumpInstrument(dump_dir, run_name=f"graph_{graph_num}",
                                              content_level=settings.content_level,
                                              count_level=settings.count_level))
    if settings.print_model:
        instruments.append(CompatDumpInstrument(settings, graph_num))
    return instruments
