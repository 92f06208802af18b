"""NPU op wrappers (``npu_bridge.estimator.npu_ops``) built from TensorFlow ops.

The original wraps custom ops of ``_tf_adapter.so``; here every op is composed of TensorFlow ops
(``npu_bridge._kernels``), runs on any backend and has the gradient the original registers
(``docs/api-ops.md`` has the semantics of each):

* :func:`initialize_system` / :func:`shutdown_system` (``NPUInit`` / ``NPUShutdown``) build a
  ``NoOp`` named like the original op, carrying the string attribute ``_npu_adapter_op`` =
  ``"NPUInit"`` / ``"NPUShutdown"`` so the NPU session can recognise them.
* :func:`dropout` (``DropOutGenMask`` + ``DropOutDoMask``), :func:`LARS`, :func:`LARSV2`,
  :func:`basic_lstm_cell`, :func:`adam_apply_one_assign`,
  :func:`adam_apply_one_with_decay_assign` (they store their results into the variables they
  are given), :func:`scatter_elements`, :func:`k_means_centroids`.
* The gradient functions the original registers for its RNN ops, :func:`dynamic_rnn_grad`,
  :func:`dynamic_rnn_v2_grad`, :func:`dynamic_gru_v2_grad`, :func:`dynamic_augru_grad` and
  :func:`basic_lstm_cell_grad`, take the ``.op`` of an output of our op wrapper (or its
  :class:`~npu_bridge._kernels.common.NpuOpRecord`) and return what the original returns.
  TensorFlow's own ``tf.gradients`` through those ops already gives the same values.
* The outfeed ops, :func:`channel_get_next` and :func:`npu_onnx_graph_op` mean the device
  itself and raise :class:`~npu_adapter.errors.DeviceOnlyError` when they are built.

As in the original, ``NPUInit``, ``NPUShutdown``, ``dropout``, ``LARS``, ``LARSV2``,
``basic_lstm_cell``, the Adam ops and ``k_means_centroids`` raise ``RuntimeError`` in eager mode.
"""

import numbers

import tensorflow as tf

from npu_bridge._kernels import array as _array
from npu_bridge._kernels import kmeans as _kmeans
from npu_bridge._kernels import optim as _optim
from npu_bridge._kernels import random as _random
from npu_bridge._kernels import rnn as _rnn
from npu_bridge._kernels import system as _system
from npu_bridge._kernels.common import DEFAULT_GRAPH_SEED, check_graph_mode
from npu_bridge._kernels.gen import gen_npu_ops

__all__ = [
    "DEFAULT_GRAPH_SEED",
    "NPU_ADAPTER_OP_ATTR",
    "LARS",
    "LARSV2",
    "NPUInit",
    "NPUShutdown",
    "adam_apply_one_assign",
    "adam_apply_one_with_decay_assign",
    "basic_lstm_cell",
    "basic_lstm_cell_grad",
    "channel_get_next",
    "dropout",
    "dynamic_augru_grad",
    "dynamic_gru_v2_grad",
    "dynamic_rnn_grad",
    "dynamic_rnn_v2_grad",
    "gen_npu_ops",
    "initialize_system",
    "k_means_centroids",
    "npu_onnx_graph_op",
    "outfeed_dequeue_op",
    "outfeed_enqueue_op",
    "scatter_elements",
    "shutdown_system",
    "stop_outfeed_dequeue_op",
]

# The original's top-level imports that scripts can reach through this module (its TensorFlow
# internals, context, ops and random_seed, have no public module and are not re-exported).
_ORIGINAL_IMPORTS = (numbers,)

NPU_ADAPTER_OP_ATTR = _system.NPU_ADAPTER_OP_ATTR


def NPUInit(name=None):
    """The NPU system initialisation op (a marked ``NoOp`` named ``NPUInit`` by default)."""
    check_graph_mode("tf.NPUInit")
    return _system.npu_init(name)


def NPUShutdown(name=None):
    """The NPU system shutdown op (a marked ``NoOp`` named ``NPUShutdown`` by default)."""
    check_graph_mode("tf.NPUShutdown")
    return _system.npu_shutdown(name)


def initialize_system(name=None):
    """An op that initialises the NPU system when a session runs it (see :func:`NPUInit`)."""
    return NPUInit(name)


def shutdown_system(name=None):
    """An op that shuts the NPU system down when a session runs it (see :func:`NPUShutdown`)."""
    return NPUShutdown(name)


def LARS(inputs_w, inputs_g, weight_decay, hyperpara=0.001, epsilon=0.00001, name=None):
    """Layer-wise adaptive rate scaling of a list of gradients (op ``LARS``): for each weight
    ``w`` and gradient ``g``, ``coeff * (g + weight_decay * w)`` with
    ``coeff = hyperpara * |w| / (|g| + weight_decay * |w| + epsilon)``. Returns the list."""
    check_graph_mode("tf.LARS")
    return _optim.lars(inputs_w, inputs_g, weight_decay, hyperpara, epsilon, name)


def LARSV2(input_weight, input_grad, weight_decay, learning_rate, hyperpara=0.001,
           epsilon=0.00001, use_clip=False, name=None):
    """:func:`LARS` for one tensor (op ``LarsV2``); with ``use_clip`` the coefficient is
    ``clip(coeff / learning_rate, 0, 1)``."""
    check_graph_mode("tf.LARSV2")
    return _optim.lars_v2(input_weight, input_grad, weight_decay, learning_rate, hyperpara,
                          epsilon, use_clip, name)


