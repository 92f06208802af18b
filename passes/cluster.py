"""``cluster``: group device candidates into clusters without creating cycles.

Input: a GraphDef annotated by ``mark_candidates`` (and possibly ``in_out_pair``). Output: the same
graph where every member of a cluster carries ``_subgraphs = "GeOp<N>_<k>"`` (the original's
attribute); candidates that end up in no cluster are re-annotated as host with the reason.

Algorithm:

1. Contraction. Every node is a vertex of a :class:`~npu_adapter.graph.cycles.GraphCycles` DAG
   (edges out of ``NextIteration`` are loop back edges and left out; in their place every
   ``Enter`` of a loop is a producer of each of its ``Exit`` nodes). Edges between two
   candidates are contracted, in topological order of their source and repeated to a fixed
   point, whenever no other path joins the two ends — so no cluster can sit on a cycle. With
   lazy_recompile + enable_dp, edges out of an ``IteratorGetNext`` are not contracted (the GetNext
   gets its own cluster).
2. Merging of independent clusters (no path between them in either direction): full-offload mode
   keeps only the largest cluster plus whatever can be merged into it (the others go back to the
   host, ``not_in_largest_cluster``); mix mode (and lazy_recompile) merges greedily, largest
   first, and keeps every cluster.
3. When the largest cluster has one node, lone NoOp/Identity clusters are dropped (original).
4. Our options: ``npu_adapter_min_cluster_size`` drops smaller clusters,
   ``npu_adapter_max_clusters`` keeps only the largest N (pass options ``min_size`` and
   ``max_clusters`` override them).
5. A v1 while loop or cond region split between clusters (or between a cluster and the host) is
   moved wholly to the host and the clustering is redone (functions cannot split them).
6. Mix mode with ``variable_placement=Device`` (``CopyVarsBetweenGeOp``): a ``VariableV2`` or
   ``VarHandleOp`` read through a ref or resource edge by another cluster is copied into that
   cluster; such a read by a node in no cluster is an ``InvalidArgument`` error, as in the
   original. Each variable read that way carries ``_npu_adapter_copied_into`` (the clusters).
7. Members the backend runs outside the cluster's function (``Backend.outside_cluster_reason``:
   on the CPU reference, state owners and ops on ref edges; see ``passes/_outside.py``) carry
   ``_npu_adapter_executes`` = the reason. They stay members: the report shows the original's
   placement and, separately, where they run.

Clusters are numbered by the position of their first node in the GraphDef, so names depend only on
the graph: ``GeOp<graph_num>_0``, ``GeOp<graph_num>_1``, ...
"""

from tensorflow.core.framework import node_def_pb2, types_pb2

from npu_adapter.errors import RewriteError
from npu_adapter.graph.cycles import GraphCycles
from npu_adapter.graph.types import base_type, is_ref_type, op_def_for
from npu_adapter.graph.view import LOOP_BACK_EDGE_OPS
from npu_adapter.pipeline.base import PassBase, PassOption, PassResult
from npu_adapter.pipeline.graph_config import read_graph_config
from npu_adapter.pipeline.registry import register_pass
from npu_adapter.vocabulary import (
    CLUSTER_ATTR,
    COPIED_INTO_ATTR,
    DEVICE_HOST,
    EXECUTES_ATTR,
    PLACEMENT_ATTR,
    SUBGRAPH_MULTI_DIMS_INDEX_ATTR,
)

from . import _rules
from ._common import copy_graph, read_placements
from ._outside import outside_members

__all__ = ["ClusterPass", "cluster_name"]

_NOOP_IDENTITY = ("NoOp", "Identity")
# The variables CopyVarsBetweenGeOp duplicates (the original checks these two op types only).
_COPIED_VARIABLE_OPS = frozenset({"VariableV2", "VarHandleOp"})
_FOREVER = object()  # a refusal that no later merge can lift (the path runs through the host)


