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

import tensorflow as tf
from tensorflow.core.framework import types_pb2

from npu_adapter import tf_compat

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
    "fixed_output_port_names",
    "may_reference_functions",
    "tensor_bytes",
    "const_sizes",
    "dtype_sources",
    "may_have_dtype",
    "rules_out_dtypes",
    "has_ref_inputs",
    "first_state_changing_op",
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
    try:
        return tf.as_dtype(dtype).name
    except (TypeError, ValueError):
        return types_pb2.DataType.Name(dtype)


@functools.cache
def op_def_for(op_type):
    """The registered ``OpDef`` of ``op_type`` or ``None``."""
    return tf_compat.op_def(op_type)


@functools.cache
def may_reference_functions(op_type):
    """Whether nodes of ``op_type`` can carry func-valued attrs: their OpDef declares a
    ``func``/``list(func)`` attr, or the op is unknown (could be anything)."""
    op_def = op_def_for(op_type)
    if op_def is None:
        return True
    return any(a.type in ("func", "list(func)") for a in op_def.attr)


def called_functions(node_def):
    """Names of the functions ``node_def``'s attributes name (``func`` and ``list(func)``
    values: call and control-flow bodies)."""
    for value in node_def.attr.values():
        kind = value.WhichOneof("value")
        if kind == "func":
            yield value.func.name
        elif kind == "list":
            for func in value.list.func:
                yield func.name


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
    value = node.attr.get(name)
    return value if value is not None else defaults.get(name)


@functools.cache
def _arg_plan(op_type, outputs):
    """The input (``outputs`` False) or output ArgDefs of ``op_type`` as plain tuples
    ``(type_list_attr, type, type_attr, number_attr, is_ref)``, or None for an unknown op.

    Reading OpDef fields from Python costs about as much as reading NodeDef fields; dtypes are
    asked for on every edge of 100k-node graphs, so each OpDef is read once per process."""
    op_def = op_def_for(op_type)
    if op_def is None:
        return None
    args = op_def.output_arg if outputs else op_def.input_arg
    return tuple((a.type_list_attr, a.type, a.type_attr, a.number_attr, a.is_ref) for a in args)


def _expand_args(plan, node, defaults):
    """Types for an argument plan (see ``_arg_plan``), or None when an attr needed to resolve
    them is missing."""
    out = []
    attrs = node.attr
    for type_list_attr, fixed, type_attr, number_attr, is_ref in plan:
        if type_list_attr:
            value = attrs.get(type_list_attr)
            if value is None:
                value = defaults.get(type_list_attr)
                if value is None:
                    return None
            types = list(value.list.type)
        else:
            if fixed:
                t = fixed
            else:
                value = attrs.get(type_attr)
                if value is None:
                    value = defaults.get(type_attr)
                    if value is None:
                        return None
                t = value.type
            if number_attr:
                value = attrs.get(number_attr)
                if value is None:
                    value = defaults.get(number_attr)
                    if value is None:
                        return None
                types = [t] * value.i
            elif is_ref:
                out.append(t + REF_OFFSET)
                continue
            else:
                out.append(t)
                continue
        if is_ref:
            types = [t + REF_OFFSET for t in types]
        out.extend(types)
    return out


@functools.cache
def dtype_sources(op_type):
    """What decides the dtypes of ``op_type``'s inputs and outputs: ``(fixed, type_attrs,
    list_attrs)`` with ``fixed`` the set of dtypes its OpDef names directly and the names of the
    ``type`` and ``list(type)`` attrs the other arguments take theirs from; None for an unknown
    op.

    Lets a caller rule a dtype out of every argument of a node by reading a few attrs, without
    expanding the argument lists (ref arguments add ``REF_OFFSET`` to these values)."""
    plans = (_arg_plan(op_type, False), _arg_plan(op_type, True))
    if plans[0] is None:
        return None
    fixed = set()
    type_attrs = []
    list_attrs = []
    for plan in plans:
        for type_list_attr, t, type_attr, _, _ in plan:
            if type_list_attr:
                list_attrs.append(type_list_attr)
            elif t:
                fixed.add(t)
            else:
                type_attrs.append(type_attr)
    return frozenset(fixed), tuple(dict.fromkeys(type_attrs)), tuple(dict.fromkeys(list_attrs))


@functools.cache
def rules_out_dtypes(op_type, dtypes_):
    """Whether the OpDef of ``op_type`` alone rules ``dtypes_`` out of every argument: no fixed
    argument dtype is in it and every ``type``/``list(type)`` attr the others take theirs from
    allows only other dtypes (``allowed_values``, as ``T`` of most math ops). A node of such an
    op whose attrs said otherwise would not be a valid node (TensorFlow refuses it)."""
    sources = dtype_sources(op_type)
    op_def = op_def_for(op_type)
    if sources is None or op_def is None:
        return False
    fixed, type_attrs, list_attrs = sources
    if not fixed.isdisjoint(dtypes_):
        return False
    allowed = {a.name: a.allowed_values.list.type for a in op_def.attr
               if a.HasField("allowed_values")}
    for name in type_attrs + list_attrs:
        values = allowed.get(name)
        if not values:
            return False  # any dtype
        possible = set(values) | {t + REF_OFFSET for t in values}
        if not possible.isdisjoint(dtypes_):
            return False
    return True


