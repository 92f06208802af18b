"""Communication groups: the world group and the groups made by ``create_group``.

A group is a set of world ranks and a TensorFlow collective *group key*. TensorFlow numbers the
members of a collective group by their task, so group rank ``i`` is the ``i``-th smallest world
rank: ``create_group`` therefore takes its ``rank_ids`` in ascending order. Keys must agree on
every rank without talking to the others, so they are derived from the group's name and members
(the world group has key :data:`WORLD_GROUP_KEY`); a hash clash with another group of this
process moves to the next free key, which all ranks do alike.

The registry is per process and thread-safe. A destroyed group's key stays reserved: TensorFlow
keeps a group's membership for the life of the process, so the same key must never name other
members.
"""

import dataclasses
import hashlib
import threading

from npu_adapter.distributed import environment

__all__ = [
    "MAX_GROUP_NAME",
    "WORLD_GROUP",
    "WORLD_GROUP_KEY",
    "Group",
    "create_group",
    "destroy_group",
    "get_group",
    "get_split_strategy",
    "group_names",
    "pair_group",
    "set_split_strategy",
]

WORLD_GROUP = "hccl_world_group"
"""Name of the group of all ranks."""
WORLD_GROUP_KEY = 1
"""TensorFlow group key of the world group."""
MAX_GROUP_NAME = 127  # HCCL's group name buffer is 128 bytes with the terminator

_KEY_SPACE = (1 << 30) - 2
_LOCK = threading.Lock()
_GROUPS = {}  # name -> Group
_KEYS = {}  # key -> (kind, name, members): every key handed out in this process
_SPLIT_STRATEGIES = {}  # group name -> ("idx" | "size", tuple of ints)


@dataclasses.dataclass(frozen=True)
class Group:
    """A communication group seen from this process."""

    name: str
    key: int
    members: tuple
    """World rank ids in group-rank order (ascending)."""
    world_rank: int
    """This process's world rank."""

    @property
    def size(self):
        """Number of ranks in the group."""
        return len(self.members)

    @property
    def is_member(self):
        """Whether this process belongs to the group."""
        return self.world_rank in self.members

    @property
    def rank(self):
        """This process's rank within the group (``ValueError`` if it is not a member)."""
        return self.group_rank(self.world_rank)

    def group_rank(self, world_rank):
        """The group rank of world rank ``world_rank`` (``ValueError`` if not a member)."""
        if world_rank not in self.members:
            raise ValueError(f"world rank {world_rank!r} is not a member of group {self.name!r} "
                             f"(members: {list(self.members)})")
        return self.members.index(world_rank)

    def world_rank_of(self, group_rank):
        """The world rank of group rank ``group_rank``."""
        return self.members[group_rank]


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _derive_key(kind, name, members):
    """A key in [2, 2**30) from the group's identity, moved past keys of other groups."""
    identity = (kind, name, tuple(members))
    digest = hashlib.sha256(repr(identity).encode("utf-8")).digest()
    key = 2 + int.from_bytes(digest[:8], "big") % _KEY_SPACE
    while _KEYS.get(key, identity) != identity:
        key = 2 + (key - 1) % _KEY_SPACE  # the next key, wrapping within [2, 2**30)
    _KEYS[key] = identity
    return key


def _world(env):
    return Group(WORLD_GROUP, WORLD_GROUP_KEY, tuple(range(env.rank_size)), env.rank_id)


def check_group_name(group, entry):
    """``ValueError`` unless ``group`` is a non-empty string."""
    if not isinstance(group, str) or not group:
        raise ValueError(f"{entry}: group must be a non-empty string, got {group!r}")


def get_group(group, entry="get_group"):
    """The :class:`Group` named ``group`` (``ValueError`` naming the known groups otherwise)."""
    check_group_name(group, entry)
    env = environment.current()
    if group == WORLD_GROUP:
        return _world(env)
    with _LOCK:
        found = _GROUPS.get(group)
    if found is None:
        known = [WORLD_GROUP, *sorted(_GROUPS)]
        raise ValueError(f"{entry}: unknown group {group!r}; existing groups: {known} "
                         "(create_group creates one)")
    return found


