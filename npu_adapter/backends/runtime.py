"""The run-time half of a backend: how the clusters of a rewritten signature are executed.

A backend has two halves. Its lowering (:meth:`Backend.lower`) makes each cluster executable in
the GraphDef at graph time; its runtime, made per session by :meth:`Backend.create_runtime`,
serves the cluster calls at run time:

* :meth:`BackendRuntime.prepare` turns one rewritten signature into a :class:`Program`;
* :meth:`Program.select` picks, from the shapes the session sees in a run's feeds, the
  :class:`Variant` of the graph that run executes: the base graph, a graph that calls one gear's
  static-shape copy directly (the in-graph gear dispatcher costs shape ops, comparisons, a
  ``Case`` and a nested call on every run), or a ``lazy_recompile`` specialisation pinned to the
  fed shapes (at most :data:`LAZY_CACHE_SIZE`, least frequently used evicted, as the original's
  GeOp keeps its compiled graphs);
* :meth:`Program.variant_graph` builds that variant's GraphDef once; the session installs it;
* :meth:`Program.ran` hears how long a run took, when its :class:`Selection` asked (``timed``):
  a runtime that measures its variants on the first runs (the XLA backend's compiled or
  TensorFlow-kernel clusters) decides from it which variant later runs get; with it comes a
  replay of the run, which the XLA backend uses to build executables off the user's runs;
* :meth:`BackendRuntime.stats` reports what was compiled, reused and chosen, per cluster.

Backends whose executables are not TensorFlow functions (CANN runs ``.om`` models through pyACL)
dispatch inside the op they lower a cluster to; their programs have no variants, and their
runtimes fill the same statistics.
"""

import dataclasses
import hashlib
import threading
import typing

from npu_adapter.vocabulary import (
    CLUSTER_FUNCTION_ATTRS,
    CLUSTER_GEARS_ATTR,
    CLUSTER_INPUTS_ATTR,
    DYNAMIC_INPUT_ATTR,
    DYNAMIC_MODE_ATTR,
    GEAR_FUNCTION_SUFFIX,
    GEAR_POLICY_ATTR,
    LAZY_RECOMPILE,
)

__all__ = [
    "LAZY_CACHE_SIZE",
    "BackendRuntime",
    "ClusterStats",
    "GearCluster",
    "Program",
    "RuntimeStats",
    "Selection",
    "Variant",
]

# lazy_recompile keeps at most this many shape specialisations per signature, as the original's
# GeOp keeps at most 10 compiled graphs per kernel (least frequently used evicted).
LAZY_CACHE_SIZE = 10
# Gear decisions remembered per Program (distinct fed shapes); beyond it decisions are remade.
_DECISIONS_MAX = 256


@dataclasses.dataclass(frozen=True)
class GearCluster:
    """A cluster with gears: its name, :class:`~npu_adapter.pipeline.gears.GearTable` and the
    selection policy (``exact`` or ``pad_up``)."""

    name: str
    table: typing.Any
    policy: str


@dataclasses.dataclass(frozen=True)
class Variant:
    """One executable form of a signature.

    Attributes:
        key: ``None`` for the base graph; ``("gears", (g0, g1, ...))`` for direct gear calls (one
            gear index per gear cluster); ``("shapes", ((name, shape), ...))`` for a
            lazy_recompile specialisation.
        evicts: keys of variants this choice pushed out of the lazy cache (the session forgets
            their mappings).
    """

    key: typing.Any = None
    evicts: tuple = ()


@dataclasses.dataclass(frozen=True)
class Selection:
    """What :meth:`Program.select` decided for one run: the variant and the gear per gear
    cluster (``None`` where the shapes were not visible or matched no gear). ``counted`` is
    what the run added to the gear statistics (:meth:`Program.count_again` adds it again).
    ``timed``: the session times the run and reports it to :meth:`Program.ran`, with ``arm``
    (the program's own note of what the run measures)."""

    variant: Variant
    gears: tuple = ()
    counted: tuple = dataclasses.field(default=(), compare=False, repr=False)
    timed: bool = dataclasses.field(default=False, compare=False)
    arm: typing.Any = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass
