"""Op events of one step, from TensorFlow's own step statistics, and their Chrome trace.

A run with ``RunOptions(trace_level=FULL_TRACE)`` fills ``RunMetadata.step_stats`` with one
record per executed node: name, start (µs since the epoch), duration, thread and a label
``"name = OpType(inputs)"``. Each record is attributed to a cluster or to the host:

* a name with a path segment ``GeOp<N>_<k>`` (or a gear copy ``GeOp<N>_<k>_gear_<g>``) followed
  by more segments is an op of that cluster inlined into the session graph by Grappler
  (``npu_rewrite_1/GeOp1_0/conv1/conv``);
* a name ending in ``GeOp<N>_<k>`` is the cluster's call (the span of the whole cluster when it
  runs as a function);
* a name of a cluster body node, known from the rewritten graphs registered with
  :meth:`ClusterIndex.add_graph`, is an op of that cluster: run by the function runtime, or
  inlined under the user's node name by the session (also under the shadow graph's
  ``npu_rewrite_<N>/`` scope when the rewrite changed it); so is a node TensorFlow's optimiser
  made from one (``<body node>/<suffix>`` or ``<Name>Optimizer/<Stage>_<body node>``);
* ``_SOURCE``/``_SINK``, argument and return-value nodes and the data dump's reporting ops are
  runtime bookkeeping; everything else is a host op.

An event's op type is the graph's: the type of the node of that name in the registered graphs
(the cluster bodies and the graph the session runs; for a node of a function body TensorFlow
inlined under its call, ``<call>/else/_<k>/<node>``, the body node's). TensorFlow's record names
the kernel that ran instead, which with oneDNN is ``_MklMatMul`` or ``_MklNativeConv2D`` for a
MatMul or a Conv2D; only a node no registered graph has (one TensorFlow's optimiser made) takes
the type from the record, with oneDNN's prefix removed (``_MklNativeFusedBatchNormV3`` →
``FusedBatchNormV3``, ``_MklNativeFusedConv2D`` → ``_FusedConv2D``).
"""

import dataclasses
import re

__all__ = ["ClusterIndex", "OpEvent", "chrome_trace", "events_from_step_stats",
           "kernel_op_type"]

_INLINED = re.compile(r"(?:^|.*/)(GeOp\d+_\d+)(?:_gear_\d+)?/(.+)$")
_CALL = re.compile(r"(?:^|.*/)(GeOp\d+_\d+)$")
# "name = Kernel(inputs)", after "[allocator sizes] " when the op allocated memory.
_LABEL = re.compile(r"^(?:\[[^\]]*\]\s*)?\S+ = ([A-Za-z0-9_>.]+)\(")
# A node of a function body that TensorFlow inlined under its call (an If/While branch lowered
# to Switch/Merge, a function call): ``<call>/<branch>/_<k>/<body node>``.
_INLINED_BODY = re.compile(r"^.+/_\d+/([^/].*)$")
_RUNTIME_NAMES = re.compile(r"^(_SOURCE|_SINK)$|^_arg_|^_retval_|_\d+_arg$|_RetVal$")
_DUMP_PREFIX = "npu_adapter_dump/"
_OPTIMIZER_MADE = re.compile(r"^[A-Za-z]+Optimizer/[A-Za-z0-9]+_(.+)$")
# A cluster call inlined under its own node name, e.g. inside a loop body function.
_INLINED_CALL = re.compile(r"(?:^|.*/)(?:Stateful)?PartitionedCall(?:_\d+)?/(.+)$")
# The scope a session's shadow graph imports the changed part of a rewrite under.
_SHADOW_SCOPE = re.compile(r"^npu_rewrite_\d+/(.+)$")

HOST = "host"
CLUSTER_OP = "cluster_op"
CLUSTER_CALL = "cluster_call"
RUNTIME = "runtime"


@dataclasses.dataclass
class OpEvent:
    """One executed node: ``kind`` is ``cluster_op``, ``cluster_call``, ``host`` or
    ``runtime``; ``op`` the original op name (the node name inside its cluster); times in µs."""

    node: str
    op: str
    op_type: str
    kind: str
    cluster: object
    device: str
    thread: int
    start: float
    duration: float

    @property
    def end(self):
        """End time (µs since the epoch)."""
        return self.start + self.duration


