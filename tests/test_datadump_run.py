"""Data dump end to end: rewrite, instrument_for_dump, import into a plain tf.compat.v1.Session,
run, read the files back and check them against plain TensorFlow and NumPy."""

import io
import os
import pathlib
import re

import dump_wire
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.core.protobuf import rewriter_config_pb2

import npu_adapter
from npu_adapter import tf_compat
from npu_adapter.config import NpuConfig
from npu_adapter.datadump import DumpSession, instrument_for_dump, read_dump_file, scan_dump_tree
from npu_adapter.datadump.reader import read_stats_file

tf1 = tf.compat.v1

FEED = "x:0"


def small_graph():
    """x ─► mm (MatMul) ─► bias (AddV2) ─► act (Tanh) ─► [host: abs (no npu compile)] ─►
    sq (Square) ─► total (Sum)."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 3], name="x")
        w = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, name="w")
        mm = tf.matmul(x, w, name="net/mm")
        bias = tf.add(mm, tf.constant([0.5, -0.5, 1.0, 0.0]), name="net/bias")
        act = tf.tanh(bias, name="net/act")
        with tf_compat.attr_scope({"_without_npu_compile": attr_value_pb2.AttrValue(b=True)}):
            host = tf.abs(act, name="host/abs")
        sq = tf.square(host, name="tail/sq")
        tf.reduce_sum(sq, name="tail/total")
    return g


def feeds(step):
    return {FEED: (np.arange(6, dtype=np.float32).reshape(2, 3) - step) / 3}


def run_dumped(tmp_path, options, steps=3, graph=None, fetch="tail/total:0", session_config=None,
               feed=feeds, traces=None):
    """Rewrite, instrument, run ``steps`` times; returns (rewrite result, dump session, dir).
    With a list ``traces``, each run's RunMetadata (full trace) is appended to it."""
    graph = graph or small_graph()
    dump_dir = tmp_path / "dump"
    dump_dir.mkdir(exist_ok=True)
    config = NpuConfig(**{"mix_compile_mode": True, "enable_dump": True,
                          "dump_path": str(dump_dir), **options})
    result = npu_adapter.rewrite(graph.as_graph_def(), config, fetches=[fetch], feeds=[FEED])
    dump = DumpSession.from_config(config, stream=io.StringIO(), progress_interval=0)
    instrumented = dump.instrument(result.graph_def)
    run_graph = tf.Graph()
    with run_graph.as_default():
        tf.import_graph_def(instrumented, name="")
        with tf1.Session(config=session_config) as sess:
            for step in range(steps):
                options_, metadata = None, None
                if traces is not None:
                    options_ = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
                    metadata = tf1.RunMetadata()
                    traces.append(metadata)
                sess.run(result.tensor_map[fetch], feed(step), options=options_,
                         run_metadata=metadata)
    dump.close()
    return result, dump, str(dump_dir)


def plain_values(graph, names, step):
    with tf1.Session(graph=graph) as sess:
        return dict(zip(names, sess.run(list(names), feeds(step))))


def by_op(entries, step):
    return {read_dump_file(e.path).op_name: e for e in entries
            if e.step == step and e.kind == "tensor"}


# ---------------------------------------------------------------------------- values and layout


def test_round_trip_values_equal_session_run(tmp_path):
    graph = small_graph()
    _, _, dump_dir = run_dumped(tmp_path, {"dump_mode": "all"}, graph=graph)
    entries = scan_dump_tree(dump_dir)
    for step in range(3):
        dumped = by_op(entries, step)
        assert set(dumped) == {"net/mm", "net/bias", "net/act", "tail/sq", "tail/total"}
        wanted = []
        for name in dumped:
            op = graph.get_operation_by_name(name)
            wanted += [t.name for t in op.inputs] + [t.name for t in op.outputs]
        expected = plain_values(graph, sorted(set(wanted)), step)
        for name, entry in dumped.items():
            op = graph.get_operation_by_name(name)
            record = read_dump_file(entry.path)
            assert len(record.inputs) == len(op.inputs)
            for tensor, dumped_tensor in zip(op.inputs, record.inputs):
                np.testing.assert_array_equal(dumped_tensor.values(), expected[tensor.name])
            for tensor, dumped_tensor in zip(op.outputs, record.outputs):
                np.testing.assert_array_equal(dumped_tensor.values(), expected[tensor.name])


