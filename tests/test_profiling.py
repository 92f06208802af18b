"""Profiling: profiling_options validation, where the settings come from, and the files a
profiled plain session writes (Chrome traces, training trace, summaries, HTML)."""

import csv
import importlib
import io
import json
import os
import pathlib
import sys
import types
import warnings

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import step_stats_pb2
from tensorflow.core.protobuf import rewriter_config_pb2

import npu_adapter
from npu_adapter import tf_compat
from npu_adapter.config import NpuConfig
from npu_adapter.config.options import PROFILING_DEFAULT_OPTIONS
from npu_adapter.errors import NpuConfigError
from npu_adapter.profiling import SessionProfiler, parse_profiling_options
from npu_adapter.profiling.options import ProfilingOptions
from npu_adapter.profiling.settings import (
    API_PROFILER_MODULE,
    ProfilingSettings,
    static_profiling_settings,
)
from npu_adapter.profiling.trace import ClusterIndex, events_from_step_stats
from npu_adapter.session import runner_of

tf1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------- options


def options(**values):
    return json.dumps(values)


SWITCHES = ["training_trace", "hccl", "l2", "msproftx", "runtime_api", "op_trace"]
FREQUENCIES = {"sys_hardware_mem_freq": (1, 100), "sys_io_sampling_freq": (1, 100),
               "sys_interconnection_freq": (1, 50), "dvpp_freq": (1, 100),
               "instr_profiling_freq": (300, 30000), "host_sys_usage_freq": (1, 50)}
METRICS = ["ArithmeticUtilization", "PipeUtilization", "Memory", "MemoryL0", "MemoryUB",
           "ResourceConflictRatio", "L2Cache"]

VALID = (
    [("output", v) for v in ("/tmp/profiling", "relative/dir", "./")]
    + [("storage_limit", v) for v in ("200MB", "4294967296MB", "1024MB")]
    + [(key, v) for key in SWITCHES for v in ("on", "off")]
    + [("task_time", v) for v in ("on", "off", "l0", "l1")]
    + [("fp_point", v) for v in ("", "conv1/Conv2D")] + [("bp_point", "gradients/AddN")]
    + [("aic_metrics", v) for v in METRICS + ["Custom:0x49,0x8,0x15", "Custom:1",
                                              "Custom:" + ",".join(["0x6E"] * 8)]]
    + [(key, v) for key, (low, high) in FREQUENCIES.items()
       for v in (str(low), str(high), low, high)]
    + [("llc_profiling", v) for v in ("read", "write", "capacity", "bandwidth")]
    + [(key, v) for key in ("host_sys", "host_sys_usage") for v in ("cpu", "mem", "cpu,mem")]
)

INVALID = (
    [("output", v) for v in ("", "  ", 5)]
    + [("storage_limit", v) for v in ("199MB", "200", "2GB", "4294967297MB", 200)]
    + [(key, v) for key in SWITCHES for v in ("yes", "ON", True, 1)]
    + [("task_time", v) for v in ("l2", "true")]
    + [("task_trace", 1), ("aicpu", True), ("fp_point", 3), ("bp_point", None)]
    + [("aic_metrics", v) for v in ("Foo", "pipeutilization", "Custom:", "Custom:0x6F",
                                    "Custom:0", "Custom:zz", "Custom:" + ",".join(["1"] * 9), 3)]
    + [(key, v) for key, (low, high) in FREQUENCIES.items()
       for v in (str(low - 1), str(high + 1), high + 1, "fast", 1.5)]
    + [("llc_profiling", v) for v in ("READ", "x")]
    + [(key, v) for key in ("host_sys", "host_sys_usage") for v in ("gpu", "cpu,gpu", "")]
)


@pytest.mark.parametrize("key, value", VALID)
def test_valid_profiling_option_values(key, value):
    parsed = parse_profiling_options(options(**{key: value}))
    assert key in parsed.as_dict()
    if key == "storage_limit":
        assert parsed.storage_limit_mb == int(value[:-2])


@pytest.mark.parametrize("key, value", INVALID)
def test_invalid_profiling_option_values(key, value):
    with pytest.raises(NpuConfigError) as info:
        parse_profiling_options(options(**{key: value}))
    assert info.value.option == "profiling_options" and key in str(info.value)


