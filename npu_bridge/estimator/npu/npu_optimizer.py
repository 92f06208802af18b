"""Distributed and loss-scaling optimizers (``npu_bridge.estimator.npu.npu_optimizer``).

The original averages gradients over the ranks with HCCL collectives; here they are TensorFlow
collectives over the ranks' servers (:mod:`npu_adapter.distributed`). With one rank averaging is
the identity, so every wrapper behaves exactly like the optimizer it wraps (same gradients, same
updates, same slots).

* :class:`NPUDistributedOptimizer` averages every gradient over the world group in
  ``compute_gradients``: dense gradients are fused into one all-reduce per segment of the split
  strategy (``hccl.split.api``; one segment by default) and dtype, ``IndexedSlices`` are
  gathered (values divided by the rank size). ``is_weight_update_sharding`` applies each
  variable's update on one owner rank (chosen by ``util.fair_division``) and broadcasts the new
  value, which gives the same weights.
* :class:`NPUOptimizer` adds loss scaling (``is_loss_scale`` with a manager) and averaging
  (``is_distributed``, with the overflow decision agreed over the ranks).
* :func:`npu_distributed_optimizer_wrapper` / :func:`KerasDistributeOptimizer` make an optimizer
  (TF1 or Keras) average its gradients; with one rank they return it unchanged.
* :func:`allreduce`, :func:`reduce`, :func:`npu_allreduce` reduce tensors over the ranks.

All of it builds graph ops: run it inside a ``tf.compat.v1`` session (graph mode).
"""

import tensorflow as tf

from npu_adapter.distributed import collectives, groups
from npu_bridge import _env
from npu_bridge._kernels.gen import gen_npu_ops  # noqa: F401 - a module attribute of the original
from npu_bridge.estimator.npu import util
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
    "average_gradients",
    "npu_allreduce",
    "npu_distributed_optimizer_wrapper",
    "reduce",
]

_Optimizer = tf.compat.v1.train.Optimizer


def _world(entry):
    return groups.get_group(groups.WORLD_GROUP, entry)


def _divide(tensor, size):
    if size == 1:
        return tensor
    if tensor.dtype.is_floating or tensor.dtype.is_complex:
        return tf.math.truediv(tensor, tf.cast(size, tensor.dtype))
    return tf.math.floordiv(tensor, tf.cast(size, tensor.dtype))


