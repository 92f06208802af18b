"""The runner of an NPU session: what ``run`` and its siblings do for a session that rewrites.

A session whose ``ConfigProto`` names ``NpuOptimizer`` (and does not switch it off with
``use_off_line`` false or a ``ps``/``default`` job) gets a :class:`SessionRunner` when it is
created; :mod:`npu_adapter.session.install` hands it ``run``, ``make_callable``, partial runs and
``close``. For each run:

1. the fetch structure and the fed tensors give the run signature
   (:mod:`npu_adapter.session.signatures`); the first run of a signature reads the user's graph
   into the execution graph (:mod:`npu_adapter.session.execution_graph`), rewrites it
   (:func:`npu_adapter.rewrite`, through the session's cache,
   :mod:`npu_adapter.session.rewrite_cache`) and installs the rewrite there; sessions with equal
   options share it;
2. the backend's runtime picks the variant of the signature the fed shapes select (a gear
   called directly, a ``lazy_recompile`` specialisation, the XLA backend's clusters compiled or
   on TensorFlow's kernels; :mod:`npu_adapter.backends.runtime`); when it asks, the run is
   timed and the time handed back to it (:meth:`~npu_adapter.backends.runtime.Program.ran`),
   with a replay of the run (its fetches, a copy of its feeds) on another variant;
3. the fetches and feeds are moved onto the execution graph (:mod:`npu_adapter.session.fetches`)
   and run on the runner's TensorFlow session of the execution graph, which TensorFlow's own
   ``Session.run`` serves: its checks, its errors and its result structures are the user's.

So every run executes the rewritten graph. With ``iterations_per_loop`` > 1 a run of the loop's
``IterationOp`` runs N steps in one TensorFlow loop (:mod:`npu_adapter.session.loop`). Partial
runs run the user's nodes as they are (a cluster would make a partial fetch wait for feeds it does
not need). When the session closes, its TensorFlow session may serve the next NPU session on the
graph (:mod:`npu_adapter.session.reuse`).
"""

import dataclasses
import re
import threading
import time

import numpy as np
import tensorflow as tf

# What every run needs sooner or later, imported with the session (a script imports npu_bridge
# at its top) rather than during its first run.
import npu_adapter.passes  # noqa: F401 - the pass pipeline every rewrite runs
from npu_adapter import distributed, system_options
from npu_adapter.api import rewrite
from npu_adapter.backends import get_backend
from npu_adapter.datadump import DumpSession
from npu_adapter.errors import RewriteError
from npu_adapter.graph.inline import inline_calls
from npu_adapter.precision.accelerate import (
    PHASE_LOW,
    AccelerateTrainSchedule,
    low_precision_config,
)
from npu_adapter.profiling import SessionProfiler
from npu_adapter.session import fetches as fetch_rules
from npu_adapter.session.execution_graph import ExecutionGraph, Installed
from npu_adapter.session.loop import install_loop, loop_target
from npu_adapter.session.rewrite_cache import cached_rewrite
from npu_adapter.session.signatures import Signature, shared_signature, signature_names
from npu_adapter.tf_compat import tf_session_method
from npu_adapter.vocabulary import NPU_SYSTEM_OP_ATTR

__all__ = ["SessionRunner"]

_TF_ERRORS = {
    "InvalidArgument": tf.errors.InvalidArgumentError,
    "Internal": tf.errors.InternalError,
    "Unimplemented": tf.errors.UnimplementedError,
}
# Scopes of the nodes the execution graph adds for a rewrite (cleared from traced node names).
_OUR_SCOPES = re.compile(r"^(?:npu_rewrite(?:_\d+)?/|npu_loop(?:_\d+)?/step/)")
# The same in error messages, and the prefix of a cluster member renamed when its cluster was
# inlined next to the alias that keeps its name (graph/inline.py).
_NODE_IN_MESSAGE = re.compile(
    r"(?:npu_rewrite(?:_\d+)?/|npu_loop(?:_\d+)?/step/)(?:GeOp\d+_\d+(?:_stage\d+)?/)?")
_PLANS_MAX = 1024
_FAST_TYPES = (tf.Tensor, tf.Operation, str)


