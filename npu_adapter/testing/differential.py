"""Differential testing of sessions: a graph run in plain TensorFlow and in NPU sessions under
several option sets, every fetch and every variable compared bit for bit after every step.

The CPU reference promises plain TensorFlow's numbers exactly, whatever the options, so any
difference is a defect of the rewrite or of the session. Each side builds the graph afresh in its
own ``tf.Graph`` from the same function (same seeds, so the same random streams and initial
values), runs the initialisers, then ``steps`` runs of the fetches (tensors are compared,
operations such as a train op run as targets) and after each run a read of every variable. The
NPU side is a ``tf.compat.v1.Session`` with :func:`npu_adapter.install` in effect and an
``NpuOptimizer`` entry carrying the option set, as a script that imports ``npu_bridge`` has.

Example::

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.compat.v1.Variable(np.ones([4, 2], np.float32), name="w")
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        return [loss, tf.compat.v1.train.AdamOptimizer(0.1).minimize(loss)]

    assert_session_equivalent(build, {"full_offload": {}, "mix": {"mix_compile_mode": True}},
                              feeds={"x:0": seeded_array(0, [2, 4])}, steps=3)

``docs/testing.md`` describes the random graphs (:mod:`npu_adapter.testing.strategies`) and the
long run (``python -m npu_adapter.testing.fuzz``).
"""

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional, Tuple

import tensorflow as tf

from npu_adapter.testing.equivalence import variable_reads
from npu_adapter.testing.program import literal_source
from npu_adapter.testing.values import Difference, difference

__all__ = [
    "OPTION_SETS",
    "EXPECTED_REFUSALS",
    "ExpectedRefusal",
    "InvalidGraphError",
    "Mismatch",
    "OptionSet",
    "RunFailure",
    "RunOutcome",
    "SessionComparison",
    "SessionMismatchError",
    "assert_session_equivalent",
    "compare_sessions",
    "error_summary",
    "option_sets_by_name",
]

_tf1 = tf.compat.v1
_PLACEHOLDERS = ("Placeholder", "PlaceholderWithDefault")


@dataclass(frozen=True)
class OptionSet:
    """A named set of ``NpuOptimizer`` options to run a graph under.

    ``gears`` names the dynamic-dims set-up the set needs from the graph: ``"placeholder"``
    (``dynamic_node_type=1`` on the placeholder's batch dim) or ``"dataset"``
    (``dynamic_node_type=0`` on the ``tf.data`` batch). A generated case supplies
    ``input_shape``, ``dynamic_dims`` and ``dynamic_node_type`` for it, or does not run the set
    (:meth:`npu_adapter.testing.cases.GraphCase.option_sets`).
    """

    name: str
    options: Mapping = field(default_factory=dict)
    gears: Optional[str] = None
    description: str = ""


OPTION_SETS = (
    OptionSet("full_offload", {}, description="the defaults: the largest cluster on the device"),
    OptionSet("mix", {"mix_compile_mode": True},
              description="mix compile mode: unsupported and gray ops split the clusters"),
    OptionSet("isolated_clusters", {"npu_adapter_isolate_clusters": True},
              description="full offload, every cluster kept a function call (never inlined)"),
    OptionSet("gears_placeholder", {}, gears="placeholder",
              description="gears on the batch dim of the placeholder (dynamic_node_type=1)"),
    OptionSet("gears_dataset", {}, gears="dataset",
              description="gears on the tf.data batch (dynamic_node_type=0)"),
    OptionSet("precision_keep_dtype",
              {"precision_mode": "must_keep_origin_dtype", "npu_adapter_emulate_precision": "on"},
              description="precision emulation on, every op in its own dtype (exact)"),
)
"""The option sets the tester runs by default. Data, not code: add, drop or change sets as the
options change."""


@dataclass(frozen=True)
class ExpectedRefusal:
    """An error an NPU session raises by design, as the original adapter stops the same graph,
    and the documented options with which the graph runs.

    A run that fails with an error matching ``pattern`` (a regular expression searched in
    ``"ErrorType: message"``) is run again with ``remedy`` added to its options; when that run
    gives plain TensorFlow's values, the outcome is ``refused``, not a failure.
    """

    name: str
    pattern: str
    remedy: Mapping
    documented_in: str


