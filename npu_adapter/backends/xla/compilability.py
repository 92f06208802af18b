"""Can XLA compile a cluster on the CPU? A static check before lowering.

A cluster is compiled when every op of its function — and of every function it calls, through
``If``/``While``/``Case``/calls — has a kernel registered for TensorFlow's ``XLA_CPU_JIT``
compilation device that accepts the dtypes the node uses, and none of them is on
:data:`VALUE_DEPENDENT_SHAPE_OPS` (XLA needs static shapes; those ops only compile with
padded, bounded outputs, if at all) or handles strings, variants, or resources other than
variables, nor draws random numbers (:data:`RANDOM_OPS`: XLA's numbers differ from
TensorFlow's for the same seed). The first op that fails names the reason:
``op Unique (value-dependent shape)``.

TensorFlow registers the ``XLA_CPU_JIT`` kernels lazily, when the process creates its first
XLA-capable device (any session does); :func:`ensure_jit_kernels` makes sure that happened
before the registry is queried.
"""

import functools
import threading

from tensorflow.core.framework import types_pb2

from npu_adapter import tf_compat
from npu_adapter.graph.types import called_functions, op_def_for

__all__ = ["RANDOM_OPS", "VALUE_DEPENDENT_SHAPE_OPS", "Verdict", "check_functions",
           "ensure_jit_kernels", "jit_kernel_defs"]

JIT_DEVICE = "XLA_CPU_JIT"

# Ops whose output shape depends on the values of their inputs (or which XLA only compiles with
# bounded, padded outputs that differ from TensorFlow's): they stay on the CPU reference.
VALUE_DEPENDENT_SHAPE_OPS = frozenset({
    "Where", "Unique", "UniqueV2", "UniqueWithCounts", "UniqueWithCountsV2",
    "NonMaxSuppression", "NonMaxSuppressionV2", "NonMaxSuppressionV3",
    "NonMaxSuppressionV4", "NonMaxSuppressionV5", "NonMaxSuppressionWithOverlaps",
    "CombinedNonMaxSuppression", "DynamicPartition", "BooleanMask", "ListDiff", "SetDiff1D",
    "DenseToSparseSetOperation", "SparseToDense", "Bincount", "DenseBincount", "RaggedRange",
    "StringSplit", "StringSplitV2", "UnravelIndex",
})

# Random ops: XLA compiles them, but draws other numbers than TensorFlow's kernels for the same
# seeds (variable initialisers, dropout), so a cluster holding one would not compute what the
# plain graph computes.
RANDOM_OPS = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "RandomShuffle", "RandomGamma", "RandomGammaGrad", "RandomPoisson", "RandomPoissonV2",
    "Multinomial", "ParameterizedTruncatedNormal", "StatelessRandomUniform",
    "StatelessRandomUniformInt", "StatelessRandomNormal", "StatelessTruncatedNormal",
    "StatelessRandomUniformV2", "StatelessRandomUniformIntV2", "StatelessRandomNormalV2",
    "StatelessTruncatedNormalV2", "StatelessRandomUniformFullIntV2",
    "StatelessRandomUniformFullInt", "StatelessMultinomial", "StatelessRandomGetKeyCounter",
    "StatelessRandomGetKeyCounterAlg", "StatelessRandomGetAlg", "RngBitGenerator",
    "RngReadAndSkip", "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt",
    "StatefulStandardNormalV2", "StatefulTruncatedNormal",
})

# Resource dtypes XLA compiles: variables (their handles enter the cluster as arguments).
_VARIABLE_RESOURCE_OPS = frozenset({
    "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "ResourceGather", "ResourceGatherNd", "ResourceScatterAdd", "ResourceScatterSub",
    "ResourceScatterMul", "ResourceScatterDiv", "ResourceScatterMin", "ResourceScatterMax",
    "ResourceScatterUpdate", "ResourceScatterNdAdd", "ResourceScatterNdSub",
    "ResourceScatterNdUpdate", "VarIsInitializedOp", "VariableShape", "Identity",
    "StatefulPartitionedCall", "PartitionedCall", "If", "StatelessIf", "While",
    "StatelessWhile", "Case", "StatelessCase",
})
_BAD_TENSOR_TYPES = frozenset({types_pb2.DT_STRING, types_pb2.DT_VARIANT})
# Nodes of a FunctionDef body that are not kernels (function arguments are the signature).
_STRUCTURAL_OPS = frozenset({"NoOp"})

_LOCK = threading.Lock()
_REGISTERED = False


class Verdict:
    """The check's answer for one cluster: ``ok``, and when not, a reason code of
    :data:`npu_adapter.vocabulary.XLA_FALLBACK_REASONS` and a sentence naming the op."""

    __slots__ = ("ok", "reason", "detail")

    def __init__(self, ok, reason="", detail=""):
        self.ok, self.reason, self.detail = ok, reason, detail

    def __repr__(self):
        return f"Verdict(ok={self.ok}, reason={self.reason!r}, detail={self.detail!r})"


