"""Collectives over a :class:`~npu_adapter.distributed.groups.Group`, built from TensorFlow's
collective ops in graph mode.

Each function adds ops to the default graph; they run inside a session connected to this rank's
server (:func:`npu_adapter.distributed.session_target`). The mapping (``docs/distributed.md``):

=====================  ==========================================================================
all-reduce             ``CollectiveReduceV2`` (sum/prod/max/min = merge op Add/Mul/Max/Min)
all-gather             ``CollectiveGatherV2`` (concatenation along axis 0, group-rank order)
broadcast              ``CollectiveBcastSendV2`` on the root, ``CollectiveBcastRecvV2`` elsewhere
reduce (to a root)     an all-reduce (every rank gets the result; HCCL leaves non-roots undefined)
reduce-scatter         an all-reduce, then this rank's slice of axis 0 (TensorFlow's CPU runtime
                       has no reduce-scatter)
all-to-all-v           two gathers: the count matrix, then every rank's blocks padded to the
                       largest count (TensorFlow's CPU runtime has no all-to-all)
send / receive         a broadcast in the two-member group of sender and receiver
=====================  ==========================================================================

With a group of one rank every collective is the identity (no collective op is built).

**Instance keys.** Every collective op needs an instance key that is the same on all members
and unique among the collectives of its group. Keys are derived from the op's position among
the collectives of that group in the graph being built and from what it moves (kind, dtype,
static shape, reduction), so ranks that build the same graph in the same order agree without
talking, and the same graph built twice reuses its keys. TensorFlow remembers the shape an
instance key was first run with for the life of the process; an op whose input shape is not
fully static therefore gets a key that also depends on the runtime shape (one of 255 buckets
per op). **Steps.** TensorFlow matches collectives of one step by a step counter every rank
keeps: each rank must run the same number of ``Session.run`` calls that contain collectives.
After a failed collective every later collective of the process fails ("Restart your program"):
a rank stops after its first collective error.
"""

import hashlib
import itertools
import threading
import weakref

import tensorflow as tf

from npu_adapter.distributed import environment
from npu_adapter.distributed.errors import DistributedError

__all__ = [
    "REDUCTIONS",
    "all_gather",
    "all_gather_ragged",
    "all_reduce",
    "all_to_all_v",
    "broadcast",
    "fused_all_reduce",
    "receive",
    "reduce",
    "reduce_scatter",
    "send",
]

REDUCTIONS = {"sum": "Add", "prod": "Mul", "max": "Max", "min": "Min"}
"""HCCL reduction name -> merge op of ``CollectiveReduceV2``."""

_NATIVE_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64)
# Types the CPU collectives do not take travel widened (exactly: every value fits).
_WIDENED = {tf.bool: tf.int32, tf.int8: tf.int32, tf.uint8: tf.int32, tf.int16: tf.int32,
            tf.uint16: tf.int32, tf.uint32: tf.int64, tf.uint64: tf.int64}
_BASE_KEYS = (1 << 23) - 1  # base keys 1 .. 2**23-1; the key is base * 256 + shape bucket
_SHAPE_BUCKETS = 255
_GRAD_NAME = "NpuAdapterCollectiveAllReduceSum"


