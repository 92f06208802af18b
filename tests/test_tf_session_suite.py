"""bench.tf_session_suite: TensorFlow's session tests, plain and forced through NpuOptimizer.

TensorFlow's test files are not in the repository; the end-to-end test runs the suite on a
stand-in "TensorFlow source folder" holding a small test file of our own under the path of
``session_partial_run_test.py``: one test that passes, one that is skipped, one that passes
only on plain TensorFlow (it checks the session is no NPU session) and one that kills its
process.
"""

import json
import os
import textwrap

import pytest
from tensorflow.core.protobuf import config_pb2

from bench import tf_session_suite as suite
from bench.tf_session_suite import FileRun, Outcome
from bench.tf_suite_site import forced_config, start
from npu_adapter.config import NpuConfig

SLOW = os.environ.get("NPU_ADAPTER_SLOW_TESTS") == "1"

_MONITORED_LIKE = textwrap.dedent("""\
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import variables


    def f():
      v = variables.VariableV1(1)
      return isinstance(v, ops.Tensor), ops.TensorShape, 'ops.Tensor in a string'
    """)


def test_adapt_source_renames_moved_names_and_adds_their_imports():
    missing = {"variables.VariableV1", "ops.Tensor", "control_flow_ops.Assert"}
    text, applied = suite.adapt_source(_MONITORED_LIKE, missing)
    assert applied == ["variables.VariableV1", "ops.Tensor"]  # the file has no Assert
    assert "variable_v1.VariableV1(1)" in text
    assert "isinstance(v, tensor.Tensor)" in text
    assert "ops.TensorShape" in text  # a longer name is left alone
    assert "'tensor.Tensor in a string'" in text  # the rename is textual, like the documented one
    lines = text.splitlines()
    assert lines[1] == "from tensorflow.python.framework import tensor"
    assert lines[3] == "from tensorflow.python.ops import variable_v1"
    compile(text, "adapted.py", "exec")


def test_adapt_source_leaves_names_the_installed_tensorflow_has():
    text, applied = suite.adapt_source(_MONITORED_LIKE, set())
    assert (text, applied) == (_MONITORED_LIKE, [])


def test_adapt_source_refuses_a_file_without_the_old_import():
    with pytest.raises(ValueError, match="no line 'from tensorflow.python.ops import variables'"):
        suite.adapt_source("x = variables.VariableV1(1)\n", {"variables.VariableV1"})


_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="session_test.SessionTest" name="testCreate" time="0.1" />
<testcase classname="session_test.SessionTest" name="testFetchNone" time="0.1">
  <failure message="AssertionError: TypeError not raised&#10;second line">trace</failure>
</testcase>
<testcase classname="session_test.SessionTest" name="testFetchAttrs" time="0">
  <skipped type="pytest.skip" message="attr module is unavailable." />
</testcase>
<testcase classname="session_test.SessionTest" name="testBroken" time="0">
  <error message="failed on setup with &quot;OSError: x&quot;">trace</error>
</testcase>
<testcase classname="" name="session_test" time="0">
  <error message="collection failure">ImportError</error>
