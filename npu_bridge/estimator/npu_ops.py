"""NPU op wrappers (``npu_bridge.estimator.npu_ops``) built from TensorFlow ops.

The original wraps custom ops of ``_tf_adapter.so`` (spec §7.2). Here:

* :func:`initialize_system` / :func:`shutdown_system` (``NPUInit`` / ``NPUShutdown``) build a
  ``NoOp`` named like the original op, carrying the string attribute ``_npu_adapter_op`` =
  ``"NPUInit"`` / ``"NPUShutdown"`` so the NPU session can recognise them. Any session can run
  them; they raise ``RuntimeError`` in eager mode, as the original.
* :func:`dropout` has the original's checks and the semantics of ``tf.nn.dropout`` with
  ``rate = 1 - keep_prob``.
* :func:`scatter_elements` (ONNX ScatterElements semantics) is built from
  ``tf.tensor_scatter_nd_update``.
* :func:`npu_onnx_graph_op` raises :class:`~npu_adapter.errors.BackendError`: an ONNX model only
  runs inside a GeOp on the device.
* The device kernels without a clear TensorFlow equivalent (``LARS``, ``LARSV2``, the outfeed
  ops, ``basic_lstm_cell``, the fused Adam ops, ``k_means_centroids``, ``channel_get_next``)
  raise ``NotImplementedError`` naming the op and what to use instead.
"""

import numbers

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from npu_adapter.errors import BackendError

__all__ = [
    "NPU_ADAPTER_OP_ATTR",
    "LARS",
    "LARSV2",
    "NPUInit",
    "NPUShutdown",
    "adam_apply_one_assign",
    "adam_apply_one_with_decay_assign",
    "basic_lstm_cell",
    "channel_get_next",
    "dropout",
    "initialize_system",
    "k_means_centroids",
    "npu_onnx_graph_op",
    "outfeed_dequeue_op",
    "outfeed_enqueue_op",
    "scatter_elements",
    "shutdown_system",
    "stop_outfeed_dequeue_op",
]

NPU_ADAPTER_OP_ATTR = "_npu_adapter_op"
"""String attribute that marks the ``NoOp`` standing in for an NPU system op."""


def _check_graph_mode(api):
    if tf.executing_eagerly():
        raise RuntimeError(f"{api}() is not compatible with eager execution.")


def _marker_op(op_type, name):
    op = tf.no_op(name=name or op_type)
    op._set_attr(NPU_ADAPTER_OP_ATTR, attr_value_pb2.AttrValue(s=op_type.encode("ascii")))
    return op


def NPUInit(name=None):
    """The NPU system initialisation op (a marked ``NoOp`` named ``NPUInit`` by default)."""
    _check_graph_mode("tf.NPUInit")
    return _marker_op("NPUInit", name)


def NPUShutdown(name=None):
    """The NPU system shutdown op (a marked ``NoOp`` named ``NPUShutdown`` by default)."""
    _check_graph_mode("tf.NPUShutdown")
    return _marker_op("NPUShutdown", name)


def initialize_system(name=None):
    """An op that initialises the NPU system when a session runs it (see :func:`NPUInit`)."""
    return NPUInit(name)


def shutdown_system(name=None):
    """An op that shuts the NPU system down when a session runs it (see :func:`NPUShutdown`)."""
    return NPUShutdown(name)


def dropout(x, keep_prob, noise_shape=None, seed=None, name=None):
    """Dropout with keep probability ``keep_prob``: ``tf.nn.dropout(x, rate=1 - keep_prob)``.

    Kept elements are scaled by ``1 / keep_prob``. As in the original: graph mode only
    (``RuntimeError`` in eager mode), ``x`` must be floating point, a Python ``keep_prob`` must be
    in (0, 1] (``ValueError``) and ``keep_prob == 1`` returns ``x`` unchanged. A tensor
    ``keep_prob`` must be a scalar. The original draws the mask with the NPU ops
    ``DropOutGenMask``/``DropOutDoMask``; the random stream differs, the distribution does not.
    """
    _check_graph_mode("npu_ops.dropout")
    x = tf.convert_to_tensor(x, name="x")
    if not x.dtype.is_floating:
        raise ValueError(f"x must be a floating point tensor. Got a {x.dtype.name} tensor "
                         "instead.")
    if isinstance(keep_prob, bool):
        raise ValueError(f"keep_prob must be a float value or a scalar tensor in the range "
                         f"(0, 1], got {keep_prob!r}")
    if isinstance(keep_prob, numbers.Real):
        if not 0 < keep_prob <= 1.0:
            raise ValueError("keep_prob must be a float value or a scalar tensor in the range "
                             f"(0, 1], got {keep_prob:g}")
        if keep_prob == 1.0:
            return x
    with tf.name_scope(name or "dropout"):
        keep = tf.convert_to_tensor(keep_prob, dtype=x.dtype, name="keep_prob")
        if keep.shape.rank is not None and keep.shape.rank != 0:
            raise ValueError(f"keep_prob must be a scalar tensor, got shape {keep.shape}")
        return tf.nn.dropout(x, rate=1.0 - keep, noise_shape=noise_shape, seed=seed)


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


