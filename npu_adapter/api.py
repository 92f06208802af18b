"""``rewrite``: partition a GraphDef for a backend, the way the original adapter would.

This is the one entry point the session, the CLI and ``dump_graphs`` share: validate the input,
extract the client graph of the run signature, run the pass pipeline with its instruments, and
describe the result (clusters, placement of every node, tensor mapping).
"""

import functools
import os

from tensorflow.core.framework import graph_pb2

from npu_adapter.errors import GraphError, GraphInvariantError, RewriteError
from npu_adapter.graph.aliases import complete_fetch_ports, keep_user_names
from npu_adapter.graph.extract import extract_client_graph, normalize_tensor_name
from npu_adapter.graph.names import parse_input
from npu_adapter.graph.payload import strip_payloads
from npu_adapter.graph.verify import verify_graph
from npu_adapter.graph.view import GraphView
from npu_adapter.pipeline.base import PassContext
from npu_adapter.pipeline.gears import GRAPH_INPUT_OPS, not_a_graph_input, wrong_getnext_count
from npu_adapter.pipeline.instruments import (
    CaptureInstrument,
    InputUnchangedInstrument,
    TimingInstrument,
    VerifyInstrument,
)
from npu_adapter.pipeline.result import RewriteResult, clusters_from_graph, placement_from_graph

__all__ = ["rewrite", "as_npu_config"]


def as_npu_config(config):
    """Accept an ``NpuConfig``, a ``ConfigProto``, a parameter_map-like dict or None."""
    from npu_adapter.config import NpuConfig

    if config is None:
        return NpuConfig.from_dict({})
    if isinstance(config, NpuConfig):
        return config
    if hasattr(config, "graph_options"):
        return NpuConfig.from_config_proto(config)
    if isinstance(config, dict):
        return NpuConfig.from_dict(config)
    raise TypeError(
        "config must be an NpuConfig, a tf.compat.v1.ConfigProto, a dict of options or None; "
        f"got {type(config).__name__}")


def _check_input(graph_def, view):
    violations = verify_graph(graph_def, view=view, check_ports=True)
    cycles = [v for v in violations if v.kind == "cycle"]
    if cycles:
        # The original reports Unimplemented "Input graph has a cycle" at partition time.
        raise RewriteError("Input graph has a cycle: " + cycles[0].message.split(": ", 1)[-1],
                           code="Unimplemented", node=cycles[0].node)
    if violations:
        raise GraphInvariantError([str(v) for v in violations], context="input graph")


def _check_gear_inputs(view, config):
    """The whole-graph gear inputs ``input_shape`` names are in the user's graph: graph inputs
    (``dynamic_node_type=1``) or its one ``IteratorGetNext`` (``0``). Checked before the run
    signature's client graph is cut out: a signature that does not read them (a variable's
    initialiser) simply has no gears."""
    trio = config.dims_trio() if getattr(config, "present", True) else None
    if trio is None:
        return
    if trio.node_type == 1:
        for name, _ in trio.inputs:
            i = view.index.get(name)
            if i is None or view.ops[i] not in GRAPH_INPUT_OPS:
                raise not_a_graph_input(view, name)
    else:
        count = view.ops.count("IteratorGetNext")
        if count != 1:
            raise wrong_getnext_count(count)


def _names(values, what, example):
    """``values`` (None, one name, or a list/tuple of names, tensors or ops) as a list of str;
    a GraphError names the first element that is not a name."""
    if values is None:
        return []
    if isinstance(values, (str, bytes)) or hasattr(values, "name"):
        values = [values]
    if not isinstance(values, (list, tuple)):
        raise GraphError(f"{what} must be a list of names such as {example!r}, got "
                         f"{type(values).__name__}")
    names = []
    for i, value in enumerate(values):
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif not isinstance(value, str) and isinstance(getattr(value, "name", None), str):
            value = value.name  # a tf.Tensor or tf.Operation
        if not isinstance(value, str) or not value or "\0" in value:
            raise GraphError(f"{what}[{i}] = {value!r} is not a name such as {example!r}")
        names.append(value)
    return names


def _check_dump_dir(path, option):
    """The dump directory exists (or is created now) and is writable, before any pass runs: a
    pass must not fail on it half-way with a message that names neither the option nor the
    path."""
    from npu_adapter.config.files import check_path_text
    from npu_adapter.errors import NpuConfigError

    check_path_text(option, path)
    allowed = "a directory that exists or can be created, with write permission"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise NpuConfigError(option, path, allowed, detail=exc.strerror or str(exc)) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise NpuConfigError(option, path, allowed, detail="no write permission")


def _sink_fetches(view):
    fetches = []
    targets = []
    for i, name in enumerate(view.names):
        if view.data_outputs[i] or view.control_outputs[i]:
            continue
        out_types = view.output_types(i)
        if out_types:
            fetches.extend(f"{name}:{p}" for p in range(len(out_types)))
        else:
            targets.append(name)
    return fetches, targets


