"""NpuSession and the hooks that make every TF1 session of the process one.

* :mod:`npu_adapter.session.core`: :class:`NpuSession` / :class:`NpuInteractiveSession`;
* :mod:`npu_adapter.session.shadow`: the private graph a session runs on (the user's graph is
  never modified);
* :mod:`npu_adapter.session.install`: :func:`install` / :func:`uninstall`.
"""

import contextlib
import gc
import importlib

from npu_adapter.backends.runtime import LAZY_CACHE_SIZE
from npu_adapter.session.core import NpuInteractiveSession, NpuSession
from npu_adapter.session.install import install, is_installed, plain_session_class, uninstall
from npu_adapter.session.shadow import note_graph_changed


def is_npu_session(sess):
    """True when ``sess`` rewrites its runs (an NPU session with an ``NpuOptimizer`` entry)."""
    return bool(getattr(sess, "_npu_enabled", False))

# What every rewriting session loads on first use. Importing it with this package (a user script
# imports npu_bridge at its top) keeps ~40 ms of module loading, and the full garbage collection
# of TensorFlow's objects that the allocation tends to start (~120 ms), out of the first run.
_SESSION_MODULES = (
    "npu_adapter.api", "npu_adapter.passes", "npu_adapter.backends.cpu.runtime",
    "npu_adapter.pipeline.dump_instruments", "npu_adapter.pipeline.rewrite_cache",
    "npu_adapter.datadump.session", "npu_adapter.profiling.profiler",
    "npu_adapter.system_options", "npu_adapter.distributed.server", "npu_adapter.config",
    "npu_adapter.precision.customize", "npu_adapter.precision.mixlist",
)
for _name in _SESSION_MODULES:
    importlib.import_module(_name)
del _name
with contextlib.suppress(Exception):  # a broken install is reported by the first rewrite
    importlib.import_module("npu_adapter.op_support").default_op_support()
# One full collection now, while the script starts. After ``import tensorflow`` a process holds
# ~270k long-lived objects and a full collection walks them all (~120 ms here); CPython starts
# one once enough objects have survived younger collections since the last, and whether the
# objects a first run keeps (the rewrite's result, the session graph's ops) tip it depends on
# what the script allocated before. Without this, a frozen LeNet's first run paid that
# collection in one environment and not in another (0.21 s against 0.11 s,
# bench/PERFORMANCE.md). After it, the first sessions' survivors are far from the next one.
gc.collect()

__all__ = ["NpuSession", "NpuInteractiveSession", "install", "uninstall", "is_installed",
           "plain_session_class", "note_graph_changed", "is_npu_session", "LAZY_CACHE_SIZE"]
