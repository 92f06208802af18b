"""Direct signatures prepared in TensorFlow while their rewrite runs.

The first run of a signature in a TensorFlow session prunes the graph, runs Grappler and builds
the executors: on a LeNet training script about 15-20 ms per signature, all in C++. For a
signature that will run on the user's graph (:mod:`npu_adapter.session.direct`) that work does
not depend on the rewrite, so it is started in a thread while the rewrite runs: TensorFlow's
``MakeCallable`` (the C API behind ``Session._make_callable_from_options``) prepares the
signature's executors without the GIL and runs nothing, so it is safe for signatures with state.

TensorFlow keeps a callable's executors apart from those of ``Session.run``. A prepared signature
therefore keeps running through its callable, from its first run on, whenever the run passes no
``RunOptions`` or ``RunMetadata`` (a traced run goes through ``Session.run`` and builds its own
executors). Everything ``Session.run`` checks in Python (fetchable and feedable tensors, the dtype
conversion of fed values, the shape check) still happens: :class:`PreparedRuns` replaces only the
call into TensorFlow at the end (``BaseSession._do_run``), and errors get the same treatment
(``BaseSession._do_call``). A callable whose preparation failed is not used: the run goes through
``Session.run``, which reports the error as TensorFlow does.

The callables belong to one TensorFlow session: an idle direct session handed to the next
NpuSession on the graph (:mod:`npu_adapter.session.reuse`) carries its :class:`PreparedRuns`.
"""

import concurrent.futures
import os
import threading

import numpy as np
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.client import pywrap_tf_session as tf_session

__all__ = ["PreparedRuns", "in_background", "run_key"]


_WORKER = {"pool": None, "lock": threading.Lock()}
# Plans of runs kept per session (see PreparedRuns.find); more are kept by starting again.
_MAX_PLANS = 256
# How long a submission waits for the preparing thread to start on it (see in_background).
_HANDOFF_SECONDS = 0.005


def _forget_worker():
    """A forked child has no preparing thread (only the thread that forked survives a fork):
    it makes its own on first use instead of queueing work for a thread that does not exist."""
    _WORKER["pool"] = None
    _WORKER["lock"] = threading.Lock()


os.register_at_fork(after_in_child=_forget_worker)


def in_background(work):
    """Run ``work()`` on the process's preparing thread; returns its ``Future``.

    One long-lived thread (a ``ThreadPoolExecutor`` of one worker, made on first use; an exiting
    interpreter waits for its work, as for a thread that is not a daemon), not a thread per
    preparation: with oneDNN on (TensorFlow's default on x86), the first ``MakeCallable`` on a
    new thread costs about twice what it costs on a thread that made one before (LeNet
    training's two signatures: 75-88 ms on a new thread each time against 40-45 ms). The caller
    then waits (at most 5 ms) for the thread to start on ``work``: a waiting thread otherwise
    gets the GIL only at the caller's next switch interval, while the caller rewrites in Python
    (measured: the preparation started ~5 ms late, per signature)."""
    with _WORKER["lock"]:
        if _WORKER["pool"] is None:
            _WORKER["pool"] = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="npu-adapter-prepare")
        pool = _WORKER["pool"]
    started = threading.Event()

    def task():
        started.set()
        return work()

    future = pool.submit(task)
    started.wait(_HANDOFF_SECONDS)  # releases the GIL to the thread that starts it
    return future


def run_key(fetches, targets, feeds):
    """The key of a run: (fetched tensor names that are not fed, target op names, fed tensor
    names), each sorted. ``Session.run`` does not fetch a fed tensor: it returns the value fed."""
    feeds = tuple(sorted(set(feeds)))
    fed = set(feeds)
    return (tuple(sorted(set(fetches) - fed)), tuple(sorted(set(targets))), feeds)


def _owned(value):
    """``value`` as an array that owns its data. A callable's results may alias TensorFlow's
    buffers, a TF1 ref variable's among them (read through an ``Identity``), which a later run
    updates in place; ``Session.run`` hands back a copy of such a tensor, and so does this."""
    if isinstance(value, np.ndarray) and not value.flags.owndata:
        return value.copy()
    return value


class _Callable:
    __slots__ = ("handle", "order")

    def __init__(self, handle, key):
        self.handle = handle
        self.order = {name: k for k, name in enumerate(key[0])}  # fetch name -> output index


