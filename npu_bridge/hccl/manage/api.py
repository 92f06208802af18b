"""HCCL group management (CANN's ``hccl.manage.api``) for a single rank.

The original gets these functions from the CANN ``hccl`` Python package and they query the HCCL
runtime. Here the world consists of this process only: rank size 1, rank id 0, local rank size 1,
local rank id 0. The functions validate the rank environment (``RANK_SIZE``/``CM_WORKER_SIZE``,
``RANK_ID``, ``DEVICE_ID``) on every call: more than one rank raises
:class:`~npu_adapter.errors.BackendError`, invalid values raise ``ValueError``.

Groups: the world group ``"hccl_world_group"`` always exists. :func:`create_group` accepts only
groups made of the whole world (``rank_num`` 1, ``rank_ids`` ``[0]``); they are recorded so that
the other functions and the collectives of :mod:`npu_bridge.hccl.hccl_ops` accept their names.

The gradient split strategies (:func:`set_split_strategy_by_idx`,
:func:`set_split_strategy_by_size`) are validated and recorded (:func:`get_split_strategy`); on
one rank there is no allreduce to split, so they change nothing else.
"""

import threading

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

WORLD_GROUP = "hccl_world_group"
"""Name of the group of all ranks."""

_MAX_GROUP_NAME = 127  # HCCL's group name buffer is 128 bytes including the terminator
_LOCK = threading.Lock()
_GROUPS = {}  # group name -> tuple of world rank ids
_SPLIT_STRATEGIES = {}  # group name -> ("idx" | "size", tuple of ints)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_group(group, entry):
    if not isinstance(group, str) or not group:
        raise ValueError(f"{entry}: group must be a non-empty string, got {group!r}")
    if group != WORLD_GROUP and group not in _GROUPS:
        known = [WORLD_GROUP] + sorted(_GROUPS)
        raise ValueError(f"{entry}: unknown group {group!r}; existing groups: {known} "
                         "(create_group creates one)")
    return _GROUPS.get(group, (0,))


def create_group(group, rank_num, rank_ids):
    """Create ``group`` with ``rank_num`` ranks given by their world ``rank_ids``.

    On a single rank the only possible members are ``[0]``: ``rank_num`` must be 1 and
    ``rank_ids`` ``[0]``. The name must be new, not the world group, and at most 127 characters.
    """
    entry = "create_group"
    _env.require_single_rank(entry)
    if not isinstance(group, str) or not group:
        raise ValueError(f"{entry}: group must be a non-empty string, got {group!r}")
    if len(group) > _MAX_GROUP_NAME:
        raise ValueError(f"{entry}: group name {group!r} is longer than {_MAX_GROUP_NAME} "
                         "characters")
    if group == WORLD_GROUP:
        raise ValueError(f"{entry}: {WORLD_GROUP!r} is the world group and always exists; "
                         "choose another name")
    if not _is_int(rank_num) or rank_num != 1:
        raise ValueError(f"{entry}: rank_num={rank_num!r} but this build runs a single rank; "
                         "rank_num must be 1")
    if not isinstance(rank_ids, (list, tuple)) or list(rank_ids) != [0]:
        raise ValueError(f"{entry}: rank_ids={rank_ids!r} but this build runs a single rank "
                         "whose world rank id is 0; rank_ids must be [0]")
    with _LOCK:
        if group in _GROUPS:
            raise ValueError(f"{entry}: group {group!r} already exists")
        _GROUPS[group] = (0,)


def destroy_group(group):
    """Destroy a group made by :func:`create_group` (the world group cannot be destroyed)."""
    entry = "destroy_group"
    _env.require_single_rank(entry)
    if group == WORLD_GROUP:
        raise ValueError(f"{entry}: the world group {WORLD_GROUP!r} cannot be destroyed")
    with _LOCK:
        _check_group(group, entry)
        del _GROUPS[group]
        _SPLIT_STRATEGIES.pop(group, None)


