"""The differential tester itself: value comparison, graph programs and their printed form, the
session comparison (what it reports for a match, a mismatch, a failure, a bad graph) and the
fuzz command's arguments. The run over random graphs is tests/test_differential.py."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings

from npu_adapter.backends import register_backend, unregister_backend
from npu_adapter.backends.cpu import CpuReferenceBackend
from npu_adapter.errors import BackendError, NpuConfigError
from npu_adapter.testing import (
    EXPECTED_REFUSALS,
    OPTION_SETS,
    ExpectedRefusal,
    FeedValue,
    GraphCase,
    InvalidGraphError,
    OptionSet,
    SessionMismatchError,
    assert_session_equivalent,
    canonical_edges,
    compare_sessions,
    difference,
    seeded_array,
)
from npu_adapter.testing.fuzz import main as fuzz_main
from npu_adapter.testing.program import Assign, Program, call, ref
from npu_adapter.testing.strategies import graph_cases

tf1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- values
def test_seeded_array_is_reproducible_per_dtype():
    a = seeded_array(3, [2, 3])
    assert a.dtype == np.float32 and a.shape == (2, 3)
    assert a.tobytes() == seeded_array(3, [2, 3]).tobytes()
    assert a.tobytes() != seeded_array(4, [2, 3]).tobytes()
    ints = seeded_array(3, [50], "int64")
    assert ints.dtype == np.int64 and ints.min() >= -5 and ints.max() <= 5
    assert seeded_array(3, [], "bool").dtype == bool
    with pytest.raises(ValueError, match="not str"):
        seeded_array(3, [2], "str")


def test_difference_names_where_and_by_how_much():
    a = np.float32([[1.0, 2.0], [3.0, np.nan]])
    assert difference(a, a.copy()) is None  # NaNs equal NaNs
    assert difference(np.float32(0.0), np.float32(-0.0)) is None  # equal, as np.array_equal
    b = a.copy()
    b[1, 0] = np.nextafter(np.float32(3.0), np.float32(4.0))
    found = difference(a, b)
    assert (found.differing, found.size, found.first_index, found.max_ulp) == (1, 4, (1, 0), 1)
    assert found.describe() == ("float32[2, 2]: 1 of 4 elements differ, max abs diff 2.38e-07 "
                                "(1 ulp); first at [1, 0]: expected 3.0, got 3.0000002")
    assert difference(a, a.astype(np.float64)).describe() == \
        "expected float32[2, 2], got float64[2, 2]"
    assert "expected 1, got 2" in difference(np.int64([1]), np.int64([2])).describe()
    assert difference(np.array([b"a"], object), np.array([b"b"], object)).first_index == (0,)


# --------------------------------------------------------------------------- programs
def test_program_builds_and_prints_the_same_statements():
    program = Program((
        Assign("x", call("tf.compat.v1.placeholder", ref("tf.float32"), [None, 2], name="x")),
        Assign("y", call("tf.math.add", ref("x"), call("tf.constant", seeded_array(1, [2])),
                         name="y")),
    ))
    with pytest.raises(TypeError):  # an array is no literal: programs hold seeded_array calls
        program.source()
    program = Program((
        Assign("x", call("tf.compat.v1.placeholder", ref("tf.float32"), [None, 2], name="x")),
        Assign("y", call("tf.math.add", ref("x"),
                         call("tf.constant", call("seeded_array", 1, [2])), name="y")),
    ))
    assert program.source() == (
        'x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")\n'
        'y = tf.math.add(x, tf.constant(seeded_array(1, [2])), name="y")\n')
    with tf.Graph().as_default():
        names = program.build()
    assert names["y"].name == "y:0" and names["x"].shape.as_list() == [None, 2]
    with tf.Graph().as_default(), pytest.raises(NameError, match="'z' is not bound"):
        Program((Assign("y", call("tf.math.abs", ref("z"))),)).build()


def _structure(build):
    """Node names, op types and edges of the graph ``build`` makes (function names carry
    process-wide counters, so they are left out)."""
    enabled = tf1.control_flow_v2_enabled()
    graph = tf.Graph()
    try:
        with graph.as_default():
            build()
    finally:
        tf1.enable_control_flow_v2() if enabled else tf1.disable_control_flow_v2()
    graph_def = graph.as_graph_def()
    return sorted((n.name, n.op) for n in graph_def.node), canonical_edges(graph_def)


@settings(max_examples=12, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(graph_cases())
def test_a_case_prints_as_the_code_that_builds_its_graph(case):
    namespace = {"tf": tf, "np": np, "seeded_array": seeded_array}
    exec(case.build_source(), namespace)  # the printed reproducer, run as the user would
    assert _structure(namespace["build"]) == _structure(case.build)
    script = case.reproducer()
    assert "def build():" in script and "assert_session_equivalent(" in script
    assert f"steps={case.steps}" in script


def test_option_sets_follow_the_gears_a_case_supports():
    program = Program((Assign("x", call("tf.compat.v1.placeholder", ref("tf.float32"),
                                         [None, 2], name="x")),))
    feeds = ((("x:0", FeedValue(1, (2, 2))),), (("x:0", FeedValue(2, (4, 2))),))
    trio = (("dynamic_dims", "2;4"), ("dynamic_node_type", 1), ("input_shape", "x:-1,2"))
    with_gears = GraphCase(program, ("x",), feeds=feeds, gears=(("placeholder", trio),))
    sets = with_gears.option_sets()
    assert sets["gears_placeholder"] == dict(trio)
    assert "gears_dataset" not in sets and sets["mix"] == {"mix_compile_mode": True}
    assert "gears_placeholder" not in GraphCase(program, ("x",), feeds=feeds).option_sets()
    assert [s.name for s in OPTION_SETS] == [
        "full_offload", "mix", "isolated_clusters", "gears_placeholder", "gears_dataset",
        "precision_keep_dtype"]


# --------------------------------------------------------------------------- sessions
def _train_step():
    """A TF1 training step: a ref variable, Adam, and a string round trip mix mode splits."""
    tf1.set_random_seed(1)
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    w = tf1.Variable(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2), name="w",
                     use_resource=False)
    y = tf.matmul(x, w) + tf.random.normal([2], seed=4)
    text = tf.strings.to_number(tf.strings.as_string(y))
    loss = tf.reduce_mean(tf.square(y + text), name="loss")
    return [loss, tf1.train.AdamOptimizer(0.1).minimize(loss)]


FEEDS = [{"x:0": seeded_array(0, [2, 4])}, {"x:0": seeded_array(1, [3, 4])},
         {"x:0": seeded_array(2, [2, 4])}]


def test_a_training_step_matches_under_full_offload_and_mix_mode():
    comparison = assert_session_equivalent(
        _train_step, {"full_offload": {}, "mix": {"mix_compile_mode": True}}, feeds=FEEDS)
    # Per step: the loss, and w with Adam's m, v and two beta powers.
    assert [(o.option_set, o.status, o.compared) for o in comparison.outcomes] == [
        ("full_offload", "equal", 3 * 6), ("mix", "equal", 3 * 6)]


class _TanhIsSigmoid(CpuReferenceBackend):
    """A wrong backend: every Tanh of a cluster computes a sigmoid."""

    name = "tanh_is_sigmoid"

    def lower(self, graph_def, clusters, ctx):
        lowered = super().lower(graph_def, clusters, ctx)
        out = type(lowered)()
        out.CopyFrom(lowered)
        for function in out.library.function:
            for node in function.node_def:
                if node.op == "Tanh":
                    node.op = "Sigmoid"
        return out


class _NoTanh(CpuReferenceBackend):
    """A backend that cannot lower a cluster holding a Tanh."""

    name = "no_tanh"

    def lower(self, graph_def, clusters, ctx):
        if any(node.op == "Tanh" for f in graph_def.library.function for node in f.node_def):
            raise BackendError("no_tanh cannot lower a Tanh")
        return super().lower(graph_def, clusters, ctx)


@pytest.fixture
def wrong_backends():
    register_backend("tanh_is_sigmoid", _TanhIsSigmoid, replace=True)
    register_backend("no_tanh", _NoTanh, replace=True)
    yield
    unregister_backend("tanh_is_sigmoid")
    unregister_backend("no_tanh")


def _tanh_model():
    x = tf1.placeholder(tf.float32, [None, 3], name="x")
    v = tf1.Variable(seeded_array(5, [3]), name="v")
    h = tf.math.tanh(x * v, name="h")
    return [h, tf1.assign_add(v, tf.reduce_mean(h, axis=0)).op]


def test_a_mismatch_names_the_set_the_step_the_tensor_and_how_to_rerun(wrong_backends):
    sets = {"faithful": {}, "wrong": {"npu_adapter_backend": "tanh_is_sigmoid"}}
    feeds = {"x:0": seeded_array(7, [2, 3])}
    with pytest.raises(SessionMismatchError) as caught:
        assert_session_equivalent(_tanh_model, sets, feeds=feeds, steps=2)
    message = str(caught.value)
    assert message.startswith("the NPU session differs from plain TensorFlow under 1 of 2 "
                              "option sets (2 steps):\noption set wrong "
                              '{"npu_adapter_backend": "tanh_is_sigmoid"}: differs')
    assert "step 0, fetch h:0: float32[2, 3]: 6 of 6 elements differ" in message
    assert "first at [0, 0]: expected " in message
    assert ('to reproduce one set alone: assert_session_equivalent(build, {"wrong": '
            '{"npu_adapter_backend": "tanh_is_sigmoid"}}, steps=2, ...)') in message
    faithful, wrong = caught.value.comparison.outcomes
    assert faithful.status == "equal" and wrong.status == "mismatch"
    assert [m.tensor for m in wrong.mismatches] == ["h:0"]  # the first step that differs


def test_an_npu_side_error_is_a_failure_with_its_phase(wrong_backends):
    comparison = compare_sessions(_tanh_model, {"no_tanh": {"npu_adapter_backend": "no_tanh"}},
                                  feeds={"x:0": seeded_array(7, [2, 3])}, steps=2)
    (outcome,) = comparison.outcomes
    assert outcome.status == "failure"
    assert outcome.failure.phase == "step 0"  # the initialiser has no Tanh: it ran
    assert "no_tanh cannot lower a Tanh" in outcome.failure.message
    assert outcome.describe().startswith('option set no_tanh {"npu_adapter_backend": '
                                         '"no_tanh"}: failed at step 0: ')


def test_a_graph_plain_tensorflow_cannot_run_is_the_callers_error():
    with pytest.raises(InvalidGraphError, match="fails in plain TensorFlow at step 0"):
        compare_sessions(_tanh_model, {"full": {}}, feeds={"x:0": seeded_array(7, [2, 5])})


def test_a_build_function_tensorflow_refuses_is_the_callers_error():
    def build():
        return [tf.reshape(tf1.placeholder(tf.float32, [None, 3]), [5])]

    with pytest.raises(InvalidGraphError, match="at build: ValueError: Dimension size must"):
        compare_sessions(build, {"full": {}})


def test_plain_tensorflow_that_is_not_reproducible_proves_nothing():
    def unseeded():
        return [tf.random.normal([3], name="noise")]  # no graph seed, no op seed

    comparison = compare_sessions(unseeded, {"full": {}}, steps=1)
    assert comparison.outcomes[0].status == "unreproducible" and not comparison.failed
    with pytest.raises(InvalidGraphError, match="seed every random op"):
        assert_session_equivalent(unseeded, {"full": {}}, steps=1)


def test_a_fed_tensor_that_plain_tensorflow_ignores_is_ignored_by_the_cpu_reference_too():
    """TensorFlow 2.15-2.21's arithmetic optimizer computes t * 2 from p when t = p + p is fed
    (plain TensorFlow ignores the feed); the CPU reference runs the rewritten graph through the
    same Grappler, so it gives plain TensorFlow's values, and with the arithmetic optimizer off
    in session_config both sides use the fed value."""
    def build():
        p = tf1.placeholder(tf.float32, [2], name="p")
        t = tf.math.add(p, p, name="t")
        return [tf.math.multiply(t, 2.0, name="y")]

    feeds = {"p:0": np.float32([0.0, 0.0]), "t:0": np.float32([10.0, 10.0])}
    sets = {"full": {}, "mix": {"mix_compile_mode": True}}
    comparison = assert_session_equivalent(build, sets, feeds=feeds, steps=1)
    assert [o.status for o in comparison.outcomes] == ["equal", "equal"]
    assert_session_equivalent(build, sets, feeds=feeds, steps=1,
                              session_config=_arithmetic_off())
    with tf.Graph().as_default() as graph:
        (y,) = build()
        with tf1.Session(graph=graph, config=_npu_config(_arithmetic_off())) as sess:
            np.testing.assert_array_equal(sess.run(y, feeds), [20.0, 20.0])
        with tf1.Session(graph=graph, config=_npu_config(tf1.ConfigProto())) as sess:
            np.testing.assert_array_equal(sess.run(y, feeds), [0.0, 0.0])


def _arithmetic_off():
    from tensorflow.core.protobuf import rewriter_config_pb2

    config = tf1.ConfigProto()
    config.graph_options.rewrite_options.arithmetic_optimization = \
        rewriter_config_pb2.RewriterConfig.OFF
    return config


def _npu_config(base):
    from npu_adapter.config import NpuConfig

    return NpuConfig.from_dict({}).to_config_proto(base)


def _resource_read_in_a_v1_cond():
    tf1.disable_control_flow_v2()
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    v = tf1.Variable(seeded_array(1, [4]), name="v", use_resource=True)
    return [tf1.cond(tf.math.reduce_sum(x) > 0.0, lambda: x * v, lambda: tf.math.tanh(x))]


def test_a_refusal_the_original_makes_counts_apart_when_its_remedy_runs():
    """Mix mode refuses a resource variable read inside a v1 cond (the cond's Switch stays on
    the host), as the original does; with variable_placement=Host the graph runs."""
    feeds = {"x:0": seeded_array(0, [2, 4])}
    mix = {"mix": {"mix_compile_mode": True}}
    comparison = assert_session_equivalent(_resource_read_in_a_v1_cond, mix, feeds=feeds,
                                           steps=2)
    outcome = comparison.outcomes[0]
    assert outcome.status == "refused" and not comparison.failed
    assert outcome.refusal is EXPECTED_REFUSALS[0] and outcome.remedy_compared == 4
    assert "is not in white list" in outcome.describe()
    assert 'with {"variable_placement": "Host"} added: equal (4 values)' in outcome.describe()

    strict = compare_sessions(_resource_read_in_a_v1_cond, mix, feeds=feeds, steps=2,
                              expected_refusals=())
    assert strict.outcomes[0].status == "failure"
    no_cure = ExpectedRefusal("white_list", "not in white list", {"variable_placement": "Device"},
                              "nowhere")
    with pytest.raises(SessionMismatchError, match="is not in white list"):
        assert_session_equivalent(_resource_read_in_a_v1_cond, mix, feeds=feeds, steps=2,
                                  expected_refusals=(no_cure,))


def test_bad_option_sets_are_rejected_before_anything_runs():
    with pytest.raises(NpuConfigError, match="mix_compile_mode"):
        compare_sessions(_tanh_model, {"bad": {"mix_compile_mode": "yes"}})
    with pytest.raises(ValueError, match="option_sets is empty"):
        compare_sessions(_tanh_model, {})
    with pytest.raises(ValueError, match="needs gears from a generated case"):
        compare_sessions(_tanh_model, [OptionSet("g", {}, gears="dataset")])
    with pytest.raises(TypeError, match="dict of NpuOptimizer options"):
        compare_sessions(_tanh_model, {"bad": "mix"})


def test_variables_nobody_initialises_are_not_compared():
    def build():
        a = tf1.Variable(seeded_array(1, [2]), name="a")
        tf1.Variable(seeded_array(2, [2]), name="late", collections=[])  # never initialised
        return [tf.math.multiply(a, 2.0, name="out")]

    comparison = assert_session_equivalent(build, {"full": {}}, steps=1)
    assert comparison.outcomes[0].compared == 2  # out and a


# --------------------------------------------------------------------------- the command
@pytest.mark.parametrize("argv, message", [
    ([], "give --minutes or --max-examples"),
    (["--minutes", "0"], "must be positive"),
    (["--max-examples", "2", "--option-set", "nope"], "unknown option set 'nope'"),
    (["--max-examples", "2", "--options", "mine"], "takes NAME=JSON"),
    (["--max-examples", "2", "--options", "mine={"], "--options mine: not JSON"),
    (["--max-examples", "2", "--options", 'mine={"mix_compile_mode": 3}'],
     "--options mine: .*mix_compile_mode"),
    (["--max-examples", "2", "--import", "no_such_module_here"], "--import no_such_module"),
    (["--max-examples", "2", "--report", "/no/such/dir/r.md"], "does not exist"),
])
def test_fuzz_rejects_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        fuzz_main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err.strip().splitlines()[-1]), err


def test_fuzz_runs_a_few_graphs_and_writes_its_report(tmp_path, capsys):
    report = tmp_path / "report.md"
    code = fuzz_main(["--max-examples", "3", "--option-set", "full_offload", "--options",
                      'plain_options={"npu_adapter_reuse_sessions": false}',
                      "--option-set", "plain_options", "--report", str(report),
                      "--shrink-seconds", "0"])
    text = report.read_text()
    assert capsys.readouterr().out.endswith("\n\n" + text + "\n")  # the report is printed too
    assert "3 graphs (0 invalid), 6 graph x option-set runs" in text
    table = [line for line in text.splitlines() if line.startswith("| full_offload ")]
    assert table and table[0].split("|")[2].strip() == "3"
    assert code == (0 if "## 1." not in text else 1)


def test_a_printed_reproducer_is_a_script_that_runs(tmp_path):
    """The reproducer of a generated case runs as it is printed, in a fresh process."""
    program = Program((
        Assign("x", call("tf.compat.v1.placeholder", ref("tf.float32"), [None, 2], name="x")),
        Assign("v", call("tf.compat.v1.Variable", call("seeded_array", 3, [2]), name="v",
                         use_resource=False)),
        Assign("y", call("tf.math.tanh", call("tf.math.multiply", ref("x"), ref("v")),
                         name="y")),
    ))
    feeds = tuple(((("x:0", FeedValue(10 + s, (2, 2))),)) for s in range(2))
    case = GraphCase(program, ("y",), feeds=feeds)
    script = tmp_path / "repro.py"
    script.write_text(case.reproducer({"full_offload": {}}, comment="a graph that matches"))
    assert script.read_text().startswith("# a graph that matches\nimport os\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert case.build_source() in script.read_text()


def test_the_example_of_docs_testing_md_runs(capsys):
    text = (Path(ROOT) / "docs" / "testing.md").read_text(encoding="utf-8")
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    try:
        exec(example, {"__name__": "docs_testing_example"})  # the page's code, as a user runs it
    finally:
        unregister_backend("host_conv")
    assert capsys.readouterr().out.endswith("every option set gives plain TensorFlow's values\n")
