"""Loss scaling optimizer (``npu_bridge.estimator.npu.npu_loss_scale_optimizer``).

``NPULossScaleOptimizer`` multiplies the loss by the manager's loss scale, divides the
gradients by it, applies them only when they are all finite, and lets the manager update the
scale. The original detects overflow with the NPU float-status ops (``NpuAllocFloatStatus``,
``NpuGetFloatStatus``, ``NpuClearFloatStatus``), which flag any overflow on the device during the
step; here the check is ``tf.math.is_finite`` on every gradient, computed in the graph, which
catches the same inf/nan results once they reach the gradients (an fp16 overflow anywhere in the
backward pass does; an overflow in a value that never reaches a gradient is not seen).

With ``is_distributed`` the overflow flag is all-reduced (max) over the world group before the
decision, as the original all-reduces the float status: an overflow on one rank skips the step
and updates the loss scale on every rank, so the ranks' weights and scales stay identical.
"""

import tensorflow as tf

from npu_adapter.distributed import collectives, groups
from npu_bridge._kernels.gen import gen_npu_ops  # noqa: F401 - a module attribute of the original
from npu_bridge.estimator.npu.npu_loss_scale_manager import LossScaleManager

__all__ = ["NPULossScaleOptimizer", "agreed_finite", "all_finite", "down_scale", "scaled_loss"]

_Optimizer = tf.compat.v1.train.Optimizer


def scaled_loss(loss, loss_scale):
    """``loss * loss_scale`` (``loss`` may be a callable, as in ``Optimizer.minimize``)."""
    value = loss() if callable(loss) else loss
    return value * tf.cast(loss_scale, value.dtype.base_dtype)


def down_scale(grads_and_vars, loss_scale):
    """Divide every gradient by ``loss_scale`` (``IndexedSlices`` keep their structure)."""
    result = []
    inverse = tf.math.reciprocal(tf.cast(loss_scale, tf.float32))
    for grad, var in grads_and_vars:
        if grad is None:
            result.append((grad, var))
        elif isinstance(grad, tf.IndexedSlices):
            values = grad.values * tf.cast(inverse, grad.values.dtype.base_dtype)
            result.append((tf.IndexedSlices(values, grad.indices, grad.dense_shape), var))
        else:
            result.append((grad * tf.cast(inverse, grad.dtype.base_dtype), var))
    return result


def all_finite(grads):
    """A bool scalar: True when no gradient holds an inf or nan (True for no gradients)."""
    checks = []
    for grad in grads:
        if grad is None:
            continue
        values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
        checks.append(tf.reduce_all(tf.math.is_finite(values)))
    if not checks:
        return tf.constant(True)
    return tf.reduce_all(tf.stack(checks), name="is_overall_finite")


def agreed_finite(finite, distributed):
    """``finite`` (a bool scalar) or, when ``distributed``, True only if it is True on every
    rank of the world group (an all-reduce max of the overflow flag)."""
    if not distributed:
        return finite
    world = groups.get_group(groups.WORLD_GROUP, "is_distributed loss scaling")
    if world.size == 1:
        return finite
    with tf.name_scope("overflow_status"):
        overflow = tf.cast(tf.logical_not(finite), tf.int32)
        any_overflow = collectives.all_reduce(overflow, world, "max", name="HcomAllReduce")
        return tf.equal(any_overflow, 0, name="is_overall_finite")


def apply_if_finite(optimizer, grads_and_vars, loss_scale_manager, global_step, name,
                    distributed=False):
    """Apply ``grads_and_vars`` with ``optimizer`` only when they are all finite (on every rank
    when ``distributed``), and update the loss scale; one grouped op."""
    grads_and_vars = list(grads_and_vars)
    finite = agreed_finite(all_finite([grad for grad, _ in grads_and_vars]), distributed)

    def apply():
        with tf.control_dependencies([optimizer.apply_gradients(grads_and_vars, global_step,
                                                                name)]):
            return tf.constant(True)

    def skip():
        return tf.constant(False)

    applied = tf.cond(finite, apply, skip)
    return tf.group(applied, loss_scale_manager.update_loss_scale(finite))


class WrappingOptimizer(_Optimizer):
    """Base of the optimizers that wrap another one (``self._opt``): slots and variables are
    the wrapped optimizer's."""

    _opt = None

    def get_slot(self, *args, **kwargs):
        """The wrapped optimizer's slot."""
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        """The wrapped optimizer's slot names."""
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        """The wrapped optimizer's variables."""
        return self._opt.variables(*args, **kwargs)


class NPULossScaleOptimizer(WrappingOptimizer):
    """Loss scaling around ``opt`` (a ``tf.compat.v1.train.Optimizer``) with a
    :class:`~npu_bridge.estimator.npu.npu_loss_scale_manager.LossScaleManager`.

    ``is_distributed`` makes the ranks agree on overflow (see the module doc); it does not
    average the gradients (wrap an ``NPUDistributedOptimizer`` for that). A manager whose
    ``get_enable_overflow_check()`` is False makes every step apply its gradients.
    """

    def __init__(self, opt, loss_scale_manager, is_distributed=False):
        if not isinstance(opt, _Optimizer):
            raise TypeError(f"opt must be a tf.compat.v1.train.Optimizer, got "
                            f"{type(opt).__name__}")
        if not isinstance(loss_scale_manager, LossScaleManager):
            raise TypeError("loss_scale_manager must be a FixedLossScaleManager or "
                            "ExponentialUpdateLossScaleManager, got "
                            f"{type(loss_scale_manager).__name__}")
        self._opt = opt
        self._loss_scale_manager = loss_scale_manager
        self._is_distributed = is_distributed
        super().__init__(use_locking=False, name=f"NPULossScaleOptimizer{type(opt).__name__}")

    def compute_gradients(self, loss, var_list=None, gate_gradients=_Optimizer.GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False,
                          grad_loss=None):
        """Gradients of the scaled loss, divided by the loss scale."""
        loss_scale = self._loss_scale_manager.get_loss_scale()
        grads_and_vars = self._opt.compute_gradients(
            scaled_loss(loss, loss_scale), var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        return down_scale(grads_and_vars, loss_scale)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Apply the gradients when all are finite; update the loss scale."""
        if not self._loss_scale_manager.get_enable_overflow_check():
            return tf.group(self._opt.apply_gradients(grads_and_vars, global_step, name),
                            self._loss_scale_manager.update_loss_scale(tf.constant(True)))
        return apply_if_finite(self._opt, grads_and_vars, self._loss_scale_manager, global_step,
                               name, distributed=self._is_distributed)
