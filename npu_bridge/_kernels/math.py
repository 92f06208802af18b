"""Element-wise and normalisation ops of the NPU AI core: ``Gelu``, ``FastGelu``,
``FastGeluV2``, ``Centralization``, ``PRelu``, ``FusedLayerNorm``, ``NonZero`` and
``NonZeroWithValue``, with the gradients the original registers. Formulas in
``docs/api-ops.md``.
"""

import collections
import math

import tensorflow as tf

from .common import GRAD_ALL, GRAD_NONE, finish_op, op_record

__all__ = [
    "GELU_COEFF",
    "centralization",
    "fast_gelu",
    "fast_gelu_grad",
    "fast_gelu_v2",
    "fused_layer_norm",
    "fused_layer_norm_grad",
    "gelu",
    "gelu_grad",
    "non_zero",
    "non_zero_with_value",
    "p_relu",
    "p_relu_grad",
    "prelu_grad",
]

GELU_COEFF = 0.044715
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_FAST_GELU_ALPHA = 1.702
# FastGeluV2 approximates erf(x / sqrt(2)) by a clipped parabola (CANN's constants).
_FAST_GELU_V2_SCALE = 0.7071
_FAST_GELU_V2_CLIP = 1.769
_FAST_GELU_V2_HALF_A = -0.1444

NonZeroWithValue = collections.namedtuple("NonZeroWithValue", ["value", "index", "count"])
FusedLayerNorm = collections.namedtuple("FusedLayerNorm", ["y", "mean", "variance"])


def _float_input(x, op_type):
    x = tf.convert_to_tensor(x, name="x")
    if not x.dtype.is_floating:
        raise TypeError(f"{op_type}: x must be a floating point tensor, got {x.dtype.name}")
    return x


# ---- GELU family -----------------------------------------------------------------------------


def _gelu_inner(x):
    return _SQRT_2_OVER_PI * (x + GELU_COEFF * x * x * x)


