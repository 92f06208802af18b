"""``NpuSession``: a ``tf.compat.v1.Session`` that runs each signature rewritten for a backend.

What the original does with GraphOptimizationPasses inside TensorFlow's runtime, we do in Python
around ``Session.run``:

1. The session's ``ConfigProto`` is parsed into an :class:`~npu_adapter.config.NpuConfig` when
   the session is created (bad options raise ``NpuConfigError`` before any session exists).
   Without an ``NpuOptimizer`` entry, or with ``use_off_line`` false, the session is exactly
   TensorFlow's.
2. Otherwise the TensorFlow session runs on the user graph's shadow graph
   (:mod:`npu_adapter.session.shadow`); the user's graph is never modified, and ``sess.graph``
   is still the user's graph.
3. Per run signature (fetched tensors, target ops, fed tensors) the client graph is rewritten once
   (:func:`npu_adapter.rewrite`) and installed in the shadow; every session on the same graph
   and options shares it. A backend whose clusters are plain TensorFlow function calls (the
   CPU reference) has them installed inlined, as TensorFlow's first run would inline them
   (:mod:`npu_adapter.graph.inline`), under the user's node names. A signature whose installed
   form is then the user's own nodes is not installed: it runs on a TensorFlow session of the
   user's graph (:mod:`npu_adapter.session.direct`; one with state while the session's state
   lives there, which moves to the shadow when a signature must run there), through a callable
   TensorFlow prepared while the signature was rewritten
   (:mod:`npu_adapter.session.prepared_runs`). With
   ``iterations_per_loop`` > 1 a run of the loop target runs N steps in one TensorFlow loop
   (:mod:`npu_adapter.session.loop`).
4. ``run`` maps the fetches and feeds to the shadow graph, asks the backend's runtime which
   variant of the signature this run executes (gears called directly, lazy_recompile
   specialisations; :mod:`npu_adapter.backends.runtime`), runs it and rebuilds the user's fetch
   structure.
5. With the dump options on, the session's installed graphs report every cluster op to its
   :class:`~npu_adapter.datadump.DumpSession` (such a session keeps its signatures to itself);
   with profiling on (options, ``PROFILING_MODE`` or a started ``Profiler``), each run is traced
   and handed to its :class:`~npu_adapter.profiling.SessionProfiler`. A run of ``NPUInit`` makes
   its session's dump and profiling options those of the process until ``NPUShutdown``
   (:mod:`npu_adapter.system_options`).
6. ``close`` keeps TensorFlow's session for the next NpuSession on the graph when nothing in it
   keeps state between runs (:mod:`npu_adapter.session.reuse`): a session per request then
   skips TensorFlow's preparation of the graph.
"""

import contextlib
import threading

import numpy as np
import tensorflow as tf
from tensorflow.python.client import pywrap_tf_session as tf_session

from npu_adapter import distributed
from npu_adapter.collector import collector_paused
from npu_adapter.errors import RewriteError
from npu_adapter.graph.inline import has_ref_variables, inline_calls
from npu_adapter.precision.accelerate import PHASE_LOW, low_precision_config
from npu_adapter.session.direct import (
    keeps_no_state,
    movable_variables,
    resolves_to_user_graph,
)
from npu_adapter.session.loop import install_loop, loop_target
from npu_adapter.session.prepared_runs import PreparedRuns, in_background, run_key
from npu_adapter.session.reuse import closed_handle, release_handle
from npu_adapter.session.shadow import ShadowGraph
from npu_adapter.vocabulary import NPU_SYSTEM_OP_ATTR

__all__ = ["NpuSession", "NpuInteractiveSession", "PlainSession", "ORIGINAL_CLASSES"]

_tf1 = tf.compat.v1
ORIGINAL_CLASSES = {"Session": _tf1.Session, "InteractiveSession": _tf1.InteractiveSession}
_BaseSession = _tf1.Session.__mro__[1]  # tensorflow.python.client.session.BaseSession
# TensorFlow's own BaseSession methods, whatever install() later does to the class.
_BASE = {name: _BaseSession.__dict__[name] for name in (
    "__init__", "run", "make_callable", "_make_callable_from_options", "partial_run_setup",
    "partial_run", "close", "graph", "graph_def")}

_TF_ERRORS = {
    "InvalidArgument": tf.errors.InvalidArgumentError,
    "Internal": tf.errors.InternalError,
    "Unimplemented": tf.errors.UnimplementedError,
}
_FAST_CACHE_SIZE = 1024
# Sets of fed shapes whose selection a run plan keeps (a step with new shapes selects anew).
_CHOICES_MAX = 64
# What _npu_install_variant returns for a variant whose installed form is the user's own nodes:
# it runs on the direct session (session/direct.py).
_DIRECT = object()
_FAST_TYPES = (tf.Tensor, tf.Operation, str)
# The direct session and the signature's callable are prepared while the rewrite runs
# (_npu_prepare_direct_session) for user graphs whose constants hold at most this much:
# TensorFlow's copy of the graph then coexists with the rewrite's transient memory (a frozen
# ResNet-50, ~100 MB of weights, peaked 200 MB higher; MobileNetV2, 14 MB, gained 24 ms of a
# 0.4 s first run from the copy alone).
PREPARE_MAX_CONSTANT_BYTES = 32 << 20
# The preparation runs on the calling thread instead, before the rewrite, when the constants
# hold at least this much and the rewrite will most likely come from the disk cache (it holds
# entries: a process started again on a warm cache): the preparing thread's first copy of
# the weights touches fresh memory (its own malloc arena), which costs more than the little
# rewrite work left to overlap (a frozen MobileNetV2, 14 MB: 285 against 302 ms; LeNet
# training, far smaller, gains from the overlap still: 75 against 79 ms).
PREPARE_HERE_MIN_CONSTANT_BYTES = 4 << 20
# RewriteResult.derived keys (facts of the installed form, cached with the rewrite): it is the
# user's own nodes (session/direct.py); it keeps no state across runs.
_USER_NODES_FACT = "installed_form_is_user_nodes"
_NO_STATE_FACT = "installed_form_keeps_no_state"


def _maps(result, tensors, ops, feeds):
    """Install maps of a signature (user names → names in the rewritten graph)."""
    return {"fetches": {t: result.tensor_map.get(t, t) for t in tensors},
            "targets": {o: result.op_map.get(o, o) for o in ops},
            "feeds": {f: result.feed_map.get(f, f) for f in feeds}}


def _cluster_names(result):
    return frozenset(c.name for c in result.clusters)


def _inlined(graph_def, clusters):
    """``graph_def`` with the calls of ``clusters`` inlined under the user's names (the body
    nodes that copy a user's node unchanged are then that node to the shadow)."""
    return inline_calls(graph_def, lambda call, fdef: call.name in clusters, body_names=True)


def _constant_bytes(graph):
    """About how many bytes the ``Const`` ops of ``graph`` (a ``tf.Graph``) hold: elements times
    their size, from the ops' output shapes (no serialisation; a string counts 8 bytes)."""
    total = 0
    for op in graph.get_operations():
        if op.type == "Const":
            out = op.outputs[0]
            total += (out.shape.num_elements() or 0) * (out.dtype.size or 8)
    return total


