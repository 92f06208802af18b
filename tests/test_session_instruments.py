"""Data dump, overflow detection and profiling through the session a script opens: the options of
its ``ConfigProto`` (or of the ``initialize_system`` session, or a started ``Profiler``) reach
the graphs the session runs, as in the original, with no call of ours in the script."""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.core.protobuf import rewriter_config_pb2

import npu_adapter
from npu_adapter import tf_compat
from npu_adapter.datadump import read_dump_file, scan_dump_tree
from npu_adapter.session import runner_of
from npu_adapter.system_options import on_shutdown_system

tf1 = tf.compat.v1


@pytest.fixture(autouse=True)
def _installed():
    npu_adapter.install()
    on_shutdown_system()
    yield
    on_shutdown_system()


def npu_config(**options):
    config = tf1.ConfigProto()
    custom = config.graph_options.rewrite_options.custom_optimizers.add()
    custom.name = "NpuOptimizer"
    for key, value in {"mix_compile_mode": True, **options}.items():
        if isinstance(value, bool):
            custom.parameter_map[key].b = value
        elif isinstance(value, int):
            custom.parameter_map[key].i = value
        else:
            custom.parameter_map[key].s = str(value).encode()
    config.graph_options.rewrite_options.remapping = rewriter_config_pb2.RewriterConfig.OFF
    return config


