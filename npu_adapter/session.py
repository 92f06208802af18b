"""``NpuSession``: a ``tf.compat.v1.Session`` that partitions each run signature for a backend.

What the original does with GraphOptimizationPasses inside TensorFlow's runtime, we do in Python
around ``Session.run``:

1. The session's ``ConfigProto`` is parsed into an :class:`~npu_adapter.config.NpuConfig` when
   the session is created (bad options raise ``NpuConfigError`` before any session exists).
   Without an ``NpuOptimizer`` entry, or with ``use_off_line`` false, the session is exactly
   TensorFlow's: no rewrite, no extra nodes.
2. Per run signature (fetched tensors, target ops, fed tensors) the client graph is rewritten once
   (:func:`npu_adapter.rewrite`), and the changed part is imported into the session's own graph
   under ``npu_rewrite_<N>/`` (:mod:`npu_adapter.graph.splice`): unchanged nodes — variables,
   queues, iterators, tables, placeholders — are the user's own, so state is shared between
   rewritten and plain runs and feeds land on the user's tensors (TensorFlow's own feed errors
   name them). The result is cached; concurrent ``run`` calls of one signature rewrite it once.
3. ``run`` maps the fetches to the rewritten graph and rebuilds the user's fetch structure.

The graph may keep growing after the first run (new signatures are rewritten when first used).
A finalized graph (``MonitoredSession``) is briefly unfinalized to import a rewrite and finalized
again. ``partial_run`` is not rewritten.
"""

import itertools
import threading
import weakref

import numpy as np
import tensorflow as tf

from npu_adapter import distributed
from npu_adapter.errors import RewriteError

__all__ = ["NpuSession", "NpuInteractiveSession", "install", "uninstall", "is_installed",
           "plain_session_class"]

_tf1 = tf.compat.v1
_ORIGINAL = {"Session": _tf1.Session, "InteractiveSession": _tf1.InteractiveSession}
_INSTALL_LOCK = threading.Lock()
_INSTALLED = [False]
# One counter per tf.Graph: the N of GeOp<N>_<k> and of npu_rewrite_<N>/ must be unique in a
# graph even when several sessions share it.
_GRAPH_COUNTERS = weakref.WeakKeyDictionary()
_GRAPH_LOCKS = weakref.WeakKeyDictionary()
_COUNTER_LOCK = threading.Lock()

_TF_ERRORS = {
    "InvalidArgument": tf.errors.InvalidArgumentError,
    "Internal": tf.errors.InternalError,
    "Unimplemented": tf.errors.UnimplementedError,
}


def _graph_state(graph):
    with _COUNTER_LOCK:
        if graph not in _GRAPH_COUNTERS:
            _GRAPH_COUNTERS[graph] = itertools.count(1)
            _GRAPH_LOCKS[graph] = threading.RLock()
        return _GRAPH_COUNTERS[graph], _GRAPH_LOCKS[graph]


# lazy_recompile keeps at most this many shape specialisations per signature (spec §6.3).
LAZY_CACHE_SIZE = 10


class _Signature:
    """The cached rewrite of one run signature."""

    __slots__ = ("ready", "error", "tensor_map", "op_map", "result", "lazy", "gears",
                 "specs", "seen_shapes", "feeds", "gear_variants")

    def __init__(self):
        self.ready = threading.Event()
        self.error = None
        self.tensor_map = {}   # user tensor name -> tensor in the session graph
        self.op_map = {}       # user op name -> op in the session graph
        self.result = None     # RewriteResult (None when nothing was rewritten)
        self.lazy = False      # a cluster runs in lazy_recompile mode
        self.gears = []        # (cluster name, GearTable, policy) of clusters with gears
        self.specs = {}        # lazy_recompile: shape key -> [entry, use count, age]
        self.seen_shapes = set()  # every shape key ever specialised (to count re-specialising)
        self.gear_variants = {}   # chosen gears -> entry calling those gears directly
        self.feeds = ()        # fed tensor names (sorted), the order of shape keys


