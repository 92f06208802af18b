"""Index ops of :mod:`npu_bridge.npu_cpu.npu_cpu_ops`, built from TensorFlow ops.

Embedding rows spread over servers: ``addr_table`` (uint64, ``[S, 3]``) describes server ``s``
as ``(rank_id, base_address, row_count)``. In mode ``"mod"`` row ``i`` lives on server
``i mod S`` at local row ``i div S``; in mode ``"order"`` the servers hold consecutive blocks of
``row_count`` rows in table order (an index past the last block is an error).

* ``embedding_rank_id`` → ``[n, 3]`` uint64: for each index (flattened), ``(rank_id,
  base_address + local_row * row_memory, row_memory)`` — the remote-read descriptor of its row.
* ``embedding_local_index`` → ``(local_idx, nums, recover_idx)``: the local rows ordered by
  server (stable), the number of rows per server ``[S]``, and for each input position its place in
  that order, so ``local_idx[recover_idx]`` is the local row of each input.

``non_zero_with_value_shape(value, index, count)`` trims the fixed-size outputs of
``NonZeroWithValue`` (coordinate-major layout: rows in ``index[0:N]``, columns in
``index[N:2N]``, ``N = size(value)``) to their valid part: ``value[:count]`` and the
``[2 * count]`` vector of the ``count`` row indices followed by the ``count`` column indices.
"""

import tensorflow as tf

__all__ = ["embedding_local_index", "embedding_rank_id", "non_zero_with_value_shape"]

_MODES = ("mod", "order")


def _locate(addr_table, index, row_memory, mode, api):
    if mode not in _MODES:
        raise ValueError(f"{api}: mode must be one of {list(_MODES)}, got {mode!r}")
    if isinstance(row_memory, bool) or not isinstance(row_memory, int) or row_memory <= 0:
        raise ValueError(f"{api}: row_memory must be a positive int, got {row_memory!r}")
    table = tf.convert_to_tensor(addr_table, name="addr_table")
    if table.dtype != tf.uint64:
        raise TypeError(f"{api}: addr_table must be uint64, got {table.dtype.name}")
    if table.shape.rank not in (None, 2) or (table.shape.rank == 2 and
                                             table.shape[1] not in (None, 3)):
        raise ValueError(f"{api}: addr_table must be [servers, 3], got {table.shape}")
    table = tf.cast(table, tf.int64)
    flat = tf.cast(tf.reshape(tf.convert_to_tensor(index, name="index"), [-1]), tf.int64)
    servers = tf.shape(table, out_type=tf.int64)[0]
    checks = [tf.debugging.assert_positive(servers, message=f"{api}: addr_table is empty"),
              tf.debugging.assert_non_negative(flat, message=f"{api}: indexes must be >= 0")]
    with tf.control_dependencies(checks):
        if mode == "mod":
            server = tf.math.floormod(flat, servers)
            local = tf.math.floordiv(flat, servers)
        else:
            ends = tf.cumsum(table[:, 2])
            in_range = tf.debugging.assert_less(
                flat, ends[-1], message=f"{api}: index past the last server's rows")
            with tf.control_dependencies([in_range]):  # every output waits for the check
                flat = tf.identity(flat)
            server = tf.searchsorted(ends, flat, side="right", out_type=tf.int64)
            local = flat - tf.gather(ends - table[:, 2], server)
    return table, server, local, servers


def embedding_rank_id(addr_table, index, row_memory=320, mode="mod", name=None):
    """Remote-read descriptor of each index (see the module doc)."""
    with tf.name_scope(name or "EmbeddingRankId"):
        table, server, local, _ = _locate(addr_table, index, row_memory, mode,
                                          "embeddingrankid")
        rows = tf.gather(table, server)
        out = tf.stack([rows[:, 0], rows[:, 1] + local * row_memory,
                        tf.fill(tf.shape(local), tf.constant(row_memory, tf.int64))], axis=1)
        return tf.cast(out, tf.uint64)


def embedding_local_index(addr_table, index, row_memory=320, mode="mod", name=None):
    """``(local_idx, nums, recover_idx)`` of the indexes (see the module doc)."""
    with tf.name_scope(name or "EmbeddingLocalIndex"):
        index = tf.convert_to_tensor(index, name="index")
        if index.dtype not in (tf.int32, tf.int64, tf.uint32, tf.uint64):
            raise TypeError(f"embedding_local_index: index must be int32, int64, uint32 or "
                            f"uint64, got {index.dtype.name}")
        _, server, local, servers = _locate(addr_table, index, row_memory, mode,
                                            "embedding_local_index")
        order = tf.argsort(server, stable=True)
        local_idx = tf.gather(local, order)
        nums = tf.math.bincount(tf.cast(server, tf.int32), minlength=tf.cast(servers, tf.int32),
                                maxlength=tf.cast(servers, tf.int32), dtype=tf.int64)
        recover = tf.math.invert_permutation(order)
        shape = tf.shape(index)
        return (tf.reshape(tf.cast(local_idx, index.dtype), shape),
                tf.cast(nums, index.dtype),
                tf.reshape(tf.cast(recover, index.dtype), shape))


def non_zero_with_value_shape(value, index, count, name=None):
    """The valid part of ``NonZeroWithValue``'s outputs (see the module doc)."""
    with tf.name_scope(name or "NonZeroWithValueShape"):
        value = tf.reshape(tf.convert_to_tensor(value, name="value"), [-1])
        index = tf.reshape(tf.convert_to_tensor(index, dtype=tf.int32, name="index"), [-1])
        count = tf.reshape(tf.convert_to_tensor(count, dtype=tf.int32, name="count"), [-1])[0]
        n = tf.size(value)
        checks = [tf.debugging.assert_equal(tf.size(index), 2 * n,
                                            message="index must hold 2 * size(value) entries"),
                  tf.debugging.assert_less_equal(count, n,
                                                 message="count is larger than value"),
                  tf.debugging.assert_non_negative(count, message="count must be >= 0")]
        with tf.control_dependencies(checks):
            out_value = value[:count]
            out_index = tf.concat([index[:count], index[n:n + count]], axis=0)
        return out_value, out_index
