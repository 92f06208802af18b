"""Distribution strategy for NPU training (``npu_bridge.estimator.npu.npu_strategy``).

:class:`NPUStrategy` is a ``tf.compat.v1.distribute.Strategy`` over TensorFlow's one-device
strategy: variables and computation live on ``/cpu:0`` of this process (the device graph is cut
out of the session's graph by the rewrite, not by the strategy), the number of replicas in sync
is the rank size (``RANK_SIZE``/``CM_WORKER_SIZE``), and a distributed dataset is this rank's
shard (``dataset.shard(rank_size, rank_id)``). This build runs one rank, so the shard is the
whole dataset; more ranks raise the single-rank error of the HCCL functions.
"""

import tensorflow as tf

from npu_adapter import tf_compat
from npu_bridge.estimator.npu import util as util_lib
from npu_bridge.hccl.manage.api import get_rank_id, get_rank_size

__all__ = ["NPUExtended", "NPUStrategy"]


def _replicas_in_sync():
    return int(util_lib.get_ranksize())


def _rank_shard(dataset):
    return dataset.shard(get_rank_size(), get_rank_id())


class NPUExtended(tf_compat.one_device_extended(_replicas_in_sync, _rank_shard)):
    """TensorFlow's one-device strategy internals with the rank size as the number of replicas
    in sync and this rank's shard as the distributed dataset."""

    def __init__(self, container_strategy, device):
        super().__init__(container_strategy, device)


class NPUStrategy(tf.compat.v1.distribute.Strategy):
    """NPU distribution strategy; ``device`` must be ``"/cpu:0"`` (the only value the
    original accepts, ``ValueError`` otherwise)."""

    def __init__(self, device="/cpu:0"):
        if device != "/cpu:0":
            raise ValueError('"device" only support "/cpu:0"')
        super().__init__(NPUExtended(self, device))
