"""Run-time half of the ``xla`` backend: per cluster, XLA's executable or TensorFlow's kernels,
whichever is faster; executables per static shape; the persistent cache.

Every compiled cluster of a lowered signature exists in two forms: the call XLA compiles, and
the cluster function TensorFlow's kernels run (:mod:`~npu_adapter.backends.xla.lowering`). For
each context of a signature — the executables one run uses: a gear per gear cluster, or the
shapes of the fed tensors — the program runs a :class:`~npu_adapter.backends.xla.trial.Trial`
over its first runs: the first run on TensorFlow's kernels (it never waits for a compilation),
then, cluster by cluster, timed runs alternating the two forms, and keeps the faster. A decision
is remembered (:mod:`~npu_adapter.backends.xla.decisions`) for the process and, with
``graph_compiler_cache_dir``, on disk next to the executables: a later session or process
measures nothing; its first run of the context runs on TensorFlow's kernels too (loading an
executable from the persistent cache costs a large model seconds), the decided variant runs
from the second. The variants
are graphs of the signature (:class:`~npu_adapter.backends.runtime.Variant`) the session installs
once each: the base graph has every compiled cluster compiled; a variant lists the clusters that
run on TensorFlow's kernels instead.

An executable a context wants and the session has not built yet is built off the user's runs
when the session hands :meth:`XlaProgram.ran` a replay of its run
(:mod:`~npu_adapter.backends.xla.background`): the runs stay on TensorFlow's kernels, untimed,
while the runtime's build thread replays a run on the variant that runs the cluster compiled;
that replay is the compiled arm's first run. Signatures whose replay could be seen (a training
step), and sessions that give no replay, compile in the foreground, in the first run that uses
the executable. A build XLA fails is a decision: "kept on TensorFlow's kernels: compile failed:
<XLA's message>".

TensorFlow compiles an ``_XlaMustCompile`` call the first time it runs with a given set of input
shapes, keeps the executable for the session's lifetime and reuses it for every later run with
the same shapes. The runtime mirrors that bookkeeping per session so the statistics say what was
compiled: a compiled cluster's executable is keyed by its gear (one executable per gear) or,
without gears, by the shapes of the run's fed tensors (a new combination counts as one compile
of each cluster that runs compiled with it: an upper bound when a cluster does not see every
feed). In the steady state — the same shapes again — nothing is compiled and nothing measured.

With ``graph_compiler_cache_dir`` the runtime also points TensorFlow's persistent XLA cache at
``<dir>/npu_adapter_xla`` when the session is created (:mod:`.persistent_cache`), checks its
entries before TensorFlow reads them, and counts entries written (compiled in a process) and
read (loaded instead of compiling): :meth:`XlaRuntime.cache_stats`.
"""

import dataclasses
import logging
import os
import threading
import time

from npu_adapter.backends.runtime import (
    BackendRuntime,
    ClusterStats,
    Program,
    RuntimeStats,
    Selection,
    Variant,
)
from npu_adapter.backends.xla.background import BuildThread, replay_visible_op
from npu_adapter.backends.xla.decisions import (
    DECISIONS_SUBDIR,
    Decision,
    DecisionStore,
    cluster_digest,
    executable_label,
)
from npu_adapter.backends.xla.trial import Trial
from npu_adapter.vocabulary import (
    XLA_DETAIL_ATTR,
    XLA_MUST_COMPILE_ATTR,
    XLA_STATUS_ATTR,
    XLA_STATUS_COMPILED,
    XLA_STATUS_FALLBACK,
    XLA_TF_FUNCTION_ATTR,
)

__all__ = ["XlaClusterStats", "XlaProgram", "XlaRuntime", "XlaRuntimeStats",
           "on_tensorflow_kernels"]

logger = logging.getLogger(__name__)

_VARIANT = "xla"