def _installed_form(light, result, user_nodes, maps, shapes_checked=False):
    """``(Inlined, whether it is the user's own nodes)`` of a rewrite's graph ``light`` (or of
    a variant's; ``shapes_checked``: see ``resolves_to_user_graph``)."""
    inlined = _inlined(light, _cluster_names(result))
    return inlined, resolves_to_user_graph(inlined, user_nodes, shapes_checked=shapes_checked,
                                           **maps)


# ------------------------------------------------------------------------------ fetch helpers
def _system_op(elements):
    """``"NPUInit"`` / ``"NPUShutdown"`` when one of the fetched ops is that NPU system op."""
    for element in elements:
        if isinstance(element, tf.Operation) and element.type == "NoOp":
            attr = element.node_def.attr.get(NPU_SYSTEM_OP_ATTR)
            if attr is not None and attr.s in (b"NPUInit", b"NPUShutdown"):
                return attr.s.decode()
    return None


def _traced(options, run_metadata):
    """``(options, run_metadata)`` asking for a full trace (the user's own, when given, are
    kept: their trace level raised and their metadata filled by the same run)."""
    from tensorflow.core.protobuf import config_pb2

    full = config_pb2.RunOptions.FULL_TRACE
    if options is None:
        options = config_pb2.RunOptions(trace_level=full)
    elif options.trace_level != full:
        traced = config_pb2.RunOptions()
        traced.CopyFrom(options)
        traced.trace_level = full
        options = traced
    return options, run_metadata if run_metadata is not None else config_pb2.RunMetadata()



def _fetch_mapper(graph, fetches):
    from tensorflow.python.client import session as tf_session

    with graph.as_default():
        return tf_session._FetchMapper.for_fetch(fetches)  # TF's own fetch logic (private)


def _expand_feed(key, value):
    """``[(feed key, value), ...]``: composite keys (SparseTensor, ...) expanded into their
    component tensors, as TensorFlow's session does."""
    from tensorflow.python.client import session as tf_session

    for tensor_type, _, feed_fn, _ in tf_session._REGISTERED_EXPANSIONS:
        if isinstance(key, tensor_type):
            return list(feed_fn(key, value))
    return [(key, value)]


def _expand_feed_keys(keys):
    from tensorflow.python.client import session as tf_session

    out = []
    for key in keys:
        for tensor_type, _, _, partial_feed_fn in tf_session._REGISTERED_EXPANSIONS:
            if isinstance(key, tensor_type):
                out.extend(partial_feed_fn(key))
                break
        else:
            out.append(key)
    return out


def _fast_key(fetches, feed_dict):
    """A hashable key for fetches that are a graph element or a flat list/tuple of them, plus the
    feed keys; None for anything else (nested structures take the general path)."""
    if isinstance(fetches, _FAST_TYPES):
        fetch_key = fetches
    elif isinstance(fetches, (list, tuple)) and all(isinstance(f, _FAST_TYPES) for f in fetches):
        fetch_key = (type(fetches), tuple(fetches))
    else:
        return None
    if not feed_dict:
        return fetch_key, ()
    try:
        feed_key = tuple(feed_dict)
        hash(feed_key)
    except TypeError:
        return None
    return fetch_key, feed_key


class _Signature:
    """One rewritten run signature, installed in a shadow graph and shared by its sessions.

    Attributes:
        result: the RewriteResult (None when the signature runs unrewritten).
        base: the :class:`~npu_adapter.session.shadow.Installed` of the rewritten graph (see
            :meth:`installed`).
        direct: True when the installed form is the user's own nodes: runs take the user's
            graph (see :mod:`npu_adapter.session.direct`; one with state only while the
            session's state lives there).
        stateful: False when the installed form is known to keep no state across runs.
        variants: variant key → Installed, built on first use.
        names: ``(tensors, ops, feeds)`` user names of the signature.
    """

    __slots__ = ("ready", "error", "result", "base", "pending", "direct", "stateful",
                 "variants", "names", "lock", "loop")

    def __init__(self, names):
        self.loop = None  # the IterationOp of a loop-sunk signature
        self.ready = threading.Event()
        self.error = None
        self.result = None
        self.base = None
        # (light graph, user nodes, install kwargs, clusters to inline or None) of a direct
        # signature
        self.pending = None
        self.direct = False
        self.stateful = True
        self.variants = {}
        self.names = names
        self.lock = threading.Lock()

    def installed(self, shadow):
        """:attr:`base`, installing a direct signature in ``shadow`` on first use (only what
        needs the shadow's elements, a callable, asks)."""
        if self.base is None and self.pending is not None:
            with self.lock:
                if self.base is None:
                    graph_def, user_nodes, kwargs, clusters = self.pending
                    if clusters is not None:
                        graph_def = _inlined(graph_def, clusters).graph_def
                    with collector_paused():
                        self.base = shadow.install(graph_def, user_nodes, **kwargs)
                    self.pending = None
        return self.base


class _RunPlan:
    """How to run one fetch structure with one set of feed keys (the steady-state fast path)."""

    __slots__ = ("mapper", "signature", "program", "feed_keys", "fed_names", "system_op",
                 "mapped", "direct", "variant_prepared", "choices")

    def __init__(self, mapper, signature, program, feed_keys, fed_names, system_op=None):
        self.system_op = system_op      # "NPUInit" / "NPUShutdown" when the run executes one
        # Runs on the direct session (the user's graph), unless a shape picks a variant.
        self.direct = signature.direct and (program is None or not program.needs_shapes)
        self.mapper = mapper
        self.signature = signature
        self.program = program
        self.feed_keys = feed_keys      # user feed keys in feed_dict order (None: composite)
        self.fed_names = fed_names      # their tensor names, same order
        self.mapped = (None, None)      # (Installed, its fetch list) of the last run
        # A variant of the signature ran on the direct session: its callable is made.
        self.variant_prepared = False
        # Fed shapes (feed order) -> (Installed, Selection) of the variant they select; None
        # when the plan cannot repeat a selection (see _NpuSessionMixin._npu_selected).
        self.choices = {} if (program is not None and program.needs_shapes and
                              program.repeatable and feed_keys is not None) else None


def _inline_small_graphs(config):
    """``config`` for TensorFlow's session of a rewriting session: Grappler runs on graphs of
    any size unless the user chose ``min_graph_nodes``.

    Grappler skips graphs under 4 nodes (its default), and a rewrite often collapses a small
    signature into fewer: the cluster call then stays a function call with its own executor,
    ``_Arg`` and ``_Retval`` (~+30 us per run on a 3-node graph), where a plain session runs
    the ops in its own executor. Running Grappler inlines the call again (keeping the call's
    name for its outputs, so the fetch is unchanged).
    """
    if config is not None and config.graph_options.rewrite_options.min_graph_nodes != 0:
        return config
    copy = _tf1.ConfigProto()
    if config is not None:
        copy.CopyFrom(config)
    copy.graph_options.rewrite_options.min_graph_nodes = -1
    return copy