def test_layout_names_model_ids_and_an_independent_parser(tmp_path):
    _, dump, dump_dir = run_dumped(tmp_path, {"dump_mode": "output"}, steps=2)
    assert [(m.name, m.model_id) for m in dump.models] == [("GeOp1_0", 1), ("GeOp1_1", 11)]
    (time_dir,) = os.listdir(dump_dir)
    assert re.fullmatch(r"\d{14}", time_dir)
    files = []
    for root, _, names in os.walk(dump_dir):
        files += [os.path.relpath(os.path.join(root, n), dump_dir) for n in names]
    pattern = re.compile(r"(\d{14})/0/(GeOp1_[01])/(1|11)/([01])/"
                         r"([A-Za-z0-9]+)\.([A-Za-z0-9_]+)\.(\d+)\.0\.(\d{16})")
    seen = set()
    for rel in files:
        match = pattern.fullmatch(rel)
        assert match, rel
        model, model_id, step, op_type, op_name = match.group(2, 3, 4, 5, 6)
        assert {"GeOp1_0": "1", "GeOp1_1": "11"}[model] == model_id
        assert "/" not in op_name and "." not in op_name
        parsed = dump_wire.parse_dump(pathlib.Path(dump_dir, rel).read_bytes())
        assert parsed["trailing"] == 0 and not parsed["inputs"]
        assert parsed["dump_time"] == int(match.group(8))
        assert parsed["op_name"].replace("/", "_") == op_name
        seen.add((model, step, op_type, parsed["op_name"]))
    assert {(m, t, n) for m, s, t, n in seen if s == "0"} == {
        ("GeOp1_0", "MatMul", "net/mm"), ("GeOp1_0", "AddV2", "net/bias"),
        ("GeOp1_0", "Tanh", "net/act"), ("GeOp1_1", "Square", "tail/sq"),
        ("GeOp1_1", "Sum", "tail/total")}
    assert len(seen) == 10


@pytest.mark.parametrize("dump_step, expected", [
    ("", {0, 1, 2, 3}), ("0|2-3", {0, 2, 3}), ("1", {1}), ("3|0", {0, 3}), ("5-9", set())])
def test_dump_step_selects_iterations(tmp_path, dump_step, expected):
    options = {"dump_step": dump_step} if dump_step else {}
    _, _, dump_dir = run_dumped(tmp_path, options, steps=4)
    assert {e.step for e in scan_dump_tree(dump_dir)} == expected


@pytest.mark.parametrize("mode, inputs, outputs", [("input", True, False),
                                                   ("output", False, True),
                                                   ("all", True, True)])
def test_dump_mode(tmp_path, mode, inputs, outputs):
    _, _, dump_dir = run_dumped(tmp_path, {"dump_mode": mode}, steps=1)
    records = {r.op_name: r for r in map(read_dump_file, (e.path for e in
                                                            scan_dump_tree(dump_dir)))}
    assert bool(records["net/mm"].inputs) is inputs and len(records["net/mm"].inputs) in (0, 2)
    assert bool(records["net/mm"].outputs) is outputs
    assert bool(records["tail/total"].inputs) is inputs


def test_dump_layer_dumps_the_named_ops_and_the_graph_inputs_they_read(tmp_path):
    _, _, dump_dir = run_dumped(tmp_path, {"dump_layer": "net/mm  tail/sq", "dump_mode": "all"},
                                steps=1)
    records = [read_dump_file(e.path) for e in scan_dump_tree(dump_dir)]
    # Each cluster input is a Data op on the device: x for net/mm, host/abs for tail/sq.
    assert sorted((r.op_type, r.op_name) for r in records) == [
        ("Data", "host/abs"), ("Data", "x"), ("MatMul", "net/mm"), ("Square", "tail/sq")]
    data = next(r for r in records if r.op_name == "x")
    np.testing.assert_array_equal(data.outputs[0].values(), feeds(0)[FEED])


