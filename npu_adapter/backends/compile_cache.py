"""A content-addressed, multi-process-safe cache of compiled artefacts, for every backend.

``graph_compiler_cache_dir`` names the directory; as with the original, it must exist. Each
backend keeps its entries under ``<dir>/npu_adapter_<backend>/<key[:2]>/``: the artefact
``<key><suffix>`` and its record ``<key>.json`` (size, SHA-256, what was compiled). The key
(:func:`cache_key`) hashes everything that changes the artefact — the cluster's content, the
gear or shapes, the options that change compilation, the backend and its versions — so two
processes compiling the same cluster share one entry.

* Writes are atomic: the artefact and then its record are written to temporary files in the
  same directory and renamed into place, so a reader never sees half a file, and concurrent
  writers of one key leave one complete entry (same content).
* A lookup checks the record's size and checksum; a truncated or corrupted entry is removed
  with a :class:`CompileCacheWarning` and reported as a miss, so the caller rebuilds it.
* ``max_bytes`` bounds the total size: after a store, the least recently used entries (a hit
  refreshes an entry's time) are removed until the cache fits, never the entry just stored.
"""

import contextlib
import hashlib
import json
import os
import shutil
import threading
import time
import warnings

from npu_adapter.errors import NpuConfigError

__all__ = ["CacheStats", "CompileCache", "CompileCacheDirError", "CompileCacheWarning",
           "cache_key", "open_compile_cache"]

_RECORD_SUFFIX = ".json"
_CHUNK = 1 << 20


class CompileCacheDirError(NpuConfigError):
    """``graph_compiler_cache_dir`` names no existing, writable directory."""


class CompileCacheWarning(UserWarning):
    """A cache entry was corrupted or truncated and is rebuilt."""


