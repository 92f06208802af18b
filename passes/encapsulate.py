"""``encapsulate``: replace each cluster by one ``GeOp`` node calling a FunctionDef.

Input: a GraphDef whose cluster members carry ``_subgraphs`` (from ``cluster``). Output: for each
cluster ``GeOp<N>_<k>``:

* a FunctionDef of that name in the library. Its body is the cluster's nodes (``_subgraphs``
  removed, every other attr kept, including user scope attrs such as ``_keep_dtype``). Each
  distinct tensor entering the cluster becomes one input arg and each distinct tensor leaving it
  one output, named after the original's ``<src>_<port>_arg`` / ``<src>_<port>_retval``
  (normalised to the FunctionDef name rules) and numbered in the edge order of the graph (nodes in
  GraphDef order, inputs in order). Tensors the run fetches are outputs too. Nodes that must run
  for their effect (sinks of the cluster, run targets, sources of control edges that leave the
  cluster) are control outputs, so the function runtime never prunes them.
* a node named like the function, op ``GeOp``, at the position of the cluster's first node, with
  ``function``, ``Tin``, ``Tout``, ``data_format``, every option as ``_<key>`` string attrs, the
  graph options (``_dynamic_input``, ...) and ``_NpuOptimizer``, as the original stamps them; plus
  ``_npu_adapter_inputs`` / ``_npu_adapter_outputs``: the original tensor names per input/output.
* host consumers are rewired to ``GeOp:<k>``; control edges into the cluster are lifted onto the
  GeOp and control edges out of it leave from the GeOp. The GeOp records in
  ``_npu_adapter_control_inputs`` which body node each lifted control edge came from (at which
  input, from which node), so that a backend that inlines the call gives each body node back its
  own control inputs instead of holding back the whole body (``npu_adapter/graph/inline.py``);
  a backend that runs the call waits for them on the call.

Mix mode only (``CopyConstBetweenGeOp``): a Const that feeds a cluster it is not in is copied into
that cluster as ``<name>_copied``, with a control edge from the original Const to the copy (which
becomes a GeOp-to-GeOp or host-to-GeOp control edge), so constants never cross the boundary.
Variables the ``cluster`` pass copies (``_npu_adapter_copied_into``) go into the body of each
cluster that reads them, same name. A ref tensor crossing the boundary is an ``InvalidArgument``
error, as in the original.

Members the backend runs in the outer graph (``_npu_adapter_executes``, see
``passes/_outside.py``) stay there as ordinary host nodes under their own names, wired to the
cluster through arguments and results; the cluster node lists them in ``_npu_adapter_outer`` and
keeps the original's boundary in ``_npu_adapter_placed_inputs``/``_outputs``. When the rest of
the cluster depends on itself through them (gradients applied outside, then the step's ``group``
NoOp), it is called in steps: the cluster's node is step 0, ``<cluster>_stage<s>`` (with
``_npu_adapter_part_of``) step ``s``. A cluster whose every member runs outside keeps an empty
node and function, so it is still reported.

Colocation constraints (``_class = loc:@x``) that name a node which no longer exists in the same
graph are dropped. Names and order depend only on the input graph, so the output is
byte-identical across runs.
"""


from tensorflow.core.framework import graph_pb2

from npu_adapter.errors import RewriteError
from npu_adapter.graph.names import function_arg_name, parse_input, unique_name
from npu_adapter.graph.types import (
    base_type,
    fixed_output_port_names,
    has_ref_inputs,
    is_ref_type,
    output_port_names,
)
from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.pipeline.graph_config import read_graph_config
from npu_adapter.pipeline.registry import register_pass
from npu_adapter.vocabulary import (
    CLUSTER_ATTR,
    CLUSTER_CONTROL_INPUTS_ATTR,
    CLUSTER_HOISTED_ATTR,
    CLUSTER_INPUTS_ATTR,
    CLUSTER_OUTER_ATTR,
    CLUSTER_OUTPUTS_ATTR,
    CLUSTER_PART_OF_ATTR,
    CLUSTER_PLACED_INPUTS_ATTR,
    CLUSTER_PLACED_OUTPUTS_ATTR,
    COPIED_INTO_ATTR,
    EXECUTES_ATTR,
    GEOP_OP,
    NPU_OPTIMIZER_ATTR,
    PLACEMENT_ATTR,
    STAGE_SUFFIX,
)

from ._outside import member_steps, outside_members
from ._rules import CONST_OPS