def test_stats_csv_matches_numpy(tmp_path):
    graph = small_graph()
    _, _, dump_dir = run_dumped(tmp_path, {"dump_data": "stats", "dump_mode": "all"}, steps=2,
                                graph=graph)
    entries = scan_dump_tree(dump_dir)
    assert entries and all(e.kind == "stats" and e.path.endswith(".csv") for e in entries)
    for entry in entries:
        op = next(o for o in graph.get_operations()
                  if o.name.replace("/", "_") == entry.op_name)
        tensors = {("Input", i): t.name for i, t in enumerate(op.inputs)}
        tensors.update({("Output", i): t.name for i, t in enumerate(op.outputs)})
        values = plain_values(graph, sorted(set(tensors.values())), entry.step)
        rows = read_stats_file(entry.path)
        assert len(rows) == len(tensors)
        for row in rows:
            array = np.asarray(values[tensors[(row["Input/Output"], int(row["Index"]))]])
            wide = array.astype(np.float64)
            assert int(row["Count"]) == array.size
            assert row["Shape"] == "x".join(str(d) for d in array.shape)
            assert int(row["Data Size"]) == array.nbytes
            assert row["Format"] == "ND"
            assert float(row["Max Value"]) == wide.max()
            assert float(row["Min Value"]) == wide.min()
            assert float(row["Avg Value"]) == wide.mean()
            assert row["Nan Count"] == row["Negative Inf Count"] == "0"


def test_device_id_level(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_DEVICE_ID", "2")
    _, _, dump_dir = run_dumped(tmp_path / "env", {}, steps=1) if (tmp_path / "env").mkdir() \
        is None else None
    assert {e.device_id for e in scan_dump_tree(dump_dir)} == {2}
    (tmp_path / "opt").mkdir()
    _, _, dump_dir = run_dumped(tmp_path / "opt", {"session_device_id": 5}, steps=1)
    assert {e.device_id for e in scan_dump_tree(dump_dir)} == {5}


def _tree(root):
    out = {}
    for base, _, names in os.walk(root):
        for name in names:
            path = os.path.join(base, name)
            out[os.path.relpath(path, root)] = pathlib.Path(path).read_bytes()
    return out


def test_source_date_epoch_makes_dump_trees_byte_identical(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    trees = []
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        _, _, dump_dir = run_dumped(tmp_path / run, {"dump_mode": "all"}, steps=2)
        trees.append(_tree(dump_dir))
    assert trees[0] == trees[1] and len(trees[0]) == 10
    assert all(name.startswith("20231114221320" + os.sep) for name in trees[0])


def test_long_op_names_are_shortened_and_mapped(tmp_path):
    g = tf.Graph()
    long_scope = "s" * 260
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 3], name="x")
        tf.identity(tf.exp(x, name=f"{long_scope}/exp"), name="out")
    _, _, dump_dir = run_dumped(tmp_path, {"mix_compile_mode": False}, steps=1, graph=g,
                                fetch="out:0")
    records = {r.op_name: r for r in (read_dump_file(e.path) for e in scan_dump_tree(dump_dir))}
    assert f"{long_scope}/exp" in records
    directory = os.path.dirname(records[f"{long_scope}/exp"].path)
    mapping = pathlib.Path(directory, "mapping.csv").read_text()
    short = os.path.basename(records[f"{long_scope}/exp"].path)
    assert short.isdigit() and f"{short},Exp.{'s' * 260}_exp." in mapping


# ---------------------------------------------------------------------------- the transformation


def test_nothing_is_added_when_every_dump_option_is_off(tmp_path):
    config = NpuConfig(mix_compile_mode=True, dump_path=str(tmp_path), dump_mode="all",
                       dump_step="0|1", dump_layer="net/mm", dump_data="stats")
    assert DumpSession.from_config(config) is None
    result = npu_adapter.rewrite(small_graph().as_graph_def(), config, fetches=["tail/total:0"],
                                 feeds=[FEED])
    assert instrument_for_dump(result.graph_def, None) is result.graph_def


def test_graph_without_clusters_is_returned_as_it_is(tmp_path):
    g = tf.Graph()
    with g.as_default():
        tf1.placeholder(tf.float32, [1], name="x")
    config = NpuConfig(enable_dump=True, dump_path=str(tmp_path))
    with DumpSession.from_config(config) as dump:
        graph_def = g.as_graph_def()
        assert dump.instrument(graph_def) is graph_def


def test_instrumented_graph_is_deterministic_and_not_instrumented_twice(tmp_path):
    config = NpuConfig(mix_compile_mode=True, enable_dump=True, dump_path=str(tmp_path))
    result = npu_adapter.rewrite(small_graph().as_graph_def(), config,
                                 fetches=["tail/total:0"], feeds=[FEED])
    with DumpSession.from_config(config) as dump:
        once = dump.instrument(result.graph_def)
        with pytest.raises(ValueError, match="already instrumented"):
            dump.instrument(once)
    assert result.graph_def != once
    tokens = [n.attr["token"].s.decode() for f in once.library.function for n in f.node_def
              if n.op == "PyFunc"]
    assert len(tokens) == 2 + 5 and all(t.startswith(f"npu_adapter_dump_{dump.serial}_")
                                         for t in tokens)


