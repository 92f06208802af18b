"""Loss scale managers for mixed precision (``npu_bridge.estimator.npu.npu_loss_scale_manager``).

The original derives from ``tf.contrib.mixed_precision`` managers, which TensorFlow 2 no longer
has; these are self-contained with the same interface (``get_loss_scale()``,
``update_loss_scale(finite_grads)``) and the original's update rules.
"""

import numbers

import tensorflow as tf

from npu_bridge.estimator.npu import util

__all__ = ["ExponentialUpdateLossScaleManager", "FixedLossScaleManager", "LossScaleManager"]

_FLOAT32_MAX = 3.4e38


class LossScaleManager:
    """Interface: ``get_loss_scale()`` -> float32 scalar tensor, ``update_loss_scale(finite)`` ->
    op updating the scale after a step whose gradients were (not) all finite."""

    def get_loss_scale(self):
        """The loss scale as a float32 scalar tensor."""
        raise NotImplementedError("LossScaleManager.get_loss_scale")

    def update_loss_scale(self, finite_grads):
        """An op that updates the loss scale given the bool scalar ``finite_grads``."""
        raise NotImplementedError("LossScaleManager.update_loss_scale")

    def get_enable_overflow_check(self):
        """Whether the optimizer skips steps whose gradients overflow (always, by default)."""
        return True


def _check_number(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < minimum:
        raise ValueError(f"{name} must be a number >= {minimum}, got {value!r}")


class FixedLossScaleManager(LossScaleManager):
    """A constant loss scale (>= 1). ``enable_overflow_check`` False makes
    ``NPULossScaleOptimizer`` apply every step, even with inf/nan gradients."""

    def __init__(self, loss_scale, enable_overflow_check=True):
        if isinstance(loss_scale, bool) or not isinstance(loss_scale, numbers.Real) \
                or loss_scale < 1:
            raise ValueError(f"loss scale must be at least 1, got {loss_scale!r}")
        util.check_bool_type(enable_overflow_check, "enable_overflow_check")
        self._loss_scale_value = float(loss_scale)
        self._enable_overflow_check = enable_overflow_check

    def get_loss_scale(self):
        """The fixed loss scale (a float32 constant)."""
        return tf.constant(self._loss_scale_value, dtype=tf.float32, name="loss_scale")

    def update_loss_scale(self, finite_grads):
        """No update: the scale is fixed (a ``NoOp``)."""
        return tf.no_op(name="update_loss_scale")

    def get_enable_overflow_check(self):
        """``enable_overflow_check`` as given."""
        return self._enable_overflow_check


class ExponentialUpdateLossScaleManager(LossScaleManager):
    """Loss scale that grows by ``incr_ratio`` after ``incr_every_n_steps`` consecutive finite
    steps (unless that would exceed the float32 range) and shrinks by ``decr_ratio`` (not below
    1) after ``decr_every_n_nan_or_inf`` consecutive non-finite steps; each change resets both
    counters, a non-finite step resets the finite count.

    The scale and the two counters are non-trainable variables created in the default graph
    when the manager is built.
    """

    def __init__(self, init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf=2,
                 incr_ratio=2, decr_ratio=0.8):
        _check_number(init_loss_scale, "init_loss_scale", 1)
        util.check_positive_integer(incr_every_n_steps, "incr_every_n_steps")
        util.check_positive_integer(decr_every_n_nan_or_inf, "decr_every_n_nan_or_inf")
        _check_number(incr_ratio, "incr_ratio", 1)
        if isinstance(decr_ratio, bool) or not isinstance(decr_ratio, numbers.Real) \
                or not 0 < decr_ratio <= 1:
            raise ValueError(f"decr_ratio must be a number in (0, 1], got {decr_ratio!r}")
        self._incr_every_n_steps = incr_every_n_steps
        self._decr_every_n_nan_or_inf = decr_every_n_nan_or_inf
        self._incr_ratio = float(incr_ratio)
        self._decr_ratio = float(decr_ratio)
        self._loss_scale = tf.compat.v1.Variable(
            float(init_loss_scale), dtype=tf.float32, trainable=False, name="loss_scale",
            use_resource=True)
        self._num_good_steps = tf.compat.v1.Variable(
            0, dtype=tf.int32, trainable=False, name="good_steps", use_resource=True)
        self._num_bad_steps = tf.compat.v1.Variable(
            0, dtype=tf.int32, trainable=False, name="bad_steps", use_resource=True)

    def get_loss_scale(self):
        """The current loss scale (reads the variable)."""
        return tf.convert_to_tensor(self._loss_scale)

    def update_loss_scale(self, finite_grads):
        """Update the scale and counters from ``finite_grads`` (one op)."""
        with tf.name_scope("update_loss_scale"):
            finite = tf.convert_to_tensor(finite_grads, dtype=tf.bool)
            scale = tf.convert_to_tensor(self._loss_scale)
            good = tf.convert_to_tensor(self._num_good_steps) + 1
            bad = tf.convert_to_tensor(self._num_bad_steps)
            increase = tf.logical_and(finite, good >= self._incr_every_n_steps)
            decrease = tf.logical_and(tf.logical_not(finite),
                                      bad + 1 >= self._decr_every_n_nan_or_inf)
            can_grow = scale < _FLOAT32_MAX / self._incr_ratio
            new_scale = tf.where(
                tf.logical_and(increase, can_grow), scale * self._incr_ratio,
                tf.where(decrease, tf.maximum(1.0, scale * self._decr_ratio), scale))
            zero = tf.zeros_like(good)
            new_good = tf.where(tf.logical_and(finite, tf.logical_not(increase)), good, zero)
            new_bad = tf.where(finite, tf.where(increase, zero, bad),
                               tf.where(decrease, zero, bad + 1))
            return tf.group(self._loss_scale.assign(new_scale),
                            self._num_good_steps.assign(new_good),
                            self._num_bad_steps.assign(new_bad))
