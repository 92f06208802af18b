"""HCCL collective ops (``npu_bridge.hccl.hccl_ops``) on TensorFlow's collective runtime.

The original wraps the ``Hcom*`` custom ops of ``_tf_adapter.so``, which run on the device
through HCCL. Here each function builds TensorFlow collective ops in the default graph
(:mod:`npu_adapter.distributed.collectives`, mapping in ``docs/distributed.md``); they run in a
session of a rank started with the original's environment (``RANK_SIZE``, ``RANK_ID``,
``RANK_TABLE_FILE``; ``npu-adapter launch`` sets it). With one rank every collective is the
arithmetic it performs over a world of one process (the input), built from ordinary ops.

Arguments are checked as HCCL does: reduction names, ``rank_size`` equal to the group size, root
and peer ranks within the group, known groups this rank belongs to, fusion flags (accepted and
validated; TensorFlow schedules the collectives itself, and ``NPUDistributedOptimizer`` fuses
gradients by the split strategy). ``allreduce`` with ``"sum"`` has a gradient (the all-reduce
sum of the gradients), as the original registers. The RDMA remote-memory ops address device
memory and raise :class:`~npu_adapter.errors.BackendError`.

The ops live under name scopes named after the original op types (``HcomAllReduce``,
``HcomBroadcast``, ...) so a dumped graph shows where the collectives are.
"""

import tensorflow as tf

from npu_adapter.distributed import collectives as _collectives
from npu_adapter.distributed import groups as _groups
from npu_adapter.errors import BackendError

__all__ = [
    "WORLD_GROUP",
    "all_to_all_v",
    "all_to_all_v_c",
    "allgather",
    "allreduce",
    "broadcast",
    "gather_all_to_all_v",
    "gen_hccl_ops",
    "receive",
    "reduce",
    "reduce_scatter",
    "remote_read",
    "remote_ref_read",
    "remote_scatter_write",
    "remote_write",
    "send",
]

WORLD_GROUP = _groups.WORLD_GROUP
REDUCTIONS = tuple(_collectives.REDUCTIONS)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _member_group(entry, group):
    found = _groups.get_group(group, f"hccl_ops.{entry}")
    if not found.is_member:
        raise ValueError(f"hccl_ops.{entry}: this process (world rank {found.world_rank}) is not "
                         f"a member of group {group!r} (members: {list(found.members)})")
    return found


def _check(entry, group, reduction=None, fusion=None, fusions=(0, 2), fusion_id=None):
    found = _member_group(entry, group)
    if reduction is not None and reduction not in REDUCTIONS:
        raise ValueError(f"hccl_ops.{entry}: reduction={reduction!r} is not supported; "
                         f"expected one of {list(REDUCTIONS)}")
    if fusion is not None and (not _is_int(fusion) or fusion not in fusions):
        raise ValueError(f"hccl_ops.{entry}: fusion={fusion!r} is invalid; expected one of "
                         f"{list(fusions)}")
    if fusion_id is not None and not _is_int(fusion_id):
        raise ValueError(f"hccl_ops.{entry}: fusion_id must be an integer, got {fusion_id!r}")
    return found


def _check_rank(entry, name, value, found):
    if not _is_int(value) or not 0 <= value < found.size:
        raise ValueError(f"hccl_ops.{entry}: {name}={value!r} is not a rank of group "
                         f"{found.name!r}; expected 0 to {found.size - 1}")


def _check_rank_size(entry, rank_size, found):
    if not _is_int(rank_size) or rank_size != found.size:
        raise ValueError(f"hccl_ops.{entry}: rank_size={rank_size!r} does not match the size "
                         f"{found.size} of group {found.name!r}")


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group=WORLD_GROUP):
    """All-reduce ``tensor`` over ``group`` with ``reduction`` (sum/prod/max/min)."""
    found = _check("allreduce", group, reduction, fusion, (0, 1, 2), fusion_id)
    return _collectives.all_reduce(tensor, found, reduction)


def allgather(tensor, rank_size, group=WORLD_GROUP, fusion=0, fusion_id=-1):
    """Gather ``tensor`` from every rank, concatenated along axis 0 in rank order."""
    found = _check("allgather", group, None, fusion, (0, 2), fusion_id)
    _check_rank_size("allgather", rank_size, found)
    return _collectives.all_gather(tensor, found)