__all__ = ["EncapsulatePass", "CLUSTER_INPUTS_ATTR", "CLUSTER_OUTPUTS_ATTR", "function_arg_name"]

_VARIABLE_OPS = ("VariableV2", "VarHandleOp")  # the ones the cluster pass may copy
_BOOKKEEPING = (CLUSTER_ATTR, PLACEMENT_ATTR, EXECUTES_ATTR, COPIED_INTO_ATTR)
_ANNOTATIONS = (CLUSTER_ATTR, PLACEMENT_ATTR)


def _tensor(name, port):
    return f"{name}:{port}"


def _drop_attrs(node, keys):
    for key in keys:
        if key in node.attr:
            del node.attr[key]


def _check_free_name(view, name, cluster_of, existing_functions):
    """A cluster node and function called ``name`` may be created (no other node or function
    of the graph has that name)."""
    if name in existing_functions or (name in view.index and view.index[name] not in cluster_of):
        raise RewriteError(
            f"cannot create cluster {name!r}: the graph already has a function or node of that "
            "name (rewrite with another graph_num)", code="Internal")


def _drop_stale_colocation(node, existing):
    value = node.attr.get("_class")
    if value is None:
        return
    keep = [s for s in value.list.s
            if not s.startswith(b"loc:@") or s[5:].decode() in existing]
    if len(keep) != len(value.list.s):
        if keep:
            del value.list.s[:]
            value.list.s.extend(keep)
        else:
            del node.attr["_class"]


class _Cluster:
    def __init__(self, name):
        self.name = name
        self.members = []          # node indices in GraphDef order
        self.inputs = []           # [(src index, port)] in arg order
        self.input_index = {}      # (src, port) -> arg index
        self.outputs = []          # [(src index, port)] in output order
        self.output_index = {}
        self.control_inputs = []   # outer node names (deduplicated, ordered)
        self.const_copies = {}     # const index -> copy name inside the function (or None)
        self.control_outputs = []  # member indices
        self.var_copies = []       # variables duplicated into this cluster (device-owned state)
        self.hoisted = []          # large member Consts left in the outer graph (read as args)
        self.outer = []            # members the backend runs in the outer graph
        self.outer_copies = []     # variables copied in (mix mode) that run in the outer graph
        self.anchor = None         # first member in the original clustering
        self.part_of = None        # the cluster this step belongs to (steps 1, 2, ...)
        self.placed = None         # (inputs, outputs) of the original's GeOp, when they differ
        self.types_in = None       # base dtypes of the inputs (worked out once)
        self.types_out = None      # base dtypes of the outputs (worked out once)

    @property
    def position(self):
        """Where the cluster's node goes in the GraphDef: at its first member."""
        return self.members[0] if self.members else self.anchor


