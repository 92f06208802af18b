"""``graph_compiler_cache_dir`` for XLA: TensorFlow's persistent compilation cache, kept in bounds.

TensorFlow can write every XLA executable it builds to a directory and load it from there in a
later process instead of compiling again (``TF_XLA_FLAGS=--tf_xla_persistent_cache_directory``).
The XLA backend points it at ``<graph_compiler_cache_dir>/npu_adapter_xla/`` and adds what
TensorFlow leaves out:

* **When.** TensorFlow reads ``TF_XLA_FLAGS`` once per process, when the first device is created
  (the first session, or the first eager operation). :func:`activate` sets the flag and makes
  TensorFlow read its flags at once, with a marker that shows whether this read was the first
  (nothing is compiled to find out); when it was too late (the flags were read before), it
  warns with :class:`XlaCacheWarning` and the backend runs uncached. Set the option (or the
  flag yourself) before the process runs anything in TensorFlow.
* **Corrupt entries.** TensorFlow fails the run when an entry is truncated ("Read less bytes
  than requested"). Each entry gets a record (``<entry>.record.json``: size, SHA-256, last use);
  an entry whose size no longer matches its record, or, without a record, whose protobuf
  framing is incomplete, is removed with a warning, so TensorFlow compiles and writes it again.
* **Size bound.** ``npu_adapter_compile_cache_max_mb`` bounds the entries' total size: the least
  recently used are removed first. Use is read from the file system's access times (TensorFlow
  reads an entry to load it); on a file system mounted ``noatime`` that degrades to oldest
  written first.

Entries are TensorFlow's (``xla_compile_cache__<signature>__<cluster>__XLA_CPU_JIT.pb``); the
records are ours, written atomically (temporary file + ``os.replace``) next to them.
"""

import contextlib
import hashlib
import json
import os
import threading
import warnings

from npu_adapter.backends.compile_cache import CompileCacheDirError, CompileCacheWarning
from npu_adapter.datadump.writer import write_atomic

__all__ = ["FLAG", "PersistentCache", "XlaCacheWarning", "activate", "check_cache_dir",
           "flag_directory", "framing_problem"]

FLAG = "--tf_xla_persistent_cache_directory"
SUBDIR = "npu_adapter_xla"
_ENTRY_SUFFIX = ".pb"
_RECORD_SUFFIX = ".record.json"
_CHUNK = 1 << 20
# Top-level fields of TensorFlow's serialized cache entry: the key and the executable must be
# there (the HLO module, field 2, is optional).
_REQUIRED_FIELDS = (1, 3)


class XlaCacheWarning(CompileCacheWarning):
    """The XLA persistent cache cannot be used as configured, or an entry was rebuilt."""


_LOCK = threading.Lock()
_ACTIVE = {}  # process state: "root" (the directory TensorFlow writes to) or "too_late"


def flag_directory(flags):
    """The directory named by :data:`FLAG` in a ``TF_XLA_FLAGS`` string (None when absent)."""
    found = None
    for token in (flags or "").split():
        if token.startswith(FLAG + "="):
            found = token[len(FLAG) + 1:]
    return found


def check_cache_dir(directory):
    """``directory`` as an absolute path.

    Raises:
        CompileCacheDirError: it is not an existing, writable directory (an ``NpuConfigError``
            of ``graph_compiler_cache_dir``).
    """
    directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
    if not os.path.isdir(directory):
        raise CompileCacheDirError("graph_compiler_cache_dir", directory,
                                   "an existing directory (it is not created for you, as with "
                                   "the original)")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CompileCacheDirError("graph_compiler_cache_dir", directory, "a writable directory")
    return directory


def activate(root):
    """Point TensorFlow's persistent XLA cache at ``root`` (an existing directory) for this
    process. Returns True when TensorFlow writes there, else False after an
    :class:`XlaCacheWarning` saying why and what to do. Compiles nothing (see
    :func:`_flags_read_now`)."""
    root = os.path.abspath(root)
    with _LOCK:
        if "root" in _ACTIVE:
            if _ACTIVE["root"] == root:
                return True
            warnings.warn(f"graph_compiler_cache_dir: this process already caches XLA "
                          f"executables in {_ACTIVE['root']}; TensorFlow takes one persistent "
                          f"cache directory per process, so {root} is not used",
                          XlaCacheWarning, stacklevel=3)
            return False
        if "too_late" in _ACTIVE:  # TensorFlow reads the flag once per process
            warnings.warn(_too_late(root), XlaCacheWarning, stacklevel=3)
            return False
        given = os.environ.get("TF_XLA_FLAGS")
        flags = given or ""
        named = flag_directory(flags)
        if named is not None and os.path.abspath(named) != root:
            warnings.warn(f"graph_compiler_cache_dir: TF_XLA_FLAGS already names the XLA "
                          f"persistent cache {named}; the XLA backend does not override it and "
                          f"does not cache in {root}", XlaCacheWarning, stacklevel=3)
            _ACTIVE["root"] = os.path.abspath(named)
            return False
        if named is None and not persistent_cache_supported():
            warnings.warn(_unsupported(root), XlaCacheWarning, stacklevel=3)
            return False
        if named is not None:
            # The user exported it (before Python started, as docs/xla.md says).
            _ACTIVE["root"] = root
            return True
        os.environ["TF_XLA_FLAGS"] = f"{flags} {FLAG}={root}".strip()
        if not _flags_read_now(flags):
            if given is None:  # the flag had no effect: the environment stays as it was
                del os.environ["TF_XLA_FLAGS"]
            else:
                os.environ["TF_XLA_FLAGS"] = given
            _ACTIVE["too_late"] = True
            warnings.warn(_too_late(root), XlaCacheWarning, stacklevel=3)
            return False
        _ACTIVE["root"] = root
        return True


