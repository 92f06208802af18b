"""Compiled or TensorFlow's kernels, per cluster: the trial's order and rule (synthetic times),
the decisions remembered in the process and in graph_compiler_cache_dir, the program's variants
(driven through its public select/ran with synthetic times: speed is never asserted from the
clock here), and what the placement report, its HTML page and ``inspect`` say about them."""

import json
import os
import threading
import warnings

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter import rewrite
from npu_adapter.backends import get_backend
from npu_adapter.backends.xla.background import replay_visible_op
from npu_adapter.backends.xla.decisions import (
    Decision,
    DecisionStore,
    cluster_digest,
    executable_label,
    forget_decisions,
)
from npu_adapter.backends.xla.trial import PAIRS, Trial
from npu_adapter.config import NpuConfig
from npu_adapter.report.html import render_report_html
from npu_adapter.report.placement import placement_report
from npu_adapter.session import NpuSession, plain_session_class, runner_of

tf1 = tf.compat.v1
PlainSession = plain_session_class()


@pytest.fixture(autouse=True)
def measure_afresh():
    forget_decisions()
    yield
    forget_decisions()


# --------------------------------------------------------------------------- the trial
def drive(trial, seconds, runs=200):
    """Run ``trial`` to its end: ``seconds(on_tf)`` is a run's time. Returns the arms run."""
    warm, arms = set(), []
    for _ in range(runs):
        if trial.done:
            break
        on_tf, arm = trial.next_run(warm)
        arms.append((on_tf, arm, on_tf not in warm))
        trial.record(arm, seconds(on_tf), on_tf not in warm)
        warm.add(on_tf)
    return arms