def outfeed_dequeue_op(channel_name, output_types, output_shapes, name=None):
    """Device outfeed channel (``OutfeedDequeueOp``): ``DeviceOnlyError``."""
    return _system.outfeed_dequeue_op(channel_name, output_types, output_shapes, name)


def outfeed_enqueue_op(channel_name, inputs, name=None):
    """Device outfeed channel (``OutfeedEnqueueOp``): ``DeviceOnlyError``."""
    return _system.outfeed_enqueue_op(inputs, channel_name, name)


def stop_outfeed_dequeue_op(channel_name, name=None):
    """Device outfeed channel (``StopOutfeedDequeueOp``): ``DeviceOnlyError``."""
    return _system.stop_outfeed_dequeue_op(channel_name, name)


def dropout(x, keep_prob, noise_shape=None, seed=None, name=None):
    """Dropout with keep probability ``keep_prob`` (ops ``DropOutGenMask`` + ``DropOutDoMask``).

    Kept elements are scaled by ``1 / keep_prob``; ``noise_shape`` broadcasts the mask as in
    ``tf.nn.dropout``. As in the original: graph mode only (``RuntimeError`` in eager mode),
    ``x`` must be floating point, a Python ``keep_prob`` must be in (0, 1] (``ValueError``) and
    ``keep_prob == 1`` returns ``x`` unchanged; a tensor ``keep_prob`` must be a scalar. With a
    graph or op seed the masks are the same in every session (see ``docs/api-ops.md``).
    """
    check_graph_mode("npu_ops.dropout")
    x = _random.check_dropout_args("dropout", x, keep_prob)
    if not isinstance(keep_prob, (tf.Tensor, tf.Variable)) and keep_prob == 1.0:
        return x
    return _random.dropout_with_mask(x, keep_prob, noise_shape, seed, name or "dropout",
                                     _random.drop_out_gen_mask, _random.drop_out_do_mask)


def basic_lstm_cell(x, h, c, w, b, keep_prob, forget_bias, state_is_tuple, activation,
                    name=None):
    """One fused LSTM step (op ``BasicLSTMCell``): returns ``(ct, ht, it, jt, ft, ot, tanhct)``
    for the inputs ``x [B, I]``, state ``h``/``c`` ``[B, H]``, weight ``w [I + H, 4H]`` (gates
    ``i, j, f, o``) and bias ``b [4H]``."""
    check_graph_mode("tf.basic_lstm_cell")
    return _rnn.basic_lstm_cell(x, h, c, w, b, keep_prob, forget_bias, state_is_tuple,
                                activation, name)


basic_lstm_cell_grad = _rnn.basic_lstm_cell_grad
dynamic_rnn_grad = _rnn.dynamic_rnn_grad
dynamic_rnn_v2_grad = _rnn.dynamic_rnn_v2_grad
dynamic_gru_v2_grad = _rnn.dynamic_gru_v2_grad
dynamic_augru_grad = _rnn.dynamic_augru_grad


def adam_apply_one_assign(input0, input1, input2, input3, input4, mul0_x, mul1_x, mul2_x,
                          mul3_x, add2_y, name=None):
    """One fused Adam step stored in place (op ``AdamApplyOneAssign``); ``input1`` (v),
    ``input2`` (m) and ``input3`` (the weight) must be variables or reads of variables. Returns
    the operation."""
    check_graph_mode("tf.adam_apply_one_assign")
    return _optim.adam_apply_one_assign(input0, input1, input2, input3, input4, mul0_x, mul1_x,
                                        mul2_x, mul3_x, add2_y, name)


def adam_apply_one_with_decay_assign(input0, input1, input2, input3, input4, mul0_x, mul1_x,
                                     mul2_x, mul3_x, mul4_x, add2_y, name=None):
    """:func:`adam_apply_one_assign` with decoupled weight decay ``mul4_x`` (op
    ``AdamApplyOneWithDecayAssign``)."""
    check_graph_mode("tf.adam_apply_one_with_decay_assign")
    return _optim.adam_apply_one_with_decay_assign(input0, input1, input2, input3, input4,
                                                   mul0_x, mul1_x, mul2_x, mul3_x, mul4_x,
                                                   add2_y, name)


scatter_elements = _array.scatter_elements


def k_means_centroids(x, y, sum_square_y, sum_square_x, use_actual_distance=False, name=None):
    """One k-means assignment step (op ``KMeansCentroids``, or ``KMeansCentroidsV2`` when
    ``sum_square_x`` is None): returns ``(segment_sum, segment_count, kmean_total_sum)``.
    As in the original, ``use_actual_distance`` follows whether ``sum_square_x`` is given."""
    check_graph_mode("tf.k_means_centroids")
    if sum_square_x is not None:
        return _kmeans.k_means_centroids(x, y, sum_square_y, sum_square_x, True, name)
    return _kmeans.k_means_centroids_v2(x, y, sum_square_y, False, name)


def npu_onnx_graph_op(inputs, tout, model_path, name=None):
    """Run an ONNX model (op ``NpuOnnxGraphOp``): ``DeviceOnlyError``."""
    return _system.npu_onnx_graph_op(inputs, tout, model_path, name)


def channel_get_next(channel_name, output_types, output_shapes):
    """Read from a device data channel (``GetNext``): ``DeviceOnlyError``."""
    return _system.get_next(output_types, output_shapes, channel_name)