def broadcast(tensor, root_rank, fusion=2, fusion_id=0, group=WORLD_GROUP):
    """Broadcast the list of tensors ``tensor`` from group rank ``root_rank``; returns a list
    (a single tensor is treated as a list of one)."""
    found = _check("broadcast", group, None, fusion, (0, 2), fusion_id)
    _check_rank("broadcast", "root_rank", root_rank, found)
    tensors = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
    with tf.name_scope("HcomBroadcast"):
        return [_collectives.broadcast(item, found, root_rank, name="broadcast")
                for item in tensors]


def reduce(tensor, reduction, root_rank, fusion=0, fusion_id=-1, group=WORLD_GROUP):
    """Reduce ``tensor`` to ``root_rank`` (the other ranks receive the result too)."""
    found = _check("reduce", group, reduction, fusion, (0, 2), fusion_id)
    _check_rank("reduce", "root_rank", root_rank, found)
    return _collectives.reduce(tensor, found, reduction, root_rank)


def reduce_scatter(tensor, reduction, rank_size, group=WORLD_GROUP, fusion=0, fusion_id=-1):
    """Reduce ``tensor`` and keep this rank's equal part of axis 0."""
    found = _check("reduce_scatter", group, reduction, fusion, (0, 2), fusion_id)
    _check_rank_size("reduce_scatter", rank_size, found)
    return _collectives.reduce_scatter(tensor, found, reduction)


def _peer(entry, name, value, found):
    _check_rank(entry, name, value, found)
    if value == found.rank:
        raise ValueError(f"hccl_ops.{entry}: {name}={value!r} is this rank itself; send and "
                         "receive exchange data between two different ranks")
    return _groups.pair_group(found, found.world_rank, found.world_rank_of(value))


def send(tensor, sr_tag, dest_rank, group=WORLD_GROUP):
    """Send ``tensor`` to group rank ``dest_rank``; the receiver calls :func:`receive` with the
    same ``sr_tag``. Returns the send op."""
    found = _check("send", group)
    if not _is_int(sr_tag):
        raise ValueError(f"hccl_ops.send: sr_tag must be an integer, got {sr_tag!r}")
    pair = _peer("send", "dest_rank", dest_rank, found)
    return _collectives.send(tensor, found, pair, dest_rank, sr_tag)


def receive(shape, data_type, sr_tag, src_rank, group=WORLD_GROUP):
    """Receive a ``data_type`` tensor of ``shape`` sent by group rank ``src_rank`` with
    ``sr_tag``."""
    found = _check("receive", group)
    if not _is_int(sr_tag):
        raise ValueError(f"hccl_ops.receive: sr_tag must be an integer, got {sr_tag!r}")
    pair = _peer("receive", "src_rank", src_rank, found)
    return _collectives.receive(shape, data_type, found, pair, src_rank, sr_tag)


def _rdma(entry):
    raise BackendError(f"hccl_ops.{entry} reads or writes device memory of other ranks over RDMA "
                       "and needs the cann backend with HCCL; this build has no device memory to "
                       "address. Exchange the data with the collectives (all_to_all_v, "
                       "allgather) instead.")


def remote_read(tensorRemote, data_type):
    """RDMA read of remote device memory: needs the device (``BackendError``)."""
    _rdma("remote_read")


def remote_ref_read(tensorRemote, cache, offset):
    """RDMA read into a local cache variable: needs the device (``BackendError``)."""
    _rdma("remote_ref_read")


def remote_write(tensorRemote, tensorLocal, data_type):
    """RDMA write to remote device memory: needs the device (``BackendError``)."""
    _rdma("remote_write")


def remote_scatter_write(tensorRemote, tensorLocal, offset):
    """RDMA scatter write to remote device memory: needs the device (``BackendError``)."""
    _rdma("remote_scatter_write")


def gather_all_to_all_v(addrinfo, addrinfo_count_per_rank, recv_counts, recv_displacements,
                        dtype, addr_length, group=WORLD_GROUP):
    """Gather device memory by address, then all-to-all: needs the device (``BackendError``)."""
    _rdma("gather_all_to_all_v")


