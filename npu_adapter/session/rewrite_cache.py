"""The rewrite cache of sessions: a signature of a graph is rewritten once, also across processes.

Online-inference scripts open a session per request, often on a freshly loaded graph, and a
process started again rewrites the same graphs again. The rewrite of a signature depends only on
the user graph's structure (never on weight values: sessions rewrite the *light* graph of
:mod:`npu_adapter.graph.payload`), the run signature, the options, the backend, the names it hands
out and the code that rewrites. So :func:`cached_rewrite` wraps :func:`npu_adapter.rewrite` with a
cache keyed by a hash of exactly those.

:data:`MEMORY` holds the results of this process (bounded, least recently used dropped).
:func:`disk_cache` is the layer shared between processes, under ``npu_adapter_cache_dir`` (or
``graph_compiler_cache_dir``) in ``npu_adapter_rewrite/``: each entry is the light rewritten
GraphDef (protobuf) and a JSON record of the other result fields, written atomically, checked by
size and SHA-256 on read (a corrupt or unreadable entry is removed with a warning and rebuilt),
and bounded by ``npu_adapter_compile_cache_max_mb`` (least recently used removed). No pickle: the
record holds strings, numbers and lists only, and a result that does not fit is not stored.
Rewrites with dumps never come from a cache: the dump must watch the passes run.
"""

import collections
import functools
import hashlib
import json
import os
import threading

__all__ = ["RewriteCache", "DiskRewriteCache", "MEMORY", "rewrite_key", "graph_digest",
           "disk_cache", "cached_rewrite"]

# Environment variables a rewrite reads (they change its result).
_ENVIRONMENT = ("ASCEND_OPP_PATH", "ASCEND_CUSTOM_OPP_PATH", "NPU_ADAPTER_EMULATE_PRECISION")


def _versions():
    import tensorflow as tf

    from npu_adapter import __version__

    return {"npu_adapter": __version__, "tensorflow": tf.__version__}


@functools.lru_cache(maxsize=1)
def _code_stamp():
    """A digest of our installed sources (path, size, modification time): a checkout whose
    passes changed under the same version must not reuse another code's rewrites from disk."""
    import npu_adapter
    import npu_adapter.passes

    return sources_stamp(os.path.dirname(os.path.abspath(package.__file__))
                         for package in (npu_adapter, npu_adapter.passes))


def sources_stamp(roots):
    """A digest of the ``.py`` files under each folder of ``roots`` (path relative to its root,
    size, modification time; ``__pycache__`` left out), the same for the same files in any
    order of listing."""
    digest = hashlib.sha256()
    for root in roots:
        pending = [(root, "")]
        while pending:  # depth first, entries by name (scandir's stat needs no second call)
            folder, rel = pending.pop()
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
            for entry in entries:
                if entry.name.endswith(".py") and entry.is_file():
                    st = entry.stat()
                    digest.update(f"{rel}{entry.name}:{st.st_size}:{st.st_mtime_ns};".encode())
            pending.extend((entry.path, f"{rel}{entry.name}/") for entry in reversed(entries)
                           if entry.is_dir() and entry.name != "__pycache__")
        digest.update(b"|")  # the next root's files are not this one's
    return digest.hexdigest()[:16]


def graph_digest(graph_def):
    """The SHA-256 of ``graph_def`` serialised deterministically (hex)."""
    return hashlib.sha256(graph_def.SerializeToString(deterministic=True)).hexdigest()


def rewrite_key(graph_digest_hex, *, fetches, targets, feeds, config, backend, graph_num,
                op_support):
    """The content key (hex SHA-256) of one rewrite of the graph whose :func:`graph_digest` is
    ``graph_digest_hex`` (see the module docstring)."""
    digest = hashlib.sha256()
    digest.update(graph_digest_hex.encode())
    backend_cls = type(backend)
    describe = {
        "fetches": list(fetches), "targets": list(targets), "feeds": list(feeds),
        "config": sorted((k, repr(v)) for k, v in config.to_dict().items()),
        "present": bool(getattr(config, "present", True)),
        "backend": [getattr(backend, "name", ""), backend_cls.__module__,
                    backend_cls.__qualname__],
        "graph_num": int(graph_num),
        "op_support": op_support.fingerprint() if hasattr(op_support, "fingerprint")
        else repr(op_support),
        "environment": {k: os.environ.get(k, "") for k in _ENVIRONMENT},
        "versions": _versions(),
    }
    digest.update(json.dumps(describe, sort_keys=True).encode())
    return digest.hexdigest()


