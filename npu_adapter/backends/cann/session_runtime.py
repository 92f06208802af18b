"""The ``cann`` backend's per-session runtime, on the common backend runtime interface.

A session makes one runtime per backend (``Backend.create_runtime``). The CANN models
themselves belong to the process-wide :class:`~npu_adapter.backends.cann.runtime.CannRuntime`
of the session's options (pyACL state is per process; sessions with equal options share their
models). This class holds that runtime for the session: it takes a reference when created and
gives it back on :meth:`close` (the last session unloads the models), and reports the CANN
compile and cache counters and a status per cluster in the session's statistics.

The gear and ``lazy_recompile`` variants of the common runtime work unchanged: the lowered
cluster calls ``<cluster>_cann`` (gear copies ``<cluster>_cann_gear_<g>``), all served by the
same multi-gear model.
"""

from npu_adapter.backends.cann.runtime import runtime_for, runtime_options_from_config
from npu_adapter.backends.runtime import BackendRuntime

__all__ = ["CannBackendRuntime"]


class CannBackendRuntime(BackendRuntime):
    """One session's view of the CANN runtime serving its options."""

    def __init__(self, backend, config):
        super().__init__(backend, config)
        self.cann = runtime_for(runtime_options_from_config(config))
        self.cann.acquire()
        self._closed = False

    def stats(self):
        snap = super().stats()
        cann = self.cann.stats()
        snap.compiles = cann.compiles
        snap.cache_hits = cann.cache_hits
        snap.cache_misses = cann.cache_misses
        for name, status in cann.clusters.items():
            if name not in snap.clusters:
                continue
            cluster = snap.clusters[name]
            cluster.compiles = status["compiles"]
            cluster.cache_hits = status["cache_hits"]
            if status["status"] == "failed":
                cluster.status, cluster.reason = "pending", status["last_error"] or ""
            else:
                cluster.status = "compiled" if status["executables"] else "pending"
        return snap

    def close(self):
        if not self._closed:
            self._closed = True
            self.cann.release()
