"""Batching queues of :mod:`npu_bridge.npu_cpu.npu_cpu_ops` on TensorFlow FIFO queues.

A queue is named by ``(queue_name, queue_id)``; both ops of a pair use one
``tf.queue.FIFOQueue`` shared in the session (``shared_name`` ``npu_queue/<name>/<id>``) whose
capacity is ``queue_depth`` batches. ``queue_id`` must be known when the graph is built.

* ``batch_enqueue(x, ...)``: ``x`` (``[n, ...]``) is cut into batches of ``batch_size`` rows
  along its first axis; a last, partial batch is padded to ``batch_size`` rows by repeating its
  last row (``pad_mode="REPLICATE"``) or with zeros (``"ZERO"``). The batches are enqueued
  (blocking while the queue is full) and the op returns the number of batches then in the queue
  (int32).
* ``dequeue(queue_id, output_type, output_shape, ...)``: takes one batch (blocking while the
  queue is empty) and returns it with ``output_shape`` (``InvalidArgumentError`` when its size
  differs) and ``output_type``, which must be the dtype that was enqueued.
"""

import weakref

import tensorflow as tf

from npu_adapter.errors import NpuAdapterError

__all__ = ["batch_enqueue", "dequeue"]

_DTYPES = (tf.float16, tf.float32, tf.float64, tf.int8, tf.uint8, tf.int16, tf.uint16,
           tf.int32, tf.uint32, tf.int64, tf.uint64)
_PAD_MODES = ("REPLICATE", "ZERO")
_QUEUES = weakref.WeakKeyDictionary()  # graph -> {(name, id): (queue, dtype)}


def _queue_id(queue_id, api):
    static = queue_id if isinstance(queue_id, int) else tf.get_static_value(queue_id)
    if static is None:
        raise NpuAdapterError(f"{api}: queue_id must be known when the graph is built (a "
                              "constant); it selects the shared queue")
    return int(static)


def _queue(queue_name, queue_id, dtype, capacity, api):
    if not isinstance(queue_name, str):
        raise TypeError(f"{api}: queue_name must be a string, got {queue_name!r}")
    key = (queue_name, _queue_id(queue_id, api))
    queues = _QUEUES.setdefault(tf.compat.v1.get_default_graph(), {})
    if key in queues:
        queue, known = queues[key]
        if known != dtype:
            raise TypeError(f"{api}: queue {key} carries {known.name}, not {dtype.name}")
        return queue
    queue = tf.queue.FIFOQueue(capacity, [dtype], shared_name=f"npu_queue/{key[0]}/{key[1]}",
                               name="npu_queue")
    queues[key] = (queue, dtype)
    return queue


def batch_enqueue(x, queue_id=0, batch_size=8, queue_name="", queue_depth=100,
                  pad_mode="REPLICATE", name=None):
    """Enqueue ``x`` in padded batches (see the module doc)."""
    api = "batch_enqueue"
    for arg, value in (("batch_size", batch_size), ("queue_depth", queue_depth)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{api}: {arg} must be an int >= 1, got {value!r}")
    if pad_mode not in _PAD_MODES:
        raise ValueError(f"{api}: pad_mode must be one of {list(_PAD_MODES)}, got {pad_mode!r}")
    with tf.name_scope(name or "BatchEnqueue"):
        x = tf.convert_to_tensor(x, name="x")
        if x.dtype not in _DTYPES:
            raise TypeError(f"{api}: x must be a real number type, got {x.dtype.name}")
        if x.shape.rank == 0:
            raise ValueError(f"{api}: x must have a first (batch) axis, got a scalar")
        queue = _queue(queue_name, queue_id, x.dtype, queue_depth, api)
        n = tf.shape(x)[0]
        check = tf.debugging.assert_positive(n, message=f"{api}: x has no rows")
        with tf.control_dependencies([check]):
            batches = (n + batch_size - 1) // batch_size
            pad = batches * batch_size - n
        if pad_mode == "REPLICATE":
            padding = tf.repeat(x[-1:], pad, axis=0)
        else:
            padding = tf.zeros(tf.concat([[pad], tf.shape(x)[1:]], 0), x.dtype)
        padded = tf.concat([x, padding], axis=0)
        stacked = tf.reshape(padded, tf.concat([[batches, batch_size], tf.shape(x)[1:]], 0))
        enqueue = queue.enqueue_many([stacked])
        with tf.control_dependencies([enqueue]):
            return queue.size()


def dequeue(queue_id, output_type=tf.uint8, output_shape=(), queue_name="", name=None):
    """Take one batch from the queue (see the module doc)."""
    api = "dequeue"
    dtype = tf.as_dtype(output_type)
    if dtype not in _DTYPES:
        raise TypeError(f"{api}: output_type must be a real number type, got {dtype.name}")
    if not isinstance(output_shape, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in output_shape):
        raise ValueError(f"{api}: output_shape must be a list of ints >= 0, got "
                         f"{output_shape!r}")
    with tf.name_scope(name or "Dequeue"):
        queue = _queue(queue_name, queue_id, dtype, 100, api)
        data = queue.dequeue()
        if isinstance(data, (list, tuple)):
            data = data[0]
        return tf.reshape(data, list(output_shape))
