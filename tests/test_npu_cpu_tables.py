"""Embedding hash tables, feature mapping, index ops, queues and the LRU cache of
``npu_bridge.npu_cpu`` against Python/NumPy models of their documented behaviour."""

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.errors import NpuAdapterError
from npu_bridge.npu_cpu import npu_cpu_ops
from npu_bridge.npu_cpu.lru_cache import LruCache

DIM = 3


class TableModel:
    """A dict model of one embedding table."""

    def __init__(self, bucket, init_rows=None, constant=None):
        self.bucket = bucket
        self.rows, self.slots, self.counts = {}, {}, {}
        self.init_rows, self.constant = init_rows, constant

    def lookup(self, keys, filter_mode="no_filter", freq=0, use_default_key=False,
               default_key=0, default_value=0.0, filter_key_flag=False, filter_key=-1):
        uniq = list(dict.fromkeys(keys))
        for k in keys:
            if not (filter_key_flag and k == filter_key):
                self.counts[k] = self.counts.get(k, 0) + 1
        for k in uniq:
            self.counts.setdefault(k, 0)
            if k in self.slots or (filter_key_flag and k == filter_key):
                continue
            if filter_mode == "counter" and self.counts[k] < freq:
                continue
            slot = len(self.slots)
            self.slots[k] = slot
            if self.init_rows is not None:
                self.rows[k] = self.init_rows[slot % len(self.init_rows)]
            elif self.constant is not None:
                self.rows[k] = np.full(DIM, self.constant)
            else:
                self.rows[k] = np.zeros(DIM)
        out = []
        for k in keys:
            if k in self.slots:
                out.append(self.rows[k])
            elif use_default_key:
                out.append(self.rows.get(default_key, np.zeros(DIM)))
            else:
                out.append(np.full(DIM, default_value))
        return np.array(out)


def test_lookup_or_insert_with_random_init_and_counter_filter():
    init = np.arange(4 * DIM, dtype=np.float32).reshape(4, DIM)
    batches = [[5, 7, 5], [7, 9, 9, 11], [5, 11, 13, 11]]
    model = TableModel(10, init_rows=init)
    want = [model.lookup(b, "counter", 2, default_value=-1.0) for b in batches]
    with tf.Graph().as_default():
        handle = npu_cpu_ops.init_embedding_hashmap_v2(3, 10, 80, DIM, tf.float32)
        init_op = npu_cpu_ops.init_embedding_hashtable(handle, tf.constant(init), 10, DIM,
                                                       "random", 0.0)
        keys = tf.compat.v1.placeholder(tf.int64, [None])
        out = npu_cpu_ops.embedding_hashtable_lookup_or_insert(
            handle, keys, 10, DIM, "counter", 2, False, 0, -1.0, False, -1)
        with tf.compat.v1.Session() as sess:
            sess.run(init_op)
            got = [sess.run(out, {keys: b}) for b in batches]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w)


def test_lookup_default_key_filter_key_and_capacity():
    model = TableModel(3, constant=0.5)
    with tf.Graph().as_default():
        handle = npu_cpu_ops.init_embedding_hashmap_v2(1, 3, 80, DIM, tf.float32)
        init_op = npu_cpu_ops.init_embedding_hashtable(handle, tf.zeros([0]), 3, DIM,
                                                       "constant", 0.5)
        keys = tf.compat.v1.placeholder(tf.int64, [None])
        out = npu_cpu_ops.embedding_hashtable_lookup_or_insert(
            handle, keys, 3, DIM, "counter", 2, True, 4, 0.0, True, 0)
        with tf.compat.v1.Session() as sess:
            sess.run(init_op)
            for batch in ([4, 4, 0, 1], [1, 0, 2]):
                np.testing.assert_allclose(
                    sess.run(out, {keys: batch}),
                    model.lookup(batch, "counter", 2, True, 4, 0.0, True, 0))
            with pytest.raises(tf.errors.InvalidArgumentError, match="is full"):
                sess.run(out, {keys: [2, 6, 6, 7, 7]})


