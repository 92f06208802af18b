"""Run-time half of the ``xla`` backend: executables per static shape, and the persistent cache.

TensorFlow compiles an ``_XlaMustCompile`` call the first time it runs with a given set of input
shapes, keeps the executable for the session's lifetime and reuses it for every later run with
the same shapes. The runtime mirrors that bookkeeping per session so the statistics say what was
compiled: a compiled cluster's executable is keyed by its gear (one executable per gear, see
:mod:`~npu_adapter.backends.xla.lowering`) or, without gears, by the shapes of the run's fed
tensors (a new combination counts as one compile of each such cluster: an upper bound when a
cluster does not see every feed). In the steady state — the same shapes again — nothing is
compiled.

With ``graph_compiler_cache_dir`` the runtime also points TensorFlow's persistent XLA cache at
``<dir>/npu_adapter_xla`` when the session is created (:mod:`.persistent_cache`), checks its
entries before TensorFlow reads them, and counts entries written (compiled in a process) and
read (loaded instead of compiling): :meth:`XlaRuntime.cache_stats`.
"""

from npu_adapter.backends.runtime import BackendRuntime, Program
from npu_adapter.vocabulary import (
    XLA_DETAIL_ATTR,
    XLA_STATUS_ATTR,
    XLA_STATUS_COMPILED,
    XLA_STATUS_FALLBACK,
)

__all__ = ["XlaProgram", "XlaRuntime"]


def _compile_status(result):
    """Cluster node name → (status, detail) from the lowered graph's cluster nodes."""
    found = {}
    for node in result.graph_def.node:
        if XLA_STATUS_ATTR in node.attr:
            detail = node.attr[XLA_DETAIL_ATTR].s.decode() if XLA_DETAIL_ATTR in node.attr \
                else ""
            found[node.name] = (node.attr[XLA_STATUS_ATTR].s.decode(), detail)
    return found


class XlaProgram(Program):
    """A signature's program: gear and lazy selection as for the CPU reference, plus the
    executable bookkeeping of its compiled clusters."""

    def __init__(self, runtime, result, feeds, compiled):
        super().__init__(runtime, result, feeds)
        self.compiled = tuple(compiled)  # names of the XLA-compiled cluster nodes
        self._gear_index = {c.name: k for k, c in enumerate(self.gear_clusters)}

    @property
    def needs_shapes(self):
        return bool(self.compiled) or super().needs_shapes

    def select(self, fed_shapes):
        selection = super().select(fed_shapes)
        shapes = tuple((name, tuple(fed_shapes[name])) for name in self.feeds
                       if name in fed_shapes)
        self.runtime.note_executables(
            (name, self._executable_key(name, selection, shapes)) for name in self.compiled)
        return selection

    def _executable_key(self, name, selection, shapes):
        index = self._gear_index.get(name)
        if index is not None and index < len(selection.gears) and \
                selection.gears[index] is not None:
            return ("gear", selection.gears[index])
        return ("shapes", shapes)


class XlaRuntime(BackendRuntime):
    """Per-session runtime of the ``xla`` backend (statuses ``compiled``, ``pending`` or
    ``fallback``; ``compiles`` per cluster; the persistent cache)."""

    def __init__(self, backend, config):
        super().__init__(backend, config)
        self._executables = {}  # cluster name -> set of executable keys
        self.cache = None
        self.cache_active = False
        directory = getattr(config, "graph_compiler_cache_dir", None)
        if directory:
            from npu_adapter.backends.xla.persistent_cache import PersistentCache, activate

            max_mb = getattr(config, "npu_adapter_compile_cache_max_mb", 0) or 0
            self.cache = PersistentCache(directory, max_bytes=int(max_mb) * 1024 * 1024)
            # Before TensorFlow may read an entry: corrupted ones are removed now.
            self.cache.sync()
            self.cache_active = activate(self.cache.root)

    def prepare(self, result, feeds=()):
        statuses = _compile_status(result)
        compiled = [name for name, (status, _) in statuses.items()
                    if status == XLA_STATUS_COMPILED]
        with self.lock:
            for info in result.clusters:
                self.stats_record.cluster(info.name)
            for name, (status, detail) in statuses.items():
                stats = self.stats_record.cluster(name)
                if status == XLA_STATUS_FALLBACK:
                    if stats.status != "fallback":
                        self.stats_record.fallbacks += 1
                    stats.status, stats.reason = "fallback", detail
                elif name not in self._executables:
                    stats.status = "pending"
        return XlaProgram(self, result, feeds, compiled)

    def note_executables(self, keyed):
        """Record the executables a run uses (``(cluster name, key)`` pairs); a key not seen
        before in this session is a compilation."""
        with self.lock:
            for name, key in keyed:
                seen = self._executables.setdefault(name, set())
                if key in seen:
                    continue
                seen.add(key)
                stats = self.stats_record.cluster(name)
                stats.status = "compiled"
                stats.compiles += 1
                self.stats_record.compiles += 1

    def cache_stats(self):
        """The persistent cache's counters since this session started: ``active`` (TensorFlow
        writes there), ``directory``, ``written`` (executables compiled and stored), ``read``
        (loaded instead of compiled), ``evicted``, ``corrupt``, ``bytes``; None without
        ``graph_compiler_cache_dir``."""
        if self.cache is None:
            return None
        self.cache.sync()
        return {"active": self.cache_active, "directory": self.cache.root,
                "written": self.cache.created, "read": self.cache.read,
                "evicted": self.cache.evicted, "corrupt": self.cache.corrupt,
                "bytes": self.cache.total_bytes()}

    def stats(self):
        if self.cache is not None:
            counts = self.cache_stats()
            with self.lock:
                self.stats_record.cache_misses = counts["written"]
                self.stats_record.cache_hits = counts["read"]
        return super().stats()

    def close(self):
        if self.cache is not None:
            self.cache.sync()
