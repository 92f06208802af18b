"""TensorFlow sessions kept for the next NPU session on the same graph (a session per request).

Online-inference scripts written for Ascend often open a session per request or per image, run
the model once and close it. Every new TensorFlow session prepares each signature again at its
first run (Grappler, placement, executors): for a frozen model that is most of what such a
session costs.

An NPU session runs on a TensorFlow session of its execution graph
(:mod:`npu_adapter.session.execution_graph`). When it closes and the execution graph holds no op
that keeps state from one run to the next (variables, queues, iterators, tables, random
generators, session handles: every op TensorFlow registers as stateful but those listed in
``_NO_STATE_ACROSS_RUNS``), that TensorFlow session holds nothing a later run could tell apart
from a fresh session's: its executors and folded constants derive from the graph alone. It is
then kept idle, one per target and ``ConfigProto``, and the next NPU session on the graph with
the same options runs on it, its signatures prepared. ``close`` still ends the user's session
(a later ``run`` raises as TensorFlow's does); idle sessions are closed with the graph
(``tf.compat.v1.reset_default_graph()`` for the default graph).

Not kept: with ``npu_adapter_reuse_sessions`` false; when the execution graph has a stateful op;
after the NPU session made a callable or started a partial run (TensorFlow keeps those in the
session); for a dumping session (its graphs call its own dump), a remote target, or a backend
whose runtime keeps per-session records (``Backend.reuses_tf_sessions`` false).
"""

import contextlib
import threading
import weakref

from npu_adapter.graph.types import first_state_changing_op

__all__ = ["SessionPool", "stateful_op_type"]

# Registered as stateful (so Grappler neither folds nor prunes them), but nothing survives a run:
# calls and control flow are judged by the bodies they run, which are scanned too.
_NO_STATE_ACROSS_RUNS = frozenset({
    "Assert", "Print", "PrintV2", "NoOp", "PartitionedCall", "StatefulPartitionedCall",
    "If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
})


def stateful_op_type(op_types, function_names=(), called=()):
    """The first of ``op_types`` (sorted) that keeps state across runs, or None (see
    :func:`~npu_adapter.graph.types.first_state_changing_op`: a call is judged by its body, an
    unknown type or an unscanned call counts as stateful)."""
    return first_state_changing_op(op_types, function_names, called,
                                   harmless=_NO_STATE_ACROSS_RUNS)


def _close_all(idle):
    """Finaliser of an execution graph: close its idle sessions."""
    sessions = list(idle.values())
    idle.clear()
    for session in sessions:
        with contextlib.suppress(Exception):  # a finaliser must not raise
            session.close()


class SessionPool:
    """The idle TensorFlow sessions of one execution graph, by (target, serialized config).

    Args:
        owner: the execution graph; its idle sessions are closed when it is collected.
    """

    def __init__(self, owner):
        self._lock = threading.Lock()
        self._idle = {}
        self.adopted = 0  # how many NPU sessions took an idle session
        finaliser = weakref.finalize(owner, _close_all, self._idle)
        finaliser.atexit = False  # at exit the process frees them; TensorFlow may be gone

    def take(self, key):
        """The idle session kept under ``key`` (no longer idle), or None."""
        with self._lock:
            session = self._idle.pop(key, None)
            self.adopted += session is not None
            return session

    def give(self, key, session):
        """Keep ``session`` idle under ``key``; when one is kept there already, close
        ``session`` instead (one idle session per key bounds the memory kept)."""
        with self._lock:
            if key not in self._idle:
                self._idle[key] = session
                return
        session.close()

    def idle_count(self):
        """How many sessions are idle."""
        with self._lock:
            return len(self._idle)