def test_trial_order_first_runs_and_abba():
    trial = Trial(["a", "b"])
    arms = drive(trial, lambda on_tf: 1.0 if "a" in on_tf else 0.5)
    # The first run has every cluster on TensorFlow's kernels, untimed; then "a" compiled
    # (it compiles, untimed); then pairs in ABBA order.
    assert arms[0] == (("a", "b"), False, True)
    assert arms[1] == (("b",), True, True)
    timed = [arm for _, arm, first in arms[:2 + 2 * PAIRS] if not first]
    assert timed == [True, False, False, True] * (PAIRS // 2) + [True, False][:PAIRS % 2 * 2]
    # "a" decided compiled (faster); "b" is then tried with "a" compiled: its TensorFlow arm is
    # the arm "a" won with, already warm, so only its compiled arm runs first.
    assert trial.decided["a"] is True
    b_arms = arms[2 + 2 * PAIRS:]
    assert b_arms[0] == ((), True, True)
    assert all(on_tf in ((), ("b",)) for on_tf, _, _ in b_arms)
    assert trial.done and trial.on_tensorflow() == ("b",) or trial.decided["b"] is True


def test_trial_keeps_the_faster_by_the_median_ratio():
    # Compiled 0.8 of TensorFlow's time, but one pair spoilt by a burst of load: the median of
    # the per-pair ratios still says compiled.
    trial = Trial(["a"])
    times = iter([1.0, 9.0] + [0.8, 1.0, 1.0, 0.8, 50.0, 1.0, 1.0, 0.8, 0.8, 1.0])
    drive(trial, lambda on_tf: next(times))
    assert trial.decided == {"a": True} and trial.on_tensorflow() == ()
    slower = Trial(["a"])
    drive(slower, lambda on_tf: 1.0 if on_tf == () else 0.9)
    assert slower.decided == {"a": False} and slower.on_tensorflow() == ("a",)


def test_trial_measures_only_what_is_not_known():
    trial = Trial(["a", "b"], known={"a": False})
    assert trial.pending == ["b"] and trial.on_tensorflow() == ("a", "b")
    assert trial.on_tensorflow(current_compiled=True) == ("a",)
    done = Trial(["a"], known={"a": True})
    assert done.done and done.next_run(set()) == ((), None)


def test_measured_decision_reports_the_compile_time():
    trial = Trial(["a"])
    results = []
    warm = set()
    for _ in range(2 + 2 * PAIRS):
        on_tf, arm = trial.next_run(warm)
        first = on_tf not in warm
        seconds = 0.5 if arm else 1.0
        if arm and first:
            seconds = 3.5  # compiles
        results.append(trial.record(arm, seconds, first))
        warm.add(on_tf)
    measured = results[-1]
    assert measured.cluster == "a" and measured.compiled
    assert measured.compile_s == pytest.approx(3.0) and measured.ratio == pytest.approx(0.5)
    assert [r for r in results[:-1] if r is not None] == []


# --------------------------------------------------------------------------- the store
def test_store_remembers_across_processes_and_ignores_bad_files(tmp_path):
    decision = Decision("GeOp1_0", "x:0 1x8", True, 2.5, 4.0, 0.625, PAIRS)
    DecisionStore(str(tmp_path / "d")).put("ab" * 32, decision)
    forget_decisions()  # as a new process
    store = DecisionStore(str(tmp_path / "d"))
    assert store.get("ab" * 32, "x:0 1x8") == decision
    assert store.get("ab" * 32, "x:0 2x8") is None and store.get("cd" * 32, "x:0 1x8") is None
    assert store.for_cluster("ab" * 32) == {"x:0 1x8": decision}
    (path,) = (tmp_path / "d").iterdir()
    assert json.loads(path.read_text())["compiled"] is True
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # the mode the umask gives
    path.write_text("{ not json")
    forget_decisions()
    assert DecisionStore(str(tmp_path / "d")).get("ab" * 32, "x:0 1x8") is None
    path.write_text(json.dumps(dict(decision.to_json(), rule="another")))
    assert DecisionStore(str(tmp_path / "d")).get("ab" * 32, "x:0 1x8") is None
    assert decision.why == ("compiled by XLA: a run took 2.5 ms compiled and 4 ms on "
                            "TensorFlow's kernels (median ratio 0.62x over 5 pairs of runs)")


def test_executable_labels():
    assert executable_label(("gear", 2)) == "gear 2"
    assert executable_label(("shapes", (("x:0", (1, 224, 224, 3)), ("k:0", ())))) == \
        "x:0 1x224x224x3, k:0 scalar"
    assert executable_label(("shapes", ())) == "no fed tensors"


def test_a_decision_is_found_whatever_order_the_fetches_were_named_in():
    # A session and `inspect` may name the fetches in another order: the cluster's results
    # come in that order, and the decision still applies.
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 4], name="x")
        y = tf1.placeholder(tf.float32, [4, 4], name="y")
        tf.identity(tf.matmul(x, y) + 1.0, name="a")
        tf.identity(tf.reduce_sum(x * y, axis=1), name="b")
    digests, outputs = [], []
    for fetches, feeds in ((["a:0", "b:0"], ["x:0", "y:0"]), (["b:0", "a:0"], ["y:0", "x:0"])):
        result = rewrite(graph.as_graph_def(), {"npu_adapter_backend": "xla"}, fetches=fetches,
                         feeds=feeds, backend="xla")
        functions = {f.signature.name: f for f in result.graph_def.library.function}
        (node,) = [n for n in result.graph_def.node if "_npu_adapter_xla_status" in n.attr]
        digests.append(cluster_digest(node, functions))
        outputs.append([a.name for a in functions[node.attr["f"].func.name].signature.output_arg])
    assert outputs[0] == outputs[1][::-1]  # the rewrites differ ...
    assert digests[0] == digests[1]        # ... the decision's key does not


# --------------------------------------------------------------------------- the program
def two_cluster_graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 4], name="x")
        a = tf.matmul(x, x) + 1.0
        # A host op (a Python function) splits the device work into two clusters.
        n = tf.numpy_function(lambda v: v * 2.0, [a], tf.float32, stateful=False)
        tf.identity(tf.reduce_sum(tf.reshape(n, [4, 4]) * 3.0) + 1.0, name="out")
    return graph


def prepared(graph_def, options=None):
    options = dict({"npu_adapter_backend": "xla", "mix_compile_mode": True}, **(options or {}))
    result = rewrite(graph_def, options, fetches=["out:0"], feeds=["x:0"], backend="xla")
    runtime = get_backend("xla").create_runtime(NpuConfig.from_dict(options))
    return result, runtime, runtime.prepare(result, ["x:0"])


