"""``finalize``: remove the passes' bookkeeping annotations.

Strips ``_npu_adapter_placement`` from every node and from every function body, so the host part of
a rewritten graph is byte-identical to the user's graph (``NpuSession`` relies on that to keep one
copy of every unchanged node). Cluster nodes keep their ``_npu_adapter_inputs``/``_outputs``
attributes (they document the boundary and cost nothing to TensorFlow).
"""

from npu_adapter.pipeline.annotations import strip_annotations
from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.pipeline.registry import register_pass
from npu_adapter.vocabulary import PLACEMENT_ATTR

from ._common import copy_graph

__all__ = ["FinalizePass"]


def _annotated(graph_def):
    if any(PLACEMENT_ATTR in n.attr for n in graph_def.node):
        return True
    return any(PLACEMENT_ATTR in n.attr for f in graph_def.library.function for n in f.node_def)


@register_pass
class FinalizePass(PassBase):
    """Drop the placement annotations (the report reads them before this pass)."""

    name = "finalize"

    def run(self, graph_def, ctx, view):
        if not _annotated(graph_def):
            return PassResult(graph_def, False, {})
        out = copy_graph(graph_def)
        strip_annotations(out.node)
        for fdef in out.library.function:
            strip_annotations(fdef.node_def)
        return PassResult(out, True, {})