def npu_onnx_graph_op(inputs, tout, model_path, name=None):
    """Run an ONNX model (op ``NpuOnnxGraphOp``): needs the cann backend (``BackendError``)."""
    raise BackendError(
        "NpuOnnxGraphOp needs the cann backend (an ONNX model runs inside a GeOp on the device); "
        "on the CPU reference, replace it by the equivalent TensorFlow computation "
        f"(model_path={model_path!r})")


def _not_implemented(function, op_type, instead):
    raise NotImplementedError(
        f"npu_ops.{function} builds the NPU custom op {op_type} of _tf_adapter.so, which this "
        f"pure-Python build does not provide; {instead}")


def LARS(inputs_w, inputs_g, weight_decay, hyperpara=0.001, epsilon=0.00001, name=None):
    """NPU LARS kernel (``LarsV2``): not provided (``NotImplementedError``)."""
    _not_implemented("LARS", "LarsV2", "compute the layer-wise trust ratio with TensorFlow ops "
                     "(tf.norm of weights and gradients) and scale the gradients yourself")


def LARSV2(input_weight, input_grad, weight_decay, learning_rate, hyperpara=0.001,
           epsilon=0.00001, use_clip=False, name=None):
    """NPU LARS kernel (``LarsV2Update``): not provided (``NotImplementedError``)."""
    _not_implemented("LARSV2", "LarsV2Update", "compute the layer-wise trust ratio with "
                     "TensorFlow ops (tf.norm of weights and gradients)")


def outfeed_dequeue_op(channel_name, output_types, output_shapes, name=None):
    """Device outfeed channel (``OutfeedDequeueOp``): not provided."""
    _not_implemented("outfeed_dequeue_op", "OutfeedDequeueOp", "fetch the tensors with "
                     "Session.run or tf.print them; there is no device channel on the host")


def outfeed_enqueue_op(channel_name, inputs, name=None):
    """Device outfeed channel (``OutfeedEnqueueOp``): not provided."""
    _not_implemented("outfeed_enqueue_op", "OutfeedEnqueueOp", "fetch the tensors with "
                     "Session.run or tf.print them; there is no device channel on the host")


def stop_outfeed_dequeue_op(channel_name, name=None):
    """Device outfeed channel (``StopOutfeedDequeueOp``): not provided."""
    _not_implemented("stop_outfeed_dequeue_op", "StopOutfeedDequeueOp",
                     "there is no device outfeed channel to stop")


def basic_lstm_cell(x, h, c, w, b, keep_prob, forget_bias, state_is_tuple, activation,
                    name=None):
    """Fused NPU LSTM cell (``BasicLSTMCell``): not provided."""
    _not_implemented("basic_lstm_cell", "BasicLSTMCell",
                     "use tf.compat.v1.nn.rnn_cell.BasicLSTMCell")


def adam_apply_one_assign(input0, input1, input2, input3, input4, mul0_x, mul1_x, mul2_x,
                          mul3_x, add2_y, name=None):
    """Fused NPU Adam step (``AdamApplyOneAssign``): not provided."""
    _not_implemented("adam_apply_one_assign", "AdamApplyOneAssign",
                     "use tf.compat.v1.train.AdamOptimizer")


def adam_apply_one_with_decay_assign(input0, input1, input2, input3, input4, mul0_x, mul1_x,
                                     mul2_x, mul3_x, mul4_x, add2_y, name=None):
    """Fused NPU AdamW step (``AdamApplyOneWithDecayAssign``): not provided."""
    _not_implemented("adam_apply_one_with_decay_assign", "AdamApplyOneWithDecayAssign",
                     "use tf.compat.v1.train.AdamOptimizer with explicit weight decay")


def k_means_centroids(x, y, sum_square_y, sum_square_x, use_actual_distance=False, name=None):
    """NPU k-means step (``KMeansCentroids``): not provided."""
    _not_implemented("k_means_centroids", "KMeansCentroids",
                     "compute the distances and centroid sums with TensorFlow ops")


def channel_get_next(channel_name, output_types, output_shapes):
    """Device data channel (``GetNext`` on a channel): not provided."""
    _not_implemented("channel_get_next", "GetNext (channel)",
                     "read the data with a tf.data iterator's get_next()")
