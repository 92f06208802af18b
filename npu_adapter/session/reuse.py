"""TensorFlow sessions kept for the next NpuSession on the same graph (a session per request).

Online-inference scripts written for Ascend often open a session per request or per image,
run the model once and close it. Every new ``tf.compat.v1.Session`` prepares each signature
again at its first run: Grappler (function inlining, constant folding), placement, executors.
For a frozen model that is most of what such a session costs, and a rewritten signature costs
more than the plain one (Grappler inlines and folds the cluster function's body too).

When an NpuSession closes and the shadow graph it ran holds no op that keeps state from one
run to the next (variables, queues, iterators, tables, random generators, session handles:
every op TensorFlow registers as stateful, but for the few listed in ``_NO_STATE_ACROSS_RUNS``),
TensorFlow's session holds nothing a later run could tell apart from a fresh session's: its
executors and folded constants are derived from the graph alone. Such a session is kept idle on
the shadow, one per target and ``ConfigProto``, and the next NpuSession on the same graph with
the same options adopts it with its signatures ready. Its values are those of a fresh session;
``close`` still ends the user's session (a later ``run`` raises as TensorFlow's does); the idle
session is released with the graph (``tf.compat.v1.reset_default_graph()`` releases the
default graph's).

Not kept: a session with ``npu_adapter_reuse_sessions`` false; a session whose graph has a
stateful op when it closes (the graph only grows, so its ops are all that could have run); a
session that made a callable or started a partial run (TensorFlow keeps those in the session
until it closes); a dumping session (its graphs call its own dump); a remote target; sessions of
a backend whose runtime keeps per-session records of what TensorFlow's session holds
(``Backend.reuses_tf_sessions``).
"""

import contextlib
import threading
import weakref

from tensorflow.python.client import pywrap_tf_session as tf_session

from npu_adapter.graph.types import called_functions, may_reference_functions, op_def_for

__all__ = ["SessionReuse", "closed_handle", "release_handle", "stateful_op_type"]

# Registered as stateful (so Grappler neither folds nor prunes them), but nothing survives a run:
# the call and control-flow ops are judged by their bodies, which the scan reads too.
_NO_STATE_ACROSS_RUNS = frozenset({
    "Assert", "Print", "PrintV2", "NoOp", "PartitionedCall", "StatefulPartitionedCall",
    "If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
})


def stateful_op_type(op_types, function_names=(), called=()):
    """The first of ``op_types`` (sorted) that keeps state across runs, or None.

    A type that names a function (``function_names``) is a call, judged by its body; a type
    TensorFlow does not know, or a call of a function whose body was not scanned (``called``
    outside ``function_names``), counts as stateful: nothing is known about it."""
    unknown = sorted(set(called) - set(function_names))
    if unknown:
        return unknown[0]
    for op_type in sorted(op_types):
        if op_type in _NO_STATE_ACROSS_RUNS or op_type in function_names:
            continue
        op_def = op_def_for(op_type)
        if op_def is None or op_def.is_stateful:
            return op_type
    return None


def closed_handle(graph, target, config):
    """A new TensorFlow session handle on ``graph``, closed: what a session that handed its own
    handle to the idle ones keeps, so every later call behaves as on TensorFlow's closed
    session (``run`` raises, ``list_devices`` reports the session closed) instead of reaching
    TensorFlow with no session at all. Opening one costs ~0.1 ms."""
    opts = tf_session.TF_NewSessionOptions(target=target, config=config)
    try:
        with graph._c_graph.get() as c_graph:  # as TensorFlow's BaseSession.__init__ does
            handle = tf_session.TF_NewSessionRef(c_graph, opts)
    finally:
        tf_session.TF_DeleteSessionOptions(opts)
    tf_session.TF_CloseSession(handle)
    return handle


