"""``rewrite``: partition a GraphDef for a backend, the way the original adapter would.

This is the one entry point the session, the CLI and ``dump_graphs`` share: validate the input,
extract the client graph of the run signature, run the pass pipeline with its instruments, and
describe the result (clusters, placement of every node, tensor mapping).
"""

import functools
import os

from tensorflow.core.framework import graph_pb2

from npu_adapter.collector import collector_paused
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
        if f in tensor_map:
            continue
        if node in present:
            tensor_map[f] = f"{node}:{port}"
        elif f in feed_map:
            tensor_map[f] = feed_map[f]  # fetched and fed: the value fed
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
            dump_dir=None, graph_num=1, pipeline=None, op_support=None, instruments=(),
            use_cache=False, lazy_weights=False, derive=None):
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
        use_cache: reuse an earlier identical rewrite of this process and remember this one
            (see :mod:`npu_adapter.pipeline.rewrite_cache`; sessions do); never with dumps or
            instruments, which must watch the passes run.
        lazy_weights: return the rewritten graph without the large constants' data while
            nobody reads ``graph_def`` (see ``RewriteResult.light_parts``): sessions take the
            weights from the user's graph and skip a copy of them.
        derive: a function of the new result returning a dict of JSON values, stored as its
            ``derived`` before it is cached; a result from a cache brings what was derived
            then (not called again, so it must depend only on what the cache key covers).

    Returns:
        A :class:`~npu_adapter.pipeline.result.RewriteResult`.

    Raises:
        NpuConfigError: invalid options. GraphError / GraphInvariantError: a malformed graph or an
        unknown fetch, feed or target. RewriteError: a condition the original rejects (cycle,
        in_out_pair errors, lazy_recompile with loop sinking, ...). Nothing is left half-done:
        the input graph is never modified.
    """
    with collector_paused():
        return _rewrite(graph_def, config, fetches, feeds, targets, backend, dump_dir, graph_num,
                        pipeline, op_support, instruments, use_cache, lazy_weights, derive)


def _rewrite(graph_def, config, fetches, feeds, targets, backend, dump_dir, graph_num, pipeline,
             op_support, instruments, use_cache, lazy_weights, derive):
    import npu_adapter.passes as passes_pkg
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
    user_graph, payloads = graph_def, None
    # Whether anybody looks at the intermediate graphs (dumps, instruments). When nobody does,
    # the passes run without the large constants' data (see graph/payload.py), which is put
    # back into the final graph (with lazy_weights, when the result's graph_def is first read).
    watched = bool(dump_instruments or instruments)
    view = GraphView(graph_def)
    if not watched:
        graph_def, payloads = strip_payloads(graph_def, view=view)
        if payloads is not None:
            view = view.rebind(graph_def)  # (only the Consts' data differ)
    _check_input(graph_def, view)

    # Extract the client graph of the run signature.
    user_view, feed_map = view, {}
    if fetches or targets:
        # Lower ports of partly fetched multi-output nodes are fetched too, so the alias that
        # keeps the node's name (see keep_user_names below) has a value for each port.
        client = extract_client_graph(graph_def, complete_fetch_ports(fetches), targets, feeds,
                                      view=view)
        work, feed_map, view = client.graph_def, dict(client.feeds), client.view
    elif feeds:
        raise GraphError("feeds need fetches or targets (the run signature)")
    else:
        work = graph_def

    cache_key = disk = None
    if use_cache and not watched:
        from npu_adapter.pipeline import rewrite_cache

        cache_key = rewrite_cache.rewrite_key(
            work, fetches=fetches, targets=targets, feeds=sorted(feed_map), config=npu_config,
            backend=backend_obj, graph_num=graph_num, pipeline=pipeline,
            op_support=op_support if op_support is not None
            else backend_obj.op_support(npu_config))
        hit = rewrite_cache.MEMORY.get(cache_key)
        # Only backends whose rewritten graphs hold nothing process-bound share them on disk
        # (the CANN lowering registers a callback token per cluster in this process).
        if hit is None and getattr(backend_obj, "portable_rewrites", False):
            disk = rewrite_cache.disk_cache(npu_config)
            hit = disk.get(cache_key) if disk is not None else None
            if hit is not None:
                rewrite_cache.MEMORY.put(cache_key, *hit)
        if hit is not None:
            light, result = hit
            if payloads is None:
                result.graph_def = light
            elif lazy_weights:
                result.with_light_graph(light, payloads)
            else:
                result.graph_def = payloads.restore(light)
            return result

    # Run the pipeline.
    ctx = PassContext(config=npu_config, backend=backend_obj,
                      fetches=tuple(complete_fetch_ports(fetches)),
                      targets=tuple(targets), feeds=tuple(feed_map), graph_num=int(graph_num),
                      op_support=op_support)
    timing = TimingInstrument()
    checks = []
    if os.environ.get("NPU_ADAPTER_CHECK_PASSES", "") not in ("", "0"):
        # Debug aid (always on in our tests): verify the graph after every pass and fail any
        # pass that mutates its input or misreports `modified`.
        checks = [VerifyInstrument(check_input=False), InputUnchangedInstrument()]
    # Placement is read from the graph entering `encapsulate`: every node still carries its
    # annotation there (encapsulate drops them from the graph it writes).
    capture = CaptureInstrument(["encapsulate"], stage="before")
    manager = passes_pkg.PassManager.from_pipeline(
        pipeline or passes_pkg.DEFAULT_PIPELINE,
        [timing, capture, *checks, *instruments, *dump_instruments])
    work_view = view if view is not None and view.graph_def is work else None
    outcome = manager.run(work, ctx, work_view)  # (the index extraction made, not made again)

    # Describe the result.
    final = outcome.graph_def
    lazy = lazy_weights and payloads is not None
    light = None
    if cache_key is not None and not lazy:
        light = type(final)()
        light.CopyFrom(final)  # the restore below fills the weights in place
    if payloads is not None and not lazy:
        payloads.restore(final)  # (a graph of this call's: the light input or the passes')
    client_names = work_view.names if work_view is not None else [n.name for n in work.node]
    report_fetches = fetches or _sink_fetches(work_view or GraphView(work))[0]
    clusters = clusters_from_graph(final)
    present = {node.name for node in final.node}
    tensor_map = _tensor_map(present, clusters, report_fetches, feed_map)
    # The whole op map is built when it is first read; the aliases need the targets' only.
    target_ops = _op_map(present, clusters, targets, targets) if targets else {}
    # The user's fetched, fed and target names stay valid in the rewritten graph (aliases).
    annotated = capture.graphs.get("encapsulate", final)
    placement = None
    if annotated is final:  # (no encapsulate ran: read it before the aliases are added)
        placement = placement_from_graph(annotated, client_names)
    final, aliases = keep_user_names(final, graph_def, fetches=report_fetches,
                                     feed_map=feed_map, targets=targets, tensor_map=tensor_map,
                                     op_map=target_ops, present=present, user_view=user_view,
                                     # (a graph the passes made that no instrument saw)
                                     in_place=final is not work and final is not graph_def
                                     and final is not user_graph and not instruments)
    if light is not None and aliases:
        # The cached light copy was taken before the aliases were added: give it the same nodes.
        light.node.extend(node for node in final.node if node.name in aliases)
    result = RewriteResult(
        graph_def=final,
        clusters=clusters,
        placement=placement,
        # (A light final graph compares with the light input, their weights being the same.)
        modified=final is not user_graph and final is not graph_def
        and final != (graph_def if lazy else user_graph),
        skip_reason=next((r.info["skipped"] for _, r in outcome.results
                          if "skipped" in r.info), None),
        tensor_map=tensor_map,
        feed_map=feed_map,
        pipeline=manager.pipeline_text(),
        timings=list(timing.timings),
        pass_info={name: r.info for name, r in outcome.results},
        aliases=aliases,
    )
    if placement is None:
        # Built when first read (sessions never read it) from the annotated graph, which no
        # pass or instrument changes.
        result.with_lazy_placement(functools.partial(placement_from_graph, annotated,
                                                     client_names))
    result.with_lazy_op_map(functools.partial(_op_map, frozenset(present), clusters,
                                              client_names, targets))
    if lazy:
        result.with_light_graph(final, payloads)
        light = final  # the cache copies it
    if derive is not None:
        result.derived.update(derive(result))
    if cache_key is not None:
        from npu_adapter.pipeline import rewrite_cache

        rewrite_cache.MEMORY.put(cache_key, light, result)
        if disk is not None:
            disk.put(cache_key, light, result)
    return result