def gelu(x, name=None):
    """``Gelu``, the tanh approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    with tf.name_scope(name or "Gelu"):
        x = _float_input(x, "Gelu")
        return 0.5 * x * (1.0 + tf.tanh(_gelu_inner(x)))


def gelu_grad(dy, x, y=None, name=None):
    """``GeluGrad``: ``dy * d gelu(x) / dx``; ``y`` (the forward output) is not needed."""
    with tf.name_scope(name or "GeluGrad"):
        x = _float_input(x, "GeluGrad")
        dy = tf.convert_to_tensor(dy, dtype=x.dtype, name="dy")
        t = tf.tanh(_gelu_inner(x))
        d_inner = _SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_COEFF * x * x)
        return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner)


def fast_gelu(features, name=None):
    """``FastGelu``: ``x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|))`` (= ``x *
    sigmoid(1.702 x)``, written so that no exponential overflows)."""
    with tf.name_scope(name or "FastGelu"):
        x = _float_input(features, "FastGelu")
        abs_x = tf.abs(x)
        return x / (1.0 + tf.exp(-_FAST_GELU_ALPHA * abs_x)) * tf.exp(
            0.5 * _FAST_GELU_ALPHA * (x - abs_x))


def fast_gelu_grad(gradients, features, name=None):
    """``FastGeluGrad``: ``gradients * d fast_gelu(x) / dx`` with ``s = sigmoid(1.702 x)``:
    ``s + 1.702 x s (1 - s)``."""
    with tf.name_scope(name or "FastGeluGrad"):
        x = _float_input(features, "FastGeluGrad")
        dy = tf.convert_to_tensor(gradients, dtype=x.dtype, name="gradients")
        s = tf.sigmoid(_FAST_GELU_ALPHA * x)
        return dy * (s + _FAST_GELU_ALPHA * x * s * (1.0 - s))


def fast_gelu_v2(x, name=None):
    """``FastGeluV2``: ``x * (sgn(x) * (a/2 * (min(|0.7071 x|, 1.769) - 1.769)^2 + 0.5) +
    0.5)`` with ``a/2 = -0.1444`` (a parabola fit of ``0.5 * erf(x / sqrt(2))``)."""
    with tf.name_scope(name or "FastGeluV2"):
        x = _float_input(x, "FastGeluV2")
        clipped = tf.minimum(tf.abs(_FAST_GELU_V2_SCALE * x), _FAST_GELU_V2_CLIP)
        half_erf = _FAST_GELU_V2_HALF_A * tf.square(clipped - _FAST_GELU_V2_CLIP) + 0.5
        sign = tf.where(x >= 0, tf.ones_like(x), -tf.ones_like(x))
        return x * (sign * half_erf + 0.5)


# ---- Centralization, PRelu -------------------------------------------------------------------


def _axes_list(axes, rank, op_type):
    if isinstance(axes, int) and not isinstance(axes, bool):
        axes = [axes]
    try:
        axes = [int(a) for a in axes]
    except TypeError:
        raise TypeError(f"{op_type}: axes must be a list of ints, got {axes!r}") from None
    if rank is not None:
        bad = [a for a in axes if not -rank <= a < rank]
        if bad:
            raise ValueError(f"{op_type}: axes {bad} are out of range for a rank-{rank} input")
        axes = sorted({a % rank for a in axes})
    return axes


def centralization(x, axes, name=None):
    """``Centralization``: ``x - reduce_mean(x, axes, keepdims=True)``."""
    with tf.name_scope(name or "Centralization"):
        x = _float_input(x, "Centralization")
        axes = _axes_list(axes, x.shape.rank, "Centralization")
        return x - tf.reduce_mean(x, axis=axes, keepdims=True)


def _prelu_weight(x, weight):
    """``weight`` shaped to broadcast against ``x``: a scalar or one element applies to all, a
    vector of ``C`` to the channel axis 1 (CANN's NCHW convention), otherwise the trailing
    dimensions of ``x`` (the Keras layer's ``input_shape[1:]``)."""
    rank_x, rank_w = x.shape.rank, weight.shape.rank
    if rank_w == 0 or weight.shape.num_elements() == 1:
        return tf.reshape(weight, [])
    if rank_w == 1 and rank_x is not None and rank_x >= 2:
        channels = tf.compat.dimension_value(x.shape[1])
        size = tf.compat.dimension_value(weight.shape[0])
        if None not in (channels, size) and channels != size:
            raise ValueError(f"PRelu: a weight of {size} elements must match the channel axis 1 "
                             f"of x, which has {channels} (x shape {x.shape})")
        return tf.reshape(weight, [-1] + [1] * (rank_x - 2))
    return weight


def p_relu(x, weight, name=None):
    """``PRelu``: ``x`` where ``x > 0``, else ``weight * x`` (``weight`` broadcast as described
    in :func:`_prelu_weight`)."""
    with tf.name_scope(name or "PRelu"):
        x = _float_input(x, "PRelu")
        weight = tf.convert_to_tensor(weight, dtype=x.dtype, name="weight")
        y = tf.where(x > 0, x, _prelu_weight(x, weight) * x)
        return finish_op("PRelu", [x, weight], [y], {})[0]


def p_relu_grad(grads, features, weights, name=None):
    """``PReluGrad``: ``(dx, da)`` of :func:`p_relu` for the upstream ``grads``."""
    with tf.name_scope(name or "PReluGrad"):
        x = _float_input(features, "PReluGrad")
        weight = tf.convert_to_tensor(weights, dtype=x.dtype, name="weights")
        dy = tf.convert_to_tensor(grads, dtype=x.dtype, name="grads")
        positive = x > 0
        dx = tf.where(positive, dy, _prelu_weight(x, weight) * dy)
        da_full = tf.where(positive, tf.zeros_like(x), x * dy)
        return dx, _reduce_to_shape(da_full, weight)


def _reduce_to_shape(full, like):
    """Sum ``full`` over the axes that :func:`_prelu_weight` broadcast ``like`` along."""
    rank_full, rank_like = full.shape.rank, like.shape.rank
    if rank_like == 0 or like.shape.num_elements() == 1:
        return tf.reshape(tf.reduce_sum(full), tf.shape(like))
    if rank_like == 1 and rank_full is not None and rank_full >= 2:
        axes = [0] + list(range(2, rank_full))
        return tf.reduce_sum(full, axis=axes)
    lead = rank_full - rank_like
    summed = tf.reduce_sum(full, axis=list(range(lead))) if lead else full
    keep = [i for i, d in enumerate(like.shape.as_list()) if d == 1]
    return tf.reduce_sum(summed, axis=keep, keepdims=True) if keep else summed


def prelu_grad(op, grad):
    """The original's gradient of ``PRelu``: ``[dx, da]`` for an op made by :func:`p_relu`."""
    record = op_record(op, "PRelu")
    x, weight = record.inputs
    return list(p_relu_grad(grad, x, weight))


# ---- FusedLayerNorm --------------------------------------------------------------------------


def _norm_axis(axis, rank, what):
    if rank is None:
        raise ValueError(f"FusedLayerNorm: the rank of x must be known to use {what}")
    if not -rank <= axis < rank:
        raise ValueError(f"FusedLayerNorm: {what}={axis} is out of range for a rank-{rank} x")
    return axis % rank


def fused_layer_norm(x, gamma, beta, begin_norm_axis=0, begin_params_axis=0, epsilon=1e-7,
                     name=None):
    """``FusedLayerNorm``: normalise over axes ``begin_norm_axis..`` and scale/shift with
    ``gamma``/``beta`` of shape ``x.shape[begin_params_axis:]``.

    Returns ``(y, mean, variance)``; ``mean`` and ``variance`` keep the normalised axes as 1.
    The original's gradient uses only the gradient of ``y``.
    """
    with tf.name_scope(name or "FusedLayerNorm"):
        x = _float_input(x, "FusedLayerNorm")
        gamma = tf.convert_to_tensor(gamma, dtype=x.dtype, name="gamma")
        beta = tf.convert_to_tensor(beta, dtype=x.dtype, name="beta")
        rank = x.shape.rank
        norm_axis = _norm_axis(int(begin_norm_axis), rank, "begin_norm_axis")
        params_axis = _norm_axis(int(begin_params_axis), rank, "begin_params_axis")
        for pname, param in (("gamma", gamma), ("beta", beta)):
            if param.shape.rank is not None and param.shape.rank != rank - params_axis:
                raise ValueError(f"FusedLayerNorm: {pname} must have the shape of "
                                 f"x.shape[{params_axis}:] = {x.shape[params_axis:]}, got "
                                 f"{param.shape}")
        axes = list(range(norm_axis, rank))
        mean = tf.reduce_mean(x, axis=axes, keepdims=True)
        centred = x - mean
        variance = tf.reduce_mean(tf.square(centred), axis=axes, keepdims=True)
        y = centred * tf.math.rsqrt(variance + epsilon) * gamma + beta
        attrs = {"begin_norm_axis": int(begin_norm_axis),
                 "begin_params_axis": int(begin_params_axis), "epsilon": float(epsilon)}
        final = finish_op("FusedLayerNorm", [x, gamma, beta], [y, mean, variance], attrs,
                          grad_rules=[GRAD_ALL, GRAD_NONE, GRAD_NONE])
        return FusedLayerNorm(*final)


def fused_layer_norm_grad(dy, x, variance, mean, gamma, name=None):
    """``FusedLayerNormGrad``: ``(pd_x, pd_gamma, pd_beta)`` of the normalisation whose
    statistics are ``mean``/``variance`` (the normalised axes are where they are 1, the
    parameter axes are ``gamma``'s, epsilon is the default ``1e-7``, as in the kernel)."""
    with tf.name_scope(name or "FusedLayerNormGrad"):
        x = _float_input(x, "FusedLayerNormGrad")
        dy = tf.convert_to_tensor(dy, dtype=x.dtype)
        variance = tf.convert_to_tensor(variance, dtype=x.dtype)
        mean = tf.convert_to_tensor(mean, dtype=x.dtype)
        gamma = tf.convert_to_tensor(gamma, dtype=x.dtype)
        rank = x.shape.rank
        if rank is None or variance.shape.rank != rank:
            raise ValueError("FusedLayerNormGrad: x and variance must have the same known rank, "
                             f"got {x.shape} and {variance.shape}")
        # The normalised axes are the trailing ones where the statistics have size 1.
        begin = rank
        while begin > 0 and variance.shape.as_list()[begin - 1] == 1:
            begin -= 1
        axes = list(range(min(begin, rank - 1), rank))
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype)
        inv_std = tf.math.rsqrt(variance + 1e-7)
        x_hat = (x - mean) * inv_std
        lead = list(range(rank - gamma.shape.rank))
        pd_gamma = tf.reduce_sum(dy * x_hat, axis=lead)
        pd_beta = tf.reduce_sum(dy, axis=lead)
        g = dy * gamma
        pd_x = inv_std / count * (count * g - tf.reduce_sum(g, axis=axes, keepdims=True)
                                  - x_hat * tf.reduce_sum(g * x_hat, axis=axes, keepdims=True))
        return pd_x, pd_gamma, pd_beta


# ---- NonZero ---------------------------------------------------------------------------------


def _check_index_type(output_type, op_type):
    output_type = tf.as_dtype(output_type)
    if output_type not in (tf.int32, tf.int64):
        raise TypeError(f"{op_type}: output_type must be int32 or int64, got {output_type.name}")
    return output_type


def _nonzero_mask(x):
    return x if x.dtype == tf.bool else tf.not_equal(x, tf.zeros([], dtype=x.dtype))


def non_zero(x, transpose=False, output_type=tf.int64, name=None):
    """``NonZero``: the coordinates of the non-zero elements of ``x`` in row-major order,
    ``[count, rank]`` (as PyTorch's ``nonzero``), or ``[rank, count]`` with ``transpose``."""
    with tf.name_scope(name or "NonZero"):
        x = tf.convert_to_tensor(x, name="x")
        output_type = _check_index_type(output_type, "NonZero")
        coords = tf.cast(tf.where(_nonzero_mask(x)), output_type)
        return tf.transpose(coords) if transpose else coords


def non_zero_with_value(x, transpose=False, output_type=tf.int32, name=None):
    """``NonZeroWithValue`` for a 2-D ``x`` of ``R x C`` elements: fixed-size outputs whose
    first ``count`` entries are valid (the rest zero).

    ``value`` (``[R*C]``): the non-zero values in row-major order. ``index`` (``[2*R*C]``): with
    ``transpose`` the row indices in ``[0, R*C)`` and the column indices in ``[R*C, 2*R*C)``
    (coordinate-major, the device's layout); without, ``(row, column)`` pairs. ``count``
    (``[1]``): the number of non-zero elements.
    """
    with tf.name_scope(name or "NonZeroWithValue"):
        x = tf.convert_to_tensor(x, name="x")
        output_type = _check_index_type(output_type, "NonZeroWithValue")
        if x.shape.rank is not None and x.shape.rank != 2:
            raise ValueError(f"NonZeroWithValue: x must be 2-D, got shape {x.shape}")
        coords = tf.where(_nonzero_mask(x))  # [count, 2] int64
        count = tf.shape(coords, out_type=tf.int64)[0]
        size = tf.size(x, out_type=tf.int64)
        pad = size - count
        values = tf.pad(tf.gather_nd(x, coords), tf.stack([tf.stack([tf.constant(0, tf.int64),
                                                                     pad])]))
        coords = tf.cast(coords, output_type)
        if transpose:
            parts = [tf.pad(coords[:, k], tf.stack([tf.stack([tf.constant(0, tf.int64), pad])]))
                     for k in range(2)]
            index = tf.concat(parts, axis=0)
        else:
            index = tf.pad(tf.reshape(coords, [-1]),
                           tf.stack([tf.stack([tf.constant(0, tf.int64), 2 * pad])]))
        static = x.shape.num_elements()
        if static is not None:
            values.set_shape([static])
            index.set_shape([2 * static])
        count = tf.reshape(tf.cast(count, output_type), [1])
        return NonZeroWithValue(values, index, count)