def group_names():
    """Names of every existing group, the world group first."""
    with _LOCK:
        return [WORLD_GROUP, *sorted(_GROUPS)]


def create_group(group, rank_num, rank_ids, entry="create_group"):
    """Create ``group`` of ``rank_num`` ranks with world ids ``rank_ids`` (ascending, each in
    ``[0, rank size)``, including this process's rank). Returns the :class:`Group`."""
    check_group_name(group, entry)
    env = environment.current()
    if len(group) > MAX_GROUP_NAME:
        raise ValueError(f"{entry}: group name {group!r} is longer than {MAX_GROUP_NAME} "
                         "characters")
    if group == WORLD_GROUP:
        raise ValueError(f"{entry}: {WORLD_GROUP!r} is the world group and always exists; "
                         "choose another name")
    if not _is_int(rank_num) or not 1 <= rank_num <= env.rank_size:
        raise ValueError(f"{entry}: rank_num={rank_num!r} must be an integer from 1 to the rank "
                         f"size {env.rank_size}")
    if not isinstance(rank_ids, (list, tuple)) or not all(_is_int(r) for r in rank_ids):
        raise ValueError(f"{entry}: rank_ids={rank_ids!r} must be a list of world rank ids")
    members = tuple(rank_ids)
    if len(members) != rank_num:
        raise ValueError(f"{entry}: rank_ids={list(members)} has {len(members)} entries but "
                         f"rank_num={rank_num}")
    bad = [rank for rank in members if not 0 <= rank < env.rank_size]
    if bad:
        raise ValueError(f"{entry}: rank_ids={list(members)} contains {bad[0]}, which is not a "
                         f"world rank (0 to {env.rank_size - 1})")
    if list(members) != sorted(set(members)):
        raise ValueError(f"{entry}: rank_ids={list(members)} must be strictly ascending (group "
                         "rank i is the i-th smallest world rank)")
    if env.rank_id not in members:
        raise ValueError(f"{entry}: this process is world rank {env.rank_id}, which is not in "
                         f"rank_ids={list(members)}; only the members of a group create it")
    with _LOCK:
        if group in _GROUPS:
            raise ValueError(f"{entry}: group {group!r} already exists")
        created = Group(group, _derive_key("group", group, members), members, env.rank_id)
        _GROUPS[group] = created
    return created


def destroy_group(group, entry="destroy_group"):
    """Destroy a group made by :func:`create_group` (never the world group)."""
    check_group_name(group, entry)
    if group == WORLD_GROUP:
        raise ValueError(f"{entry}: the world group {WORLD_GROUP!r} cannot be destroyed")
    get_group(group, entry)
    with _LOCK:
        _GROUPS.pop(group, None)
        _SPLIT_STRATEGIES.pop(group, None)


def pair_group(group, world_a, world_b):
    """The two-member group of world ranks ``world_a`` and ``world_b`` used by send/receive
    inside ``group`` (a :class:`Group`)."""
    members = tuple(sorted((world_a, world_b)))
    with _LOCK:
        key = _derive_key("pair", f"{group.name}#{group.key}", members)
    return Group(f"{group.name}/pair{members[0]}-{members[1]}", key, members, group.world_rank)


def set_split_strategy(group, kind, values):
    """Record how gradients are split into fused all-reduces for ``group`` (a name)."""
    with _LOCK:
        _SPLIT_STRATEGIES[group] = (kind, tuple(values))


def get_split_strategy(group=WORLD_GROUP):
    """The split strategy recorded for ``group``: ``("idx" | "size", values)`` or None."""
    with _LOCK:
        return _SPLIT_STRATEGIES.get(group)


def reset():
    """Forget every created group and split strategy (keys stay reserved). For tests."""
    with _LOCK:
        _GROUPS.clear()
        _SPLIT_STRATEGIES.clear()