class _HostAnnotations:
    """Writes host placement annotations into the output nodes and tells whether any of them
    changed an input node's annotation (``changed``). ``nodes`` and ``out_nodes`` are the
    input's and the output's node fields, indexed by node."""

    def __init__(self, nodes, out_nodes):
        self.nodes = nodes
        self.out_nodes = out_nodes
        self.changed = False
        self._patches = {}  # reason -> (annotation, serialized NodeDef holding only it)

    def set(self, i, reason):
        """Annotate output node ``i`` as host for ``reason``."""
        entry = self._patches.get(reason)
        if entry is None:
            text = f"{DEVICE_HOST}:{reason}".encode()
            patch = node_def_pb2.NodeDef()
            patch.attr[PLACEMENT_ATTR].s = text
            entry = self._patches[reason] = (text, patch.SerializeToString())
        if not self.changed:  # once one changed, the others need not be compared
            before = self.nodes[i].attr.get(PLACEMENT_ATTR)
            self.changed = before is None or before.s != entry[0]
        # Merging the serialized attr replaces it as an assignment would, at half the cost.
        self.out_nodes[i].MergeFromString(entry[1])


def cluster_name(graph_num, k):
    """The name of cluster ``k`` of graph ``graph_num`` (``GeOp<N>_<k>``, as the original)."""
    return f"GeOp{graph_num}_{k}"


class _Condensed:
    """The graph with every phase-1 group as one vertex, in a GraphCycles structure.

    ``cnode[i]`` is node i's vertex; per vertex, ``candidate``, ``label``, ``blocked`` (an edge
    out of it is not contracted), ``preds`` (its producers, in a dict for insertion order) and
    ``order`` (Kahn's order, seeded in the original topological order).
    """

    def __init__(self, order, comp, preds_of, back, no_contract, candidate, labels):
        index_of = {}
        members_of = []
        for i in order:
            r = comp[i]
            if r not in index_of:
                index_of[r] = len(members_of)
                members_of.append(r)
        m = len(members_of)
        self.cnode = cnode = [index_of[r] for r in comp]
        succ_sets = [{} for _ in range(m)]  # (dicts used as sets: see GraphCycles)
        self.preds = preds_c = [{} for _ in range(m)]
        self.blocked = blocked = [False] * m
        for v in range(len(comp)):
            cv = cnode[v]
            if no_contract[v] and not back[v]:
                blocked[cv] = True
            if comp[v] != v:
                continue  # joined in phase 1: every producer is in its own group
            for u in preds_of[v]:
                if back[u]:
                    continue
                cu = cnode[u]
                if cu != cv:
                    succ_sets[cu][cv] = None
                    preds_c[cv][cu] = None
        self.candidate = [candidate[r] for r in members_of]
        self.label = [labels[r] for r in members_of]
        indegree = [len(p) for p in preds_c]
        self.order = c_order = [c for c in range(m) if indegree[c] == 0]
        for c in c_order:
            for d in sorted(succ_sets[c]):  # (one short-lived list at a time)
                indegree[d] -= 1
                if indegree[d] == 0:
                    c_order.append(d)
        rank = [0] * m
        for r_, c in enumerate(c_order):
            rank[c] = r_
        # (The successor sets and the predecessors are the DAG's: no copy of either.)
        self.cycles = GraphCycles.from_edge_sets(rank, succ_sets, [dict(p) for p in preds_c])