class ClusterStats:
    """Run-time statistics of one cluster.

    Attributes:
        status: ``"function"`` (runs as a TF function), ``"compiled"`` (the backend compiled
            it), ``"tensorflow"`` (the backend can compile it but measured TensorFlow's kernels
            faster, so they run it), ``"fallback"`` (the backend could not compile it; it runs
            on the CPU reference) or ``"pending"`` (not decided yet).
        reason: why it fell back or stays on TensorFlow's kernels ("" otherwise).
        runs: runs that selected a gear of this cluster (gear clusters only).
        gear_counts: gear index → runs.
        actual_elements / padded_elements: elements fed and elements computed (padding waste).
        policy: the gear policy ("" without gears).
        compiles: executables built for it; cache_hits: executables reused from a cache.
        compile_seconds: time its compilations added to the runs that compiled (measured: the
            first compiled run against the later ones).
        decisions: executable (``"gear 1"``, the fed shapes) → whether it runs compiled or on
            TensorFlow's kernels, and the times that decided it (backends that decide).
        runs_compiled / runs_tensorflow: runs with it compiled / on TensorFlow's kernels.
    """

    status: str = "function"
    reason: str = ""
    runs: int = 0
    gear_counts: dict = dataclasses.field(default_factory=dict)
    actual_elements: int = 0
    padded_elements: int = 0
    policy: str = ""
    compiles: int = 0
    cache_hits: int = 0
    compile_seconds: float = 0.0
    decisions: dict = dataclasses.field(default_factory=dict)
    runs_compiled: int = 0
    runs_tensorflow: int = 0

    @property
    def waste_ratio(self):
        """``1 - fed / computed`` elements (0 without padding)."""
        if not self.padded_elements:
            return 0.0
        return 1 - self.actual_elements / self.padded_elements


@dataclasses.dataclass
class RuntimeStats:
    """Statistics of one runtime (one session).

    Attributes:
        backend: the backend's name.
        clusters: cluster name → :class:`ClusterStats`.
        compiles: executables built; cache_hits / cache_misses: lookups of a compile cache.
        fallbacks: clusters that fell back to the CPU reference.
        specializations / respecializations / evictions / hits: lazy_recompile shape cache
            (first build of a shape, rebuild of an evicted shape, evictions, reuses).
        compile_seconds: the clusters' ``compile_seconds`` added up.
        decisions_measured / decisions_remembered: compiled-or-not decisions measured by this
            session's runs / found from an earlier session or process.
    """

    backend: str
    clusters: dict = dataclasses.field(default_factory=dict)
    compiles: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    fallbacks: int = 0
    specializations: int = 0
    respecializations: int = 0
    evictions: int = 0
    hits: int = 0
    compile_seconds: float = 0.0
    decisions_measured: int = 0
    decisions_remembered: int = 0

    # The type of a cluster's stats (a backend's subclass names its own).
    cluster_stats_class = ClusterStats

    def cluster(self, name):
        """The :attr:`cluster_stats_class` of ``name`` (created on first use)."""
        stats = self.clusters.get(name)
        if stats is None:
            stats = self.clusters[name] = self.cluster_stats_class()
        return stats


def cluster_function(node):
    """``(attr key, function name)`` of a cluster node's function, or ``(None, None)``."""
    for key in CLUSTER_FUNCTION_ATTRS:
        if key in node.attr:
            return key, node.attr[key].func.name
    return None, None