@register_pass
class EncapsulatePass(PassBase):
    """Turn every ``_subgraphs`` cluster into a ``GeOp`` node and a FunctionDef."""

    name = "encapsulate"
    gated = True
    needs = ("placement",)

    def run(self, graph_def, ctx, view):
        # The NodeDefs are read from the GraphDef one at a time (view.node_at, or walking its
        # node field), never listed (view.nodes): a list would hold one object the garbage
        # collector tracks per node of the graph through every collection the pass triggers.
        cluster_of, outside, copied_into = self._read_clusters(view)
        clusters = {}
        for i, name in cluster_of.items():  # (in GraphDef order)
            cluster = clusters.get(name)
            if cluster is None:  # (not setdefault: that would build a _Cluster per member)
                cluster = clusters[name] = _Cluster(name)
            cluster.members.append(i)
        if not clusters:
            return PassResult(graph_def, False, {"clusters": 0})
        for cluster in clusters.values():
            cluster.anchor = cluster.members[0]
        existing_functions = set(view.functions)
        for name in clusters:
            _check_free_name(view, name, cluster_of, existing_functions)
        config = ctx.config
        graph_config = read_graph_config(view, config)
        mix = bool(config.mix_compile_mode)
        self._place_variable_copies(view, ctx, clusters, cluster_of, outside, copied_into)
        split = {cluster_of[i] for i in outside}
        split.update(c for c, cluster in clusters.items() if cluster.outer_copies)
        if split:
            # The boundary the original's GeOps have (and its ref-edge errors), before the
            # members that run in the outer graph leave the clusters.
            placed = self._placed_boundaries(view, ctx, clusters, cluster_of, mix, split)
            for i in sorted(outside):
                clusters[cluster_of.pop(i)].outer.append(i)
            for cname in split:
                cluster = clusters[cname]
                cluster.placed = placed[cname]
                if cluster.outer:
                    gone = set(cluster.outer)
                    cluster.members = [i for i in cluster.members if i not in gone]
        hoisted = self._hoist_constants(view, ctx, clusters, cluster_of)
        for cname in sorted(split):
            if clusters[cname].outer:
                self._split_steps(view, clusters, cname, cluster_of, existing_functions)
        order = sorted(clusters, key=lambda c: clusters[c].position)

        self._plan_const_copies(view, clusters, cluster_of, mix, hoisted)
        self._plan_io(view, ctx, clusters, cluster_of)
        self._plan_control_outputs(view, ctx, clusters, cluster_of)

        option_attrs = dict(config.to_node_attrs())
        option_attrs.update(graph_config.geop_attrs())
        option_attrs[NPU_OPTIMIZER_ATTR] = "NpuOptimizer"

        out = graph_pb2.GraphDef()
        out.versions.CopyFrom(graph_def.versions)
        out.library.CopyFrom(graph_def.library)
        names = view.names
        remaining_names = None  # (built at the first host node with a colocation)
        # Clusters whose every member runs in the outer graph still get their (empty) node, so
        # the cluster is reported; it stands before the cluster's first node.
        empty_at = {}
        for cname in order:
            if not clusters[cname].members:
                empty_at.setdefault(clusters[cname].position, []).append(cname)
        own_attrs = set(outside) | set(copied_into)
        reads_cluster = _cluster_readers(view, cluster_of)
        emitted = set()
        for i, node in enumerate(graph_def.node):
            if empty_at and i in empty_at:
                for cname in empty_at[i]:
                    self._geop_node(view, clusters, cname, cluster_of, graph_config,
                                    option_attrs, out.node.add())
            cname = cluster_of.get(i)
            if cname is not None:
                if cname not in emitted:
                    emitted.add(cname)
                    self._geop_node(view, clusters, cname, cluster_of, graph_config,
                                    option_attrs, out.node.add())
                continue
            copy = out.node.add()
            copy.CopyFrom(node)
            for key in (PLACEMENT_ATTR, CLUSTER_ATTR):
                if key in copy.attr:
                    del copy.attr[key]  # bookkeeping ends here; the report read it
            if own_attrs and i in own_attrs:
                _drop_attrs(copy, (EXECUTES_ATTR, COPIED_INTO_ATTR))
            if i in reads_cluster:
                self._rewire_host_node(view, node, copy, clusters, cluster_of)
            if "_class" in copy.attr:
                if remaining_names is None:
                    remaining_names = {names[k] for k in range(len(names))
                                       if k not in cluster_of}
                    remaining_names.update(clusters)
                _drop_stale_colocation(copy, remaining_names)
        for cname in order:
            # Built in place: a FunctionDef built apart would be copied whole into the library.
            self._function_def(view, clusters[cname], cluster_of, out.library.function.add(),
                               own_attrs)
        return PassResult(out, True, {
            "clusters": len(clusters),
            "inputs": {c: len(clusters[c].inputs) for c in order},
            "outputs": {c: len(clusters[c].outputs) for c in order},
            "run_outside": len(outside),
        })

    @staticmethod
    def _read_clusters(view):
        """``(cluster_of, outside, copied_into)`` the ``cluster`` pass wrote on the nodes: node
        index → cluster name (in GraphDef order); member index → reason it runs in the outer
        graph; variable index → the clusters that get a copy of it."""
        cluster_of = {}
        outside = {}
        copied_into = {}
        names = {}  # the encoded cluster names, decoded once each
        for i, (node, op) in enumerate(zip(view.graph_def.node, view.ops)):
            attrs = node.attr
            value = attrs.get(CLUSTER_ATTR)
            if value is not None:
                text = value.s
                name = names.get(text)
                if name is None:
                    name = names[text] = text.decode()
                cluster_of[i] = name
                reason = attrs.get(EXECUTES_ATTR)
                if reason is not None:
                    outside[i] = reason.s.decode()
            if op in _VARIABLE_OPS and COPIED_INTO_ATTR in attrs:
                copied_into[i] = [s.decode() for s in attrs[COPIED_INTO_ATTR].list.s]
        return cluster_of, outside, copied_into

    # ------------------------------------------------------------------ planning
    @staticmethod
    def _hoist_constants(view, ctx, clusters, cluster_of):
        """Keep large Consts of clusters in the outer graph, read by the cluster as arguments,
        when the backend asks for it (``Backend.hoist_constants_bytes``; the CPU reference does:
        the session graph already holds the user's weights, and a copy inside every cluster
        function would double the graph's memory and slow the first run). The Const stays a
        member of its cluster in the report. Returns the set of hoisted node indices."""
        threshold = getattr(ctx.backend, "hoist_constants_bytes", None)
        hoisted = set()
        if not threshold:
            return hoisted
        data_inputs, control_inputs = view.data_inputs, view.control_inputs
        # The large clustered Consts without inputs, per cluster in member order (GraphDef
        # order), found from the sizes of the graph's Consts (usually known since the payloads
        # were set aside) rather than from every member.
        consts = {}
        for i, size in view.const_bytes().items():
            if size >= threshold and not data_inputs[i] and not control_inputs[i]:
                cname = cluster_of.get(i)
                if cname is not None:
                    consts.setdefault(cname, []).append(i)
        for cname, cluster in clusters.items():
            big = consts.get(cname)
            if not big or len(big) == len(cluster.members):
                continue  # a cluster of nothing but constants keeps them
            hoisted.update(big)
            cluster.members = [i for i in cluster.members if i not in hoisted]
            cluster.hoisted = big
            for i in big:
                del cluster_of[i]
        return hoisted

    @staticmethod
    def _plan_const_copies(view, clusters, cluster_of, mix, hoisted=frozenset(), consts=None):
        """Mix-compile mode: a Const feeding a cluster from outside is copied into it as
        ``<name>_copied`` (as the original does), except the large Consts the backend keeps in
        the outer graph (``hoisted``): copying them back would undo the hoisting. ``consts``
        limits the Consts looked at (default: every node); only the clusters in ``clusters``
        get copies."""
        if not mix:
            return
        ops = view.ops
        for i in range(len(ops)) if consts is None else consts:
            if ops[i] not in CONST_OPS or i in hoisted:
                continue
            home = cluster_of.get(i)
            for d, _, port in view.data_outputs[i]:
                target = cluster_of.get(d)
                if target is None or target == home or port != 0 or target not in clusters:
                    continue
                copies = clusters[target].const_copies
                if i not in copies:
                    copies[i] = None  # name assigned when the body is built

    @staticmethod
    def _place_variable_copies(view, ctx, clusters, cluster_of, outside, copied_into):
        """``CopyVarsBetweenGeOp`` (planned by ``cluster``): each variable copied into a cluster
        becomes part of that cluster's body — or, when the backend runs the variable in the
        outer graph, is only recorded as a member that runs outside (the cluster reads the
        variable through an argument, or its ref consumers run outside too)."""
        if not copied_into:
            return
        for i, targets in copied_into.items():
            if i in cluster_of:
                runs_outside = i in outside
            else:  # a host variable read by a cluster: ask the backend
                runs_outside = bool(outside_members(view, [i], ctx.backend))
            for target in targets:
                cluster = clusters.get(target)
                if cluster is None:
                    continue
                (cluster.outer_copies if runs_outside else cluster.var_copies).append(i)

    def _placed_boundaries(self, view, ctx, clusters, cluster_of, mix, names):
        """Cluster name → ``(inputs, outputs)`` of the GeOp the original builds (every member
        inside, variables copied in, no constant hoisted), for the clusters ``names``. Raises
        the original's errors for ref tensors crossing their boundary."""
        placed = {}
        members = []
        for name in names:
            cluster = clusters[name]
            twin = _Cluster(name)
            twin.members = list(cluster.members)
            twin.var_copies = list(cluster.var_copies) + list(cluster.outer_copies)
            placed[name] = twin
            members.extend(cluster.members)
        members.sort()
        if mix:  # CopyConstBetweenGeOp: the Consts feeding these clusters from outside
            self._plan_const_copies(view, placed, cluster_of, mix)
        # The results: from every node's inputs (cheaper than collecting the members' consumers
        # first; the other clusters' edges are passed over).
        self._plan_io(view, ctx, placed, cluster_of, dsts=(members, range(len(view.ops))))
        return {name: (twin.inputs, twin.outputs) for name, twin in placed.items()}

    @staticmethod
    def _split_steps(view, clusters, cname, cluster_of, existing_functions):
        """Split the members of ``cname`` that run inside into steps (``passes/_outside.py``):
        step 0 keeps the cluster's name, step ``s`` becomes ``<cname>_stage<s>``."""
        cluster = clusters[cname]
        steps = member_steps(view, cluster.members, cluster.outer, view.topological_rank())
        count = max(steps.values(), default=0) + 1
        if count == 1:
            return
        parts = []
        for s in range(1, count):
            name = f"{cname}{STAGE_SUFFIX}{s}"
            _check_free_name(view, name, cluster_of, existing_functions)
            part = _Cluster(name)
            part.part_of = cname
            parts.append(part)
        kept = []
        for i in cluster.members:
            s = steps[i]
            if s:
                parts[s - 1].members.append(i)
                cluster_of[i] = parts[s - 1].name
            else:
                kept.append(i)
        cluster.members = kept
        for part in parts:
            clusters[part.name] = part

    @staticmethod
    def _plan_io(view, ctx, clusters, cluster_of, dsts=None):
        """Arguments, results and control inputs of ``clusters``. ``dsts``: the (sorted) nodes
        whose inputs to look at for the arguments and for the results (default: every node);
        clusters missing from ``clusters`` are left alone."""
        names = view.names
        every = range(len(names))
        arg_dsts, result_dsts = dsts if dsts is not None else (every, every)
        owner_of = cluster_of.get
        data_inputs = view.data_inputs
        ops = view.ops
        # The op types whose nodes may read a ref: only an input its OpDef declares a ref is a
        # ref edge, so the other edges need no dtype.
        ref_readers = {op for op in view.op_types()
                       if op in view.functions or has_ref_inputs(op)}

        # Per cluster, its control inputs as a set too (the list keeps their order).
        control_seen = {}
        # Inputs: edges entering a cluster, in edge order (consumers in GraphDef order).
        for dst in arg_dsts:
            cname = owner_of(dst)
            if cname is None:
                continue
            cluster = clusters.get(cname)
            if cluster is None:
                continue
            const_copies, var_copies = cluster.const_copies, cluster.var_copies
            ref_inputs = ops[dst] in ref_readers
            for slot, (src, port) in enumerate(data_inputs[dst]):
                if owner_of(src) == cname or src in const_copies or src in var_copies:
                    continue
                t = view.edge_type(dst, slot) if ref_inputs else None
                if t is not None and is_ref_type(t):
                    raise RewriteError(
                        f"Ref Tensors (e.g., Variables) are not supported as args: "
                        f"{names[dst]!r} input {slot} reads {names[src]!r}",
                        code="InvalidArgument", node=names[dst])
                key = (src, port)
                if key not in cluster.input_index:
                    cluster.input_index[key] = len(cluster.inputs)
                    cluster.inputs.append(key)
            for src in view.control_inputs[dst]:
                owner = owner_of(src)
                if owner == cname:
                    continue
                outer = owner if owner is not None else names[src]
                seen = control_seen.get(cname)
                if seen is None:
                    seen = control_seen[cname] = set(cluster.control_inputs)
                if outer not in seen:
                    seen.add(outer)
                    cluster.control_inputs.append(outer)
        # Control edges from the original Const to its copies (CopyConstBetweenGeOp).
        for cname, cluster in clusters.items():
            for const in cluster.const_copies:
                owner = owner_of(const)
                outer = owner if owner is not None else names[const]
                if outer != cname and outer not in cluster.control_inputs:
                    cluster.control_inputs.append(outer)
        # Outputs: edges leaving a cluster, in edge order; then fetched tensors.
        for dst in result_dsts:
            dname = owner_of(dst)
            for slot, (src, port) in enumerate(data_inputs[dst]):
                sname = owner_of(src)
                if sname is None or sname == dname or sname not in clusters:
                    continue
                if dname in clusters and (src in clusters[dname].const_copies
                                          or src in clusters[dname].var_copies):
                    continue
                t = view.edge_type(dst, slot) if ops[dst] in ref_readers else None
                if t is not None and is_ref_type(t):
                    raise RewriteError(
                        f"Ref Tensors (e.g., Variables) are not supported as results: "
                        f"{names[dst]!r} input {slot} needs a ref from {names[src]!r}",
                        code="InvalidArgument", node=names[dst])
                _add_output(clusters[sname], src, port)
        for src, port in _fetched(view, ctx):
            sname = cluster_of.get(src)
            if sname is not None and sname in clusters:
                _add_output(clusters[sname], src, port)

    @staticmethod
    def _plan_control_outputs(view, ctx, clusters, cluster_of):
        targets = set()
        for t in ctx.targets or ():
            name = t[1:] if t.startswith("^") else t
            if name in view.index:
                targets.add(view.index[name])
        data_out, control_out = view.data_outputs, view.control_outputs
        owner = cluster_of.get
        for cname, cluster in clusters.items():
            for i in cluster.members:
                # A member is a control output when a control edge leaves the cluster from it,
                # when it is a sink of the cluster (no data consumer, no control consumer
                # inside), or when the run targets it.
                leaves = inner = False
                for d in control_out[i]:
                    if owner(d) == cname:
                        inner = True
                    else:
                        leaves = True
                if leaves or (not data_out[i] and not inner) or i in targets:
                    cluster.control_outputs.append(i)

    # ------------------------------------------------------------------ building
    def _geop_node(self, view, clusters, cname, cluster_of, graph_config, option_attrs, node):
        """Fill ``node`` (a new, empty NodeDef) as the cluster's node."""
        names = view.names
        cluster = clusters[cname]
        node.name = cluster.name
        node.op = GEOP_OP
        for src, port in cluster.inputs:
            owner = cluster_of.get(src)
            if owner is not None:
                producer = _cluster_ref(clusters, owner, src, port)
                node.input.append(producer)
            else:
                node.input.append(names[src] if port == 0 else f"{names[src]}:{port}")
        for outer in cluster.control_inputs:
            node.input.append("^" + outer)
        if cluster.control_inputs:
            node.attr[CLUSTER_CONTROL_INPUTS_ATTR].list.s.extend(
                " ".join(fields).encode()
                for fields in self._lifted_control_inputs(view, cluster, cluster_of))
        node.attr["function"].func.name = cluster.name
        node.attr["Tin"].list.type.extend(self._input_types(view, cluster))
        node.attr["Tout"].list.type.extend(self._output_types(view, cluster))
        node.attr["data_format"].s = graph_config.data_format.encode()
        for key in sorted(option_attrs):
            if key not in node.attr:  # first writer wins, as in the original
                node.attr[key].s = str(option_attrs[key]).encode()
        node.attr[CLUSTER_INPUTS_ATTR].list.s.extend(
            _tensor(names[s], p).encode() for s, p in cluster.inputs)
        node.attr[CLUSTER_OUTPUTS_ATTR].list.s.extend(
            _tensor(names[s], p).encode() for s, p in cluster.outputs)
        if cluster.hoisted:
            node.attr[CLUSTER_HOISTED_ATTR].list.s.extend(
                names[i].encode() for i in cluster.hoisted)
        outer = sorted(set(cluster.outer) | set(cluster.outer_copies))
        if outer:
            node.attr[CLUSTER_OUTER_ATTR].list.s.extend(names[i].encode() for i in outer)
        if cluster.placed is not None:
            for key, tensors in zip((CLUSTER_PLACED_INPUTS_ATTR, CLUSTER_PLACED_OUTPUTS_ATTR),
                                    cluster.placed):
                node.attr[key].list.SetInParent()  # present even when empty
                node.attr[key].list.s.extend(_tensor(names[s], p).encode()
                                             for s, p in tensors)
        if cluster.part_of is not None:
            node.attr[CLUSTER_PART_OF_ATTR].s = cluster.part_of.encode()
        return node

    @staticmethod
    def _const_copy_names(view, cluster):
        """Const index → name of its copy in ``cluster``'s body (``<name>_copied``, unique
        among the body's names), named once per cluster: the cluster's node and its function
        both name the copies."""
        copies = cluster.const_copies
        if copies and None in copies.values():
            names = view.names
            taken = {names[i] for i in cluster.members}
            taken.update(names[i] for i in cluster.var_copies)
            for const in sorted(copies):
                copies[const] = unique_name(names[const] + "_copied", taken)
        return copies

    def _lifted_control_inputs(self, view, cluster, cluster_of):
        """The control edges lifted onto ``cluster``'s node, one ``(body node, input index,
        control input of the cluster node, node waited for)`` of strings each, in GraphDef
        order: a member's control input from outside the cluster (the body drops it), and the
        control edge from the original Const to each of its copies (mix mode). The cluster node
        waits for the node itself, or for the cluster holding it."""
        names = view.names
        inside = set(cluster.members)
        inside.update(cluster.var_copies)
        copies = self._const_copy_names(view, cluster)
        data_inputs, control_inputs = view.data_inputs, view.control_inputs
        found = []
        for i in cluster.members:
            first = len(data_inputs[i])
            for j, src in enumerate(control_inputs[i]):
                if src < 0 or src in inside or src in copies:
                    continue  # (a dangling name; a node the body holds: the body keeps it)
                outer = cluster_of.get(src, names[src])
                found.append((names[i], str(first + j), outer, names[src]))
        for const in sorted(copies):
            found.append((copies[const], "0", cluster_of.get(const, names[const]), names[const]))
        return found

    @staticmethod
    def _tensor_types(view, cluster, tensors, direction):
        """Base dtypes of ``tensors`` ((node, port) pairs) crossing ``cluster``'s boundary."""
        types = []
        for src, port in tensors:
            out_types = view.output_types(src)
            if out_types is None or port >= len(out_types):
                raise RewriteError(
                    f"cannot tell the dtype of {view.names[src]}:{port}, which {direction} "
                    f"cluster {cluster.name}", code="Internal", node=view.names[src])
            types.append(base_type(out_types[port]))
        return types

    def _input_types(self, view, cluster):
        # Asked for the node and for the function: worked out once (the plan is final then).
        if cluster.types_in is None:
            cluster.types_in = self._tensor_types(view, cluster, cluster.inputs, "enters")
        return cluster.types_in

    def _output_types(self, view, cluster):
        if cluster.types_out is None:
            cluster.types_out = self._tensor_types(view, cluster, cluster.outputs, "leaves")
        return cluster.types_out

    def _rewire_host_node(self, view, node, copy, clusters, cluster_of):
        """Point the inputs of ``copy`` (the output's copy of host ``node``) that read a
        clustered node at its cluster's outputs."""
        inputs = []
        controls = []
        changed = False
        for text in node.input:
            name, port, is_control = parse_input(text)
            src = view.index.get(name, -1)
            owner = cluster_of.get(src)
            if owner is None:
                (controls if is_control else inputs).append(text)
                continue
            changed = True
            if is_control:
                ref = "^" + owner
                if ref not in controls:
                    controls.append(ref)
            else:
                inputs.append(_cluster_ref(clusters, owner, src, port))
        if changed:
            del copy.input[:]
            copy.input.extend(inputs + controls)

    def _function_def(self, view, cluster, cluster_of, fdef, own_attrs):
        """Fill ``fdef`` (a new, empty FunctionDef) as the cluster's function; ``own_attrs``:
        the nodes that may carry bookkeeping attrs besides the placement and the cluster."""
        fdef.signature.name = cluster.name
        fdef.signature.is_stateful = True
        copy_name = self._const_copy_names(view, cluster)
        refs = _BodyRefs(view, cluster, copy_name, self._add_args(view, cluster, fdef))
        body_names = {view.names[i] for i in refs.members}
        body_names.update(copy_name.values())
        for const in sorted(copy_name):
            body = fdef.node_def.add()
            body.CopyFrom(view.node_at(const))
            body.name = copy_name[const]
            del body.input[:]
            _drop_attrs(body, (CLUSTER_ATTR, "_class", PLACEMENT_ATTR))
        for i in sorted(cluster.var_copies) + cluster.members:
            body = fdef.node_def.add()
            body.CopyFrom(view.node_at(i))
            _drop_attrs(body, _BOOKKEEPING if own_attrs and i in own_attrs else _ANNOTATIONS)
            if body.input:
                body.input[:] = refs.inputs(i)
            if "_class" in body.attr:
                _drop_stale_colocation(body, body_names)
        self._add_results(view, cluster, fdef, refs, body_names)

    def _add_args(self, view, cluster, fdef):
        """The function's arguments, one per cluster input; returns ``(src, port)`` -> the
        argument's name."""
        arg_names = set()
        in_types = self._input_types(view, cluster)
        arg_of = {}
        for k, (src, port) in enumerate(cluster.inputs):
            arg = fdef.signature.input_arg.add()
            arg.name = function_arg_name(f"{view.names[src]}_{port}_arg", arg_names)
            arg.type = in_types[k]
            arg_of[(src, port)] = arg.name
        return arg_of

    def _add_results(self, view, cluster, fdef, refs, body_names):
        """The function's results (a ref read through an Identity) and control outputs."""
        names = view.names
        ret_names = set()
        out_types = self._output_types(view, cluster)
        for k, (src, port) in enumerate(cluster.outputs):
            arg = fdef.signature.output_arg.add()
            arg.name = function_arg_name(f"{names[src]}_{port}_retval", ret_names)
            arg.type = out_types[k]
            ref = refs.port_refs(src)[port]
            src_types = view.output_types(src) or ()
            if port < len(src_types) and is_ref_type(src_types[port]):
                # A function cannot return a ref: read it through an Identity, as the original's
                # "<src>_dummyIdentity".
                dummy = fdef.node_def.add()
                dummy.name = unique_name(f"{names[src]}_dummyIdentity", body_names)
                dummy.op = "Identity"
                dummy.input.append(ref)
                dummy.attr["T"].type = out_types[k]
                ref = f"{dummy.name}:output:0"
            fdef.ret[arg.name] = ref
        control_names = set()
        for i in cluster.control_outputs:
            cname = function_arg_name(names[i] + "_control", control_names)
            fdef.signature.control_output.append(cname)
            fdef.control_ret[cname] = names[i]


