"""``lower``: hand the encapsulated clusters to the backend (``Backend.lower``).

Input: a GraphDef with ``GeOp`` nodes (from ``encapsulate``, possibly with gears). Output: what the
backend makes of them; for the CPU reference, every ``GeOp`` becomes a ``StatefulPartitionedCall``
of the same name calling the same function, so the graph is plain TensorFlow.
"""

from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.pipeline.registry import register_pass
from npu_adapter.pipeline.result import clusters_from_graph
from npu_adapter.vocabulary import GEOP_OP

__all__ = ["LowerPass"]


@register_pass
class LowerPass(PassBase):
    """Let the backend make the cluster nodes executable."""

    name = "lower"

    def run(self, graph_def, ctx, view):
        count = view.ops.count(GEOP_OP)
        if not count:
            return PassResult(graph_def, False, {"clusters": 0})
        backend = ctx.backend
        clusters = clusters_from_graph(graph_def) if backend.lower_reads_clusters else None
        out = backend.lower(graph_def, clusters, ctx)
        return PassResult(out, True, {"backend": backend.name, "clusters": count})