@functools.cache
def has_ref_inputs(op_type):
    """Whether an input of ``op_type`` may be a ref (its OpDef declares an ``is_ref`` input);
    True for an unknown op. Only such an input makes an edge a ref edge."""
    plan = _arg_plan(op_type, False)
    return plan is None or any(is_ref for *_, is_ref in plan)


def first_state_changing_op(op_types, function_names=(), called=(), *, harmless,
                            ref_writes=False):
    """The first of ``op_types`` (sorted) whose run may change or show state kept from run to
    run (TensorFlow registers it stateful), or None.

    ``harmless``: types registered stateful that the caller knows change nothing it cares
    about. A type that names a function (``function_names``) is a call, judged by its body; a
    type TensorFlow does not know, or a call of a function whose body was not scanned
    (``called`` outside ``function_names``), counts as changing state: nothing is known about
    it. With ``ref_writes``, an op with a ref input counts too (``Assign``, ``ApplyMomentum``
    write through it without being registered stateful)."""
    unknown = sorted(set(called) - set(function_names))
    if unknown:
        return unknown[0]
    for op_type in sorted(op_types):
        if op_type in harmless or op_type in function_names:
            continue
        op_def = op_def_for(op_type)
        if op_def is None or op_def.is_stateful or (
                ref_writes and any(arg.is_ref for arg in op_def.input_arg)):
            return op_type
    return None


def may_have_dtype(node, dtypes_):
    """False when no input or output of ``node`` can be of a dtype in ``dtypes_`` (a frozenset
    that holds both the plain and the ``*_REF`` value to rule out); True when it may (or the op
    is unknown, a library function or a ``GeOp``: the caller then looks at the full lists)."""
    op = node.op
    sources = dtype_sources(op) if op != "GeOp" else None
    if sources is None:
        return True
    if rules_out_dtypes(op, dtypes_):
        return False  # decided by the op type: no attr read
    fixed, type_attrs, list_attrs = sources
    if not fixed.isdisjoint(dtypes_):
        return True
    if type_attrs or list_attrs:
        attrs = node.attr
        defaults = _attr_defaults(op)
        for name in type_attrs:
            value = attrs.get(name)
            if value is None:
                value = defaults.get(name)
            if value is not None and value.type in dtypes_:
                return True
        for name in list_attrs:
            value = attrs.get(name)
            if value is None:
                value = defaults.get(name)
            if value is not None and not dtypes_.isdisjoint(value.list.type):
                return True
    return False


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
    op = node.op
    if op == "GeOp":
        return list(node.attr["Tout"].list.type) if "Tout" in node.attr else None
    if functions and op in functions:
        return _function_sig_types(functions[op].signature.output_arg)
    plan = _arg_plan(op, True)
    if plan is None:
        return None
    return _expand_args(plan, node, _attr_defaults(op))


def node_input_types(node, functions=None):
    """Data-input dtypes of ``node`` (one per non-control input), or ``None`` if unknown."""
    op = node.op
    if op == "GeOp":
        return list(node.attr["Tin"].list.type) if "Tin" in node.attr else None
    if functions and op in functions:
        return _function_sig_types(functions[op].signature.input_arg)
    plan = _arg_plan(op, False)
    if plan is None:
        return None
    return _expand_args(plan, node, _attr_defaults(op))


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
def fixed_output_port_names(op_type):
    """:func:`output_port_names` of every node of registered op ``op_type`` when its output
    list does not depend on attrs (most ops), read from the OpDef alone; else None. Shared
    (cached): do not modify the list."""
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
    fixed = fixed_output_port_names(node.op)
    if fixed is not None:
        return fixed
    op_def = op_def_for(node.op)
    if op_def is None:
        return None
    lengths = _arg_lengths(op_def.output_arg, node, _attr_defaults(node.op))
    if lengths is None:
        return None
    return [f"{name}:{k}" for name, n in lengths for k in range(n)]


def const_sizes(nodes, ops):
    """Index → :func:`tensor_bytes` of the value of every ``Const`` of ``nodes`` (NodeDefs in
    order, ``ops`` their op types) that holds one."""
    sizes = {}
    for i, op in enumerate(ops):
        if op == "Const":
            value = nodes[i].attr.get("value")
            if value is not None:
                sizes[i] = tensor_bytes(value.tensor)
    return sizes


def tensor_bytes(tensor):
    """Size in bytes of a TensorProto's data once materialised, from its dtype and shape (never
    from ``tensor_content``: reading that field copies it). Strings count their bytes; dtypes
    without a fixed size (resource, variant) count 0."""
    dtype = tensor.dtype
    if dtype == types_pb2.DT_STRING:
        return sum(len(s) for s in tensor.string_val)
    size = _element_size(dtype)
    for dim in tensor.tensor_shape.dim:
        size *= max(dim.size, 0)
    return size


@functools.cache
def _element_size(dtype_enum):
    try:
        return tf.as_dtype(dtype_enum).size
    except TypeError:
        return 0
