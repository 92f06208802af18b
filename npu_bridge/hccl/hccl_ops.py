"""HCCL collective ops (``npu_bridge.hccl.hccl_ops``) for a single rank.

The original wraps the ``Hcom*`` custom ops of ``_tf_adapter.so``, which run on the device through
HCCL. This build runs one rank, so every collective is the arithmetic it performs over a world of
one process, built from ordinary TensorFlow ops:

* ``allreduce`` with ``sum``/``prod``/``max``/``min`` over one rank is the input (``tf.identity``);
* ``allgather`` concatenates one tensor along axis 0: the input;
* ``broadcast`` from root 0 to itself returns the inputs (a list, as ``HcomBroadcast``);
* ``reduce`` to root 0 and ``reduce_scatter`` over one rank are the input;
* ``all_to_all_v`` / ``all_to_all_v_c`` keep the slice this rank sends to itself (the data are
  treated as flat, as HCCL does; the counts are checked when the graph runs).

Arguments are checked as HCCL would on one rank (reduction names, ``rank_size`` 1, root rank 0,
known groups, fusion flags). When ``RANK_SIZE`` (or ``CM_WORKER_SIZE``) is greater than 1, every
function raises :class:`~npu_adapter.errors.BackendError` naming the environment variables.
Point-to-point ``send``/``receive`` need a second rank and raise ``ValueError``; the RDMA
remote-memory ops need the device and raise ``BackendError``.

The ops are named after the original op types (``HcomAllReduce``, ``HcomBroadcast``, ...) so a
dumped graph shows where the collectives were.
"""

import tensorflow as tf

from npu_adapter.errors import BackendError
from npu_bridge import _env
from npu_bridge.hccl.manage import api as _api

__all__ = [
    "WORLD_GROUP",
    "all_to_all_v",
    "all_to_all_v_c",
    "allgather",
    "allreduce",
    "broadcast",
    "gather_all_to_all_v",
    "receive",
    "reduce",
    "reduce_scatter",
    "remote_read",
    "remote_ref_read",
    "remote_scatter_write",
    "remote_write",
    "send",
]

WORLD_GROUP = _api.WORLD_GROUP
REDUCTIONS = ("sum", "prod", "max", "min")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check(entry, group, reduction=None, fusion=None, fusions=(0, 2), fusion_id=None):
    _env.require_single_rank(f"hccl_ops.{entry}")
    _api._check_group(group, f"hccl_ops.{entry}")
    if reduction is not None and reduction not in REDUCTIONS:
        raise ValueError(f"hccl_ops.{entry}: reduction={reduction!r} is not supported; "
                         f"expected one of {list(REDUCTIONS)}")
    if fusion is not None and (not _is_int(fusion) or fusion not in fusions):
        raise ValueError(f"hccl_ops.{entry}: fusion={fusion!r} is invalid; expected one of "
                         f"{list(fusions)}")
    if fusion_id is not None and not _is_int(fusion_id):
        raise ValueError(f"hccl_ops.{entry}: fusion_id must be an integer, got {fusion_id!r}")


def _check_root(entry, root_rank):
    if not _is_int(root_rank) or root_rank != 0:
        raise ValueError(f"hccl_ops.{entry}: root_rank={root_rank!r} is not a rank of the "
                         "group; this build runs a single rank whose id is 0")


def _check_rank_size(entry, rank_size):
    if not _is_int(rank_size) or rank_size != 1:
        raise ValueError(f"hccl_ops.{entry}: rank_size={rank_size!r} does not match the group "
                         "size; this build runs a single rank, so rank_size must be 1")


def allreduce(tensor, reduction, fusion=1, fusion_id=-1, group=WORLD_GROUP):
    """Allreduce ``tensor`` over ``group`` with ``reduction`` (sum/prod/max/min).

    One rank: the result is the input (op ``HcomAllReduce``, an Identity).
    """
    _check("allreduce", group, reduction, fusion, (0, 1, 2), fusion_id)
    return tf.identity(tensor, name="HcomAllReduce")


def allgather(tensor, rank_size, group=WORLD_GROUP, fusion=0, fusion_id=-1):
    """Gather ``tensor`` from every rank, concatenated along axis 0. One rank: the input."""
    _check("allgather", group, None, fusion, (0, 2), fusion_id)
    _check_rank_size("allgather", rank_size)
    return tf.identity(tensor, name="HcomAllGather")


def broadcast(tensor, root_rank, fusion=2, fusion_id=0, group=WORLD_GROUP):
    """Broadcast the list of tensors ``tensor`` from ``root_rank``; returns a list.

    One rank: ``root_rank`` must be 0 and the result is the inputs. A single tensor is accepted
    and treated as a list of one.
    """
    _check("broadcast", group, None, fusion, (0, 2), fusion_id)
    _check_root("broadcast", root_rank)
    tensors = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
    with tf.name_scope("HcomBroadcast"):
        return [tf.identity(item) for item in tensors]