@pytest.mark.parametrize("key", ["task_trace", "aicpu"])
def test_task_trace_and_aicpu_treat_other_values_as_off(key):
    assert parse_profiling_options(options(**{key: "maybe"})).as_dict()[key] == "off"
    assert parse_profiling_options(options(**{key: "on"})).as_dict()[key] == "on"


@pytest.mark.parametrize("other", ["training_trace", "task_trace", "hccl", "aicpu", "fp_point",
                                   "bp_point", "aic_metrics", "l2", "task_time",
                                   "runtime_api"])
def test_instr_profiling_freq_is_exclusive(other):
    value = {"aic_metrics": "Memory", "fp_point": "a", "bp_point": "b", "task_time": "on"}.get(
        other, "on")
    with pytest.raises(NpuConfigError, match="instr_profiling_freq cannot be combined"):
        parse_profiling_options(options(instr_profiling_freq="1000", **{other: value}))
    parse_profiling_options(options(instr_profiling_freq="1000", host_sys="cpu"))


@pytest.mark.parametrize("text", ["[]", "1", "nope", '"on"', "{"])
def test_profiling_options_must_be_a_json_object(text):
    with pytest.raises(NpuConfigError, match="JSON"):
        parse_profiling_options(text)


def test_unknown_keys_warn_and_the_default_options_are_valid():
    with pytest.warns(UserWarning, match="unknown key 'made_up_key'"):
        parse_profiling_options(options(made_up_key="on", output="/x"))
    default = parse_profiling_options(PROFILING_DEFAULT_OPTIONS)
    assert default.training_trace and default.output == "./"


def test_the_session_option_is_validated():
    with pytest.raises(NpuConfigError, match="aic_metrics"):
        NpuConfig(profiling_mode=True, profiling_options=options(aic_metrics="Bogus"))
    with pytest.raises(NpuConfigError, match="profiling_options"):
        NpuConfig(profiling_mode=True, profiling_options="trace everything")
    assert NpuConfig(profiling_options=options(output="/p")).profiling_options == '{"output": "/p"}'


@pytest.mark.parametrize("text", ["trace everything", options(aic_metrics="Bogus")])
def test_profiling_options_never_stop_a_script_while_profiling_is_off(text):
    from npu_adapter.config.warnings import reset_warn_once

    reset_warn_once()
    for explicit in ({}, {"profiling_mode": False}):
        with pytest.warns(UserWarning, match="profiling_mode is off, so profiling_options is "
                                             "not used"):
            config = NpuConfig(profiling_options=text, **explicit)
        reset_warn_once()
        assert config.profiling_options == text and not config.profiling_mode
        assert static_profiling_settings(config, environ={}) is None


# ---------------------------------------------------------------------------- settings