def on_tf_of(selection):
    """The clusters a selection runs on TensorFlow's kernels."""
    key = selection.variant.key
    return key[2] if key is not None else ()


def run_program(program, compiled_time, runs=60, replay=None):
    """Select and report ``runs`` runs; a run takes 1 s plus ``compiled_time(cluster)`` for
    each cluster it runs compiled (1 s each on TensorFlow's kernels). With ``replay`` (a
    session's replay of the run), each timed run hands it back and the builds it starts end
    before the next run. Returns the selections."""
    selections = []
    for _ in range(runs):
        selection = program.select({"x:0": (4, 4)})
        selections.append(selection)
        on_tf = on_tf_of(selection)
        seconds = 1.0 + sum(1.0 if name in on_tf else compiled_time(name)
                            for name in program.compiled)
        if selection.timed:
            program.ran(selection, seconds, *([replay] if replay else []))
        assert program.runtime.wait_for_builds(timeout=60)
    return selections


class FakeReplay:
    """A session's replay of a run, as the runtime's build thread calls it: notes the variant
    it is asked to run (the clusters on TensorFlow's kernels) and, when ``error`` is set,
    fails as XLA's compilation would; ``gate``, when given, holds the replay until set."""

    def __init__(self, error=None, gate=None):
        self.error = error
        self.gate = gate
        self.variants = []

    def __call__(self, variant):
        self.variants.append(variant.key[2] if variant.key is not None else ())
        if self.gate is not None:
            assert self.gate.wait(timeout=60)
        if self.error is not None:
            raise self.error


def test_program_keeps_each_cluster_where_it_was_faster():
    graph_def = two_cluster_graph().as_graph_def()
    result, runtime, program = prepared(graph_def)
    first, second = program.compiled
    speed = {first: 0.5, second: 1.5}  # the first wins compiled, the second loses
    selections = run_program(program, speed.get)
    assert selections[0].variant.key == ("xla", None, (first, second))  # all on TF first
    final = selections[-1]
    assert not final.timed and final.variant.key == ("xla", None, (second,))
    assert sum(s.timed for s in selections) == 2 * (1 + 2 * PAIRS) + 1
    # The final variant: the second cluster calls its function on TensorFlow's kernels.
    nodes = {n.name: n for n in program.variant_graph(final.variant.key).node}
    assert nodes[first].attr["_XlaMustCompile"].b
    assert "_XlaMustCompile" not in nodes[second].attr
    assert nodes[second].attr["f"].func.name == \
        nodes[second].attr["_npu_adapter_xla_tf_function"].s.decode()
    stats = runtime.stats()
    assert stats.clusters[first].status == "compiled"
    assert stats.clusters[second].status == "tensorflow"
    assert stats.clusters[second].reason == (
        "kept on TensorFlow's kernels: a run took 3 s compiled and 2.5 s on TensorFlow's "
        "kernels (median ratio 1.20x over 5 pairs of runs)")
    assert stats.decisions_measured == 2 and stats.decisions_remembered == 0
    assert stats.clusters[first].runs_compiled + stats.clusters[first].runs_tensorflow == 60
    assert stats.clusters[first].compiles == stats.clusters[second].compiles == 1

    # Another session of the process measures nothing: its first run is on TensorFlow's
    # kernels (no executable to compile or load), the decided variant runs from the second.
    # (The first run is timed: a session that hands a replay back builds the executables
    # in the background with it; run_program hands none, so the second run compiles.)
    _, runtime2, program2 = prepared(graph_def)
    again = run_program(program2, speed.get, runs=3)
    assert [s.timed for s in again] == [True, False, False]
    assert [s.variant.key for s in again] == [("xla", None, (first, second))] + \
        [("xla", None, (second,))] * 2
    stats2 = runtime2.stats()
    assert stats2.decisions_measured == 0 and stats2.decisions_remembered == 2
    assert stats2.clusters[first].runs_compiled == 2 and stats2.clusters[first].compiles == 1

    # The report says which runs where, and why.
    report = placement_report(result, graph_def, backend="xla", fetches=["out:0"],
                              feeds=["x:0"])
    records = {c["name"]: c["compile"] for c in report["clusters"]}
    (decision,) = records[second]["decisions"]
    assert decision["runs_on"] == "tensorflow" and decision["executable"] == "x:0 4x4"
    assert decision["why"].startswith("kept on TensorFlow's kernels: a run took")
    assert records[first]["decisions"][0]["runs_on"] == "xla"
    page = render_report_html(report)
    assert "<th title=" in page and ">Backend</th>" in page
    assert "TensorFlow&#x27;s kernels (1.20×)" in page and "XLA (0.83×)" in page