def small_graph():
    """x ─► mm ─► act ─► [host abs] ─► total: two clusters around a host op."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 3], name="x")
        w = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, name="w")
        act = tf.tanh(tf.matmul(x, w, name="mm"), name="act")
        with tf_compat.attr_scope({"_without_npu_compile": attr_value_pb2.AttrValue(b=True)}):
            host = tf.abs(act, name="host")
        tf.reduce_sum(tf.square(host, name="sq"), name="total")
    return g


def feed(step):
    return {"x:0": (np.arange(6, dtype=np.float32).reshape(2, 3) - step) / 3}


def test_a_session_with_enable_dump_dumps_every_cluster_op(tmp_path):
    g = small_graph()
    with tf1.Session(graph=g, config=npu_config(enable_dump=True, dump_path=str(tmp_path),
                                                dump_mode="output")) as sess:
        results = [sess.run("total:0", feed(step)) for step in range(2)]
        act = [sess.run("act:0", feed(step)) for step in range(2)]
    with tf1.Session(graph=g) as plain:
        assert results == [plain.run("total:0", feed(step)) for step in range(2)]
    entries = [e for e in scan_dump_tree(str(tmp_path)) if e.kind == "tensor"]
    dumped = {(e.step, read_dump_file(e.path).op_name) for e in entries}
    assert {("0", "mm"), ("0", "act"), ("0", "sq"), ("0", "total"), ("1", "total")} <= \
        {(str(s), n) for s, n in dumped}
    assert not any(name == "host" for _, name in dumped)  # a host op is not dumped
    # The values in the files are the values the runs computed (the last run of "act").
    last_act = [read_dump_file(e.path) for e in entries
                if read_dump_file(e.path).op_name == "act"]
    assert any(np.array_equal(r.outputs[0].values(), act[-1]) for r in last_act)
    # The user's graph is untouched by the instrumentation.
    assert not any("dump" in op.name.lower() for op in g.get_operations())


def test_without_dump_options_the_session_adds_nothing(tmp_path):
    g = small_graph()
    with tf1.Session(graph=g, config=npu_config()) as sess:
        sess.run("total:0", feed(0))
        assert runner_of(sess).dump is None
        installed = runner_of(sess).rewrite_result("total:0", feed(0)).graph_def
    assert not any(node.op == "PyFunc" for node in installed.node)
    for function in installed.library.function:
        assert not any(node.op == "PyFunc" for node in function.node_def)


def test_dumping_sessions_do_not_share_instrumented_graphs(tmp_path):
    g = small_graph()
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    for path in (first, second):
        with tf1.Session(graph=g, config=npu_config(enable_dump=True,
                                                    dump_path=str(path))) as sess:
            sess.run("total:0", feed(0))
    assert scan_dump_tree(str(first)) and scan_dump_tree(str(second))


def test_overflow_detection_through_the_session(tmp_path):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2], name="x")
        tf.reduce_sum(tf.exp(x, name="big") * 2.0, name="out")
    with tf1.Session(graph=g, config=npu_config(enable_dump_debug=True,
                                                dump_path=str(tmp_path),
                                                dump_debug_mode="all")) as sess:
        assert np.isfinite(sess.run("out:0", {"x:0": [0.0, 1.0]}))
        assert np.isinf(sess.run("out:0", {"x:0": [0.0, 100.0]}))
    (summary,) = pathlib.Path(tmp_path).rglob("overflow_summary.json")
    content = json.loads(summary.read_text())
    assert "big" in json.dumps(content)


def _trace_files(root):
    return sorted(pathlib.Path(root).rglob("msprof_step_*.json"))


def test_profiling_mode_traces_each_run(tmp_path):
    g = small_graph()
    options = json.dumps({"output": str(tmp_path), "training_trace": "on"})
    with tf1.Session(graph=g, config=npu_config(profiling_mode=True,
                                                profiling_options=options)) as sess:
        for step in range(3):
            sess.run("total:0", feed(step))
    traces = _trace_files(tmp_path)
    assert [t.name for t in traces] == [f"msprof_step_{k}.json" for k in range(3)]
    events = json.loads(traces[0].read_text())["traceEvents"]
    ops = {(e["args"].get("cluster"), e["name"]) for e in events
           if e.get("ph") == "X" and "type" in e.get("args", {})}
    # TensorFlow's function optimiser may fuse elementwise ops; these two always run.
    assert {("GeOp1_0", "mm"), ("GeOp1_1", "total")} <= ops


def test_users_run_metadata_is_filled_while_profiling(tmp_path):
    g = small_graph()
    options = json.dumps({"output": str(tmp_path)})
    metadata = tf1.RunMetadata()
    with tf1.Session(graph=g, config=npu_config(profiling_mode=True,
                                                profiling_options=options)) as sess:
        sess.run("total:0", feed(0), run_metadata=metadata)
    assert metadata.step_stats.dev_stats
    assert _trace_files(tmp_path)


def test_the_profiler_api_profiles_the_runs_inside_it(tmp_path):
    from npu_bridge.profiler.profiler import Profiler

    g = small_graph()
    with tf1.Session(graph=g, config=npu_config()) as sess:
        sess.run("total:0", feed(0))
        assert not _trace_files(tmp_path)
        with Profiler(level="L1", output_path=str(tmp_path)):
            sess.run("total:0", feed(1))
            sess.run("total:0", feed(2))
        sess.run("total:0", feed(3))
    assert len(_trace_files(tmp_path)) == 2


def test_initialize_system_options_hold_for_later_sessions(tmp_path):
    from npu_bridge.estimator import npu_ops

    init_graph = tf.Graph()
    with init_graph.as_default():
        init, shutdown = npu_ops.initialize_system(), npu_ops.shutdown_system()
    init_sess = tf1.Session(graph=init_graph, config=npu_config(
        enable_dump=True, dump_path=str(tmp_path), dump_mode="output"))
    init_sess.run(init)
    g = small_graph()
    with tf1.Session(graph=g, config=npu_config()) as sess:  # no dump option of its own
        sess.run("total:0", feed(0))
    assert scan_dump_tree(str(tmp_path))
    init_sess.run(shutdown)
    init_sess.close()
    later = tmp_path / "later"
    later.mkdir()
    with tf1.Session(graph=small_graph(), config=npu_config()) as sess:
        sess.run("total:0", feed(0))
        assert runner_of(sess).dump is None