class _InstanceKeys:
    """Deterministic instance keys per (graph, group) stream (see the module doc)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._streams = weakref.WeakKeyDictionary()  # root graph -> {stream: counter}
        self._used = {}  # group key -> {base key: identity}

    def base(self, graph, group_key, stream, identity):
        """A base key for the next op of ``stream`` in ``graph`` whose contents are described
        by ``identity`` (a tuple of str/int)."""
        root = _root_graph(graph)
        with self._lock:
            counters = self._streams.setdefault(root, {})
            counter = counters.setdefault((group_key, stream), itertools.count())
            full = (group_key, stream, next(counter), *identity)
            digest = hashlib.sha256(repr(full).encode("utf-8")).digest()
            key = 1 + int.from_bytes(digest[:8], "big") % _BASE_KEYS
            used = self._used.setdefault(group_key, {})
            while used.get(key, full) != full:
                key = key % _BASE_KEYS + 1
            used[key] = full
            return key


_KEYS = _InstanceKeys()


def _root_graph(graph):
    while getattr(graph, "outer_graph", None) is not None:
        graph = graph.outer_graph
    return graph


def _timeout():
    return float(environment.current().timeout_seconds)


def _graph_mode(group, entry):
    """Collectives between processes run in graph mode, inside a session on the rank's
    server; eager execution has no such session."""
    if group.size > 1 and tf.executing_eagerly():
        raise DistributedError(
            f"{entry}: collectives between ranks are built in graph mode and run in a "
            "tf.compat.v1 session (call tf.compat.v1.disable_eager_execution(), as "
            "`from npu_bridge.npu_init import *` does)")


def _shape_identity(shape):
    if shape.rank is None:
        return "unknown"
    return tuple(-1 if dim is None else int(dim) for dim in shape.as_list())


def _instance_key(tensor_for_shape, group, stream, identity, shape=None):
    """The instance key (an int32 tensor) of a new collective op of ``group``."""
    shape = tensor_for_shape.shape if shape is None else shape
    base = _KEYS.base(tf.compat.v1.get_default_graph(), group.key, stream,
                      (*identity, _shape_identity(shape)))
    static = tf.constant(base << 8, tf.int32, name="instance_key")
    if shape.is_fully_defined():
        return static
    # The same op may run with several shapes: each gets its own key (see the module doc).
    runtime_shape = tf.strings.reduce_join(
        tf.strings.as_string(tf.shape(tensor_for_shape, out_type=tf.int64)), separator="x")
    bucket = tf.strings.to_hash_bucket_fast(runtime_shape, _SHAPE_BUCKETS)
    return tf.add(static, tf.cast(bucket, tf.int32) + 1, name="instance_key_for_shape")


def _transport(tensor, entry):
    """``(tensor in a dtype the collectives take, dtype to cast the result back to or None)``."""
    dtype = tensor.dtype.base_dtype
    if dtype in _NATIVE_DTYPES:
        return tensor, None
    if dtype in _WIDENED:
        return tf.cast(tensor, _WIDENED[dtype]), dtype
    supported = sorted(d.name for d in (*_NATIVE_DTYPES, *_WIDENED))
    raise TypeError(f"{entry}: dtype {dtype.name} cannot be exchanged between ranks; supported: "
                    f"{supported}")


def _restore(tensor, dtype):
    return tensor if dtype is None else tf.cast(tensor, dtype)


def _raw_reduce(tensor, group_size, group_key, merge_op, instance_key):
    return tf.raw_ops.CollectiveReduceV2(
        input=tensor, group_size=group_size, group_key=group_key, instance_key=instance_key,
        ordering_token=[], merge_op=merge_op, final_op="Id", communication_hint="auto",
        timeout_seconds=_timeout())


class _KeyOnly:
    """The parts of a Group the gradient needs (size and key are read from the forward op)."""

    def __init__(self, size, key):
        self.size = size
        self.key = key


@tf.RegisterGradient(_GRAD_NAME)
def _all_reduce_sum_grad(op, grad):
    """The gradient of an all-reduce sum is the all-reduce sum of the incoming gradients (every
    rank's output depends on every rank's input)."""
    size = int(tf.get_static_value(op.inputs[1]))
    key = int(tf.get_static_value(op.inputs[2]))
    group = _KeyOnly(size, key)
    with tf.name_scope("HcomAllReduceGrad"):
        instance = _instance_key(grad, group, "collective", ("reduce", "Add", grad.dtype.name))
        summed = _raw_reduce(grad, size, key, "Add", instance)
    return [summed] + [None] * (len(op.inputs) - 1)


def all_reduce(tensor, group, reduction="sum", name="HcomAllReduce"):
    """Reduce ``tensor`` over ``group`` with ``reduction`` (sum/prod/max/min); every member
    gets the result. The sum has a gradient (the all-reduce sum of the gradients)."""
    _graph_mode(group, "all-reduce")
    tensor = tf.convert_to_tensor(tensor)
    merge_op = REDUCTIONS[reduction]
    if group.size == 1:
        return tf.identity(tensor, name=name)
    with tf.name_scope(name):
        value, back = _transport(tensor, "all-reduce")
        instance = _instance_key(value, group, "collective", ("reduce", merge_op,
                                                              value.dtype.name))
        graph = tf.compat.v1.get_default_graph()
        if reduction == "sum" and back is None and value.dtype.is_floating:
            with graph.gradient_override_map({"CollectiveReduceV2": _GRAD_NAME}):
                result = _raw_reduce(value, group.size, group.key, merge_op, instance)
        else:
            result = _raw_reduce(value, group.size, group.key, merge_op, instance)
        return _restore(result, back)


def fused_all_reduce(tensors, group, reduction="sum", segments=None, name="HcomAllReduce"):
    """All-reduce a list of dense tensors with one collective per segment and dtype.

    ``segments`` is a list of index lists (every index once); default: one segment. Tensors are
    flattened and concatenated, reduced together and split back to their shapes.
    """
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if segments is None:
        segments = [list(range(len(tensors)))]
    if group.size == 1:
        return [tf.identity(t) for t in tensors]
    results = [None] * len(tensors)
    with tf.name_scope(name):
        for segment in segments:
            by_dtype = {}
            for index in segment:
                by_dtype.setdefault(tensors[index].dtype.base_dtype, []).append(index)
            for dtype in sorted(by_dtype, key=lambda d: d.name):
                indices = by_dtype[dtype]
                parts = [tensors[i] for i in indices]
                if len(parts) == 1:
                    results[indices[0]] = all_reduce(parts[0], group, reduction, name="single")
                    continue
                flat = tf.concat([tf.reshape(part, [-1]) for part in parts], axis=0)
                reduced = all_reduce(flat, group, reduction, name="fused")
                sizes = [_static_size(part) for part in parts]
                if any(size is None for size in sizes):
                    sizes = tf.stack([tf.size(part) for part in parts])
                pieces = tf.split(reduced, sizes, num=len(parts))
                for index, part, piece in zip(indices, parts, pieces):
                    shape = part.shape.as_list() if part.shape.is_fully_defined() \
                        else tf.shape(part)
                    results[index] = tf.reshape(piece, shape)
    return results


def _static_size(tensor):
    if not tensor.shape.is_fully_defined():
        return None
    size = 1
    for dim in tensor.shape.as_list():
        size *= dim
    return size


def _gather_uniform(tensor, group):
    _graph_mode(group, "all-gather")
    value, back = _transport(tensor, "all-gather")
    instance = _instance_key(value, group, "collective", ("gather", value.dtype.name))
    gathered = tf.raw_ops.CollectiveGatherV2(
        input=value, group_size=group.size, group_key=group.key, instance_key=instance,
        ordering_token=[], communication_hint="auto", timeout_seconds=_timeout())
    return _restore(gathered, back)


def all_gather(tensor, group, name="HcomAllGather"):
    """Concatenate ``tensor`` of every member along axis 0, in group-rank order (the shapes
    must agree on every rank; a scalar counts as a vector of one)."""
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        tensor = tf.reshape(tensor, [1])
    if group.size == 1:
        return tf.identity(tensor, name=name)
    with tf.name_scope(name):
        return _gather_uniform(tensor, group)


def all_gather_ragged(tensor, group, name="HcomAllGatherV"):
    """Like :func:`all_gather`, but the first dimension may differ between ranks (the rows are
    exchanged padded to the longest, then the padding is dropped)."""
    tensor = tf.convert_to_tensor(tensor)
    if group.size == 1:
        return tf.identity(tensor, name=name)
    with tf.name_scope(name):
        rows = tf.shape(tensor, out_type=tf.int64)[:1]
        all_rows = _gather_uniform(rows, group)
        longest = tf.reduce_max(all_rows)
        padding = [[0, longest - rows[0]]] + [[0, 0]] * (tensor.shape.rank - 1)
        padded = tf.pad(tensor, padding)
        gathered = _gather_uniform(padded, group)
        keep = tf.reshape(tf.sequence_mask(all_rows, longest), [-1])
        return tf.boolean_mask(gathered, keep)


def broadcast(tensor, group, root, name="HcomBroadcast"):
    """``tensor`` of group rank ``root`` on every member (the others' values only give the
    shape)."""
    _graph_mode(group, "broadcast")
    tensor = tf.convert_to_tensor(tensor)
    if group.size == 1:
        return tf.identity(tensor, name=name)
    with tf.name_scope(name):
        value, back = _transport(tensor, "broadcast")
        instance = _instance_key(value, group, "collective", ("bcast", value.dtype.name, root))
        if group.rank == root:
            out = tf.raw_ops.CollectiveBcastSendV2(
                input=value, group_size=group.size, group_key=group.key, instance_key=instance,
                communication_hint="auto", timeout_seconds=_timeout())
        else:
            shape = value.shape.as_list() if value.shape.is_fully_defined() \
                else tf.shape(value)
            out = tf.raw_ops.CollectiveBcastRecvV2(
                group_size=group.size, group_key=group.key, instance_key=instance, shape=shape,
                T=value.dtype, communication_hint="auto", timeout_seconds=_timeout())
            out.set_shape(value.shape)
        return _restore(out, back)


def reduce(tensor, group, reduction, root, name="HcomReduce"):
    """Reduce ``tensor`` to group rank ``root``. Every member gets the result (an all-reduce):
    HCCL leaves the output of the other ranks undefined, so this is one valid outcome."""
    del root  # validated by the caller; every rank receives the result
    return all_reduce(tensor, group, reduction, name=name)


def reduce_scatter(tensor, group, reduction, name="HcomReduceScatter"):
    """Reduce ``tensor`` over ``group`` and keep this rank's part: rows ``[r*d, (r+1)*d)`` of
    axis 0 with ``d = dim0 / group size`` (dim0 must be divisible by the group size)."""
    tensor = tf.convert_to_tensor(tensor)
    size = group.size
    dim0 = tensor.shape[0] if tensor.shape.rank else None
    if dim0 is not None and dim0 % size:
        raise ValueError(f"reduce_scatter: the first dimension ({dim0}) of {tensor.name} is not "
                         f"divisible by the group size {size}")
    if size == 1:
        return tf.identity(tensor, name=name)
    with tf.name_scope(name):
        rows = tf.shape(tensor)[0]
        check = tf.debugging.assert_equal(
            tf.math.floormod(rows, size), 0,
            message=f"reduce_scatter: the first dimension must be divisible by the group size "
                    f"{size}")
        with tf.control_dependencies([check]):
            reduced = all_reduce(tensor, group, reduction, name="all_reduce")
        part = rows // size
        out = reduced[group.rank * part:(group.rank + 1) * part]
        if dim0 is not None:
            out.set_shape([dim0 // size] + tensor.shape.as_list()[1:])
        return out


def _counts(values, size, what):
    vector = tf.reshape(tf.cast(values, tf.int64), [-1])
    check = tf.debugging.assert_equal(
        tf.size(vector, out_type=tf.int64), tf.constant(size, tf.int64),
        message=f"all_to_all_v: {what} must have one entry per rank of the group ({size})")
    with tf.control_dependencies([check]):
        return tf.identity(vector)


def all_to_all_v(send_data, send_counts, send_displacements, recv_counts, recv_displacements,
                 group, name="HcomAllToAllV"):
    """All-to-all with per-rank element counts and displacements into the flattened data.

    This rank sends ``send_counts[j]`` elements starting at ``send_displacements[j]`` to group
    rank ``j`` and receives ``recv_counts[i]`` elements from rank ``i`` at
    ``recv_displacements[i]`` of the result, a vector of length
    ``max(recv_displacements + recv_counts)`` (gaps are zero; ranges must not overlap). The
    counts are checked against each other on every rank before any data moves.
    """
    data = tf.reshape(tf.convert_to_tensor(send_data), [-1])
    size = group.size
    with tf.name_scope(name):
        sc = _counts(send_counts, size, "send_counts")
        sd = _counts(send_displacements, size, "send_displacements")
        rc = _counts(recv_counts, size, "recv_counts")
        rd = _counts(recv_displacements, size, "recv_displacements")
        me = group.rank if size > 1 else 0
        if size == 1:
            sent = tf.reshape(sc, [1, 1])
            expected = tf.reshape(rc, [1, 1])
        else:
            both = tf.reshape(_gather_uniform(tf.stack([sc, rc]), group), [size, 2, size])
            sent = both[:, 0, :]       # sent[i, j]: what rank i sends to rank j
            expected = both[:, 1, :]   # expected[j, i]: what rank j expects from rank i
        total = tf.size(data, out_type=tf.int64)
        checks = [
            tf.debugging.assert_equal(
                tf.transpose(sent), expected,
                message="all_to_all_v: recv_counts[i] of every rank j must equal send_counts[j] "
                        "of rank i (the count matrices of the ranks disagree)"),
            tf.debugging.assert_non_negative(tf.concat([sc, sd, rc, rd], 0),
                                             message="all_to_all_v: negative count"),
            tf.debugging.assert_less_equal(
                sd + sc, tf.fill([size], total),
                message="all_to_all_v: send_displacements + send_counts exceed the data"),
        ]
        with tf.control_dependencies(checks):
            block = tf.maximum(tf.reduce_max(sent), 0)
        columns = tf.range(block)[tf.newaxis, :]
        valid = columns < sc[:, tf.newaxis]
        positions = tf.where(valid, sd[:, tf.newaxis] + columns, total)  # `total` = the pad slot
        value, back = _transport(data, "all_to_all_v")
        padded = tf.concat([value, tf.zeros([1], value.dtype)], 0)
        blocks = tf.gather(padded, positions)  # [size, block]: row j goes to rank j
        if size == 1:
            mine = blocks
        else:
            everything = _gather_uniform(blocks, group)  # row i*size + j: from rank i to rank j
            mine = tf.gather(everything, tf.range(size) * size + me)
        received = columns < rc[:, tf.newaxis]
        targets = tf.boolean_mask(rd[:, tf.newaxis] + columns, received)
        values = tf.boolean_mask(mine, received)
        length = tf.maximum(tf.reduce_max(rd + rc), 0)
        out = tf.scatter_nd(targets[:, tf.newaxis], values, length[tf.newaxis])
        return tf.identity(_restore(out, back), name="recv_data")


def _pair_instance_key(tensor_for_shape, pair, source, dest, tag, shape):
    """Sender and receiver count their messages per (source, dest, tag) to agree on keys."""
    return _instance_key(tensor_for_shape, pair, ("p2p", source, dest, str(tag)), (),
                         shape=tf.TensorShape(None) if shape is None else shape)


def send(tensor, group, pair, dest, tag, name="HcomSend"):
    """Send ``tensor`` to group rank ``dest`` (``pair`` is the two-member group of this rank and
    the destination); returns the send op."""
    _graph_mode(pair, "send")
    tensor = tf.convert_to_tensor(tensor)
    with tf.name_scope(name):
        value, _ = _transport(tensor, "send")
        source = group.world_rank
        instance = _pair_instance_key(value, pair, source, group.world_rank_of(dest), tag,
                                      tf.TensorShape(None))
        out = tf.raw_ops.CollectiveBcastSendV2(
            input=value, group_size=2, group_key=pair.key, instance_key=instance,
            communication_hint="auto", timeout_seconds=_timeout())
        return out.op


def receive(shape, dtype, group, pair, source, tag, name="HcomReceive"):
    """Receive a ``dtype`` tensor of ``shape`` from group rank ``source``."""
    _graph_mode(pair, "receive")
    dtype = tf.as_dtype(dtype)
    with tf.name_scope(name):
        placeholder = tf.zeros(shape, dtype)
        value, back = _transport(placeholder, "receive")
        instance = _pair_instance_key(value, pair, group.world_rank_of(source),
                                      group.world_rank, tag, tf.TensorShape(None))
        out = tf.raw_ops.CollectiveBcastRecvV2(
            group_size=2, group_key=pair.key, instance_key=instance, shape=tf.shape(value),
            T=value.dtype, communication_hint="auto", timeout_seconds=_timeout())
        out.set_shape(value.shape)
        return _restore(out, back)