def test_export_import_roundtrip_and_modes():
    with tf.Graph().as_default():
        h1 = npu_cpu_ops.init_embedding_hashmap_v2(1, 8, 80, DIM, tf.float32)
        h2 = npu_cpu_ops.init_embedding_hashmap_v2(2, 8, 80, DIM, tf.float32)
        init = npu_cpu_ops.init_embedding_hashtable(h1, tf.ones([DIM]) * 2, 8, DIM, "random",
                                                    0.0)
        look = npu_cpu_ops.embedding_hashtable_lookup_or_insert(
            h1, tf.constant([9, 3, 3, 6], tf.int64), 8, DIM, "counter", 2, False, 0, 0.0,
            False, -1)
        handles = tf.stack([h1])
        sizes = npu_cpu_ops.embedding_hashmap_table_size_v2([1], False, "all")
        exported = npu_cpu_ops.embedding_hash_table_export(handles, sizes, [DIM], [8])
        new_only = npu_cpu_ops.embedding_hash_table_export(handles, sizes, [DIM], [8], "new")
        admitted = npu_cpu_ops.embedding_hash_table_export(handles, sizes, [DIM], [8], "all",
                                                           True)
        keys_in = tf.compat.v1.placeholder(tf.int64, [None])
        counters_in = tf.compat.v1.placeholder(tf.uint64, [None])
        flags_in = tf.compat.v1.placeholder(tf.uint8, [None])
        values_in = tf.compat.v1.placeholder(tf.float32, [None])
        imported = npu_cpu_ops.embedding_hash_table_import(
            tf.stack([h2]), [DIM], [8], [keys_in], [counters_in], [flags_in], [values_in])
        reexport = npu_cpu_ops.embedding_hash_table_export(tf.stack([h2]), [0], [DIM], [8])
        with tf.compat.v1.Session() as sess:
            sess.run(init)
            sess.run(look)
            assert sess.run(sizes).tolist() == [3]
            keys, counters, flags, values = (x[0] for x in sess.run(exported))
            assert keys.tolist() == [3, 6, 9]
            assert counters.dtype == np.uint64 and counters.tolist() == [2, 1, 1]
            assert flags.dtype == np.uint8 and flags.tolist() == [1, 0, 0]
            np.testing.assert_allclose(values, [2, 2, 2, 0, 0, 0, 0, 0, 0])
            assert sess.run(new_only)[0][0].tolist() == []  # everything was exported above
            assert sess.run(admitted)[0][0].tolist() == [3]
            sess.run(imported, {keys_in: keys, counters_in: counters, flags_in: flags,
                                values_in: values})
            again = [x[0] for x in sess.run(reexport)]
    for a, b in zip(again, (keys, counters, flags, values)):
        np.testing.assert_array_equal(a, b)


def test_hashmap_files_roundtrip(tmp_path):
    with tf.Graph().as_default():
        step = tf.constant(7, tf.int64)
        keys = [tf.constant([1, 5], tf.int64), tf.constant([2], tf.int64)]
        counters = [tf.constant([3, 4], tf.uint64), tf.constant([9], tf.uint64)]
        flags = [tf.constant([1, 0], tf.uint8), tf.constant([1], tf.uint8)]
        values = [tf.constant([1., 2., 3., 4.]), tf.constant([5., 6.])]
        export = npu_cpu_ops.embedding_hashmap_export_v2(
            str(tmp_path), [0, 1], ["user", "item"], step, keys, counters, flags, values, 2)
        sizes = npu_cpu_ops.embedding_hashmap_file_size_v2(str(tmp_path), [0, 1],
                                                           ["user", "item"], step, [2, 2])
        imported = npu_cpu_ops.embedding_hashmap_import_v2(
            str(tmp_path), [0, 1], sizes, ["user", "item"], step, [2, 2], 2)
        with tf.compat.v1.Session() as sess:
            sess.run(export)
            assert sess.run(sizes).tolist() == [2, 1]
            got = sess.run(imported)
    assert sorted(p.name.split(".")[0] for p in tmp_path.iterdir()) == \
        ["item-7", "item-7", "user-7", "user-7"]
    assert got[0][0].tolist() == [1, 5] and got[0][1].tolist() == [2]
    assert got[1][0].tolist() == [3, 4] and got[2][0].tolist() == [1, 0]
    np.testing.assert_allclose(got[3][1], [5., 6.])