class Program:
    """How the clusters of one rewritten signature run (made by :meth:`BackendRuntime.prepare`).

    The base program covers what every TensorFlow-function backend needs: gear clusters called
    directly when the session sees their inputs' shapes, and ``lazy_recompile`` specialisations.
    Backends that dispatch inside their own ops use it as is: without gear or lazy clusters in
    the lowered graph there is nothing to select.

    Attributes:
        result: the :class:`~npu_adapter.pipeline.result.RewriteResult` of the signature.
        gear_clusters: tuple of :class:`GearCluster`.
        lazy: True when a cluster runs in ``lazy_recompile`` mode.
        feeds: the fed tensor names of the signature (sorted), the order of shape keys.
    """

    def __init__(self, runtime, result, feeds):
        self.runtime = runtime
        self.result = result
        self.feeds = tuple(feeds)
        self.gear_clusters, self.lazy = self._scan(result)
        # Gear tables name the tensors of the rewritten graph; a fed tensor may stand there as
        # a placeholder made for it (RewriteResult.feed_map): look shapes up by the user's name.
        self._user_name = {v: k for k, v in result.feed_map.items()}
        self._lock = threading.Lock()
        self._lazy_uses = {}     # shape key -> [use count, age]
        self._seen_shapes = set()
        self._age = 0
        self._decisions = {}     # fed shapes -> Selection (its gear statistics included)

    @property
    def needs_shapes(self):
        """Whether :meth:`select` reads the fed shapes (gears or lazy_recompile)."""
        return bool(self.gear_clusters) or self.lazy

    @property
    def repeatable(self):
        """Whether :meth:`select` gives the same Selection whenever the fed shapes are the same,
        and a repeat changes nothing but the gear statistics: a caller may then keep the
        Selection of a set of shapes and call :meth:`count_again` with it instead (the
        session's per-step path). Not with ``lazy_recompile``, whose shape cache evicts.
        A subclass whose :meth:`select` does more on a repeat must say False."""
        return not self.lazy

    def count_again(self, selection):
        """Count a run that repeats ``selection`` (see :attr:`repeatable`)."""
        self._count_gears(selection.counted)

    def ran(self, selection, seconds, replay=None):
        """A run of ``selection`` (one with ``timed``) succeeded in ``seconds`` (the session's
        ``Session.run`` of the installed variant). ``replay(variant)``, when the session gives
        one, runs the same fetches again with a copy of the same feeds on another variant of
        the signature, from any thread (the XLA backend builds executables in the background
        so). The base program times nothing."""

    @staticmethod
    def _scan(result):
        gears = []
        lazy = False
        for node in result.graph_def.node:
            attrs = node.attr
            if DYNAMIC_INPUT_ATTR in attrs and attrs[DYNAMIC_INPUT_ATTR].s == b"1" and \
                    DYNAMIC_MODE_ATTR in attrs and \
                    attrs[DYNAMIC_MODE_ATTR].s == LAZY_RECOMPILE.encode():
                lazy = True
            if CLUSTER_GEARS_ATTR in attrs:
                table = result.cluster(node.name).gear_table()
                gears.append(GearCluster(node.name, table, attrs[GEAR_POLICY_ATTR].s.decode()))
        return tuple(gears), lazy

    # ------------------------------------------------------------------ selection
    def select(self, fed_shapes):
        """The :class:`Selection` for a run whose fed tensors have ``fed_shapes``
        (tensor name → shape tuple; tensors the session cannot see are absent)."""
        if self.lazy:
            gears, counted = self._choose_gears(fed_shapes) if self.gear_clusters else ((), ())
            self._count_gears(counted)
            return Selection(self._lazy_variant(fed_shapes), gears, counted)
        # Gear dispatch runs on every step: the decision for a set of shapes is made once and
        # replayed (a few microseconds of a small model's step), statistics included.
        key = tuple(fed_shapes.items())
        selection = self._decisions.get(key)
        if selection is None:
            gears, counted = self._choose_gears(fed_shapes) if self.gear_clusters else ((), ())
            if gears and all(g is not None for g in gears) and \
                    all(c.policy == "exact" for c in self.gear_clusters):
                selection = Selection(Variant(("gears", self.runtime.gear_variant(gears))),
                                      gears, counted)
            else:
                selection = Selection(Variant(None), gears, counted)
            if len(self._decisions) < _DECISIONS_MAX:
                self._decisions[key] = selection
        self._count_gears(selection.counted)
        return selection

    def _choose_gears(self, fed_shapes):
        """``(gear per gear cluster, what to count)``: the second item lists ``(the cluster's
        ClusterStats, gear, fed elements, computed elements)`` for :meth:`_count_gears`."""
        chosen = []
        counted = []
        record = self.runtime.stats_record
        for cluster in self.gear_clusters:
            try:
                shapes = [tuple(fed_shapes[self._user_name.get(name, name)])
                          for name in cluster.table.names]
            except KeyError:
                chosen.append(None)  # an input is not fed (a dataset): not visible here
                continue
            g = cluster.table.select(shapes, cluster.policy)
            chosen.append(g)
            if g is None:
                continue  # the run fails in the graph with the named gear error
            fed = 0
            for shape in shapes:
                size = 1
                for d in shape:
                    size *= int(d)
                fed += size
            with self.runtime.lock:
                st = record.cluster(cluster.name)
                st.policy = cluster.policy
            counted.append((st, g, fed, cluster.table.elements(g)))
        return tuple(chosen), tuple(counted)

    def _count_gears(self, counted):
        if not counted:
            return
        with self.runtime.lock:
            for st, g, fed, computed in counted:
                st.runs += 1
                st.gear_counts[g] = st.gear_counts.get(g, 0) + 1
                st.actual_elements += fed
                st.padded_elements += computed

    def _lazy_variant(self, fed_shapes):
        key = ("shapes", tuple((name, tuple(fed_shapes[name])) for name in self.feeds
                               if name in fed_shapes))
        stats = self.runtime.stats_record
        with self._lock:
            uses = self._lazy_uses.get(key)
            if uses is not None:
                uses[0] += 1
                with self.runtime.lock:
                    stats.hits += 1
                return Variant(key)
            evicted = ()
            if len(self._lazy_uses) >= LAZY_CACHE_SIZE:
                # Evict the least frequently used shape (the oldest among equals).
                victim = min(self._lazy_uses, key=lambda k: tuple(self._lazy_uses[k]))
                del self._lazy_uses[victim]
                evicted = (victim,)
            self._age += 1
            self._lazy_uses[key] = [1, self._age]
            again = key in self._seen_shapes
            self._seen_shapes.add(key)
        with self.runtime.lock:
            stats.evictions += len(evicted)
            if again:
                stats.respecializations += 1
            else:
                stats.specializations += 1
        return Variant(key, evicted)

    # ------------------------------------------------------------------ variants
    def variant_graph(self, key, graph_def=None):
        """The GraphDef of variant ``key`` (not for the base variant ``None``), made from the
        result's graph or from ``graph_def`` (its light form, for a caller that restores the
        weights itself)."""
        kind, value = key
        base = graph_def if graph_def is not None else self.result.graph_def
        if kind == "gears":
            return self.runtime.call_gears(base, [c.name for c in self.gear_clusters], value)
        if kind == "shapes":
            digest = hashlib.sha1(repr(value).encode()).hexdigest()[:10]
            return self.runtime.pin_shapes(base, dict(value), suffix=f"lazy_{digest}")
        raise ValueError(f"unknown variant kind {kind!r}")