class PreparedRuns:
    """The signatures prepared as callables in one TensorFlow session (see the module
    docstring)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ready = {}      # run key -> Event set when its preparation ended
        self._callables = {}  # run key -> _Callable (absent: preparation failed or released)
        # The plans of runs found, by the identity of their fetched tensors, targets and fed
        # tensors (each plan holds them, so the identities stay theirs): a step's later runs
        # skip the names and the key.
        self._plans = {}

    def __contains__(self, key):
        with self._lock:
            return key in self._ready

    def claim(self, key):
        """True when ``key`` was not prepared or being prepared yet: the caller now prepares it
        (:meth:`prepare`)."""
        with self._lock:
            if key in self._ready:
                return False
            self._ready[key] = threading.Event()
            return True

    def prepare(self, session, key):
        """Hand TensorFlow ``session``'s graph (``ExtendSession``) and make the callable of
        ``key`` (claimed). A failure is kept quiet: the run goes through ``Session.run``, which
        reports it; the key is marked ready whatever happens (runs wait for it)."""
        handle = None
        try:
            fetches, targets, feeds = key
            options = config_pb2.CallableOptions()
            options.feed.extend(feeds)
            options.fetch.extend(fetches)
            options.target.extend(targets)
            session._extend_graph()
            buffer = tf_session.TF_NewBufferFromString(options.SerializeToString())
            try:
                handle = tf_session.TF_SessionMakeCallable(session._session, buffer)
            finally:
                tf_session.TF_DeleteBuffer(buffer)
        except Exception:  # reported by the run that needs it
            handle = None
        finally:
            with self._lock:
                if handle is not None:
                    self._callables[key] = _Callable(handle, key)
                self._ready[key].set()

    def release(self, session, key):
        """Free the callable of ``key`` (a signature that will not run on ``session``); the key
        may be claimed again."""
        with self._lock:
            event = self._ready.get(key)
        if event is None:
            return
        event.wait()
        with self._lock:
            found = self._callables.pop(key, None)
            # Claimable again: a variant of the signature may run here later (a gear).
            self._ready.pop(key, None)
            self._plans.clear()
        if found is not None and session._session is not None and not session._closed:
            tf_session.TF_SessionReleaseCallable(session._session, found.handle)

    def forget_plans(self):
        """Drop the plans of runs found (they hold the graph's tensors): before the callables
        are kept idle with their TensorFlow session, which must not keep the graph alive."""
        with self._lock:
            self._plans.clear()

    def prepared_count(self):
        """How many callables are ready."""
        with self._lock:
            return len(self._callables)

    def find(self, fetch_list, target_list, feed_dict):
        """The function that runs this ``BaseSession._do_run`` request through its callable
        (call it with the session, through ``_do_call``), or None when the run is not
        prepared. Waits for a preparation under way."""
        if not self._ready:
            return None  # nothing prepared in this session: no names to compute
        fed = [ref.deref() for ref in feed_dict]
        identity = (tuple(map(id, fetch_list)), tuple(map(id, target_list)), tuple(map(id, fed)))
        plan = self._plans.get(identity)
        if plan is None:
            plan = self._plan(fetch_list, target_list, fed)
            if plan is None:
                return None
            with self._lock:
                if len(self._plans) >= _MAX_PLANS:
                    self._plans.clear()
                self._plans[identity] = plan
        _, handle, arg_order, positions = plan
        values = list(feed_dict.values())
        args = [values[k] for k in arg_order]

        def run(session):
            session._extend_graph()  # as Session.run's own call does
            results = tf_session.TF_SessionRunCallable(session._session, handle, args, None)
            return [_owned(results[k]) for k in positions]

        return run

    def _plan(self, fetch_list, target_list, fed):
        """``(the run's objects, callable handle, feed order, output positions)`` of a
        prepared run, or None."""
        fetch_names = [t.name for t in fetch_list]
        feed_names = [t.name for t in fed]
        key = run_key(fetch_names, [op.name for op in target_list], feed_names)
        with self._lock:
            event = self._ready.get(key)
        if event is None:
            return None
        event.wait()
        with self._lock:
            found = self._callables.get(key)
        if found is None or len(found.order) != len(fetch_names):
            return None
        feed_at = {name: k for k, name in enumerate(feed_names)}
        objects = (tuple(fetch_list), tuple(target_list), tuple(fed))
        return (objects, found.handle, [feed_at[name] for name in key[2]],
                [found.order[name] for name in fetch_names])