class _NpuSessionMixin:
    """``run``/``make_callable``/partial runs of an NpuSession (see the module docstring)."""

    _npu_enabled = False
    _npu_force_plain = False  # plain_session_class(): TensorFlow's behaviour, always

    def _npu_base_init(self, target="", graph=None, config=None):
        """``BaseSession.__init__`` of every session while :func:`~npu_adapter.session.install`
        is in effect: parse the options, then open TensorFlow's session on the right graph."""
        _BASE["__init__"](self, *self._npu_session_args(target, graph, config))
        self._npu_adopt_idle_session()

    def _npu_session_args(self, target, graph, config):
        """``(target, graph, config)`` for TensorFlow's session: options parsed and checked
        first (before a session exists), the shadow graph for a rewriting session, Grappler on
        small graphs too, and in a rank of a multi-rank job its TensorFlow server."""
        tf_graph = self._npu_init(graph, config)
        if self._npu_enabled:
            config = _inline_small_graphs(config)
        target, config = distributed.session_target(target, config)
        return target, tf_graph, config

    def _npu_init(self, graph, config):
        """Parse the options and decide the graph TensorFlow's session runs on (idempotent:
        an NpuSession initialises before TensorFlow's ``Session.__init__`` reaches the
        installed ``BaseSession.__init__``)."""
        from npu_adapter.config import NpuConfig

        if self.__dict__.get("_npu_initialised"):
            return graph
        # BaseSession.__del__ reads these: keep it quiet when the options below are invalid.
        self._session = None
        self._closed = True
        self._npu_enabled = False
        self._npu_runtime = None
        self._npu_accelerate = None
        self._npu_dump = None
        self._npu_profiler = None
        self._npu_user_graph = graph if graph is not None else _tf1.get_default_graph()
        self._npu_config = NpuConfig.from_config_proto(config)
        self._npu_enabled = bool(self._npu_config.present and self._npu_config.use_off_line
                                 and self._npu_config.job not in ("ps", "default"))
        self._npu_tls = threading.local()
        self._npu_lock = threading.Lock()
        self._npu_fast = {}
        self._npu_partials = {}     # partial_run handle -> _Signature
        self._npu_signatures = {}   # this session's signature keys -> _Signature
        self._npu_programs = {}     # id(_Signature) -> Program (this session's runtime)
        self._npu_rewrites = 0
        self._npu_reusable = True   # False once a callable or partial run lives in TF's session
        self._npu_adoption_done = False
        # Where the session's state lives: None until a signature with state runs, then
        # "user" (the direct session, session/direct.py) or "shadow".
        self._npu_state_home = None
        self._npu_initialised = True
        if self._npu_force_plain:
            self._npu_enabled = False
        if not self._npu_enabled:
            return self._npu_user_graph
        from npu_adapter.backends import get_backend

        self._npu_backend = get_backend(self._npu_config.npu_adapter_backend or "cpu")
        self._npu_runtime = self._npu_backend.create_runtime(self._npu_config)
        self._npu_shadow = ShadowGraph.for_graph(self._npu_user_graph)
        from npu_adapter.precision.accelerate import AccelerateTrainSchedule

        # accelerate_train_mode: the first part of training runs in low precision (its own
        # rewrite of each signature), then the session switches back once.
        self._npu_accelerate = AccelerateTrainSchedule.from_config(self._npu_config)
        self._npu_low_config = None
        self._npu_init_instruments()
        return self._npu_shadow.graph

    def _npu_init_instruments(self):
        """The data dump and profiler of this session, from its options and those an
        ``initialize_system`` session left for the process."""
        from npu_adapter.datadump import DumpSession
        from npu_adapter.profiling import SessionProfiler
        from npu_adapter.system_options import with_system_options

        config = with_system_options(self._npu_config)
        self._npu_dump = DumpSession.from_config(config)
        self._npu_profiler = SessionProfiler(config)

    # ------------------------------------------------------------------ graph the user sees
    @property
    def graph(self):
        """The graph that was launched in this session: the user's graph (TensorFlow's own
        session machinery sees the shadow graph it really runs)."""
        if self._npu_enabled and not getattr(self._npu_tls, "inner", False):
            return self._npu_user_graph
        return self._graph

    @property
    def graph_def(self):
        """The user's graph as a GraphDef (never our rewrite)."""
        return self.graph.as_graph_def(add_shapes=self._add_shapes)

    @contextlib.contextmanager
    def _npu_inside(self):
        """While TensorFlow's own session code runs, ``self.graph`` is the shadow graph."""
        tls = self._npu_tls
        outer = getattr(tls, "inner", False)
        tls.inner = True
        try:
            yield
        finally:
            tls.inner = outer

    # ------------------------------------------------------------------ public extras
    @property
    def npu_config(self):
        """The session's :class:`~npu_adapter.config.NpuConfig`."""
        return self._npu_config

    @property
    def npu_rewrite_count(self):
        """How many run signatures this session has run rewritten (built here, or shared with
        an earlier session on the same graph and options)."""
        return self._npu_rewrites

    def npu_runtime_stats(self):
        """The backend runtime's :class:`~npu_adapter.backends.runtime.RuntimeStats` (None for
        a session that does not rewrite)."""
        return self._npu_runtime.stats() if self._npu_runtime is not None else None

    def npu_gear_stats(self):
        """Per cluster with gears: runs, runs per gear, elements fed and elements computed
        (padded), the policy and the padding waste ratio ``1 - fed / computed``. Only fed inputs
        are counted (dataset inputs are not visible to the session)."""
        if self._npu_runtime is None:
            return {}
        stats = self._npu_runtime.stats()
        return {name: {"runs": st.runs, "gear_counts": dict(st.gear_counts),
                       "actual_elements": st.actual_elements,
                       "padded_elements": st.padded_elements, "policy": st.policy,
                       "waste_ratio": st.waste_ratio}
                for name, st in stats.clusters.items() if st.runs}

    def npu_lazy_stats(self):
        """lazy_recompile: specialisations built (first time per shape), re-specialisations
        (a shape evicted earlier came back), evictions (least frequently used first) and hits."""
        keys = ("specializations", "respecializations", "evictions", "hits")
        if self._npu_runtime is None:
            return dict.fromkeys(keys, 0)
        stats = self._npu_runtime.stats()
        return {k: getattr(stats, k) for k in keys}

    def npu_accelerate_stats(self):
        """accelerate_train_mode: runs, low-precision runs and when the session switched back
        to the original precision (None when the option is not set)."""
        schedule = self._npu_accelerate
        return schedule.stats() if schedule is not None else None

    def npu_rewrite_result(self, fetches, feed_dict=None):
        """The :class:`~npu_adapter.pipeline.result.RewriteResult` of this signature (or None)."""
        if not self._npu_enabled:
            return None
        mapper = _fetch_mapper(self.graph, fetches)
        signature = self._npu_signature(mapper.unique_fetches(), list(feed_dict or ()))
        return signature.result

    def close(self):
        """Close the TensorFlow session (or keep it idle for the next session on the graph, see
        :mod:`npu_adapter.session.reuse`), release the backend runtime, finish the dump and the
        profile."""
        try:
            if not self._npu_keep_idle():
                _BASE["close"](self)
        finally:
            stand_in = self.__dict__.pop("_npu_stand_in", None)
            if stand_in is not None:  # an adopted session closed for good
                release_handle(stand_in, closed=True)
            self._npu_close_direct()
            self._npu_close_parts()

    def _npu_close_parts(self):
        for name in ("_npu_runtime", "_npu_dump", "_npu_profiler"):
            part = self.__dict__.get(name)
            if part is not None:
                part.close()  # idempotent

    # ------------------------------------------------------------------ session reuse
    def _npu_reuse_key(self):
        """The key of this session's TensorFlow session among the shadow's idle ones, or None
        when it may not be shared (see :mod:`npu_adapter.session.reuse`)."""
        if not self._npu_enabled or not self._npu_backend.reuses_tf_sessions \
                or not self._npu_config.npu_adapter_reuse_sessions:
            return None
        if self._npu_dump is not None or self.__dict__.get("_target") != b"":
            return None
        return self._target, self._config.SerializeToString(deterministic=True)

    def _npu_adopt_idle_session(self):
        """Run on the shadow's idle TensorFlow session for these options, when there is one,
        instead of the one just opened (its signatures are prepared already)."""
        if self.__dict__.get("_npu_adoption_done", True):
            return  # not a rewriting session, or done (NpuSession under install() comes twice)
        self._npu_adoption_done = True
        key = self._npu_reuse_key()
        idle = self._npu_shadow.reuse.take(key) if key is not None else None
        if idle is not None:
            handle, _ = idle
            # The handle TensorFlow just opened is closed and kept for close() (see
            # _npu_keep_idle), where it stands in for the handle handed back.
            self._npu_stand_in, self._session = self._session, handle
            tf_session.TF_CloseSession(self._npu_stand_in)

    def _npu_keep_idle(self):
        """Hand TensorFlow's session to the shadow's idle sessions instead of closing it, when
        nothing in it outlives this session. True when it was handed over."""
        if self._closed or not self._session or not self.__dict__.get("_npu_reusable"):
            return False
        key = self._npu_reuse_key()
        if key is None or self._npu_shadow.stateful_op() is not None:
            return False
        stand_in = self.__dict__.pop("_npu_stand_in", None)
        if stand_in is None:
            stand_in = closed_handle(self._graph, self._target, self._config)
        self._closed = True
        handle, self._session = self._session, stand_in  # BaseSession.__del__ deletes it
        self._npu_shadow.reuse.give(key, handle)
        return True

    # ------------------------------------------------------------------ direct session
    def _npu_direct_allowed(self):
        """Whether this session may run signatures on TensorFlow's session of the user's graph
        (see :mod:`npu_adapter.session.direct`): not a dumping session (its graphs report to
        it), not a remote target, not with ``npu_adapter_run_on_user_graph`` false."""
        return bool(self._npu_config.npu_adapter_run_on_user_graph and self._npu_dump is None
                    and self.__dict__.get("_target") == b"")

    def _npu_direct_session(self):
        """The TensorFlow session of the user's graph that runs direct signatures: an idle one
        of the graph's (its signatures prepared already) or a new one, on first use."""
        session = self.__dict__.get("_npu_direct")
        if session is not None:
            return session
        with self._npu_lock:
            session = self.__dict__.get("_npu_direct")
            if session is None:
                session = _DirectSession(self._target, self._npu_user_graph, self._config)
                key = self._npu_reuse_key()
                idle = self._npu_shadow.reuse.take(key, "user") if key is not None else None
                if idle is not None:  # its signatures are prepared: run on it instead
                    fresh, (session._session, prepared) = session._session, idle
                    session._npu_prepared = prepared or PreparedRuns()
                    release_handle(fresh)
                self._npu_direct = session
        return session

    def _npu_prepare_direct_session(self, names, now=False):
        """Prepare the signature ``names`` on the direct session: open the session, hand
        TensorFlow the user's graph (``ExtendSession``) and make the signature's callable
        (:mod:`npu_adapter.session.prepared_runs`). Neither runs anything; a failure shows
        again where the run needs it.

        By default on the process's preparing thread, while this thread reads the user's graph
        and rewrites it (TensorFlow works without the GIL: on LeNet training the 15-20 ms per
        signature of its executors overlap the rewrite; see PREPARE_MAX_CONSTANT_BYTES for
        larger graphs). With ``now`` (the rewrite will most likely come from the disk cache,
        so there is little to overlap) here and at once: a thread's first large allocations
        touch fresh memory (glibc gives each thread an arena of its own), and in a fresh
        process the preparing thread's copy of a frozen MobileNetV2 took 45-50 ms against
        28 ms on the main thread. Fresh processes with a warm disk cache, medians of 10:
        285 ms here, 302 ms on the preparing thread, 268 ms for a plain session."""
        if self.__dict__.get("_npu_prepare_stopped"):
            return  # a session whose signatures took the shadow paid for it once
        if now:
            self._npu_make_callable(names)
            return
        self.__dict__.setdefault("_npu_preparing", []).append(
            in_background(lambda: self._npu_make_callable(names)))

    def _npu_make_callable(self, names):
        """Make the callable of the signature ``names`` on the direct session (opened on first
        use) unless it is made or being made; quiet on failure (the run reports it)."""
        with contextlib.suppress(Exception):
            session = self._npu_direct_session()
            key = run_key(*names)
            if session._npu_prepared.claim(key):
                session._npu_prepared.prepare(session, key)

    def _npu_disk_cache_warm(self):
        """Whether this session's rewrites come from a disk cache that holds entries already
        (a process started again on a warm ``npu_adapter_cache_dir``); a bad directory is
        reported by the rewrite, not here."""
        if not getattr(self._npu_backend, "portable_rewrites", False):
            return False
        from npu_adapter.pipeline import rewrite_cache

        try:
            disk = rewrite_cache.disk_cache(self._npu_config)
        except Exception:  # reported by the rewrite that needs it
            return False
        return disk is not None and disk.holds_entries()

    def _npu_prepare_variant(self, plan):
        """A variant of ``plan``'s signature runs on the user's graph (a gear's static-shape
        copy of the cluster is the user's nodes again): make the signature's callable on the
        direct session now, before its first run there. The signature itself runs on the
        shadow (its dispatcher checks the shapes), so nothing was prepared for it while it was
        rewritten; ``Session.run`` would build executors of its own, and each of its runs
        costs more than a callable's (small_mlp with 3 gears: ~13 us of ~170 us per run)."""
        if "_npu_preparing" in self.__dict__:
            self._npu_wait_prepared()
        self._npu_make_callable(plan.signature.names)
        plan.variant_prepared = True

    def _npu_wait_prepared(self):
        """Wait for what :meth:`_npu_prepare_direct_session` handed the preparing thread."""
        futures = self.__dict__.pop("_npu_preparing", None)
        for future in futures or ():
            future.result()  # (prepare() raises nothing)

    def _npu_release_unused_direct(self, names):
        """A signature (``names``) runs on the shadow: free what was prepared for it on the
        direct session. Close that session when no run used it yet (it holds TensorFlow's copy
        of the user's graph, the weights too; a later direct signature opens it again), and
        prepare nothing more in this session."""
        if not self.__dict__.get("_npu_preparing") and "_npu_direct" not in self.__dict__:
            return
        self._npu_wait_prepared()
        with self._npu_lock:
            used = self.__dict__.get("_npu_direct_used")
            session = self.__dict__.get("_npu_direct")
            if not used:
                self.__dict__.pop("_npu_direct", None)
                self._npu_prepare_stopped = True
        if session is None:
            return
        if used:
            session._npu_prepared.release(session, run_key(*names))
        else:
            session.close()

    def _npu_close_direct(self):
        """Keep the direct session idle for the next session on the graph (when it only ran
        signatures that keep no state) or close it."""
        self._npu_wait_prepared()
        session = self.__dict__.pop("_npu_direct", None)
        if session is not None:
            self._npu_give_or_close_direct(session)

    def _npu_give_or_close_direct(self, session):
        """Hand ``session`` (the direct one, closing with this session) to the graph's idle
        sessions when it never held state, else close it."""
        key = self._npu_reuse_key()
        if key is None or session._closed or not session._session or \
                self.__dict__.get("_npu_direct_held_state"):
            session.close()
            return
        # The pool keeps TensorFlow's handle, not the Session (which holds the user's graph:
        # the shadow, and so its pool, must not keep the graph alive).
        handle, session._session = session._session, None
        session._closed = True
        session._npu_prepared.forget_plans()
        self._npu_shadow.reuse.give(key, handle, "user", session._npu_prepared)

    def _npu_state_on(self, home):
        """Whether this session's state may live on ``home`` (``"user"``: the direct session,
        ``"shadow"``: this session's TensorFlow session) for a signature with state about to
        run there: yes when no signature with state ran yet (``home`` is then where it lives)
        or it lives there already. A signature that can only run on the shadow takes the state
        there: the variables' values are moved first (:meth:`_npu_move_state_to_shadow`). A
        direct signature finding it on the shadow runs there (False)."""
        with self._npu_lock:
            current = self._npu_state_home
            if current is None or current == home:
                self._npu_state_home = home
                if home == "user":  # the direct session holds state: never handed on
                    self._npu_direct_held_state = True
                return True
            if home == "user":
                return False
            self._npu_move_state_to_shadow()
            self._npu_state_home = "shadow"
            return True

    def _npu_on_shadow(self, signature):
        """The Installed of ``signature`` for a run on the shadow (outside :meth:`run`: a
        callable, a partial run): the session's state moves there first when it has to."""
        if signature.stateful and self._npu_state_home != "shadow":
            self._npu_state_on("shadow")
        return signature.installed(self._npu_shadow)

    def _npu_move_state_to_shadow(self):
        """Copy the values of the user graph's variables that the direct session holds into
        this session's TensorFlow session on the shadow (the variables' nodes imported there
        under their names when the shadow lacks them). Only direct signatures whose graph's
        state is all movable ran with state there (session/direct.py); variables never
        initialised stay so. Called under the session's lock."""
        from npu_adapter.session.state_move import move_variables

        direct = self.__dict__.get("_npu_direct")
        if direct is None:
            return
        variables = self._npu_movable_variables()
        with self._npu_inside():
            move_variables(direct, self._npu_shadow, variables,
                           lambda fetches, feeds: _BASE["run"](self, fetches, feeds))

    def _npu_run_direct(self, plan, feed_dict, options, run_metadata):
        """Run a direct signature: the user's own fetches and feeds, on the direct session."""
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        self._npu_direct_used = True
        if "_npu_preparing" in self.__dict__:
            self._npu_wait_prepared()  # the signature's callable, being made
        return self._npu_execute(self._npu_direct_session(), plan, plan.mapper.unique_fetches(),
                                 feed_dict, options, run_metadata)

    def _npu_execute(self, session, plan, elements, feeds, options, run_metadata, iterations=1):
        """Run ``elements`` (already in ``session``'s graph) with ``feeds`` on ``session``
        (this session, for the shadow, or the direct one), traced when profiling, and give the
        user's fetch structure back."""
        profiler = self._npu_profiler
        profiling = profiler is not None and profiler.settings() is not None
        if profiling:
            options, run_metadata = _traced(options, run_metadata)
        if session is self:
            # _npu_inside() without a generator (this is the per-step path): TensorFlow's run
            # sees the shadow graph as this session's.
            tls = self._npu_tls
            outer = getattr(tls, "inner", False)
            tls.inner = True
        try:
            if len(elements) == 1:  # TensorFlow's fetch mapper costs less for one element
                values = [_BASE["run"](session, elements[0], feeds, options, run_metadata)]
            else:
                values = _BASE["run"](session, elements, feeds, options, run_metadata)
        finally:
            if session is self:
                tls.inner = outer
        if profiling:
            profiler.after_run(run_metadata, iterations=iterations)
        if plan.system_op is not None:
            self._npu_system_op_ran(plan.system_op)
        return plan.mapper.build_results(values)

    # ------------------------------------------------------------------ signatures
    def _npu_names(self, elements, feed_keys):
        graph = self._npu_user_graph
        tensors = tuple(sorted({e.name for e in elements if isinstance(e, tf.Tensor)}))
        ops = tuple(sorted({e.name for e in elements if isinstance(e, tf.Operation)}))
        feeds = []
        for key in _expand_feed_keys(feed_keys):
            try:
                element = graph.as_graph_element(key, allow_tensor=True, allow_operation=False)
            except (TypeError, ValueError, KeyError):
                continue  # TensorFlow reports the bad key itself (see _npu_map_feeds)
            feeds.append(element.name)
        return tensors, ops, tuple(sorted(set(feeds)))

    def _npu_signature(self, elements, feed_keys, rewritten=True, config=None):
        """The shared signature of these fetches and feeds, rewritten under ``config`` (the
        session's by default) and built on first use. With ``rewritten`` false the client graph
        is installed as it is (partial runs: a cluster would make a fetch wait for feeds it
        does not need)."""
        config = config if config is not None else self._npu_config
        names = self._npu_names(elements, feed_keys)
        local_key = (names, config if rewritten else None)
        local = self._npu_signatures.get(local_key)
        if local is not None:
            return local
        shadow = self._npu_shadow
        # NpuConfig is hashable: sessions with equal options share their signatures, but for
        # a dumping session (its graphs report to its own DumpSession).
        dump = self._npu_dump
        key = (names, config if rewritten else None,
               dump.serial if dump is not None and rewritten else None)
        with shadow.lock:
            signature = shadow.signatures.get(key)
            owner = signature is None
            if owner:
                signature = shadow.signatures[key] = _Signature(names)
        if owner:
            try:
                with collector_paused():
                    if rewritten:
                        self._npu_build(signature, config)
                    else:
                        self._npu_install_unrewritten(signature)
            except BaseException as exc:
                signature.error = exc
                with shadow.lock:
                    # Failures are not cached: a later run (after fixing a feed) may succeed.
                    shadow.signatures.pop(key, None)
                raise
            finally:
                signature.ready.set()
        else:
            signature.ready.wait()
            if signature.error is not None:
                raise signature.error
        with self._npu_lock:
            if local_key not in self._npu_signatures:
                self._npu_signatures[local_key] = signature
                self._npu_rewrites += signature.result is not None
        return signature

    def _npu_install_unrewritten(self, signature):
        from npu_adapter.graph.extract import extract_client_graph

        tensors, ops, feeds = signature.names
        graph_def, user_nodes = self._npu_shadow.user_graph_def()
        client = extract_client_graph(graph_def, tensors, ops, feeds)
        signature.base = self._npu_shadow.install(
            client.graph_def, user_nodes, fetches={t: t for t in tensors},
            targets={o: o for o in ops}, feeds=dict(client.feeds))

    def _npu_build(self, signature, config):
        from npu_adapter.api import rewrite

        tensors, ops, feeds = signature.names
        shadow = self._npu_shadow
        signature.loop = loop_target(ops, config)
        inline = self._npu_backend.inlines_calls_at_install and self._npu_dump is None and \
            signature.loop is None
        # Prepared first: TensorFlow's part runs while the user's graph is read and rewritten
        # (or at once: see PREPARE_HERE_MIN_CONSTANT_BYTES).
        constant_bytes = shadow.user_graph_op_fact("constant_bytes", _constant_bytes) \
            if inline and self._npu_direct_allowed() else None
        if constant_bytes is not None and constant_bytes <= PREPARE_MAX_CONSTANT_BYTES:
            here = constant_bytes >= PREPARE_HERE_MIN_CONSTANT_BYTES and \
                self._npu_disk_cache_warm()
            self._npu_prepare_direct_session(signature.names, now=here)
        graph_def, user_nodes = shadow.user_graph_def()
        # The proof that the installed form is the user's own nodes depends only on what the
        # rewrite's cache key covers: it is derived once and cached with the result (a fresh
        # process with a warm disk cache skips the inlining and the proof).
        derived = {}

        def derive(result):
            light, _ = result.light_parts()
            facts = {_NO_STATE_FACT: keeps_no_state(light)}
            if facts[_NO_STATE_FACT] or self._npu_movable_variables() is not None:
                derived["inlined"], facts[_USER_NODES_FACT] = _installed_form(
                    light, result, user_nodes, _maps(result, tensors, ops, feeds))
            return facts

        try:
            result = rewrite(graph_def, config, fetches=list(tensors), targets=list(ops),
                             feeds=list(feeds), backend=self._npu_backend,
                             dump_dir=config.npu_adapter_dump_dir or None,
                             graph_num=shadow.graph_num(graph_def), use_cache=True,
                             lazy_weights=True,
                             derive=derive if inline and self._npu_direct_allowed() else None)
        except RewriteError as exc:
            error_cls = _TF_ERRORS.get(exc.code, tf.errors.InvalidArgumentError)
            raise error_cls(None, None, str(exc)) from exc
        signature.result = result
        maps = _maps(result, tensors, ops, feeds)
        if signature.loop is not None:
            signature.base = install_loop(shadow, self._npu_instrumented(result.graph_def),
                                          user_nodes, int(config.iterations_per_loop), **maps)
            return
        if self._npu_dump is not None:
            signature.base = shadow.install(self._npu_instrumented(result.graph_def),
                                            user_nodes, **maps)
            return
        # The rewritten graph without its weights: the shadow takes them from the user's graph
        # (one copy of the weights less; see graph/payload.py). The profiler only indexes names.
        light, payloads = result.light_parts()
        if self._npu_profiler is not None:
            self._npu_profiler.register_graph(light)
        if inline:
            # TF1 ref-variable graphs keep their calls when installed (graph/inline.py), but
            # their inlined form may still be the user's own nodes.
            keep_calls = has_ref_variables(light)
            inlined = derived.get("inlined")
            stateless = result.derived.get(_NO_STATE_FACT)
            if stateless is None:  # cached by a rewrite that did not derive it
                stateless = keeps_no_state(light)
            signature.stateful = not stateless
            user_form = False
            if self._npu_direct_allowed() and \
                    (stateless or self._npu_movable_variables() is not None):
                user_form = result.derived.get(_USER_NODES_FACT)
                if user_form is None:  # cached by a rewrite that did not derive it
                    inlined, user_form = _installed_form(light, result, user_nodes, maps)
            if user_form:
                signature.direct = True
                # Installed only if a callable asks or the session's state lives on the
                # shadow; no reference to the shadow here (the shadow holds its signatures and
                # must die with the user's graph).
                signature.pending = (light, user_nodes, dict(payloads=payloads, **maps),
                                     None if keep_calls else _cluster_names(result))
                shadow.release_serialized()  # nothing to import now
                return
            if not keep_calls:
                if inlined is None:
                    inlined = _inlined(light, _cluster_names(result))
                light = inlined.graph_def
        if not (inline and stateless and self._npu_gears_may_run_direct(signature)):
            self._npu_release_unused_direct(signature.names)
        signature.base = shadow.install(light, user_nodes, payloads=payloads, **maps)

    def _npu_gears_may_run_direct(self, signature):
        """Whether the runs of ``signature`` (on the shadow) will call one gear directly
        (exact policy, every gear cluster): a gear's static-shape copy of the cluster is
        often the user's nodes again, which then run on the direct session through the
        callable prepared while the signature was rewritten (so it is kept; the caller asks
        only for a signature that keeps no state, the condition for such a run)."""
        program = self._npu_program(signature)
        return bool(program.gear_clusters) and program.repeatable and \
            all(c.policy == "exact" for c in program.gear_clusters)

    def _npu_movable_variables(self):
        """The variables of the user's graph as it is now when all its state can move between
        TensorFlow sessions, else None (session/direct.py): only then may signatures with state
        run on the user's graph."""
        return self._npu_shadow.user_graph_fact("movable_variables", movable_variables)

    def _npu_instrumented(self, graph_def):
        """``graph_def`` reporting to the session's data dump, known to its profiler."""
        if self._npu_dump is not None:
            graph_def = self._npu_dump.instrument(graph_def)
        if self._npu_profiler is not None:
            self._npu_profiler.register_graph(graph_def)
        return graph_def

    def _npu_program(self, signature):
        program = self._npu_programs.get(id(signature))
        if program is None:
            program = self._npu_runtime.prepare(signature.result, signature.names[2])
            with self._npu_lock:
                program = self._npu_programs.setdefault(id(signature), program)
        return program

    def _npu_variant(self, signature, variant):
        """The Installed of ``variant`` (installed on first use, shared via the shadow)."""
        if variant.key is None:
            return signature.installed(self._npu_shadow)
        installed = signature.variants.get(variant.key)
        if installed is not None:
            return installed
        with signature.lock:
            installed = signature.variants.get(variant.key)
            if installed is None:
                with collector_paused():
                    installed = self._npu_install_variant(signature, variant)
                signature.variants[variant.key] = installed
        return installed

    def _npu_install_variant(self, signature, variant):
        """Install the graph of one variant of ``signature`` in the shadow (or, as for a
        signature, find it to be the user's own nodes: :data:`_DIRECT`)."""
        program = self._npu_program(signature)
        tensors, ops, feeds = signature.names
        result = signature.result
        _, user_nodes = self._npu_shadow.user_graph_def()
        maps = _maps(result, tensors, ops, feeds)
        if self._npu_dump is None and self._npu_backend.inlines_calls_at_install:
            # As _npu_build installs a signature: without the weights, calls inlined under the
            # user's names (a gear's static-shape copy of a cluster is often the user's nodes
            # again: the session then runs it on the user's graph, and the gear's check of the
            # fed shape was made by the selection already).
            light, payloads = result.light_parts()
            graph_def = program.variant_graph(variant.key, light)
            if self._npu_profiler is not None:
                self._npu_profiler.register_graph(graph_def)
            if not has_ref_variables(graph_def):
                if self._npu_direct_allowed():
                    inlined, user_form = _installed_form(graph_def, result, user_nodes, maps,
                                                         shapes_checked=True)
                    if user_form and keeps_no_state(graph_def):  # else: the shadow
                        return _DIRECT
                else:
                    inlined = _inlined(graph_def, _cluster_names(result))
                graph_def = inlined.graph_def
            return self._npu_shadow.install(graph_def, user_nodes, payloads=payloads, **maps)
        graph_def = self._npu_instrumented(program.variant_graph(variant.key))
        return self._npu_shadow.install(graph_def, user_nodes, **maps)

    # ------------------------------------------------------------------ run
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Run ``fetches`` like ``tf.compat.v1.Session.run``, on the rewritten graph."""
        if not self._npu_enabled:
            return _BASE["run"](self, fetches, feed_dict, options, run_metadata)
        config = self._npu_config
        key = _fast_key(fetches, feed_dict)
        if self._npu_accelerate is not None and self._npu_accelerate.phase() == PHASE_LOW:
            if self._npu_low_config is None:
                self._npu_low_config = low_precision_config(config)
            config = self._npu_low_config
            key = (key, PHASE_LOW) if key is not None else None
        plan = self._npu_fast.get(key) if key is not None else None
        if plan is None:
            plan = self._npu_plan(fetches, feed_dict, config)
            if key is not None and len(self._npu_fast) < _FAST_CACHE_SIZE:
                self._npu_fast[key] = plan
        signature = plan.signature
        if plan.direct and (not signature.stateful or self._npu_state_home == "user" or
                            self._npu_state_on("user")):
            return self._npu_run_direct(plan, feed_dict, options, run_metadata)
        if signature.stateful and self._npu_state_home != "shadow":
            self._npu_state_on("shadow")
        installed = signature.installed(self._npu_shadow)
        if plan.program is not None and plan.program.needs_shapes:
            installed = self._npu_selected(plan, feed_dict)
            if installed is _DIRECT:
                if not plan.variant_prepared:
                    self._npu_prepare_variant(plan)
                return self._npu_run_direct(plan, feed_dict, options, run_metadata)
        mapped_feeds = self._npu_map_feeds(plan, installed, feed_dict)
        known, mapped = plan.mapped
        if known is not installed:
            mapped = [installed.tensors[e.name] if isinstance(e, tf.Tensor)
                      else installed.ops[e.name] for e in plan.mapper.unique_fetches()]
            plan.mapped = (installed, mapped)
        return self._npu_execute(self, plan, mapped, mapped_feeds, options, run_metadata,
                                 int(config.iterations_per_loop)
                                 if signature.loop is not None else 1)

    def _npu_selected(self, plan, feed_dict):
        """The Installed (or :data:`_DIRECT`) of the variant the program selects for the fed
        shapes. A step that repeats the fed shapes of an earlier step of the plan repeats its
        selection (when the program allows it, :attr:`Program.repeatable`): the shapes are
        read in feed order and only the gear statistics are counted again."""
        program = plan.program
        choices = plan.choices
        key = None
        if choices is not None:
            key = tuple([np.shape(value) for value in feed_dict.values()]) if feed_dict else ()
            known = choices.get(key)
            if known is not None:
                program.count_again(known[1])
                return known[0]
        fed = self._npu_fed_values(plan, feed_dict)
        selection = program.select({name: np.shape(value) for name, value in fed.items()})
        installed = self._npu_variant(plan.signature, selection.variant)
        if choices is not None and len(choices) < _CHOICES_MAX:
            choices[key] = (installed, selection)
        return installed

    def _npu_system_op_ran(self, op_type):
        from npu_adapter import system_options

        if op_type == "NPUInit":
            system_options.on_initialize_system(self._npu_config)
        elif op_type == "NPUShutdown":
            system_options.on_shutdown_system()

    def _npu_plan(self, fetches, feed_dict, config):
        mapper = _fetch_mapper(self._npu_user_graph, fetches)
        feed_keys = list(feed_dict or ())
        signature = self._npu_signature(mapper.unique_fetches(), feed_keys, config=config)
        program = self._npu_program(signature) \
            if signature.result is not None and signature.loop is None else None
        simple = all(isinstance(k, (tf.Tensor, str)) for k in feed_keys)
        fed_names = None
        if simple:
            fed_names = []
            graph = self._npu_user_graph
            for k in feed_keys:
                try:
                    fed_names.append(graph.as_graph_element(
                        k, allow_tensor=True, allow_operation=False).name)
                except (TypeError, ValueError, KeyError):
                    fed_names.append(None)  # TensorFlow reports it (kept as the user's key)
        return _RunPlan(mapper, signature, program, feed_keys if simple else None, fed_names,
                        _system_op(mapper.unique_fetches()))

    def _npu_fed_values(self, plan, feed_dict):
        """User tensor name → fed value (composite keys expanded)."""
        if not feed_dict:
            return {}
        if plan.feed_keys is not None:
            return {name: value for name, value in zip(plan.fed_names, feed_dict.values())
                    if name is not None}
        fed = {}
        graph = self._npu_user_graph
        for key, value in (feed_dict or {}).items():
            for sub_key, sub_value in _expand_feed(key, value):
                try:
                    element = graph.as_graph_element(sub_key, allow_tensor=True,
                                                     allow_operation=False)
                except (TypeError, ValueError, KeyError):
                    continue
                fed[element.name] = sub_value
        return fed

    def _npu_map_feeds(self, plan, installed, feed_dict):
        if not feed_dict:
            return feed_dict
        feeds = installed.feeds
        if plan.feed_keys is not None:
            out = {}
            for key, name, value in zip(plan.feed_keys, plan.fed_names, feed_dict.values()):
                out[feeds.get(name, key) if name is not None else key] = value
            return out
        out = {}
        for name, value in self._npu_fed_values(plan, feed_dict).items():
            out[feeds[name]] = value
        return out

    # ------------------------------------------------------------------ callables
    def make_callable(self, fetches, feed_list=None, accept_options=False):
        """``Session.make_callable`` on the rewritten graph (same calling convention).

        As in TensorFlow, a callable with feeds runs through :meth:`run` (its fast path, gears
        and lazy_recompile included); one without feeds is a TensorFlow callable of the mapped
        fetches."""
        if not self._npu_enabled:
            return _BASE["make_callable"](self, fetches, feed_list, accept_options)
        if feed_list is not None:
            if not isinstance(feed_list, (list, tuple)):
                raise TypeError("Argument `feed_list` must be a list or tuple. "
                                f"Received: feed_list={feed_list}")
            feed_list = list(feed_list)

            def generic_run(*feed_args, **kwargs):
                return self.run(fetches, feed_dict=dict(zip(feed_list, feed_args)), **kwargs)

            return generic_run
        mapper = _fetch_mapper(self._npu_user_graph, fetches)
        elements = mapper.unique_fetches()
        installed = self._npu_on_shadow(self._npu_signature(elements, []))
        mapped = [installed.tensors[e.name] if isinstance(e, tf.Tensor)
                  else installed.ops[e.name] for e in elements]
        self._npu_reusable = False  # TensorFlow keeps the callable until its session closes
        with self._npu_inside():
            inner = _BASE["make_callable"](self, mapped, None, accept_options)

        def call(*args, **kwargs):
            return mapper.build_results(inner(*args, **kwargs))

        return call

    def _make_callable_from_options(self, callable_options):
        """The private entry Keras uses: names in ``callable_options`` are the user's."""
        if not self._npu_enabled:
            return _BASE["_make_callable_from_options"](self, callable_options)
        graph = self._npu_user_graph
        fetches = [graph.get_tensor_by_name(name) for name in callable_options.fetch]
        targets = [graph.get_operation_by_name(name) for name in callable_options.target]
        signature = self._npu_signature(fetches + targets, list(callable_options.feed))
        installed = self._npu_on_shadow(signature)
        options = type(callable_options)()
        options.CopyFrom(callable_options)
        del options.fetch[:]
        del options.target[:]
        del options.feed[:]
        options.fetch.extend(installed.tensors[t.name].name for t in fetches)
        options.target.extend(installed.ops[o.name].name for o in targets)
        options.feed.extend(installed.feeds[graph.get_tensor_by_name(name).name].name
                            for name in callable_options.feed)
        self._npu_reusable = False
        with self._npu_inside():
            return _BASE["_make_callable_from_options"](self, options)

    def partial_run_setup(self, fetches, feeds=None):
        """``Session.partial_run_setup`` on the rewritten graph."""
        if not self._npu_enabled:
            return _BASE["partial_run_setup"](self, fetches, feeds)
        mapper = _fetch_mapper(self._npu_user_graph, fetches)
        feed_keys = list(feeds if isinstance(feeds, (list, tuple)) else
                         ([feeds] if feeds is not None else []))
        signature = self._npu_signature(mapper.unique_fetches(), feed_keys, rewritten=False)
        installed = self._npu_on_shadow(signature)
        mapped = [installed.tensors[e.name] if isinstance(e, tf.Tensor)
                  else installed.ops[e.name] for e in mapper.unique_fetches()]
        graph = self._npu_user_graph
        mapped_feeds = [installed.feeds[graph.as_graph_element(
            k, allow_tensor=True, allow_operation=False).name] for k in feed_keys]
        self._npu_reusable = False  # an unfinished partial run lives in TensorFlow's session
        with self._npu_inside():
            handle = _BASE["partial_run_setup"](self, mapped, mapped_feeds)
        with self._npu_lock:
            self._npu_partials[handle] = signature
        return handle

    def partial_run(self, handle, fetches, feed_dict=None):
        """``Session.partial_run`` with the signature of :meth:`partial_run_setup`."""
        if not self._npu_enabled:
            return _BASE["partial_run"](self, handle, fetches, feed_dict)
        signature = self._npu_partials[handle]
        installed = signature.base
        mapper = _fetch_mapper(self._npu_user_graph, fetches)
        mapped = [installed.tensors[e.name] if isinstance(e, tf.Tensor)
                  else installed.ops[e.name] for e in mapper.unique_fetches()]
        graph = self._npu_user_graph
        mapped_feeds = {installed.feeds[graph.as_graph_element(
            k, allow_tensor=True, allow_operation=False).name]: v
            for k, v in (feed_dict or {}).items()}
        with self._npu_inside():
            values = _BASE["partial_run"](self, handle, mapped, mapped_feeds)
        return mapper.build_results(values)