def test_every_cluster_compiled_is_the_base_graph():
    _, _, program = prepared(two_cluster_graph().as_graph_def())
    final = run_program(program, lambda name: 0.1)[-1]
    assert final.variant.key is None  # the rewrite as lowered: every cluster compiled


# ------------------------------------------------------------------- built in the background
def test_executables_are_built_by_replays_while_runs_stay_on_tensorflows_kernels():
    _, runtime, program = prepared(two_cluster_graph().as_graph_def())
    first, second = program.compiled
    assert program.replay_visible is None and program.builds_in_background
    gate = threading.Event()
    replay = FakeReplay(gate=gate)
    # The first run is on TensorFlow's kernels; its replay starts building the first
    # cluster's executable: the variant with it compiled, the second on TensorFlow's kernels.
    one = program.select({"x:0": (4, 4)})
    assert one.timed and on_tf_of(one) == (first, second)
    program.ran(one, 2.0, replay)
    # While it builds, runs go on on TensorFlow's kernels, untimed (nothing to replay).
    for _ in range(3):
        waiting = program.select({"x:0": (4, 4)})
        assert not waiting.timed and on_tf_of(waiting) == (first, second)
    stats = runtime.stats()
    assert stats.compiles == stats.background_compiles == 0
    assert stats.clusters[first].status == "pending"
    gate.set()
    assert runtime.wait_for_builds(timeout=60)
    assert replay.variants == [(second,)]
    stats = runtime.stats()
    assert stats.clusters[first].compiles == stats.clusters[first].background_compiles == 1
    # Built: the trial times its pairs (the replay was the compiled arm's first run), then
    # the second cluster's executable is built the same way, and nothing compiles in a run.
    speed = {first: 0.5, second: 1.5}
    selections = run_program(program, speed.get, runs=40, replay=replay)
    assert replay.variants == [(second,), ()]
    assert selections[-1].variant.key == ("xla", None, (second,)) and not selections[-1].timed
    stats = runtime.stats()
    assert stats.decisions_measured == 2
    assert stats.clusters[first].status == "compiled"
    assert stats.clusters[second].status == "tensorflow"
    assert stats.compiles == stats.background_compiles == 2
    # Each cluster took its pairs and no run of its own to compile.
    runs = stats.clusters[first].runs_compiled + stats.clusters[first].runs_tensorflow
    assert runs == 4 + 40