def ensure_jit_kernels():
    """Make TensorFlow register its ``XLA_CPU_JIT`` kernels (it does when a session creates its
    devices). Idempotent; cheap after the first call."""
    global _REGISTERED
    if _REGISTERED:
        return
    with _LOCK:
        if _REGISTERED:
            return
        import tensorflow as tf

        from npu_adapter.backends.xla.probe import plain_session

        graph = tf.Graph()
        with graph.as_default():
            value = tf.constant(1.0) + 1.0
        with plain_session(graph) as sess:
            sess.run(value)
        _registered_jit_kernels.cache_clear()
        _REGISTERED = True


def jit_kernel_defs(op):
    """The ``KernelDef``s of ``op`` for ``XLA_CPU_JIT`` (empty when XLA cannot compile it)."""
    ensure_jit_kernels()
    return _registered_jit_kernels(op)


@functools.cache
def _registered_jit_kernels(op):
    return tuple(k for k in tf_compat.registered_kernels(op).kernel
                 if k.device_type == JIT_DEVICE)


def _type_attr(node, op_def, name):
    """The node's value of type or type-list attr ``name`` (its default when unset)."""
    if name in node.attr:
        return node.attr[name]
    if op_def is not None:
        for attr in op_def.attr:
            if attr.name == name and attr.HasField("default_value"):
                return attr.default_value
    return None


def _types_of(value):
    if value is None:
        return ()
    if value.HasField("list"):
        return tuple(value.list.type)
    if value.WhichOneof("value") == "type":
        return (value.type,)
    return ()


def _kernel_accepts(kernel, node, op_def):
    for constraint in kernel.constraint:
        allowed = set(constraint.allowed_values.list.type)
        if not allowed:
            continue
        used = _types_of(_type_attr(node, op_def, constraint.name))
        if any(t not in allowed for t in used):
            return False
    return True


def _node_types(node, op_def):
    """Every dtype the node reads or produces (as far as its attrs tell)."""
    found = []
    if op_def is None:
        return found
    for arg in list(op_def.input_arg) + list(op_def.output_arg):
        if arg.type:
            found.append(arg.type)
        elif arg.type_attr:
            found.extend(_types_of(_type_attr(node, op_def, arg.type_attr)))
        elif arg.type_list_attr:
            found.extend(_types_of(_type_attr(node, op_def, arg.type_list_attr)))
    return found


def _dtype_name(enum):
    return types_pb2.DataType.Name(enum).replace("DT_", "").lower()


def check_node(node):
    """The :class:`Verdict` of one node (functions it calls are checked by the caller)."""
    op = node.op
    if op in _STRUCTURAL_OPS:
        return Verdict(True)
    if op in VALUE_DEPENDENT_SHAPE_OPS:
        return Verdict(False, "xla_value_dependent_shape",
                       f"op {op} (value-dependent shape) not compilable by XLA")
    if op in RANDOM_OPS:
        return Verdict(False, "xla_random",
                       f"op {op} ({node.name}) draws random numbers, which XLA draws "
                       f"differently from TensorFlow for the same seed")
    op_def = op_def_for(op)
    types = _node_types(node, op_def)
    bad = sorted({t for t in types if t in _BAD_TENSOR_TYPES})
    if bad:
        return Verdict(False, "xla_unsupported_tensor",
                       f"op {op} ({node.name}) uses {_dtype_name(bad[0])} tensors, which XLA "
                       f"does not compile")
    if types_pb2.DT_RESOURCE in types and op not in _VARIABLE_RESOURCE_OPS \
            and not op.startswith("ResourceApply") \
            and not op.startswith("ResourceSparseApply"):
        return Verdict(False, "xla_unsupported_tensor",
                       f"op {op} ({node.name}) uses a resource that is not a variable")
    kernels = jit_kernel_defs(op)
    if not kernels:
        return Verdict(False, "xla_no_kernel", f"op {op} ({node.name}) has no XLA kernel")
    if not any(_kernel_accepts(k, node, op_def) for k in kernels):
        used = ", ".join(sorted({_dtype_name(t) for t in types})) or "?"
        return Verdict(False, "xla_dtype",
                       f"op {op} ({node.name}) has no XLA kernel for dtype(s) {used}")
    return Verdict(True)


def check_functions(names, functions):
    """The :class:`Verdict` of functions ``names`` and everything they call.

    Args:
        names: the function names XLA would compile (a cluster function, or its gear copies).
        functions: name → ``FunctionDef`` of the graph's library.
    """
    ensure_jit_kernels()
    seen = set()
    pending = list(names)
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.add(name)
        fdef = functions.get(name)
        if fdef is None:
            return Verdict(False, "xla_unknown_function",
                           f"function {name} is not in the graph's library")
        for arg in list(fdef.signature.input_arg) + list(fdef.signature.output_arg):
            if arg.type in _BAD_TENSOR_TYPES:
                return Verdict(False, "xla_unsupported_tensor",
                               f"argument {arg.name} of {name} is a "
                               f"{_dtype_name(arg.type)} tensor, which XLA does not compile")
        for node in sorted(fdef.node_def, key=lambda n: n.name):
            verdict = check_node(node)
            if not verdict.ok:
                return verdict
            pending.extend(called_functions(node))
    return Verdict(True)

