"""Small GraphDef builders for tests: write graphs in a few lines without a ``tf.Graph``.

Example::

    b = GraphBuilder()
    x = b.placeholder("x", shape=[None, 4])
    w = b.const("w", np.ones([4, 3], np.float32))
    y = b.op("MatMul", "y", [x, w], T=tf.float32)
    gd = b.graph_def()

Attribute values are converted by type: ``tf.DType``/``DataType`` enums → ``type``, ``bool`` →
``b``, ``int`` → ``i``, ``float`` → ``f``, ``str``/``bytes`` → ``s``, lists of those → ``list``,
shapes given with ``shape=`` → ``shape``, numpy arrays → ``tensor``.
"""

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2

__all__ = ["GraphBuilder", "node_def", "attr_value"]


def attr_value(value, key=None):
    """Convert a Python value into an ``AttrValue`` (see the module docstring)."""
    av = attr_value_pb2.AttrValue()
    if isinstance(value, attr_value_pb2.AttrValue):
        av.CopyFrom(value)
    elif isinstance(value, tf.DType):
        av.type = value.as_datatype_enum
    elif isinstance(value, bool):
        av.b = value
    elif isinstance(value, (int, np.integer)):
        av.i = int(value)
    elif isinstance(value, float):
        av.f = value
    elif isinstance(value, str):
        av.s = value.encode()
    elif isinstance(value, bytes):
        av.s = value
    elif isinstance(value, np.ndarray):
        av.tensor.CopyFrom(tf.make_tensor_proto(value))
    elif isinstance(value, tf.TensorShape):
        av.shape.CopyFrom(value.as_proto())
    elif isinstance(value, (list, tuple)):
        if key in ("shape", "element_shape"):
            av.shape.CopyFrom(tf.TensorShape(list(value)).as_proto())
        elif all(isinstance(v, tf.DType) for v in value) and value:
            av.list.type.extend(v.as_datatype_enum for v in value)
        elif all(isinstance(v, bool) for v in value) and value:
            av.list.b.extend(value)
        elif all(isinstance(v, int) for v in value):
            av.list.i.extend(value)
        elif all(isinstance(v, float) for v in value):
            av.list.f.extend(value)
        elif all(isinstance(v, (str, bytes)) for v in value):
            av.list.s.extend(v.encode() if isinstance(v, str) else v for v in value)
        else:
            raise TypeError(f"cannot convert list attr {key!r}: {value!r}")
    else:
        raise TypeError(f"cannot convert attr {key!r} of type {type(value).__name__}")
    return av


def node_def(op, name, inputs=(), device="", **attrs):
    """A NodeDef with ``inputs`` (strings) and converted ``attrs``."""
    node = node_def_pb2.NodeDef(name=name, op=op, device=device)
    node.input.extend(inputs)
    for key, value in attrs.items():
        node.attr[key].CopyFrom(attr_value(value, key))
    return node


class GraphBuilder:
    """Accumulates NodeDefs; every method returns the new node's name."""

    def __init__(self):
        self._graph = graph_pb2.GraphDef()
        self._graph.versions.producer = tf.compat.v1.GraphDef().versions.producer or 1800

    def add(self, node):
        """Append an existing NodeDef; returns its name."""
        self._graph.node.add().CopyFrom(node)
        return node.name

    def op(self, op, name, inputs=(), **attrs):
        """Append a node of type ``op``."""
        return self.add(node_def(op, name, inputs, **attrs))

    def placeholder(self, name, dtype=tf.float32, shape=None):
        """A Placeholder (unknown shape when ``shape`` is None)."""
        attrs = {"dtype": dtype}
        if shape is not None:
            attrs["shape"] = list(shape)
        return self.op("Placeholder", name, **attrs)

    def const(self, name, value, dtype=None, inputs=()):
        """A Const holding ``value`` (numpy array or scalar)."""
        array = np.asarray(value, dtype=dtype.as_numpy_dtype if dtype is not None else None)
        return self.op("Const", name, inputs, dtype=tf.as_dtype(array.dtype), value=array)

    def binary(self, op, name, a, b, dtype=tf.float32):
        """A two-input elementwise op with ``T``."""
        return self.op(op, name, [a, b], T=dtype)

    def unary(self, op, name, x, dtype=tf.float32, extra_inputs=()):
        """A one-input elementwise op with ``T``."""
        return self.op(op, name, [x, *extra_inputs], T=dtype)

    def set_attr(self, name, key, value):
        """Set attr ``key`` of node ``name``."""
        for node in self._graph.node:
            if node.name == name:
                node.attr[key].CopyFrom(attr_value(value, key))
                return
        raise KeyError(name)

    def add_function(self, fdef):
        """Add a FunctionDef to the library."""
        self._graph.library.function.add().CopyFrom(fdef)

    def graph_def(self):
        """A copy of the GraphDef built so far."""
        out = graph_pb2.GraphDef()
        out.CopyFrom(self._graph)
        return out