_FOLDING_FLAG = "--tf_xla_disable_constant_folding"


def _flag_value(flags, name):
    """The boolean value the last ``name`` / ``name=...`` of ``flags`` gives (False when
    absent), as TensorFlow's flag parser reads it."""
    value = False
    for token in flags.split():
        if token == name:
            value = True
        elif token.startswith(name + "="):
            value = token[len(name) + 1:].lower() in ("1", "true")
    return value


def _flags_read_now(flags):
    """Whether TensorFlow parses ``TF_XLA_FLAGS`` now (as this process set it), rather than
    having parsed it before: TensorFlow parses all its flags once, the first time one is read.

    A marker tells which: the opposite of the user's ``--tf_xla_disable_constant_folding`` is
    appended to ``TF_XLA_FLAGS`` and the flag read back (reading parses the flags if nothing
    did yet). Reading the marker means the flags were parsed just now, the cache directory with
    them; then the flag's parsed value is set back to the user's and the marker leaves the
    environment. Nothing is compiled: a process whose cache is warm compiles nothing at all."""
    from npu_adapter import tf_compat

    wanted = _flag_value(flags, _FOLDING_FLAG)
    marked = os.environ["TF_XLA_FLAGS"]
    os.environ["TF_XLA_FLAGS"] = f"{marked} {_FOLDING_FLAG}={str(not wanted).lower()}"
    try:
        now = tf_compat.xla_constant_folding_disabled() != wanted
        if now:
            tf_compat.set_xla_constant_folding_disabled(wanted)
    finally:
        os.environ["TF_XLA_FLAGS"] = marked
    return now


MIN_PERSISTENT_CACHE_VERSION = (2, 16)
"""TensorFlow 2.15's XLA cannot serialize CPU executables: with the persistent cache on, every
compilation fails ("TargetRegistry::lookupTarget failed ... triple "unknown""); 2.21 is tested."""


def persistent_cache_supported():
    """True when this TensorFlow can keep XLA CPU executables in a persistent cache."""
    import tensorflow as tf

    parts = tf.__version__.split(".")
    try:
        version = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return True  # a development build: assume a current one
    return version >= MIN_PERSISTENT_CACHE_VERSION


def _unsupported(root):
    import tensorflow as tf

    return (f"graph_compiler_cache_dir: TensorFlow {tf.__version__} cannot keep XLA CPU "
            f"executables in a persistent cache (it fails every compilation when one is named), "
            f"so {root} is not used and XLA compiles in every process; TensorFlow "
            f"{'.'.join(map(str, MIN_PERSISTENT_CACHE_VERSION))} or newer caches them")


def _too_late(root):
    return (f"graph_compiler_cache_dir: TensorFlow read TF_XLA_FLAGS before the XLA backend "
            f"could name the persistent cache {root} (it does so once per process, when the "
            f"first session or eager operation starts); XLA executables are not cached in this "
            f"process. Set the option before running anything in TensorFlow, or export "
            f"TF_XLA_FLAGS='{FLAG}={root}' before starting Python")


def _file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def framing_problem(path):
    """Why the file at ``path`` is not a complete serialized cache entry (None when it is).

    The entry is a protobuf message: parsed as an empty message (protobuf keeps every field as
    an unknown field), a truncated field fails the parse, and the key and the executable must be
    among the top-level fields. A file cut exactly between two fields before the executable
    shows as the missing field."""
    from google.protobuf import empty_pb2, message, unknown_fields

    with open(path, "rb") as f:
        data = f.read()
    entry = empty_pb2.Empty()
    try:
        entry.ParseFromString(data)
    except message.DecodeError as exc:
        return f"not a complete protobuf message ({len(data)} bytes): {exc}"
    fields = {field.field_number for field in unknown_fields.UnknownFieldSet(entry)}
    missing = [n for n in _REQUIRED_FIELDS if n not in fields]
    if missing:
        return f"field(s) {missing} missing"
    return None


