"""Pass instruments: dump, verify, timing, capture, skip."""

import os

import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

from npu_adapter.errors import GraphInvariantError, PassError
from npu_adapter.graph.serialize import to_text
from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.pipeline.instruments import (
    CaptureInstrument,
    DumpInstrument,
    SkipPassesInstrument,
    TimingInstrument,
    VerifyInstrument,
)
from npu_adapter.pipeline.manager import PassManager
from npu_adapter.testing import GraphBuilder


def _graph():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    return b.graph_def()


def _copy(graph_def):
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    return out


class _Add(PassBase):
    """Appends a Placeholder called ``node``; ``name`` may be overridden per instance."""

    name = "add"

    def __init__(self, node="added", name=None):
        super().__init__()
        self.node = node
        if name is not None:
            self.name = name

    def run(self, graph_def, ctx, view):
        out = _copy(graph_def)
        node = out.node.add()
        node.name = self.node
        node.op = "Placeholder"
        node.attr["dtype"].type = tf.float32.as_datatype_enum
        return PassResult(out, True)


class _Noop(PassBase):
    name = "noop"

    def run(self, graph_def, ctx, view):
        return PassResult(graph_def, False)


class _Dangle(PassBase):
    """Produces a graph with a dangling input (an invalid output)."""

    name = "dangle"

    def run(self, graph_def, ctx, view):
        out = _copy(graph_def)
        out.node[-1].input.append("ghost")
        return PassResult(out, True)


class _Fail(PassBase):
    name = "fail"

    def run(self, graph_def, ctx, view):
        raise RuntimeError("pass bug")


def _read(path):
    with open(path, encoding="utf-8") as f:
        return text_format.Parse(f.read(), graph_pb2.GraphDef())


# --------------------------------------------------------------------------- DumpInstrument
def test_dump_writes_numbered_before_and_after_files(tmp_path):
    dump = DumpInstrument(str(tmp_path), run_name="run1")
    gd = _graph()
    out = PassManager([_Add("p0"), _Noop(), _Add("p2")], [dump]).run(gd)
    names = sorted(os.listdir(tmp_path / "run1"))
    assert names == ["000_add_after.pbtxt", "000_add_before.pbtxt", "001_noop_after.pbtxt",
                     "001_noop_before.pbtxt", "002_add_after.pbtxt", "002_add_before.pbtxt"]
    assert dump.files[0] == str(tmp_path / "run1" / "000_add_before.pbtxt")
    assert len(dump.files) == 6
    assert _read(tmp_path / "run1" / "000_add_before.pbtxt") == gd
    assert _read(tmp_path / "run1" / "002_add_after.pbtxt") == out.graph_def
    # The text is the deterministic serialisation.
    assert (tmp_path / "run1" / "000_add_before.pbtxt").read_text() == to_text(gd)


def test_dump_only_modified_skips_after_files_of_noops(tmp_path):
    dump = DumpInstrument(str(tmp_path), only_modified=True)
    PassManager([_Noop(), _Add()], [dump]).run(_graph())
    assert sorted(os.listdir(tmp_path / "run")) == [
        "000_noop_before.pbtxt", "001_add_after.pbtxt", "001_add_before.pbtxt"]


def test_dump_keeps_the_pipeline_index_of_skipped_passes(tmp_path):
    dump = DumpInstrument(str(tmp_path))
    PassManager([_Add("p0"), _Noop(), _Add("p2")],
                [SkipPassesInstrument(["noop"]), dump]).run(_graph())
    assert sorted(os.listdir(tmp_path / "run")) == [
        "000_add_after.pbtxt", "000_add_before.pbtxt", "002_add_after.pbtxt",
        "002_add_before.pbtxt"]


def test_dump_writes_the_input_of_a_failing_pass(tmp_path):
    dump = DumpInstrument(str(tmp_path))
    gd = _graph()
    with pytest.raises(PassError):
        PassManager([_Add("p0"), _Fail()], [dump]).run(gd)
    files = sorted(os.listdir(tmp_path / "run"))
    assert files == ["000_add_after.pbtxt", "000_add_before.pbtxt", "001_fail_before.pbtxt"]
    assert [n.name for n in _read(tmp_path / "run" / "001_fail_before.pbtxt").node] == \
        ["x", "a", "p0"]


def test_dump_transform_is_applied_to_what_is_written(tmp_path):
    def strip_names(graph_def):
        out = _copy(graph_def)
        for node in out.node:
            node.name = "n_" + node.name
        return out

    gd = _graph()
    dump = DumpInstrument(str(tmp_path), transform=strip_names)
    out = PassManager([_Add()], [dump]).run(gd)
    assert [n.name for n in _read(tmp_path / "run" / "000_add_after.pbtxt").node] == \
        ["n_x", "n_a", "n_added"]
    assert [n.name for n in out.graph_def.node] == ["x", "a", "added"]  # only the dump changed
    assert [n.name for n in gd.node] == ["x", "a"]