def test_close_releases_the_callbacks(tmp_path):
    config = NpuConfig(mix_compile_mode=True, enable_dump=True, dump_path=str(tmp_path))
    result = npu_adapter.rewrite(small_graph().as_graph_def(), config,
                                 fetches=["tail/total:0"], feeds=[FEED])
    dump = DumpSession.from_config(config)
    instrumented = dump.instrument(result.graph_def)
    tokens = [n.attr["token"].s.decode() for f in instrumented.library.function
              for n in f.node_def if n.op == "PyFunc"]
    assert all(tf_compat.registered_py_func(t) is not None for t in tokens)
    dump.close()
    dump.close()
    assert dump.closed and all(tf_compat.registered_py_func(t) is None for t in tokens)


@pytest.mark.parametrize("isolate", [False, True])
def test_dumps_with_inlined_and_with_isolated_cluster_functions(tmp_path, isolate):
    config = tf1.ConfigProto()
    if not isolate:  # make sure Grappler's function optimizer inlines the calls
        config.graph_options.rewrite_options.function_optimization = \
            rewriter_config_pb2.RewriterConfig.ON
        config.graph_options.rewrite_options.min_graph_nodes = -1
    traces = []
    _, _, dump_dir = run_dumped(tmp_path, {"npu_adapter_isolate_clusters": isolate}, steps=2,
                                session_config=config, traces=traces)
    assert len([e for e in scan_dump_tree(dump_dir) if e.step == 1]) == 5
    names = [n.node_name for d in traces[-1].step_stats.dev_stats for n in d.node_stats]
    inlined = [n for n in names if re.match(r"GeOp1_\d/", n)]
    assert bool(inlined) is not isolate, names   # both ways of running a cluster are covered