def test_a_failed_build_keeps_the_cluster_on_tensorflows_kernels_and_says_why(tmp_path):
    import tensorflow as tf

    cache = tmp_path / "cache"
    cache.mkdir()
    graph_def = two_cluster_graph().as_graph_def()
    error = tf.errors.InvalidArgumentError(
        None, None, "Input 1 to node `Reshape` with op Reshape must be a compile-time "
        "constant.\n\nXLA compilations can only contain operations where ...")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the persistent cache is not ours in this process
        _, runtime, program = prepared(graph_def, {"graph_compiler_cache_dir": str(cache)})
    first, second = program.compiled
    replay = FakeReplay(error=error)
    run_program(program, lambda name: 0.5, runs=30, replay=replay)
    stats = runtime.stats()
    why = ("kept on TensorFlow's kernels: compile failed: Input 1 to node `Reshape` with op "
           "Reshape must be a compile-time constant.")
    for name in (first, second):
        assert stats.clusters[name].status == "tensorflow"
        assert stats.clusters[name].reason == why
        assert stats.clusters[name].decisions == {"x:0 4x4": why}
        assert stats.clusters[name].runs_compiled == 0 and stats.clusters[name].compiles == 0
    assert stats.decisions_measured == 2
    # One build per cluster, then never again: the decision is remembered, on disk too.
    assert replay.variants == [(second,), (first,)]
    forget_decisions()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result2, runtime2, program2 = prepared(graph_def,
                                               {"graph_compiler_cache_dir": str(cache)})
    again = FakeReplay()
    selections = run_program(program2, lambda name: 0.5, runs=3, replay=again)
    assert again.variants == [] and [s.timed for s in selections] == [False] * 3
    assert runtime2.stats().clusters[first].reason == why
    # The report says the compile failed, not a measured ratio.
    report = placement_report(result2, graph_def, backend="xla", fetches=["out:0"],
                              feeds=["x:0"])
    (decision,) = {c["name"]: c["compile"] for c in report["clusters"]}[first]["decisions"]
    assert decision["runs_on"] == "tensorflow" and decision["why"] == why
    assert decision["failure"].startswith("Input 1 to node `Reshape`")
    assert "TensorFlow&#x27;s kernels (compile failed)" in render_report_html(report)


def test_remembered_decisions_build_their_executables_in_the_background():
    graph_def = two_cluster_graph().as_graph_def()
    _, _, program = prepared(graph_def)
    first, second = program.compiled
    run_program(program, {first: 0.5, second: 0.5}.get, replay=FakeReplay())
    # A new session of the process measures nothing; its runs stay on TensorFlow's kernels
    # until its executables are built, one cluster at a time, then the decided form runs.
    _, runtime, program = prepared(graph_def)
    gate = threading.Event()
    replay = FakeReplay(gate=gate)
    one = program.select({"x:0": (4, 4)})
    assert one.timed and on_tf_of(one) == (first, second)
    program.ran(one, 2.0, replay)
    assert on_tf_of(program.select({"x:0": (4, 4)})) == (first, second)
    gate.set()
    assert runtime.wait_for_builds(timeout=60)
    selections = run_program(program, lambda name: 0.5, runs=4, replay=replay)
    assert replay.variants == [(second,), ()]
    assert [on_tf_of(s) for s in selections] == [(second,), (), (), ()]
    assert selections[-1].variant.key is None and not selections[-1].timed
    stats = runtime.stats()
    assert stats.decisions_measured == 0 and stats.decisions_remembered == 2
    assert stats.compiles == stats.background_compiles == 2


def test_close_waits_for_the_build_under_way_and_starts_no_other():
    import tensorflow as tf

    def build_threads():
        return {t for t in threading.enumerate() if t.name.startswith("npu-adapter-xla-build")}

    before = build_threads()
    _, runtime, program = prepared(two_cluster_graph().as_graph_def())
    gate = threading.Event()
    # The session's TensorFlow session is closed first: the replay ends cancelled.
    replay = FakeReplay(error=tf.errors.CancelledError(None, None, "Run call was cancelled"),
                        gate=gate)
    program.ran(program.select({"x:0": (4, 4)}), 2.0, replay)
    closing = threading.Thread(target=runtime.close)
    closing.start()
    gate.set()
    closing.join(timeout=60)
    assert not closing.is_alive()
    assert build_threads() <= before  # this runtime's build thread ended
    stats = runtime.stats()
    assert stats.decisions_measured == 0 and stats.compiles == 0  # nothing was decided
    # A run racing the close starts no build.
    program.ran(program.select({"x:0": (4, 4)}), 2.0, replay)
    assert runtime.wait_for_builds(timeout=60) and replay.variants == [program.compiled[1:]]