EXPECTED_REFUSALS = (
    ExpectedRefusal(
        "variable_outside_every_cluster",
        r"^InvalidArgumentError: Ref Tensors \(e\.g\., Variables\) output: .+ is not in white "
        r"list \(it reads variable '.+' outside every cluster while variable_placement is Device",
        {"variable_placement": "Host"},
        "docs/original-adapter.md, section 7"),
)
"""The refusals the tester accepts when their remedy works. Data, like :data:`OPTION_SETS`."""


def option_sets_by_name(names=None, sets=OPTION_SETS):
    """The sets of ``sets`` named in ``names`` (all when None), in the order given; an unknown
    name raises ``ValueError`` listing the known ones."""
    known = {s.name: s for s in sets}
    if names is None:
        return tuple(sets)
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"unknown option set {missing[0]!r}; known: {', '.join(known)}")
    return tuple(known[n] for n in names)


class InvalidGraphError(ValueError):
    """The graph, its feeds or its initialisers fail in plain TensorFlow: nothing to compare."""


class SessionMismatchError(AssertionError):
    """An NPU session differs from plain TensorFlow, or fails where plain TensorFlow runs."""

    def __init__(self, message, comparison):
        super().__init__(message)
        self.comparison = comparison


@dataclass(frozen=True)
class Mismatch:
    """One value that differs: a fetch or a variable, after ``step`` (0-based)."""

    step: int
    kind: str  # "fetch" or "variable"
    tensor: str
    difference: Difference

    def describe(self):
        """One line: the step, the tensor and how it differs."""
        return f"step {self.step}, {self.kind} {self.tensor}: {self.difference.describe()}"


@dataclass(frozen=True)
class RunFailure:
    """The NPU side raised where plain TensorFlow did not."""

    phase: str  # "build", "session", "init", "step N", "variables after step N", "close"
    error_type: str
    message: str

    def describe(self):
        """One line: the phase, the error type and what went wrong."""
        return f"failed at {self.phase}: {self.error_type}: {error_summary(self.message)}"


def error_summary(message):
    """The line of an error message that says what went wrong: TensorFlow's run errors start
    with "Graph execution error:" and the stack of the node where they were detected."""
    lines = [line for line in message.splitlines() if line.strip()]
    for line in lines:
        if line[0].isspace() or line.startswith(("Graph execution error:", "Detected at node",
                                                 "Node: ", "Original stack trace")):
            continue
        return line.strip()
    return lines[0].strip() if lines else ""


@dataclass
class RunOutcome:
    """What one option set gave: values compared, the differences at the first step with any
    (later steps are not compared: state has diverged), or the failure."""

    option_set: str
    options: dict
    compared: int = 0
    mismatches: Tuple[Mismatch, ...] = ()
    failure: Optional[RunFailure] = None
    reference_problem: str = ""  # "", "unreproducible" or "plain_ignores_feed"
    refusal: Optional[ExpectedRefusal] = None  # the failure is this expected refusal
    remedy_compared: int = 0  # values the run with the refusal's remedy compared, all equal

    @property
    def status(self):
        """``equal``, ``mismatch`` or ``failure``; ``refused`` when the failure is an
        :class:`ExpectedRefusal` whose remedy gives plain TensorFlow's values; or, when a
        difference shows but plain TensorFlow is no reference for this graph,
        ``unreproducible`` (plain TensorFlow gave two different results for it) or
        ``plain_ignores_feed`` (plain TensorFlow's arithmetic optimizer computes a consumer of
        a fed tensor from that tensor's inputs, ignoring the feed, and the NPU session gives
        what plain TensorFlow gives with that optimizer off)."""
        if self.reference_problem:
            return self.reference_problem
        if self.refusal is not None:
            return "refused"
        if self.failure is not None:
            return "failure"
        return "mismatch" if self.mismatches else "equal"

    def describe(self):
        """The option set with its options (as Python), then what it gave."""
        head = f"option set {self.option_set} {literal_source(self.options)}"
        if self.status == "unreproducible":
            return f"{head}: plain TensorFlow is not reproducible on this graph"
        if self.status == "plain_ignores_feed":
            return (f"{head}: plain TensorFlow ignores a fed tensor (its arithmetic optimizer "
                    "rewrites through it); the NPU session honours the feed")
        if self.refusal is not None:
            return (f"{head}: refused as the original adapter refuses it (see "
                    f"{self.refusal.documented_in}): {self.failure.describe()}; with "
                    f"{literal_source(dict(self.refusal.remedy))} added: equal "
                    f"({self.remedy_compared} values)")
        if self.failure is not None:
            return f"{head}: {self.failure.describe()}"
        if self.mismatches:
            lines = [f"{head}: differs from plain TensorFlow"]
            lines += [f"    {m.describe()}" for m in self.mismatches]
            return "\n".join(lines)
        return f"{head}: equal ({self.compared} values)"


