"""Run-time half of the CPU reference: clusters are TensorFlow functions the session runs.

Nothing is compiled ahead of TensorFlow: the executable of a cluster is its FunctionDef, which
TensorFlow instantiates on the first run. What the runtime decides is which variant of a
signature a run executes (see :mod:`npu_adapter.backends.runtime`).

A gear the session chose from the fed shapes runs the cluster's shape-polymorphic body, not the
gear's static-shape copy: on the CPU a static shape computes nothing differently, and the body
is the user's own nodes, so a run keeps plain TensorFlow's kernels, rounding and random-op
state whatever the gear (the shape was checked against the gears by the choice). The in-graph
dispatcher, for inputs the session does not see (a dataset) or the ``pad_up`` policy, still
calls the static-shape copies.
"""

from npu_adapter.backends.runtime import BackendRuntime, cluster_function
from npu_adapter.graph.functions import rename_function, unpin_arg_shapes
from npu_adapter.vocabulary import GEAR_FUNCTION_SUFFIX

__all__ = ["CpuReferenceRuntime", "DYNAMIC_SUFFIX"]

DYNAMIC_SUFFIX = "_dynamic"
"""The shape-polymorphic body of cluster ``F`` is ``F_dynamic``."""


class CpuReferenceRuntime(BackendRuntime):
    """Clusters run as TensorFlow functions on the host CPU (status ``"function"``)."""

    def gear_variant(self, gears):
        """Every gear tuple runs the same graph: the clusters' shape-polymorphic bodies."""
        return "dynamic"

    def call_gears(self, graph_def, clusters, chosen):
        """A copy of ``graph_def`` whose gear ``clusters`` call their shape-polymorphic body
        (``<cluster>_dynamic``, made from the first gear's copy) instead of the dispatcher."""
        out = type(graph_def)()
        out.CopyFrom(graph_def)
        functions = {f.signature.name: f for f in out.library.function}
        wanted = set(clusters)
        for node in out.node:
            if node.name not in wanted:
                continue
            key, name = cluster_function(node)
            dynamic = name + DYNAMIC_SUFFIX
            if dynamic not in functions:
                body = unpin_arg_shapes(functions[f"{name}{GEAR_FUNCTION_SUFFIX}0"])
                functions[dynamic] = out.library.function.add()
                functions[dynamic].CopyFrom(rename_function(body, dynamic))
            node.attr[key].func.name = dynamic
        return out