def test_hashmap_file_paths_are_validated(tmp_path):
    with tf.Graph().as_default():
        args = ([0], [tf.constant([1], tf.int64)], [tf.constant([1], tf.uint64)],
                [tf.constant([1], tf.uint8)], [tf.constant([1.])], 1)
        with pytest.raises(ValueError, match="plain file name"):
            npu_cpu_ops.embedding_hashmap_export_v2(str(tmp_path), args[0], ["../x"], 1,
                                                    *args[1:])
        with pytest.raises(ValueError, match="not an existing directory"):
            npu_cpu_ops.embedding_hashmap_export_v2(str(tmp_path / "no"), args[0], ["x"], 1,
                                                    *args[1:])
        with pytest.raises(NpuAdapterError, match="known when the graph is built"):
            npu_cpu_ops.embedding_hashmap_export_v2(
                tf.compat.v1.placeholder(tf.string, []), args[0], ["x"], 1, *args[1:])


def test_unknown_tables_and_dynamic_handles_are_named_errors():
    with tf.Graph().as_default():
        with pytest.raises(NpuAdapterError, match="no embedding table 42"):
            npu_cpu_ops.table_to_resource_v2(42, 8, 80, DIM, tf.float32)
        with pytest.raises(NpuAdapterError, match="must be known when the graph is built"):
            npu_cpu_ops.embedding_hashtable_lookup_or_insert(
                tf.compat.v1.placeholder(tf.int64, []), [1], 8, DIM, "no_filter", 0, False, 0,
                0.0, False, -1)
        npu_cpu_ops.init_embedding_hashmap_v2(5, 8, 80, DIM, tf.float32)
        with pytest.raises(ValueError, match="embedding_dim 4 does not match"):
            npu_cpu_ops.table_to_resource_v2(5, 8, 80, 4, tf.float32)


def adamw_reference(w, m, v, vmax, g, lr, wd, b1, b2, eps, b1p, b2p, amsgrad, maximize):
    g = -g if maximize else g
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    vhat = np.maximum(vmax, v) if amsgrad else v
    w = w * (1 - lr * wd) - lr * (m / (1 - b1p)) / (np.sqrt(vhat / (1 - b2p)) + eps)
    return w, m, v, vhat


@pytest.mark.parametrize("amsgrad,maximize", [(False, False), (True, True)])
def test_apply_adam_w(amsgrad, maximize):
    rng = np.random.RandomState(3)
    init = rng.uniform(-1, 1, (4, DIM)).astype(np.float32)
    grad = rng.uniform(-1, 1, (3, DIM)).astype(np.float32)
    vmax0 = np.full((4, DIM), 0.3, np.float32)
    with tf.Graph().as_default():
        handle = npu_cpu_ops.init_embedding_hashmap_v2(0, 4, 80, DIM, tf.float32)
        set_init = npu_cpu_ops.init_embedding_hashtable(handle, init, 4, DIM, "random", 0.0)
        keys = tf.constant([10, 20], tf.int64)
        rows = npu_cpu_ops.embedding_hashtable_lookup_or_insert(
            handle, keys, 4, DIM, "no_filter", 0, False, 0, 0.0, False, -1)
        m = tf.compat.v1.Variable(tf.zeros([4, DIM]), use_resource=False)
        v = tf.compat.v1.Variable(tf.zeros([4, DIM]), use_resource=True)
        vmax = tf.compat.v1.Variable(vmax0)
        step = npu_cpu_ops.embedding_hashtable_apply_adam_w(
            handle, tf.constant([20, 10, 20, 99], tf.int64), m, v, 0.9, 0.999, 0.01, 0.1,
            0.9, 0.999, 1e-8, tf.constant(np.vstack([grad, grad[:1]])), vmax, DIM, 4, amsgrad,
            maximize)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(set_init)
            sess.run(rows)
            sess.run(step)
            got_rows, got_m, got_v, got_vmax = sess.run([rows, m, v, vmax])
    g20 = grad[0] + grad[2]  # key 99 is not in the table and is ignored
    for key_slot, g, i in ((0, grad[1], 0), (1, g20, 1)):
        w, mm, vv, vh = adamw_reference(init[key_slot], 0, 0, vmax0[key_slot], g, 0.01, 0.1,
                                        0.9, 0.999, 1e-8, 0.9, 0.999, amsgrad, maximize)
        # float32 against float64: 1 - 0.999 alone differs in the 5th digit.
        np.testing.assert_allclose(got_rows[i], w, rtol=1e-4)
        np.testing.assert_allclose(got_m[key_slot], mm, rtol=1e-4)
        np.testing.assert_allclose(got_v[key_slot], vv, rtol=1e-4)
        if amsgrad:
            np.testing.assert_allclose(got_vmax[key_slot], vh, rtol=1e-4)