def _fast_key(fetches, feed_dict):
    """A hashable key for a run whose fetches are a graph element or a flat list/tuple of them,
    with its feed keys; None for anything else (planned anew at each run)."""
    if isinstance(fetches, _FAST_TYPES):
        fetch_key = fetches
    elif isinstance(fetches, (list, tuple)) and all(isinstance(f, _FAST_TYPES) for f in fetches):
        fetch_key = (type(fetches), tuple(fetches))
    else:
        return None
    if not feed_dict:
        return fetch_key, ()
    feed_key = tuple(feed_dict)
    try:
        hash(feed_key)
    except TypeError:
        return None
    return fetch_key, feed_key


def _system_op(elements):
    """``"NPUInit"`` / ``"NPUShutdown"`` when one of ``elements`` is that NPU system op."""
    for element in elements:
        if isinstance(element, tf.Operation) and element.type == "NoOp":
            attr = element.node_def.attr.get(NPU_SYSTEM_OP_ATTR)
            if attr is not None and attr.s in (b"NPUInit", b"NPUShutdown"):
                return attr.s.decode()
    return None


def _traced(options, run_metadata):
    """``(options, run_metadata)`` asking for a full trace (the user's own, when given, are
    kept: their trace level raised and their metadata filled by the same run)."""
    full = tf.compat.v1.RunOptions.FULL_TRACE
    if options is None:
        options = tf.compat.v1.RunOptions(trace_level=full)
    elif options.trace_level != full:
        traced = tf.compat.v1.RunOptions()
        traced.CopyFrom(options)
        traced.trace_level = full
        options = traced
    return options, run_metadata if run_metadata is not None else tf.compat.v1.RunMetadata()


def _user_names(run_metadata):
    """Name the nodes of a traced run as the rewritten graph names them (``GeOp1_0``, the
    user's nodes), without the scopes of the execution graph."""
    for device in run_metadata.step_stats.dev_stats:
        for node in device.node_stats:
            if _OUR_SCOPES.match(node.node_name):
                node.node_name = _OUR_SCOPES.sub("", node.node_name)
                node.timeline_label = _OUR_SCOPES.sub("", node.timeline_label)


def _user_error(error, user_graph):
    """``error`` (an ``OpError`` of the execution graph) naming the user's node instead: its
    message without the execution graph's scopes, its ``op`` the user's op when there is one."""
    message = _NODE_IN_MESSAGE.sub("", error.message)
    op = error.op
    if op is not None:
        name = _NODE_IN_MESSAGE.sub("", op.name)
        try:
            op = user_graph.get_operation_by_name(name)
        except (KeyError, ValueError):
            op = None
    return type(error)(error.node_def, op, message)


def _maps(result, names):
    """Where the signature ``names`` is in ``result``'s graph: its fetches and targets under the
    user's names (the rewrite keeps them valid: ``RewriteResult.aliases``), its feeds where the
    fed tensors stand."""
    present = {node.name for node in result.graph_def.node}

    def tensor(name):
        return name if name.rpartition(":")[0] in present else result.tensor_map[name]

    return {"fetches": {t: tensor(t) for t in names.tensors},
            "targets": {o: o if o in present else result.op_map[o] for o in names.ops},
            "feeds": {f: result.feed_map.get(f, f) for f in names.feeds}}


def _add_cluster_stats(run_metadata, result):
    """Name in a traced run's step stats the clusters it executed, as a profile of the
    original shows its GeOps: one entry per cluster whose members ran (from the first member's
    start to the last one's end), unless the cluster ran as a node of its own."""
    membership = result.membership()
    owner = {member: cluster for cluster, members in membership.items() for member in members}
    for device in run_metadata.step_stats.dev_stats:
        names = {n.node_name for n in device.node_stats}
        spans = {}
        for node in device.node_stats:
            cluster = owner.get(node.node_name)
            if cluster is None or cluster in names:
                continue
            start = node.all_start_micros
            end = start + node.all_end_rel_micros
            first, last = spans.get(cluster, (start, end))
            spans[cluster] = (min(first, start), max(last, end))
        for cluster, (start, end) in sorted(spans.items()):
            stats = device.node_stats.add(node_name=cluster, all_start_micros=start,
                                          all_end_rel_micros=end - start,
                                          op_end_rel_micros=end - start)
            stats.timeline_label = f"{cluster} = GeOp()"


