"""``RewriteResult`` and ``ClusterInfo``: what a rewrite returns besides the GraphDef."""

import dataclasses
import typing

from npu_adapter.pipeline.annotations import get_placement
from npu_adapter.vocabulary import (
    CLUSTER_ATTR,
    CLUSTER_FUNCTION_ATTRS,
    CLUSTER_GEAR_PATTERNS_ATTR,
    CLUSTER_GEARS_ATTR,
    CLUSTER_HOISTED_ATTR,
    CLUSTER_INPUTS_ATTR,
    CLUSTER_NODE_OPS,
    CLUSTER_OUTPUTS_ATTR,
    DEVICE_HOST,
    DEVICE_NPU,
    GEOP_OP,
    KEEP_DTYPE_ATTR,
    NPU_OPTIMIZER_ATTR,
)

__all__ = ["ClusterInfo", "RewriteResult", "clusters_from_graph", "placement_from_graph",
           "placement_from_view"]

@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """One device cluster (one ``GeOp``).

    Attributes:
        name: ``GeOp<N>_<k>``; also the name of its FunctionDef and of its node.
        nodes: names of the original nodes inside, in GraphDef order.
        inputs: original tensor names entering the cluster, in argument order.
        outputs: original tensor names leaving it (or fetched), in output order.
        gears: the gear table when gears were inserted: one entry per gear, each a tuple of
            ``(input tensor name, shape)`` pairs.
        op: the op of the cluster node in the final graph (``GeOp`` before lowering).
        gear_patterns: per dynamic input, ``(tensor name, dims)`` with ``-1`` for the dynamic
            dims (empty without gears).
    """

    def gear_table(self):
        """This cluster's :class:`~npu_adapter.pipeline.gears.GearTable` (None without gears)."""
        if not self.gears:
            return None
        from npu_adapter.pipeline.gears import GearTable

        return GearTable(tuple(name for name, _ in self.gear_patterns),
                         tuple(dims for _, dims in self.gear_patterns),
                         tuple(tuple(shape for _, shape in gear) for gear in self.gears))

    name: str
    nodes: tuple
    inputs: tuple
    outputs: tuple
    gears: tuple = ()
    op: str = GEOP_OP
    gear_patterns: tuple = ()

    @property
    def size(self):
        """Number of original nodes in the cluster."""
        return len(self.nodes)


def _is_cluster_node(node):
    if node.op not in CLUSTER_NODE_OPS:
        return False
    attrs = node.attr
    return NPU_OPTIMIZER_ATTR in attrs and any(k in attrs for k in CLUSTER_FUNCTION_ATTRS)


def _function_of(node):
    for key in CLUSTER_FUNCTION_ATTRS:
        if key in node.attr:
            return node.attr[key].func.name
    return None


def _parse_gear(text):
    """``"data:0:1,20;label:0:1,20"`` → ``(("data:0", (1, 20)), ("label:0", (1, 20)))``."""
    entries = []
    for part in text.split(";"):
        name, _, dims = part.rpartition(":")
        entries.append((name, tuple(int(d) for d in dims.split(",") if d.strip())))
    return tuple(entries)


