"""Dropout as the NPU does it: a mask op (``DropOutGenMask``, ``...V3``, ``...V4``) and an apply
op (``DropOutDoMask``, ``DropOutDoMaskV3``).

The device packs the mask into bits; here the mask is one element per position (``uint8`` 0/1,
``bool`` for ``V4``) of the noise shape, which the apply op broadcasts against ``x``. The mask is
drawn by TensorFlow's stateful ``RandomUniform`` with the original's two seeds, so a graph with a
graph seed or an op seed gives the same sequence of masks in every session, and a new mask each
run, as the device does. An element is kept when its uniform sample is below ``keep_prob`` and
then scaled by ``1 / keep_prob``; the gradient of the apply op applies the same mask.
"""

import numbers

import tensorflow as tf

from .common import get_seed

__all__ = [
    "check_dropout_args",
    "drop_out_do_mask",
    "drop_out_do_mask_v3",
    "drop_out_gen_mask",
    "drop_out_gen_mask_v3",
    "drop_out_gen_mask_v4",
    "dropout_with_mask",
]


def _uniform(shape, seed, seed2):
    shape = tf.convert_to_tensor(shape, name="shape")
    if not shape.dtype.is_integer:
        raise TypeError(f"the mask shape must be an int32/int64 vector, got {shape.dtype.name}")
    return tf.raw_ops.RandomUniform(shape=shape, dtype=tf.float32, seed=int(seed or 0),
                                    seed2=int(seed2 or 0))


def _keep_scalar(prob):
    prob = tf.convert_to_tensor(prob, name="prob")
    if prob.shape.rank not in (None, 0):
        raise ValueError(f"keep_prob must be a scalar, got shape {prob.shape}")
    if prob.shape.rank is None:
        # A placeholder of unknown shape (tf.placeholder(tf.float32), the usual TF1 keep_prob):
        # the ops take a scalar, so say so; otherwise the mask, and with it the dropout's
        # result, would lose x's static shape (layers after it need the last dimension).
        prob = tf.reshape(prob, [], name="keep_prob_scalar")
    return prob


def drop_out_gen_mask(shape, prob, seed=0, seed2=0, name=None):
    """``DropOutGenMask``: a ``uint8`` mask of ``shape``, 1 with probability ``prob``."""
    with tf.name_scope(name or "DropOutGenMask"):
        prob = tf.cast(_keep_scalar(prob), tf.float32)
        return tf.cast(_uniform(shape, seed, seed2) < prob, tf.uint8)


def drop_out_gen_mask_v3(shape, prob, seed=0, seed2=0, name=None):
    """``DropOutGenMaskV3``: as :func:`drop_out_gen_mask` (the device lays the bits out
    differently)."""
    return drop_out_gen_mask(shape, prob, seed, seed2, name=name or "DropOutGenMaskV3")


def drop_out_gen_mask_v4(shape, prob, seed=0, seed2=0, dtype=tf.bool, name=None):
    """``DropOutGenMaskV4``: a mask of ``shape`` and ``dtype`` (``bool``, or ``uint8``)."""
    dtype = tf.as_dtype(dtype)
    if dtype not in (tf.bool, tf.uint8):
        raise TypeError(f"DropOutGenMaskV4: output_dtype must be bool (or uint8), got "
                        f"{dtype.name}")
    with tf.name_scope(name or "DropOutGenMaskV4"):
        prob = tf.cast(_keep_scalar(prob), tf.float32)
        keep = _uniform(shape, seed, seed2) < prob
        return keep if dtype == tf.bool else tf.cast(keep, dtype)


def drop_out_do_mask(x, mask, keep_prob, name=None):
    """``DropOutDoMask``: ``x * mask / keep_prob`` (``mask`` broadcast against ``x``)."""
    with tf.name_scope(name or "DropOutDoMask"):
        x = tf.convert_to_tensor(x, name="x")
        keep = tf.cast(_keep_scalar(keep_prob), x.dtype)
        return x * tf.cast(mask, x.dtype) * (1.0 / keep)


def drop_out_do_mask_v3(x, mask, keep_prob, name=None):
    """``DropOutDoMaskV3``: as :func:`drop_out_do_mask`."""
    return drop_out_do_mask(x, mask, keep_prob, name=name or "DropOutDoMaskV3")


def _noise_shape(x, noise_shape):
    if noise_shape is None:
        return tf.shape(x)
    if isinstance(noise_shape, tf.Tensor):
        return noise_shape
    try:
        dims = tf.TensorShape(noise_shape)
    except (TypeError, ValueError):
        return noise_shape
    if dims.rank is not None and dims.rank == x.shape.rank and not dims.is_fully_defined():
        # None dims take x's size, as tf.nn.dropout does.
        known = [d if d is not None else x.shape[i] for i, d in enumerate(dims.as_list())]
        if all(d is not None for d in known):
            return known
        shape = tf.shape(x)
        return tf.stack([d if d is not None else shape[i] for i, d in enumerate(known)])
    return dims.as_list() if dims.is_fully_defined() else noise_shape


def check_dropout_args(api, x, keep_prob):
    """The original's argument checks (``x`` floating point, a Python ``keep_prob`` in
    ``(0, 1]``); returns ``x`` as a tensor."""
    x = tf.convert_to_tensor(x, name="x")
    if not x.dtype.is_floating:
        raise ValueError(f"{api}: x must be a floating point tensor. Got a {x.dtype.name} tensor "
                         "instead.")
    if isinstance(keep_prob, bool):
        raise ValueError(f"{api}: keep_prob must be a float value or a scalar tensor in the "
                         f"range (0, 1], got {keep_prob!r}")
    if isinstance(keep_prob, numbers.Real) and not 0 < keep_prob <= 1.0:
        raise ValueError(f"{api}: keep_prob must be a float value or a scalar tensor in the "
                         f"range (0, 1], got {keep_prob:g}")
    return x


def dropout_with_mask(x, keep_prob, noise_shape, seed, name, gen_mask, do_mask):
    """Dropout of ``x`` as the original builds it: ``do_mask(x, gen_mask(...), keep_prob)``."""
    with tf.name_scope(name or "dropout"):
        seed1, seed2 = get_seed(seed)
        keep = tf.convert_to_tensor(keep_prob, dtype=x.dtype, name="keep_prob")
        if keep.shape.rank not in (None, 0):
            raise ValueError(f"keep_prob must be a scalar tensor, got shape {keep.shape}")
        keep = _keep_scalar(keep)
        mask = gen_mask(_noise_shape(x, noise_shape), keep, seed1, seed2)
        result = do_mask(x, mask, keep)
        if not tf.executing_eagerly():
            # The apply op's output has x's shape (as tf.nn.dropout's), also when the mask's
            # static shape is unknown (a noise_shape tensor).
            result.set_shape(x.shape)
        return result
