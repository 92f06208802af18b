"""Embedding hash tables and feature-id mapping of :mod:`npu_bridge.npu_cpu.npu_cpu_ops`, kept
in TensorFlow lookup tables.

A table is created by ``init_embedding_hashmap_v2(table_id, bucket_size, load_factor,
embedding_dim, dtype)`` and named by its **handle**, an int64 scalar equal to ``table_id``
(``table_to_resource_v2`` returns it for an existing table). The ops that take a handle resolve
it when the graph is built, so it must be a constant (the usual case: the output of those two
functions); a handle that is not known then raises :class:`~npu_adapter.errors.NpuAdapterError`.
Tables belong to the graph they were created in (eager tables to the process).

Each table holds, in ``tf.lookup.experimental.MutableHashTable`` resources: the embedding row of
every admitted key, the key's **slot** (0, 1, 2, ... in the order keys were admitted; at most
``bucket_size`` slots), a lookup counter per key, and an "exported" mark. So state lives in the
session like any TensorFlow table and needs no initialiser.

* ``init_embedding_hashtable``: how new keys are initialised — ``"random"``: slot ``s`` takes row
  ``s mod R`` of ``sampled_values`` (reshaped to ``[R, embedding_dim]``); ``"constant"``: every
  element is ``constant_value``. Before any call, new rows are zeros.
* ``embedding_hashtable_lookup_or_insert``: the rows of ``keys`` (``[n, embedding_dim]``). Every
  occurrence of a key adds 1 to its counter (except ``filter_key`` when ``filter_key_flag``).
  A missing key is admitted (given a slot and an initial row) unless ``filter_mode`` is
  ``"counter"`` and its counter is still below ``filter_freq``, or it is the filter key. A key
  that is not admitted returns the default: the row of ``default_key`` when
  ``default_key_or_value`` is True, else ``default_value`` everywhere. Admitting more than
  ``bucket_size`` keys raises ``InvalidArgumentError``.
* ``embedding_hash_table_export``: per table, its keys in ascending order (all keys ever counted
  or imported; with ``filter_export_flag`` only admitted ones), their counters (uint64), filter
  flags (uint8, 1 = admitted) and rows (flattened float32). ``export_mode`` ``"all"`` exports
  every key, ``"new"``/``"specifiednew"`` keys not exported before, ``"old"`` keys exported
  before; exported keys are marked. ``embedding_hashmap_table_size_v2`` counts the same keys.
* ``embedding_hash_table_import``: inserts exported data (admitted keys get slots and rows).
* ``embedding_hashmap_export_v2`` / ``_file_size_v2`` / ``_import_v2``: the same data written to
  and read from files: one TensorFlow tensor bundle per table at
  ``<file_path>/<table_name>-<global_step>`` holding ``keys``, ``counters``, ``filter_flags``
  and ``values``. ``file_path`` must be an existing directory and each table name a plain file
  name (no separators, not ``.``/``..``), checked when the op is built, so nothing is written
  outside ``file_path``; bundles are written to a temporary file and renamed.
* ``embedding_hashtable_apply_adam_w``: AdamW on the rows of ``keys`` (duplicate keys' gradients
  summed); the moment variables ``m``, ``v`` (and ``max_grad_norm``, the AMSGrad maximum of
  ``v``) are ``[bucket_size, embedding_dim]`` variables indexed by slot. With bias corrections
  ``c1 = 1 - beta1_power``, ``c2 = 1 - beta2_power`` and ``g`` negated when ``maximize``:
  ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
  ``w = w (1 - lr wd) - lr (m / c1) / (sqrt(v' / c2) + eps)`` with ``v' = max(max_grad_norm, v)``
  under AMSGrad, else ``v``. Keys that are not in the table are left alone.

Feature-id mapping (``host_feature_mapping``, ``device_feature_mapping``) gives each distinct id
of a named table a dense offset 0, 1, 2, ... in the order ids are admitted (first occurrence
within a batch); an id is admitted once it has been seen ``threshold`` times, and maps to -1
until then.
"""

import os
import re
import threading
import weakref

