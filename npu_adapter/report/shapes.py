"""Static shapes, dtypes and sizes of the tensors that cross a cluster boundary.

Shapes come from TensorFlow's own shape inference: the graph the rewrite received is imported into
a fresh ``tf.Graph`` and ``tensor.shape`` is read. When the import fails (an op unknown to this
TensorFlow, for instance) shapes fall back to ``_output_shapes`` attrs and Placeholder ``shape``
attrs, else they are unknown.

In JSON a shape is a list of dims with ``-1`` for an unknown dim (the GraphDef convention), or
``null`` when even the rank is unknown. ``bytes`` is the size of one value of the tensor when the
shape is fully known and the dtype has a fixed size (not string, resource or variant), else
``null``; when only the first (batch) dim is unknown, ``bytes_per_example`` gives the size of one
row, so ``batch * bytes_per_example`` is the size at run time.
"""

from npu_adapter.graph.names import parse_tensor_name
from npu_adapter.graph.types import base_type, dtype_name

__all__ = ["static_shapes", "tensor_record", "dtype_size"]

_NO_FIXED_SIZE = frozenset({7, 20, 21})  # DT_STRING, DT_RESOURCE, DT_VARIANT


def dtype_size(dtype):
    """Bytes per element of the ``DataType`` enum ``dtype``, or None when it has no fixed size."""
    if dtype is None:
        return None
    dtype = base_type(dtype)
    if dtype in _NO_FIXED_SIZE:
        return None
    import tensorflow as tf

    try:
        size = tf.as_dtype(dtype).size
    except (TypeError, ValueError):
        return None
    return size or None


def _attr_shape(node, port):
    shapes = node.attr.get("_output_shapes")
    if shapes is not None and port < len(shapes.list.shape):
        proto = shapes.list.shape[port]
    elif node.op in ("Placeholder", "PlaceholderWithDefault") and "shape" in node.attr:
        proto = node.attr["shape"].shape
    else:
        return None
    if proto.unknown_rank:
        return None
    return [int(d.size) for d in proto.dim]


def static_shapes(graph_def, tensor_names):
    """Dict tensor name → list of dims (``-1`` unknown) or None (unknown rank).

    Imports ``graph_def`` once; never raises for graphs TensorFlow cannot import (the attr
    fallback is used then).
    """
    wanted = list(dict.fromkeys(tensor_names))
    if not wanted:
        return {}
    result = {}
    try:
        import tensorflow as tf

        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        for name in wanted:
            try:
                shape = graph.get_tensor_by_name(name).shape
            except (KeyError, ValueError):
                result[name] = None
                continue
            result[name] = None if shape.rank is None else [
                -1 if d is None else int(d) for d in shape.as_list()]
        return result
    except Exception:  # any import failure means "use the attrs"
        pass
    nodes = {node.name: node for node in graph_def.node}
    for name in wanted:
        node_name, port = parse_tensor_name(name)
        node = nodes.get(node_name)
        result[name] = None if node is None else _attr_shape(node, port)
    return result


def tensor_record(name, dtype, shape):
    """The JSON record of one boundary tensor (see the module docstring)."""
    size = dtype_size(dtype)
    total = None
    per_example = None
    if size is not None and shape is not None:
        if all(d >= 0 for d in shape):
            total = size
            for d in shape:
                total *= d
        elif shape and shape[0] < 0 and all(d >= 0 for d in shape[1:]):
            per_example = size
            for d in shape[1:]:
                per_example *= d
    return {
        "tensor": name,
        "dtype": dtype_name(dtype),
        "shape": shape,
        "bytes": total,
        "bytes_per_example": per_example,
    }