def _inner_config(config):
    """The ``ConfigProto`` of the runner's TensorFlow session: the user's, with Grappler on
    graphs of any size unless the user chose ``min_graph_nodes``. Grappler skips graphs under 4
    nodes by default, and a rewrite often collapses a small signature into fewer: a cluster
    call would then keep its own executor (~30 us per run on a 3-node graph) where a plain
    session runs the ops in its own."""
    out = tf.compat.v1.ConfigProto()
    if config is not None:
        out.CopyFrom(config)
    if out.graph_options.rewrite_options.min_graph_nodes == 0:
        out.graph_options.rewrite_options.min_graph_nodes = -1
    return out


class _Plan:
    """How to run one fetch structure with one set of feed keys.

    Attributes:
        mapper: the :class:`~npu_adapter.session.fetch_structures.FetchMapper` of the
            user's fetches.
        signature: its :class:`~npu_adapter.session.signatures.Signature`.
        program: the runtime's ``Program`` when the fed shapes select a variant, else None.
        fed_names: the fed tensor names in ``feed_dict`` order (None when a key is a tuple or a
            composite tensor: such feeds are moved key by key at each run).
        mapped: Installed → the fetched elements moved onto it (one per variant used).
        system_op: ``"NPUInit"``/``"NPUShutdown"`` when the run executes one.
    """

    __slots__ = ("mapper", "signature", "program", "fed_names", "mapped", "system_op")

    def __init__(self, mapper, signature, program, fed_names, system_op):
        self.mapper = mapper
        self.signature = signature
        self.program = program
        self.fed_names = fed_names
        self.mapped = {}
        self.system_op = system_op


def _moved(elements, installed):
    """``elements`` (tensors and operations of the user's graph) as installed."""
    return [installed.tensors[e.name] if isinstance(e, tf.Tensor) else installed.ops[e.name]
            for e in elements]