import tensorflow as tf

from npu_adapter.errors import NpuAdapterError

__all__ = [
    "EmbeddingTable",
    "apply_adam_w",
    "deinit_table",
    "export_tables",
    "feature_mapping",
    "file_export",
    "file_import",
    "file_sizes",
    "import_tables",
    "init_hashtable",
    "init_table",
    "lookup_or_insert",
    "table_sizes",
    "table_to_resource",
]

_LOCK = threading.Lock()
_GRAPHS = weakref.WeakKeyDictionary()  # graph -> {"tables": {id: table}, "features": {...}}
_FILTER_MODES = ("no_filter", "counter")
_EXPORT_MODES = ("all", "old", "new", "specifiednew")
_INIT_MODES = {"random": 1, "constant": 2}
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-]+\Z")


def _registry():
    graph = tf.compat.v1.get_default_graph()
    with _LOCK:
        return _GRAPHS.setdefault(graph, {"tables": {}, "features": {}})


def _int_table(default, name):
    return tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default, name=name)


class EmbeddingTable:
    """The TensorFlow resources of one embedding table (see the module doc)."""

    def __init__(self, table_id, bucket_size, embedding_dim, load_factor):
        self.table_id = table_id
        self.bucket_size = bucket_size
        self.embedding_dim = embedding_dim
        self.load_factor = load_factor
        prefix = f"embedding_table_{table_id}"
        self.rows = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.float32, tf.zeros([embedding_dim]), name=f"{prefix}_rows")
        self.slots = _int_table(-1, f"{prefix}_slots")
        self.counters = _int_table(0, f"{prefix}_counters")
        self.exported = _int_table(0, f"{prefix}_exported")
        self.init_rows = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.float32, tf.zeros([embedding_dim]), name=f"{prefix}_init_rows")
        # 0: init mode (0 zeros, 1 random, 2 constant), 1: constant value, 2: sampled rows
        self.init_meta = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.float32, 0.0, name=f"{prefix}_init_meta")


