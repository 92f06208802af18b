"""Shared pieces of the op implementations: graph-mode checks, device-only errors, seeds, and
the op records that stand in for the original's single custom-op node.

The original builds one custom node per op (``DynamicRnn``, ``PRelu``, ...) and registers a
Python gradient for it. Here an op is a small subgraph of TensorFlow ops; its outputs leave
through one identity node (``Identity``/``IdentityN``), and :func:`finish_op` files an
:class:`NpuOpRecord` for that node: the op type, the inputs and outputs in the original's order
and the original's attributes. The public gradient functions of the original
(``npu_ops.dynamic_rnn_grad(op, ...)`` and friends) accept that node (any output's ``.op``) or
the record itself and compute what the original's gradient computes.

Where the original's registered gradient uses only some of an op's outputs (``DynamicRnn`` reads
the gradient of ``y`` and of the last step of ``output_h``/``output_c``, never the gates), the
identity node is a :func:`tf.custom_gradient` that passes on exactly those parts, so
``tf.gradients`` through our op gives what the original gives.
"""

import weakref

import tensorflow as tf

from npu_adapter.errors import DeviceOnlyError

__all__ = [
    "DEFAULT_GRAPH_SEED",
    "NpuOpRecord",
    "check_graph_mode",
    "device_only",
    "finish_op",
    "get_seed",
    "op_record",
]

DEFAULT_GRAPH_SEED = 87654321
"""Graph seed the random ops use when only an op seed is given (TensorFlow's value too)."""

GRAD_ALL = "all"
GRAD_LAST = "last"
GRAD_FIRST = "first"
GRAD_NONE = "none"
_GRAD_RULES = (GRAD_ALL, GRAD_LAST, GRAD_FIRST, GRAD_NONE)

_RECORDS = weakref.WeakKeyDictionary()  # tf.Graph -> {node name: NpuOpRecord}


def check_graph_mode(api):
    """``RuntimeError`` in eager mode, with the original's message, for graph-only ops."""
    if tf.executing_eagerly():
        raise RuntimeError(f"{api}() is not compatible with eager execution.")


def device_only(api, reason):
    """Raise :class:`~npu_adapter.errors.DeviceOnlyError` for an API that means the device."""
    raise DeviceOnlyError(api, reason)


def get_seed(op_seed):
    """``(seed, seed2)`` from the graph seed and ``op_seed``, as TensorFlow's random ops (and the
    original's ``DropOutGenMask``) derive them; ``(None, None)`` when neither is set."""
    return tf.compat.v1.random.get_seed(op_seed)


class NpuOpRecord:
    """What the original's gradient functions read from their custom-op node.

    ``type`` is the original op type (``"DynamicRnn"``), ``inputs``/``outputs`` the tensors in the
    original's order (``outputs`` are what the caller got; ``inner_outputs`` the same values
    before the identity node, which gradients are taken from), ``node`` the identity node and
    :meth:`get_attr` the original's attributes.
    """

    def __init__(self, op_type, node, inputs, outputs, inner_outputs, attrs):
        self.type = op_type
        self.node = node
        self.name = node.name if node is not None else op_type
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.inner_outputs = tuple(inner_outputs)
        self._attrs = dict(attrs)

    def get_attr(self, name):
        """The attribute ``name`` of the original op (``ValueError`` when it has none)."""
        if name not in self._attrs:
            raise ValueError(f"Operation {self.name!r} ({self.type}) has no attr named {name!r};"
                             f" it has {sorted(self._attrs)}")
        return self._attrs[name]

    @property
    def attrs(self):
        """A copy of the original op's attributes."""
        return dict(self._attrs)

    def __repr__(self):
        return f"<NpuOpRecord {self.type} {self.name!r}>"


def op_record(op, op_type=None):
    """The :class:`NpuOpRecord` of ``op``: a record, a node made by one of our op wrappers (any
    output's ``.op``) or one of its output tensors. ``op_type`` checks the kind (a string or a
    tuple of strings). ``ValueError`` names what was given when it is none of these."""
    record = op
    if not isinstance(op, NpuOpRecord):
        node = op.op if isinstance(op, tf.Tensor) and hasattr(op, "graph") else op
        graph = getattr(node, "graph", None)
        name = getattr(node, "name", None)
        record = _RECORDS.get(graph, {}).get(name) if graph is not None else None
        if record is None:
            raise ValueError(
                f"{op!r} was not made by an npu_bridge op wrapper: pass the .op of a tensor the "
                "wrapper returned (graph mode), or the NpuOpRecord from npu_bridge op_record()")
    if op_type is not None:
        allowed = (op_type,) if isinstance(op_type, str) else tuple(op_type)
        if record.type not in allowed:
            raise ValueError(f"expected an op of type {' or '.join(allowed)}, got {record.type} "
                             f"({record.name!r})")
    return record


def _masked_gradient(rule, dy):
    if dy is None or rule == GRAD_ALL:
        return dy
    if rule == GRAD_NONE:
        return None
    if rule == GRAD_LAST:
        return tf.concat([tf.zeros_like(dy[:-1]), dy[-1:]], axis=0)
    return tf.concat([dy[:1], tf.zeros_like(dy[1:])], axis=0)


def _gradient_masking_identity(tensors, rules):
    @tf.custom_gradient
    def identity(*xs):
        def grad(*dys):
            return [_masked_gradient(rule, dy) for rule, dy in zip(rules, dys)]

        return [tf.identity(x) for x in xs], grad

    return list(identity(*tensors))


def finish_op(op_type, inputs, outputs, attrs, *, grad_rules=None):
    """Pass ``outputs`` through one identity node (in the caller's name scope, which should be
    the op's), file the op's :class:`NpuOpRecord` and return the outputs the caller gets.

    ``grad_rules`` (one per output) says which part of each output's gradient the original's
    registered gradient uses: ``"all"``, ``"last"``/``"first"`` (only index -1/0 of axis 0, the
    last processed time step), or ``"none"``. ``None`` means all of every output.
    """
    outputs = list(outputs)
    if grad_rules is not None:
        grad_rules = list(grad_rules)
        if len(grad_rules) != len(outputs) or not set(grad_rules) <= set(_GRAD_RULES):
            raise ValueError(f"grad_rules must give one of {_GRAD_RULES} per output")
    if grad_rules is not None and any(rule != GRAD_ALL for rule in grad_rules):
        final = _gradient_masking_identity(outputs, grad_rules)
    elif len(outputs) == 1:
        final = [tf.identity(outputs[0])]
    else:
        final = list(tf.identity_n(outputs))
    if not tf.executing_eagerly():
        node = final[0].op
        record = NpuOpRecord(op_type, node, inputs, final, outputs, attrs)
        _RECORDS.setdefault(node.graph, {})[node.name] = record
    return final
