"""Passes that edit an input the pipeline owns (``PassContext.may_edit``).

The manager lets a pass edit its input in place only when the run owns it (an earlier pass of
the run made it, or the caller handed it over) and no instrument keeps it. The passes that do
(``mark_candidates``, ``cluster`` and the CPU lowering) must produce byte for byte what they
produce on a copy, and the user's graph is never touched.
"""

import pytest
import tensorflow as tf
from graph_cases import mix_compile_graph, while_loop_v1_graph

from bench.synthetic import synthetic_graph
from npu_adapter import rewrite
from npu_adapter.errors import GraphInvariantError
from npu_adapter.graph.serialize import to_bytes
from npu_adapter.pipeline.base import PassBase, PassContext, PassResult
from npu_adapter.pipeline.instruments import (
    CaptureInstrument,
    InputUnchangedInstrument,
    PassInstrument,
    TimingInstrument,
)
from npu_adapter.pipeline.manager import PassManager
from npu_adapter.testing import GraphBuilder


def _graph():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    return b.graph_def()


class _Probe(PassBase):
    """Records whether it may edit its input, and hands on a new graph (a copy)."""

    def __init__(self, name, log, edit=False, copy=True):
        self.name = name
        self._log = log
        self._edit = edit
        self._copy = copy
        super().__init__()

    def run(self, graph_def, ctx):
        allowed = ctx.may_edit(graph_def)
        self._log.append((self.name, allowed))
        if self._edit and allowed:
            graph_def.node[0].attr["_edited_by"].s = self.name.encode()
            return PassResult(graph_def, True)
        if not self._copy:
            return PassResult(graph_def, False)
        out = type(graph_def)()
        out.CopyFrom(graph_def)
        out.node[0].attr["_copied_by"].s = self.name.encode()
        return PassResult(out, True)


def _run(passes, graph_def, instruments=(), owned=False):
    return PassManager(passes, list(instruments)).run(graph_def, PassContext(), owned=owned)


def test_only_graphs_the_run_made_may_be_edited():
    log = []
    user = _graph()
    before = to_bytes(user)
    _run([_Probe("p1", log), _Probe("p2", log), _Probe("p3", log)], user)
    assert log == [("p1", False), ("p2", True), ("p3", True)]
    assert to_bytes(user) == before


def test_a_graph_handed_over_may_be_edited_by_the_first_pass():
    log = []
    _run([_Probe("p1", log)], _graph(), owned=True)
    assert log == [("p1", True)]


def test_an_unchanged_graph_stays_as_owned_as_it_was():
    log = []
    _run([_Probe("keep", log, copy=False), _Probe("p2", log)], _graph())
    assert log == [("keep", False), ("p2", False)]  # still the caller's graph
    log.clear()
    _run([_Probe("p1", log), _Probe("keep", log, copy=False), _Probe("p3", log)], _graph())
    assert log == [("p1", False), ("keep", True), ("p3", True)]


def test_an_edit_in_place_is_passed_on():
    log = []
    out = _run([_Probe("p1", log), _Probe("p2", log, edit=True)], _graph())
    assert out.graph_def.node[0].attr["_edited_by"].s == b"p2"
    assert out.modified


def test_an_instrument_that_may_keep_graphs_forbids_edits():
    class Unknown(PassInstrument):
        pass  # says nothing about keeping: assumed to keep

    log = []
    _run([_Probe("p1", log), _Probe("p2", log)], _graph(), [Unknown()], owned=True)
    assert log == [("p1", False), ("p2", False)]
    log.clear()
    _run([_Probe("p1", log), _Probe("p2", log)], _graph(), [TimingInstrument()], owned=True)
    assert log == [("p1", True), ("p2", True)]


def test_a_captured_graph_is_not_edited():
    log = []
    capture = CaptureInstrument(["p2"], stage="before")
    _run([_Probe("p1", log), _Probe("p2", log, edit=True), _Probe("p3", log)], _graph(),
         [capture])
    assert log == [("p1", False), ("p2", False), ("p3", True)]
    assert "_edited_by" not in capture.graphs["p2"].node[0].attr
    log.clear()
    after = CaptureInstrument(["p1"], stage="after")
    _run([_Probe("p1", log), _Probe("p2", log, edit=True)], _graph(), [after])
    assert log == [("p1", False), ("p2", False)]  # p1's output is p2's input: kept


def test_the_input_check_allows_owned_edits_and_still_catches_the_others():
    class Mutator(PassBase):
        name = "mutator"

        def run(self, graph_def, ctx):
            graph_def.node[0].attr["_mutated"].b = True
            return PassResult(graph_def, True)

    # Owned: the edit is allowed and reported truthfully.
    _run([Mutator()], _graph(), [InputUnchangedInstrument()], owned=True)
    # Not owned: an edit in place is an error.
    with pytest.raises(GraphInvariantError, match="modified its input GraphDef in place"):
        _run([Mutator()], _graph(), [InputUnchangedInstrument()])

    class LiesAboutEdit(PassBase):
        name = "lies_about_edit"

        def run(self, graph_def, ctx):
            graph_def.node[0].attr["_mutated"].b = True
            return PassResult(graph_def, False)

    with pytest.raises(GraphInvariantError, match="modified=False but its output differs"):
        _run([LiesAboutEdit()], _graph(), [InputUnchangedInstrument()], owned=True)


def test_ownership_ends_with_the_run():
    ctx = PassContext()
    PassManager([_Probe("p1", []), _Probe("p2", [])]).run(_graph(), ctx, owned=True)
    assert not ctx.may_edit(_graph())
    assert ctx._owned is None


def _summary(result):
    return (to_bytes(result.graph_def), result.placement, result.clusters, result.tensor_map,
            result.op_map, result.feed_map, result.aliases, result.modified)


def _cases():
    small = synthetic_graph(1500, seed=3)
    return [
        ("synthetic", small.graph_def, small.fetches, list(small.feeds), {}),
        ("synthetic mix", small.graph_def, small.fetches, list(small.feeds),
         {"mix_compile_mode": True}),
        ("mix graph", mix_compile_graph(), None, None, {"mix_compile_mode": True}),
        ("while loop", while_loop_v1_graph(), None, None, {}),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_edits_in_place_give_what_copies_give(monkeypatch, case):
    _, graph_def, fetches, feeds, options = case
    before = to_bytes(graph_def)

    def run():
        return rewrite(graph_def, options, fetches=fetches, feeds=feeds)

    edited = run()
    allowed = []
    real = PassContext.may_edit

    def never(self, g):
        allowed.append(real(self, g))
        return False

    monkeypatch.setattr(PassContext, "may_edit", never)
    copied = run()
    assert _summary(edited) == _summary(copied)
    assert to_bytes(graph_def) == before  # the user's graph is never edited
    if fetches:
        assert any(allowed)  # the extracted client graph and the passes' graphs were owned


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