def test_only_signatures_whose_replay_nobody_sees_are_replayed():
    assert replay_visible_op(two_cluster_graph().as_graph_def()) is None
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 4], name="x")
        with tf.control_dependencies([tf.debugging.assert_positive(x + 100.0)]):
            tf.identity(x * 2.0, name="out")
    assert replay_visible_op(graph.as_graph_def()) is None  # an assertion that held holds
    printing = tf.Graph()
    with printing.as_default():
        x = tf1.placeholder(tf.float32, [4, 4], name="x")
        with tf.control_dependencies([tf.print(x)]):
            tf.identity(x * 2.0, name="out")
    assert replay_visible_op(printing.as_graph_def()) == "PrintV2"


def test_a_signature_reading_variables_is_replayed():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 4], name="x")
        w = tf1.get_variable("w", [4, 4], use_resource=True)
        r = tf1.get_variable("r", [4, 4], use_resource=False)
        tf.identity(tf.reduce_sum(tf.matmul(x, w) + r), name="out")
    _, _, program = prepared(graph.as_graph_def())
    assert program.compiled and program.replay_visible is None


@pytest.mark.parametrize("kind", ["training", "ref_training", "random"])
def test_a_signature_that_changes_state_compiles_in_the_foreground(kind):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 4], name="x")
        if kind.endswith("training"):
            w = tf1.get_variable("w", [4, 4], use_resource=kind == "training")
            loss = tf.reduce_sum(tf.matmul(x, w) * 3.0)
            step = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
            with tf.control_dependencies([step]):
                tf.identity(loss, name="out")
        else:  # through a host op: the random op's cluster runs on the CPU reference
            extra = tf.reshape(tf.numpy_function(lambda v: v, [tf1.random_uniform([4, 4])],
                                                 tf.float32, stateful=False), [4, 4])
            tf.identity(tf.reduce_sum((tf.matmul(x, x) + extra) * 3.0), name="out")
    _, runtime, program = prepared(graph.as_graph_def())
    assert program.compiled  # (ref variables split the step into two stages)
    # (ApplyGradientDescent writes through its ref input; it is not registered stateful.)
    assert program.replay_visible == {"training": "ResourceApplyGradientDescent",
                                      "ref_training": "ApplyGradientDescent",
                                      "random": "RandomUniform"}[kind]
    assert not program.builds_in_background
    replay = FakeReplay()
    selections = run_program(program, lambda name: 0.5, runs=3, replay=replay)
    # Run 1 on TensorFlow's kernels, run 2 compiles the executable in the foreground, as
    # the run that uses it first: replaying a step with state would change the state.
    assert [on_tf_of(s) for s in selections] == [program.compiled] + [program.compiled[1:]] * 2
    assert replay.variants == []
    stats = runtime.stats()
    assert stats.compiles == 1 and stats.background_compiles == 0


# --------------------------------------------------------------------------- across processes
def conv_graph():
    graph = tf.Graph()
    rng = np.random.RandomState(4)
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 16, 16, 3], name="x")
        k = tf.constant(rng.randn(3, 3, 3, 8).astype(np.float32) * 0.3)
        h = tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME"))
        tf.reduce_mean(h, axis=[1, 2], name="out")
    return graph


def test_inspect_shows_the_decisions_a_session_left_in_the_cache_dir(tmp_path, capsys):
    from npu_adapter import cli

    cache = tmp_path / "cache"
    cache.mkdir()
    graph = conv_graph()
    feeds = {"x:0": np.ones((4, 16, 16, 3), np.float32)}
    options = {"npu_adapter_backend": "xla", "graph_compiler_cache_dir": str(cache)}
    with warnings.catch_warnings():
        # This test process started TensorFlow long ago: its executables are not cached, the
        # decisions are.
        warnings.simplefilter("ignore")
        with NpuSession(graph=graph, config=NpuConfig.from_dict(options).to_config_proto()) \
                as sess:
            for _ in range(2 + 2 * PAIRS):
                sess.run("out:0", feeds)
                assert runner_of(sess).runtime.wait_for_builds(timeout=300)
            (why,) = runner_of(sess).runtime_stats().clusters["GeOp1_0"].decisions.values()
    assert len(os.listdir(cache / "npu_adapter_xla" / "decisions")) == 1
    forget_decisions()  # inspect reads them from the directory, as a later process would
    model = tmp_path / "m.pb"
    model.write_bytes(graph.as_graph_def().SerializeToString())
    code = cli.main(["inspect", str(model), "--backend", "xla", "--fetch", "out:0", "--feed",
                     "x:0", "--option", f"graph_compiler_cache_dir={cache}", "--out",
                     str(tmp_path / "out"), "--no-drawings", "--no-tensorboard", "-q"])
    text = capsys.readouterr().out
    assert code == 0
    compiled = why.startswith("compiled")
    assert (f"backend xla: {int(compiled)} cluster(s) compiled, {int(not compiled)} kept on "
            f"TensorFlow's kernels, 0 not measured yet, 0 on the CPU reference") in text
    assert f"    cluster GeOp1_0 (x:0 4x16x16x3): {why}\n" in text
    report = json.loads((tmp_path / "out" / "placement.json").read_text())
    (decision,) = report["clusters"][0]["compile"]["decisions"]
    assert decision["why"] == why


