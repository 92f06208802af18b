"""``cluster``: group device candidates into clusters without creating cycles (spec §2.6).

Input: a GraphDef annotated by ``mark_candidates`` (and possibly ``in_out_pair``). Output: the same
graph where every member of a cluster carries ``_subgraphs = "GeOp<N>_<k>"`` (the original's
attribute); candidates that end up in no cluster are re-annotated as host with the reason.

Algorithm:

1. Contraction. Every node is a vertex of a :class:`~npu_adapter.graph.cycles.GraphCycles` DAG
   (edges out of ``NextIteration`` are loop back edges and left out). Edges between two
   candidates are contracted, in topological order of their source and repeated to a fixed
   point, whenever no other path joins the two ends — so no cluster can sit on a cycle. With
   lazy_recompile + enable_dp, edges out of an ``IteratorGetNext`` are not contracted (the GetNext
   gets its own cluster, spec §2.6).
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

Clusters are numbered by the position of their first node in the GraphDef, so names depend only on
the graph: ``GeOp<graph_num>_0``, ``GeOp<graph_num>_1``, ...
"""

from npu_adapter.annotations import CLUSTER_ATTR, set_placement
from npu_adapter.errors import RewriteError
from npu_adapter.graph.cycles import GraphCycles
from npu_adapter.graph.view import LOOP_BACK_EDGE_OPS, GraphView
from npu_adapter.graph_config import read_graph_config
from npu_adapter.pass_base import PassBase, PassOption, PassResult
from npu_adapter.registry import register_pass

from . import _rules
from ._common import copy_graph, read_placements

__all__ = ["ClusterPass", "cluster_name"]

_NOOP_IDENTITY = ("NoOp", "Identity")


def cluster_name(graph_num, k):
    """The name of cluster ``k`` of graph ``graph_num`` (``GeOp<N>_<k>``, as the original)."""
    return f"GeOp{graph_num}_{k}"


class _Clusterer:
    """One clustering attempt over a fixed candidate set."""

    def __init__(self, view, candidate, *, mix, lazy, block_getnext):
        self.view = view
        self.candidate = candidate
        self.mix = mix
        self.lazy = lazy
        self.block_getnext = block_getnext

    def run(self):
        view = self.view
        nodes = view.nodes
        n = len(nodes)
        order, remaining = view.topological_order(skip_back_edges=True)
        if remaining:
            cycle = view.find_cycle() or [nodes[i].name for i in remaining[:10]]
            raise RewriteError("Input graph has a cycle: " + " -> ".join(cycle),
                               code="Unimplemented")
        rank = [0] * n
        for r, i in enumerate(order):
            rank[i] = r
        cycles = GraphCycles(rank)
        for i in order:
            if nodes[i].op in LOOP_BACK_EDGE_OPS:
                continue
            for j in view.successors(i):
                cycles.insert_edge(i, j)

        parent = list(range(n))

        def find(x):
            root = x
            while parent[root] != root:
                root = parent[root]
            while parent[x] != root:
                parent[x], x = root, parent[x]
            return root

        candidate = self.candidate
        changed = True
        while changed:
            changed = False
            for src in order:
                if not candidate[src] or nodes[src].op in LOOP_BACK_EDGE_OPS:
                    continue
                if self.block_getnext and nodes[src].op == "IteratorGetNext":
                    continue
                for dst in view.successors(src):
                    if not candidate[dst]:
                        continue
                    a, b = find(src), find(dst)
                    if a == b or not cycles.has_edge(a, b):
                        continue
                    merged = cycles.contract_edge(a, b)
                    if merged is None:
                        continue
                    parent[b if merged == a else a] = merged
                    changed = True

        groups = {}
        for i in range(n):
            if candidate[i]:
                groups.setdefault(find(i), []).append(i)
        # Largest first; ties by first node position (deterministic).
        clusters = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        dropped = {}
        if clusters and len(clusters[0][1]) == 1:
            kept = []
            for rep, members in clusters:
                if nodes[members[0]].op in _NOOP_IDENTITY:
                    dropped[members[0]] = "singleton_noop_identity"
                else:
                    kept.append((rep, members))
            clusters = kept
        if len(clusters) > 1:
            clusters = self._merge(cycles, find, parent, clusters, dropped)
        return [members for _, members in clusters], dropped

    def _merge(self, cycles, find, parent, clusters, dropped):
        if not self.mix and not self.lazy:
            target, members = clusters[0]
            members = list(members)
            for rep, others in clusters[1:]:
                merged = cycles.merge(target, rep)
                if merged is None:
                    for i in others:
                        dropped[i] = "not_in_largest_cluster"
                    continue
                target = merged
                members.extend(others)
            return [(target, sorted(members))]
        result = []
        taken = [False] * len(clusters)
        for k, (rep, members) in enumerate(clusters):
            if taken[k]:
                continue
            taken[k] = True
            target = rep
            members = list(members)
            for m in range(k + 1, len(clusters)):
                if taken[m]:
                    continue
                merged = cycles.merge(target, clusters[m][0])
                if merged is not None:
                    taken[m] = True
                    target = merged
                    members.extend(clusters[m][1])
            result.append((target, sorted(members)))
        return result