@pytest.mark.parametrize("run_name, pass_name, expected_dir, expected_stem", [
    ("../../escape", "../../etc/passwd", "_escape", "000__etc_passwd"),
    ("/abs/path", "a\\b c", "_abs_path", "000_a_b_c"),
    ("", "..", "_", "000__"),
    ("run.1", "my.pass", "run_1", "000_my_pass"),
])
def test_dump_names_are_sanitised_and_stay_inside_the_dump_dir(tmp_path, run_name, pass_name,
                                                               expected_dir, expected_stem):
    out_dir = tmp_path / "dumps"
    dump = DumpInstrument(str(out_dir), run_name=run_name)
    PassManager([_Add(name=pass_name)], [dump]).run(_graph())
    assert sorted(os.listdir(out_dir)) == [expected_dir]
    assert sorted(os.listdir(out_dir / expected_dir)) == [
        f"{expected_stem}_after.pbtxt", f"{expected_stem}_before.pbtxt"]
    root = os.path.realpath(out_dir)
    for path in dump.files:
        assert os.path.realpath(path).startswith(root + os.sep)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(str(p).startswith(str(out_dir)) for p in written)


def test_dump_truncates_very_long_names(tmp_path):
    dump = DumpInstrument(str(tmp_path), run_name="r" * 500)
    PassManager([_Add(name="p" * 500)], [dump]).run(_graph())
    (run_dir,) = os.listdir(tmp_path)
    assert run_dir == "r" * 120
    for name in os.listdir(tmp_path / run_dir):
        assert len(name) <= len("000_") + 120 + len("_before.pbtxt")


# --------------------------------------------------------------------------- VerifyInstrument
def _invalid_graph():
    gd = _graph()
    gd.node[1].input.append("missing")
    return gd


def test_verify_rejects_an_invalid_input_naming_the_first_pass():
    with pytest.raises(GraphInvariantError, match="input of pass 'noop'") as info:
        PassManager([_Noop(), _Add()], [VerifyInstrument()]).run(_invalid_graph())
    assert any("'missing'" in v for v in info.value.violations)
    assert info.value.pass_name == "noop"


def test_verify_without_input_check_accepts_the_input():
    out = PassManager([_Noop()], [VerifyInstrument(check_input=False)]).run(_invalid_graph())
    assert not out.modified


def test_verify_rejects_an_invalid_output_naming_the_pass():
    pm = PassManager([_Add(), _Dangle(), _Add("late")], [VerifyInstrument()])
    with pytest.raises(GraphInvariantError, match="output of pass 'dangle'") as info:
        pm.run(_graph())
    assert info.value.pass_name == "dangle"
    assert info.value.previous_passes == ["add"]
    assert any("ghost" in v for v in info.value.violations)


def test_verify_accepts_valid_pipelines():
    out = PassManager([_Add("a1"), _Noop(), _Add("a2")], [VerifyInstrument()]).run(_graph())
    assert [n.name for n in out.graph_def.node] == ["x", "a", "a1", "a2"]


def test_verify_checks_the_input_of_every_run():
    pm = PassManager([_Noop()], [VerifyInstrument()])
    pm.run(_graph())
    with pytest.raises(GraphInvariantError, match="input of pass 'noop'"):
        pm.run(_invalid_graph())


# --------------------------------------------------------------------------- TimingInstrument
def test_timing_records_one_entry_per_pass_that_ran():
    timing = TimingInstrument()
    PassManager([_Add("a1"), _Noop(), _Add("a2")],
                [SkipPassesInstrument(["noop"]), timing]).run(_graph())
    assert [name for name, _ in timing.timings] == ["add", "add"]
    assert all(isinstance(t, float) and t >= 0 for _, t in timing.timings)
    assert timing.total() == pytest.approx(sum(t for _, t in timing.timings))


def test_timing_has_no_entry_for_a_failing_pass():
    timing = TimingInstrument()
    with pytest.raises(PassError):
        PassManager([_Add(), _Fail()], [timing]).run(_graph())
    assert [name for name, _ in timing.timings] == ["add"]


# --------------------------------------------------------------------------- CaptureInstrument
def test_capture_after_keeps_the_outputs_of_named_passes():
    cap = CaptureInstrument(["add"])
    gd = _graph()
    out = PassManager([_Add("a1"), _Noop()], [cap]).run(gd)
    assert set(cap.graphs) == {"add"}
    assert cap.graphs["add"] is out.graph_def


def test_capture_before_keeps_the_inputs():
    cap = CaptureInstrument(["add", "noop"], stage="before")
    gd = _graph()
    out = PassManager([_Add("a1"), _Noop()], [cap]).run(gd)
    assert cap.graphs["add"] is gd
    assert cap.graphs["noop"] is out.graph_def


def test_capture_of_a_repeated_pass_keeps_the_last_run():
    cap = CaptureInstrument(["add"])
    PassManager([_Add("a1"), _Add("a2")], [cap]).run(_graph())
    assert [n.name for n in cap.graphs["add"].node] == ["x", "a", "a1", "a2"]


def test_capture_rejects_an_unknown_stage():
    with pytest.raises(ValueError, match="stage must be 'before' or 'after', got 'during'"):
        CaptureInstrument(["add"], stage="during")


# --------------------------------------------------------------------------- SkipPassesInstrument
def test_skip_passes_skips_every_run_of_the_named_passes():
    out = PassManager([_Add("a1"), _Noop(), _Add("a2")],
                      [SkipPassesInstrument(["add"])]).run(_graph())
    assert [name for name, _ in out.results] == ["noop"]
    assert [n.name for n in out.graph_def.node] == ["x", "a"]


def test_skip_passes_with_unknown_names_changes_nothing():
    out = PassManager([_Add("a1")], [SkipPassesInstrument(["nothing_by_that_name"])]).run(
        _graph())
    assert [name for name, _ in out.results] == ["add"]
