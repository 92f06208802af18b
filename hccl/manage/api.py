"""``hccl.manage.api``: rank and group functions (the names and arguments of CANN's module).

They are the functions of :mod:`npu_bridge.hccl.manage.api`: the world group
``"hccl_world_group"`` holds the ranks described by ``RANK_SIZE``/``RANK_ID``/``RANK_TABLE_FILE``,
``create_group``/``destroy_group`` manage subgroups.
"""

from npu_bridge.hccl.manage.api import (
    WORLD_GROUP,
    create_group,
    destroy_group,
    get_group_rank_from_world_rank,
    get_local_rank_id,
    get_local_rank_size,
    get_rank_id,
    get_rank_size,
    get_world_rank_from_group_rank,
)

__all__ = [
    "WORLD_GROUP",
    "create_group",
    "destroy_group",
    "get_group_rank_from_world_rank",
    "get_local_rank_id",
    "get_local_rank_size",
    "get_rank_id",
    "get_rank_size",
    "get_world_rank_from_group_rank",
]
