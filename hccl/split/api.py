"""``hccl.split.api``: how the gradient all-reduce of a group is split into fused segments.

``NPUDistributedOptimizer`` fuses the dense gradients of each segment (and dtype) into one
all-reduce; these are the functions of :mod:`npu_bridge.hccl.manage.api`.
"""

from npu_bridge.hccl.manage.api import (
    get_split_strategy,
    set_split_strategy_by_idx,
    set_split_strategy_by_size,
)

__all__ = ["get_split_strategy", "set_split_strategy_by_idx", "set_split_strategy_by_size"]
