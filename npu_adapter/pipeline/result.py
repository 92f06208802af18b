"""``RewriteResult`` and ``ClusterInfo``: what a rewrite returns besides the GraphDef."""

import dataclasses
import typing

from npu_adapter.pipeline.annotations import get_placement
from npu_adapter.vocabulary import (
    CLUSTER_ATTR,
    CLUSTER_BODY_ATTR,
    CLUSTER_FUNCTION_ATTRS,
    CLUSTER_GEAR_PATTERNS_ATTR,
    CLUSTER_GEARS_ATTR,
    CLUSTER_HOISTED_ATTR,
    CLUSTER_INPUTS_ATTR,
    CLUSTER_NODE_OPS,
    CLUSTER_OUTER_ATTR,
    CLUSTER_OUTPUTS_ATTR,
    CLUSTER_PART_OF_ATTR,
    CLUSTER_PLACED_INPUTS_ATTR,
    CLUSTER_PLACED_OUTPUTS_ATTR,
    COPIED_CONST_SUFFIX,
    COPIED_INTO_ATTR,
    DEVICE_HOST,
    DEVICE_NPU,
    EXECUTES_ATTR,
    GEOP_OP,
    KEEP_DTYPE_ATTR,
    NPU_OPTIMIZER_ATTR,
    PRECISION_CAST_MARK,
)

__all__ = ["ClusterInfo", "RewriteResult", "clusters_from_graph", "placement_from_graph"]


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """One device cluster (one ``GeOp``), or one step of a cluster the backend calls in steps.

    The original runs a cluster as one GeOp holding every member. A backend that keeps state
    with the session (the CPU reference) runs some members in the outer graph (``outer_nodes``:
    variables, queues, tables and the ops on ref edges) and, when the rest depends on itself
    through them, calls it in steps: then each further step is a ``ClusterInfo`` of its own
    whose ``part_of`` names the cluster. :meth:`RewriteResult.membership` gives the original's
    membership whatever the backend.

    Attributes:
        name: ``GeOp<N>_<k>`` (``GeOp<N>_<k>_stage<s>`` for step ``s``); also the name of its
            FunctionDef and of its node.
        nodes: names of the original nodes the node's function computes (and the large Consts
            it reads from the outer graph), in GraphDef order.
        inputs: original tensor names entering the node, in argument order.
        outputs: original tensor names leaving it (or fetched), in output order.
        gears: the gear table when gears were inserted: one entry per gear, each a tuple of
            ``(input tensor name, shape)`` pairs.
        op: the op of the cluster node in the final graph (``GeOp`` before lowering).
        gear_patterns: per dynamic input, ``(tensor name, dims)`` with ``-1`` for the dynamic
            dims (empty without gears).
        outer_nodes: members (the original puts them in the GeOp, variables copied in mix mode
            included) that this backend runs in the outer graph, in GraphDef order.
        part_of: for a further step, the name of its cluster (None otherwise).
        placed_inputs, placed_outputs: the boundary of the original's GeOp (every member inside)
            when members run outside, else None (the same as ``inputs``/``outputs``); see
            :attr:`device_inputs`.
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
    outer_nodes: tuple = ()
    part_of: typing.Optional[str] = None
    placed_inputs: typing.Optional[tuple] = None
    placed_outputs: typing.Optional[tuple] = None

    @property
    def size(self):
        """Number of original nodes the node's function computes (see ``nodes``)."""
        return len(self.nodes)

    @property
    def device_inputs(self):
        """Tensors entering the cluster as the original builds its GeOp."""
        return self.inputs if self.placed_inputs is None else self.placed_inputs

    @property
    def device_outputs(self):
        """Tensors leaving the cluster as the original builds its GeOp."""
        return self.outputs if self.placed_outputs is None else self.placed_outputs


def _is_cluster_node(node):
    if node.op not in CLUSTER_NODE_OPS:
        return False
    attrs = node.attr
    return NPU_OPTIMIZER_ATTR in attrs and any(k in attrs for k in CLUSTER_FUNCTION_ATTRS)


def _function_of(node):
    if CLUSTER_BODY_ATTR in node.attr:  # a wrapper calls into a runtime; the body is this one
        return node.attr[CLUSTER_BODY_ATTR].s.decode()
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
            names = [n.name for n in fdef.node_def]  # (each name read once)
            members = tuple(name for name in names if not name.endswith(COPIED_CONST_SUFFIX)
                            and PRECISION_CAST_MARK not in name)
        attrs = node.attr
        if CLUSTER_HOISTED_ATTR in attrs:  # large Consts passed in by the CPU reference
            members += tuple(s.decode() for s in attrs[CLUSTER_HOISTED_ATTR].list.s)
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
            outer_nodes=_strings(attrs, CLUSTER_OUTER_ATTR),
            part_of=attrs[CLUSTER_PART_OF_ATTR].s.decode() if CLUSTER_PART_OF_ATTR in attrs
            else None,
            placed_inputs=_strings(attrs, CLUSTER_PLACED_INPUTS_ATTR)
            if CLUSTER_PLACED_INPUTS_ATTR in attrs else None,
            placed_outputs=_strings(attrs, CLUSTER_PLACED_OUTPUTS_ATTR)
            if CLUSTER_PLACED_OUTPUTS_ATTR in attrs else None,
        ))
    return found


def _strings(attrs, key):
    return tuple(s.decode() for s in attrs[key].list.s) if key in attrs else ()


def _entry(device, cluster, reason, executes=None, copied_into=None):
    """A placement entry: where the original places the node, and where it runs here."""
    entry = {"device": device, "cluster": cluster, "reason": reason,
             "executes": device if executes is None else DEVICE_HOST}
    if executes is not None:
        entry["executes_reason"] = executes
    if copied_into:
        entry["copied_into"] = list(copied_into)
    return entry