def _group_split(groups, cluster_of, candidate):
    """Groups (frames / cond regions) whose candidates did not all land in one cluster."""
    broken = []
    for reason, members in groups:
        seen = {cluster_of.get(i, -1) for i in members if candidate[i]}
        if len(seen) > 1:
            broken.append((reason, members))
    return broken


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
    options = {
        "min_size": PassOption(int, 0, "drop clusters smaller than this (0: use the config "
                                       "option npu_adapter_min_cluster_size)"),
        "max_clusters": PassOption(int, -1, "keep at most this many clusters, largest first "
                                            "(-1: use npu_adapter_max_clusters; 0: no limit)"),
    }

    def run(self, graph_def, ctx):
        view = GraphView(graph_def)
        config = ctx.get_config()
        graph_config = read_graph_config(view, config)
        if graph_config.skipped:
            return PassResult(graph_def, False, {"skipped": graph_config.skip_reason})
        candidate, reasons = read_placements(view)
        mix = bool(config.mix_compile_mode)
        lazy = graph_config.dynamic_input and \
            graph_config.dynamic_graph_execute_mode == "lazy_recompile"
        min_size = self.option("min_size") or int(config.npu_adapter_min_cluster_size)
        max_clusters = self.option("max_clusters")
        if max_clusters < 0:
            max_clusters = int(config.npu_adapter_max_clusters)
        groups = _atomic_groups(view)
        ipl = int(config.iterations_per_loop)
        enable_dp = bool(config.enable_data_pre_proc)

        for _attempt in range(len(groups) + 1):
            clusterer = _Clusterer(view, candidate, mix=mix, lazy=lazy,
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
            if not broken:
                break
            # A loop or cond region would be split: keep it wholly on the host and start over.
            moved = []
            for reason, members in broken:
                for i in members:
                    if candidate[i]:
                        candidate[i] = False
                        reasons[i] = reason
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
        initially_candidate, _ = read_placements(view)
        for i, node in enumerate(out.node):
            if i in names:
                node.attr[CLUSTER_ATTR].s = names[i].encode()
                continue
            if CLUSTER_ATTR in node.attr:
                del node.attr[CLUSTER_ATTR]
            if i in dropped:
                set_placement(node, "host", dropped[i])
            elif initially_candidate[i] and not candidate[i]:
                set_placement(node, "host", reasons[i])
        modified = out != graph_def
        return PassResult(out if modified else graph_def, modified, {
            "clusters": [cluster_name(ctx.graph_num, k) for k in range(len(clusters))],
            "sizes": [len(m) for m in clusters],
            "dropped": len(dropped),
        })

    @staticmethod
    def _release_orphan_consts(view, candidate, reasons):
        for i, node in enumerate(view.nodes):
            if candidate[i] and node.op in _rules.CONST_OPS and \
                    not any(candidate[d] for d in view.successors(i)):
                candidate[i] = False
                reasons[i] = "const_without_device_consumer"
