"""The CPU reference backend: clusters run as TensorFlow functions on the host CPU.

It partitions exactly as an Ascend device would be targeted (same op list, same rules), so the
placement report and the cluster layout are the ones the user gets on the NPU; then every
``GeOp`` is lowered to a ``StatefulPartitionedCall`` of the cluster's FunctionDef. The result is a
plain TensorFlow graph that computes the same numbers as the original graph, bit for bit.

State (variables, queues, iterators, tables) stays with the TensorFlow session: state owners are
kept on the host and their values cross into clusters as ordinary inputs, so a variable has one
value whether a run is rewritten or not. Graph inputs (``Placeholder``) stay on the host too: the
session feeds them.
"""

from npu_adapter.backends.base import Backend
from npu_adapter.graph.types import op_def_for
from npu_adapter.vocabulary import GEOP_OP

__all__ = ["CpuReferenceBackend", "lower_to_function_calls", "is_state_owner"]

_RESOURCE = 20  # types_pb2.DT_RESOURCE


def is_state_owner(op_def):
    """An op that owns state living across session runs: variables, queues, iterators, tables,
    mutexes, accumulators.

    They are exactly the stateful ops that hand out a ref or a resource *and* take a
    ``shared_name`` attr (the resource is looked up in the session's resource manager).
    Per-step resources such as ``TensorArrayV3`` or ``StackV2`` have no ``shared_name`` and may
    live inside a cluster function.
    """
    if op_def is None or not op_def.is_stateful:
        return False
    if not any(attr.name == "shared_name" for attr in op_def.attr):
        return False
    return any(arg.is_ref or arg.type == _RESOURCE for arg in op_def.output_arg)


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

    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    called = set()
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
    runtime_class = "npu_adapter.backends.cpu.runtime:CpuReferenceRuntime"
    keeps_state_on_host = True
    per_op_node_support = True  # state ownership and graph inputs are properties of the op type
    # Large Consts stay in the outer graph and are passed to the cluster as arguments: the
    # session graph already holds the user's weights, a copy in each cluster function would
    # double the graph's memory and slow the first run (see passes/encapsulate.py).
    hoist_constants_bytes = 1024

    def supports_node(self, node_def, op_def):
        if node_def.op in ("Placeholder", "PlaceholderWithDefault"):
            return False, "graph_input"  # fed by the session (a default is used unfed)
        if is_state_owner(op_def if op_def is not None else op_def_for(node_def.op)):
            return False, "state_owner"
        return True, "supported"

    def lower(self, graph_def, clusters, ctx):
        config = ctx.get_config() if ctx is not None else None
        isolate = bool(getattr(config, "npu_adapter_isolate_clusters", False))
        return lower_to_function_calls(graph_def, isolate=isolate)

    def available(self):
        return True, "runs anywhere TensorFlow runs"