def _check_int(value, name, api, minimum=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{api}: {name} must be an int >= {minimum}, got {value!r}")
    return value


def _static_ints(value, name, api):
    static = tf.get_static_value(value) if not isinstance(value, (int, list, tuple)) else value
    if static is None:
        raise NpuAdapterError(
            f"{api}: {name} must be known when the graph is built (a constant, such as the "
            "output of init_embedding_hashmap_v2 or table_to_resource_v2); it selects the "
            "TensorFlow tables that hold the embedding table")
    flat = tf.nest.flatten(static.tolist() if hasattr(static, "tolist") else static)
    return [int(v) for v in flat]


def _table(table_id, api):
    tables = _registry()["tables"]
    table = tables.get(table_id)
    if table is None:
        raise NpuAdapterError(f"{api}: no embedding table {table_id} in this graph; create it "
                              f"with init_embedding_hashmap_v2 first (existing: "
                              f"{sorted(tables)})")
    return table


def _check_config(table, api, bucket_size=None, embedding_dim=None):
    if embedding_dim is not None and embedding_dim != table.embedding_dim:
        raise ValueError(f"{api}: embedding_dim {embedding_dim} does not match table "
                         f"{table.table_id}'s {table.embedding_dim}")
    if bucket_size is not None and bucket_size != table.bucket_size:
        raise ValueError(f"{api}: bucket_size {bucket_size} does not match table "
                         f"{table.table_id}'s {table.bucket_size}")


def init_table(table_id, bucket_size, load_factor, embedding_dim, dtype, name=None):
    """Create the table ``table_id`` (or check an existing one); returns its handle."""
    api = "init_embedding_hashmap_v2"
    _check_int(bucket_size, "bucket_size", api, 1)
    _check_int(load_factor, "load_factor", api, 1)
    _check_int(embedding_dim, "embedding_dim", api, 1)
    if tf.as_dtype(dtype) != tf.float32:
        raise TypeError(f"{api}: dtype must be float32, got {tf.as_dtype(dtype).name}")
    (tid,) = _static_ints(table_id, "table_id", api)
    tables = _registry()["tables"]
    with _LOCK:
        table = tables.get(tid)
        if table is None:
            table = tables[tid] = EmbeddingTable(tid, bucket_size, embedding_dim, load_factor)
    _check_config(table, api, bucket_size, embedding_dim)
    return tf.constant(tid, tf.int64, name=name or "table_handle")


def table_to_resource(table_id, name=None):
    """The handle of the existing table ``table_id``."""
    (tid,) = _static_ints(table_id, "table_id", "table_to_resource_v2")
    _table(tid, "table_to_resource_v2")
    return tf.constant(tid, tf.int64, name=name or "table_handle")


def _all_keys(table_map):
    keys, _ = table_map.export()
    return tf.sort(keys)


def deinit_table(table_id, name=None):
    """An op that empties the table ``table_id`` (rows, slots, counters, marks)."""
    (tid,) = _static_ints(table_id, "table_id", "deinit_embedding_hashmap_v2")
    table = _table(tid, "deinit_embedding_hashmap_v2")
    with tf.name_scope(name or "DeinitEmbeddingHashmapV2"):
        ops = [t.remove(_all_keys(t)) for t in (table.rows, table.slots, table.counters,
                                                table.exported)]
        return tf.group(*ops)


def init_hashtable(table_handle, sampled_values, bucket_size, embedding_dim,
                   initializer_mode="random", constant_value=0.0, name=None):
    """An op that sets how the table initialises new rows (see the module doc)."""
    api = "init_embedding_hashtable"
    if initializer_mode not in _INIT_MODES:
        raise ValueError(f"{api}: initializer_mode must be one of {sorted(_INIT_MODES)}, got "
                         f"{initializer_mode!r}")
    (tid,) = _static_ints(table_handle, "table_handle", api)
    table = _table(tid, api)
    _check_config(table, api, bucket_size, embedding_dim)
    with tf.name_scope(name or "InitEmbeddingHashTable"):
        ops = []
        if initializer_mode == "random":
            values = tf.reshape(tf.cast(sampled_values, tf.float32), [-1, embedding_dim])
            count = tf.shape(values, out_type=tf.int64)[0]
            check = tf.debugging.assert_positive(
                count, message=f"{api}: sampled_values holds no row of {embedding_dim}")
            with tf.control_dependencies([check]):
                ops.append(table.init_rows.insert(tf.range(count), values))
            meta_vals = tf.stack([1.0, 0.0, tf.cast(count, tf.float32)])
        else:
            meta_vals = tf.constant([2.0, float(constant_value), 0.0])
        ops.append(table.init_meta.insert(tf.constant([0, 1, 2], tf.int64), meta_vals))
        return tf.group(*ops)


def _initial_rows(table, slots):
    meta = table.init_meta.lookup(tf.constant([0, 1, 2], tf.int64))
    mode, constant, count = meta[0], meta[1], tf.cast(meta[2], tf.int64)
    n = tf.shape(slots)[0]
    dim = table.embedding_dim
    sampled = table.init_rows.lookup(tf.math.floormod(slots, tf.maximum(count, 1)))
    constant_rows = tf.fill([n, dim], constant)
    return tf.where(tf.equal(mode, 1.0), sampled,
                    tf.where(tf.equal(mode, 2.0), constant_rows, tf.zeros([n, dim])))


def _admit(table, keys, api):
    """Give ``keys`` (unique, not yet admitted) slots and initial rows; returns the op."""
    size = table.slots.size()
    count = tf.size(keys, out_type=tf.int64)
    check = tf.debugging.assert_less_equal(
        size + count, tf.constant(table.bucket_size, tf.int64),
        message=f"{api}: table {table.table_id} is full (bucket_size {table.bucket_size})")
    with tf.control_dependencies([check]):
        slots = size + tf.range(count)
        rows = _initial_rows(table, slots)
        return tf.group(table.slots.insert(keys, slots), table.rows.insert(keys, rows))


def lookup_or_insert(table_handle, keys, bucket_size, embedding_dim, filter_mode="no_filter",
                     filter_freq=0, default_key_or_value=False, default_key=0,
                     default_value=0.0, filter_key_flag=False, filter_key=-1, name=None):
    """The rows of ``keys``, admitting new keys (see the module doc)."""
    api = "embedding_hashtable_lookup_or_insert"
    if filter_mode not in _FILTER_MODES:
        raise ValueError(f"{api}: filter_mode must be one of {list(_FILTER_MODES)}, got "
                         f"{filter_mode!r}")
    _check_int(filter_freq, "filter_freq", api)
    (tid,) = _static_ints(table_handle, "table_handle", api)
    table = _table(tid, api)
    _check_config(table, api, bucket_size, embedding_dim)
    with tf.name_scope(name or "EmbeddingHashTableLookupOrInsert"):
        keys = tf.reshape(tf.cast(keys, tf.int64), [-1])
        uniq, idx = tf.unique(keys)
        occurrences = tf.math.unsorted_segment_sum(tf.ones_like(keys), idx, tf.size(uniq))
        is_filter_key = tf.logical_and(tf.constant(bool(filter_key_flag)),
                                       tf.equal(uniq, filter_key))
        counters = table.counters.lookup(uniq) + tf.where(is_filter_key, tf.zeros_like(occurrences),
                                                          occurrences)
        counted = table.counters.insert(uniq, counters)
        present = table.slots.lookup(uniq) >= 0
        admitted = tf.ones_like(present) if filter_mode == "no_filter" else \
            counters >= filter_freq
        to_admit = present | (admitted & ~is_filter_key)
        new_keys = tf.boolean_mask(uniq, to_admit & ~present)
        with tf.control_dependencies([counted]):
            admit = _admit(table, new_keys, api)
        with tf.control_dependencies([admit]):
            rows = table.rows.lookup(uniq)
            if default_key_or_value:
                default = table.rows.lookup(tf.constant([default_key], tf.int64))
            else:
                default = tf.fill([1, embedding_dim], float(default_value))
            rows = tf.where(to_admit[:, None], rows, default)
        return tf.gather(rows, idx)


def _export_keys(table, filter_export_flag, export_mode):
    counted, _ = table.counters.export()
    admitted, _ = table.slots.export()
    keys = admitted if filter_export_flag else tf.unique(tf.concat([counted, admitted], 0))[0]
    keys = tf.sort(keys)
    if export_mode == "all":
        return keys
    marked = table.exported.lookup(keys) > 0
    return tf.boolean_mask(keys, marked if export_mode == "old" else ~marked)


def _check_export_mode(export_mode, api):
    if export_mode not in _EXPORT_MODES:
        raise ValueError(f"{api}: export_mode must be one of {list(_EXPORT_MODES)}, got "
                         f"{export_mode!r}")


def table_sizes(table_ids, filter_export_flag=False, export_mode="all", name=None):
    """int64 number of keys an export of each table would give."""
    api = "embedding_hashmap_table_size_v2"
    _check_export_mode(export_mode, api)
    ids = _static_ints(table_ids, "table_ids", api)
    with tf.name_scope(name or "EmbeddingHashmapSize"):
        sizes = [tf.size(_export_keys(_table(t, api), filter_export_flag, export_mode),
                         out_type=tf.int64) for t in ids]
        return tf.stack(sizes) if sizes else tf.zeros([0], tf.int64)


def export_tables(table_handles, table_sizes_, embedding_dims, bucket_sizes, export_mode="all",
                  filter_export_flag=False, name=None):
    """``(keys, counters, filter_flags, values)``, each a list with one tensor per table."""
    api = "embedding_hash_table_export"
    _check_export_mode(export_mode, api)
    ids = _static_ints(table_handles, "table_handles", api)
    outputs = ([], [], [], [])
    with tf.name_scope(name or "EmbeddingHashTableExport"):
        for tid in ids:
            table = _table(tid, api)
            keys = _export_keys(table, filter_export_flag, export_mode)
            counters = tf.cast(table.counters.lookup(keys), tf.uint64)
            flags = tf.cast(table.slots.lookup(keys) >= 0, tf.uint8)
            values = tf.reshape(table.rows.lookup(keys), [-1])
            mark = table.exported.insert(keys, tf.ones_like(keys))
            with tf.control_dependencies([mark]):
                for out, tensor in zip(outputs, (keys, counters, flags, values)):
                    out.append(tf.identity(tensor))
    return outputs


def _import_one(table, keys, counters, flags, values, api):
    keys = tf.reshape(tf.cast(keys, tf.int64), [-1])
    counters = tf.reshape(tf.cast(counters, tf.int64), [-1])
    flags = tf.reshape(tf.cast(flags, tf.bool), [-1])
    values = tf.reshape(tf.cast(values, tf.float32), [-1, table.embedding_dim])
    n = tf.shape(keys)[0]
    checks = [tf.debugging.assert_equal(tf.shape(counters)[0], n,
                                        message=f"{api}: counters and keys differ in length"),
              tf.debugging.assert_equal(tf.shape(flags)[0], n,
                                        message=f"{api}: filter_flags and keys differ"),
              tf.debugging.assert_equal(tf.shape(values)[0], n,
                                        message=f"{api}: values do not hold one row per key")]
    with tf.control_dependencies(checks):
        counted = table.counters.insert(keys, counters)
        admitted_keys = tf.boolean_mask(keys, flags)
        admitted_rows = tf.boolean_mask(values, flags)
        present = table.slots.lookup(admitted_keys) >= 0
        admit = _admit(table, tf.boolean_mask(admitted_keys, ~present), api)
        with tf.control_dependencies([admit]):
            rows = table.rows.insert(admitted_keys, admitted_rows)
        return tf.group(counted, rows)


def _as_list(value, num, name, api):
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) != num:
        raise ValueError(f"{api}: {name} must hold one tensor per table ({num}), got "
                         f"{len(items)}")
    return items


