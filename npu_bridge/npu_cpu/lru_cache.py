"""A least-recently-used id cache (``npu_bridge.npu_cpu.lru_cache.LruCache``).

The cache maps remote ids (embedding row numbers) to the ``cache_size`` local slots of a
device-side cache. Its state lives in TensorFlow hash tables created with the object (so in the
graph the object was made in), and every method builds ops:

* :meth:`LruCache.cache_add` ``(ids)`` uses the ids: ids already cached are refreshed; the
  others (in order of first occurrence) take the free slots in ascending order, then the slots of
  the least recently used ids that are not in this call (ties: lower slot first), which are
  evicted. Returns ``(swap_in_id, swap_in_idx, swap_out_id, swap_out_idx)``: the ids brought in
  with their slots and the evicted ids with the slots they had. More distinct ids in one call than
  ``cache_size`` raises ``InvalidArgumentError``.
* :meth:`LruCache.cache_remote_index_to_local` ``(ids)``: the slot of each id, -1 when not cached
  (does not count as a use).
* :meth:`LruCache.cache_all_index_to_local` ``()``: the cached ids in slot order.

``load_factor`` (a positive number) sizes the device's hash index and does not change which ids
are cached.
"""

import tensorflow as tf

from npu_bridge.helper import helper

__all__ = ["LruCache", "gen_npu_cpu_ops"]

_DTYPES = (tf.uint32, tf.uint64, tf.int32, tf.int64)


def _table(default, name):
    return tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default, name=name)


class _CacheResource:
    """The hash tables of one cache."""

    def __init__(self, cache_size, dtype):
        self.cache_size = cache_size
        self.dtype = dtype
        self.id_to_slot = _table(-1, "lru_cache_id_to_slot")
        self.slot_to_id = _table(-1, "lru_cache_slot_to_id")
        self.slot_tick = _table(-1, "lru_cache_slot_tick")
        self.clock = _table(0, "lru_cache_clock")


def _lru_cache(cache_size, load_factor=1.0, dtype=tf.uint32, name=None):
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
        raise ValueError(f"LruCache: cache_size must be an int >= 1, got {cache_size!r}")
    if isinstance(load_factor, bool) or not isinstance(load_factor, (int, float)) or \
            load_factor <= 0:
        raise ValueError(f"LruCache: load_factor must be a positive number, got "
                         f"{load_factor!r}")
    dtype = tf.as_dtype(dtype)
    if dtype not in _DTYPES:
        raise TypeError(f"LruCache: dtype must be one of {[d.name for d in _DTYPES]}, got "
                        f"{dtype.name}")
    with tf.name_scope(name or "LruCache"):
        return _CacheResource(cache_size, dtype)


def _cache_add(cache, ids, name=None):
    with tf.name_scope(name or "CacheAdd"):
        ids = tf.convert_to_tensor(ids, name="ids")
        out_dtype = ids.dtype
        flat = tf.cast(tf.reshape(ids, [-1]), tf.int64)
        uniq, _ = tf.unique(flat)
        check = tf.debugging.assert_less_equal(
            tf.size(uniq), cache.cache_size,
            message=f"LruCache.cache_add: more distinct ids than cache_size "
                    f"{cache.cache_size}")
        with tf.control_dependencies([check]):
            slots = cache.id_to_slot.lookup(uniq)
        hit = slots >= 0
        miss_ids = tf.boolean_mask(uniq, ~hit)
        misses = tf.size(miss_ids, out_type=tf.int64)
        used = cache.id_to_slot.size()
        free = tf.minimum(misses, cache.cache_size - used)
        free_slots = used + tf.range(free)
        evict = misses - free
        occupied = tf.range(used)
        ticks = cache.slot_tick.lookup(occupied)
        hit_slot = tf.reduce_any(tf.equal(occupied[:, None], tf.boolean_mask(slots, hit)[None]),
                                 axis=1)
        # Oldest first, lower slot first among equal ticks; this call's hits last.
        rank_key = tf.where(hit_slot, tf.int64.max, ticks)
        order = tf.argsort(rank_key, stable=True)
        out_slots = tf.gather(occupied, order[:evict])
        out_ids = cache.slot_to_id.lookup(out_slots)
        in_slots = tf.concat([free_slots, out_slots], axis=0)
        tick = cache.clock.lookup(tf.constant([0], tf.int64))[0] + 1
        removed = cache.id_to_slot.remove(out_ids)
        with tf.control_dependencies([removed]):
            inserted = tf.group(
                cache.id_to_slot.insert(miss_ids, in_slots),
                cache.slot_to_id.insert(in_slots, miss_ids))
        with tf.control_dependencies([inserted]):
            used_slots = cache.id_to_slot.lookup(uniq)
            touched = tf.group(cache.slot_tick.insert(used_slots, tf.fill(tf.shape(used_slots),
                                                                          tick)),
                               cache.clock.insert(tf.constant([0], tf.int64), [tick]))
        with tf.control_dependencies([touched]):
            return tuple(tf.cast(tf.identity(t), out_dtype)
                         for t in (miss_ids, in_slots, out_ids, out_slots))


def _cache_remote_index_to_local(cache, ids, name=None):
    with tf.name_scope(name or "CacheRemoteIndexToLocal"):
        ids = tf.convert_to_tensor(ids, name="ids")
        local = cache.id_to_slot.lookup(tf.cast(ids, tf.int64))
        if ids.dtype in (tf.uint32, tf.uint64):
            return tf.cast(local, tf.int64)  # -1 marks a missing id
        return tf.cast(local, ids.dtype)


def _cache_all_index_to_local(cache, dtype=None, name=None):
    with tf.name_scope(name or "CacheAllIndexToLocal"):
        slots, ids = cache.slot_to_id.export()
        ids = tf.gather(ids, tf.argsort(slots))
        return tf.cast(ids, dtype or cache.dtype)


helper.register_gen_ops({
    "LruCache": _lru_cache,
    "CacheAdd": _cache_add,
    "CacheRemoteIndexToLocal": _cache_remote_index_to_local,
    "CacheAllIndexToLocal": _cache_all_index_to_local,
})
gen_npu_cpu_ops = helper.get_gen_ops()


class LruCache:
    """LRU cache of ``cache_size`` slots for ids of ``dtype`` (see the module doc)."""

    def __init__(self, cache_size=100000, load_factor=1, dtype=tf.uint32):
        self._cache_size = cache_size
        self._load_factor = load_factor
        self._dtype = dtype
        self._cache = gen_npu_cpu_ops.lru_cache(cache_size=cache_size, load_factor=load_factor,
                                                dtype=dtype)

    def cache_add(self, ids):
        """``(swap_in_id, swap_in_idx, swap_out_id, swap_out_idx)`` after using ``ids``."""
        return gen_npu_cpu_ops.cache_add(cache=self._cache, ids=ids)

    def cache_remote_index_to_local(self, ids):
        """The slot of each id (-1 when not cached)."""
        return gen_npu_cpu_ops.cache_remote_index_to_local(cache=self._cache, ids=ids)

    def cache_all_index_to_local(self):
        """The cached ids in slot order."""
        return gen_npu_cpu_ops.cache_all_index_to_local(cache=self._cache, dtype=self._dtype)