class _Clusterer:
    """One clustering attempt over a fixed candidate set."""

    def __init__(self, view, candidate, *, mix, lazy, block_getnext, labels):
        self.view = view
        self.candidate = candidate
        # Nodes of a subgraph_multi_dims_scope carry its index: they form clusters of their own
        # (GE moves the scope into a subgraph), never merged with other nodes.
        self.labels = labels
        self.mix = mix
        self.lazy = lazy
        self.block_getnext = block_getnext

    def run(self):
        """The clusters (lists of node indices, largest first) and the candidates dropped from
        every cluster, with their reasons."""
        view = self.view
        order, remaining = view.topological_order(skip_back_edges=True)
        if remaining:
            cycle = view.find_cycle() or [view.names[i] for i in remaining[:10]]
            raise RewriteError("Input graph has a cycle: " + " -> ".join(cycle),
                               code="Unimplemented")
        preds_of = view.predecessor_table()
        back = [op in LOOP_BACK_EDGE_OPS for op in view.ops]
        into_exits = _loop_exit_edges(view)
        if into_exits:
            preds_of = [preds + into_exits[i] if i in into_exits else preds
                        for i, preds in enumerate(preds_of)]
            order, _ = view.compute_topological_order(predecessors=preds_of)
        # Per node, whether edges out of it are left out of the contraction: edges out of loop
        # back-edge sources are not in the DAG; edges out of an IteratorGetNext are not
        # contracted in lazy_recompile + enable_dp.
        no_contract = [b or (self.block_getnext and op == "IteratorGetNext")
                       for b, op in zip(back, view.ops)]
        comp = self._absorb(order, preds_of, back, no_contract)
        condensed = _Condensed(order, comp, preds_of, back, no_contract, self.candidate,
                               self.labels)
        parent, find = self._contract(condensed)
        return self._clusters(condensed, parent, find)

    def _absorb(self, order, preds_of, back, no_contract):
        """Phase 1, linear: a node whose producers all lie in one and the same group of its own
        kind joins it — candidates with candidates (same scope label), host nodes with host
        nodes (host groups only shrink the graph the cycle checks search; they never become
        clusters). No path can leave a convex group and come back into such a node (its every
        input is inside), so this needs no search; it absorbs chains and trees.

        Returns ``comp``: ``comp[i]`` is the first node of i's group, and it stays flat (no
        chains to follow): a node joins the group of an earlier node, which was visited before
        and, being the first of its group, never joins another group afterwards.
        """
        candidate = self.candidate
        labels = self.labels
        comp = list(range(len(candidate)))
        for dst in order:
            preds = preds_of[dst]
            if not preds:
                continue
            kind = candidate[dst]
            target = None
            for src in preds:
                if back[src]:
                    continue
                if candidate[src] != kind or (kind and (labels[src] != labels[dst]
                                                         or no_contract[src])):
                    target = None
                    break
                r = comp[src]
                if target is None:
                    target = r
                elif r != target:
                    target = None
                    break
            if target is not None:
                comp[dst] = target
        return comp

    def _contract(self, condensed):
        """Phase 2: cycle-checked contraction of the condensed graph's candidate edges, repeated
        to a fixed point. Returns the union-find forest (``parent``) and its ``find``."""
        cycles = condensed.cycles
        c_candidate = condensed.candidate
        c_label = condensed.label
        preds_c = condensed.preds
        m = len(c_candidate)
        parent = list(range(m))

        def find(x):
            r = x
            while parent[r] != r:
                r = parent[r]
            while parent[x] != r:
                parent[x], x = r, parent[x]
            return r

        # A refused contraction A → B (another path A →* B exists) can only succeed later if A or
        # B has grown since (the path may then run inside the merged cluster), so each refusal
        # is remembered with the clusters' versions and not retried while they are unchanged.
        version = [0] * m
        refused = {}
        host = [not c for c in c_candidate]
        # The producers each candidate may contract with do not change between sweeps. Kept as
        # tuples of ints, which the garbage collector stops tracking: one entry per candidate
        # vertex lives through the whole contraction.
        contractible = []
        for dst in condensed.order:
            if c_candidate[dst]:
                label = c_label[dst]
                sources = tuple([src for src in preds_c[dst]
                                 if c_candidate[src] and not condensed.blocked[src]
                                 and c_label[src] == label])
                if sources:
                    contractible.append((dst, sources))
        c_rank = cycles.rank
        c_out = cycles.out
        changed = True
        while changed:
            changed = False
            # Visit each candidate in topological order and try its candidate producers' clusters
            # latest-ranked first: with A → C → dst, merging C and dst first turns the path
            # A → C → dst into the direct edge the next contraction needs (far fewer refusals
            # than trying A first).
            # A candidate whose producers all ended up in its own cluster has nothing left to
            # try in later sweeps (clusters only grow): only the others are visited again.
            unsettled = []
            for entry in contractible:
                dst, sources = entry
                if len(sources) == 2:  # the common case, without a sort
                    x, y = sources
                    if c_rank[x if parent[x] == x else find(x)] < \
                            c_rank[y if parent[y] == y else find(y)]:
                        sources = (y, x)
                elif len(sources) > 2:
                    sources = sorted(sources, key=lambda x: c_rank[find(x)], reverse=True)
                settled = True
                for src in sources:
                    a = src if parent[src] == src else find(src)
                    b = dst if parent[dst] == dst else find(dst)
                    if a == b:
                        continue
                    if b not in c_out[a]:
                        settled = False
                        continue
                    previous = refused.get((a, b))
                    if previous is not None and (previous is _FOREVER
                                                 or previous == (version[a], version[b])):
                        settled = False
                        continue
                    merged = cycles.contract_edge(a, b)
                    if merged is None:
                        refused[(a, b)] = _FOREVER if cycles.blocked_for_good(
                            a, b, host) else (version[a], version[b])
                        settled = False
                        continue
                    parent[b if merged == a else a] = merged
                    version[merged] += 1
                    changed = True
                if not settled:
                    unsettled.append(entry)
            contractible = unsettled
        return parent, find

    def _clusters(self, condensed, parent, find):
        """The candidates grouped by their contracted vertex, largest first, lone NoOp/Identity
        clusters dropped and independent clusters merged."""
        ops = self.view.ops
        candidate = self.candidate
        cnode = condensed.cnode
        groups = {}
        root = [c if parent[c] == c else find(c) for c in range(len(parent))]
        for i in range(len(candidate)):
            if candidate[i]:
                r = root[cnode[i]]
                members = groups.get(r)
                if members is None:
                    groups[r] = [i]
                else:
                    members.append(i)
        # Largest first; ties by first node position (deterministic).
        clusters = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        dropped = {}
        if clusters and len(clusters[0][1]) == 1:
            kept = []
            for rep, members in clusters:
                if ops[members[0]] in _NOOP_IDENTITY:
                    dropped[members[0]] = "singleton_noop_identity"
                else:
                    kept.append((rep, members))
            clusters = kept
        if len(clusters) > 1:
            clusters = self._merge(condensed.cycles, find, parent, clusters, dropped)
        return [members for _, members in clusters], dropped

    def _merge(self, cycles, find, parent, clusters, dropped):
        """Merge clusters with no path between them (the original's MergeSubgraphs*).

        Reachability between clusters is computed once, as bitsets over the contracted graph
        (one sweep in rank order), and kept transitively closed as clusters merge: after D and M
        merge, everything that reached either reaches what either reached. Each mergeability
        test is then two bit tests instead of a graph search.
        """
        k = len(clusters)
        into, out_of = _cluster_reachability(cycles, [rep for rep, _ in clusters])
        full_offload = not self.mix and not self.lazy
        label = [self.labels[members[0]] for _, members in clusters]
        taken = [False] * k
        taken_bits = 0  # the same as a bitset
        result = []
        target_done = False
        for t in range(k):
            if taken[t]:
                continue
            taken[t] = True
            taken_bits |= 1 << t
            if full_offload and label[t] is None and target_done:
                # Full offload keeps one (unlabelled) cluster: the largest mergeable set.
                for i in clusters[t][1]:
                    dropped[i] = "not_in_largest_cluster"
                continue
            group = [t]
            group_bits = 1 << t
            cur_in, cur_out = into[t], out_of[t]
            for m in range(t + 1, k):
                if taken[m] or label[m] != label[t]:
                    continue
                bit = 1 << m
                if cur_in & bit or cur_out & bit:
                    if full_offload and label[t] is None:
                        for i in clusters[m][1]:
                            dropped[i] = "not_in_largest_cluster"
                        taken[m] = True
                        taken_bits |= bit
                    continue
                taken[m] = True
                taken_bits |= bit
                group.append(m)
                group_bits |= bit
                # The original relation is transitively closed, so the union of the rows is the
                # merged node's relation (a path through the merged node must enter or leave it
                # through one of its members).
                cur_in |= into[m]
                cur_out |= out_of[m]
            members = sorted(i for g in group for i in clusters[g][1])
            result.append((clusters[t][0], members))
            if label[t] is None:
                target_done = True
            # Close the relation through the new merged node for the groups still to come (the
            # rows of taken clusters are never read again).
            pending = ~taken_bits
            for x in _bits(cur_in & pending):
                out_of[x] |= cur_out | group_bits
            for y in _bits(cur_out & pending):
                into[y] |= cur_in | group_bits
            for g in group:
                into[g] = cur_in
                out_of[g] = cur_out
        return result