class SessionRunner:
    """The NPU half of one session (see the module docstring). Made by :meth:`create`.

    Attributes:
        config: the session's :class:`~npu_adapter.config.NpuConfig`.
        backend: the backend instance; runtime: its runtime for this session.
        rewrite_count: how many run signatures this session has run rewritten.
        reused: True when the session runs on the TensorFlow session a closed NPU session left
            (see :mod:`npu_adapter.session.reuse`).
    """

    @staticmethod
    def parse(config):
        """The ``NpuConfig`` of a session created with ``config`` when the session rewrites,
        else None. Invalid options raise ``NpuConfigError`` (before any session exists)."""
        from npu_adapter.config import NpuConfig

        npu_config = NpuConfig.from_config_proto(config)
        if npu_config.present and npu_config.use_off_line and \
                npu_config.job not in ("ps", "default"):
            return npu_config
        return None

    def __init__(self, npu_config, user_graph, target, config):
        self.config = npu_config
        self.user_graph = user_graph
        self.backend = get_backend(npu_config.npu_adapter_backend or "cpu")
        self.runtime = self.backend.create_runtime(npu_config)
        self.execution_graph = ExecutionGraph.for_graph(user_graph)
        self.target, config = distributed.session_target(target, config)
        self.inner_config = _inner_config(config)
        # accelerate_train_mode: the first part of training runs in low precision (its own
        # rewrite of each signature), then the session switches back once.
        self.accelerate = AccelerateTrainSchedule.from_config(npu_config)
        self._low_config = None
        instrumented = system_options.with_system_options(npu_config)
        self.dump = DumpSession.from_config(instrumented)
        self.profiler = SessionProfiler(instrumented)
        self.rewrite_count = 0
        self.reused = False
        self.closed = False
        self._lock = threading.Lock()
        self._inner = None
        self._reusable = True        # False once a callable or partial run lives in _inner
        self._plans = {}
        self._signatures = {}        # this session's signature keys -> Signature
        self._programs = {}          # Signature -> the runtime's Program

    # ------------------------------------------------------------------ run
    def run(self, session, fetches, feed_dict, options, run_metadata):
        """``Session.run`` of ``session`` (see the module docstring)."""
        if self.closed:
            raise RuntimeError("Attempted to use a closed Session.")
        config = self._run_config()
        key = _fast_key(fetches, feed_dict)
        if key is not None and config is not self.config:
            key = (key, "low")
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self._plan(fetches, feed_dict, config)
            if key is not None and len(self._plans) < _PLANS_MAX:
                self._plans[key] = plan
        if plan is None:  # nothing to run: TensorFlow checks the feeds and returns the structure
            return _tf_run(session, fetches, feed_dict, options, run_metadata)
        installed = plan.signature.installed
        selection = None
        if plan.program is not None:
            selection = self._selection(plan, feed_dict)
            installed = self._variant(plan.signature, selection.variant)
        mapped = plan.mapped.get(installed)
        if mapped is None:
            mapped = plan.mapped[installed] = _moved(plan.mapper.unique_fetches(), installed)
        user_feeds = feed_dict
        if feed_dict:
            if plan.fed_names is not None:
                feeds = installed.feeds
                feed_dict = {feeds[name]: value
                             for name, value in zip(plan.fed_names, feed_dict.values())}
            else:
                feed_dict = fetch_rules.map_feeds(
                    self.user_graph, fetch_rules.flat_feeds(feed_dict), installed.feeds)
        profiling = self.profiler.settings() is not None
        if profiling:
            options, run_metadata = _traced(options, run_metadata)
        inner = self._inner_session()
        try:
            start = time.perf_counter()
            if len(mapped) == 1:  # TensorFlow's fetch handling costs less for one element
                values = [_tf_run(inner, mapped[0], feed_dict, options, run_metadata)]
            else:
                values = _tf_run(inner, mapped, feed_dict, options, run_metadata)
            if selection is not None and selection.timed:  # the runtime measures its variants
                plan.program.ran(selection, time.perf_counter() - start,
                                 self._replay(plan, user_feeds))
        except tf.errors.OpError as error:
            raise _user_error(error, self.user_graph).with_traceback(
                error.__traceback__) from None
        if run_metadata is not None:
            _user_names(run_metadata)
        if profiling:
            self.profiler.after_run(run_metadata, iterations=plan.signature.iterations)
        if run_metadata is not None and plan.signature.result is not None:
            _add_cluster_stats(run_metadata, plan.signature.result)
        if plan.system_op is not None:
            self._system_op_ran(plan.system_op)
        return plan.mapper.build_results(values)

    def _replay(self, plan, feed_dict):
        """A function that runs this run's fetches again, with a copy of its feeds, on another
        variant of its signature (``replay(variant)``), for the backend's runtime to call on a
        thread of its own (the XLA backend builds executables so). None for a dumping
        session: its graphs write to the dump."""
        if self.dump is not None:
            return None
        copied = {key: np.array(value, copy=True) if isinstance(value, np.ndarray) else value
                  for key, value in (feed_dict or {}).items()}

        def replay(variant):
            installed = self._variant(plan.signature, variant)
            feeds = fetch_rules.map_feeds(self.user_graph, fetch_rules.flat_feeds(copied),
                                          installed.feeds) if copied else None
            try:
                _tf_run(self._inner_session(), _moved(plan.mapper.unique_fetches(), installed),
                        feeds, None, None)
            except tf.errors.OpError as error:
                raise _user_error(error, self.user_graph) from None

        return replay

    def _run_config(self):
        """The options this run is rewritten under (the low-precision phase of
        ``accelerate_train_mode`` has its own)."""
        if self.accelerate is None or self.accelerate.phase() != PHASE_LOW:
            return self.config
        if self._low_config is None:
            self._low_config = low_precision_config(self.config)
        return self._low_config

    def _plan(self, fetches, feed_dict, config):
        """The :class:`_Plan` of a run, or None when it fetches nothing."""
        if self.user_graph.version == 0:
            raise RuntimeError("The Session graph is empty. Add operations to the graph "
                               "before calling run().")
        mapper = fetch_rules.fetch_mapper(self.user_graph, fetches)
        elements = mapper.unique_fetches()
        items = fetch_rules.flat_feeds(feed_dict or {})
        fed = fetch_rules.feed_elements(self.user_graph, items)
        if not elements:
            return None
        signature = self._signature(signature_names(elements, fed), config)
        program = self._program(signature) if signature.iterations == 1 else None
        if program is not None and not program.needs_shapes:
            program = None
        simple = len(items) == len(feed_dict or ()) == len(fed)  # no tuple or composite key
        return _Plan(mapper, signature, program, [t.name for t in fed] if simple else None,
                     _system_op(elements))

    def _selection(self, plan, feed_dict):
        """The runtime's :class:`~npu_adapter.backends.runtime.Selection` for the fed shapes
        (composite keys are no gear inputs: their components are not looked at)."""
        shapes = {}
        if feed_dict:
            if plan.fed_names is not None:
                pairs = zip(plan.fed_names, feed_dict.values())
            else:
                pairs = ((self.user_graph.as_graph_element(key).name, value)
                         for key, value in fetch_rules.flat_feeds(feed_dict)
                         if isinstance(key, (tf.Tensor, str)))
            shapes = {name: fetch_rules.shape_of(value) for name, value in pairs}
        return plan.program.select(shapes)

    def _system_op_ran(self, op_type):
        if op_type == "NPUInit":
            system_options.on_initialize_system(self.config)
        else:
            system_options.on_shutdown_system()

    def _inner_session(self):
        """The TensorFlow session of the execution graph this session runs on: an idle one of
        a closed NPU session (:mod:`npu_adapter.session.reuse`) or a new one, on first use."""
        inner = self._inner
        if inner is not None:
            return inner
        from npu_adapter.session.classes import PlainSession

        with self._lock:
            if self.closed:
                raise RuntimeError("Attempted to use a closed Session.")
            if self._inner is None:
                key = self._pool_key()
                inner = self.execution_graph.pool.take(key) if key is not None else None
                self.reused = inner is not None
                if inner is None:
                    inner = PlainSession(self.target, self.execution_graph.graph,
                                         self.inner_config)
                self._inner = inner
            return self._inner

    def _pool_key(self):
        """The key of this session's TensorFlow session among the idle ones, or None when it
        may not serve another NPU session (see :mod:`npu_adapter.session.reuse`)."""
        if not self.backend.reuses_tf_sessions or not self.config.npu_adapter_reuse_sessions \
                or self.dump is not None or self.target not in ("", b""):
            return None
        return self.inner_config.SerializeToString(deterministic=True)

    # ------------------------------------------------------------------ signatures
    def _signature(self, names, config):
        """The signature ``names`` rewritten under ``config``, shared through the execution
        graph with the sessions of equal options (a dumping session keeps its own: its graphs
        report to its dump)."""
        key = (names, config, self.dump.serial if self.dump is not None else None)
        signature = self._signatures.get(key)
        if signature is None:
            signature = shared_signature(self.execution_graph, key,
                                         lambda: self._build(names, config))
            with self._lock:
                if key not in self._signatures:
                    self._signatures[key] = signature
                    self.rewrite_count += 1
        return signature

    def _build(self, names, config):
        """Rewrite the signature ``names`` and install it in the execution graph."""
        execution_graph = self.execution_graph
        user = execution_graph.user_graph()
        signature = {"fetches": list(names.tensors), "targets": list(names.ops),
                     "feeds": list(names.feeds), "backend": self.backend,
                     "graph_num": execution_graph.graph_num()}
        try:
            if self.backend.needs_constant_data:  # (the data is not in the caches' key)
                result = rewrite(user.full_graph_def(self.user_graph), config, **signature,
                                 dump_dir=config.npu_adapter_dump_dir or None)
                result = dataclasses.replace(
                    result, graph_def=execution_graph.light(result.graph_def))
            else:
                result = cached_rewrite(user.graph_def, user.digest(), config, **signature)
        except RewriteError as exc:
            error_cls = _TF_ERRORS.get(exc.code, tf.errors.InvalidArgumentError)
            raise error_cls(None, None, str(exc)) from exc
        maps = _maps(result, names)
        if loop_target(names.ops, config) is not None:
            iterations = int(config.iterations_per_loop)
            installed = install_loop(execution_graph, self._instrumented(result.graph_def),
                                     iterations, **maps)
            return Signature(names, result, installed, iterations)
        graph_def = self._installable(result.graph_def, result)
        return Signature(names, result, execution_graph.install(graph_def, **maps))

    def _installable(self, graph_def, result):
        """``graph_def`` (the rewrite of ``result``, or a variant of it) as the execution graph
        takes it: reporting to the dump, known to the profiler, and for a backend whose clusters
        are plain TensorFlow functions, with the calls inlined under the user's node names as
        TensorFlow's first run would inline them (:mod:`npu_adapter.graph.inline`)."""
        graph_def = self._instrumented(graph_def)
        if self.dump is None and self.backend.inlines_calls_at_install:
            clusters = {c.name for c in result.clusters}
            graph_def = inline_calls(graph_def, lambda call, fdef: call.name in clusters,
                                     body_names=True, direct_results=True).graph_def
        return graph_def

    def _instrumented(self, graph_def):
        if self.dump is not None:
            graph_def = self.dump.instrument(graph_def)
        self.profiler.register_graph(graph_def)
        return graph_def

    def _program(self, signature):
        program = self._programs.get(signature)
        if program is None and signature.result is not None:
            program = self.runtime.prepare(signature.result, signature.names.feeds)
            with self._lock:
                program = self._programs.setdefault(signature, program)
        return program

    def _variant(self, signature, variant):
        """The Installed of ``variant`` of ``signature`` (installed on first use, shared)."""
        if variant.key is None:
            return signature.installed

        def install():
            program = self._program(signature)
            result = signature.result
            graph_def = self._installable(program.variant_graph(variant.key), result)
            return self.execution_graph.install(graph_def, **_maps(result, signature.names))

        return signature.variant(variant.key, install)

    # ------------------------------------------------------------------ callables, partial runs
    def make_callable(self, session, fetches, feed_list, accept_options):
        """``Session.make_callable``: with feeds, a function calling ``session.run`` (gears and
        lazy_recompile select per call); without, TensorFlow's callable of the installed
        fetches."""
        if feed_list is not None:
            if not isinstance(feed_list, (list, tuple)):
                raise TypeError("Argument `feed_list` must be a list or tuple. "
                                f"Received: feed_list={feed_list}")
            feed_list = list(feed_list)

            def call(*feed_args, **kwargs):
                return session.run(fetches, feed_dict=dict(zip(feed_list, feed_args)), **kwargs)

            return call
        if self.closed:  # TensorFlow's callable of a closed session, as a plain one makes
            return _tf_method("make_callable")(session, fetches, None, accept_options)
        mapper = fetch_rules.fetch_mapper(self.user_graph, fetches)
        elements = mapper.unique_fetches()
        installed = self._signature(signature_names(elements, []), self.config).installed
        self._reusable = False  # TensorFlow keeps the callable in its session until it closes
        inner = _tf_method("make_callable")(self._inner_session(), _moved(elements, installed),
                                            None, accept_options)

        def call(*args, **kwargs):
            return mapper.build_results(inner(*args, **kwargs))

        return call

    def make_callable_from_options(self, callable_options):
        """The Keras backend's entry: the names in ``callable_options`` are the user's."""
        graph = self.user_graph
        fetched = [graph.get_tensor_by_name(name) for name in callable_options.fetch]
        targets = [graph.get_operation_by_name(name) for name in callable_options.target]
        fed = [graph.get_tensor_by_name(name) for name in callable_options.feed]
        installed = self._signature(signature_names(fetched + targets, fed),
                                    self.config).installed
        options = type(callable_options)()
        options.CopyFrom(callable_options)
        del options.fetch[:]
        del options.target[:]
        del options.feed[:]
        options.fetch.extend(installed.tensors[t.name].name for t in fetched)
        options.target.extend(installed.ops[o.name].name for o in targets)
        options.feed.extend(installed.feeds[t.name].name for t in fed)
        self._reusable = False
        return _tf_method("_make_callable_from_options")(self._inner_session(), options)

    def _user_nodes(self):
        """An Installed mapping every user name to its node in the execution graph (the
        user's nodes as they are: what partial runs run)."""
        self.execution_graph.user_graph()  # every user node mirrored
        graph = self.execution_graph.graph

        class _ByName(dict):
            def __init__(self, lookup):
                super().__init__()
                self._lookup = lookup

            def __missing__(self, name):
                return self._lookup(name)

        return Installed(_ByName(graph.get_tensor_by_name), _ByName(graph.get_operation_by_name),
                         _ByName(graph.get_tensor_by_name))

    def partial_run_setup(self, fetches, feeds):
        """``Session.partial_run_setup`` on the user's nodes (see the module docstring)."""
        if self.closed:
            raise RuntimeError("Attempted to use a closed Session.")
        nodes = self._user_nodes()
        elements = fetch_rules.fetch_mapper(self.user_graph, fetches).unique_fetches()
        if feeds is not None:
            keys = [feeds] if not isinstance(feeds, (list, tuple)) else feeds
            fed = fetch_rules.feed_elements(self.user_graph, [(key, None) for key in keys])
            feeds = [nodes.feeds[t.name] for t in fed]
        self._reusable = False  # an unfinished partial run lives in TensorFlow's session
        return _tf_method("partial_run_setup")(self._inner_session(),
                                               _moved(elements, nodes), feeds)

    def partial_run(self, handle, fetches, feed_dict):
        """``Session.partial_run`` on the user's nodes."""
        if self.closed:
            raise RuntimeError("Attempted to use a closed Session.")
        nodes = self._user_nodes()
        mapper = fetch_rules.fetch_mapper(self.user_graph, fetches)
        if feed_dict:
            feed_dict = fetch_rules.map_feeds(self.user_graph, fetch_rules.flat_feeds(feed_dict),
                                              nodes.feeds)
        values = _tf_method("partial_run")(self._inner_session(), handle,
                                           _moved(mapper.unique_fetches(), nodes), feed_dict)
        return mapper.build_results(values)

    # ------------------------------------------------------------------ close
    def close(self):
        """Hand the TensorFlow session to the next NPU session on the graph when nothing in
        it outlives this one (else close it), release the runtime, finish the dump and the
        profile. Idempotent."""
        with self._lock:
            self.closed = True
            inner, self._inner = self._inner, None
        try:
            if inner is not None:
                key = self._pool_key() if self._reusable else None
                if key is not None and self.execution_graph.stateful_op() is None:
                    self.execution_graph.pool.give(key, inner)
                else:
                    inner.close()
        finally:
            for part in (self.runtime, self.dump, self.profiler):
                if part is not None:
                    part.close()

    # ------------------------------------------------------------------ what users ask
    def runtime_stats(self):
        """The backend runtime's :class:`~npu_adapter.backends.runtime.RuntimeStats`."""
        return self.runtime.stats()

    def gear_stats(self):
        """Per cluster with gears: runs, runs per gear, elements fed and elements computed
        (padded), the policy and the padding waste ratio ``1 - fed / computed``. Only fed inputs
        are counted (dataset inputs are not visible to the session)."""
        stats = self.runtime.stats()
        return {name: {"runs": st.runs, "gear_counts": dict(st.gear_counts),
                       "actual_elements": st.actual_elements,
                       "padded_elements": st.padded_elements, "policy": st.policy,
                       "waste_ratio": st.waste_ratio}
                for name, st in stats.clusters.items() if st.runs}

    def lazy_stats(self):
        """lazy_recompile: specialisations built (first time per shape), re-specialisations
        (a shape evicted earlier came back), evictions (least frequently used first) and hits."""
        stats = self.runtime.stats()
        return {k: getattr(stats, k)
                for k in ("specializations", "respecializations", "evictions", "hits")}

    def accelerate_stats(self):
        """accelerate_train_mode: runs, low-precision runs and when the session switched back
        to the original precision (None when the option is not set)."""
        return self.accelerate.stats() if self.accelerate is not None else None

    def rewrite_result(self, fetches, feed_dict=None):
        """The :class:`~npu_adapter.pipeline.result.RewriteResult` of the signature of a run of
        ``fetches`` with the keys of ``feed_dict`` (rewritten now if it was not yet), with the
        user's weights in its graph."""
        elements = fetch_rules.fetch_mapper(self.user_graph, fetches).unique_fetches()
        fed = fetch_rules.feed_elements(self.user_graph,
                                        fetch_rules.flat_feeds(dict.fromkeys(feed_dict or ())))
        result = self._signature(signature_names(elements, fed), self.config).result
        full = type(result.graph_def)()
        full.CopyFrom(result.graph_def)
        self.execution_graph.restore_payloads(full)
        return dataclasses.replace(result, graph_def=full)


_tf_method = tf_session_method
_tf_run = tf_session_method("run")