def all_to_all_v(send_data, send_counts, send_displacements, recv_counts, recv_displacements,
                 group=WORLD_GROUP):
    """All-to-all with per-rank element counts and displacements into the flattened data.

    This rank sends ``send_counts[j]`` elements from ``send_displacements[j]`` to rank ``j`` and
    places the ``recv_counts[i]`` elements from rank ``i`` at ``recv_displacements[i]`` of the
    result (a vector of length ``max(recv_displacements + recv_counts)``). The counts of all
    ranks are checked against each other at run time (``InvalidArgumentError``).
    """
    found = _check("all_to_all_v", group)
    return _collectives.all_to_all_v(send_data, send_counts, send_displacements, recv_counts,
                                     recv_displacements, found)


def all_to_all_v_c(send_data, send_count_matrix, rank, fusion=0, fusion_id=-1,
                   group=WORLD_GROUP):
    """All-to-all with the ``rank_size x rank_size`` count matrix (the same on every rank):
    ``send_count_matrix[i][j]`` elements go from rank ``i`` to rank ``j``, packed in rank order
    on both sides. ``rank`` is this process's rank in ``group``."""
    found = _check("all_to_all_v_c", group, None, fusion, (0, 2), fusion_id)
    if not _is_int(rank) or rank != found.rank:
        raise ValueError(f"hccl_ops.all_to_all_v_c: rank={rank!r} is not this process's rank "
                         f"{found.rank} in group {group!r}")
    size = found.size
    with tf.name_scope("HcomAllToAllVC"):
        matrix = tf.reshape(tf.cast(send_count_matrix, tf.int64), [-1])
        check = tf.debugging.assert_equal(
            tf.size(matrix, out_type=tf.int64), tf.constant(size * size, tf.int64),
            message=f"all_to_all_v_c: send_count_matrix must be {size}x{size}")
        with tf.control_dependencies([check]):
            matrix = tf.reshape(matrix, [size, size])
        send_counts = matrix[rank]
        recv_counts = matrix[:, rank]
        send_displacements = tf.cumsum(send_counts, exclusive=True)
        recv_displacements = tf.cumsum(recv_counts, exclusive=True)
        return _collectives.all_to_all_v(send_data, send_counts, send_displacements,
                                         recv_counts, recv_displacements, found)


class _GenHcclOps:
    """``gen_hccl_ops``: the raw HCCL op wrappers under the names TensorFlow generates for the
    original's ops (``HcomAllReduce`` → ``hcom_all_reduce``), with the generated argument names;
    each builds the same collective as the function of this module it names."""

    @staticmethod
    def hcom_all_reduce(input, reduction, group=WORLD_GROUP, fusion=1, fusion_id=-1,
                        name=None):
        """``HcomAllReduce``: see :func:`allreduce`."""
        del name
        return allreduce(input, reduction, fusion, fusion_id, group)

    @staticmethod
    def hcom_all_gather(input, rank_size, group=WORLD_GROUP, name=None):
        """``HcomAllGather``: see :func:`allgather`."""
        del name
        return allgather(input, rank_size, group)

    @staticmethod
    def hcom_broadcast(input, root_rank, group=WORLD_GROUP, fusion=2, fusion_id=0,
                       name=None):
        """``HcomBroadcast`` (a list of tensors): see :func:`broadcast`."""
        del name
        return broadcast(input, root_rank, fusion, fusion_id, group)

    @staticmethod
    def hcom_reduce(input, reduction, root_rank, group=WORLD_GROUP, fusion=0, fusion_id=-1,
                    name=None):
        """``HcomReduce``: see :func:`reduce`."""
        del name
        return reduce(input, reduction, root_rank, fusion, fusion_id, group)

    @staticmethod
    def hcom_reduce_scatter(input, reduction, rank_size, group=WORLD_GROUP, fusion=0,
                            fusion_id=-1, name=None):
        """``HcomReduceScatter``: see :func:`reduce_scatter`."""
        del name
        return reduce_scatter(input, reduction, rank_size, group, fusion, fusion_id)

    @staticmethod
    def hcom_send(input, sr_tag, dest_rank, group=WORLD_GROUP, name=None):
        """``HcomSend``: see :func:`send`."""
        del name
        return send(input, sr_tag, dest_rank, group)

    @staticmethod
    def hcom_receive(shape, T, sr_tag, src_rank, group=WORLD_GROUP, name=None):
        """``HcomReceive``: see :func:`receive`."""
        del name
        return receive(shape, T, sr_tag, src_rank, group)


gen_hccl_ops = _GenHcclOps()
"""The generated-op namespace of the original (``hccl_ops.gen_hccl_ops``)."""