def import_tables(table_handles, embedding_dims, bucket_sizes, keys, counters, filter_flags,
                  values, name=None):
    """An op inserting exported data into each table."""
    api = "embedding_hash_table_import"
    ids = _static_ints(table_handles, "table_handles", api)
    parts = [_as_list(v, len(ids), n, api) for n, v in (
        ("keys", keys), ("counters", counters), ("filter_flags", filter_flags),
        ("values", values))]
    with tf.name_scope(name or "EmbeddingHashTableImport"):
        return tf.group(*[_import_one(_table(tid, api), *(p[i] for p in parts), api)
                          for i, tid in enumerate(ids)])


def _static_strings(value, name, api):
    static = value if isinstance(value, (str, bytes, list, tuple)) else \
        tf.get_static_value(value)
    if static is None:
        raise NpuAdapterError(f"{api}: {name} must be known when the graph is built, so the "
                              "files it names can be checked")
    items = static.tolist() if hasattr(static, "tolist") else static
    items = items if isinstance(items, list) else [items]
    return [s.decode("utf-8") if isinstance(s, bytes) else str(s)
            for s in tf.nest.flatten(items)]


def _prefixes(file_path, table_names, global_step, count, api):
    (path,) = _static_strings(file_path, "file_path", api)
    if not os.path.isdir(path):
        raise ValueError(f"{api}: file_path {path!r} is not an existing directory")
    names = _static_strings(table_names, "table_names", api)
    if len(names) != count:
        raise ValueError(f"{api}: table_names must name each of the {count} table(s), got "
                         f"{names}")
    for name in names:
        if not _SAFE_NAME.match(name) or name in (".", ".."):
            raise ValueError(f"{api}: table name {name!r} must be a plain file name (letters, "
                             "digits, '_', '-', '.')")
    step = tf.strings.as_string(tf.cast(global_step, tf.int64))
    return [tf.strings.join([os.path.join(path, name), "-", step]) for name in names]