def test_feature_mapping():
    with tf.Graph().as_default():
        ids = tf.compat.v1.placeholder(tf.int64, [None])
        host = npu_cpu_ops.host_feature_mapping(ids, threshold=2, table_name="t")
        device = npu_cpu_ops.device_feature_mapping(ids)
        with tf.compat.v1.Session() as sess:
            assert sess.run(host, {ids: [7, 8, 7]}).tolist() == [0, -1, 0]
            assert sess.run(host, {ids: [8, 9, 7]}).tolist() == [1, -1, 0]
            out = sess.run(device, {ids: [30, 10, 30, 20]})
            assert out.dtype == np.int32 and out.tolist() == [0, 1, 0, 2]
            assert sess.run(device, {ids: [20, 40]}).tolist() == [2, 3]


def locate_reference(table, index, row_memory, mode):
    servers = len(table)
    rows = []
    for i in index:
        if mode == "mod":
            s, local = i % servers, i // servers
        else:
            ends = np.cumsum(table[:, 2])
            s = int(np.searchsorted(ends, i, side="right"))
            local = i - (ends[s] - table[s, 2])
        rows.append((s, local))
    return rows


@pytest.mark.parametrize("mode", ["mod", "order"])
def test_embedding_rank_id_and_local_index(mode):
    table = np.array([[4, 1000, 3], [6, 5000, 5]], np.uint64)
    index = np.array([5, 0, 2, 7, 1], np.int64)
    with tf.Graph().as_default():
        rank = npu_cpu_ops.embeddingrankid(tf.constant(table), tf.constant(index), 16, mode)
        local = npu_cpu_ops.embedding_local_index(tf.constant(table), tf.constant(index), 16,
                                                  mode)
        with tf.compat.v1.Session() as sess:
            got_rank, (local_idx, nums, recover) = sess.run([rank, local])
    located = locate_reference(table.astype(np.int64), index, 16, mode)
    want = [(int(table[s, 0]), int(table[s, 1]) + row * 16, 16) for s, row in located]
    assert got_rank.dtype == np.uint64 and got_rank.tolist() == [list(w) for w in want]
    order = sorted(range(len(index)), key=lambda i: (located[i][0], i))
    assert local_idx.tolist() == [located[i][1] for i in order]
    assert nums.tolist() == [sum(1 for s, _ in located if s == k) for k in range(2)]
    assert [local_idx[r] for r in recover] == [row for _, row in located]


def test_embedding_local_index_order_mode_rejects_out_of_range():
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        op = npu_cpu_ops.embeddingrankid(tf.constant([[0, 0, 2]], tf.uint64),
                                         tf.constant([2], tf.int64), 8, "order")
        with pytest.raises(tf.errors.InvalidArgumentError, match="past the last server"):
            sess.run(op)


def test_non_zero_with_value_shape():
    x = np.array([[0, 3, 0], [4, 0, 5]], np.float32)
    coords = np.argwhere(x)
    n = x.size
    value = np.zeros(n, np.float32)
    value[:len(coords)] = x[x != 0]
    index = np.zeros(2 * n, np.int32)
    index[:len(coords)] = coords[:, 0]
    index[n:n + len(coords)] = coords[:, 1]
    for fn in (npu_cpu_ops.non_zero_with_value_shape, npu_cpu_ops.non_zero_with_value_shape_v2):
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            out_value, out_index = sess.run(fn(tf.constant(value), tf.constant(index),
                                               tf.constant([3])))
        assert out_value.tolist() == [3, 4, 5]
        assert out_index.tolist() == [0, 1, 1, 1, 0, 2]


