"""Run-time half of the CPU reference: clusters are TensorFlow functions the session runs.

Nothing is compiled ahead of TensorFlow: the executable of a cluster is its FunctionDef, which
TensorFlow instantiates on the first run. What the runtime decides is which variant of a
signature a run executes (see :mod:`npu_adapter.backends.runtime`).

Every gear of a cluster runs the cluster's one shape-polymorphic body (the user's own nodes,
:mod:`npu_adapter.backends.cpu.gears`): on the CPU a static shape computes nothing differently,
so a run keeps plain TensorFlow's kernels, rounding and random-op state whatever the gear. A
gear the session chose from the fed shapes calls the body directly (the choice checked the
shapes against the gears); inputs the session does not see (a dataset), the ``pad_up`` policy
and shapes in no gear go through the in-graph dispatcher, whose checks run before the body.
"""

from npu_adapter.backends.cpu.gears import body_name
from npu_adapter.backends.runtime import BackendRuntime, cluster_function

__all__ = ["CpuReferenceRuntime"]


class CpuReferenceRuntime(BackendRuntime):
    """Clusters run as TensorFlow functions on the host CPU (status ``"function"``)."""

    def gear_variant(self, gears):
        """Every gear tuple runs the same graph: the clusters' shape-polymorphic bodies."""
        return "body"

    def call_gears(self, graph_def, clusters, chosen):
        """A copy of ``graph_def`` whose gear ``clusters`` call their shape-polymorphic body
        (:func:`~npu_adapter.backends.cpu.gears.body_name`) instead of the dispatcher."""
        out = type(graph_def)()
        out.CopyFrom(graph_def)
        wanted = set(clusters)
        for node in out.node:
            if node.name in wanted:
                key, name = cluster_function(node)
                node.attr[key].func.name = body_name(name)
        return out