_BUNDLE_NAMES = ["counters", "filter_flags", "keys", "values"]
_BUNDLE_DTYPES = [tf.uint64, tf.uint8, tf.int64, tf.float32]


def file_export(file_path, table_ids, table_names, global_step, keys, counters, filter_flag,
                values, num, name=None):
    """An op writing one bundle per table (see the module doc)."""
    api = "embedding_hashmap_export_v2"
    _check_int(num, "num", api, 1)
    prefixes = _prefixes(file_path, table_names, global_step, num, api)
    parts = [_as_list(v, num, n, api) for n, v in (
        ("counters", counters), ("filter_flag", filter_flag), ("keys", keys),
        ("values", values))]
    with tf.name_scope(name or "EmbeddingHashmapExport"):
        ops = []
        for i, prefix in enumerate(prefixes):
            tensors = [tf.cast(tf.reshape(p[i], [-1]), dt) for p, dt in zip(parts,
                                                                           _BUNDLE_DTYPES)]
            ops.append(tf.raw_ops.SaveV2(prefix=prefix, tensor_names=_BUNDLE_NAMES,
                                         shape_and_slices=[""] * 4, tensors=tensors))
        return tf.group(*ops)


def _restore(prefix, names, dtypes):
    return tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=names,
                                shape_and_slices=[""] * len(names), dtypes=dtypes)


