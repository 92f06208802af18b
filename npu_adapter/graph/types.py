"""Input and output dtypes of NodeDefs, inferred from the op registry and the node's attrs.

The partitioner needs the dtype of every edge (ref, resource, variant and string edges have
special rules) and the encapsulation pass needs the dtypes of the tensors that cross a cluster
boundary. TensorFlow does not expose its C++ ``InOutTypesForNode`` to Python, so this module
re-derives it from the ``OpDef``: fixed ``type``, ``type_attr``, ``number_attr`` and
``type_list_attr``, with ``is_ref`` mapped to the ``*_REF`` dtype enum (base + 100).

Ops that are functions of the graph's library get their types from the function signature. The
pseudo-op ``GeOp`` produced by our encapsulation pass reads its ``Tin``/``Tout`` attrs. Unknown
ops yield ``None`` (callers treat unknown types conservatively).
"""

import functools

from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import op_def_registry

__all__ = [
    "REF_OFFSET",
    "is_ref_type",
    "base_type",
    "op_def_for",
    "is_stateful_op",
    "node_output_types",
    "node_input_types",
    "dtype_name",
    "output_port_names",
    "may_reference_functions",
    "tensor_bytes",
]

REF_OFFSET = 100  # DT_FLOAT_REF == DT_FLOAT + 100 in types.proto


def is_ref_type(dtype):
    """True for ``DT_*_REF`` enum values."""
    return dtype > REF_OFFSET


def base_type(dtype):
    """``DT_FLOAT_REF`` → ``DT_FLOAT``; other values unchanged."""
    return dtype - REF_OFFSET if dtype > REF_OFFSET else dtype


def dtype_name(dtype):
    """Readable dtype name (``"float32"``, ``"float32_ref"``, ``"resource"``)."""
    if dtype is None:
        return "unknown"
    from tensorflow.python.framework import dtypes

    try:
        return dtypes.as_dtype(dtype).name
    except (TypeError, ValueError):
        return types_pb2.DataType.Name(dtype)


@functools.cache
def op_def_for(op_type):
    """The registered ``OpDef`` of ``op_type`` or ``None``."""
    return op_def_registry.get(op_type)


@functools.cache
def may_reference_functions(op_type):
    """Whether nodes of ``op_type`` can carry func-valued attrs: their OpDef declares a
    ``func``/``list(func)`` attr, or the op is unknown (could be anything)."""
    op_def = op_def_for(op_type)
    if op_def is None:
        return True
    return any(a.type in ("func", "list(func)") for a in op_def.attr)


def is_stateful_op(op_type, library_functions=None):
    """Whether ``op_type`` is marked stateful in the op registry (unknown ops: False)."""
    op_def = op_def_for(op_type)
    return bool(op_def is not None and op_def.is_stateful)


@functools.cache
def _attr_defaults(op_type):
    op_def = op_def_for(op_type)
    if op_def is None:
        return {}
    return {a.name: a.default_value for a in op_def.attr if a.HasField("default_value")}


def _attr(node, defaults, name):
    if name in node.attr:
        return node.attr[name]
    return defaults.get(name)


def _expand_args(args, node, defaults):
    """Types for a list of ArgDefs, or None when an attr needed to resolve them is missing."""
    out = []
    for arg in args:
        if arg.type_list_attr:
            value = _attr(node, defaults, arg.type_list_attr)
            if value is None:
                return None
            types = list(value.list.type)
        else:
            if arg.type:
                t = arg.type
            else:
                value = _attr(node, defaults, arg.type_attr)
                if value is None:
                    return None
                t = value.type
            n = 1
            if arg.number_attr:
                value = _attr(node, defaults, arg.number_attr)
                if value is None:
                    return None
                n = value.i
            types = [t] * n
        if arg.is_ref:
            types = [t + REF_OFFSET for t in types]
        out.extend(types)
    return out


def _function_sig_types(args):
    types = []
    for arg in args:
        if not arg.type or arg.number_attr or arg.type_list_attr:
            return None  # polymorphic function signatures are not resolved here
        types.append(arg.type + REF_OFFSET if arg.is_ref else arg.type)
    return types


def node_output_types(node, functions=None):
    """Output dtypes of ``node`` (a NodeDef) as a list, or ``None`` when they cannot be inferred.

    Args:
        node: the NodeDef.
        functions: optional mapping function name → FunctionDef (the graph's library).
    """
    if node.op == "GeOp":
        return list(node.attr["Tout"].list.type) if "Tout" in node.attr else None
    if functions and node.op in functions:
        return _function_sig_types(functions[node.op].signature.output_arg)
    op_def = op_def_for(node.op)
    if op_def is None:
        return None
    return _expand_args(op_def.output_arg, node, _attr_defaults(node.op))


def node_input_types(node, functions=None):
    """Data-input dtypes of ``node`` (one per non-control input), or ``None`` if unknown."""
    if node.op == "GeOp":
        return list(node.attr["Tin"].list.type) if "Tin" in node.attr else None
    if functions and node.op in functions:
        return _function_sig_types(functions[node.op].signature.input_arg)
    op_def = op_def_for(node.op)
    if op_def is None:
        return None
    return _expand_args(op_def.input_arg, node, _attr_defaults(node.op))


def _arg_lengths(args, node, defaults):
    lengths = []
    for arg in args:
        if arg.type_list_attr:
            value = _attr(node, defaults, arg.type_list_attr)
            if value is None:
                return None
            lengths.append((arg.name, len(value.list.type)))
        elif arg.number_attr:
            value = _attr(node, defaults, arg.number_attr)
            if value is None:
                return None
            lengths.append((arg.name, value.i))
        else:
            lengths.append((arg.name, 1))
    return lengths


@functools.cache
def _fixed_port_names(op_type):
    """Port names of ops whose output list does not depend on attrs (most ops); else None."""
    op_def = op_def_for(op_type)
    if op_def is None or any(a.number_attr or a.type_list_attr for a in op_def.output_arg):
        return None
    return [f"{a.name}:0" for a in op_def.output_arg]


def output_port_names(node, functions=None):
    """FunctionDef-body names of each output port of ``node``: ``["output_arg:idx", ...]``.

    Inside a FunctionDef, an input reads ``"<node>:<output arg name>:<index in that arg>"``
    rather than a flat port; this maps flat port k to that suffix. None when unknown.
    """
    if functions and node.op in functions:
        return [f"{arg.name}:0" for arg in functions[node.op].signature.output_arg]
    if node.op == "GeOp":
        return [f"output:{k}" for k in range(len(node.attr["Tout"].list.type))]
    fixed = _fixed_port_names(node.op)
    if fixed is not None:
        return fixed
    op_def = op_def_for(node.op)
    if op_def is None:
        return None
    lengths = _arg_lengths(op_def.output_arg, node, _attr_defaults(node.op))
    if lengths is None:
        return None
    return [f"{name}:{k}" for name, n in lengths for k in range(n)]


def tensor_bytes(tensor):
    """Size in bytes of a TensorProto's data once materialised, from its dtype and shape (never
    from ``tensor_content``: reading that field copies it). Strings count their bytes; dtypes
    without a fixed size (resource, variant) count 0."""
    if tensor.dtype == types_pb2.DT_STRING:
        return sum(len(s) for s in tensor.string_val)
    size = _element_size(tensor.dtype)
    for dim in tensor.tensor_shape.dim:
        size *= max(dim.size, 0)
    return size


@functools.cache
def _element_size(dtype_enum):
    from tensorflow.python.framework import dtypes

    try:
        return dtypes.as_dtype(dtype_enum).size
    except TypeError:
        return 0