class ClusterIndex:
    """Which node names belong to which cluster, and the op type of each node name, from the
    rewritten graphs a session runs."""

    def __init__(self):
        self.body_nodes = {}
        self.op_types = {}
        self.function_op_types = {}   # node name in a function body → its op type

    def add_graph(self, graph_def):
        """Index the cluster functions (``GeOp<N>_<k>`` and gear copies) of ``graph_def``, and
        the op types of every node of the graph and of its functions."""
        for fdef in graph_def.library.function:
            for node in fdef.node_def:
                self.function_op_types.setdefault(node.name, node.op)
            match = re.match(r"^(GeOp\d+_\d+)(?:_gear_\d+)?$", fdef.signature.name)
            if not match:
                continue
            for node in fdef.node_def:
                if not node.name.startswith(_DUMP_PREFIX):
                    self.body_nodes.setdefault(node.name, match.group(1))
                    self.op_types.setdefault(node.name, node.op)
        for node in graph_def.node:
            self.op_types.setdefault(node.name, node.op)
        return self

    def locate(self, name):
        """``(cluster, op name)`` of node ``name``, or None: a body node run by the function
        runtime, a node the optimiser derived from one (``<body node>/<suffix>``,
        ``<Name>Optimizer/<Stage>_<body node>``), or a body node inlined under a call node with
        a generic name (``while/body/_1/StatefulPartitionedCall/<body node>``)."""
        inlined = _INLINED_CALL.match(name)
        if inlined:
            found = self._body_cluster(inlined.group(1))
            return (found, inlined.group(1)) if found else None
        found = self._body_cluster(name)
        if found is None:
            scoped = _SHADOW_SCOPE.match(name)
            if scoped and self._body_cluster(scoped.group(1)) is not None:
                return self._body_cluster(scoped.group(1)), scoped.group(1)
        return (found, name) if found else None

    def _body_cluster(self, name):
        cluster = self.body_nodes.get(name)
        if cluster is not None:
            return cluster
        made = _OPTIMIZER_MADE.match(name)
        if made and made.group(1) in self.body_nodes:
            return self.body_nodes[made.group(1)]
        prefix = name
        while "/" in prefix:
            prefix = prefix.rpartition("/")[0]
            if prefix in self.body_nodes:
                return self.body_nodes[prefix]
        return None


_ONEDNN_PREFIX = re.compile(r"^_Mkl(?:Native)?")


def kernel_op_type(kernel):
    """The TensorFlow op type a kernel name stands for: oneDNN's ``_Mkl<Op>`` and
    ``_MklNative<Op>`` → ``<Op>`` when TensorFlow has such an op (``FusedBatchNormV3``), else
    ``_<Op>`` when it has that (``_MklFusedMatMul`` → ``_FusedMatMul``, TensorFlow's own fused
    op); other names are returned as they are."""
    if not _ONEDNN_PREFIX.match(kernel):
        return kernel
    from npu_adapter.graph.types import op_def_for

    op = _ONEDNN_PREFIX.sub("", kernel)
    for candidate in (op, "_" + op):
        if op_def_for(candidate) is not None:
            return candidate
    return op


def _op_type(node_stats, op, name, index):
    """The graph's op type of the event's node, else the recorded kernel's (see the module
    docstring)."""
    scoped = _SHADOW_SCOPE.match(name)
    known = index.op_types.get(op) or index.op_types.get(name) or (
        index.op_types.get(scoped.group(1)) if scoped else None)
    if not known:
        inlined = _INLINED_BODY.match(name)
        known = index.function_op_types.get(inlined.group(1)) if inlined else None
    if known:
        return known
    match = _LABEL.match(node_stats.timeline_label or "")
    return kernel_op_type(match.group(1)) if match else ""