def file_sizes(file_path, table_ids, table_names, global_step, embedding_dims, name=None):
    """int64 number of keys in each table's bundle."""
    api = "embedding_hashmap_file_size_v2"
    ids = _static_ints(table_ids, "table_ids", api)
    prefixes = _prefixes(file_path, table_names, global_step, len(ids), api)
    with tf.name_scope(name or "EmbeddingHashmapFileSize"):
        return tf.stack([tf.size(_restore(p, ["keys"], [tf.int64])[0], out_type=tf.int64)
                         for p in prefixes])


def file_import(file_path, table_ids, table_sizes_, table_names, global_step, embedding_dims,
                num, name=None):
    """``(keys, counters, filter_flags, values)`` lists read from the bundles."""
    api = "embedding_hashmap_import_v2"
    _check_int(num, "num", api, 1)
    prefixes = _prefixes(file_path, table_names, global_step, num, api)
    dims = [int(d) for d in tf.nest.flatten(embedding_dims)]
    if len(dims) != num:
        raise ValueError(f"{api}: embedding_dims must give one dim per table ({num}), got "
                         f"{dims}")
    sizes = tf.reshape(tf.cast(table_sizes_, tf.int64), [-1])
    outputs = ([], [], [], [])
    with tf.name_scope(name or "EmbeddingHashmapImport"):
        for i, prefix in enumerate(prefixes):
            counters, flags, keys, values = _restore(prefix, _BUNDLE_NAMES, _BUNDLE_DTYPES)
            n = tf.size(keys, out_type=tf.int64)
            checks = [tf.debugging.assert_equal(n, sizes[i], message=f"{api}: table "
                                                f"{i} holds a different number of keys"),
                      tf.debugging.assert_equal(tf.size(values, out_type=tf.int64),
                                                n * dims[i], message=f"{api}: table {i} "
                                                "values do not match embedding_dims")]
            with tf.control_dependencies(checks):
                for out, tensor in zip(outputs, (keys, counters, flags, values)):
                    out.append(tf.identity(tensor))
    return outputs


def _read(value, dtype):
    if isinstance(value, tf.Variable):
        return tf.cast(value.read_value() if hasattr(value, "read_value") else value, dtype)
    return tf.cast(value, dtype)