class BackendRuntime:
    """Run-time half of a backend, one per session: programs, variants and statistics.

    The base class serves backends whose clusters are TensorFlow functions (the CPU reference and
    XLA); subclasses override :meth:`prepare` (and the variant builders) to compile, cache or
    dispatch differently, and :meth:`close` to release devices.
    """

    def __init__(self, backend, config):
        self.backend = backend
        self.config = config
        self.lock = threading.Lock()
        self.stats_record = RuntimeStats(backend=getattr(backend, "name", ""))

    def prepare(self, result, feeds=()):
        """A :class:`Program` for the rewritten signature ``result`` (fed tensor names
        ``feeds``). Called once per signature; records each cluster in the statistics."""
        with self.lock:
            for info in result.clusters:
                self.stats_record.cluster(info.name)
        return Program(self, result, feeds)

    def stats(self):
        """A snapshot of the :class:`RuntimeStats`."""
        import copy

        with self.lock:
            return copy.deepcopy(self.stats_record)

    def close(self):
        """Release what the runtime holds (devices, loaded models). Idempotent."""

    # ------------------------------------------------------------------ variant builders
    def gear_variant(self, gears):
        """What the variant of a run whose gear clusters chose ``gears`` (one gear index each)
        calls: by default each chosen gear's static-shape copy, so one variant per gear
        tuple."""
        return gears

    def call_gears(self, graph_def, clusters, chosen):
        """A copy of ``graph_def`` whose gear ``clusters`` call what :meth:`gear_variant`
        chose (``chosen``) directly instead of their dispatcher: by default gear ``chosen[i]``'s
        static-shape function for cluster ``i``."""
        out = type(graph_def)()
        out.CopyFrom(graph_def)
        gear_of = dict(zip(clusters, chosen))
        for node in out.node:
            g = gear_of.get(node.name)
            if g is None:
                continue
            key, name = cluster_function(node)
            node.attr[key].func.name = f"{name}{GEAR_FUNCTION_SUFFIX}{g}"
        return out

    def pin_shapes(self, graph_def, shapes, suffix):
        """A copy of ``graph_def`` whose cluster functions see the fed tensors ``shapes`` (name →
        shape) with static shapes; the pinned functions are renamed ``<name>_<suffix>`` so they
        can live next to the originals in one graph."""
        from npu_adapter.graph.functions import pin_arg_shapes

        out = type(graph_def)()
        out.CopyFrom(graph_def)
        functions = {f.signature.name: f for f in out.library.function}
        for node in out.node:
            if CLUSTER_INPUTS_ATTR not in node.attr:
                continue
            key, fname = cluster_function(node)
            if fname not in functions:
                continue
            inputs = [s.decode() for s in node.attr[CLUSTER_INPUTS_ATTR].list.s]
            pins = {k: shapes[name] for k, name in enumerate(inputs) if name in shapes}
            if not pins:
                continue
            pinned = pin_arg_shapes(functions[fname], pins)
            pinned.signature.name = f"{fname}_{suffix}"
            out.library.function.add().CopyFrom(pinned)
            node.attr[key].func.name = pinned.signature.name
        return out