class NpuSession(_NpuSessionMixin, ORIGINAL_CLASSES["Session"]):
    """``tf.compat.v1.Session`` that rewrites each run signature for the configured backend.

    Args are TensorFlow's: ``target``, ``graph``, ``config`` (a ``ConfigProto``; its
    ``NpuOptimizer`` custom optimizer carries the options).
    """

    def __init__(self, target="", graph=None, config=None):
        super().__init__(*self._npu_session_args(target, graph, config))
        self._npu_adopt_idle_session()


class PlainSession(ORIGINAL_CLASSES["Session"]):
    """TensorFlow's session behaviour even while :func:`~npu_adapter.session.install` is in
    effect (for comparisons with plain TensorFlow)."""

    _npu_force_plain = True


class _DirectSession(PlainSession):
    """The TensorFlow session of the user's graph that runs an NpuSession's direct signatures
    (:mod:`npu_adapter.session.direct`): a prepared signature runs through its callable
    (:mod:`npu_adapter.session.prepared_runs`), after ``Session.run``'s own checks."""

    def __init__(self, target, graph, config):
        super().__init__(target, graph, config)
        self._npu_prepared = PreparedRuns()

    def _do_run(self, handle, target_list, fetch_list, feed_dict, options, run_metadata):
        if handle is None and options is None and run_metadata is None:
            run = self._npu_prepared.find(fetch_list, target_list, feed_dict)
            if run is not None:
                return self._do_call(run, self)
        return super()._do_run(handle, target_list, fetch_list, feed_dict, options,
                               run_metadata)


class NpuInteractiveSession(_NpuSessionMixin, ORIGINAL_CLASSES["InteractiveSession"]):
    """``tf.compat.v1.InteractiveSession`` counterpart of :class:`NpuSession`."""

    def __init__(self, target="", graph=None, config=None):
        super().__init__(*self._npu_session_args(target, graph, config))
        self._npu_adopt_idle_session()

    def close(self):
        """As :meth:`NpuSession.close`, then TensorFlow's ``InteractiveSession.close`` (it
        leaves the default session and graph; the TensorFlow session is closed already)."""
        try:
            _NpuSessionMixin.close(self)
        finally:
            ORIGINAL_CLASSES["InteractiveSession"].close(self)