def events_from_step_stats(step_stats, index=None):
    """The :class:`OpEvent` of every node record of ``step_stats``, sorted by start time."""
    index = index or ClusterIndex()
    events = []
    for device_stats in step_stats.dev_stats:
        for ns in device_stats.node_stats:
            name = ns.node_name
            start = float(ns.all_start_micros)
            duration = float(max(ns.all_end_rel_micros, ns.op_end_rel_micros, 0))
            inlined = _INLINED.match(name)
            call = _CALL.match(name)
            if _RUNTIME_NAMES.search(name) or _DUMP_PREFIX in name:
                kind, cluster, op = RUNTIME, None, name
            elif inlined:
                kind, cluster, op = CLUSTER_OP, inlined.group(1), inlined.group(2)
            elif call:
                kind, cluster, op = CLUSTER_CALL, call.group(1), call.group(1)
            elif index.locate(name) is not None:
                kind = CLUSTER_OP
                cluster, op = index.locate(name)
            else:
                kind, cluster, op = HOST, None, name
            op_type = _op_type(ns, op, name, index)
            events.append(OpEvent(name, op, op_type, kind, cluster, device_stats.device,
                                  int(ns.thread_id), start, duration))
    events.sort(key=lambda e: (e.start, e.node))
    return events


def chrome_trace(events, step, origin=None):
    """The Chrome trace (``chrome://tracing`` / Perfetto JSON) of one step's events.

    Processes: ``Host`` (pid 1) and one per cluster (pid 2, 3, ... in name order); threads are
    TensorFlow's executor threads. Every op is a complete (``X``) event named after the op, with
    its type, cluster and node name in ``args``; each cluster also gets a span event covering
    its ops, and the step one on the host. Times are µs from ``origin`` (default: the step's
    first event).
    """
    useful = [e for e in events if e.kind != RUNTIME]
    origin = min((e.start for e in events), default=0.0) if origin is None else origin
    clusters = sorted({e.cluster for e in useful if e.cluster})
    pids = {None: 1, **{name: 2 + k for k, name in enumerate(clusters)}}
    trace = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Host"}},
             {"ph": "M", "name": "process_sort_index", "pid": 1, "tid": 0,
              "args": {"sort_index": 1}}]
    for name in clusters:
        trace.append({"ph": "M", "name": "process_name", "pid": pids[name], "tid": 0,
                      "args": {"name": f"Cluster {name}"}})
        trace.append({"ph": "M", "name": "process_sort_index", "pid": pids[name], "tid": 0,
                      "args": {"sort_index": pids[name]}})
    threads = set()
    for event in useful:
        pid = pids[event.cluster]
        tid = event.thread + 1
        if (pid, tid) not in threads:
            threads.add((pid, tid))
            trace.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                          "args": {"name": f"executor thread {event.thread}"}})
        trace.append({
            "ph": "X", "name": event.op, "cat": event.kind, "pid": pid, "tid": tid,
            "ts": round(event.start - origin, 3), "dur": round(event.duration, 3),
            "args": {"type": event.op_type, "cluster": event.cluster or "", "node": event.node,
                     "step": step},
        })
    if events:
        end = max(e.end for e in events)
        trace.append({"ph": "X", "name": f"step {step}", "cat": "step", "pid": 1, "tid": 0,
                      "ts": round(min(e.start for e in events) - origin, 3),
                      "dur": round(end - min(e.start for e in events), 3),
                      "args": {"step": step}})
        trace.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 0,
                      "args": {"name": "steps"}})
    for name in clusters:
        mine = [e for e in useful if e.cluster == name]
        start = min(e.start for e in mine)
        trace.append({"ph": "X", "name": name, "cat": "cluster", "pid": pids[name], "tid": 0,
                      "ts": round(start - origin, 3),
                      "dur": round(max(e.end for e in mine) - start, 3),
                      "args": {"ops": sum(e.kind == CLUSTER_OP for e in mine), "step": step}})
        trace.append({"ph": "M", "name": "thread_name", "pid": pids[name], "tid": 0,
                      "args": {"name": "cluster span"}})
    return {"traceEvents": trace, "displayTimeUnit": "ms",
            "otherData": {"producer": "npu-adapter", "step": step}}