@pytest.mark.parametrize("control_flow_v2", [False, True])
def test_loop_sinking_counts_each_iteration_as_a_step(tmp_path, control_flow_v2):
    """The lead runs a cluster N times in one while loop per session.run (iterations run one
    after the other, as on the device): each iteration is one dump step."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 3], name="x")
        tf.tanh(x * 0.25, name="y")
    config = NpuConfig(enable_dump=True, dump_path=str(tmp_path), dump_step="1|3-4")
    result = npu_adapter.rewrite(g.as_graph_def(), config, fetches=["y:0"], feeds=[FEED])
    (cluster,) = result.clusters
    with DumpSession.from_config(config, stream=io.StringIO()) as dump:
        instrumented = dump.instrument(result.graph_def)
        run_graph = tf.Graph()
        with run_graph.as_default():
            tf.import_graph_def(instrumented, name="")
            x_in = run_graph.get_tensor_by_name(FEED)
            body_fn = attr_value_pb2.NameAttrList(name=cluster.name)

            def body(i, total):
                (out,) = tf.raw_ops.StatefulPartitionedCall(
                    args=[x_in * tf.cast(i, tf.float32)], Tout=[tf.float32], f=body_fn)
                return i + 1, total + tf.reduce_sum(out)

            was_v2 = tf1.control_flow_v2_enabled()
            (tf1.enable_control_flow_v2 if control_flow_v2 else tf1.disable_control_flow_v2)()
            try:
                loop = tf1.while_loop(lambda i, t: i < 5, body,
                                      [tf.constant(0), tf.constant(0.0)], parallel_iterations=1)
            finally:
                (tf1.enable_control_flow_v2 if was_v2 else tf1.disable_control_flow_v2)()
            kinds = {op.type for op in run_graph.get_operations()}
            assert ("While" in kinds or "StatelessWhile" in kinds) is control_flow_v2
            assert ("Enter" in kinds) is not control_flow_v2
            with tf1.Session() as sess:
                sess.run(loop, {FEED: np.ones([2, 3], np.float32)})
    tanh = {e.step: read_dump_file(e.path) for e in scan_dump_tree(str(tmp_path))
            if e.name.op_type == "Tanh"}
    assert sorted(tanh) == [1, 3, 4]
    for step, record in tanh.items():   # iteration i computed tanh(0.25 * i * x), x = 1
        np.testing.assert_allclose(record.outputs[0].values(),
                                   np.tanh(np.full((2, 3), 0.25 * step)), rtol=1e-6)


def test_gears_count_steps_across_gear_copies(tmp_path):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        tf.reduce_sum(tf.sigmoid(x, name="sig"), axis=1, name="z")
    options = {"mix_compile_mode": False, "input_shape": "x:-1,3", "dynamic_dims": "2;4",
               "dynamic_node_type": 1}
    batches = [2, 4, 2]
    result, _, dump_dir = run_dumped(
        tmp_path, options, steps=3, graph=g, fetch="z:0",
        feed=lambda step: {FEED: np.full((batches[step], 3), step, np.float32)})
    assert result.clusters[0].gears
    sig = {e.step: read_dump_file(e.path) for e in scan_dump_tree(dump_dir)
           if e.name.op_type == "Sigmoid"}
    assert {s: r.outputs[0].shape for s, r in sig.items()} == {0: (2, 3), 1: (4, 3), 2: (2, 3)}
    assert {e.model_name for e in scan_dump_tree(dump_dir)} == {"GeOp1_0"}


def test_progress_lines(tmp_path):
    stream = io.StringIO()
    config = NpuConfig(mix_compile_mode=True, enable_dump=True, dump_path=str(tmp_path))
    result = npu_adapter.rewrite(small_graph().as_graph_def(), config,
                                 fetches=["tail/total:0"], feeds=[FEED])
    dump = DumpSession(DumpSession.from_config(config).settings, stream=stream,
                       progress_interval=1e-9)
    graph_def = dump.instrument(result.graph_def)
    with tf.Graph().as_default():
        tf.import_graph_def(graph_def, name="")
        with tf1.Session() as sess:
            sess.run(result.tensor_map["tail/total:0"], feeds(0))
    dump.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and lines[-1].endswith("(done)")
    assert re.match(r"npu-adapter: data dump: 5 files \(.* B\), step 0 -> .*\(done\)", lines[-1])


def test_clusters_not_run_by_the_cpu_reference_are_left_alone(tmp_path):
    from npu_adapter.config.warnings import reset_warn_once

    reset_warn_once()
    config = NpuConfig(mix_compile_mode=True, enable_dump=True, dump_path=str(tmp_path))
    result = npu_adapter.rewrite(small_graph().as_graph_def(), config,
                                 fetches=["tail/total:0"], feeds=[FEED])
    graph_def = type(result.graph_def)()
    graph_def.CopyFrom(result.graph_def)
    first, second = (n for n in graph_def.node if n.name in ("GeOp1_0", "GeOp1_1"))
    first.attr["_XlaMustCompile"].b = True
    second.op = "GeOp"
    with DumpSession.from_config(config) as dump, pytest.warns(UserWarning) as caught:
        assert dump.instrument(graph_def) == graph_def   # nothing added, nothing inserted
    messages = " ".join(str(w.message) for w in caught)
    assert "GeOp1_0 is compiled by XLA" in messages and "GeOp1_1 is a GeOp node" in messages


def test_only_the_instrumented_functions_change(tmp_path):
    config = NpuConfig(mix_compile_mode=True, enable_dump=True, dump_path=str(tmp_path),
                       dump_layer="net/act")
    result = npu_adapter.rewrite(small_graph().as_graph_def(), config,
                                 fetches=["tail/total:0"], feeds=[FEED])
    with DumpSession.from_config(config) as dump:
        instrumented = dump.instrument(result.graph_def)
    before = {f.signature.name: f for f in result.graph_def.library.function}
    after = {f.signature.name: f for f in instrumented.library.function}
    assert before["GeOp1_1"] == after["GeOp1_1"]          # no op of dump_layer in it
    assert before["GeOp1_0"] != after["GeOp1_0"]
    assert list(result.graph_def.node) == list(instrumented.node)


def test_dump_layer_naming_a_host_op_warns(tmp_path):
    from npu_adapter.config.warnings import reset_warn_once

    reset_warn_once()
    config = NpuConfig(mix_compile_mode=True, enable_dump=True, dump_path=str(tmp_path),
                       dump_layer="host/abs net/mm")
    result = npu_adapter.rewrite(small_graph().as_graph_def(), config,
                                 fetches=["tail/total:0"], feeds=[FEED])
    with DumpSession.from_config(config) as dump, pytest.warns(UserWarning,
                                                               match="'host/abs', which runs "
                                                                     "on the host"):
        dump.instrument(result.graph_def)