@dataclasses.dataclass
class XlaClusterStats(ClusterStats):
    """:class:`~npu_adapter.backends.runtime.ClusterStats` of a cluster of the ``xla``
    backend, and ``background_compiles``: how many of its ``compiles`` were built on the
    runtime's build thread while the runs went on on TensorFlow's kernels (the others
    compiled in the foreground, in the first run that used them)."""

    background_compiles: int = 0


@dataclasses.dataclass
class XlaRuntimeStats(RuntimeStats):
    """:class:`~npu_adapter.backends.runtime.RuntimeStats` of the ``xla`` backend, and
    ``background_compiles``: the clusters' ``background_compiles`` added up."""

    background_compiles: int = 0
    cluster_stats_class = XlaClusterStats


def _compile_status(result):
    """Cluster node name → (status, detail) from the lowered graph's cluster nodes."""
    found = {}
    for node in result.graph_def.node:
        if XLA_STATUS_ATTR in node.attr:
            detail = node.attr[XLA_DETAIL_ATTR].s.decode() if XLA_DETAIL_ATTR in node.attr \
                else ""
            found[node.name] = (node.attr[XLA_STATUS_ATTR].s.decode(), detail)
    return found


def on_tensorflow_kernels(graph_def, clusters):
    """A copy of ``graph_def`` whose compiled cluster calls named in ``clusters`` call the
    cluster function on TensorFlow's kernels instead (the function the lowering recorded in
    ``_npu_adapter_xla_tf_function``), without ``_XlaMustCompile``."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    wanted = set(clusters)
    for node in out.node:
        if node.name not in wanted or XLA_TF_FUNCTION_ATTR not in node.attr:
            continue
        node.attr["f"].func.name = node.attr[XLA_TF_FUNCTION_ATTR].s.decode()
        node.attr.pop(XLA_MUST_COMPILE_ATTR, None)
    return out


class _Context:
    """One context of a program: its trial, its final selection once decided, its runs per
    variant (the clusters on TensorFlow's kernels → runs) and the executable being built."""

    __slots__ = ("base", "labels", "trial", "final", "final_on_tf", "runs", "warm", "noted",
                 "build")

    def __init__(self, base, labels, trial):
        self.base = base          # the base Selection (gears, lazy shapes)
        self.labels = labels      # cluster -> executable label
        self.trial = trial
        self.final = None
        self.final_on_tf = None
        self.runs = {}
        self.warm = set()         # the arms (clusters on TensorFlow's kernels) that ran
        self.noted = False        # the final selection's executables were counted
        self.build = None         # the cluster whose executable is being built, or None


class _Run:
    """What a timed run of a context is for: an arm of its trial (``arm``: True, False or
    None; ``first``: the arm's first run), or a run on TensorFlow's kernels while an
    executable is built (``waiting``)."""

    __slots__ = ("context", "on_tf", "arm", "first", "waiting")

    def __init__(self, context, on_tf, arm=None, first=False, waiting=False):
        self.context = context
        self.on_tf = on_tf
        self.arm = arm
        self.first = first
        self.waiting = waiting


def _first_line(error):
    """The first line of an error's message (a TensorFlow error's message has the failing
    node's details after it)."""
    text = str(getattr(error, "message", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class XlaProgram(Program):
    """A signature's program: gear and lazy selection as for the CPU reference, and per context
    the compiled-or-TensorFlow decision of each compiled cluster (see the module docstring).

    Attributes:
        replay_visible: the first op type of the signature whose second run could be seen
            (:func:`~npu_adapter.backends.xla.background.replay_visible_op`), or None: its
            executables are built by replaying runs in the background.
    """

    def __init__(self, runtime, result, feeds, compiled):
        super().__init__(runtime, result, feeds)
        self.compiled = tuple(compiled)  # names of the compiled cluster nodes, decision order
        self._gear_index = {c.name: k for k, c in enumerate(self.gear_clusters)}
        functions = {f.signature.name: f for f in result.graph_def.library.function}
        nodes = {node.name: node for node in result.graph_def.node}
        self.digests = {name: cluster_digest(nodes[name], functions) for name in self.compiled}
        self.contexts = {}
        self._context_lock = threading.Lock()
        self.replay_visible = replay_visible_op(result.graph_def) if self.compiled else None
        self._replays = True  # False once a run came back without a replay to build with

    @property
    def needs_shapes(self):
        return bool(self.compiled) or super().needs_shapes

    @property
    def repeatable(self):
        # A trial hands out another variant run after run.
        return not self.compiled and super().repeatable

    @property
    def builds_in_background(self):
        """Whether executables are built by replaying runs in the background: the signature
        can be replayed unseen and the session hands :meth:`ran` a replay."""
        return self.replay_visible is None and self._replays

    def select(self, fed_shapes):
        base = super().select(fed_shapes)
        if not self.compiled:
            return base
        # In name order: the same executables whatever order the feeds were named in.
        shapes = tuple(sorted((name, tuple(fed_shapes[name])) for name in self.feeds
                              if name in fed_shapes))
        key = (base.variant.key,
               tuple(self._executable_key(name, base, shapes) for name in self.compiled))
        with self._context_lock:
            context = self.contexts.get(key)
            new = context is None
            if new:
                context = self.contexts[key] = self._new_context(base, key[1])
            if self.builds_in_background:
                wanted = context.final_on_tf if context.final is not None \
                    else context.trial.next_run(context.warm)[0]
                missing = self._missing(context, wanted)
                if missing:
                    # An executable this run would use is not built yet: the run goes on
                    # TensorFlow's kernels, and unless a build is under way, its replay
                    # builds the executable (ran).
                    on_tf = tuple(sorted(set(wanted) | set(missing)))
                    context.runs[on_tf] = context.runs.get(on_tf, 0) + 1
                    return Selection(self._variant(base, on_tf), base.gears, base.counted,
                                     timed=context.build is None,
                                     arm=_Run(context, on_tf, waiting=True))
            elif new and context.final is not None and \
                    context.final_on_tf != tuple(sorted(self.compiled)):
                # Decided before (remembered), but a context's first run still runs on
                # TensorFlow's kernels: it never waits for an executable to be compiled
                # or loaded from graph_compiler_cache_dir; the second run does.
                all_on_tf = tuple(sorted(self.compiled))
                context.runs[all_on_tf] = 1
                return Selection(self._variant(base, all_on_tf), base.gears, base.counted)
            if context.final is not None:
                if not context.noted:
                    context.noted = True
                    self._note_executables(context, context.final_on_tf)
                context.runs[context.final_on_tf] = context.runs.get(context.final_on_tf,
                                                                     0) + 1
                return context.final
            on_tf, arm = context.trial.next_run(context.warm)
            context.runs[on_tf] = context.runs.get(on_tf, 0) + 1
            first = on_tf not in context.warm
        self._note_executables(context, on_tf)
        return Selection(self._variant(base, on_tf), base.gears, base.counted, timed=True,
                         arm=_Run(context, on_tf, arm, first))

    def ran(self, selection, seconds, replay=None):
        """A timed run succeeded in ``seconds``. ``replay(variant)``, when the session gives
        one, runs the same fetches again with a copy of the same feeds on ``variant`` (a
        :class:`~npu_adapter.backends.runtime.Variant` of this signature), in the session's
        TensorFlow session: the runtime calls it on its build thread to build an executable
        the next runs want (see :mod:`~npu_adapter.backends.xla.background`). A session that
        gives none has its executables compiled in the foreground, by the runs that use them
        first."""
        run = selection.arm
        context = run.context
        with self._context_lock:
            if replay is None:
                self._replays = False
            if not run.waiting:
                context.warm.add(run.on_tf)
                measured = context.trial.record(run.arm, seconds, run.first)
                if measured is not None:
                    self.runtime.measured(self, context.labels[measured.cluster], measured)
                if context.trial.done and context.final is None:
                    self._finish(context)
                    context.noted = True
                    self._note_executables(context, context.final_on_tf)
            if replay is not None and self.builds_in_background:
                self._start_build(context, replay)

    # ------------------------------------------------------------------ background builds
    def _missing(self, context, on_tf):
        """The clusters (decision order) a run with ``on_tf`` on TensorFlow's kernels runs
        compiled whose executable this session has not built."""
        skipped = set(on_tf)
        return [name for name in self.compiled if name not in skipped and
                not self.runtime.has_executable(name, context.labels[name])]

    def _start_build(self, context, replay):
        """Start building the next executable ``context``'s runs want, unless one is being
        built: one cluster at a time, so that a failure names its cluster."""
        if context.build is not None:
            return
        wanted = context.final_on_tf if context.final is not None \
            else context.trial.next_run(context.warm)[0]
        missing = self._missing(context, wanted)
        if not missing:
            return
        cluster = missing[0]
        on_tf = tuple(sorted(set(wanted) | set(missing[1:])))
        context.build = cluster
        if not self.runtime.builds.submit(lambda: self._build(context, cluster, on_tf, replay)):
            context.build = None  # the session is closing

    def _build(self, context, cluster, on_tf, replay):
        """On the build thread: replay a run on the variant with ``on_tf`` on TensorFlow's
        kernels, which builds ``cluster``'s executable, and take the outcome."""
        import tensorflow as tf

        failure = None
        start = time.perf_counter()
        try:
            replay(self._variant(context.base, on_tf))
        except (tf.errors.CancelledError, RuntimeError):
            # The session was closed under the replay: nothing was decided.
            with self._context_lock:
                context.build = None
            return
        except tf.errors.OpError as error:
            # The user's run with the same feeds succeeded on TensorFlow's kernels: what
            # failed is the cluster compiled by XLA (at compile time: an input XLA needs as a
            # constant, an op it cannot lower for these shapes).
            failure = _first_line(error)
        except Exception as error:  # a build never fails the user's runs
            logger.warning("XLA background build of cluster %s failed (%s); its executables "
                           "are compiled by the runs that use them", cluster,
                           _first_line(error))
            with self._context_lock:
                context.build = None
                self._replays = False
            return
        seconds = time.perf_counter() - start
        with self._context_lock:
            context.build = None
            label = context.labels[cluster]
            trial = context.trial
            if failure is not None:
                trial.fail(cluster)
                self.runtime.compile_failed(self, label, cluster, failure)
                if context.final is not None or trial.done:
                    self._finish(context)
                return
            self.runtime.built_in_background(cluster, label)
            if context.final is None and trial.pending and trial.pending[0] == cluster and \
                    on_tf == trial.on_tensorflow(True):
                # The replay was the compiled arm's first run: it compiled, untimed.
                context.warm.add(on_tf)
                trial.record(True, seconds, True)
            else:
                decision = self.runtime.decisions.get(self.digests[cluster], label)
                run_s = decision.compiled_ms / 1e3 if decision is not None else 0.0
                self.runtime.add_compile_seconds(cluster, max(seconds - run_s, 0.0))

    def _new_context(self, base, keys):
        labels = {name: executable_label(key) for name, key in zip(self.compiled, keys)}
        known = {}
        for name in self.compiled:
            decision = self.runtime.decisions.get(self.digests[name], labels[name])
            if decision is not None:
                known[name] = decision.compiled
                self.runtime.remembered(name, decision)
        context = _Context(base, labels, Trial(self.compiled, known))
        if context.trial.done:
            self._finish(context)
        return context

    def _finish(self, context):
        context.final_on_tf = context.trial.on_tensorflow()
        base = context.base
        context.final = Selection(self._variant(base, context.final_on_tf), base.gears,
                                  base.counted)

    @staticmethod
    def _variant(base, on_tf):
        if not on_tf and base.variant.key is None:
            return base.variant
        return Variant((_VARIANT, base.variant.key, on_tf), base.variant.evicts)

    def _note_executables(self, context, on_tf):
        skipped = set(on_tf)
        self.runtime.note_executables(
            (name, context.labels[name]) for name in self.compiled if name not in skipped)

    def _executable_key(self, name, selection, shapes):
        index = self._gear_index.get(name)
        if index is not None and index < len(selection.gears) and \
                selection.gears[index] is not None:
            return ("gear", selection.gears[index])
        return ("shapes", shapes)

    def runs_per_cluster(self):
        """Cluster → ``[runs compiled, runs on TensorFlow's kernels]`` so far."""
        counts = {name: [0, 0] for name in self.compiled}
        with self._context_lock:
            for context in self.contexts.values():
                for on_tf, runs in context.runs.items():
                    for name in self.compiled:
                        counts[name][name in on_tf] += runs
        return counts

    def variant_graph(self, key, graph_def=None):
        if key[0] != _VARIANT:
            return super().variant_graph(key, graph_def)
        _, base_key, on_tf = key
        graph = on_tensorflow_kernels(
            graph_def if graph_def is not None else self.result.graph_def, on_tf)
        return graph if base_key is None else super().variant_graph(base_key, graph)


class XlaRuntime(BackendRuntime):
    """Per-session runtime of the ``xla`` backend: statuses ``pending``, ``compiled``,
    ``tensorflow`` (measured faster on TensorFlow's kernels) or ``fallback``, the decisions and
    what they measured, compilations per cluster, the persistent cache."""

    def __init__(self, backend, config):
        super().__init__(backend, config)
        self.stats_record = XlaRuntimeStats(backend=self.stats_record.backend)
        self.builds = BuildThread()
        self._executables = {}  # cluster name -> set of executable labels
        self._compiled = {}     # cluster name -> {executable label: decided compiled}
        self._programs = []
        self.cache = None
        self.cache_active = False
        directory = getattr(config, "graph_compiler_cache_dir", None)
        decisions_dir = None
        if directory:
            from npu_adapter.backends.xla.persistent_cache import PersistentCache, activate

            max_mb = getattr(config, "npu_adapter_compile_cache_max_mb", 0) or 0
            self.cache = PersistentCache(directory, max_bytes=int(max_mb) * 1024 * 1024)
            # Before TensorFlow may read an entry: corrupted ones are removed now.
            self.cache.sync()
            self.cache_active = activate(self.cache.root)
            decisions_dir = os.path.join(self.cache.root, DECISIONS_SUBDIR)
        self.decisions = DecisionStore(decisions_dir)

    def prepare(self, result, feeds=()):
        statuses = _compile_status(result)
        compiled = [name for name, (status, _) in statuses.items()
                    if status == XLA_STATUS_COMPILED]
        with self.lock:
            for info in result.clusters:
                self.stats_record.cluster(info.name)
            for name, (status, detail) in statuses.items():
                stats = self.stats_record.cluster(name)
                if status == XLA_STATUS_FALLBACK:
                    if stats.status != "fallback":
                        self.stats_record.fallbacks += 1
                    stats.status, stats.reason = "fallback", detail
                elif not stats.decisions:
                    stats.status = "pending"
        program = XlaProgram(self, result, feeds, compiled)
        with self.lock:
            self._programs.append(program)
        return program

    # ------------------------------------------------------------------ decisions
    def remembered(self, name, decision):
        """Record ``decision`` of cluster ``name``, found among the remembered ones."""
        with self.lock:
            self.stats_record.decisions_remembered += 1
            self._record_decision(name, decision)

    def measured(self, program, label, measured):
        """Record and remember a decision a trial of ``program`` just measured for executable
        ``label``."""
        name = measured.cluster
        decision = Decision(name, label, measured.compiled, measured.compiled_s * 1e3,
                            measured.tensorflow_s * 1e3, measured.ratio, measured.pairs)
        self.decisions.put(program.digests[name], decision)
        with self.lock:
            self.stats_record.decisions_measured += 1
            stats = self.stats_record.cluster(name)
            stats.compile_seconds += measured.compile_s
            self.stats_record.compile_seconds += measured.compile_s
            self._record_decision(name, decision)

    def _record_decision(self, name, decision):
        stats = self.stats_record.cluster(name)
        stats.decisions[decision.executable] = decision.why
        compiled = self._compiled.setdefault(name, {})
        compiled[decision.executable] = decision.compiled
        # Compiled when any of its executables is; the reason of one kept on TensorFlow's
        # kernels everywhere is the last decision's sentence.
        if any(compiled.values()):
            stats.status, stats.reason = "compiled", ""
        else:
            stats.status, stats.reason = "tensorflow", decision.why

    def compile_failed(self, program, label, name, message):
        """Record and remember that XLA failed to build executable ``label`` of cluster
        ``name`` of ``program`` (``message``: XLA's error): it runs on TensorFlow's kernels."""
        decision = Decision.compile_failed(name, label, message)
        self.decisions.put(program.digests[name], decision)
        with self.lock:
            self.stats_record.decisions_measured += 1
            self._record_decision(name, decision)

    def add_compile_seconds(self, name, seconds):
        """Add ``seconds`` of building an executable to cluster ``name``'s compile time."""
        with self.lock:
            self.stats_record.cluster(name).compile_seconds += seconds
            self.stats_record.compile_seconds += seconds

    def wait_for_builds(self, timeout=None):
        """Wait until the executables being built in the background are built (or failed);
        True when none is left, False after ``timeout`` seconds. A build starts after a run
        (the run's replay builds it): a script that wants its executables before it times or
        serves runs once, waits, and repeats until the clusters are decided."""
        return self.builds.wait(timeout)

    def has_executable(self, name, label):
        """Whether this session built executable ``label`` of cluster ``name``."""
        with self.lock:
            return label in self._executables.get(name, ())

    def note_executables(self, keyed):
        """Record the executables a run uses (``(cluster name, executable label)`` pairs of
        the clusters it runs compiled); one not seen before in this session is a
        compilation, in the foreground."""
        with self.lock:
            for name, label in keyed:
                self._note(name, label)

    def built_in_background(self, name, label):
        """Record executable ``label`` of cluster ``name``, built on the build thread."""
        with self.lock:
            if self._note(name, label):
                self.stats_record.cluster(name).background_compiles += 1
                self.stats_record.background_compiles += 1

    def _note(self, name, label):
        seen = self._executables.setdefault(name, set())
        if label in seen:
            return False
        seen.add(label)
        self.stats_record.cluster(name).compiles += 1
        self.stats_record.compiles += 1
        return True

    def cache_stats(self):
        """The persistent cache's counters since this session started: ``active`` (TensorFlow
        writes there), ``directory``, ``written`` (executables compiled and stored), ``read``
        (loaded instead of compiled), ``evicted``, ``corrupt``, ``bytes``; None without
        ``graph_compiler_cache_dir``."""
        if self.cache is None:
            return None
        self.cache.sync()
        return {"active": self.cache_active, "directory": self.cache.root,
                "written": self.cache.created, "read": self.cache.read,
                "evicted": self.cache.evicted, "corrupt": self.cache.corrupt,
                "bytes": self.cache.total_bytes()}

    def stats(self):
        if self.cache is not None:
            counts = self.cache_stats()
            with self.lock:
                self.stats_record.cache_misses = counts["written"]
                self.stats_record.cache_hits = counts["read"]
        snapshot = super().stats()
        with self.lock:
            programs = list(self._programs)
        for program in programs:
            for name, (compiled, kernels) in program.runs_per_cluster().items():
                stats = snapshot.cluster(name)
                stats.runs_compiled += compiled
                stats.runs_tensorflow += kernels
        return snapshot

    def close(self):
        # The session's TensorFlow session is closed before its runtime: a build under way
        # ends with its compilation.
        self.builds.close()
        if self.cache is not None:
            self.cache.sync()
