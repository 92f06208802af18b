"""The CPU reference backend: clusters run as TensorFlow functions on the host CPU.

It partitions exactly as an Ascend device would be targeted (same op list, same rules, variables
and their reads and updates in the clusters under ``variable_placement=Device``), so the placement
report and the cluster layout are the ones the user gets on the NPU; then every ``GeOp`` is
lowered to a ``StatefulPartitionedCall`` of the cluster's FunctionDef. The result is a plain
TensorFlow graph that computes the same numbers as the original graph, bit for bit.

As in the original, a training step is one cluster, its variables included: a TF1 ``VariableV2``
and the ops on its ref edges (``Assign``, ``Apply*``, ``Scatter*``) run inside the cluster
function, where ref edges are allowed (only a function's arguments and results cannot be refs).
State stays the session's: a state owner (variable, queue, table: :func:`is_state_owner`) finds
its state by its ``shared_name``, which the session sets to the user's node name when it is empty
(``npu_adapter.session.execution_graph.name_private_state``), so the copy in a cluster and the
user's node are one state. A ``OneShotIterator`` refuses a ``shared_name``: it runs in the outer
graph under its own name (:meth:`CpuReferenceBackend.outside_cluster_reason`). Graph inputs
(``Placeholder``) stay on the host: the session feeds them, as the original sees fed tensors as
``_Arg`` nodes. Every gear of a cluster runs the cluster's one shape-polymorphic body
(:mod:`npu_adapter.backends.cpu.gears`), so its random ops keep one state whatever the gear.
"""

from npu_adapter.backends.base import Backend
from npu_adapter.backends.cpu.gears import call_one_body
from npu_adapter.graph.state import is_state_owner, name_state_of_copies
from npu_adapter.vocabulary import GEOP_OP

__all__ = ["CpuReferenceBackend", "lower_to_function_calls", "is_state_owner"]

# State owners whose state a copy cannot share by name: they refuse a shared_name.
_UNNAMED_STATE = frozenset({"OneShotIterator"})


def lower_to_function_calls(graph_def, call_op="StatefulPartitionedCall", isolate=False):
    """Copy of ``graph_def`` where every ``GeOp`` node is a call of its function.

    The call keeps the node's name, inputs, ``Tin``/``Tout`` and every ``_``-prefixed attr (the
    options the original stamps); ``function`` becomes ``f`` and ``data_format`` (not an attr of
    the call op) is kept as ``_data_format``.

    By default TensorFlow may inline the calls (Grappler's function optimizer does on larger
    graphs), which makes the rewritten graph compute exactly what the original computes, bit for
    bit. With ``isolate`` the cluster functions (and their gear copies) are marked ``_noinline``:
    the device boundary then stays at run time, and a Grappler bug in TF 2.15–2.21 is avoided —
    after inlining a call, the arithmetic optimizer can get the sign of
    ``Neg(Neg(Mul(Neg(x), y)))`` wrong when ``Neg(x)`` is also returned by the function — at the
    price of rounding differences in some graphs (kernels then run in the function runtime).
    """
    from tensorflow.core.framework import graph_pb2

    called = set()
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    for node in out.node:
        if node.op != GEOP_OP:
            continue
        called.add(node.attr["function"].func.name)
        node.op = call_op
        node.attr["f"].func.name = node.attr["function"].func.name
        del node.attr["function"]
        if "data_format" in node.attr:
            node.attr["_data_format"].s = node.attr["data_format"].s
            del node.attr["data_format"]
        for key in ("config", "config_proto", "executor_type"):
            node.attr[key].s = b""
    if isolate:
        for fdef in out.library.function:
            name = fdef.signature.name
            if name in called or name.rpartition("_gear_")[0] in called:
                fdef.attr["_noinline"].b = True
    return out


class CpuReferenceBackend(Backend):
    """Runs clusters as TF functions on the CPU; the default backend."""

    name = "cpu"
    portable_rewrites = True  # plain TensorFlow functions
    lower_reads_clusters = False
    reuses_tf_sessions = True  # the runtime's records (gears, lazy shapes) are its own
    # A session installs the calls inlined, as TensorFlow's first run would inline them
    # (except under npu_adapter_isolate_clusters, whose _noinline functions stay calls).
    inlines_calls_at_install = True
    runtime_class = "npu_adapter.backends.cpu.runtime:CpuReferenceRuntime"
    per_op_node_support = True  # graph inputs are a property of the op type
    # Large Consts stay in the outer graph and are passed to the cluster as arguments: the
    # session graph already holds the user's weights, a copy in each cluster function would
    # double the graph's memory and slow the first run (see passes/encapsulate.py).
    hoist_constants_bytes = 1024

    def supports_node(self, node_def, op_def):
        if node_def.op == "Placeholder":
            return False, "graph_input"
        return True, "supported"

    def outside_cluster_reason(self, node_def, op_def):
        """Why cluster member ``node_def`` runs in the outer graph here (a reason code), or None
        when it runs inside its cluster's function: only a state owner whose state a copy
        cannot find by name (``OneShotIterator``), decided by the op type alone (the passes ask
        once per op type of a graph, with ``node_def=None``)."""
        del node_def
        if op_def is not None and op_def.name in _UNNAMED_STATE:
            return "resource_handle_cpu_reference"
        return None

    def lower(self, graph_def, clusters, ctx):
        config = ctx.config if ctx is not None else None
        isolate = bool(getattr(config, "npu_adapter_isolate_clusters", False))
        # (Always a new graph here: lower_to_function_calls copies its input.)
        lowered = call_one_body(lower_to_function_calls(graph_def, isolate=isolate))
        return name_state_of_copies(lowered)

    def available(self):
        return True, "runs anywhere TensorFlow runs"