def cache_key(parts):
    """SHA-256 hex digest of ``parts`` (a JSON-serialisable value), keys sorted."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                return digest.hexdigest()
            digest.update(chunk)


def _temporary(path):
    """A temporary file next to ``path``, opened for writing with the mode the umask gives
    (``tempfile.mkstemp`` would make it 0600, and so the entry after its rename): its path and
    file object. Unique per process and thread."""
    tmp = os.path.join(os.path.dirname(path), f".tmp-{os.getpid()}-{threading.get_ident()}-"
                                              f"{os.path.basename(path)}")
    return tmp, open(tmp, "wb")


def _fsync_write(out, data):
    with out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


class CacheStats:
    """Counters of one :class:`CompileCache` (this process only)."""

    __slots__ = ("hits", "misses", "stores", "evictions", "corrupt")

    def __init__(self):
        self.hits = self.misses = self.stores = self.evictions = self.corrupt = 0

    def as_dict(self):
        return {name: getattr(self, name) for name in self.__slots__}


class CompileCache:
    """The entries of one backend in one cache directory.

    Args:
        directory: the user's cache directory (must exist).
        backend: the backend name (entries live in ``npu_adapter_<backend>/``).
        suffix: the artefact's file suffix (``".om"``).
        max_bytes: total size bound (None or 0: unbounded).

    Raises:
        CompileCacheDirError: ``directory`` does not exist or is not writable.
    """

    def __init__(self, directory, backend, *, suffix=".bin", max_bytes=None,
                 option="graph_compiler_cache_dir"):
        directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
        if not os.path.isdir(directory):
            raise CompileCacheDirError(option, directory, "an existing directory (it is not "
                                       "created for you, as with the original)")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise CompileCacheDirError(option, directory, "a writable directory")
        self.directory = directory
        self.backend = backend
        self.root = os.path.join(directory, f"npu_adapter_{backend}")
        self.suffix = suffix
        self.max_bytes = int(max_bytes) if max_bytes else None
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._verified = {}  # key -> (size, mtime_ns) checked in this process

    # ---------------------------------------------------------------- paths
    def path_of(self, key):
        """Where the artefact of ``key`` lives (whether or not it exists)."""
        return os.path.join(self.root, key[:2], key + self.suffix)

    def _record_of(self, key):
        return os.path.join(self.root, key[:2], key + _RECORD_SUFFIX)

    # ---------------------------------------------------------------- lookup
    def lookup(self, key):
        """The path of ``key``'s artefact, or None (a miss, or a corrupted entry removed)."""
        path, record_path = self.path_of(key), self._record_of(key)
        try:
            with open(record_path, encoding="utf-8") as f:
                record = json.load(f)
            st = os.stat(path)
        except (OSError, ValueError):
            self._count("misses")
            return None
        stamp = (st.st_size, st.st_mtime_ns)
        if self._verified.get(key) != stamp:
            problem = None
            if st.st_size != record.get("size"):
                problem = f"size {st.st_size} bytes, recorded {record.get('size')}"
            elif _file_digest(path) != record.get("sha256"):
                problem = "checksum mismatch"
            if problem:
                warnings.warn(f"compile cache entry {path} is corrupted ({problem}); it is "
                              "removed and rebuilt", CompileCacheWarning, stacklevel=2)
                self._remove(key)
                self._count("corrupt")
                self._count("misses")
                return None
        self._touch(path)
        with contextlib.suppress(OSError):
            self._verified[key] = (st.st_size, os.stat(path).st_mtime_ns)
        self._count("hits")
        return path

    def record(self, key):
        """The JSON record of ``key`` (None when absent)."""
        try:
            with open(self._record_of(key), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    # ---------------------------------------------------------------- store
    def store(self, key, source, meta=None):
        """Copy the file ``source`` into the cache as ``key``; returns the entry's path."""

        def write(out):
            with open(source, "rb") as src:
                shutil.copyfileobj(src, out, _CHUNK)

        return self._store(key, write, meta)

    def store_bytes(self, key, data, meta=None):
        """Store ``data`` (bytes) as the artefact of ``key``; returns the entry's path."""
        return self._store(key, lambda out: out.write(data), meta)

    def _store(self, key, write, meta):
        path, record_path = self.path_of(key), self._record_of(key)
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        tmp, out = _temporary(path)
        try:
            with out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            size = os.path.getsize(tmp)
            digest = _file_digest(tmp)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        record = {"key": key, "backend": self.backend, "size": size, "sha256": digest,
                  "created": time.time(), "meta": meta or {}}
        tmp, out = _temporary(record_path)
        try:
            _fsync_write(out, json.dumps(record, sort_keys=True, indent=1).encode())
            os.replace(tmp, record_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._count("stores")
        self.evict(keep=key)
        return path

    def discard(self, key, problem):
        """Remove ``key``'s entry with a :class:`CompileCacheWarning` naming ``problem`` (for
        callers that find an entry unusable after :meth:`lookup` verified its bytes)."""
        warnings.warn(f"cache entry {self.path_of(key)} is unusable ({problem}); it is removed "
                      "and rebuilt", CompileCacheWarning, stacklevel=2)
        self._remove(key)
        self._count("corrupt")

    # ---------------------------------------------------------------- eviction
    def entries(self):
        """``[(last use time, size, key)]`` of every complete entry."""
        found = []
        if not os.path.isdir(self.root):
            return found
        for sub in sorted(os.listdir(self.root)):
            folder = os.path.join(self.root, sub)
            if not os.path.isdir(folder):
                continue
            for name in sorted(os.listdir(folder)):
                if not name.endswith(self.suffix) or name.startswith(".tmp-"):
                    continue
                key = name[:-len(self.suffix)]
                try:
                    st = os.stat(os.path.join(folder, name))
                except OSError:
                    continue
                found.append((st.st_mtime, st.st_size, key))
        return found

    def has_entries(self):
        """Whether at least one complete entry exists (:meth:`entries` would list one); reads
        directory listings only, until the first."""
        try:
            with os.scandir(self.root) as folders:
                for folder in folders:
                    if not folder.is_dir():
                        continue
                    with os.scandir(folder.path) as files:
                        if any(f.name.endswith(self.suffix) and not f.name.startswith(".tmp-")
                               for f in files):
                            return True
        except OSError:  # no folder of ours yet
            return False
        return False

    def total_bytes(self):
        """Total size of the artefacts."""
        return sum(size for _, size, _ in self.entries())

    def evict(self, keep=None):
        """Remove least recently used entries until the cache fits ``max_bytes``."""
        if not self.max_bytes:
            return 0
        entries = sorted(self.entries())
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, key in entries:
            if total <= self.max_bytes:
                break
            if key == keep:
                continue
            self._remove(key)
            total -= size
            removed += 1
        if removed:
            self._count("evictions", removed)
        return removed

    # ---------------------------------------------------------------- helpers
    def _remove(self, key):
        self._verified.pop(key, None)
        for path in (self._record_of(key), self.path_of(key)):
            with contextlib.suppress(OSError):
                os.unlink(path)

    @staticmethod
    def _touch(path):
        with contextlib.suppress(OSError):
            os.utime(path)

    def _count(self, name, n=1):
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + n)


def open_compile_cache(directory, backend, *, suffix=".bin", max_bytes=None):
    """A :class:`CompileCache`, or None when ``directory`` is empty or None."""
    if not directory:
        return None
    return CompileCache(directory, backend, suffix=suffix, max_bytes=max_bytes)
