"""PassManager: error context, instrument hook order, purity of passes, truthful ``modified``.

The toy passes here are plain ``PassBase`` subclasses that are *not* registered (the registry is
global; only ``graph_pass`` needs a registered name, and that is tested in
``test_pipeline_text.py``).
"""

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import build_geop_graph, chain_with_branch, mix_compile_graph, while_loop_v1_graph

from npu_adapter import rewrite
from npu_adapter.errors import GraphError, GraphInvariantError, NpuConfigError, PassError
from npu_adapter.graph.serialize import to_bytes
from npu_adapter.op_support import OpSupportList, original_test_fixture_list
from npu_adapter.pipeline.base import PassBase, PassContext, PassOption, PassResult
from npu_adapter.pipeline.instruments import (
    InputUnchangedInstrument,
    PassInstrument,
    SkipPassesInstrument,
)
from npu_adapter.pipeline.manager import PassManager, PipelineResult
from npu_adapter.testing import GraphBuilder


def _graph():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    return b.graph_def()


def _with_node(graph_def, name):
    """A copy of ``graph_def`` with one more Placeholder."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    node = out.node.add()
    node.name = name
    node.op = "Placeholder"
    node.attr["dtype"].type = tf.float32.as_datatype_enum
    return out


class _AddNode(PassBase):
    """Adds a Placeholder named after the pass (a real, well-behaved change)."""

    name = "add_node"
    options = {"node": PassOption(str, "added", "name of the new node")}

    def run(self, graph_def, ctx, view):
        return PassResult(_with_node(graph_def, self.option("node")), True, {"added": 1})


class _Noop(PassBase):
    name = "noop"

    def run(self, graph_def, ctx, view):
        return PassResult(graph_def, False)


class _Boom(PassBase):
    """Raises the exception it was given."""

    name = "boom"

    def __init__(self, exc):
        super().__init__()
        self.exc = exc

    def run(self, graph_def, ctx, view):
        raise self.exc


class _Mutator(PassBase):
    """Deliberately edits its input in place (what passes must never do)."""

    name = "mutator"

    def run(self, graph_def, ctx, view):
        graph_def.node[0].attr["_mutated"].b = True
        return PassResult(_with_node(graph_def, "mutated_out"), True)


class _LiesUnmodified(PassBase):
    name = "lies_unmodified"

    def run(self, graph_def, ctx, view):
        return PassResult(_with_node(graph_def, "sneaky"), False)


class _LiesModified(PassBase):
    name = "lies_modified"

    def run(self, graph_def, ctx, view):
        copy = type(graph_def)()
        copy.CopyFrom(graph_def)
        return PassResult(copy, True)


class _Recorder(PassInstrument):
    """Records every hook call as a tuple in the shared ``log``."""

    def __init__(self, tag, log, skip=(), fail_after=()):
        self.tag = tag
        self.log = log
        self.skip = set(skip)
        self.fail_after = set(fail_after)

    def enter_pipeline(self, ctx):
        self.log.append((self.tag, "enter"))

    def exit_pipeline(self, ctx, ok):
        self.log.append((self.tag, "exit", ok))

    def should_run(self, index, pass_, graph_def, ctx):
        self.log.append((self.tag, "should_run", index, pass_.name))
        return pass_.name not in self.skip

    def before_pass(self, index, pass_, graph_def, ctx):
        self.log.append((self.tag, "before", index, pass_.name))

    def after_pass(self, index, pass_, graph_def, result, ctx):
        self.log.append((self.tag, "after", index, pass_.name))
        if pass_.name in self.fail_after:
            raise GraphInvariantError([f"{self.tag} refuses {pass_.name}"])

    def on_error(self, index, pass_, graph_def, ctx, exc):
        self.log.append((self.tag, "on_error", index, pass_.name, type(exc).__name__))


# --------------------------------------------------------------------------- construction
def test_manager_rejects_non_passes_and_non_instruments():
    with pytest.raises(TypeError, match="PassBase instances, got str"):
        PassManager(["cluster"])
    with pytest.raises(TypeError, match="PassInstrument instances, got object"):
        PassManager([_Noop()], [object()])


def test_manager_text_is_the_canonical_pipeline():
    pm = PassManager.from_pipeline(" cluster( max_clusters = 2 , min_size=3 ) , lower ")
    assert pm.pipeline_text() == str(pm) == "cluster(max_clusters=2,min_size=3),lower"
    assert [p.name for p in pm.passes] == ["cluster", "lower"]


# --------------------------------------------------------------------------- results
def test_results_chain_the_graphs_and_report_modified():
    gd = _graph()
    out = PassManager([_AddNode(node="p1"), _Noop(), _AddNode(node="p2")]).run(gd)
    assert isinstance(out, PipelineResult)
    assert [n.name for n in out.graph_def.node] == ["x", "a", "p1", "p2"]
    assert out.modified
    assert [name for name, _ in out.results] == ["add_node", "noop", "add_node"]
    assert out.info("add_node") == {"added": 1}  # the first run of the pass
    assert out.info("missing") == {}
    assert [n.name for n in gd.node] == ["x", "a"]


def test_pipeline_of_noops_is_not_modified_and_returns_the_input_object():
    gd = _graph()
    out = PassManager([_Noop(), _Noop()]).run(gd)
    assert not out.modified
    assert out.graph_def is gd


def test_empty_pass_list_returns_the_input():
    gd = _graph()
    out = PassManager([]).run(gd)
    assert out.graph_def is gd and not out.modified and out.results == []


def test_pass_returning_a_graph_def_instead_of_a_result_is_a_pass_error():
    class Sloppy(PassBase):
        name = "sloppy"

        def run(self, graph_def, ctx, view):
            return graph_def

    with pytest.raises(PassError, match="sloppy") as info:
        PassManager([_Noop(), Sloppy()]).run(_graph())
    assert isinstance(info.value.__cause__, TypeError)
    assert "must return PassResult" in str(info.value.__cause__)


def test_requires_and_ensures_hooks_run_around_the_pass():
    calls = []

    class Checked(_AddNode):
        def requires(self, graph_def, ctx):
            calls.append(("requires", len(graph_def.node)))

        def ensures(self, graph_def, ctx):
            calls.append(("ensures", len(graph_def.node)))
            raise GraphInvariantError(["postcondition"], context="ensures of 'add_node'")

    with pytest.raises(GraphInvariantError, match="postcondition") as info:
        PassManager([Checked()]).run(_graph())
    assert calls == [("requires", 2), ("ensures", 3)]
    assert info.value.pass_name == "add_node"


# --------------------------------------------------------------------------- error context
def test_library_errors_keep_their_type_and_gain_the_pass_context():
    exc = NpuConfigError("opt", 3, "an even number")
    pm = PassManager([_AddNode(node="p1"), _Noop(), _Boom(exc)])
    with pytest.raises(NpuConfigError) as info:
        pm.run(_graph())
    assert info.value is exc
    assert info.value.pass_name == "boom"
    assert info.value.previous_passes == ["add_node", "noop"]
    if hasattr(exc, "__notes__"):  # Python >= 3.11
        assert any("boom" in note and "add_node" in note for note in exc.__notes__)


def test_library_error_context_already_set_is_kept():
    exc = GraphError("bad graph")
    exc.pass_name = "inner"
    exc.previous_passes = ["earlier"]
    with pytest.raises(GraphError) as info:
        PassManager([_Noop(), _Boom(exc)]).run(_graph())
    assert info.value.pass_name == "inner"
    assert info.value.previous_passes == ["earlier"]


def test_other_exceptions_become_a_chained_pass_error():
    cause = KeyError("node_17")
    pm = PassManager([_AddNode(node="p1"), _Boom(cause)])
    with pytest.raises(PassError) as info:
        pm.run(_graph())
    err = info.value
    assert err.pass_name == "boom"
    assert err.previous_passes == ["add_node"]
    assert err.cause is cause and err.__cause__ is cause
    assert "pass 'boom' failed (passes run before it: add_node)" in str(err)
    assert "KeyError" in str(err) and "node_17" in str(err)


def test_first_pass_failing_has_no_previous_passes():
    with pytest.raises(PassError) as info:
        PassManager([_Boom(RuntimeError("x"))]).run(_graph())
    assert info.value.previous_passes == []


def test_skipped_passes_are_not_counted_as_previous():
    pm = PassManager([_AddNode(node="p1"), _Noop(), _Boom(RuntimeError("x"))],
                     [SkipPassesInstrument(["noop"])])
    with pytest.raises(PassError) as info:
        pm.run(_graph())
    assert info.value.previous_passes == ["add_node"]


# --------------------------------------------------------------------------- hook order
def test_hook_order_is_fixed_and_documented():
    log = []
    a, b = _Recorder("A", log), _Recorder("B", log)
    PassManager([_Noop(), _AddNode()], [a, b]).run(_graph())
    assert log == [
        ("A", "enter"), ("B", "enter"),
        ("A", "should_run", 0, "noop"), ("B", "should_run", 0, "noop"),
        ("A", "before", 0, "noop"), ("B", "before", 0, "noop"),
        ("A", "after", 0, "noop"), ("B", "after", 0, "noop"),
        ("A", "should_run", 1, "add_node"), ("B", "should_run", 1, "add_node"),
        ("A", "before", 1, "add_node"), ("B", "before", 1, "add_node"),
        ("A", "after", 1, "add_node"), ("B", "after", 1, "add_node"),
        ("A", "exit", True), ("B", "exit", True),
    ]


def test_should_run_false_skips_the_pass_and_its_hooks():
    log = []
    pm = PassManager([_AddNode(node="p1"), _Noop()],
                     [_Recorder("A", log, skip={"add_node"}), _Recorder("B", log)])
    out = pm.run(_graph())
    assert [n.name for n in out.graph_def.node] == ["x", "a"]  # the change never happened
    assert [name for name, _ in out.results] == ["noop"]
    assert not out.modified
    # Every instrument is asked; none sees before/after of the skipped pass.
    assert ("B", "should_run", 0, "add_node") in log
    assert not [e for e in log if e[1] in ("before", "after") and e[3] == "add_node"]


def test_exit_hooks_run_after_a_failure_and_on_error_is_called():
    log = []
    pm = PassManager([_Noop(), _Boom(RuntimeError("bad")), _AddNode()],
                     [_Recorder("A", log), _Recorder("B", log)])
    with pytest.raises(PassError):
        pm.run(_graph())
    assert log[-4:] == [
        ("A", "on_error", 1, "boom", "RuntimeError"),
        ("B", "on_error", 1, "boom", "RuntimeError"),
        ("A", "exit", False), ("B", "exit", False),
    ]
    assert not [e for e in log if len(e) > 3 and e[3] == "add_node"]  # nothing ran after it


def test_after_pass_failure_of_an_instrument_calls_on_error_and_exit():
    log = []
    pm = PassManager([_AddNode(), _Noop()],
                     [_Recorder("A", log, fail_after={"add_node"}), _Recorder("B", log)])
    with pytest.raises(GraphInvariantError, match="A refuses add_node") as info:
        pm.run(_graph())
    assert info.value.pass_name == "add_node"
    assert ("B", "after", 0, "add_node") not in log  # A raised first
    assert ("B", "on_error", 0, "add_node", "GraphInvariantError") in log
    assert log[-1] == ("B", "exit", False)


def test_failing_on_error_hook_does_not_mask_the_pass_error():
    class Broken(PassInstrument):
        def on_error(self, index, pass_, graph_def, ctx, exc):
            raise RuntimeError("instrument bug")

    with pytest.raises(PassError, match="original"):
        PassManager([_Boom(ValueError("original"))], [Broken()]).run(_graph())


def test_exit_only_for_instruments_whose_enter_ran():
    log = []

    class FailsOnEnter(PassInstrument):
        def enter_pipeline(self, ctx):
            raise RuntimeError("cannot start")

    with pytest.raises(RuntimeError, match="cannot start"):
        PassManager([_Noop()], [_Recorder("A", log), FailsOnEnter(), _Recorder("B", log)]).run(
            _graph())
    assert log == [("A", "enter"), ("A", "exit", False)]


def test_the_context_reaches_every_pass_and_hook():
    seen = []

    class Spy(PassBase):
        name = "spy"

        def run(self, graph_def, ctx, view):
            seen.append(ctx)
            return PassResult(graph_def, False)

    class SpyInstrument(PassInstrument):
        def before_pass(self, index, pass_, graph_def, ctx):
            seen.append(ctx)

    ctx = PassContext(graph_num=7)
    PassManager([Spy()], [SpyInstrument()]).run(_graph(), ctx)
    assert seen == [ctx, ctx] and all(c is ctx for c in seen)


# --------------------------------------------------------------------------- purity checks
def test_input_unchanged_instrument_catches_a_mutating_pass():
    gd = _graph()
    with pytest.raises(GraphInvariantError, match="'mutator' modified its input GraphDef in place"):
        PassManager([_Mutator()], [InputUnchangedInstrument()]).run(gd)


def test_a_pass_reporting_unmodified_but_changing_the_graph_is_caught():
    with pytest.raises(GraphInvariantError, match="'lies_unmodified' reported modified=False"):
        PassManager([_LiesUnmodified()], [InputUnchangedInstrument()]).run(_graph())


def test_a_noop_pass_reporting_modified_is_caught():
    with pytest.raises(GraphInvariantError, match="lies_modified"):
        PassManager([_LiesModified()], [InputUnchangedInstrument()]).run(_graph())


class _Stasher(PassBase):
    """Tries to hand data to a later pass through the context (what the contract forbids)."""

    name = "stasher"

    def run(self, graph_def, ctx, view):
        ctx.graph_num = 99
        return PassResult(graph_def, False)


def test_the_context_is_read_only_so_nothing_travels_outside_the_graph():
    import dataclasses

    ctx = PassContext(graph_num=3)
    with pytest.raises(PassError, match="stasher") as info:
        PassManager([_Stasher()]).run(_graph(), ctx)
    assert isinstance(info.value.__cause__, dataclasses.FrozenInstanceError)
    assert ctx.graph_num == 3
    # The defaults are resolved when the context is made: passes read plain attributes.
    assert ctx.config is not None and ctx.backend.name == "cpu"
    assert ctx.op_support is not None


class _StrictPurity(PassInstrument):
    """What every built-in pass must satisfy: its input is byte-identical after the pass, and
    ``modified`` is true exactly when the output serialises differently from the input."""

    def __init__(self):
        self.checked = []

    def before_pass(self, index, pass_, graph_def, ctx):
        self._before = to_bytes(graph_def)

    def after_pass(self, index, pass_, graph_def, result, ctx):
        assert to_bytes(graph_def) == self._before, f"{pass_.name} mutated its input"
        changed = to_bytes(result.graph_def) != self._before
        assert result.modified == changed, (
            f"{pass_.name} reported modified={result.modified} but the output "
            f"{'differs' if changed else 'is identical'}")
        self.checked.append((pass_.name, result.modified))


def _resource_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 2], name="x")
        v = tf.compat.v1.get_variable("v", initializer=np.eye(2, dtype=np.float32),
                                      use_resource=True)
        tf.identity(tf.matmul(x, v.read_value()) + 1.0, name="out")
    return g.as_graph_def()


_SCENARIOS = [
    ("geop_original_like", build_geop_graph, {}, "original_like", None),
    ("geop_cpu", lambda: build_geop_graph("Identity"), {}, "cpu", None),
    ("mix_compile", mix_compile_graph, {"mix_compile_mode": True}, "original_like", None),
    ("full_offload", mix_compile_graph, {"mix_compile_mode": False}, "original_like", None),
    ("in_out_pair", chain_with_branch,
     {"mix_compile_mode": True, "in_out_pair": "[[['A'],['C']]]"}, "cpu", None),
    ("in_out_pair_flag_false", chain_with_branch,
     {"mix_compile_mode": True, "in_out_pair": "[[['A'],['C']]]", "in_out_pair_flag": False},
     "cpu", ["Abs", "Floor"]),
    ("while_v1", while_loop_v1_graph, {"mix_compile_mode": True}, "cpu", None),
    ("resource", _resource_graph, {"mix_compile_mode": True}, "cpu", None),
    ("gated_job_ps", build_geop_graph, {"job": "ps"}, "original_like", None),
    ("nothing_supported", chain_with_branch, {}, "cpu", ["Relu"]),
]


@pytest.mark.parametrize("name, factory, options, backend, ops", _SCENARIOS,
                         ids=[s[0] for s in _SCENARIOS])
def test_every_builtin_pass_is_pure_and_reports_modified_truthfully(name, factory, options,
                                                                   backend, ops):
    gd = factory()
    original_bytes = to_bytes(gd)
    if ops is not None:
        support = OpSupportList.from_names(ops)
    elif backend == "original_like":
        support = original_test_fixture_list()
    else:
        support = None
    strict = _StrictPurity()
    result = rewrite(gd, options, backend=backend, op_support=support, instruments=[strict])
    assert to_bytes(gd) == original_bytes
    ran = [n for n, _ in strict.checked]
    assert ran == ["read_graph_config", "mark_candidates", "in_out_pair", "cluster",
                   "encapsulate", "insert_gears", "precision", "lower", "finalize"]
    if name.startswith("gated"):
        assert not any(m for _, m in strict.checked) and not result.modified
    if name == "nothing_supported":
        assert result.clusters == []
    else:
        assert name.startswith("gated") or result.clusters


# ------------------------------------------------------------------ declared preconditions


@pytest.mark.parametrize("name", ["cluster", "in_out_pair", "encapsulate"])
def test_pass_alone_on_unannotated_graph_names_the_missing_pass(name):
    from npu_adapter.passes import get_pass

    with pytest.raises(GraphInvariantError, match="run 'mark_candidates' before it") as info:
        get_pass(name)(_graph(), PassContext())
    assert repr(name) in str(info.value)


@pytest.mark.parametrize("name", ["read_graph_config", "mark_candidates", "cluster",
                                  "in_out_pair", "encapsulate"])
def test_gated_passes_leave_a_graph_without_npu_optimizer_alone(name):
    from npu_adapter.config import NpuConfig
    from npu_adapter.passes import get_pass

    graph = _graph()
    plain = NpuConfig.from_config_proto(tf.compat.v1.ConfigProto())  # no NpuOptimizer entry
    result = get_pass(name)(graph, PassContext(config=plain))
    assert result.graph_def is graph and not result.modified
    assert result.info == {"skipped": "no_npu_optimizer"}


def test_annotated_graph_satisfies_the_precondition():
    from npu_adapter.passes import get_pass

    ctx = PassContext()
    marked = get_pass("mark_candidates")(_graph(), ctx).graph_def
    clustered = get_pass("cluster")(marked, ctx)
    assert any(n.attr["_subgraphs"].s for n in clustered.graph_def.node if "_subgraphs" in n.attr)


def test_the_users_graph_is_untouched_when_the_client_graph_is_the_whole_graph():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    b.unary("Neg", "n", "a")
    graph_def = b.graph_def()
    before = to_bytes(graph_def)
    result = rewrite(graph_def, {}, fetches=["n:0"])
    assert result.clusters
    assert to_bytes(graph_def) == before
    with tf.Graph().as_default():
        tf.compat.v1.import_graph_def(result.graph_def, name="")


# ------------------------------------------------------------------ the index handed on
class _Annotate(PassBase):
    """Annotates every node and hands on the index of its output (``view.rebind``)."""

    name = "annotate"

    def __init__(self, log, rebind=True):
        super().__init__()
        self.log = log
        self.rebind = rebind

    def run(self, graph_def, ctx, view):
        self.log.append(view)
        out = type(graph_def)()
        out.CopyFrom(graph_def)
        for node in out.node:
            node.attr["_note"].s = b"seen"
        return PassResult(out, True, {}, view.rebind(out) if self.rebind else None)


class _Look(PassBase):
    name = "look"

    def __init__(self, log):
        super().__init__()
        self.log = log

    def run(self, graph_def, ctx, view):
        self.log.append(view)
        assert view.graph_def is graph_def
        return PassResult(graph_def, False)


def test_each_pass_gets_the_index_its_predecessor_handed_on():
    log = []
    out = PassManager([_Look(log), _Annotate(log), _Look(log), _Look(log)]).run(_graph())
    first, annotated, after, last = log
    assert annotated is first  # an unchanged graph keeps its index
    assert after is not first and after.graph_def is out.graph_def
    assert after.data_inputs is first.data_inputs  # the structure is shared, not parsed again
    assert last is after
    assert all(node.attr["_note"].s == b"seen" for node in after.nodes)


def test_without_a_handed_on_index_the_next_pass_builds_its_own():
    log = []
    PassManager([_Annotate(log, rebind=False), _Look(log)]).run(_graph())
    assert log[1].graph_def is not log[0].graph_def


def test_a_pass_given_the_index_of_another_graph_refuses_it():
    from npu_adapter.graph.view import GraphView

    with pytest.raises(ValueError, match="index of another graph"):
        _Look([])(_graph(), PassContext(), GraphView(_graph()))


class _WrongIndex(PassBase):
    """Adds a node but hands on its input's index (what VerifyInstrument must catch)."""

    name = "wrong_index"

    def run(self, graph_def, ctx, view):
        out = _with_node(graph_def, "extra")
        return PassResult(out, True, {}, view.rebind(out))


def test_the_verify_instrument_catches_an_index_that_is_not_the_outputs():
    from npu_adapter.pipeline.instruments import VerifyInstrument

    with pytest.raises(GraphInvariantError, match="'wrong_index' handed on an index"):
        PassManager([_WrongIndex()], [VerifyInstrument()]).run(_graph())
    log = []
    PassManager([_Annotate(log), _Look(log)], [VerifyInstrument()]).run(_graph())