def get_rank_size(group=WORLD_GROUP):
    """Number of ranks in ``group``: 1."""
    _env.require_single_rank("get_rank_size")
    return len(_check_group(group, "get_rank_size"))


def get_local_rank_size(group=WORLD_GROUP):
    """Number of ranks of ``group`` on this server: 1."""
    _env.require_single_rank("get_local_rank_size")
    return len(_check_group(group, "get_local_rank_size"))


def get_rank_id(group=WORLD_GROUP):
    """This process's rank in ``group``: 0 (``RANK_ID`` is validated, it must be 0)."""
    _env.require_single_rank("get_rank_id")
    _check_group(group, "get_rank_id")
    return _env.rank_id()


def get_local_rank_id(group=WORLD_GROUP):
    """This process's rank among the ranks of ``group`` on this server: 0."""
    _env.require_single_rank("get_local_rank_id")
    _check_group(group, "get_local_rank_id")
    return 0


def get_world_rank_from_group_rank(group, group_rank_id):
    """World rank id of rank ``group_rank_id`` of ``group`` (0 -> 0)."""
    entry = "get_world_rank_from_group_rank"
    _env.require_single_rank(entry)
    members = _check_group(group, entry)
    if not _is_int(group_rank_id) or not 0 <= group_rank_id < len(members):
        raise ValueError(f"{entry}: group_rank_id={group_rank_id!r} is not a rank of group "
                         f"{group!r}, which has {len(members)} rank(s)")
    return members[group_rank_id]


def get_group_rank_from_world_rank(world_rank_id, group):
    """Rank within ``group`` of world rank ``world_rank_id`` (0 -> 0)."""
    entry = "get_group_rank_from_world_rank"
    _env.require_single_rank(entry)
    members = _check_group(group, entry)
    if not _is_int(world_rank_id) or world_rank_id not in members:
        raise ValueError(f"{entry}: world_rank_id={world_rank_id!r} is not a member of group "
                         f"{group!r} (members: {list(members)})")
    return members.index(world_rank_id)


def _check_int_list(values, name, entry):
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{entry}: {name} must be a non-empty list of integers, got {values!r}")
    for value in values:
        if not _is_int(value):
            raise ValueError(f"{entry}: {name} must contain integers, got {value!r}")
    return tuple(values)


def set_split_strategy_by_idx(idxList, group=WORLD_GROUP):
    """Split the gradient allreduce after the gradients with the given (ascending, >= 0)
    indexes. Validated and recorded; on one rank there is no allreduce to split."""
    entry = "set_split_strategy_by_idx"
    _env.require_single_rank(entry)
    _check_group(group, entry)
    idx = _check_int_list(idxList, "idxList", entry)
    for previous, current in zip(idx, idx[1:]):
        if current <= previous:
            raise ValueError(f"{entry}: idxList must be strictly ascending, got {list(idx)}")
    if idx[0] < 0:
        raise ValueError(f"{entry}: idxList values must be >= 0, got {idx[0]}")
    with _LOCK:
        _SPLIT_STRATEGIES[group] = ("idx", idx)


def set_split_strategy_by_size(dataSizeList, group=WORLD_GROUP):
    """Split the gradient allreduce into segments of the given percentages (positive, summing
    to 100). Validated and recorded; on one rank there is no allreduce to split."""
    entry = "set_split_strategy_by_size"
    _env.require_single_rank(entry)
    _check_group(group, entry)
    sizes = _check_int_list(dataSizeList, "dataSizeList", entry)
    if any(size <= 0 for size in sizes) or sum(sizes) != 100:
        raise ValueError(f"{entry}: dataSizeList must be positive percentages summing to 100, "
                         f"got {list(sizes)}")
    with _LOCK:
        _SPLIT_STRATEGIES[group] = ("size", sizes)


def get_split_strategy(group=WORLD_GROUP):
    """The recorded split strategy of ``group``: ``("idx" | "size", values)`` or None."""
    return _SPLIT_STRATEGIES.get(group)