def _bits(mask):
    """Indices of the set bits of ``mask``."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _cluster_reachability(cycles, reps):
    """``(into, out_of)``: per cluster (index into ``reps``), bitsets of the clusters that reach
    it and that it reaches, in the contracted graph (paths through host nodes included)."""
    rank = cycles.rank
    alive = [v for v, a in enumerate(cycles.alive) if a]
    alive.sort(key=rank.__getitem__)
    into = _reach_sweep(alive, cycles.inn, reps, len(rank))
    # The transposed relation by the same sweep backwards over successors (one pass over the
    # vertices instead of one step per pair of related clusters).
    out_of = _reach_sweep(alive[::-1], cycles.out, reps, len(rank))
    return into, out_of


def _reach_sweep(order, neighbours, reps, size):
    """Per cluster, the bitset of clusters reaching it along ``neighbours`` (predecessors when
    ``order`` is topological, successors when it is reversed)."""
    # Per vertex, the clusters that reach it (``reach``) and the same plus its own bit
    # (``passed_on``: what the next vertices inherit from it); lists indexed by vertex id.
    reach = [0] * size
    passed_on = [0] * size
    for k, rep in enumerate(reps):
        passed_on[rep] = 1 << k
    for v in order:
        r = 0
        for p in neighbours[v]:
            r |= passed_on[p]
        if r:
            reach[v] = r
            passed_on[v] |= r
    return [reach[rep] for rep in reps]


def _scope_labels(view):
    """Per node, its ``_subgraph_multi_dims_index`` (None outside any such scope); and whether
    any node carries ``_subgraphs`` already (a stale earlier clustering). One walk for both."""
    labels = [None] * len(view.ops)
    key = SUBGRAPH_MULTI_DIMS_INDEX_ATTR
    stale = False
    for i, node in enumerate(view.graph_def.node):  # (one read per node: no list of them)
        attrs = node.attr
        if key in attrs:
            labels[i] = attrs[key].i
        if not stale and CLUSTER_ATTR in attrs:
            stale = True
    return labels, stale


def _group_split(groups, cluster_of, candidate):
    """Groups (frames / cond regions) whose candidates did not all land in one cluster."""
    broken = []
    for reason, members in groups:
        seen = {cluster_of.get(i, -1) for i in members if candidate[i]}
        if len(seen) > 1:
            broken.append((reason, members))
    return broken


def variable_copies(view, names):
    """``CopyVarsBetweenGeOp``: for each variable read through a ref or resource edge by a
    cluster other than its own, the names of those clusters (in edge order).

    Args:
        view: the GraphView.
        names: node index → cluster name of every clustered node.

    Raises:
        RewriteError: a node in no cluster reads a variable through a ref or resource edge (the
            original's InvalidArgument "... is not in white list").
    """
    copies = {}
    node_names = view.names
    op_types = view.op_types()
    if op_types.isdisjoint(_COPIED_VARIABLE_OPS):
        return copies
    for i in [i for i, op in enumerate(view.ops) if op in _COPIED_VARIABLE_OPS]:
        home = names.get(i)
        for d, slot, _ in view.data_outputs[i]:
            # The consumer's declared input type decides (an Identity reading a ref variable
            # takes a plain value), as in the original.
            t = view.edge_type(d, slot)
            if t is None or not (is_ref_type(t) or base_type(t) == types_pb2.DT_RESOURCE):
                continue
            target = names.get(d)
            if target is None:
                raise RewriteError(
                    f"Ref Tensors (e.g., Variables) output: {node_names[d]} is not in "
                    f"white list (it reads variable {node_names[i]!r} outside every cluster while "
                    "variable_placement is Device; set variable_placement=Host or let it go to "
                    "the device)", code="InvalidArgument", node=node_names[d])
            if target != home:
                targets = copies.setdefault(i, [])
                if target not in targets:
                    targets.append(target)
    return copies


def _loop_exit_edges(view):
    """Per ``Exit`` of a TF1 while loop, the ``Enter`` nodes of its frame, as extra producers.

    Every value that enters a loop can reach every exit of it, but in the acyclic view (back edges
    out of ``NextIteration`` left out) that path often does not exist: a gradient accumulator's
    ``Exit`` depends on what the loop body adds only through its back edge. Without these edges a
    cluster could feed a loop and also consume what leaves it (a cycle through the loop that
    deadlocks the step). TensorFlow's own clustering for XLA lifts the edges into and out of a
    frame onto one node per frame to the same effect.
    """
    frame_of, _, members = _rules.while_frames(view)
    ops = view.ops
    extra = {}
    for f, nodes in members.items():
        enters = tuple(i for i in nodes if ops[i] in _rules.ENTER_OPS and frame_of[i] == f)
        for i in nodes:
            if ops[i] in _rules.EXIT_OPS:
                extra[i] = enters
    return extra


def _ref_tied(view, dropped, cluster_of):
    """The dropped candidates joined to a cluster member by a ref edge, in either direction."""
    # A ref edge leaves an op with a ref output: only edges out of those are looked at.
    ref_ops = {op for op in view.op_types() if _has_ref_output(op)}
    if not dropped or not ref_ops:
        return []
    ops = view.ops
    edge_type = view.edge_type
    tied = []
    for i in sorted(dropped):
        ins = (slot for slot, (src, _) in enumerate(view.data_inputs[i])
               if src in cluster_of and ops[src] in ref_ops)
        outs = ((d, slot) for d, slot, _ in view.data_outputs[i] if d in cluster_of) \
            if ops[i] in ref_ops else ()
        if any(is_ref_type(edge_type(i, slot) or 0) for slot in ins) or \
                any(is_ref_type(edge_type(d, slot) or 0) for d, slot in outs):
            tied.append(i)
    return tied


def _has_ref_output(op_type):
    op_def = op_def_for(op_type)
    return op_def is None or any(arg.is_ref for arg in op_def.output_arg)


def _atomic_groups(view):
    frame_of, parent, members = _rules.while_frames(view)
    groups = []
    # A whole loop nest (outermost frame and every nested frame) is one group.
    outer = {}
    for f in members:
        g = f
        while parent[g]:
            g = parent[g]
        outer.setdefault(g, []).extend(members[f])
    for g in sorted(outer):
        groups.append(("host_while_frame", sorted(outer[g])))
    for region in _rules.cond_regions(view):
        groups.append(("dead_tensor_edge", region))
    return groups


@register_pass
class ClusterPass(PassBase):
    """Contract candidates into cycle-free clusters and name them ``GeOp<N>_<k>``."""

    name = "cluster"
    gated = True
    needs = ("placement",)
    options = {
        "min_size": PassOption(int, 0, "drop clusters smaller than this (0: use the config "
                                       "option npu_adapter_min_cluster_size)"),
        "max_clusters": PassOption(int, -1, "keep at most this many clusters, largest first "
                                            "(-1: use npu_adapter_max_clusters; 0: no limit)"),
    }

    def run(self, graph_def, ctx, view):
        config = ctx.config
        graph_config = read_graph_config(view, config)
        candidate, reasons = read_placements(view)
        initially_candidate = list(candidate)  # (the clustering below moves some to the host)
        mix = bool(config.mix_compile_mode)
        lazy = graph_config.dynamic_input and \
            graph_config.dynamic_graph_execute_mode == "lazy_recompile"
        min_size = self.option("min_size") or int(config.npu_adapter_min_cluster_size)
        max_clusters = self.option("max_clusters")
        if max_clusters < 0:
            max_clusters = int(config.npu_adapter_max_clusters)
        groups = _atomic_groups(view)
        labels, stale = _scope_labels(view)
        ipl = int(config.iterations_per_loop)
        enable_dp = bool(config.enable_data_pre_proc)

        # Each attempt after the first moves at least one more candidate to the host.
        for _attempt in range(sum(candidate) + 1):
            clusterer = _Clusterer(view, candidate, mix=mix, lazy=lazy, labels=labels,
                                   block_getnext=graph_config.is_dynamic_getnext)
            clusters, dropped = clusterer.run()
            if min_size > 1:
                kept = []
                for members in clusters:
                    if len(members) < min_size:
                        dropped.update(dict.fromkeys(members, "below_min_cluster_size"))
                    else:
                        kept.append(members)
                clusters = kept
            if max_clusters > 0 and len(clusters) > max_clusters:
                ranked = sorted(clusters, key=lambda m: (-len(m), m[0]))
                for members in ranked[max_clusters:]:
                    dropped.update(dict.fromkeys(members, "max_clusters_exceeded"))
                clusters = ranked[:max_clusters]
            cluster_of = {i: k for k, members in enumerate(clusters) for i in members}
            broken = _group_split(groups, cluster_of, candidate)
            ref_tied = _ref_tied(view, dropped, cluster_of)
            if not broken and not ref_tied:
                break
            # A loop or cond region would be split: keep it wholly on the host and start over.
            # A dropped candidate tied to a cluster by a ref edge (a ref variable and its update
            # split by full offload's largest cluster) is a host node from now on: the infection
            # below then takes the other end of every ref edge to the host as well, so the
            # variable, its reads and its updates stay together, as ref edges never cross the
            # boundary.
            moved = []
            for reason, members in broken:
                for i in members:
                    if candidate[i]:
                        candidate[i] = False
                        reasons[i] = reason
                        moved.append(i)
            for i in ref_tied:
                if candidate[i]:
                    candidate[i] = False
                    reasons[i] = dropped[i]
                    moved.append(i)
            _rules.infect(view, candidate, reasons, moved, iterations_per_loop=ipl,
                          enable_dp=enable_dp)
            self._release_orphan_consts(view, candidate, reasons)
        else:  # pragma: no cover - each round hosts at least one more group
            raise RewriteError("clustering did not converge", code="Internal")

        clusters.sort(key=lambda members: members[0])
        out = copy_graph(graph_def)
        names = {}
        for k, members in enumerate(clusters):
            name = cluster_name(ctx.graph_num, k)
            for i in members:
                names[i] = name
        copies = {}
        # Several clusters kept (mix mode, or lazy_recompile): each cluster that reads a
        # variable through a ref or resource edge gets its own copy, shared by name.
        if names and (mix or lazy) and config.variable_placement != "Host" and \
                not ctx.backend.keeps_state_on_host:
            copies = variable_copies(view, names)
        outside = outside_members(view, names, ctx.backend, groups) if names else {}
        # Indexed in the repeated field (O(1)) rather than listed: a list would hold a tracked
        # Python object per node through the collections the rewrite triggers.
        out_nodes = out.node
        if stale:  # a stale earlier clustering
            for node in out_nodes:
                for key in (CLUSTER_ATTR, EXECUTES_ATTR, COPIED_INTO_ATTR):
                    if key in node.attr:
                        del node.attr[key]
        # Touch only the nodes that change (indexing a repeated field is O(1)); one serialized
        # attr per cluster, merged in (about half the cost of an assignment from Python).
        for k, members in enumerate(clusters):
            node = node_def_pb2.NodeDef()
            node.attr[CLUSTER_ATTR].s = cluster_name(ctx.graph_num, k).encode()
            patch = node.SerializeToString()
            for i in members:
                out_nodes[i].MergeFromString(patch)
        for i, reason in outside.items():
            out_nodes[i].attr[EXECUTES_ATTR].s = reason.encode()
        for i, targets in copies.items():
            out_nodes[i].attr[COPIED_INTO_ATTR].list.s.extend(t.encode() for t in targets)
        # Without a stale clustering, the output differs from the input exactly when a node
        # joined a cluster (no node had the attr) or a placement annotation changed: known
        # here without comparing two whole graphs.
        host = _HostAnnotations(graph_def.node, out_nodes)
        for i, reason in dropped.items():
            host.set(i, reason)
        for i, was in enumerate(initially_candidate):
            if was and not candidate[i] and i not in dropped:
                host.set(i, reasons[i])
        modified = out != graph_def if stale else bool(names) or host.changed
        return PassResult(out if modified else graph_def, modified, {
            "clusters": [cluster_name(ctx.graph_num, k) for k in range(len(clusters))],
            "sizes": [len(m) for m in clusters],
            "dropped": len(dropped),
            "run_outside": len(outside),
            "copied_variables": len(copies),
        }, view.rebind(out) if modified else None)

    @staticmethod
    def _release_orphan_consts(view, candidate, reasons):
        for i, op in enumerate(view.ops):
            if candidate[i] and op in _rules.CONST_OPS and \
                    not any(candidate[d] for d in view.successors(i)):
                candidate[i] = False
                reasons[i] = "const_without_device_consumer"