@dataclass
class SessionComparison:
    """The outcome of every option set (see :func:`compare_sessions`)."""

    steps: int
    outcomes: list

    @property
    def failed(self):
        """The outcomes that are mismatches or failures."""
        return [o for o in self.outcomes if o.status in ("mismatch", "failure")]

    @property
    def compared(self):
        """Values compared over every option set."""
        return sum(o.compared for o in self.outcomes)

    def describe(self):
        """Each option set's outcome, one after the other."""
        return "\n".join(o.describe() for o in self.outcomes)


# ------------------------------------------------------------------------------------ running

@dataclass
class _Trace:
    """One side's run: (phase, [(label, value)]) in order, and the error that stopped it."""

    values: list = field(default_factory=list)  # (phase, "fetch"/"variable", [(name, value)])
    variables: list = field(default_factory=list)
    feeds_intermediate: bool = False  # a fed tensor is not a placeholder's output
    error: Optional[Tuple[str, BaseException]] = None


@contextlib.contextmanager
def _control_flow_v2_kept():
    """Restore the process-wide v1/v2 control-flow switch a build function may flip (v1
    ``cond``/``while_loop`` need ``tf.compat.v1.disable_control_flow_v2()``)."""
    enabled = _tf1.control_flow_v2_enabled()
    try:
        yield
    finally:
        if enabled:
            _tf1.enable_control_flow_v2()
        else:
            _tf1.disable_control_flow_v2()


@contextlib.contextmanager
def _npu_sessions():
    """``npu_adapter.install()`` in effect (as after ``import npu_bridge``), undone afterwards
    when it was not in effect before."""
    from npu_adapter.session import install, is_installed, uninstall

    installed = is_installed()
    if not installed:
        install()
    try:
        yield
    finally:
        if not installed:
            uninstall()


def _split_fetches(fetched):
    """Tensors (compared) and operations (run as targets) of what ``build`` returned."""
    items = list(fetched) if isinstance(fetched, (list, tuple)) else [fetched]
    tensors, ops = [], []
    for item in items:
        if isinstance(item, tf.Operation):
            ops.append(item)
        elif isinstance(item, tf.Tensor):
            tensors.append(item)
        elif isinstance(item, tf.Variable):
            tensors.append(tf.convert_to_tensor(item))
        else:
            raise TypeError("build must return tensors and operations (what you would pass "
                            f"to Session.run), got a {type(item).__name__}")
    return tensors, ops


def _tensor_name(name):
    return name if ":" in name else name + ":0"


def _feeds_for_step(feeds, step):
    if feeds is None:
        return {}
    if callable(feeds):
        return dict(feeds(step))
    if isinstance(feeds, Mapping):
        return dict(feeds)
    return dict(feeds[step])


