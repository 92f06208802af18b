"""``ScatterElements`` (ONNX semantics) from ``TensorScatterUpdate``."""

import tensorflow as tf

__all__ = ["scatter_elements"]


def scatter_elements(data, indices, updates, axis=0, name=None):
    """ONNX ScatterElements: a copy of ``data`` where, for every position ``p`` of ``indices``,
    the element at ``p`` with coordinate ``axis`` replaced by ``indices[p]`` is ``updates[p]``.

    ``indices`` and ``updates`` have the same shape and the rank of ``data``; negative indices
    count from the end of ``axis``. With duplicate indices the written value is unspecified, as
    in ONNX.
    """
    with tf.name_scope(name or "ScatterElements"):
        data = tf.convert_to_tensor(data, name="data")
        indices = tf.convert_to_tensor(indices, name="indices")
        updates = tf.convert_to_tensor(updates, dtype=data.dtype, name="updates")
        if indices.dtype not in (tf.int32, tf.int64):
            raise ValueError(f"scatter_elements: indices must be int32 or int64, got "
                             f"{indices.dtype.name}")
        rank = data.shape.rank
        if rank is None:
            raise ValueError("scatter_elements: the rank of data must be known")
        for what, tensor in (("indices", indices), ("updates", updates)):
            if tensor.shape.rank is not None and tensor.shape.rank != rank:
                raise ValueError(f"scatter_elements: {what} must have the rank of data ({rank}),"
                                 f" got shape {tensor.shape}")
        if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
            raise ValueError(f"scatter_elements: axis={axis!r} is out of range for rank {rank}")
        axis %= rank
        index_shape = tf.shape(indices, out_type=indices.dtype)
        grids = tf.meshgrid(*[tf.range(index_shape[d]) for d in range(rank)], indexing="ij")
        size = tf.shape(data, out_type=indices.dtype)[axis]
        grids[axis] = tf.where(indices < 0, indices + size, indices)
        return tf.tensor_scatter_nd_update(data, tf.stack(grids, axis=-1), updates)