def _tensor_map(present, clusters, fetches, feed_map):
    """``RewriteResult.tensor_map``: the outputs of the clusters and the fetches."""
    tensor_map = {}
    for info in clusters:
        for k, name in enumerate(info.outputs):
            tensor_map[name] = info.name if k == 0 else f"{info.name}:{k}"
    for f in fetches:
        node, port, _ = parse_input(f)
        if f in feed_map:
            tensor_map[f] = feed_map[f]  # fetched and fed: the value fed, as TensorFlow gives
        elif f in tensor_map:
            continue
        elif node in present:
            tensor_map[f] = f"{node}:{port}"
    # Values are always "node:port" so they can be fetched as they are.
    return {k: (v if ":" in v else v + ":0") for k, v in tensor_map.items()}


def _op_map(present, clusters, names, targets):
    """``RewriteResult.op_map`` for ``names`` (the client graph's nodes, or the targets only):
    a clustered node maps to its cluster, a node still in the graph to itself."""
    clustered = {}
    for info in clusters:
        clustered.update(dict.fromkeys(info.nodes, info.name))
    cluster_of = clustered.get
    op_map = {name: cluster_of(name, name) for name in names
              if name in clustered or name in present}
    for t in targets:
        if t in clustered:
            op_map[t] = clustered[t]
    return op_map


def rewrite(graph_def, config=None, *, fetches=None, feeds=None, targets=None, backend="cpu",
            dump_dir=None, graph_num=1, pipeline=None, op_support=None, instruments=()):
    """Partition ``graph_def`` for ``backend`` under ``config``.

    Args:
        graph_def: a ``tf.compat.v1.GraphDef`` (never modified).
        config: ``NpuConfig``, ``ConfigProto`` (its ``NpuOptimizer`` entry), a dict of options, or
            None for the defaults with ``NpuOptimizer`` present.
        fetches: tensor names the caller will fetch. With fetches or targets, only their client
            graph is rewritten (as a session run would); without, the whole graph is, and every
            output of a sink node counts as fetched.
        feeds: tensor names the caller will feed (they cut the client graph).
        targets: op names the caller will run.
        backend: backend name or ``Backend`` instance (``"cpu"``: the reference).
        dump_dir: write every pass's input and output graph there (``<NNN>_<pass>_*.pbtxt``);
            defaults to the option ``npu_adapter_dump_dir``.
        graph_num: the ``N`` of ``GeOp<N>_<k>``; give each rewrite imported into one graph its
            own number so function names never clash.
        pipeline: pass pipeline text (default: ``npu_adapter.passes.DEFAULT_PIPELINE``).
        op_support: an ``OpSupportList`` to use instead of the backend's.
        instruments: extra pass instruments.

    Returns:
        A :class:`~npu_adapter.pipeline.result.RewriteResult`.

    Raises:
        NpuConfigError: invalid options. GraphError / GraphInvariantError: a malformed graph or an
        unknown fetch, feed or target. RewriteError: a condition the original rejects (cycle,
        in_out_pair errors, lazy_recompile with loop sinking, ...). Nothing is left half-done:
        the input graph is never modified.
    """
    return _rewrite(graph_def, config, fetches, feeds, targets, backend, dump_dir, graph_num,
                    pipeline, op_support, instruments)


def _rewrite(graph_def, config, fetches, feeds, targets, backend, dump_dir, graph_num, pipeline,
             op_support, instruments):
    from npu_adapter.backends import get_backend
    from npu_adapter.pipeline.dump_instruments import rewrite_dump_instruments

    # Validate: the arguments, then the graph.
    if not isinstance(graph_def, graph_pb2.GraphDef):
        raise TypeError(f"graph_def must be a GraphDef, got {type(graph_def).__name__}")
    npu_config = as_npu_config(config)
    backend_obj = get_backend(backend) if isinstance(backend, str) else backend
    dump_option = "dump_dir" if dump_dir else "npu_adapter_dump_dir"
    dump_dir = dump_dir or getattr(npu_config, "npu_adapter_dump_dir", "") or None
    if dump_dir:
        _check_dump_dir(os.fspath(dump_dir), dump_option)
    dump_instruments = rewrite_dump_instruments(dump_dir, graph_num)
    fetches = [normalize_tensor_name(f, "fetch")
               for f in _names(fetches, "fetches", "logits:0")]
    targets = [t[1:] if t.startswith("^") else t for t in _names(targets, "targets", "train_op")]
    feeds = _names(feeds, "feeds", "input:0")
    # The passes run without the large constants' data (see graph/payload.py), which is put
    # back into the final graph, unless something reads it on the way: a backend whose lower()
    # writes the constants out, or whoever looks at the intermediate graphs (dumps,
    # instruments).
    needs_data = bool(dump_instruments or instruments or backend_obj.needs_constant_data)
    user_view = GraphView(graph_def)
    light, payloads = ((graph_def, None) if needs_data
                       else strip_payloads(graph_def, view=user_view))
    if payloads is not None:
        user_view = user_view.rebind(light)  # (only the Consts' data differ)
    _check_input(light, user_view)
    _check_gear_inputs(user_view, npu_config)

    # Extract the client graph of the run signature.
    work, work_view, feed_map = _client_graph(light, user_view, fetches, targets, feeds)

    # Run the pipeline.
    ctx = PassContext(config=npu_config, backend=backend_obj,
                      fetches=tuple(complete_fetch_ports(fetches)),
                      targets=tuple(targets), feeds=tuple(feed_map), graph_num=int(graph_num),
                      op_support=op_support)
    run = _PipelineRun(pipeline, [*instruments, *dump_instruments])
    outcome = run.manager.run(work, ctx, view=work_view)  # (the index extraction made)

    # Describe the result.
    final = outcome.graph_def
    if payloads is not None:
        payloads.restore(final)  # (a graph of this call's: the light input or the passes')
    return _describe(outcome, run, user_graph=graph_def, light=light, user_view=user_view,
                     work=work, work_view=work_view, fetches=fetches, targets=targets,
                     feed_map=feed_map, own_final=not instruments)