class PersistentCache:
    """Our bookkeeping of TensorFlow's persistent XLA cache in one directory.

    Args:
        directory: ``graph_compiler_cache_dir`` (must exist and be writable).
        max_bytes: size bound of the entries (None or 0: unbounded).

    Attributes:
        root: ``<directory>/npu_adapter_xla``, where TensorFlow writes.
        created, read, evicted, corrupt: entries that appeared, were read (loaded by
            TensorFlow), were removed to fit ``max_bytes``, were removed as corrupted — since
            this object was made.
    """

    def __init__(self, directory, max_bytes=None):
        directory = check_cache_dir(directory)
        self.directory = directory
        self.root = os.path.join(directory, SUBDIR)
        os.makedirs(self.root, exist_ok=True)
        self.max_bytes = int(max_bytes) if max_bytes else None
        self.created = self.read = self.evicted = self.corrupt = 0
        self._lock = threading.Lock()
        self._known = None  # entry names seen at the last sync

    # ---------------------------------------------------------------- entries
    def entry_names(self):
        """Names of TensorFlow's entries, sorted."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return []
        return sorted(n for n in names if n.endswith(_ENTRY_SUFFIX) and not n.startswith("."))

    def total_bytes(self):
        """Total size of the entries."""
        total = 0
        for name in self.entry_names():
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(self.root, name))
        return total

    def _record_path(self, name):
        return os.path.join(self.root, name + _RECORD_SUFFIX)

    def _load_record(self, name):
        try:
            with open(self._record_path(name), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def _write_record(self, name, record):
        write_atomic(self._record_path(name), json.dumps(record, sort_keys=True),
                     make_dirs=False)

    def _remove(self, name):
        for path in (os.path.join(self.root, name), self._record_path(name)):
            with contextlib.suppress(OSError):
                os.unlink(path)

    # ---------------------------------------------------------------- sync
    def sync(self):
        """Check, record and bound the entries; returns ``(created, read)`` since the last sync.

        New or changed entries are verified (record size and checksum, or the protobuf framing
        when there is no record) and corrupted ones removed with an :class:`XlaCacheWarning`;
        entries read since the last sync get their last-use time; then the least recently used
        are evicted until the total fits ``max_bytes``."""
        with self._lock:
            names = self.entry_names()
            first = self._known is None
            created = read = 0
            alive = []
            for name in names:
                path = os.path.join(self.root, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                record = self._load_record(name)
                if record is None or record.get("size") != st.st_size or \
                        record.get("mtime_ns") != st.st_mtime_ns:
                    record = self._check(name, path, st, record)
                    if record is None:
                        continue
                    if not first and name not in self._known:
                        created += 1
                elif st.st_atime_ns > st.st_mtime_ns:
                    # Read since we last set its access time back to its write time.
                    record["last_used"] = st.st_atime_ns / 1e9
                    read += 1
                    self._write_record(name, record)
                    self._reset_atime(path, st)
                alive.append((record.get("last_used", st.st_mtime), st.st_size, name))
            self._known = {name for _, _, name in alive}
            self.created += created
            self.read += read
            self._evict(alive)
            return created, read

    def _check(self, name, path, st, record):
        """Verify a new or changed entry; returns its new record, or None (removed)."""
        if record is not None and record.get("size") != st.st_size:
            problem = f"size {st.st_size} bytes, recorded {record.get('size')}"
        else:
            problem = framing_problem(path)
        if problem is not None:
            warnings.warn(f"XLA compile cache entry {path} is corrupted ({problem}); it is "
                          f"removed and TensorFlow compiles it again", XlaCacheWarning,
                          stacklevel=4)
            self._remove(name)
            self.corrupt += 1
            return None
        new = {"size": st.st_size, "sha256": _file_digest(path), "mtime_ns": st.st_mtime_ns,
               "last_used": max(st.st_mtime, st.st_atime)}
        self._write_record(name, new)
        self._reset_atime(path, st)
        return new

    @staticmethod
    def _reset_atime(path, st):
        # Access time back to the write time: the next read (TensorFlow loading the entry)
        # moves it forward again on file systems that track access times.
        with contextlib.suppress(OSError):
            os.utime(path, ns=(st.st_mtime_ns, st.st_mtime_ns))

    def _evict(self, alive):
        if not self.max_bytes:
            return
        total = sum(size for _, size, _ in alive)
        for _, size, name in sorted(alive):
            if total <= self.max_bytes:
                break
            self._remove(name)
            self._known.discard(name)
            total -= size
            self.evicted += 1