def _gather_slices(slices, group, average):
    """IndexedSlices over the ranks: every rank's rows (values and indices gathered), values
    divided by the group size for a mean (duplicate indices add up when applied)."""
    values = collectives.all_gather_ragged(slices.values, group, name="HcomAllGather_values")
    indices = collectives.all_gather_ragged(slices.indices, group, name="HcomAllGather_indices")
    if average:
        values = _divide(values, group.size)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=True):
    """Mean (``average``) or sum of ``tensor`` over the ranks; ``IndexedSlices`` are
    gathered."""
    world = _world("npu_optimizer.allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        return _gather_slices(tensor, world, average)
    summed = collectives.all_reduce(tensor, world, "sum")
    return _divide(summed, world.size) if average else summed


def reduce(tensor, root_rank, average=True, fusion=0, fusion_id=-1):
    """Mean or sum of ``tensor`` on ``root_rank`` (the other ranks receive it too)."""
    world = _world("npu_optimizer.reduce")
    if isinstance(tensor, tf.IndexedSlices):
        return _gather_slices(tensor, world, average)
    summed = hccl_ops.reduce(tensor, "sum", root_rank, fusion, fusion_id)
    return _divide(summed, world.size) if average else summed


_NPU_ALLREDUCE_REDUCTIONS = ("mean", *hccl_ops.REDUCTIONS)


def npu_allreduce(values, reduction="mean", fusion=1, fusion_id=-1,
                  group=hccl_ops.WORLD_GROUP):
    """All-reduce a tensor, ``IndexedSlices`` or list of them (None entries stay None) with
    ``reduction`` (mean/sum/prod/max/min) over ``group``. ``IndexedSlices`` are gathered for a
    sum or mean and made dense for the other reductions."""
    if reduction not in _NPU_ALLREDUCE_REDUCTIONS:
        raise ValueError(f"npu_allreduce: reduction={reduction!r}; expected one of "
                         f"{list(_NPU_ALLREDUCE_REDUCTIONS)}")
    found = groups.get_group(group, "npu_allreduce")
    hccl_reduction = "sum" if reduction == "mean" else reduction

    def one(value):
        if value is None:
            return None
        if isinstance(value, tf.IndexedSlices):
            if reduction in ("sum", "mean"):
                return _gather_slices(value, found, reduction == "mean")
            value = tf.convert_to_tensor(value)
        result = hccl_ops.allreduce(value, hccl_reduction, fusion, fusion_id, group)
        return _divide(result, found.size) if reduction == "mean" else result

    if isinstance(values, (list, tuple)):
        return type(values)(one(value) for value in values)
    return one(values)


def _segments(dense, group_name):
    """Index lists of the fused all-reduces of ``dense`` gradients (the split strategy)."""
    count = len(dense)
    strategy = groups.get_split_strategy(group_name)
    if strategy is None or count == 0:
        return [list(range(count))]
    kind, values = strategy
    if kind == "idx":
        # The strategy is process-wide; a model with fewer gradients ignores the indexes past
        # its last gradient (they would make empty segments).
        bounds = [index for index in values if index < count - 1] + [count - 1]
    else:
        sizes = [max(util.GradDivisionItem(grad, None).size, 1) if grad.shape.is_fully_defined()
                 else 1 for grad in dense]
        total = float(sum(sizes))
        bounds = []
        accumulated = 0.0
        target = 0.0
        position = 0
        for percent in values:
            target += percent
            while position < count and accumulated < total * target / 100.0:
                accumulated += sizes[position]
                position += 1
            if position and (not bounds or bounds[-1] < position - 1):
                bounds.append(position - 1)
        if not bounds or bounds[-1] != count - 1:
            bounds.append(count - 1)
    segments = []
    start = 0
    for bound in bounds:
        if bound >= start:
            segments.append(list(range(start, bound + 1)))
            start = bound + 1
    return segments


def average_gradients(grads_and_vars, group_name=groups.WORLD_GROUP):
    """``grads_and_vars`` with every gradient averaged over ``group_name`` (None stays None):
    dense gradients in fused all-reduces per split-strategy segment, ``IndexedSlices``
    gathered."""
    grads_and_vars = list(grads_and_vars)
    group = groups.get_group(group_name, "average_gradients")
    if group.size == 1:
        return grads_and_vars
    dense = [(index, grad) for index, (grad, _) in enumerate(grads_and_vars)
             if grad is not None and not isinstance(grad, tf.IndexedSlices)]
    reduced = collectives.fused_all_reduce([grad for _, grad in dense], group, "sum",
                                           _segments([grad for _, grad in dense], group_name))
    result = list(grads_and_vars)
    for (index, _), summed in zip(dense, reduced):
        result[index] = (_divide(summed, group.size), grads_and_vars[index][1])
    for index, (grad, var) in enumerate(grads_and_vars):
        if isinstance(grad, tf.IndexedSlices):
            result[index] = (_gather_slices(grad, group, True), var)
    return result


def _apply_with_sharding(optimizer, grads_and_vars, global_step, name):
    """Each variable is updated on its owner rank and broadcast from there (weight-update
    sharding). Same weights as every rank applying the averaged gradients."""
    world = _world("NPUDistributedOptimizer(is_weight_update_sharding=True)")
    pairs = [(grad, var) for grad, var in grads_and_vars if grad is not None]
    if len(pairs) < world.size:
        raise ValueError(f"NPUDistributedOptimizer: weight-update sharding needs at least one "
                         f"gradient per rank; there are {len(pairs)} gradients for "
                         f"{world.size} ranks")
    items = util.fair_division([util.GradDivisionItem(grad, var) for grad, var in pairs],
                               world.size)
    mine = [(item.grad, item.var) for item in items if item.root_rank_id == world.rank]
    # Every rank must run every gradient all-reduce, also those of the variables it does not
    # update (the others wait for it in each of them).
    every_gradient = []
    for grad, _ in pairs:
        every_gradient.extend([grad.values, grad.indices] if isinstance(grad, tf.IndexedSlices)
                              else [grad])
    with tf.control_dependencies(every_gradient):
        update = optimizer.apply_gradients(mine, global_step, name)
    assigns = []
    with tf.control_dependencies([update]), tf.name_scope("Broadcast_Weight_Update_Sharding"):
        for item in items:
            value = collectives.broadcast(tf.identity(item.var), world, item.root_rank_id)
            assigns.append(item.var.assign(value) if hasattr(item.var, "assign")
                           else tf.compat.v1.assign(item.var, value))
    return tf.group(update, *assigns, name=name)


class NPUDistributedOptimizer(WrappingOptimizer):
    """Average the gradients of ``optimizer`` over the ranks before applying them.

    One rank: exactly the wrapped optimizer (gradients, updates and slots are delegated). With
    ``is_weight_update_sharding`` each rank applies the updates of its share of the variables
    and broadcasts them (see the module doc).
    """

    def __init__(self, optimizer, is_weight_update_sharding=False, name=None):
        if not isinstance(optimizer, _Optimizer):
            raise TypeError("NPUDistributedOptimizer wraps a tf.compat.v1.train.Optimizer, got "
                            f"{type(optimizer).__name__}; use npu_keras_optimizer for Keras "
                            "optimizers")
        util.check_bool_type(is_weight_update_sharding, "is_weight_update_sharding")
        _env.current()  # validate the rank environment now, not at the first gradient
        self._opt = optimizer
        self._is_weight_update_sharding = is_weight_update_sharding
        super().__init__(use_locking=False,
                         name=name or f"Distributed{type(optimizer).__name__}")

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's gradients, averaged over the ranks."""
        grads_and_vars = self._opt.compute_gradients(*args, **kwargs)
        if _world("NPUDistributedOptimizer").size == 1:
            return grads_and_vars
        with tf.name_scope(f"{self.get_name()}_Allreduce"):
            return average_gradients(grads_and_vars)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Apply with the wrapped optimizer (sharded over the ranks when asked)."""
        if self._is_weight_update_sharding and _world("NPUDistributedOptimizer").size > 1:
            return _apply_with_sharding(self._opt, list(grads_and_vars), global_step, name)
        return self._opt.apply_gradients(grads_and_vars, global_step, name)


class NPUOptimizer(WrappingOptimizer):
    """``opt`` with optional loss scaling (``is_loss_scale``, needs ``loss_scale_manager``) and
    gradient averaging over the ranks (``is_distributed``; the overflow decision is then agreed
    over the ranks). ``is_tailing_optimization`` only reorders the communication in the
    original; TensorFlow schedules the collectives itself.
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
            _env.current()
        self._opt = opt
        self._loss_scale_manager = loss_scale_manager
        self._is_distributed = is_distributed
        self._is_loss_scale = is_loss_scale
        self._is_tailing_optimization = is_tailing_optimization
        super().__init__(use_locking=False, name=name or f"NPUOptimizer{type(opt).__name__}")

    def compute_gradients(self, loss, var_list=None, gate_gradients=_Optimizer.GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False,
                          grad_loss=None):
        """Gradients of the (scaled) loss, averaged over the ranks when distributed, divided by
        the loss scale when loss scaling."""
        loss_scale = self._loss_scale_manager.get_loss_scale() if self._is_loss_scale else None
        if loss_scale is not None:
            loss = scaled_loss(loss, loss_scale)
        grads_and_vars = self._opt.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        if self._is_distributed and _world("NPUOptimizer").size > 1:
            with tf.name_scope(f"{self.get_name()}_Allreduce"):
                grads_and_vars = average_gradients(grads_and_vars)
        if loss_scale is not None:
            grads_and_vars = down_scale(grads_and_vars, loss_scale)
        return grads_and_vars

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Apply (only finite gradients when loss scaling, updating the scale)."""
        if not self._is_loss_scale:
            return self._opt.apply_gradients(grads_and_vars, global_step, name)
        return apply_if_finite(self._opt, grads_and_vars, self._loss_scale_manager, global_step,
                               name, distributed=self._is_distributed)


def _average_list(grads):
    pairs = average_gradients([(grad, None) for grad in grads])
    return [grad for grad, _ in pairs]


def npu_distributed_optimizer_wrapper(optimizer):
    """Make ``optimizer`` average its gradients over the ranks: its ``compute_gradients``,
    ``get_gradients`` and ``_compute_gradients`` (whichever it has: TF1 and Keras optimizers)
    are wrapped on the instance, which is returned. One rank: ``optimizer`` unchanged."""
    _env.current()
    if _world("npu_distributed_optimizer_wrapper").size == 1:
        return optimizer
    if getattr(optimizer, "_npu_gradients_averaged", False):
        return optimizer

    def wrap_pairs(method):
        def compute(*args, **kwargs):
            return average_gradients(method(*args, **kwargs))
        return compute

    def wrap_list(method):
        def get_gradients(*args, **kwargs):
            return _average_list(method(*args, **kwargs))
        return get_gradients

    wrapped = False
    for attr, wrapper in (("compute_gradients", wrap_pairs), ("_compute_gradients", wrap_pairs),
                          ("get_gradients", wrap_list)):
        method = getattr(optimizer, attr, None)
        if callable(method):
            setattr(optimizer, attr, wrapper(method))
            wrapped = True
    if not wrapped:
        raise TypeError(f"npu_distributed_optimizer_wrapper: {type(optimizer).__name__} has no "
                        "compute_gradients, get_gradients or _compute_gradients to wrap")
    optimizer._npu_gradients_averaged = True
    return optimizer


class KerasDistributeOptimizer:
    """A Keras optimizer whose gradients are averaged over the ranks before they are applied
    (the original's class of this name, an ``OptimizerV2`` wrapping ``optimizer``).

    Here the given instance itself becomes the distributed optimizer: its class becomes a
    subclass of both this class and its own, so it keeps its slots, variables and config, every
    Keras ``compile`` accepts it, and ``isinstance(opt, KerasDistributeOptimizer)`` holds. With
    one rank the averages are the gradients themselves.

    Args:
        optimizer: the Keras optimizer to make distributed (returned).
        name: accepted for the original's signature (the optimizer keeps its own name).
    """

    def __new__(cls, optimizer, name=None, **kwargs):
        del name, kwargs
        _env.current()  # a bad rank environment fails here, not at the first step
        if isinstance(optimizer, KerasDistributeOptimizer):
            return optimizer
        base = type(optimizer)
        mixed = _DISTRIBUTED_CLASSES.get(base)
        if mixed is None:
            mixed = type(f"Distributed{base.__name__}", (cls, base), {"__module__": __name__})
            _DISTRIBUTED_CLASSES[base] = mixed
        try:
            optimizer.__class__ = mixed
        except TypeError:  # an instance layout Python cannot re-class: wrap its methods instead
            return npu_distributed_optimizer_wrapper(optimizer)
        return optimizer

    def __init__(self, optimizer, name=None, **kwargs):
        """Nothing to do: ``__new__`` made ``optimizer`` distributed."""
        del optimizer, name, kwargs

    def get_updates(self, loss, params):
        """The optimizer's update ops (they apply through :meth:`apply_gradients`, averaged)."""
        return super().get_updates(loss, params)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        """Average ``grads_and_vars`` over the ranks, then apply them as the optimizer does."""
        return super().apply_gradients(average_gradients(grads_and_vars), *args, **kwargs)

    def get_config(self):
        """The optimizer's own config."""
        return super().get_config()


_DISTRIBUTED_CLASSES = {}  # optimizer class -> its KerasDistributeOptimizer subclass
