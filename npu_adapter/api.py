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
from npu_adapter.pipeline.instruments import (
    CaptureInstrument,
    FactsInstrument,
    InputUnchangedInstrument,
    TimingInstrument,
    VerifyInstrument,
)
from npu_adapter.pipeline.result import (
    PlacementParts,
    RewriteResult,
    clusters_from_graph,
    placement_from_graph,
)
from npu_adapter.vocabulary import PREFILTERED_ATTRS

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
        inputs = ("Placeholder", "PlaceholderWithDefault")
        for name, _ in trio.inputs:
            i = view.index.get(name)
            if i is None or view.ops[i] not in inputs:
                placeholders = sorted(view.nodes[j].name for j, op in enumerate(view.ops)
                                      if op in inputs)
                raise RewriteError(
                    f"input_shape names {name!r}, which is not a Placeholder of the graph "
                    f"(dynamic_node_type=1); placeholders: {', '.join(placeholders) or 'none'}",
                    code="InvalidArgument", node=name)
    else:
        count = sum(1 for op in view.ops if op == "IteratorGetNext")
        if count != 1:
            raise RewriteError(f"dynamic_node_type=0 needs exactly one IteratorGetNext, the "
                               f"graph has {count}", code="InvalidArgument")


def _record_absent_attrs(graph_def, view):
    """Let the passes skip their walks for the rare attributes no node of ``graph_def``
    carries (``PREFILTERED_ATTRS``, see GraphView.record_absent_attrs). Serializing costs about
    as much as two such walks, so it is done when the graph's own nodes outnumber those of its
    library (the passes walk the former, the bytes hold both)."""
    if view.graph_def is not graph_def:
        return
    if sum(len(f.node_def) for f in graph_def.library.function) <= len(view.ops):
        view.record_absent_attrs(graph_def.SerializeToString(), PREFILTERED_ATTRS)


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
    for i, node in enumerate(view.nodes):
        if view.data_outputs[i] or view.control_outputs[i]:
            continue
        out_types = view.output_types(i)
        if out_types:
            fetches.extend(f"{node.name}:{p}" for p in range(len(out_types)))
        else:
            targets.append(node.name)
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
    import npu_adapter.passes as passes_pkg
    from npu_adapter.backends import get_backend

    if not isinstance(graph_def, graph_pb2.GraphDef):
        raise TypeError(f"graph_def must be a GraphDef, got {type(graph_def).__name__}")
    npu_config = as_npu_config(config)
    backend_obj = get_backend(backend) if isinstance(backend, str) else backend
    from npu_adapter.pipeline.dump_instruments import rewrite_dump_instruments

    dump_option = "dump_dir" if dump_dir else "npu_adapter_dump_dir"
    dump_dir = dump_dir or getattr(npu_config, "npu_adapter_dump_dir", "") or None
    if dump_dir:
        _check_dump_dir(os.fspath(dump_dir), dump_option)
    dump_instruments = rewrite_dump_instruments(dump_dir, graph_num)
    user_graph, payloads = graph_def, None
    fetches = [normalize_tensor_name(f, "fetch")
               for f in _names(fetches, "fetches", "logits:0")]
    targets = [t[1:] if t.startswith("^") else t for t in _names(targets, "targets", "train_op")]
    feeds = _names(feeds, "feeds", "input:0")
    view = GraphView(graph_def)
    # Whether the constants' sizes are looked at and large data set aside: then the graph the
    # passes see is light enough to serialize for the attribute prefilter below.
    weights_looked_at = not dump_instruments and not instruments
    if weights_looked_at:
        # Nobody looks at the intermediate graphs: the passes run without the constants' data
        # (see graph/payload.py), which is put back into the final graph below (with
        # lazy_weights, when the result's graph_def is first read). Dumps and instruments see
        # the full graphs. The light graph differs from the user's in attribute values only, so
        # the view is shared.
        graph_def, payloads = strip_payloads(graph_def, view=view)
        if payloads is not None:
            view = view.rebind(graph_def)
    user_view = view
    _check_input(graph_def, view)
    _check_gear_inputs(view, npu_config)
    feed_map = {}
    if fetches or targets:
        # Lower ports of partly fetched multi-output nodes are fetched too, so the alias that
        # keeps the node's name (see keep_user_names below) has a value for each port.
        client = extract_client_graph(graph_def, complete_fetch_ports(fetches), targets, feeds,
                                      view=view)
        work = client.graph_def
        feed_map = dict(client.feeds)
        view = client.view
    else:
        if feeds:
            raise GraphError("feeds need fetches or targets (the run signature)")
        work = graph_def
    if view is None:
        view = GraphView(work)  # (the first pass would index it)
    if weights_looked_at:
        _record_absent_attrs(work, view)
    ctx = PassContext(config=npu_config, backend=backend_obj,
                      fetches=tuple(complete_fetch_ports(fetches)),
                      targets=tuple(targets), feeds=tuple(feed_map), graph_num=int(graph_num),
                      op_support=op_support)
    ctx.register_view(work, view)
    timing = TimingInstrument()
    checks = []
    if os.environ.get("NPU_ADAPTER_CHECK_PASSES", "") not in ("", "0"):
        # Debug aid (always on in our tests): verify the graph after every pass and fail any
        # pass that mutates its input or misreports `modified`.
        checks = [VerifyInstrument(check_input=False), InputUnchangedInstrument(),
                  FactsInstrument()]
    # Placement is read from the graph entering `encapsulate`: every node still carries its
    # annotation there (encapsulate drops them from the graph it writes).
    capture = CaptureInstrument(["encapsulate"], stage="before")
    all_instruments = [timing, capture, *checks, *instruments, *dump_instruments]
    manager = passes_pkg.PassManager.from_pipeline(pipeline or passes_pkg.DEFAULT_PIPELINE,
                                                   all_instruments)
    # An extracted client graph is this call's own copy: the first pass may annotate it in
    # place (see PassContext.may_edit).
    outcome = manager.run(work, ctx, owned=work is not graph_def)
    final = outcome.graph_def
    if payloads is not None:
        payloads.restore(final)
    annotated = capture.graphs.get("encapsulate", final)
    skip_reason = None
    for _, result in outcome.results:
        if "skipped" in result.info:
            skip_reason = result.info["skipped"]
            break
    client_names = list(view.names) if view is not None and view.graph_def is work \
        else [n.name for n in work.node]
    report_fetches = fetches or _sink_fetches(GraphView(work))[0]
    placement = placement_parts = None
    annotated_view = ctx.cached_view(annotated) if annotated is not final else None
    if annotated_view is not None and annotated_view.names == client_names:
        # The dict is built when the result's placement is first read (sessions never do).
        placement_parts = PlacementParts.from_view(annotated_view)
    if placement_parts is None:
        placement = placement_from_graph(annotated, client_names)
    clusters = clusters_from_graph(final, ctx.node_ops(final),
                                   (ctx.known_facts(final) or {}).get("body_names"))
    present = set(ctx.node_names(final))
    tensor_map = _tensor_map(present, clusters, report_fetches, feed_map)
    # The whole op map is built when it is first read; the aliases need the targets' only.
    target_ops = _op_map(present, clusters, targets, targets) if targets else {}
    # The user's fetched, fed and target names stay valid in the rewritten graph (aliases).
    final, aliases = keep_user_names(final, graph_def, fetches=report_fetches,
                                     feed_map=feed_map, targets=targets, tensor_map=tensor_map,
                                     op_map=target_ops, present=present, user_view=user_view,
                                     in_place=final is not work and final is not graph_def
                                     and final is not user_graph)
    result = RewriteResult(
        graph_def=final,
        clusters=clusters,
        placement=placement,
        modified=final is not user_graph and final is not graph_def and final != user_graph,
        skip_reason=skip_reason,
        tensor_map=tensor_map,
        feed_map=feed_map,
        pipeline=manager.pipeline_text(),
        timings=list(timing.timings),
        pass_info={name: result.info for name, result in outcome.results},
        aliases=aliases,
    )
    if placement_parts is not None:
        result.with_lazy_placement(placement_parts)
    result.with_lazy_op_map(functools.partial(_op_map, frozenset(present), clusters,
                                              client_names, targets))
    return result
