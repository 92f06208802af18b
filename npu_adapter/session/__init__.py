"""NpuSession and the hooks that make every TF1 session of the process one.

* :mod:`npu_adapter.session.core`: :class:`NpuSession` / :class:`NpuInteractiveSession`;
* :mod:`npu_adapter.session.shadow`: the private graph a session runs on (the user's graph is
  never modified);
* :mod:`npu_adapter.session.install`: :func:`install` / :func:`uninstall`.
"""

from npu_adapter.backends.runtime import LAZY_CACHE_SIZE
from npu_adapter.session.core import NpuInteractiveSession, NpuSession
from npu_adapter.session.install import install, is_installed, plain_session_class, uninstall
from npu_adapter.session.shadow import note_graph_changed


def is_npu_session(sess):
    """True when ``sess`` rewrites its runs (an NPU session with an ``NpuOptimizer`` entry)."""
    return bool(getattr(sess, "_npu_enabled", False))

__all__ = ["NpuSession", "NpuInteractiveSession", "install", "uninstall", "is_installed",
           "plain_session_class", "note_graph_changed", "is_npu_session", "LAZY_CACHE_SIZE"]