def _run_side(build, make_session, *, steps, feeds, init, variables, config):
    """Build the graph afresh and run it; returns a :class:`_Trace` (errors of TensorFlow or of
    the session end the trace, they are not raised). ``variables`` names the variables to read
    after each step; None (the first plain run) reads each one alone after the initialisers
    and keeps those that can be read, as ``trace.variables``."""
    trace = _Trace()
    graph = tf.Graph()
    with graph.as_default(), _control_flow_v2_kept():
        try:
            fetched = build()
        except Exception as error:  # TensorFlow refuses the graph: plain cannot run it either
            trace.error = ("build", error)
            return trace
        tensors, targets = _split_fetches(fetched)
        init_ops = [_tf1.global_variables_initializer(), _tf1.local_variables_initializer(),
                    _tf1.tables_initializer()]
        init_ops += [graph.get_operation_by_name(name) for name in init]
    reads = variable_reads(graph)
    if variables is not None:
        reads = [(name, tensor) for name, tensor in reads if name in variables]
    fetch_names = [t.name for t in tensors]
    phase = "session"
    try:
        sess = make_session(graph, config)
    except Exception as error:  # every error of the side is its result
        trace.error = (phase, error)
        return trace
    try:
        phase = "init"
        sess.run(init_ops)
        if variables is None:
            reads = [(name, tensor) for name, tensor in reads if _readable(sess, tensor)]
        trace.variables = [name for name, _ in reads]
        for step in range(steps):
            phase = f"step {step}"
            feed_dict = {graph.get_tensor_by_name(_tensor_name(k)): v
                         for k, v in _feeds_for_step(feeds, step).items()}
            trace.feeds_intermediate |= any(t.op.type not in _PLACEHOLDERS for t in feed_dict)
            values = sess.run(tensors + targets, feed_dict)[:len(tensors)]
            trace.values.append((phase, "fetch", list(zip(fetch_names, values))))
            if reads:
                phase = f"variables after step {step}"
                values = sess.run([t for _, t in reads])
                trace.values.append((phase, "variable",
                                     [(name, v) for (name, _), v in zip(reads, values)]))
    except Exception as error:
        trace.error = (phase, error)
    finally:
        try:
            sess.close()
        except Exception as error:
            if trace.error is None:
                trace.error = ("close", error)
    return trace


def _readable(sess, tensor):
    """Whether a variable can be read (a variable nobody initialises is not compared)."""
    try:
        sess.run(tensor)
    except tf.errors.OpError:
        return False
    return True


def _compare_traces(expected, actual):
    """(values compared, mismatches at the first differing phase)."""
    compared = 0
    for (phase, kind, want), (_, _, got) in zip(expected.values, actual.values):
        step = int(phase.rsplit(" ", 1)[1])
        found = []
        for (name, e), (_, a) in zip(want, got):
            compared += 1
            diff = difference(e, a)
            if diff is not None:
                found.append(Mismatch(step, kind, name, diff))
        if found:
            return compared, tuple(found)
    return compared, ()


def _same_trace(a, b):
    if len(a.values) != len(b.values) or (a.error is None) != (b.error is None):
        return False
    return all(difference(x, y) is None
               for (_, _, xs), (_, _, ys) in zip(a.values, b.values)
               for (_, x), (_, y) in zip(xs, ys))


def _normalise_option_sets(option_sets):
    if isinstance(option_sets, Mapping):
        items = list(option_sets.items())
    else:
        items = []
        for entry in option_sets:
            if not isinstance(entry, OptionSet):
                raise TypeError("option_sets is a dict of name to options, or OptionSet "
                                f"entries; got a {type(entry).__name__}")
            if entry.gears is not None:
                raise ValueError(f"option set {entry.name!r} needs gears from a generated case; "
                                 "give input_shape, dynamic_dims and dynamic_node_type in its "
                                 "options instead")
            items.append((entry.name, entry.options))
    from npu_adapter.config import NpuConfig

    result = []
    for name, options in items:
        if not isinstance(name, str) or not isinstance(options, Mapping):
            raise TypeError("each option set is a name (str) with a dict of NpuOptimizer "
                            "options")
        NpuConfig.from_dict(options)  # a bad option is the caller's error, not a finding
        result.append((name, dict(options)))
    if not result:
        raise ValueError("option_sets is empty: give at least one set of NpuOptimizer options")
    return result


