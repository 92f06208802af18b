"""Distributed and loss-scaling optimizers (``npu_bridge.estimator.npu.npu_optimizer``, §7.8).

The original averages gradients over the ranks with HCCL collectives. This build runs a single
rank: averaging over one rank is the identity, so with ``RANK_SIZE`` <= 1 every wrapper behaves
exactly like the optimizer it wraps (same gradients, same updates, same slots). With
``RANK_SIZE`` (or ``CM_WORKER_SIZE``) > 1 the wrappers raise
:class:`~npu_adapter.errors.BackendError` when they are built.

* :class:`NPUDistributedOptimizer` delegates to the wrapped ``tf.compat.v1.train.Optimizer``.
* :class:`NPUOptimizer` adds loss scaling (``is_loss_scale`` with a loss scale manager, see
  :mod:`~npu_bridge.estimator.npu.npu_loss_scale_optimizer`).
* :func:`KerasDistributeOptimizer` and :func:`npu_distributed_optimizer_wrapper` return the
  given optimizer itself: on one rank there is nothing to patch.
* :func:`allreduce`, :func:`reduce`, :func:`npu_allreduce` are the one-rank arithmetic
  (sum = mean = the input).
"""

import tensorflow as tf

from npu_bridge import _env
from npu_bridge.estimator.npu.npu_loss_scale_manager import LossScaleManager
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import (
    WrappingOptimizer,
    apply_if_finite,
    down_scale,
    scaled_loss,
)
from npu_bridge.hccl import hccl_ops

__all__ = [
    "KerasDistributeOptimizer",
    "NPUDistributedOptimizer",
    "NPUOptimizer",
    "allreduce",
    "npu_allreduce",
    "npu_distributed_optimizer_wrapper",
    "reduce",
]

_Optimizer = tf.compat.v1.train.Optimizer


def _reduce_one_rank(tensor, collective):
    if isinstance(tensor, tf.IndexedSlices):
        # The original allgathers values and indices; over one rank that is the input.
        values = hccl_ops.allgather(tensor.values, 1)
        indices = hccl_ops.allgather(tensor.indices, 1)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    return collective(tensor)


def allreduce(tensor, average=True):
    """Sum (``average`` False) or mean of ``tensor`` over the ranks; ``IndexedSlices`` are
    gathered. One rank: the input (sum and mean of one value are the value)."""
    _env.require_single_rank("npu_optimizer.allreduce")
    return _reduce_one_rank(tensor, lambda value: hccl_ops.allreduce(value, "sum"))


def reduce(tensor, root_rank, average=True, fusion=0, fusion_id=-1):
    """Sum or mean of ``tensor`` on ``root_rank``. One rank: root 0, the input."""
    _env.require_single_rank("npu_optimizer.reduce")
    return _reduce_one_rank(
        tensor, lambda value: hccl_ops.reduce(value, "sum", root_rank, fusion, fusion_id))


_NPU_ALLREDUCE_REDUCTIONS = ("mean",) + hccl_ops.REDUCTIONS


def npu_allreduce(values, reduction="mean", fusion=1, fusion_id=-1,
                  group=hccl_ops.WORLD_GROUP):
    """Allreduce a tensor, ``IndexedSlices`` or list of them (None entries stay None) with
    ``reduction`` (mean/sum/prod/max/min). One rank: the inputs, in the same structure."""
    _env.require_single_rank("npu_allreduce")
    if reduction not in _NPU_ALLREDUCE_REDUCTIONS:
        raise ValueError(f"npu_allreduce: reduction={reduction!r}; expected one of "
                         f"{list(_NPU_ALLREDUCE_REDUCTIONS)}")
    hccl_reduction = "sum" if reduction == "mean" else reduction

    def one(value):
        if value is None:
            return None
        return _reduce_one_rank(value, lambda tensor: hccl_ops.allreduce(
            tensor, hccl_reduction, fusion, fusion_id, group))

    if isinstance(values, (list, tuple)):
        return type(values)(one(value) for value in values)
    return one(values)