# --------------------------------------------------------------------------- through a session
def fused_and_depthwise_graph():
    """Two clusters split by a host op: a chain of elementwise ops (XLA fuses it into one loop)
    and a depthwise convolution whose filter is fed (not rewritten: XLA's CPU code makes it a
    dense convolution over all channels)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [1, 28, 28, 96], name="x")
        w = tf1.placeholder(tf.float32, [3, 3, 96, 1], name="w")
        h = x
        for k in range(12):
            h = tf.tanh(h * (1.0 + 0.01 * k)) + 0.5 * h
        h = tf.numpy_function(lambda v: v + 1.0, [h], tf.float32, stateful=False)
        h = tf.nn.depthwise_conv2d(tf.reshape(h, [1, 28, 28, 96]), w, [1, 1, 1, 1], "SAME")
        tf.reduce_mean(h, axis=[1, 2], name="out")
    return graph


def test_session_runs_each_cluster_in_the_form_it_kept_with_plain_numbers():
    graph = fused_and_depthwise_graph()
    rng = np.random.RandomState(5)
    feeds = {"x:0": rng.randn(1, 28, 28, 96).astype(np.float32),
             "w:0": rng.randn(3, 3, 96, 1).astype(np.float32) * 0.3}
    with PlainSession(graph=graph) as sess:
        want = sess.run("out:0", feeds)
    config = NpuConfig.from_dict({"npu_adapter_backend": "xla", "mix_compile_mode": True})
    # Two clusters, one after the other: the first run on TensorFlow's kernels; each
    # cluster's executable built by a run's replay in the background; then its pairs.
    decided_after = 1 + 2 * 2 * PAIRS
    extra = 4
    with NpuSession(graph=graph, config=config.to_config_proto()) as sess:
        runtime = runner_of(sess).runtime
        first = sess.run("out:0", feeds)
        np.testing.assert_array_equal(first, want)  # on TensorFlow's kernels
        started = runner_of(sess).runtime_stats()
        assert started.compiles == started.background_compiles  # nothing in the foreground
        assert runtime.wait_for_builds(timeout=300)
        for _ in range(decided_after - 1):
            np.testing.assert_allclose(sess.run("out:0", feeds), want, rtol=1e-4, atol=1e-5)
            assert runtime.wait_for_builds(timeout=300)
        decided = runner_of(sess).runtime_stats()
        later = [sess.run("out:0", feeds) for _ in range(extra)]
        stats = runner_of(sess).runtime_stats()
        step = runner_of(sess).rewrite_result("out:0", feeds)
    names = [c.name for c in step.clusters]
    assert len(names) == 2 and stats.decisions_measured == 2
    kept_on_tf = []
    for name in names:
        before, after = decided.clusters[name], stats.clusters[name]
        (why,) = after.decisions.values()
        # Decided from its measured times, and reported as it is: compiled when the median
        # ratio of the pairs is below 1.
        ratio = float(why.split("median ratio ")[1].split("x")[0])
        assert after.status == ("compiled" if ratio < 1 else "tensorflow"), why
        assert why.startswith("compiled by XLA" if ratio < 1 else "kept on TensorFlow's kernels")
        assert after.reason == ("" if ratio < 1 else why)
        # Every later run uses the kept form, and nothing more is compiled.
        compiled_runs = after.runs_compiled - before.runs_compiled
        assert compiled_runs == (extra if ratio < 1 else 0), name
        assert after.runs_compiled + after.runs_tensorflow == decided_after + extra
        # One executable, built in the background (the replay's time, less a compiled
        # run's, is its compile time).
        assert after.compiles == after.background_compiles == 1
        assert after.compile_seconds > 0
        if ratio >= 1:
            kept_on_tf.append(name)
    for got in later:
        if len(kept_on_tf) == 2:
            # On TensorFlow's kernels the cluster computes what plain TensorFlow computes.
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert stats.compile_seconds == pytest.approx(sum(
        stats.clusters[name].compile_seconds for name in names))


def slow_to_compile_graph():
    """One cluster XLA takes a while to compile (a chain of 40 dense layers)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [8, 128], name="x")
        h = x
        for k in range(40):
            w = tf.constant(np.random.RandomState(k).randn(128, 128).astype(np.float32) * 0.05)
            h = tf.tanh(tf.matmul(h, w)) + h
        tf.identity(h, name="out")
    return graph