class _BodyRefs:
    """How a cluster's function body names what its nodes read: a member's output by its
    body-local reference (``node:output_arg:index``), a copied constant by its copy, anything
    else by the function's argument."""

    def __init__(self, view, cluster, copy_name, arg_of):
        self.view = view
        self.cluster = cluster
        self.members = set(cluster.members) | set(cluster.var_copies)
        self.copy_name = copy_name
        self.arg_of = arg_of
        self._port_names = {}

    def port_refs(self, src):
        """The body-local reference of each output port of member ``src`` (built once)."""
        refs = self._port_names.get(src)
        if refs is None:
            view = self.view
            op = view.ops[src]
            # A registered op with a fixed output list: its suffixes come from the OpDef,
            # without reading the NodeDef.
            suffixes = None if op in view.functions or op == GEOP_OP \
                else fixed_output_port_names(op)
            if suffixes is None:
                suffixes = output_port_names(view.node_at(src), view.functions)
            if suffixes is None:
                raise RewriteError(
                    f"cannot map outputs of {op} node {view.names[src]!r} inside cluster "
                    f"{self.cluster.name} (op not registered)", code="Internal",
                    node=view.names[src])
            prefix = view.names[src] + ":"
            refs = self._port_names[src] = [prefix + suffix for suffix in suffixes]
        return refs

    def inputs(self, i):
        """The inputs of member ``i`` in the body, read from the index (data, then control;
        control inputs from outside the cluster are left to the call)."""
        inputs = []
        for src, port in self.view.data_inputs[i]:
            if src in self.members:
                inputs.append(self.port_refs(src)[port])
            elif src in self.copy_name:
                inputs.append(f"{self.copy_name[src]}:output:0")
            else:
                inputs.append(self.arg_of[(src, port)])
        for src in self.view.control_inputs[i]:
            if src in self.members:
                inputs.append("^" + self.view.names[src])
            elif src in self.copy_name:
                inputs.append("^" + self.copy_name[src])
        return inputs


