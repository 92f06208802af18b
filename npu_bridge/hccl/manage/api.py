"""HCCL group management (CANN's ``hccl.manage.api``, also importable as the top-level ``hccl``
package).

The world group ``"hccl_world_group"`` holds every rank of the job (``RANK_SIZE`` ranks; one
when it is unset); :func:`create_group` makes subgroups, whose ranks are numbered by ascending
world rank. Rank ids, sizes and local (same server) ranks come from the rank environment
(:mod:`npu_adapter.distributed.environment`): the rank table's servers, else the hosts of the
ranks' addresses. Every function validates its arguments and raises ``ValueError`` naming what
is wrong.

The gradient split strategies (:func:`set_split_strategy_by_idx`,
:func:`set_split_strategy_by_size`) decide how ``NPUDistributedOptimizer`` fuses the gradient
all-reduces of a group: one all-reduce per segment (and dtype).
"""

from npu_adapter.distributed import groups as _groups
from npu_bridge import _env

__all__ = [
    "WORLD_GROUP",
    "create_group",
    "destroy_group",
    "get_group_rank_from_world_rank",
    "get_local_rank_id",
    "get_local_rank_size",
    "get_rank_id",
    "get_rank_size",
    "get_split_strategy",
    "get_world_rank_from_group_rank",
    "set_split_strategy_by_idx",
    "set_split_strategy_by_size",
]

WORLD_GROUP = _groups.WORLD_GROUP
"""Name of the group of all ranks."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _group(group, entry):
    return _groups.get_group(group, entry)


def create_group(group, rank_num, rank_ids):
    """Create ``group`` with ``rank_num`` ranks given by their world ``rank_ids``.

    ``rank_ids`` must be strictly ascending (group rank ``i`` is the ``i``-th smallest world
    rank), valid world ranks, and include this process's rank: each member creates the group.
    The name must be new, not the world group, and at most 127 characters.
    """
    _groups.create_group(group, rank_num, rank_ids, "create_group")


def destroy_group(group):
    """Destroy a group made by :func:`create_group` (the world group cannot be destroyed)."""
    _groups.destroy_group(group, "destroy_group")


def get_rank_size(group=WORLD_GROUP):
    """Number of ranks in ``group``."""
    return _group(group, "get_rank_size").size


def get_local_rank_size(group=WORLD_GROUP):
    """Number of ranks of ``group`` on this rank's server."""
    found = _group(group, "get_local_rank_size")
    return len(_env.current().local_ranks(found.members))


def get_rank_id(group=WORLD_GROUP):
    """This process's rank in ``group``."""
    return _group(group, "get_rank_id").rank


def get_local_rank_id(group=WORLD_GROUP):
    """This process's position among the ranks of ``group`` on its server."""
    found = _group(group, "get_local_rank_id")
    env = _env.current()
    return env.local_ranks(found.members).index(env.rank_id)


def get_world_rank_from_group_rank(group, group_rank_id):
    """World rank id of rank ``group_rank_id`` of ``group``."""
    entry = "get_world_rank_from_group_rank"
    found = _group(group, entry)
    if not _is_int(group_rank_id) or not 0 <= group_rank_id < found.size:
        raise ValueError(f"{entry}: group_rank_id={group_rank_id!r} is not a rank of group "
                         f"{group!r}, which has {found.size} rank(s)")
    return found.world_rank_of(group_rank_id)


def get_group_rank_from_world_rank(world_rank_id, group):
    """Rank within ``group`` of world rank ``world_rank_id``."""
    entry = "get_group_rank_from_world_rank"
    found = _group(group, entry)
    if not _is_int(world_rank_id) or world_rank_id not in found.members:
        raise ValueError(f"{entry}: world_rank_id={world_rank_id!r} is not a member of group "
                         f"{group!r} (members: {list(found.members)})")
    return found.group_rank(world_rank_id)


def _check_int_list(values, name, entry):
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{entry}: {name} must be a non-empty list of integers, got {values!r}")
    for value in values:
        if not _is_int(value):
            raise ValueError(f"{entry}: {name} must contain integers, got {value!r}")
    return tuple(values)


def set_split_strategy_by_idx(idxList, group=WORLD_GROUP):
    """Split the fused gradient all-reduce of ``group`` after the gradients with the given
    (strictly ascending, >= 0) indexes: ``[20, 100]`` makes segments 0..20, 21..100 and the
    rest."""
    entry = "set_split_strategy_by_idx"
    _group(group, entry)
    idx = _check_int_list(idxList, "idxList", entry)
    for previous, current in zip(idx, idx[1:]):
        if current <= previous:
            raise ValueError(f"{entry}: idxList must be strictly ascending, got {list(idx)}")
    if idx[0] < 0:
        raise ValueError(f"{entry}: idxList values must be >= 0, got {idx[0]}")
    _groups.set_split_strategy(group, "idx", idx)


def set_split_strategy_by_size(dataSizeList, group=WORLD_GROUP):
    """Split the fused gradient all-reduce of ``group`` into segments holding the given
    percentages of the gradient bytes (positive, summing to 100)."""
    entry = "set_split_strategy_by_size"
    _group(group, entry)
    sizes = _check_int_list(dataSizeList, "dataSizeList", entry)
    if any(size <= 0 for size in sizes) or sum(sizes) != 100:
        raise ValueError(f"{entry}: dataSizeList must be positive percentages summing to 100, "
                         f"got {list(sizes)}")
    _groups.set_split_strategy(group, "size", sizes)


def get_split_strategy(group=WORLD_GROUP):
    """The recorded split strategy of ``group``: ``("idx" | "size", values)`` or None."""
    return _groups.get_split_strategy(group)