def clusters_from_graph(graph_def):
    """The :class:`ClusterInfo` of every cluster node of ``graph_def`` (GraphDef order)."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    found = []
    for node in graph_def.node:
        if not _is_cluster_node(node):
            continue
        fname = _function_of(node)
        fdef = functions.get(fname)
        if CLUSTER_GEARS_ATTR in node.attr:
            # With gears the cluster function is a dispatcher; the cluster's own nodes are
            # those of each gear's copy (insert_gears names them <function>_gear_<g>).
            fdef = functions.get(f"{fname}_gear_0", fdef)
        members = ()
        if fdef is not None:
            members = tuple(n.name for n in fdef.node_def if not n.name.endswith("_copied"))
        if CLUSTER_HOISTED_ATTR in node.attr:  # large Consts passed in by the CPU reference
            members += tuple(s.decode() for s in node.attr[CLUSTER_HOISTED_ATTR].list.s)
        gears = ()
        if CLUSTER_GEARS_ATTR in node.attr:
            gears = tuple(_parse_gear(s.decode()) for s in node.attr[CLUSTER_GEARS_ATTR].list.s)
        found.append(ClusterInfo(
            name=node.name,
            nodes=members,
            inputs=tuple(s.decode() for s in node.attr[CLUSTER_INPUTS_ATTR].list.s)
            if CLUSTER_INPUTS_ATTR in node.attr else (),
            outputs=tuple(s.decode() for s in node.attr[CLUSTER_OUTPUTS_ATTR].list.s)
            if CLUSTER_OUTPUTS_ATTR in node.attr else (),
            gears=gears,
            op=node.op,
            gear_patterns=_parse_gear(";".join(
                s.decode() for s in node.attr[CLUSTER_GEAR_PATTERNS_ATTR].list.s))
            if CLUSTER_GEAR_PATTERNS_ATTR in node.attr else (),
        ))
    return found


def placement_from_view(view, default_reason="not_rewritten"):
    """Placement of every node of a clustered (pre-``encapsulate``) graph from the placements
    and cluster names the ``cluster`` pass left in ``view``'s cache; None when they are not
    there (then parse the attributes with :func:`placement_from_graph`)."""
    graph_def = view.graph_def
    placements = view.cache.get(("placements", id(graph_def)))
    clusters = view.cache.get(("clusters", id(graph_def)))
    if placements is None or clusters is None or placements[0] is not graph_def \
            or clusters[0] is not graph_def:
        return None
    _, candidate, reasons = placements
    names = clusters[1]
    nodes = view.nodes
    result = {}
    for i, node in enumerate(nodes):
        cluster = names.get(i)
        entry = {"device": DEVICE_NPU if cluster is not None else DEVICE_HOST,
                 "cluster": cluster, "reason": reasons.get(i, default_reason)}
        if KEEP_DTYPE_ATTR in node.attr:
            entry["keep_dtype"] = True
        result[node.name] = entry
    return result


def placement_from_graph(graph_def, original_names, default_reason="not_rewritten"):
    """Placement of every name of ``original_names`` from an annotated rewritten graph.

    Host nodes carry their annotation in the outer graph; clustered nodes in the body of their
    cluster's function. Returns an ordered dict name → ``{"device", "cluster", "reason"}``.
    """
    functions = {f.signature.name: f for f in graph_def.library.function}
    where = {}
    for node in graph_def.node:
        if _is_cluster_node(node):
            fdef = functions.get(_function_of(node))
            if fdef is None:
                continue
            for body in fdef.node_def:
                placement = get_placement(body)
                reason = placement[1] if placement else "supported"
                entry = {"device": DEVICE_NPU, "cluster": node.name, "reason": reason}
                if KEEP_DTYPE_ATTR in body.attr:
                    entry["keep_dtype"] = True
                where.setdefault(body.name, entry)
            continue
        placement = get_placement(node)
        if placement is not None:
            device, reason = placement
            cluster = node.attr[CLUSTER_ATTR].s.decode() if CLUSTER_ATTR in node.attr else None
            if cluster is None:
                device = DEVICE_HOST
            where[node.name] = {"device": device, "cluster": cluster, "reason": reason}
            if KEEP_DTYPE_ATTR in node.attr:
                # keep_tensors_dtypes / keep_dtype_scope: GE keeps the op's dtype under
                # mixed precision; the CPU reference honours it when emulating precision.
                where[node.name]["keep_dtype"] = True
    result = {}
    for name in original_names:
        result[name] = where.get(name, {"device": DEVICE_HOST, "cluster": None,
                                        "reason": default_reason})
    return result


@dataclasses.dataclass
class RewriteResult:
    """What :func:`npu_adapter.rewrite` returns.

    Attributes:
        graph_def: the rewritten GraphDef (plain TensorFlow with the CPU reference backend).
        clusters: list of :class:`ClusterInfo`, in GraphDef order.
        placement: dict node name → ``{"device": "npu"|"host", "cluster": name|None,
            "reason": code}`` for every node of the (client) graph that was rewritten.
        modified: True when the graph changed.
        skip_reason: why the graph was left untouched (None when it was rewritten).
        tensor_map: original tensor name → tensor name in ``graph_def`` for every fetch and for
            every output of a clustered node that leaves its cluster.
        op_map: original op name → op name in ``graph_def`` for every target and clustered node.
        feed_map: fed tensor → tensor standing for it in ``graph_def``.
        pipeline: canonical text of the pipeline that ran.
        timings: list of ``(pass name, seconds)``.
        pass_info: dict pass name → its ``PassResult.info``.
        aliases: dict user node name → the tensors (or ``^ops``) its alias node in
            ``graph_def`` reads: the nodes that keep fetched, fed and target names valid after
            their nodes moved into clusters (:mod:`npu_adapter.graph.aliases`).
    """

    graph_def: typing.Any
    clusters: list
    placement: dict
    modified: bool
    skip_reason: typing.Any = None
    tensor_map: dict = dataclasses.field(default_factory=dict)
    op_map: dict = dataclasses.field(default_factory=dict)
    feed_map: dict = dataclasses.field(default_factory=dict)
    pipeline: str = ""
    timings: list = dataclasses.field(default_factory=list)
    pass_info: dict = dataclasses.field(default_factory=dict)
    aliases: dict = dataclasses.field(default_factory=dict)

    def cluster(self, name):
        """The :class:`ClusterInfo` called ``name`` (KeyError if none)."""
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(f"no cluster named {name!r}; clusters: {[c.name for c in self.clusters]}")

    def reasons(self):
        """Count of nodes per (device, reason), most frequent first."""
        counts = {}
        for p in self.placement.values():
            key = (p["device"], p["reason"])
            counts[key] = counts.get(key, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