def _cluster_readers(view, cluster_of):
    """The host nodes that read a clustered node (through a data or a control edge): they are
    rewired to the clusters' outputs. Found from whichever side has fewer nodes, the members'
    consumers or the host nodes' inputs."""
    n = len(view.ops)
    if len(cluster_of) <= n - len(cluster_of):
        data_out, control_out = view.data_outputs, view.control_outputs
        found = {d for i in cluster_of for d, _, _ in data_out[i]}
        found.update(d for i in cluster_of for d in control_out[i])
        return {d for d in found if d not in cluster_of}
    data_inputs, control_inputs = view.data_inputs, view.control_inputs
    found = set()
    for i in range(n):
        if i in cluster_of:
            continue
        for src, _ in data_inputs[i]:
            if src in cluster_of:
                found.add(i)
                break
        else:
            for src in control_inputs[i]:
                if src in cluster_of:
                    found.add(i)
                    break
    return found


def _cluster_ref(clusters, cname, src, port):
    """Outer tensor name of a member tensor: ``GeOp<N>_<k>:<output index>``."""
    k = clusters[cname].output_index[(src, port)]
    return cname if k == 0 else f"{cname}:{k}"


def _add_output(cluster, src, port):
    key = (src, port)
    if key not in cluster.output_index:
        cluster.output_index[key] = len(cluster.outputs)
        cluster.outputs.append(key)


def _fetched(view, ctx):
    """(node index, port) of every fetched tensor; without fetches, every output of every sink
    (a node nothing consumes), so a graph rewritten without a run signature keeps its results."""
    found = []
    if ctx.fetches:
        for f in ctx.fetches:
            name, port, _ = parse_input(f)
            if name in view.index:
                found.append((view.index[name], port))
        return found
    for i in range(len(view.ops)):
        if view.data_outputs[i] or view.control_outputs[i]:
            continue
        out_types = view.output_types(i) or ()
        found.extend((i, p) for p in range(len(out_types)))
    return found