def apply_adam_w(table_handle, keys, m, v, beta1_power, beta2_power, lr, weight_decay, beta1,
                 beta2, epsilon, grad, max_grad_norm, embedding_dim, bucket_size,
                 amsgrad=False, maximize=False, name=None):
    """An op applying AdamW to the rows of ``keys`` (see the module doc)."""
    api = "embedding_hashtable_apply_adam_w"
    (tid,) = _static_ints(table_handle, "table_handle", api)
    table = _table(tid, api)
    _check_config(table, api, bucket_size, embedding_dim)
    for var_name, var in (("m", m), ("v", v)) + ((("max_grad_norm", max_grad_norm),)
                                                 if amsgrad else ()):
        if not isinstance(var, tf.Variable):
            raise TypeError(f"{api}: {var_name} must be a variable of shape [bucket_size, "
                            f"embedding_dim], got {type(var).__name__}")
    with tf.name_scope(name or "EmbeddingHashTableApplyAdamW"):
        dtype = m.dtype.base_dtype
        keys = tf.reshape(tf.cast(keys, tf.int64), [-1])
        grad = tf.reshape(tf.cast(grad, tf.float32), [-1, embedding_dim])
        uniq, idx = tf.unique(keys)
        grad = tf.math.unsorted_segment_sum(grad, idx, tf.size(uniq))
        slots = table.slots.lookup(uniq)
        present = slots >= 0
        uniq, slots, g = (tf.boolean_mask(t, present) for t in (uniq, slots, grad))
        if maximize:
            g = -g
        b1, b2 = _read(beta1, tf.float32), _read(beta2, tf.float32)
        lr_, wd, eps = (_read(t, tf.float32) for t in (lr, weight_decay, epsilon))
        c1 = 1.0 - _read(beta1_power, tf.float32)
        c2 = 1.0 - _read(beta2_power, tf.float32)
        m_new = b1 * tf.cast(tf.gather(m, slots), tf.float32) + (1.0 - b1) * g
        v_new = b2 * tf.cast(tf.gather(v, slots), tf.float32) + (1.0 - b2) * g * g
        updates = [tf.compat.v1.scatter_update(m, slots, tf.cast(m_new, dtype)),
                   tf.compat.v1.scatter_update(v, slots, tf.cast(v_new, dtype))]
        v_hat = v_new
        if amsgrad:
            v_hat = tf.maximum(tf.cast(tf.gather(max_grad_norm, slots), tf.float32), v_new)
            updates.append(tf.compat.v1.scatter_update(max_grad_norm, slots,
                                                       tf.cast(v_hat, dtype)))
        w = table.rows.lookup(uniq)
        w_new = w * (1.0 - lr_ * wd) - lr_ * (m_new / c1) / (tf.sqrt(v_hat / c2) + eps)
        updates.append(table.rows.insert(uniq, w_new))
        return tf.group(*updates)


class _FeatureMap:
    def __init__(self, name):
        self.offsets = _int_table(-1, f"feature_mapping_{name}_offsets")
        self.counters = _int_table(0, f"feature_mapping_{name}_counters")


def feature_mapping(feature_id, threshold, table_name, out_type, api, name=None):
    """Dense offsets of ``feature_id`` in the mapping ``table_name`` (see the module doc)."""
    _check_int(threshold, "threshold", api, 0)
    if not isinstance(table_name, str) or not table_name:
        raise ValueError(f"{api}: table_name must be a non-empty string, got {table_name!r}")
    features = _registry()["features"]
    with _LOCK:
        fmap = features.get(table_name)
        if fmap is None:
            fmap = features[table_name] = _FeatureMap(len(features))
    with tf.name_scope(name or "FeatureMapping"):
        feature_id = tf.convert_to_tensor(feature_id, name="feature_id")
        if feature_id.dtype != tf.int64:
            raise TypeError(f"{api}: feature_id must be int64, got {feature_id.dtype.name}")
        flat = tf.reshape(feature_id, [-1])
        uniq, idx = tf.unique(flat)
        seen = tf.math.unsorted_segment_sum(tf.ones_like(flat), idx, tf.size(uniq))
        counters = fmap.counters.lookup(uniq) + seen
        counted = fmap.counters.insert(uniq, counters)
        present = fmap.offsets.lookup(uniq) >= 0
        new = tf.boolean_mask(uniq, ~present & (counters >= threshold))
        with tf.control_dependencies([counted]):
            start = fmap.offsets.size()
            admit = fmap.offsets.insert(new, start + tf.range(tf.size(new, out_type=tf.int64)))
        with tf.control_dependencies([admit]):
            offsets = fmap.offsets.lookup(uniq)
        return tf.cast(tf.reshape(tf.gather(offsets, idx), tf.shape(feature_id)), out_type)