def compare_sessions(build, option_sets, *, steps=3, feeds=None, init=(), session_config=None,
                     compare_variables=True, expected_refusals=EXPECTED_REFUSALS):
    """Run ``build``'s graph in plain TensorFlow and in an NPU session per option set.

    Args:
        build: a function of no arguments that builds the graph into the default graph (it is
            called once per session, each time in a fresh ``tf.Graph``) and returns what a
            session runs at each step: a tensor, an operation, or a list of them. Tensors are
            compared; operations (train ops, ``assign_add``) run as targets. It must seed every
            random op (``tf.compat.v1.set_random_seed`` or ``seed=``) so both sides draw the
            same numbers.
        option_sets: ``{name: {option: value}}`` (``NpuOptimizer`` options as Python values,
            as ``NpuConfig.from_dict`` takes them), or :class:`OptionSet` entries without gears.
        steps: runs of the fetches; every fetch and every variable is compared after each.
        feeds: ``{tensor name: value}`` fed at every step, a list of such dicts (one per step),
            or a function of the step returning one. Any tensor may be fed, not only
            placeholders.
        init: names of operations run once after the standard initialisers (global and local
            variables, tables), e.g. an initialisable iterator's initializer.
        session_config: a ``ConfigProto`` both sides start from (the NPU side gets the option
            set's ``NpuOptimizer`` entry added).
        compare_variables: read and compare every variable (``VariableV2`` and ``VarHandleOp``)
            after each step.
        expected_refusals: :class:`ExpectedRefusal` entries; a failure matching one whose
            remedy runs equal is ``refused`` (``()``: every failure counts).

    Returns:
        A :class:`SessionComparison` with one :class:`RunOutcome` per option set.

    Raises:
        InvalidGraphError: the graph fails in plain TensorFlow (at any phase).
        NpuConfigError: an option set holds an invalid option.
    """
    from npu_adapter.config import NpuConfig
    from npu_adapter.session import plain_session_class

    sets = _normalise_option_sets(option_sets)
    init = tuple(init)
    base = session_config if session_config is not None else _tf1.ConfigProto()
    plain_config = NpuConfig.from_config_proto(None).to_config_proto(base)
    plain_class = plain_session_class()

    def plain_session(graph, config):
        return plain_class(graph=graph, config=config)

    def npu_session(graph, config):
        return _tf1.Session(graph=graph, config=config)

    run = {"steps": steps, "feeds": feeds, "init": init}
    expected = _run_side(build, plain_session, config=plain_config,
                         variables=None if compare_variables else (), **run)
    if expected.error is not None:
        phase, error = expected.error
        raise InvalidGraphError(f"the graph fails in plain TensorFlow at {phase}: "
                                f"{type(error).__name__}: {_message(error)}") from error
    run["variables"] = tuple(expected.variables)
    second_plain = unoptimised = None
    outcomes = []
    with _npu_sessions():
        for name, options in sets:
            config = NpuConfig.from_dict(options).to_config_proto(base)
            actual = _run_side(build, npu_session, config=config, **run)
            compared, mismatches = _compare_traces(expected, actual)
            outcome = RunOutcome(name, options, compared, mismatches)
            if not mismatches and actual.error is not None:
                phase, error = actual.error
                outcome.failure = RunFailure(phase, type(error).__name__, _message(error))
                refusal = _matching_refusal(outcome.failure, expected_refusals)
                if refusal is not None:
                    remedied = NpuConfig.from_dict({**options, **refusal.remedy})
                    remedy_run = _run_side(build, npu_session,
                                           config=remedied.to_config_proto(base), **run)
                    compared, remedy_mismatches = _compare_traces(expected, remedy_run)
                    if not remedy_mismatches and remedy_run.error is None:
                        outcome.refusal, outcome.remedy_compared = refusal, compared
            if mismatches:
                if second_plain is None:
                    second_plain = _run_side(build, plain_session, config=plain_config,
                                             **run)
                if not _same_trace(expected, second_plain):
                    outcome.reference_problem = "unreproducible"
                elif expected.feeds_intermediate:
                    # TensorFlow 2.15-2.21's arithmetic optimizer may rewrite a consumer of a
                    # fed tensor in terms of that tensor's inputs (feeding t = p + p, then
                    # t * 2 is computed as p * 4): plain TensorFlow then ignores the feed.
                    if unoptimised is None:
                        unoptimised = _run_side(build, plain_session,
                                                config=_without_arithmetic(plain_config), **run)
                    if unoptimised.error is None and _same_trace(unoptimised, actual):
                        outcome.reference_problem = "plain_ignores_feed"
            outcomes.append(outcome)
    return SessionComparison(steps, outcomes)


