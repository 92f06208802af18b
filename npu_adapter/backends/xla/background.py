"""Executables built off the user's runs: which signatures may, and the thread that does it.

TensorFlow compiles an ``_XlaMustCompile`` call when a run of the session first reaches it with
a new set of input shapes, and keeps the executable in that session's devices (each
``tf.compat.v1.Session`` has its own: a compile in another session, or through ``tf.function``
in eager mode, does not serve it). TensorFlow offers no public call that builds the executable
of a graph's call node without running it: ``experimental_get_compiler_ir`` stops at the HLO.
So the runtime builds an executable by *replaying* a run: the same fetches, a copy of the same
feeds, on the variant of the signature that runs the cluster compiled, in the same TensorFlow
session, on a thread of its own. Meanwhile the user's runs keep running on TensorFlow's kernels.

A replay runs the user's step a second time, so it is only done where nobody can tell:
:func:`replay_visible_op` finds the first op of a graph whose second run could be seen — one
that changes state kept from run to run (a variable's update, also through a ref input, a
queue's or an iterator's next element, a random generator's draw, a stateful Python function)
or writes somewhere (``Print``) —, scanning the bodies of calls and control flow; reading a
variable changes nothing. Signatures with such an op (training steps) compile in the
foreground, in the first run that uses the executable: replaying them would update their
state twice, and a stateless copy of a cluster (its variables passed as values) is another
function to XLA, whose executable the real call could not use.

:class:`BuildThread` runs the builds of one session, one at a time (on a shared CPU, builds side
by side would only slow each other), and ends with the session.
"""

import concurrent.futures
import threading

from npu_adapter.graph.types import called_functions, first_state_changing_op

__all__ = ["BuildThread", "replay_visible_op"]

# Registered as stateful, but a second run of them changes nothing and shows nothing: an
# assertion that held for the user's run holds for the replay of its feeds; a variable read
# again is not changed (an executable does not depend on a variable's value, only on its
# shape and type); calls and control flow are judged by the bodies they run, which are
# scanned too.
_INVISIBLE_AGAIN = frozenset({
    "Assert", "NoOp", "PartitionedCall", "StatefulPartitionedCall",
    "If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
    "VarHandleOp", "ReadVariableOp", "VarIsInitializedOp", "VariableV2", "Variable",
    "IsVariableInitialized",
})


def replay_visible_op(graph_def):
    """The first op type (in name order) of ``graph_def`` and the functions of its library
    whose second run could be seen (see the module docstring), or None when a run can be
    replayed unseen. An op TensorFlow does not know, or a call of a function the library does
    not hold, counts as visible: nothing is known about it."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    types = {node.op for node in graph_def.node}
    called = set()
    for nodes in [graph_def.node] + [f.node_def for f in functions.values()]:
        for node in nodes:
            types.add(node.op)
            called.update(called_functions(node))
    # A ref input is written through (Assign, ApplyMomentum: not registered stateful).
    return first_state_changing_op(types, functions, called, harmless=_INVISIBLE_AGAIN,
                                   ref_writes=True)


class BuildThread:
    """The background builds of one session: one thread, one build at a time, started on
    first use. :meth:`close` drops the builds not started and waits for the one under way (an
    XLA compilation cannot be interrupted; the session's TensorFlow session is closed first,
    so its replay ends as soon as the compilation does)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._executor = None
        self._pending = set()
        self._closed = False

    def submit(self, build):
        """Run ``build()`` on the build thread; False (nothing run) once closed."""
        with self._lock:
            if self._closed:
                return False
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="npu-adapter-xla-build")
            future = self._executor.submit(build)
            self._pending.add(future)
        future.add_done_callback(self._done)
        return True

    def _done(self, future):
        with self._lock:
            self._pending.discard(future)

    def wait(self, timeout=None):
        """Wait for the builds submitted so far; True when all ended, False after
        ``timeout`` seconds."""
        with self._lock:
            pending = list(self._pending)
        _, not_done = concurrent.futures.wait(pending, timeout)
        return not not_done

    @property
    def closed(self):
        return self._closed

    def close(self):
        """No more builds; wait for the one under way. Idempotent."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