def test_batch_enqueue_and_dequeue():
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    with tf.Graph().as_default():
        count = npu_cpu_ops.batch_enqueue(tf.constant(x), tf.constant(1, tf.uint32), 2, "q",
                                          10, "REPLICATE")
        zero_count = npu_cpu_ops.batch_enqueue(tf.constant(x[:1]), tf.constant(1, tf.uint32),
                                               2, "q", 10, "ZERO")
        out = npu_cpu_ops.dequeue(tf.constant(1, tf.uint32), tf.float32, [2, 2], "q")
        with tf.compat.v1.Session() as sess:
            assert sess.run(count) == 3
            assert sess.run(zero_count) == 4
            batches = [sess.run(out) for _ in range(4)]
    np.testing.assert_array_equal(batches[0], x[0:2])
    np.testing.assert_array_equal(batches[1], x[2:4])
    np.testing.assert_array_equal(batches[2], np.stack([x[4], x[4]]))
    np.testing.assert_array_equal(batches[3], np.stack([x[0], [0, 0]]))
    with tf.Graph().as_default():
        npu_cpu_ops.batch_enqueue(tf.constant(x), 0, 2, "r")
        with pytest.raises(TypeError, match="carries float32"):
            npu_cpu_ops.dequeue(0, tf.int32, [2, 2], "r")


class LruModel:
    def __init__(self, size):
        self.size, self.slot, self.tick, self.clock = size, {}, {}, 0

    def add(self, ids):
        self.clock += 1
        uniq = list(dict.fromkeys(ids))
        misses = [i for i in uniq if i not in self.slot]
        used = len(self.slot)
        free = list(range(used, min(self.size, used + len(misses))))
        need = len(misses) - len(free)
        hits = {self.slot[i] for i in uniq if i in self.slot}
        owners = {s: i for i, s in self.slot.items()}
        candidates = sorted((self.tick[s], s) for s in owners if s not in hits)
        out_slots = [s for _, s in candidates[:need]]
        out_ids = [owners[s] for s in out_slots]
        for i in out_ids:
            del self.slot[i]
        in_slots = free + out_slots
        for i, s in zip(misses, in_slots):
            self.slot[i] = s
        for i in uniq:
            self.tick[self.slot[i]] = self.clock
        return misses, in_slots, out_ids, out_slots


def test_lru_cache_against_model():
    batches = [[1, 2, 1], [3, 4], [2, 5], [6, 7, 5], [1]]
    model = LruModel(4)
    with tf.Graph().as_default():
        cache = LruCache(cache_size=4, dtype=tf.int64)
        ids = tf.compat.v1.placeholder(tf.int64, [None])
        add = cache.cache_add(ids)
        local = cache.cache_remote_index_to_local(ids)
        everything = cache.cache_all_index_to_local()
        with tf.compat.v1.Session() as sess:
            for batch in batches:
                got = [r.tolist() for r in sess.run(add, {ids: batch})]
                assert got == [list(r) for r in model.add(batch)], batch
            assert sess.run(local, {ids: [1, 2, 6]}).tolist() == [
                model.slot.get(i, -1) for i in (1, 2, 6)]
            by_slot = sorted((s, i) for i, s in model.slot.items())
            assert sess.run(everything).tolist() == [i for _, i in by_slot]
            with pytest.raises(tf.errors.InvalidArgumentError, match="more distinct ids"):
                sess.run(add, {ids: [10, 11, 12, 13, 14]})


def test_gen_ops_handle_reaches_the_ops():
    handle = npu_cpu_ops.gen_npu_cpu_ops
    assert handle.DenseImageWarp is handle.dense_image_warp
    with pytest.raises(AttributeError, match="'NoSuchOp' is not available"):
        handle.NoSuchOp  # noqa: B018