def reduce(tensor, reduction, root_rank, fusion=0, fusion_id=-1, group=WORLD_GROUP):
    """Reduce ``tensor`` to ``root_rank``. One rank: root 0, the result is the input."""
    _check("reduce", group, reduction, fusion, (0, 2), fusion_id)
    _check_root("reduce", root_rank)
    return tf.identity(tensor, name="HcomReduce")


def reduce_scatter(tensor, reduction, rank_size, group=WORLD_GROUP, fusion=0, fusion_id=-1):
    """Reduce ``tensor`` and scatter equal parts along axis 0. One rank: the input."""
    _check("reduce_scatter", group, reduction, fusion, (0, 2), fusion_id)
    _check_rank_size("reduce_scatter", rank_size)
    return tf.identity(tensor, name="HcomReduceScatter")


def _no_peer(entry, arg, value):
    _env.require_single_rank(f"hccl_ops.{entry}")
    raise ValueError(f"hccl_ops.{entry}: {arg}={value!r} but this build runs a single rank, so "
                     "there is no other rank to exchange data with; point-to-point send/receive "
                     "needs at least two ranks")


def send(tensor, sr_tag, dest_rank, group=WORLD_GROUP):
    """Send ``tensor`` to ``dest_rank``. Always ``ValueError`` on a single rank (no peer)."""
    _no_peer("send", "dest_rank", dest_rank)


def receive(shape, data_type, sr_tag, src_rank, group=WORLD_GROUP):
    """Receive a tensor from ``src_rank``. Always ``ValueError`` on a single rank (no peer)."""
    _no_peer("receive", "src_rank", src_rank)


def _rdma(entry):
    _env.require_single_rank(f"hccl_ops.{entry}")
    raise BackendError(f"hccl_ops.{entry} reads or writes device memory of other ranks over RDMA "
                       "and needs the cann backend with HCCL; this build has no device memory to "
                       "address. Exchange the data with TensorFlow ops instead.")


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
    """All-to-all with per-rank counts and displacements (elements of the flattened data).

    One rank: the result is ``flat(send_data)[send_displacements[0]:][:send_counts[0]]``; at run
    time ``recv_counts[0]`` must equal ``send_counts[0]`` and ``recv_displacements[0]`` be 0.
    """
    _check("all_to_all_v", group)
    with tf.name_scope("HcomAllToAllV"):
        data = tf.reshape(tf.convert_to_tensor(send_data), [-1])
        send_counts = tf.reshape(tf.cast(send_counts, tf.int64), [-1])
        send_displacements = tf.reshape(tf.cast(send_displacements, tf.int64), [-1])
        recv_counts = tf.reshape(tf.cast(recv_counts, tf.int64), [-1])
        recv_displacements = tf.reshape(tf.cast(recv_displacements, tf.int64), [-1])
        checks = [
            tf.debugging.assert_equal(
                tf.size(send_counts, out_type=tf.int64), tf.constant(1, tf.int64),
                message="all_to_all_v: send_counts must have one entry per rank (1)"),
            tf.debugging.assert_equal(
                recv_counts[0], send_counts[0],
                message="all_to_all_v: on one rank recv_counts[0] must equal send_counts[0]"),
            tf.debugging.assert_equal(
                recv_displacements[0], tf.constant(0, tf.int64),
                message="all_to_all_v: on one rank recv_displacements[0] must be 0"),
        ]
        with tf.control_dependencies(checks):
            return tf.identity(
                tf.slice(data, [send_displacements[0]], [send_counts[0]]), name="recv_data")


def all_to_all_v_c(send_data, send_count_matrix, rank, fusion=0, fusion_id=-1,
                   group=WORLD_GROUP):
    """All-to-all with a ``rank_size x rank_size`` count matrix. One rank: ``rank`` must be 0 and
    the result is the first ``send_count_matrix[0][0]`` elements of the flattened data."""
    _check("all_to_all_v_c", group, None, fusion, (0, 2), fusion_id)
    if not _is_int(rank) or rank != 0:
        raise ValueError(f"hccl_ops.all_to_all_v_c: rank={rank!r}; this build runs a single rank "
                         "whose id is 0")
    with tf.name_scope("HcomAllToAllVC"):
        data = tf.reshape(tf.convert_to_tensor(send_data), [-1])
        matrix = tf.reshape(tf.cast(send_count_matrix, tf.int64), [-1])
        check = tf.debugging.assert_equal(
            tf.size(matrix, out_type=tf.int64), tf.constant(1, tf.int64),
            message="all_to_all_v_c: send_count_matrix must be 1x1 on one rank")
        with tf.control_dependencies([check]):
            return tf.identity(tf.slice(data, [0], [matrix[0]]), name="recv_data")