def test_no_run_waits_for_a_compile_and_every_run_gives_plain_numbers():
    graph = slow_to_compile_graph()
    feeds = {"x:0": np.random.RandomState(2).randn(8, 128).astype(np.float32)}
    with PlainSession(graph=graph) as sess:
        want = sess.run("out:0", feeds)
    config = NpuConfig.from_dict({"npu_adapter_backend": "xla"}).to_config_proto()
    with NpuSession(graph=graph, config=config) as sess:
        runtime = runner_of(sess).runtime
        runs = 0
        # Runs go on while the executable builds; whenever it is built, nothing a run did
        # compiled: every compile counted is a background one.
        while runs < 200:
            np.testing.assert_allclose(sess.run("out:0", feeds), want, rtol=1e-4, atol=1e-5)
            runs += 1
            stats = runner_of(sess).runtime_stats()
            assert stats.compiles == stats.background_compiles
            if stats.compiles and runs >= 2 + 2 * PAIRS:
                break
        assert runtime.wait_for_builds(timeout=300)
        for _ in range(2 * PAIRS + 2):
            np.testing.assert_allclose(sess.run("out:0", feeds), want, rtol=1e-4, atol=1e-5)
        stats = runner_of(sess).runtime_stats()
    (cluster,) = stats.clusters.values()
    assert cluster.status in ("compiled", "tensorflow") and stats.decisions_measured == 1
    assert cluster.compiles == cluster.background_compiles == 1
    assert cluster.compile_seconds > 0


def test_closing_while_an_executable_builds_under_load_ends_cleanly():
    graph = slow_to_compile_graph()
    feeds = {"x:0": np.ones((8, 128), np.float32)}
    config = NpuConfig.from_dict({"npu_adapter_backend": "xla"}).to_config_proto()

    def build_threads():
        return {t for t in threading.enumerate() if t.name.startswith("npu-adapter-xla-build")}

    before = build_threads()
    sess = NpuSession(graph=graph, config=config)
    sess.run("out:0", feeds)  # its replay starts the build
    assert build_threads() - before  # under way
    errors = []

    def keep_running():
        while True:
            try:
                sess.run("out:0", feeds)
            except (RuntimeError, tf.errors.CancelledError) as exc:
                # TensorFlow's errors: a run after the close, or one the close cancelled.
                errors.append(exc)
                return

    threads = [threading.Thread(target=keep_running) for _ in range(3)]
    for thread in threads:
        thread.start()
    sess.close()  # the build under way ends with its compilation; close waits for it
    for thread in threads:
        thread.join(timeout=60)
    assert len(errors) == 3
    assert all(isinstance(e, tf.errors.CancelledError) or "closed Session" in str(e)
               for e in errors)
    assert build_threads() <= before  # the session's build thread ended with it
    stats = runner_of(sess).runtime_stats()
    (cluster,) = stats.clusters.values()
    assert cluster.status == "pending"  # nothing was decided from the cancelled build