def _lazy_and_gears(result):
    """Whether a rewrite has lazy_recompile clusters, and its gear tables."""
    from npu_adapter.vocabulary import CLUSTER_GEARS_ATTR

    lazy = False
    gears = []
    for node in result.graph_def.node:
        attrs = node.attr
        if attrs.get("_dynamic_input") is not None and attrs["_dynamic_input"].s == b"1" and \
                attrs.get("_dynamic_graph_execute_mode") is not None and \
                attrs["_dynamic_graph_execute_mode"].s == b"lazy_recompile":
            lazy = True
        if CLUSTER_GEARS_ATTR in attrs:
            table = result.cluster(node.name).gear_table()
            gears.append((node.name, table, attrs["_npu_adapter_gear_policy"].s.decode()))
    return lazy, gears


def _fetch_mapper(graph, fetches):
    from tensorflow.python.client import session as tf_session

    with graph.as_default():
        return tf_session._FetchMapper.for_fetch(fetches)  # TF's own fetch logic (private)


def _fed_tensors(graph, feed_keys):
    """Names of the tensors a feed_dict's keys feed (SparseTensor keys expand to their parts)."""
    from tensorflow.python.client import session as tf_session

    names = []
    for key in feed_keys:
        parts = [key]
        for tensor_type, _, _, partial_feed_fn in tf_session._REGISTERED_EXPANSIONS:
            if isinstance(key, tensor_type):
                parts = partial_feed_fn(key)  # composite keys (SparseTensor) → their tensors
                break
        for part in parts:
            try:
                element = graph.as_graph_element(part, allow_tensor=True, allow_operation=False)
            except (TypeError, ValueError, KeyError):
                continue  # TensorFlow will report the bad key itself
            names.append(element.name)
    return sorted(set(names))


_FAST_CACHE_SIZE = 1024
_FAST_TYPES = (tf.Tensor, tf.Operation, str)


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


def _feeds_by_name(graph, feed_dict):
    """Fed values by tensor name (composite keys such as SparseTensor are skipped)."""
    fed = {}
    for key, value in (feed_dict or {}).items():
        try:
            element = graph.as_graph_element(key, allow_tensor=True, allow_operation=False)
        except (TypeError, ValueError, KeyError):
            continue
        fed[element.name] = value
    return fed


def _call_gears(result, gear_of):
    """A copy of ``result`` whose gear clusters (name → gear index) call that gear's function
    instead of their dispatcher."""
    import copy

    graph_def = type(result.graph_def)()
    graph_def.CopyFrom(result.graph_def)
    for node in graph_def.node:
        g = gear_of.get(node.name)
        if g is None:
            continue
        key = "f" if "f" in node.attr else "function"
        node.attr[key].func.name = f"{node.attr[key].func.name}_gear_{g}"
    direct = copy.copy(result)
    direct.graph_def = graph_def
    return direct


def _pin_fed_shapes(result, shapes):
    """A copy of ``result`` whose cluster functions see the fed tensors with static shapes."""
    import copy

    from npu_adapter.graph.functions import pin_arg_shapes
    from npu_adapter.vocabulary import CLUSTER_INPUTS_ATTR

    graph_def = type(result.graph_def)()
    graph_def.CopyFrom(result.graph_def)
    functions = {f.signature.name: f for f in graph_def.library.function}
    for node in graph_def.node:
        if CLUSTER_INPUTS_ATTR not in node.attr:
            continue
        inputs = [s.decode() for s in node.attr[CLUSTER_INPUTS_ATTR].list.s]
        pins = {k: shapes[name] for k, name in enumerate(inputs) if name in shapes}
        fname = node.attr["f"].func.name if "f" in node.attr else node.attr["function"].func.name
        if pins and fname in functions:
            functions[fname].CopyFrom(pin_arg_shapes(functions[fname], pins))
    pinned = copy.copy(result)
    pinned.graph_def = graph_def
    return pinned