def placement_from_graph(graph_def, original_names, default_reason="not_rewritten"):
    """Placement of every name of ``original_names`` from an annotated rewritten graph.

    Host nodes carry their annotation in the outer graph; clustered nodes in the body of their
    cluster's function (or, before ``encapsulate``, ``_subgraphs`` on the node). Returns an
    ordered dict name → ``{"device", "cluster", "reason", "executes"}`` (plus
    ``"executes_reason"`` for a device node that runs in the outer graph on this backend, and
    ``"copied_into"`` for a variable copied into other clusters).
    """
    functions = {f.signature.name: f for f in graph_def.library.function}
    where = {}
    for node in graph_def.node:
        if _is_cluster_node(node):
            fdef = functions.get(_function_of(node))
            if fdef is None:
                continue
            cluster = node.attr[CLUSTER_PART_OF_ATTR].s.decode() \
                if CLUSTER_PART_OF_ATTR in node.attr else node.name
            for body in fdef.node_def:
                placement = get_placement(body)
                reason = placement[1] if placement else "supported"
                entry = _entry(DEVICE_NPU, cluster, reason)
                if KEEP_DTYPE_ATTR in body.attr:
                    entry["keep_dtype"] = True
                where.setdefault(body.name, entry)
            continue
        placement = get_placement(node)
        if placement is not None:
            device, reason = placement
            attrs = node.attr
            cluster = attrs[CLUSTER_ATTR].s.decode() if CLUSTER_ATTR in attrs else None
            if cluster is None:
                device = DEVICE_HOST
            executes = attrs[EXECUTES_ATTR].s.decode() if EXECUTES_ATTR in attrs else None
            where[node.name] = _entry(device, cluster, reason, executes,
                                      _strings(attrs, COPIED_INTO_ATTR))
            if KEEP_DTYPE_ATTR in attrs:
                # keep_tensors_dtypes / keep_dtype_scope: GE keeps the op's dtype under
                # mixed precision; the CPU reference honours it when emulating precision.
                where[node.name]["keep_dtype"] = True
    result = {}
    for name in original_names:
        result[name] = where.get(name) or _entry(DEVICE_HOST, None, default_reason)
    return result


@dataclasses.dataclass
class RewriteResult:
    """What :func:`npu_adapter.rewrite` returns.

    Attributes:
        graph_def: the rewritten GraphDef (plain TensorFlow with the CPU reference backend).
        clusters: list of :class:`ClusterInfo`, in GraphDef order.
        placement: dict node name → ``{"device": "npu"|"host", "cluster": name|None,
            "reason": code, "executes": "npu"|"host"}`` for every node of the (client) graph
            that was rewritten. ``device``, ``cluster`` and ``reason`` are the original's
            placement; ``executes`` is where the node runs on this backend: ``"host"`` with an
            ``"executes_reason"`` for the device nodes it runs in the outer graph (the CPU
            reference keeps variables, their ref-edge ops and other state owners there). A
            variable copied into further clusters (mix mode) has ``"copied_into"``.
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

    def with_lazy_placement(self, build):
        """Build ``placement`` by calling ``build()`` when it is first read, instead of now (a
        100k-node graph's dict of per-node dicts costs a tenth of a second, and sessions never
        read it). Returns ``self``."""
        return self._build_on_read("placement", build)

    def with_lazy_op_map(self, build):
        """Build ``op_map`` by calling ``build()`` when it is first read, instead of now (a
        100k-node graph's map costs a few tens of milliseconds). Returns ``self``."""
        return self._build_on_read("op_map", build)

    def _build_on_read(self, field, build):
        self.__dict__[f"_{field}_build"] = build
        self.__dict__[f"_{field}"] = None
        return self

    def cluster(self, name):
        """The :class:`ClusterInfo` called ``name`` (KeyError if none)."""
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(f"no cluster named {name!r}; clusters: {[c.name for c in self.clusters]}")

    def membership(self):
        """Cluster name → member names as the original places them (every node of its GeOp,
        variables copied into it included, whichever backend ran the rewrite), in GraphDef
        order; each cluster once, however many steps the backend calls it in."""
        order = {name: k for k, name in enumerate(self.placement)}
        groups = {}
        for info in self.clusters:
            names = groups.setdefault(info.part_of or info.name, set())
            names.update(info.nodes)
            names.update(info.outer_nodes)
        # Only the graph's own nodes (not the Identity the original adds before a ref result).
        return {cluster: tuple(sorted((n for n in names if n in order), key=order.__getitem__))
                for cluster, names in groups.items()}

    def reasons(self):
        """Count of nodes per (device, reason), most frequent first."""
        counts = {}
        for p in self.placement.values():
            key = (p["device"], p["reason"])
            counts[key] = counts.get(key, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _built_on_read(field, doc):
    """A property standing for dataclass field ``field`` whose value a builder may make on
    first read (see ``RewriteResult._build_on_read``); setting it drops the builder."""
    value_key, build_key = f"_{field}", f"_{field}_build"

    def get(self):
        build = self.__dict__.get(build_key)
        if build is not None:
            self.__dict__[value_key] = build()
            self.__dict__[build_key] = None
        return self.__dict__[value_key]

    def set_(self, value):
        self.__dict__[value_key] = value
        self.__dict__[build_key] = None

    return property(get, set_, doc=doc)


# ``placement`` and ``op_map`` stay dataclass fields (constructor argument, comparison, repr)
# whose value may be made on first access: each property stands in for the plain attribute.
RewriteResult.placement = _built_on_read(
    "placement", "Node name → placement entry (built on first read).")
RewriteResult.op_map = _built_on_read(
    "op_map", "Original op name → op name in ``graph_def`` (built on first read).")
