"""Pass-through loss-scale managers: TensorFlow's own loss scales."""

import tensorflow as tf

__all__ = ["ExponentialUpdateLossScaleManager", "FixedLossScaleManager"]


def FixedLossScaleManager(loss_scale, enable_overflow_check=True):
    """TensorFlow's fixed loss scale."""
    del enable_overflow_check
    return tf.compat.v1.mixed_precision.FixedLossScale(loss_scale)


def ExponentialUpdateLossScaleManager(init_loss_scale, incr_every_n_steps,
                                      decr_every_n_nan_or_inf=2, incr_ratio=2, decr_ratio=0.8):
    """TensorFlow's dynamic loss scale (grows by ``incr_ratio`` after ``incr_every_n_steps``
    finite steps, shrinks on a non-finite one)."""
    del decr_every_n_nan_or_inf, decr_ratio
    return tf.compat.v1.mixed_precision.DynamicLossScale(
        initial_loss_scale=init_loss_scale, increment_period=incr_every_n_steps,
        multiplier=incr_ratio)