def _client_graph(graph_def, view, fetches, targets, feeds):
    """``(work, work_view, feed_map)``: the client graph of the run signature, its index when
    extraction made one (or ``view`` itself for the whole graph), and the fed tensors."""
    if fetches or targets:
        # Lower ports of partly fetched multi-output nodes are fetched too, so the alias that
        # keeps the node's name (see keep_user_names) has a value for each port.
        client = extract_client_graph(graph_def, complete_fetch_ports(fetches), targets, feeds,
                                      view=view)
        return client.graph_def, client.view, dict(client.feeds)
    if feeds:
        raise GraphError("feeds need fetches or targets (the run signature)")
    return graph_def, view, {}


class _PipelineRun:
    """The pass manager of one rewrite with the instruments ``rewrite`` adds: timing, the capture
    of the graph entering ``encapsulate`` (where every node still carries its placement) and,
    with ``NPU_ADAPTER_CHECK_PASSES``, the checks of every pass (always on in our tests)."""

    def __init__(self, pipeline, extra):
        import npu_adapter.passes as passes_pkg

        self.timing = TimingInstrument()
        self.capture = CaptureInstrument(["encapsulate"], stage="before")
        checks = []
        if os.environ.get("NPU_ADAPTER_CHECK_PASSES", "") not in ("", "0"):
            checks = [VerifyInstrument(check_input=False), InputUnchangedInstrument()]
        self.manager = passes_pkg.PassManager.from_pipeline(
            pipeline or passes_pkg.DEFAULT_PIPELINE, [self.timing, self.capture, *checks, *extra])


def _describe(outcome, run, *, user_graph, light, user_view, work, work_view, fetches, targets,
              feed_map, own_final):
    """The :class:`RewriteResult` of a pipeline run: clusters, maps and the aliases that keep the
    user's names, read from the final graph; the placement from the annotated one."""
    final = outcome.graph_def
    client_names = work_view.names if work_view is not None else [n.name for n in work.node]
    report_fetches = fetches or _sink_fetches(work_view or GraphView(work))[0]
    clusters = clusters_from_graph(final)
    present = {node.name for node in final.node}
    tensor_map = _tensor_map(present, clusters, report_fetches, feed_map)
    # The whole op map is built when it is first read; the aliases need the targets' only.
    target_ops = _op_map(present, clusters, targets, targets) if targets else {}
    annotated = run.capture.graphs.get("encapsulate", final)
    placement = None
    if annotated is final:  # (no encapsulate ran: read it before the aliases are added)
        placement = placement_from_graph(annotated, client_names)
    # The user's fetched, fed and target names stay valid in the rewritten graph (aliases),
    # added in place to a graph the passes made and no instrument saw.
    final, aliases = keep_user_names(
        final, light, fetches=report_fetches, feed_map=feed_map, targets=targets,
        tensor_map=tensor_map, op_map=target_ops, present=present, user_view=user_view,
        in_place=own_final and final is not work and final is not light
        and final is not user_graph)
    result = RewriteResult(
        graph_def=final,
        clusters=clusters,
        placement=placement,
        modified=final is not user_graph and final is not light and final != user_graph,
        skip_reason=next((r.info["skipped"] for _, r in outcome.results
                          if "skipped" in r.info), None),
        tensor_map=tensor_map,
        feed_map=feed_map,
        pipeline=run.manager.pipeline_text(),
        timings=list(run.timing.timings),
        pass_info={name: r.info for name, r in outcome.results},
        aliases=aliases,
    )
    if placement is None:
        # Built when first read (sessions never read it) from the annotated graph, which no
        # pass or instrument changes.
        result.with_lazy_placement(functools.partial(placement_from_graph, annotated,
                                                     client_names))
    return result.with_lazy_op_map(functools.partial(_op_map, frozenset(present), clusters,
                                                     client_names, targets))