</testcase>
</testsuite></testsuites>
"""


def test_parse_junit_gives_status_and_first_error_line_per_test(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(_JUNIT, encoding="utf-8")
    assert suite.parse_junit(path, "session_test") == {
        "SessionTest::testCreate": Outcome("passed"),
        "SessionTest::testFetchNone": Outcome("failed", "AssertionError: TypeError not raised"),
        "SessionTest::testFetchAttrs": Outcome("skipped", "attr module is unavailable."),
        "SessionTest::testBroken": Outcome("error", 'failed on setup with "OSError: x"'),
        "(collection)": Outcome("error", "collection failure"),
    }


def _runs():
    plain = FileRun("session", "plain", {"T::a": Outcome("passed"), "T::b": Outcome("failed", "x"),
                                         "T::c": Outcome("skipped", "s")})
    full = FileRun("session", "full", {"T::a": Outcome("failed", "AssertionError: 1 != 2"),
                                       "T::b": Outcome("passed"), "T::c": Outcome("skipped", "s")})
    mix = FileRun("session", "mix", dict(plain.outcomes))
    return [plain, full, mix]


def test_differences_compare_each_mode_with_plain():
    found = suite.differences(_runs())
    assert [(d["test"], d["mode"], d["plain"], d["status"]) for d in found] == [
        ("T::a", "full", "passed", "failed"), ("T::b", "full", "failed", "passed")]
    assert found[0]["message"] == "AssertionError: 1 != 2"
    assert [d["test"] for d in suite.regressions(found)] == ["T::a"]
    text = suite.format_differences(found)
    assert "- session_test.py T::a [full]: plain passed, failed: AssertionError: 1 != 2" in text
    assert suite.format_differences([]) == "No test differs from plain TensorFlow."


def test_format_table_counts_every_status():
    table = suite.format_table(_runs()).splitlines()
    assert table[0] == "| file | mode | passed | failed | skipped | error |"
    assert table[2] == "| session_test.py | plain | 1 | 1 | 1 | 0 |"
    assert table[3] == "| session_test.py | full | 1 | 1 | 1 | 0 |"


def test_forced_config_adds_npu_optimizer_to_a_copy():
    config = config_pb2.ConfigProto(allow_soft_placement=True)
    for mix in (False, True):
        forced = forced_config(config, mix)
        npu = NpuConfig.from_config_proto(forced)
        assert npu.present and npu.effective_values()["mix_compile_mode"] is mix
        assert forced.allow_soft_placement
    assert not config.graph_options.rewrite_options.custom_optimizers  # the test's is untouched


def test_forced_config_makes_a_config_for_none_and_keeps_the_tests_own_choices():
    made = forced_config(None, True)
    assert NpuConfig.from_config_proto(made).effective_values()["mix_compile_mode"] is True
    # nothing else, as in a TF1 script's config
    assert [f.name for f, _ in made.ListFields()] == ["graph_options"]
    assert [f.name for f, _ in made.graph_options.rewrite_options.ListFields()] == [
        "custom_optimizers"]
    own = NpuConfig.from_dict({"mix_compile_mode": True}).to_config_proto()
    assert forced_config(own, False) is own
    assert forced_config(37, False) == 37  # left for TensorFlow to refuse with its own error


def test_start_does_nothing_without_a_mode_and_refuses_an_unknown_one():
    start({})
    with pytest.raises(ValueError, match="NPU_SUITE_MODE must be one of plain, full, mix, not x"):
        start({"NPU_SUITE_MODE": "x"})


@pytest.mark.parametrize("argv, message", [
    (["--tf-src", "{tmp}/absent"], "--tf-src {tmp}/absent: no such folder"),
    (["--tf-src", "{tmp}"], "--tf-src {tmp} lacks tensorflow/python/client/session_test.py, "),
    (["--tf-src", "{src}", "--files", "partial_run", "--report", "{tmp}/no/r.json"],
     "--report {tmp}/no/r.json: its folder does not exist"),
    (["--tf-src", "{src}", "--files", "partial_run", "--test-timeout", "0"],
     "--test-timeout and --file-timeout must be positive numbers of seconds"),
])
def test_bad_arguments_exit_2_with_one_line_and_write_nothing(tmp_path, capsys, argv, message):
    src = tmp_path / "src"
    (src / "tensorflow/python/client").mkdir(parents=True)
    (src / suite.TEST_FILES["partial_run"]).write_text("", encoding="utf-8")
    before = sorted(tmp_path.rglob("*"))
    argv = [a.format(tmp=tmp_path, src=src) for a in argv]
    assert suite.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m bench.tf_session_suite: error: "
                          + message.format(tmp=tmp_path, src=src))
    assert err.count("\n") == 1
    assert sorted(tmp_path.rglob("*")) == before


_STAND_IN = textwrap.dedent("""\
    import os
    import unittest

    import tensorflow as tf
    from npu_adapter.session import is_npu_session


    class StandIn(unittest.TestCase):

      def test_runs(self):
        with tf.Graph().as_default():
          with tf.compat.v1.Session() as sess:
            self.assertEqual(sess.run(tf.constant(2.0) * 3.0), 6.0)

      def test_is_plain(self):
        with tf.Graph().as_default():
          with tf.compat.v1.Session() as sess:
            self.assertFalse(is_npu_session(sess), 'an NPU session')

      def test_skipped(self):
        self.skipTest('not here')

      def test_kills_the_process(self):
        os.abort()
    """)


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="five TensorFlow processes; set NPU_ADAPTER_SLOW_TESTS=1")
def test_suite_runs_a_file_plain_and_forced_and_reports_the_difference(tmp_path, capsys):
    src = tmp_path / "src"
    test_file = src / suite.TEST_FILES["partial_run"]
    test_file.parent.mkdir(parents=True)
    test_file.write_text(_STAND_IN, encoding="utf-8")
    report = tmp_path / "report.json"
    work = tmp_path / "work"
    code = suite.main(["--tf-src", str(src), "--files", "partial_run", "--mode", "full",
                       "--report", str(report), "--work-dir", str(work)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "| session_partial_run_test.py | plain | 2 | 0 | 1 | 1 |" in out
    assert "| session_partial_run_test.py | full | 1 | 1 | 1 | 1 |" in out
    assert ("- session_partial_run_test.py StandIn::test_is_plain [full]: plain passed, failed: "
            "AssertionError: True is not false : an NPU session") in out
    document = json.loads(report.read_text(encoding="utf-8"))
    assert document["regressions"] == 1 and document["behaviour"] == "tf2"
    plain, full = document["runs"]
    killed = plain["tests"]["StandIn::test_kills_the_process"]
    assert killed == {"status": "error", "message": "crashed: Fatal Python error: Aborted"}
    assert any("killed the process" in note for note in plain["notes"])
    assert full["tests"]["StandIn::test_runs"]["status"] == "passed"
    assert (work / "tests" / test_file.name).read_text(encoding="utf-8") == _STAND_IN