class RewriteCache:
    """Rewrite results by content key, at most ``max_entries`` (least recently used dropped).
    Results are shared, never modified: a session reads them and builds its own graphs."""

    def __init__(self, max_entries=64):
        self.max_entries = max_entries
        self._entries = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        """The result stored under ``key``, or None."""
        with self._lock:
            result = self._entries.get(key)
            if result is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return result

    def put(self, key, result):
        """Remember ``result`` under ``key``."""
        with self._lock:
            self._entries[key] = result
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self):
        """Forget every entry (and the counters)."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0


MEMORY = RewriteCache()
"""The rewrite results of this process."""


# RewriteResult fields the disk record holds (the graph is the artefact; clusters are re-read
# from it, as a fresh rewrite reads them).
_RECORD_FIELDS = ("placement", "modified", "skip_reason", "tensor_map", "op_map", "feed_map",
                  "pipeline", "timings", "pass_info", "aliases")
_FORMAT = 2


class DiskRewriteCache:
    """Rewrite results shared between processes (see the module docstring).

    Args:
        directory: an existing, writable directory.
        option: the option that named it (for errors).
        max_bytes: size bound of the entries (None or 0: unbounded).
    """

    def __init__(self, directory, option, max_bytes=None):
        from npu_adapter.backends.compile_cache import CompileCache

        self.store = CompileCache(directory, "rewrite", suffix=".pb", max_bytes=max_bytes,
                                  option=option)

    @property
    def stats(self):
        """Hit, miss, store, eviction and corrupt counters of this process."""
        return self.store.stats

    @staticmethod
    def _disk_key(key):
        """The entry name of ``key``: with the stamp of our sources, which only matters across
        processes (and costs a few ms to take, once)."""
        return hashlib.sha256(f"{key}:{_code_stamp()}".encode()).hexdigest()

    def get(self, key):
        """The result stored under ``key``, or None."""
        from google.protobuf.message import DecodeError
        from tensorflow.core.framework import graph_pb2

        from npu_adapter.pipeline.result import RewriteResult, clusters_from_graph

        key = self._disk_key(key)
        path = self.store.lookup(key)
        if path is None:
            return None
        record = self.store.record(key) or {}
        meta = record.get("meta") or {}
        try:
            if meta.get("format") != _FORMAT or set(_RECORD_FIELDS) - set(meta):
                raise ValueError("its record lacks result fields")
            with open(path, "rb") as f:
                light = graph_pb2.GraphDef.FromString(f.read())
            result = RewriteResult(
                graph_def=light, clusters=clusters_from_graph(light),
                timings=[tuple(t) for t in meta["timings"]],
                **{k: meta[k] for k in _RECORD_FIELDS if k != "timings"})
        except (OSError, ValueError, TypeError, KeyError, DecodeError) as exc:
            self.store.discard(key, str(exc) or type(exc).__name__)
            return None
        return result

    def put(self, key, result):
        """Store ``result``; False when its fields do not fit a JSON record (then it stays in
        memory only)."""
        meta = {k: getattr(result, k) for k in _RECORD_FIELDS}
        meta["format"] = _FORMAT
        key = self._disk_key(key)
        try:
            json.dumps(meta)
        except (TypeError, ValueError):
            return False
        self.store.store_bytes(key, result.graph_def.SerializeToString(deterministic=True), meta)
        return True


_DISK = {}
_DISK_LOCK = threading.Lock()


def disk_cache(config):
    """The :class:`DiskRewriteCache` named by ``config`` (``npu_adapter_cache_dir``, else
    ``graph_compiler_cache_dir``), or None when neither is set. One per directory and bound
    in this process.

    Raises:
        CompileCacheDirError: the directory does not exist or is not writable.
    """
    option = "npu_adapter_cache_dir"
    directory = getattr(config, option, "") or ""
    if not directory:
        option = "graph_compiler_cache_dir"
        directory = getattr(config, option, "") or ""
    if not directory:
        return None
    max_mb = int(getattr(config, "npu_adapter_compile_cache_max_mb", 0) or 0)
    where = (os.path.abspath(os.path.expanduser(directory)), max_mb)
    with _DISK_LOCK:
        cache = _DISK.get(where)
        if cache is None:
            cache = _DISK[where] = DiskRewriteCache(directory, option,
                                                    max_mb * (1 << 20) or None)
        return cache


def cached_rewrite(graph_def, digest, config, *, fetches, targets, feeds, backend, graph_num):
    """``npu_adapter.rewrite(graph_def, config, ...)`` of a session, from the caches when the
    same rewrite was made before (in this process, or on disk by another).

    Args:
        graph_def: the user's light GraphDef (see the module docstring).
        digest: its :func:`graph_digest`.
        config: the session's ``NpuConfig``.
        fetches, targets, feeds: the run signature (names in ``graph_def``).
        backend: the ``Backend`` instance.
        graph_num: the ``N`` of the ``GeOp<N>_<k>`` names.
    """
    from npu_adapter.api import rewrite

    dump_dir = getattr(config, "npu_adapter_dump_dir", "") or None
    key = disk = None
    if dump_dir is None:
        key = rewrite_key(digest, fetches=fetches, targets=targets, feeds=feeds, config=config,
                          backend=backend, graph_num=graph_num,
                          op_support=backend.op_support(config))
        result = MEMORY.get(key)
        if result is not None:
            return result
        # Only backends whose rewritten graphs hold nothing bound to this process share them on
        # disk (the CANN lowering registers a callback token per cluster).
        if getattr(backend, "portable_rewrites", False):
            disk = disk_cache(config)
            result = disk.get(key) if disk is not None else None
            if result is not None:
                MEMORY.put(key, result)
                return result
    result = rewrite(graph_def, config, fetches=fetches, targets=targets, feeds=feeds,
                     backend=backend, dump_dir=dump_dir, graph_num=graph_num)
    if key is not None:
        MEMORY.put(key, result)
        if disk is not None:
            disk.put(key, result)
    return result