def release_handle(handle, closed=False):
    """Close (unless ``closed``: TensorFlow refuses to close a session twice) and delete a
    TensorFlow session's C handle."""
    try:
        if not closed:
            tf_session.TF_CloseSession(handle)
    finally:
        tf_session.TF_DeleteSession(handle)


def _release_all(*pools):
    """Finaliser of a shadow: release its idle sessions (``pools`` are the dicts, not the
    pool objects)."""
    for idle in pools:
        handles = [handle for handle, _ in idle.values()]
        idle.clear()
        for handle in handles:
            with contextlib.suppress(Exception):  # a finaliser must not raise
                release_handle(handle)


class SessionReuse:
    """The idle TensorFlow sessions of one shadow graph (see the module docstring).

    Args:
        owner: the shadow graph; the idle sessions are released when it is collected.
    """

    def __init__(self, owner):
        self._lock = threading.Lock()
        # Idle C session handles per graph they run ("shadow", or the user's graph: "user",
        # session/direct.py), by (target, serialized ConfigProto).
        self._idle = {"shadow": {}, "user": {}}
        self._adopted = {"shadow": 0, "user": 0}
        self._ops_seen = 0            # shadow ops scanned so far (a graph only grows)
        self._function_names = set()  # shadow functions scanned so far
        self._op_types = set()
        self._called = set()
        self._stateful = None         # the first stateful op type found, for good
        finaliser = weakref.finalize(owner, _release_all, *self._idle.values())
        finaliser.atexit = False      # at exit the process frees them; TensorFlow may be gone

    def stateful_op(self, graph, functions):
        """The op type of ``graph`` (the shadow) or of its ``functions`` (name → FunctionDef)
        that keeps state across runs, or None. Scans only what was added since the last call."""
        with self._lock:
            if self._stateful is not None:
                return self._stateful
            ops = graph.get_operations()
            for op in ops[self._ops_seen:]:
                self._op_types.add(op.type)
                if may_reference_functions(op.type):  # a Const's node_def copies its weights
                    self._called.update(called_functions(op.node_def))
            self._ops_seen = len(ops)
            for name, fdef in list(functions.items()):
                if name not in self._function_names:
                    self._function_names.add(name)
                    for node in fdef.node_def:
                        self._op_types.add(node.op)
                        if may_reference_functions(node.op):
                            self._called.update(called_functions(node))
            self._stateful = stateful_op_type(self._op_types, self._function_names,
                                              self._called)
            return self._stateful

    @property
    def adopted(self):
        """How many sessions took an idle session of the shadow graph."""
        return self._adopted["shadow"]

    @property
    def adopted_direct(self):
        """How many sessions took an idle session of the user's graph."""
        return self._adopted["user"]

    def take(self, key, graph="shadow"):
        """``(handle, companion)`` of the idle session of ``graph`` (``"shadow"`` or
        ``"user"``) kept under ``key`` (it is no longer idle), or None. A session of the user's
        graph only ever ran signatures that keep no state (session/direct.py)."""
        with self._lock:
            entry = self._idle[graph].pop(key, None)
            self._adopted[graph] += entry is not None
            return entry

    def give(self, key, handle, graph="shadow", companion=None):
        """Keep ``handle`` (a session of ``graph``) idle under ``key``, with ``companion`` (what
        the session prepared in it, e.g. the direct session's
        :class:`~npu_adapter.session.prepared_runs.PreparedRuns`); when one is kept there
        already, release ``handle`` instead (one idle session per key bounds the memory
        kept)."""
        with self._lock:
            idle = self._idle[graph]
            if key not in idle:
                idle[key] = (handle, companion)
                return
        release_handle(handle)

    def idle_count(self, graph=None):
        """How many sessions are idle: of the shadow graph (``graph="shadow"``), of the user's
        graph (``"user"``), or both (None)."""
        with self._lock:
            counts = {name: len(idle) for name, idle in self._idle.items()}
        return counts[graph] if graph is not None else sum(counts.values())
