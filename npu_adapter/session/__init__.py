"""NPU sessions: TF1 sessions that run their signatures rewritten for a backend.

* :mod:`npu_adapter.session.install`: :func:`install` / :func:`uninstall` (every session of the
  process), through :mod:`npu_adapter.session.hooks`;
* :mod:`npu_adapter.session.classes`: :class:`NpuSession`, :class:`NpuInteractiveSession`,
  :class:`PlainSession`;
* :mod:`npu_adapter.session.runner`: what an NPU session does per run, on the execution graph of
  :mod:`npu_adapter.session.execution_graph`.
"""

from npu_adapter.backends.runtime import LAZY_CACHE_SIZE
from npu_adapter.session.classes import NpuInteractiveSession, NpuSession, PlainSession
from npu_adapter.session.execution_graph import note_graph_changed
from npu_adapter.session.hooks import runner_of
from npu_adapter.session.install import install, is_installed, plain_session_class, uninstall


def is_npu_session(sess):
    """True when ``sess`` rewrites its runs (its config names ``NpuOptimizer``)."""
    return runner_of(sess) is not None


def graph_rewrites(graph):
    """The :class:`~npu_adapter.pipeline.result.RewriteResult` of every run signature the NPU
    sessions on ``graph`` (a ``tf.Graph``) have run, those TensorFlow's own modules open
    included (``MonitoredTrainingSession``, ``tf.estimator``, the Keras backend), in the order
    they were first run. Their graphs hold large constants without their data."""
    from npu_adapter.session.execution_graph import ExecutionGraph
    from npu_adapter.session.signatures import Signature

    execution_graph = ExecutionGraph.existing(graph)
    if execution_graph is None:
        return []
    with execution_graph.lock:
        signatures = list(execution_graph.signatures.values())
    return [s.result for s in signatures if isinstance(s, Signature) and s.result is not None]


__all__ = ["NpuSession", "NpuInteractiveSession", "PlainSession", "install", "uninstall",
           "is_installed", "plain_session_class", "note_graph_changed", "is_npu_session",
           "runner_of", "graph_rewrites", "LAZY_CACHE_SIZE"]