def _matching_refusal(failure, refusals):
    """The first of ``refusals`` whose pattern matches ``failure`` (its error type and the line
    that says what went wrong), or None."""
    text = f"{failure.error_type}: {error_summary(failure.message)}"
    return next((r for r in refusals if re.search(r.pattern, text)), None)


def _without_arithmetic(config):
    """``config`` with Grappler's arithmetic optimizer off."""
    from tensorflow.core.protobuf import rewriter_config_pb2

    copy = _tf1.ConfigProto()
    copy.CopyFrom(config)
    copy.graph_options.rewrite_options.arithmetic_optimization = \
        rewriter_config_pb2.RewriterConfig.OFF
    return copy


def _message(error):
    return getattr(error, "message", None) or str(error)


def assert_session_equivalent(build, option_sets, *, steps=3, feeds=None, init=(),
                              session_config=None, compare_variables=True,
                              expected_refusals=EXPECTED_REFUSALS):
    """:func:`compare_sessions`, raising :class:`SessionMismatchError` (an ``AssertionError``)
    when any option set differs from plain TensorFlow or fails where it runs (an expected
    refusal whose remedy runs equal is no failure). The message
    names each option set, the step, the tensor, how it differs (first differing index, the
    two values, max abs diff and ulp) or the error, and how to rerun one set alone.

    Returns:
        The :class:`SessionComparison` when every option set gives plain TensorFlow's values.

    Raises:
        SessionMismatchError: an option set differs or fails.
        InvalidGraphError: the graph fails in plain TensorFlow, or plain TensorFlow is no
            reference for it: not reproducible (an unseeded random op; oneDNN's kernels), or
            ignoring a fed tensor (see :attr:`RunOutcome.status`).
    """
    comparison = compare_sessions(build, option_sets, steps=steps, feeds=feeds, init=init,
                                  session_config=session_config,
                                  compare_variables=compare_variables,
                                  expected_refusals=expected_refusals)
    statuses = {o.status for o in comparison.outcomes}
    if "unreproducible" in statuses:
        raise InvalidGraphError(
            "plain TensorFlow gives different values from run to run on this graph, so a "
            "difference proves nothing: seed every random op, and set TF_ENABLE_ONEDNN_OPTS=0 "
            "before TensorFlow is imported")
    if "plain_ignores_feed" in statuses:
        raise InvalidGraphError(
            "plain TensorFlow ignores a fed tensor on this graph (its arithmetic optimizer "
            "computes a consumer from the fed tensor's inputs), so it is no reference: feed "
            "placeholders, or compare with arithmetic_optimization off in session_config")
    failed = comparison.failed
    if failed:
        first = failed[0]
        lines = [f"the NPU session differs from plain TensorFlow under {len(failed)} of "
                 f"{len(comparison.outcomes)} option sets ({steps} steps):"]
        lines += [o.describe() for o in failed]
        lines.append("to reproduce one set alone: assert_session_equivalent(build, "
                     f"{{{literal_source(first.option_set)}: {literal_source(first.options)}}}, "
                     f"steps={steps}, ...) with the same build, feeds and init")
        raise SessionMismatchError("\n".join(lines), comparison)
    return comparison