class NPUDistributedOptimizer(WrappingOptimizer):
    """Average the gradients of ``optimizer`` over the ranks before applying them.

    One rank: exactly the wrapped optimizer (gradients, updates and slots are delegated).
    ``is_weight_update_sharding`` splits the updates over ranks in the original; with one rank
    the single rank owns every weight. ``BackendError`` when more than one rank is configured.
    """

    def __init__(self, optimizer, is_weight_update_sharding=False, name=None):
        _env.require_single_rank("NPUDistributedOptimizer")
        if not isinstance(optimizer, _Optimizer):
            raise TypeError("NPUDistributedOptimizer wraps a tf.compat.v1.train.Optimizer, got "
                            f"{type(optimizer).__name__}; use npu_keras_optimizer for Keras "
                            "optimizers")
        self._opt = optimizer
        self._is_weight_update_sharding = is_weight_update_sharding
        super().__init__(use_locking=False,
                         name=name or f"Distributed{type(optimizer).__name__}")

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's gradients (their mean over one rank)."""
        return self._opt.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Apply with the wrapped optimizer."""
        return self._opt.apply_gradients(grads_and_vars, global_step, name)


class NPUOptimizer(WrappingOptimizer):
    """``opt`` with optional loss scaling (``is_loss_scale``, needs ``loss_scale_manager``) and
    gradient averaging over the ranks (``is_distributed``; the identity on one rank,
    ``BackendError`` with more). ``is_tailing_optimization`` only reorders the distributed
    communication and changes nothing on one rank.
    """

    def __init__(self, opt, loss_scale_manager=None, is_distributed=False, is_loss_scale=False,
                 is_tailing_optimization=False, name=None):
        if not isinstance(opt, _Optimizer):
            raise TypeError(f"opt must be a tf.compat.v1.train.Optimizer, got "
                            f"{type(opt).__name__}")
        if is_loss_scale and loss_scale_manager is None:
            raise ValueError("is_loss_scale is True, loss_scale_manager can not be None")
        if is_loss_scale and not isinstance(loss_scale_manager, LossScaleManager):
            raise TypeError("loss_scale_manager must be a FixedLossScaleManager or "
                            "ExponentialUpdateLossScaleManager, got "
                            f"{type(loss_scale_manager).__name__}")
        if is_distributed:
            _env.require_single_rank("NPUOptimizer(is_distributed=True)")
        self._opt = opt
        self._loss_scale_manager = loss_scale_manager
        self._is_distributed = is_distributed
        self._is_loss_scale = is_loss_scale
        self._is_tailing_optimization = is_tailing_optimization
        super().__init__(use_locking=False, name=name or f"NPUOptimizer{type(opt).__name__}")

    def compute_gradients(self, loss, var_list=None, gate_gradients=_Optimizer.GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False,
                          grad_loss=None):
        """Gradients of the (scaled) loss, divided by the loss scale when loss scaling."""
        if not self._is_loss_scale:
            return self._opt.compute_gradients(
                loss, var_list=var_list, gate_gradients=gate_gradients,
                aggregation_method=aggregation_method,
                colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        loss_scale = self._loss_scale_manager.get_loss_scale()
        grads_and_vars = self._opt.compute_gradients(
            scaled_loss(loss, loss_scale), var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        return down_scale(grads_and_vars, loss_scale)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Apply (only finite gradients when loss scaling, updating the scale)."""
        if not self._is_loss_scale:
            return self._opt.apply_gradients(grads_and_vars, global_step, name)
        return apply_if_finite(self._opt, grads_and_vars, self._loss_scale_manager, global_step,
                               name)


def KerasDistributeOptimizer(optimizer):
    """Distribute a Keras optimizer over the ranks. One rank: returns ``optimizer`` itself
    (its gradients are already the mean over one rank); ``BackendError`` with more ranks."""
    _env.require_single_rank("KerasDistributeOptimizer")
    return optimizer


def npu_distributed_optimizer_wrapper(optimizer):
    """Patch ``optimizer`` to allreduce its gradients. One rank: returns ``optimizer``
    unchanged; ``BackendError`` with more ranks."""
    _env.require_single_rank("npu_distributed_optimizer_wrapper")
    return optimizer
