"""Checkpoint saver of NPU training (``npu_bridge.estimator.npu.npu_saver``).

:class:`NPUSaver` is a ``tf.compat.v1.train.Saver`` built with :class:`NPUBulkSaverBuilder`; it
writes the same checkpoint as ``tf.compat.v1.train.Saver`` with the same arguments. The builder's
one addition, as in the original: with weight-update sharding
(``NPUDistributedOptimizer(is_weight_update_sharding=True)``) each rank updates only its share
of the variables, so before saving, every sharded variable being saved is broadcast from the
rank that owns it (under the name scope ``Save_Weight_Update_Sharding``) and the save waits for
those broadcasts. Without sharded variables the graph is exactly a ``Saver``'s.
"""

import tensorflow as tf
from tensorflow.core.protobuf import saver_pb2

from npu_adapter import tf_compat
from npu_bridge.estimator.npu import util

__all__ = ["NPUBulkSaverBuilder", "NPUSaver"]

# The original's top-level imports that scripts can reach through this module (TensorFlow's
# BulkSaverBuilder is not public: see NPUBulkSaverBuilder).
Saver = tf.compat.v1.train.Saver


def _sharding_broadcasts(saveables):
    """Broadcast ops for the sharded variables among ``saveables`` (empty without sharding)."""
    items = util.get_all_grad_item()
    if not items:
        return []
    saved_ops = {getattr(s, "op", None) for s in saveables}
    saved_names = {getattr(s, "name", None) for s in saveables}
    from npu_bridge.hccl import hccl_ops  # imported lazily: most savers never need it

    ops = []
    with tf.name_scope("Save_Weight_Update_Sharding"):
        for item in items:
            var = item.var
            if var not in saved_ops and getattr(var, "op", None) not in saved_ops \
                    and getattr(var, "name", None) not in saved_names:
                continue
            if item.root_rank_id < 0:
                continue
            with tf.control_dependencies(ops):
                out = hccl_ops.broadcast([var], item.root_rank_id, 2, item.root_rank_id)
            ops.append(out[0].op)
    return ops


class NPUBulkSaverBuilder(tf_compat.saver_builder_waiting_for(_sharding_broadcasts)):
    """TensorFlow's ``BulkSaverBuilder`` whose save ops wait for the broadcasts of sharded
    weights."""


class NPUSaver(Saver):
    """``tf.compat.v1.train.Saver`` using :class:`NPUBulkSaverBuilder` (same arguments)."""

    def __init__(self, var_list=None, reshape=False, sharded=False, max_to_keep=5,
                 keep_checkpoint_every_n_hours=10000.0, name=None, restore_sequentially=False,
                 saver_def=None, builder=None, defer_build=False, allow_empty=False,
                 write_version=saver_pb2.SaverDef.V2, pad_step_number=False,
                 save_relative_paths=False, filename=None):
        if builder is None and saver_def is None:
            builder = NPUBulkSaverBuilder(write_version)
        super().__init__(
            var_list=var_list, reshape=reshape, sharded=sharded, max_to_keep=max_to_keep,
            keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours, name=name,
            restore_sequentially=restore_sequentially, saver_def=saver_def, builder=builder,
            defer_build=defer_build, allow_empty=allow_empty, write_version=write_version,
            pad_step_number=pad_step_number, save_relative_paths=save_relative_paths,
            filename=filename)
