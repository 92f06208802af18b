"""The first runs of a signature decide, cluster by cluster, whether XLA's executable is faster.

For one context of a signature (one set of executables: its gears or fed shapes), a
:class:`Trial` hands out, run by run, which of its compiled clusters run on TensorFlow's kernels,
and takes back the time each run took. It decides the clusters one at a time, in a fixed order:
the cluster under trial runs compiled in one arm and on TensorFlow's kernels in the other; the
clusters decided before it run as decided, those after it on TensorFlow's kernels (so a cluster
is compiled only when its turn comes). The first run of each arm is not timed (it compiles —
in the foreground, or as the runtime's background replay —, or builds TensorFlow's
executors); then :data:`PAIRS` pairs of runs alternate the arms in ABBA order — compiled,
TensorFlow, TensorFlow, compiled, ... — so that a drift of the machine's load hits both alike,
and the cluster is compiled when the median of the per-pair ratios is below 1: whichever is
faster, measured on this device (CPU, or GPU where the clusters run there), with nothing tuned
to one machine. The first run of a context with nothing decided runs every cluster on
TensorFlow's kernels: a signature's first run never waits for XLA to compile.

Everything here is bookkeeping (no TensorFlow): the runtime
(:mod:`~npu_adapter.backends.xla.runtime`) turns arms into graph variants and times the runs.
"""

import statistics

__all__ = ["PAIRS", "Measured", "Trial"]

PAIRS = 5
"""Timed pairs of runs per cluster. The decision is the median of the per-pair ratios: one
pair spoilt by a burst of load moves it little. With 5 pairs a cluster costs 11 runs to decide
(plus one that compiles); clusters whose forms differ by less than the noise may go either way,
which costs at most that difference."""


class Measured:
    """A decision a trial made: ``cluster``, ``compiled`` (bool), the medians ``compiled_s`` and
    ``tensorflow_s``, the median per-pair ``ratio``, ``pairs``, and ``compile_s``: how much
    longer the first compiled run took than the median one (XLA's compilation)."""

    __slots__ = ("cluster", "compiled", "compiled_s", "tensorflow_s", "ratio", "pairs",
                 "compile_s")

    def __init__(self, cluster, compiled, compiled_s, tensorflow_s, ratio, pairs, compile_s):
        self.cluster = cluster
        self.compiled = compiled
        self.compiled_s = compiled_s
        self.tensorflow_s = tensorflow_s
        self.ratio = ratio
        self.pairs = pairs
        self.compile_s = compile_s


class Trial:
    """The decisions of one context (see the module docstring).

    Args:
        clusters: the compiled clusters of the signature, in the order they are decided.
        known: cluster → True/False for those already decided (remembered from an earlier
            trial); the others are measured.
    """

    def __init__(self, clusters, known=None):
        known = known or {}
        self.clusters = tuple(clusters)
        self.decided = {c: known[c] for c in self.clusters if c in known}
        self.pending = [c for c in self.clusters if c not in self.decided]
        self._times = {True: [], False: []}
        self._first_compiled = None

    @property
    def done(self):
        """True when every cluster is decided."""
        return not self.pending

    def on_tensorflow(self, current_compiled=False):
        """The clusters (a sorted tuple) that run on TensorFlow's kernels: those decided so,
        those not decided yet, and the one under trial unless ``current_compiled``."""
        current = self.pending[0] if self.pending else None
        return tuple(sorted(
            c for c in self.clusters
            if self.decided.get(c) is False
            or (c not in self.decided and not (current_compiled and c == current))))

    def next_run(self, warm):
        """``(clusters on TensorFlow's kernels, arm)`` for the next run: ``arm`` is True
        (the cluster under trial compiled), False (on TensorFlow's kernels) or None (every
        cluster decided). ``warm`` holds the ``on_tensorflow`` tuples that ran before; an arm
        that never ran runs first, untimed."""
        if not self.pending:
            return self.on_tensorflow(), None
        compiled, kernels = self.on_tensorflow(True), self.on_tensorflow(False)
        if kernels not in warm:
            return kernels, False
        if compiled not in warm:
            return compiled, True
        n = len(self._times[True]) + len(self._times[False])
        arm = (True, False, False, True)[n % 4]
        return (compiled if arm else kernels), arm

    def fail(self, cluster):
        """``cluster`` cannot run compiled (XLA failed to build its executable): decided on
        TensorFlow's kernels, untimed; the next cluster's trial starts afresh."""
        if cluster in self.pending:
            if self.pending[0] == cluster:
                self._times = {True: [], False: []}
                self._first_compiled = None
            self.pending.remove(cluster)
        self.decided[cluster] = False

    def record(self, arm, seconds, first):
        """Take the time of a run of ``arm`` (``first``: the arm's first run). Returns the
        :class:`Measured` decision when this run completed one, else None."""
        if arm is None or not self.pending:
            return None
        if first:
            if arm:
                self._first_compiled = seconds
            return None
        self._times[arm].append(seconds)
        if min(len(self._times[True]), len(self._times[False])) < PAIRS:
            return None
        compiled, kernels = self._times[True][:PAIRS], self._times[False][:PAIRS]
        ratio = statistics.median(x / t for x, t in zip(compiled, kernels))
        cluster = self.pending.pop(0)
        self.decided[cluster] = ratio < 1.0
        compiled_s = statistics.median(compiled)
        first_compiled = self._first_compiled if self._first_compiled is not None \
            else compiled_s
        measured = Measured(cluster, ratio < 1.0, compiled_s, statistics.median(kernels),
                            ratio, PAIRS, max(first_compiled - compiled_s, 0.0))
        self._times = {True: [], False: []}
        self._first_compiled = None
        return measured