class _NpuRunMixin:
    """``run``/``make_callable`` that go through the per-signature rewrite."""

    def _npu_init(self, config):
        from npu_adapter.config import NpuConfig

        self._npu_config = NpuConfig.from_config_proto(config)
        self._npu_enabled = bool(self._npu_config.present and self._npu_config.use_off_line
                                 and self._npu_config.job not in ("ps", "default"))
        self._npu_signatures = {}
        self._npu_fast = {}
        self._npu_lock = threading.Lock()
        self._npu_rewrites = 0
        self._npu_gear_stats = {}
        self._npu_lazy_stats = {"specializations": 0, "respecializations": 0, "evictions": 0,
                                "hits": 0}

    @property
    def npu_config(self):
        """The session's :class:`~npu_adapter.config.NpuConfig`."""
        return self._npu_config

    @property
    def npu_rewrite_count(self):
        """How many run signatures this session has rewritten so far."""
        return self._npu_rewrites

    def npu_gear_stats(self):
        """Per cluster with gears: runs, runs per gear, elements fed and elements computed
        (padded), and the padding waste ratio ``1 - fed / computed``. Only fed inputs are
        counted (dataset inputs are not visible to the session)."""
        with self._npu_lock:
            out = {}
            for name, st in self._npu_gear_stats.items():
                computed = st["padded_elements"]
                out[name] = dict(st, gear_counts=dict(st["gear_counts"]),
                                 waste_ratio=(1 - st["actual_elements"] / computed)
                                 if computed else 0.0)
            return out

    def npu_lazy_stats(self):
        """lazy_recompile: specialisations built (first time per shape), re-specialisations
        (a shape evicted earlier came back), evictions (least frequently used first, at most
        ``LAZY_CACHE_SIZE`` kept per signature) and cache hits."""
        with self._npu_lock:
            return dict(self._npu_lazy_stats)

    def npu_rewrite_result(self, fetches, feed_dict=None):
        """The :class:`~npu_adapter.pipeline.result.RewriteResult` of this signature (or None)."""
        mapper = _fetch_mapper(self.graph, fetches)
        entry = self._npu_signature(mapper.unique_fetches(), list(feed_dict or ()))
        return entry.result

    # ------------------------------------------------------------------------ signatures
    def _npu_signature(self, elements, feed_keys):
        tensors = tuple(sorted({e.name for e in elements if isinstance(e, tf.Tensor)}))
        ops = tuple(sorted({e.name for e in elements if isinstance(e, tf.Operation)}))
        feeds = tuple(_fed_tensors(self.graph, feed_keys))
        key = (tensors, ops, feeds)
        with self._npu_lock:
            entry = self._npu_signatures.get(key)
            owner = entry is None
            if owner:
                entry = _Signature()
                self._npu_signatures[key] = entry
        if owner:
            try:
                self._npu_build(entry, tensors, ops, feeds)
            except BaseException as exc:
                entry.error = exc
                with self._npu_lock:
                    # Do not cache failures: a later run (e.g. after fixing a feed) may succeed.
                    self._npu_signatures.pop(key, None)
                raise
            finally:
                entry.ready.set()
        else:
            entry.ready.wait()
            if entry.error is not None:
                raise entry.error
        return entry

    def _npu_build(self, entry, tensors, ops, feeds, shapes=None):
        from npu_adapter.api import rewrite

        graph = self.graph
        counter, graph_lock = _graph_state(graph)
        with graph_lock:
            graph_num = next(counter)
            graph_def = graph.as_graph_def(add_shapes=False)
            config = self._npu_config
            try:
                result = rewrite(graph_def, config, fetches=list(tensors), targets=list(ops),
                                 feeds=list(feeds),
                                 backend=config.npu_adapter_backend or "cpu",
                                 dump_dir=config.npu_adapter_dump_dir or None,
                                 graph_num=graph_num)
            except RewriteError as exc:
                error_cls = _TF_ERRORS.get(exc.code, tf.errors.InvalidArgumentError)
                raise error_cls(None, None, str(exc)) from exc
            entry.result = result
            entry.feeds = feeds
            if shapes is None:
                entry.lazy, entry.gears = _lazy_and_gears(result)
            if not result.clusters and not result.modified:
                self._npu_rewrites += 1
                return
            if shapes:
                result = _pin_fed_shapes(result, shapes)
                entry.result = result
            self._npu_install(entry, result, tensors, ops, f"npu_rewrite_{graph_num}",
                              original_graph_def=graph_def)
            self._npu_rewrites += 1

    def _npu_install(self, entry, result, tensors, ops, scope, original_graph_def=None):
        """Splice ``result`` into the session graph and record the fetch mapping in ``entry``.
        Call with the graph's lock held; ``original_graph_def`` is the graph's GraphDef taken
        under that lock, if the caller has it."""
        from npu_adapter.graph.splice import splice_into_graph

        graph = self.graph
        finalized = graph.finalized
        if finalized:
            graph._unsafe_unfinalize()  # MonitoredSession finalizes graphs
        try:
            scope = graph.unique_name(scope, mark_as_used=False)
            rename = splice_into_graph(graph, result.graph_def, scope, original_graph_def)
        finally:
            if finalized:
                graph.finalize()
        for name in tensors:
            target = result.tensor_map.get(name, name)
            node, _, port = target.rpartition(":")
            entry.tensor_map[name] = graph.get_tensor_by_name(f"{rename(node)}:{port}")
        for name in ops:
            entry.op_map[name] = graph.get_operation_by_name(
                rename(result.op_map.get(name, name)))

    def _npu_count_gears(self, entry, fed):
        """Pick each gear cluster's gear from the fed shapes and count it. Returns the chosen
        gears (one index per cluster) when every cluster is ``exact`` with fed inputs and a
        matching gear — then the gear can be called directly — else None."""
        chosen = []
        for cluster, table, policy in entry.gears:
            try:
                shapes = [np.shape(fed[name]) for name in table.names]
            except KeyError:
                chosen = None  # an input is not fed (e.g. a dataset): not visible here
                continue
            g = table.select(shapes, policy)
            if g is None:
                chosen = None  # the run fails in the graph with the named gear error
                continue
            if chosen is not None:
                chosen = chosen + [g] if policy == "exact" else None
            fed_elements = sum(int(np.prod(s)) for s in shapes)
            with self._npu_lock:
                st = self._npu_gear_stats.setdefault(cluster, {
                    "runs": 0, "gear_counts": {}, "actual_elements": 0, "padded_elements": 0,
                    "policy": policy})
                st["runs"] += 1
                st["gear_counts"][g] = st["gear_counts"].get(g, 0) + 1
                st["actual_elements"] += fed_elements
                st["padded_elements"] += table.elements(g)
        return tuple(chosen) if chosen else None

    def _npu_gear_variant(self, entry, chosen, elements):
        """The signature with each gear cluster calling its chosen gear's function directly.

        Like the original GeOp kernel, which picks the gear on the host from the input shapes,
        the session knows the fed shapes: calling the gear copy directly skips the in-graph
        dispatcher (shape ops, comparisons, a Case and a nested call) on every run. Built once
        per gear combination; the dispatcher stays for inputs the session cannot see.
        """
        with self._npu_lock:
            variant = entry.gear_variants.get(chosen)
            owner = variant is None
            if owner:
                variant = entry.gear_variants[chosen] = _Signature()
        if not owner:
            variant.ready.wait()
            if variant.error is not None:
                raise variant.error
            return variant
        try:
            result = _call_gears(entry.result, {c: g for (c, _, _), g in
                                                zip(entry.gears, chosen)})
            variant.result = result
            tensors = tuple(sorted({e.name for e in elements if isinstance(e, tf.Tensor)}))
            ops = tuple(sorted({e.name for e in elements if isinstance(e, tf.Operation)}))
            _, graph_lock = _graph_state(self.graph)
            with graph_lock:
                suffix = "_".join(str(g) for g in chosen)
                self._npu_install(variant, result, tensors, ops,
                                  f"npu_rewrite_{entry.result.clusters[0].name}_gear_{suffix}")
        except BaseException as exc:
            variant.error = exc
            with self._npu_lock:
                entry.gear_variants.pop(chosen, None)
            raise
        finally:
            variant.ready.set()
        return variant

    def _npu_specialize(self, entry, elements, fed):
        """lazy_recompile: the rewrite specialised to the fed shapes (LFU cache of
        ``LAZY_CACHE_SIZE`` per signature), built on first use of a shape."""
        key = tuple(tuple(np.shape(fed[name])) if name in fed else None for name in entry.feeds)
        with self._npu_lock:
            slot = entry.specs.get(key)
            if slot is not None:
                slot[1] += 1
                self._npu_lazy_stats["hits"] += 1
                spec = slot[0]
        if slot is not None:
            spec.ready.wait()
            if spec.error is not None:
                raise spec.error
            return spec
        spec = _Signature()
        tensors = tuple(sorted({e.name for e in elements if isinstance(e, tf.Tensor)}))
        ops = tuple(sorted({e.name for e in elements if isinstance(e, tf.Operation)}))
        shapes = {name: shape for name, shape in zip(entry.feeds, key) if shape is not None}
        with self._npu_lock:
            stats = self._npu_lazy_stats
            stats["respecializations" if key in entry.seen_shapes else "specializations"] += 1
            entry.seen_shapes.add(key)
            live = list(entry.specs)
            if len(live) >= LAZY_CACHE_SIZE:
                # Evict the least frequently used shape (oldest first among equals).
                victim = min(live, key=lambda k: (entry.specs[k][1], entry.specs[k][2]))
                del entry.specs[victim]
                stats["evictions"] += 1
            entry.specs[key] = [spec, 1, stats["specializations"] + stats["respecializations"]]
        try:
            self._npu_build(spec, tensors, ops, entry.feeds, shapes=shapes)
        except BaseException as exc:
            spec.error = exc
            with self._npu_lock:
                entry.specs.pop(key, None)
            raise
        finally:
            spec.ready.set()
        return spec

    def _npu_map(self, entry, elements):
        mapped = []
        for e in elements:
            if isinstance(e, tf.Tensor):
                mapped.append(entry.tensor_map.get(e.name, e))
            elif isinstance(e, tf.Operation):
                mapped.append(entry.op_map.get(e.name, e))
            else:
                mapped.append(e)
        return mapped

    # ------------------------------------------------------------------------ public API
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Run ``fetches`` like ``tf.compat.v1.Session.run``, on the rewritten graph."""
        if not self._npu_enabled:
            return super().run(fetches, feed_dict, options, run_metadata)
        key = _fast_key(fetches, feed_dict)
        hit = self._npu_fast.get(key) if key is not None else None
        if hit is not None:
            # Steady state: same fetch objects and feed keys as an earlier run.
            mapper, mapped, gears = hit
            if gears is not None:
                mapped = self._npu_gear_mapped(gears, feed_dict)
            if mapper is None:
                return super().run(fetches, feed_dict, options, run_metadata)
            return mapper.build_results(super().run(mapped, feed_dict, options, run_metadata))
        mapper = _fetch_mapper(self.graph, fetches)
        elements = mapper.unique_fetches()
        signature = entry = self._npu_signature(elements, list(feed_dict or ()))
        if entry.lazy or entry.gears:
            fed = _feeds_by_name(self.graph, feed_dict)
            if entry.gears:
                chosen = self._npu_count_gears(entry, fed)
                if chosen is not None and not entry.lazy:
                    entry = self._npu_gear_variant(entry, chosen, elements)
            if entry.lazy:
                entry = self._npu_specialize(entry, elements, fed)
        if entry.result is None or not entry.tensor_map and not entry.op_map:
            self._npu_remember(key, signature, None, None, elements, feed_dict)
            return super().run(fetches, feed_dict, options, run_metadata)
        mapped = self._npu_map(entry, elements)
        # A gear signature remembers the dispatcher's mapping as its fallback, not a gear's.
        fallback = self._npu_map(signature, elements) if entry is not signature else mapped
        self._npu_remember(key, signature, mapper, fallback, elements, feed_dict)
        return mapper.build_results(super().run(mapped, feed_dict, options, run_metadata))

    def _npu_remember(self, key, entry, mapper, mapped, elements, feed_dict):
        """Remember how to run this exact fetch/feed-key combination. lazy_recompile mappings
        depend on the fed shapes and are not remembered; gear signatures are, with what is
        needed to pick the gear from the fed values on each run."""
        if key is None or entry.lazy or len(self._npu_fast) >= _FAST_CACHE_SIZE:
            return
        gears = None
        if entry.gears:
            names = tuple(_feeds_by_name(self.graph, dict.fromkeys(feed_dict)))
            if len(names) != len(feed_dict or ()):
                return  # a composite feed key: take the general path every time
            gears = (entry, elements, names, mapped, {})
        self._npu_fast[key] = (mapper, mapped, gears)

    def _npu_gear_mapped(self, gears, feed_dict):
        """Fast path of a gear signature: pick the gears from the fed shapes, return the
        mapped fetches of that gear combination (the dispatcher's when none applies)."""
        entry, elements, names, default, by_gear = gears
        fed = dict(zip(names, feed_dict.values()))
        chosen = self._npu_count_gears(entry, fed)
        if chosen is None:
            return default
        mapped = by_gear.get(chosen)
        if mapped is None:
            variant = self._npu_gear_variant(entry, chosen, elements)
            mapped = by_gear[chosen] = self._npu_map(variant, elements)
        return mapped

    def make_callable(self, fetches, feed_list=None, accept_options=False):
        """``Session.make_callable`` on the rewritten graph (same calling convention)."""
        if not self._npu_enabled:
            return super().make_callable(fetches, feed_list, accept_options)
        mapper = _fetch_mapper(self.graph, fetches)
        elements = mapper.unique_fetches()
        entry = self._npu_signature(elements, list(feed_list or ()))
        inner = super().make_callable(self._npu_map(entry, elements), feed_list, accept_options)

        def call(*args, **kwargs):
            return mapper.build_results(inner(*args, **kwargs))

        return call


class NpuSession(_NpuRunMixin, _ORIGINAL["Session"]):
    """``tf.compat.v1.Session`` that rewrites each run signature for the configured backend.

    Args are TensorFlow's: ``target``, ``graph``, ``config`` (a ``ConfigProto``; its
    ``NpuOptimizer`` custom optimizer carries the options).
    """

    def __init__(self, target="", graph=None, config=None):
        self._npu_init(config)  # validate options before a session exists
        target, config = distributed.session_target(target, config)  # a rank: its own server
        super().__init__(target, graph, config)


class NpuInteractiveSession(_NpuRunMixin, _ORIGINAL["InteractiveSession"]):
    """``tf.compat.v1.InteractiveSession`` counterpart of :class:`NpuSession`."""

    def __init__(self, target="", graph=None, config=None):
        self._npu_init(config)
        target, config = distributed.session_target(target, config)
        super().__init__(target, graph, config)


def _session_homes():
    """Every module object through which scripts reach the TF1 session classes.

    ``tensorflow.compat.v1`` and ``tensorflow._api.v2.compat.v1`` can be different objects
    (importing tf_keras replaces one of them), and ``tf.compat.v1`` is looked up afresh, so all
    of them are patched together.
    """
    import sys

    homes = []
    for module in (tf.compat.v1, sys.modules.get("tensorflow.compat.v1"),
                   sys.modules.get("tensorflow._api.v2.compat.v1")):
        if module is not None and not any(module is seen for seen in homes):
            homes.append(module)
    return homes


def _set_classes(session_cls, interactive_cls):
    for module in _session_homes():
        module.Session = session_cls
        module.InteractiveSession = interactive_cls
    if hasattr(tf, "Session"):
        tf.Session = session_cls
    if hasattr(tf, "InteractiveSession"):
        tf.InteractiveSession = interactive_cls


def install():
    """Make ``tf.compat.v1.Session``/``InteractiveSession`` (and ``tf.Session``) NPU sessions.

    This is what importing ``npu_bridge`` does, as loading the original plugin patches
    ``tf.Session``. Idempotent.
    """
    with _INSTALL_LOCK:
        _set_classes(NpuSession, NpuInteractiveSession)
        _INSTALLED[0] = True


def uninstall():
    """Restore TensorFlow's own session classes."""
    with _INSTALL_LOCK:
        _set_classes(_ORIGINAL["Session"], _ORIGINAL["InteractiveSession"])
        _INSTALLED[0] = False


def is_installed():
    """True between :func:`install` and :func:`uninstall`."""
    return _INSTALLED[0]


def plain_session_class():
    """TensorFlow's own ``Session`` class, whatever :func:`install` did (for comparisons)."""
    return _ORIGINAL["Session"]