def test_settings_from_the_session_options(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = NpuConfig(profiling_mode=True, profiling_options=options(output="out"))
    settings = static_profiling_settings(config, environ={"PROFILING_MODE": "false"})
    assert settings.source == "session options" and settings.output == str(tmp_path / "out")
    default = static_profiling_settings(NpuConfig(profiling_mode=True), environ={})
    assert default.output == str(tmp_path) and default.options.training_trace
    off = NpuConfig(profiling_mode=False)
    assert static_profiling_settings(off, environ={"PROFILING_MODE": "true"}) is None


def test_settings_from_the_environment(tmp_path):
    env = {"PROFILING_MODE": "true", "PROFILING_OPTIONS": options(output=str(tmp_path),
                                                                  task_trace="on")}
    settings = static_profiling_settings(NpuConfig(), environ=env)
    assert settings.source == "PROFILING_MODE" and settings.options.task_trace
    assert static_profiling_settings(None, environ={"PROFILING_MODE": "TRUE"}).options.\
        training_trace   # default options
    assert static_profiling_settings(NpuConfig(), environ={"PROFILING_MODE": "1"}) is None
    with pytest.raises(NpuConfigError) as info:
        static_profiling_settings(NpuConfig(), environ={"PROFILING_MODE": "true",
                                                        "PROFILING_OPTIONS": "{bad"})
    assert info.value.option == "PROFILING_OPTIONS"


class FakeApiProfiler:
    def __init__(self, output_path):
        self.level = "L1"
        self.aic_metrics = "Memory"
        self.output_path = output_path


@pytest.fixture
def api_profiler(monkeypatch):
    """A stand-in for npu_bridge.profiler.profiler with the accessor contract."""
    module = types.ModuleType(API_PROFILER_MODULE)
    module.current = None
    module.current_request = lambda: module.current
    monkeypatch.setitem(sys.modules, API_PROFILER_MODULE, module)
    return module


def test_settings_from_a_started_api_profiler(tmp_path, api_profiler):
    profiler = SessionProfiler(NpuConfig(), environ={})
    assert profiler.before_run() == (None, None)
    api_profiler.current = FakeApiProfiler(str(tmp_path))
    settings = profiler.settings()
    assert (settings.source, settings.level, settings.output) == ("Profiler", "L1", str(tmp_path))
    assert settings.options.aic_metrics == "Memory"
    run_options, metadata = profiler.before_run()
    assert run_options.trace_level == tf1.RunOptions.FULL_TRACE and metadata is not None
    both = SessionProfiler(NpuConfig(profiling_mode=True), environ={})
    with pytest.raises(NpuConfigError, match="not both"):
        both.before_run()
    env_too = SessionProfiler(None, environ={"PROFILING_MODE": "true"})
    with pytest.raises(NpuConfigError, match="not both"):
        env_too.before_run()
    api_profiler.current = None
    assert profiler.before_run() == (None, None)


# ---------------------------------------------------------------------------- profiled runs


def mlp_graph():
    """x ─► fc1 (MatMul) ─► act (Relu) ─► [host: noisy (Abs, no npu compile)] ─► fc2 (MatMul) ─►
    loss (Mean of squares); GradientDescent on both weights (train)."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [8, 4], name="x")
        w1 = tf1.get_variable("w1", initializer=np.full((4, 6), 0.1, np.float32))
        w2 = tf1.get_variable("w2", initializer=np.full((6, 1), 0.2, np.float32))
        act = tf.nn.relu(tf.matmul(x, w1, name="fc1"), name="act")
        from tensorflow.core.framework import attr_value_pb2

        with tf_compat.attr_scope({"_without_npu_compile": attr_value_pb2.AttrValue(b=True)}):
            act = tf.abs(act, name="noisy")
        out = tf.matmul(act, w2, name="fc2")
        loss = tf.reduce_mean(tf.square(out - 1.0), name="loss")
        tf1.train.GradientDescentOptimizer(0.01).minimize(loss, name="train")
        tf1.global_variables_initializer()   # "init"
    return g


def session_config():
    """Keep every op as written so the test can look for each one in the trace."""
    config = tf1.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    off = rewriter_config_pb2.RewriterConfig.OFF
    rewrite.remapping = off
    rewrite.arithmetic_optimization = off
    rewrite.constant_folding = off
    rewrite.dependency_optimization = off
    return config


def forward_graph():
    """x ─► mm (MatMul) ─► t (Tanh) ─► tx (Mul x) ─► e (Exp) ─► [host: h (Abs, no npu compile)]
    ─► m (Mul x) ─► sm (Softmax) ─► out (Sum): nothing TensorFlow could fold, fuse or drop."""
    g = tf.Graph()
    with g.as_default():
        from tensorflow.core.framework import attr_value_pb2

        x = tf1.placeholder(tf.float32, [8, 4], name="x")
        w = tf.constant(np.full((4, 4), 0.1, np.float32), name="w")
        t = tf.tanh(tf.matmul(x, w, name="mm"), name="t")
        e = tf.exp(tf.multiply(t, x, name="tx"), name="e")
        with tf_compat.attr_scope({"_without_npu_compile": attr_value_pb2.AttrValue(b=True)}):
            h = tf.abs(e, name="h")
        sm = tf.nn.softmax(tf.multiply(h, x, name="m"), name="sm")
        tf.reduce_sum(sm, name="out")
    return g


def profile_run(tmp_path, profiling_options=None, steps=3, isolate=False, stream=None,
                forward=False):
    """Profile ``steps`` runs of the MLP training step (or of :func:`forward_graph`)."""
    g = forward_graph() if forward else mlp_graph()
    fetch, targets = ("out:0", []) if forward else ("loss:0", ["train"])
    config = NpuConfig(mix_compile_mode=True, profiling_mode=True,
                       npu_adapter_isolate_clusters=isolate,
                       profiling_options=json.dumps(profiling_options or {
                           "output": str(tmp_path), "training_trace": "on"}))
    result = npu_adapter.rewrite(g.as_graph_def(), config, fetches=[fetch],
                                 targets=targets, feeds=["x:0"])
    profiler = SessionProfiler(config, environ={}, stream=stream or io.StringIO(),
                               progress_interval=0)
    profiler.register_graph(result.graph_def)
    run_graph = tf.Graph()
    with run_graph.as_default():
        tf.import_graph_def(result.graph_def, name="")
        # The user's graph, imported beside it, initialises the same (shared_name) variables.
        tf.import_graph_def(g.as_graph_def(), name="user")
        with tf1.Session(config=session_config()) as sess:
            if not forward:
                sess.run("user/init")
            for step in range(steps):
                run_options, metadata = profiler.before_run()
                sess.run([result.tensor_map[fetch]] + [result.op_map[t] for t in targets],
                         {"x:0": np.full((8, 4), 0.5 + step, np.float32)},
                         options=run_options, run_metadata=metadata)
                profiler.after_run(metadata)
    profiler.close()
    (root,) = profiler.output_dirs
    return result, pathlib.Path(root)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def one(directory, pattern):
    (path,) = directory.glob(pattern)
    return path


@pytest.mark.parametrize("isolate", [False, True])
def test_chrome_traces_have_every_cluster_op(tmp_path, isolate):
    result, root = profile_run(tmp_path, isolate=isolate, forward=True)
    out = root / "mindstudio_profiler_output"
    functions = {f.signature.name: f for f in result.graph_def.library.function}
    expected = {(c.name, n.name) for c in result.clusters
                for n in functions[c.name].node_def if n.op not in ("Const", "NoOp")}
    assert {op for _, op in expected} == {"mm", "t", "tx", "e", "m", "sm", "out"}
    for step in range(3):
        trace = json.loads((out / "timeline" / f"msprof_step_{step}.json").read_text())
        events = trace["traceEvents"]
        assert isinstance(events, list) and trace["displayTimeUnit"] == "ms"
        names = {}
        for event in events:
            assert event["ph"] in ("X", "M")
            assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
            if event["ph"] == "M":
                assert event["name"] in ("process_name", "thread_name", "process_sort_index")
                if event["name"] == "process_name":
                    names[event["pid"]] = event["args"]["name"]
                continue
            assert event["ts"] >= 0 and event["dur"] >= 0 and event["name"]
        found = {(names[e["pid"]].replace("Cluster ", ""), e["name"]) for e in events
                 if e["ph"] == "X" and e["cat"] == "cluster_op"}
        assert expected <= found, expected - found
        host = {e["name"] for e in events if e["ph"] == "X" and e["cat"] == "host"}
        assert "h" in host and all(names[e["pid"]] == "Host" for e in events
                                       if e["ph"] == "X" and e["cat"] == "host")


def test_training_trace(tmp_path):
    _, root = profile_run(tmp_path, {"output": str(tmp_path), "training_trace": "on",
                                     "fp_point": "fc1", "bp_point": "train/update_w1/Resource"
                                     "ApplyGradientDescent"})
    rows = read_csv(one(root / "mindstudio_profiler_output", "step_trace_*.csv"))
    assert [r["Iteration ID"] for r in rows] == ["0", "1", "2"]
    previous_end = None
    for row in rows:
        assert row["FP Point"] == "fc1"
        assert row["BP Point"] == "train/update_w1/ResourceApplyGradientDescent"
        fp, bp, end = (float(row[k]) for k in ("FP Start(us)", "BP End(us)",
                                               "Iteration End(us)"))
        assert 0 <= fp <= bp <= end
        assert float(row["FP to BP Time(us)"]) == pytest.approx(bp - fp, abs=1e-3)
        assert float(row["Iteration Refresh(us)"]) == pytest.approx(end - bp, abs=1e-3)
        if previous_end is not None:
            assert float(row["Iteration Time(us)"]) == pytest.approx(end - previous_end,
                                                                     abs=1e-3)
            assert float(row["Data Aug Bound(us)"]) == pytest.approx(fp - previous_end,
                                                                     abs=1e-3)
        previous_end = end


def test_automatic_fp_and_bp_points(tmp_path):
    _, root = profile_run(tmp_path, steps=1)
    (row,) = read_csv(one(root / "mindstudio_profiler_output", "step_trace_*.csv"))
    assert row["FP Point"] == "fc1"                 # the first computing cluster op
    assert row["BP Point"].startswith("gradients/")  # the last op of the backward pass


def _step_stats_durations(root, step):
    stats = step_stats_pb2.StepStats()
    stats.ParseFromString((root / "device_0" / "data" / f"step_{step}.step_stats.pb")
                          .read_bytes())
    return {n.node_name: max(n.all_end_rel_micros, n.op_end_rel_micros)
            for d in stats.dev_stats for n in d.node_stats}


def test_summaries_agree_with_the_raw_step_stats(tmp_path):
    result, root = profile_run(tmp_path, steps=2)
    out = root / "mindstudio_profiler_output"
    summary = read_csv(one(out, "op_summary_*.csv"))
    clusters = {c.name for c in result.clusters}
    host_total = cluster_total = 0.0
    for step in (0, 1):
        raw = _step_stats_durations(root, step)
        rows = [r for r in summary if r["Iteration ID"] == str(step)]
        for row in rows:
            assert float(row["Task Duration(us)"]) == raw[row["Node Name"]]
            assert row["Task Type"] == ("AI_CORE" if row["Model Name"] in clusters
                                        else "HOST_CPU")
        host_total += sum(float(r["Task Duration(us)"]) for r in rows
                          if r["Task Type"] == "HOST_CPU")
        cluster_total += sum(float(r["Task Duration(us)"]) for r in rows
                             if r["Task Type"] == "AI_CORE")
    split = read_csv(one(out, "host_vs_cluster_*.csv"))
    assert split[-1]["Iteration ID"] == "total"
    assert float(split[-1]["Host Op Time(us)"]) == pytest.approx(host_total, abs=1e-2)
    assert float(split[-1]["Cluster Op Time(us)"]) == pytest.approx(cluster_total, abs=1e-2)
    statistic = read_csv(one(out, "op_statistic_*.csv"))
    assert sum(int(r["Count"]) for r in statistic) == len(summary)
    matmul = next(r for r in statistic if r["OP Type"] == "MatMul" and
                  r["Core Type"] == "AI_CORE")
    matmuls = [float(r["Task Duration(us)"]) for r in summary if r["OP Type"] == "MatMul"
               and r["Task Type"] == "AI_CORE"]
    assert int(matmul["Count"]) == len(matmuls)
    assert float(matmul["Total Time(us)"]) == pytest.approx(sum(matmuls), abs=1e-2)
    assert sum(float(r["Ratio(%)"]) for r in statistic) == pytest.approx(100, abs=0.1)
    top = read_csv(one(out, "top_ops_*.csv"))
    totals = [float(r["Total Time(us)"]) for r in top]
    assert totals == sorted(totals, reverse=True)
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count('class="sortable"') == 4
    assert "timeline/msprof_step_0.json" in html
    assert "profiling options from session options" in (out / "README.txt").read_text()


def test_loop_sinking_run_is_split_into_iterations(tmp_path):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [4], name="x")
        tf.reduce_sum(tf.exp(x * 0.5, name="e"), name="s")
    config = NpuConfig(profiling_mode=True, profiling_options=options(output=str(tmp_path)))
    result = npu_adapter.rewrite(g.as_graph_def(), config, fetches=["s:0"], feeds=["x:0"])
    (cluster,) = result.clusters
    profiler = SessionProfiler(config, environ={}, stream=io.StringIO())
    profiler.register_graph(result.graph_def)
    from tensorflow.core.framework import attr_value_pb2

    with tf.Graph().as_default() as run_graph:
        tf.import_graph_def(result.graph_def, name="")
        x_in = run_graph.get_tensor_by_name("x:0")

        def body(i, total):
            (out,) = tf.raw_ops.StatefulPartitionedCall(
                args=[x_in], Tout=[tf.float32], f=attr_value_pb2.NameAttrList(name=cluster.name))
            return i + 1, total + tf.reshape(out, [])

        loop = tf1.while_loop(lambda i, t: i < 3, body, [tf.constant(0), tf.constant(0.0)],
                              parallel_iterations=1)
        with tf1.Session() as sess:
            run_options, metadata = profiler.before_run()
            sess.run(loop, {"x:0": np.ones(4, np.float32)}, options=run_options,
                     run_metadata=metadata)
            profiler.after_run(metadata, iterations=3)
    profiler.close()
    out = pathlib.Path(profiler.output_dirs[0]) / "mindstudio_profiler_output"
    rows = read_csv(one(out, "step_trace_*.csv"))
    assert [r["Iteration ID"] for r in rows] == ["0", "1", "2"]
    ends = [float(r["Iteration End(us)"]) for r in rows]
    assert ends == sorted(ends) and len(set(ends)) == 3
    for step in range(3):
        trace = json.loads((out / "timeline" / f"msprof_step_{step}.json").read_text())
        assert [e["name"] for e in trace["traceEvents"] if e.get("cat") == "cluster_op"
                and e["name"] == "e"] == ["e"]


def test_events_are_attributed_by_name():
    stats = step_stats_pb2.StepStats()
    device = stats.dev_stats.add(device="/cpu:0")
    for name, label in [("npu_rewrite_2/GeOp2_0/conv/Conv2D", "x = Conv2D(a)"),
                        ("npu_rewrite_2/GeOp2_0_gear_1/relu", "x = Relu(a)"),
                        ("npu_rewrite_2/GeOp2_0", "x = StatefulPartitionedCall(a)"),
                        ("body_op", "body_op = Tanh(a)"), ("host/op", "host/op = Abs(a)"),
                        ("npu_rewrite_3/body_op", "x = Tanh(a)"),
                        ("npu_rewrite_3/host/op", "x = Abs(a)"),
                        ("while/body/_1/StatefulPartitionedCall/body_op", "x = Tanh(a)"),
                        ("body_op/unary_ops_composition", "x = _UnaryOpsComposition(a)"),
                        ("ArithmeticOptimizer/AddOpsRewrite_body_op", "x = AddN(a)"),
                        ("other/StatefulPartitionedCall/unknown", "x = Abs(a)"),
                        ("_SOURCE", "_SOURCE = NoOp()"), ("x_0_arg", "x_0_arg = _Arg()"),
                        ("GeOp2_0/npu_adapter_dump/step", "s = PyFunc()")]:
        device.node_stats.add(node_name=name, timeline_label=label, all_start_micros=10,
                              all_end_rel_micros=5)
    index = ClusterIndex()
    index.body_nodes["body_op"] = "GeOp2_1"
    events = {e.node: e for e in events_from_step_stats(stats, index)}
    assert (events["npu_rewrite_2/GeOp2_0/conv/Conv2D"].cluster,
            events["npu_rewrite_2/GeOp2_0/conv/Conv2D"].op) == ("GeOp2_0", "conv/Conv2D")
    assert events["npu_rewrite_2/GeOp2_0_gear_1/relu"].cluster == "GeOp2_0"
    assert events["npu_rewrite_2/GeOp2_0"].kind == "cluster_call"
    assert (events["body_op"].kind, events["body_op"].cluster) == ("cluster_op", "GeOp2_1")
    assert events["host/op"].kind == "host" and events["host/op"].op_type == "Abs"
    # A body node the rewrite changed, inlined under its own name in the shadow's scope.
    scoped = events["npu_rewrite_3/body_op"]
    assert (scoped.kind, scoped.cluster, scoped.op) == ("cluster_op", "GeOp2_1", "body_op")
    assert events["npu_rewrite_3/host/op"].kind == "host"
    looped = events["while/body/_1/StatefulPartitionedCall/body_op"]
    assert (looped.kind, looped.cluster, looped.op) == ("cluster_op", "GeOp2_1", "body_op")
    for made in ("body_op/unary_ops_composition", "ArithmeticOptimizer/AddOpsRewrite_body_op"):
        assert (events[made].kind, events[made].cluster) == ("cluster_op", "GeOp2_1")
    assert events["other/StatefulPartitionedCall/unknown"].kind == "host"
    assert {events[n].kind for n in ("_SOURCE", "x_0_arg",
                                     "GeOp2_0/npu_adapter_dump/step")} == {"runtime"}


def test_storage_limit_ages_out_old_step_files(tmp_path):
    from npu_adapter.profiling.profiler import ProfileWriter

    limited = ProfilingOptions(output=str(tmp_path), storage_limit_mb=0.02)   # ~20 KiB
    writer = ProfileWriter(ProfilingSettings(limited, "test", str(tmp_path)))
    stats = step_stats_pb2.StepStats()
    node = stats.dev_stats.add(device="/cpu:0").node_stats.add(
        node_name="n", all_start_micros=1, all_end_rel_micros=2, timeline_label="n = Abs(a)")
    node.timeline_label += " " * 6000
    for step in range(8):
        writer.add_step(step, events_from_step_stats(stats), stats, None)
    remaining = sorted(p.name for p in (pathlib.Path(writer.raw_dir)).iterdir())
    assert "step_0.step_stats.pb" not in remaining and "step_7.step_stats.pb" in remaining


def test_progress_and_deterministic_directory_names(tmp_path, monkeypatch):
    stream = io.StringIO()
    config = NpuConfig(profiling_mode=True, profiling_options=options(output=str(tmp_path)))
    profiler = SessionProfiler(config, environ={"SOURCE_DATE_EPOCH": "1700000000"},
                               stream=stream, progress_interval=1e-9)
    stats = step_stats_pb2.StepStats()
    stats.dev_stats.add(device="/cpu:0").node_stats.add(node_name="a", all_start_micros=1,
                                                        all_end_rel_micros=1)
    metadata = tf1.RunMetadata(step_stats=stats)
    for _ in range(2):
        profiler.after_run(metadata)
    profiler.close()
    (root,) = profiler.output_dirs
    assert os.path.basename(root).startswith("PROF_") and "_20231114221320000_" in root
    lines = stream.getvalue().splitlines()
    assert lines[-1].startswith("npu-adapter: profiling: ") and lines[-1].endswith("(done)")
    assert "steps 0-1" in lines[-1]


def test_nothing_happens_when_profiling_is_off():
    profiler = SessionProfiler(NpuConfig(), environ={})
    assert not profiler.statically_enabled and profiler.before_run() == (None, None)
    profiler.after_run(None)
    profiler.after_run(tf1.RunMetadata())
    profiler.close()
    assert profiler.output_dirs == []


# ---------------------------------------------------------------------------- real browser


SHOT = importlib.import_module("npu_adapter.report.screenshot")
CHROMIUM = SHOT.find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install "
                                             "chromium)")
def test_profile_report_in_headless_chromium(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, root = profile_run(tmp_path, steps=2)
    png = tmp_path / "report.png"
    SHOT.screenshot(str(root / "mindstudio_profiler_output" / "report.html"), str(png),
                    width=1200, height=1600)
    stats, problems = SHOT.check_png(str(png), ["#4a7bd0"])   # the bar chart's bars
    assert problems == [], problems


# ---------------------------------------------------------------------------- older plain form


def test_the_older_plain_string_form_is_read_as_json_with_a_warning():
    from npu_adapter.config.warnings import reset_warn_once

    reset_warn_once()
    with pytest.warns(UserWarning, match="plain-string form of older CANN releases"):
        parsed = parse_profiling_options("training_trace:task_trace")
    assert parsed.training_trace and parsed.task_trace and parsed.output == "./"
    assert parsed.as_dict() == {"output": "./", "training_trace": "on", "task_trace": "on"}
    with pytest.raises(NpuConfigError, match="JSON"):
        parse_profiling_options("task_trace:bogus")  # not the older form either


def script_config(profiling_mode):
    """The NpuOptimizer entry of a ModelZoo launch script whose profiling flag defaults to the
    older plain string."""
    config = tf1.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["profiling_mode"].b = profiling_mode
    custom_op.parameter_map["profiling_options"].s = tf.compat.as_bytes("task_trace")
    return config


@pytest.mark.parametrize("profiling_mode", [False, True])
def test_a_script_with_the_older_profiling_string_runs(tmp_path, monkeypatch, profiling_mode):
    from npu_adapter.config.warnings import reset_warn_once
    from npu_adapter.session import NpuSession, plain_session_class

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PROFILING_MODE", raising=False)
    feed = {"x:0": np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)}
    losses = {}
    with plain_session_class()(graph=mlp_graph(), config=script_config(profiling_mode)) as sess:
        sess.run("init")
        losses["plain"] = [sess.run(["loss:0", "train"], feed)[0] for _ in range(3)]
    reset_warn_once()  # the warning is issued once per process
    with pytest.warns(UserWarning, match="plain-string form of older CANN releases"):
        sess = NpuSession(graph=mlp_graph(), config=script_config(profiling_mode))
    with sess:
        sess.run("init")
        losses["npu"] = [sess.run(["loss:0", "train"], feed)[0] for _ in range(3)]
        assert runner_of(sess).rewrite_count >= 1
    plain, npu = losses.values()
    assert [a.tobytes() for a in plain] == [b.tobytes() for b in npu]
    profiles = sorted(path.name for path in tmp_path.glob("PROF_*"))
    assert len(profiles) == (1 if profiling_mode else 0)
    if profiling_mode:
        readme = next(tmp_path.glob("PROF_*/**/README.txt")).read_text()
        assert 'profiling options from session options: {"output": "./", "task_trace": "on"}' \
            in readme
def test_kernel_names_map_back_to_the_graph_op_types():
    stats = step_stats_pb2.StepStats()
    device = stats.dev_stats.add(device="/cpu:0")
    for name, label in [("fc1", "[mklcpu 0.3MB 0.3MB] fc1 = _MklMatMul(x, w1)"),
                        ("npu_rewrite_2/conv", "x = _MklNativeConv2D(a, b)"),
                        ("made/by/grappler", "x = _MklNativeFusedConv2D(a, b, c)"),
                        ("bn/cond/else/_1/norm", "x = _MklNativeFusedBatchNormV3(a)"),
                        ("unknown/norm", "[cpu 1MB 1MB] x = _MklNativeFusedBatchNormV3(a)"),
                        ("other", "x = _MklLayerNorm(a)"), ("plain", "x = Tanh(a)")]:
        device.node_stats.add(node_name=name, timeline_label=label, all_start_micros=10,
                              all_end_rel_micros=5)
    index = ClusterIndex()
    index.op_types.update({"fc1": "MatMul", "conv": "Conv2D"})
    index.function_op_types["norm"] = "FusedBatchNorm"   # the branch function's node
    types = {e.node: e.op_type for e in events_from_step_stats(stats, index)}
    assert types == {"fc1": "MatMul", "npu_rewrite_2/conv": "Conv2D",
                     "made/by/grappler": "_FusedConv2D", "bn/cond/else/_1/norm": "FusedBatchNorm",
                     "unknown/norm": "FusedBatchNormV3", "other": "LayerNorm", "plain": "Tanh"}


_ONEDNN_RUN = """
import pathlib, sys, tempfile
sys.path.insert(0, {tests!r})
import test_profiling as T
result, root = T.profile_run(pathlib.Path(tempfile.mkdtemp()), steps=3)
out = root / "mindstudio_profiler_output"
print(sorted({{r["OP Type"] for r in T.read_csv(T.one(out, "op_statistic_*.csv"))}}))
"""


def test_profile_with_onednn_shows_the_graph_op_types():
    """oneDNN names its kernels _MklMatMul...: the profile shows the graph's MatMul."""
    import subprocess

    tests = str(pathlib.Path(__file__).parent)
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", _ONEDNN_RUN.format(tests=tests)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    types = done.stdout.strip().splitlines()[-1]
    assert "'MatMul'" in types and "_Mkl" not in types and "''" not in types


def test_first_step_is_reported_apart_from_the_steady_mean(tmp_path):
    from npu_adapter.profiling.analysis import iteration_summary

    _, root = profile_run(tmp_path, steps=3)
    out = root / "mindstudio_profiler_output"
    data = json.loads(one(out, "step_trace_*.json").read_text())
    times = [s["iteration_time"] for s in data["steps"]]
    summary = data["iteration_time"]
    assert summary["first"] == times[0] and summary["steady_steps"] == 2
    assert summary["steady_mean"] == pytest.approx(sum(times[1:]) / 2)
    assert summary["steady_median"] == pytest.approx(sum(times[1:]) / 2)
    html = (out / "report.html").read_text()
    assert f'id="first-step"><b>{times[0] / 1000:,.3f} ms</b>' in html
    assert f'id="steady-step"><b>{sum(times[1:]) / 2000:,.3f} ms</b>' in html
    assert "mean iteration time of the 2 steps after it" in html
    empty = iteration_summary([])
    assert empty["first"] is None and empty["steady_mean"] is None
