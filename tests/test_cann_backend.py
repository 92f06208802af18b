"""The cann backend end to end through the fakes: plain TensorFlow's numbers.

The fake ``atc`` packs the frozen cluster it was given into the ``.om``; the fake pyACL runs
it with TensorFlow, so every value computed "on the device" can be compared with a plain
session. Covered: the online-inference classifier sample, mixed compilation, gears (exact and
pad_up), the small corpus models (inference and training), what stays on the host (state, v1
control flow) and why, lowering errors, determinism, dump configuration, runtime statistics.
"""

import importlib
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import function_pb2, types_pb2

import npu_adapter
from npu_adapter.backends import get_backend
from npu_adapter.backends.cann import CannLoweringError, runtimes, shutdown
from npu_adapter.backends.cann.freeze import freeze_cluster
from npu_adapter.backends.cann.lowering import WRAPPER_SUFFIX
from npu_adapter.graph.serialize import to_bytes
from npu_adapter.session import NpuSession, plain_session_class, runner_of
from npu_adapter.testing.equivalence import assert_rewrite_equivalent
from npu_adapter.vocabulary import CLUSTER_BODY_ATTR, CLUSTER_INPUTS_ATTR, CLUSTER_OUTPUTS_ATTR

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tf1 = tf.compat.v1


def _example(name):
    sys.path.insert(0, os.path.join(REPO, "examples"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def _with_backend(config, **options):
    opt = next(o for o in config.graph_options.rewrite_options.custom_optimizers
               if o.name == "NpuOptimizer")
    opt.parameter_map["npu_adapter_backend"].s = b"cann"
    for key, value in options.items():
        if isinstance(value, str):
            opt.parameter_map[key].s = value.encode()
        else:
            opt.parameter_map[key].i = value
    return config


def _same(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert np.asarray(a).dtype == np.asarray(e).dtype
        np.testing.assert_array_equal(a, e)


def test_online_inference_classifier(cann_fakes, tmp_path):
    """The online-inference sample (frozen classifier, force_fp16, batches padded)."""
    sample = _example("infer_from_pb")
    path = str(tmp_path / "cnn.pb")
    images, labels = sample.make_model(path)
    images, labels = images[:10], labels[:10]
    npu_logits, top1, _ = sample.run(path, 4, _with_backend(sample.npu_config()), images, labels)
    plain_logits, plain_top1, _ = sample.run(
        path, 4, sample.without_npu_optimizer(sample.npu_config()), images, labels)
    _same(list(npu_logits), list(plain_logits))
    assert top1 == plain_top1
    (call,) = cann_fakes.atc_calls()  # one model for the three same-shape batches
    flags = cann_fakes.atc_flags()
    assert flags["precision_mode"] == "force_fp16"
    assert flags["input_shape"] == "input_data:4,32,32,3"
    assert flags["soc_version"] == "Ascend310P3"
    assert call["status"] == 0
    (runtime,) = runtimes()
    stats = runtime.stats()
    assert stats.compiles == 1 and stats.runs == 3
    (status,) = stats.clusters.values()
    assert status["status"] == "ready" and status["runs"] == 3


def test_mix_compile_model(cann_fakes):
    sample = _example("mix_compile")
    npu_scores, layout = sample.run(_with_backend(sample.config()))
    plain_scores, _ = sample.run(sample.without_npu_optimizer(sample.config()))
    _same([npu_scores], [plain_scores])
    assert len(layout) == 2  # the conv body and the head, string work on the host
    # One model per cluster of the run (the variable initialisers are a cluster of their own).
    assert len(cann_fakes.atc_calls()) == len(layout) + 1


def _dense_graph(bias=0.25):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="w")
        y = tf.nn.relu(tf.matmul(x, w) + bias, name="y")
        tf.reduce_sum(y, axis=1, name="z")
    return graph


def _gear_config(policy="exact", **extra):
    config = tf1.ConfigProto()
    opt = config.graph_options.rewrite_options.custom_optimizers.add()
    opt.name = "NpuOptimizer"
    options = {"npu_adapter_backend": "cann", "input_shape": "x:-1,4", "dynamic_dims": "1;2;4",
               "dynamic_node_type": 1, "npu_adapter_gear_policy": policy, **extra}
    for key, value in options.items():
        if isinstance(value, str):
            opt.parameter_map[key].s = value.encode()
        else:
            opt.parameter_map[key].i = value
    return config


def _plain(graph, fetches, feeds):
    with plain_session_class()(graph=graph) as sess:
        return sess.run(fetches, feeds)


def test_gear_model_pad_up(cann_fakes):
    graph = _dense_graph()
    config = _gear_config("pad_up", npu_adapter_gear_unpad="y:0:0;z:0:0")
    with NpuSession(graph=graph, config=config) as sess:
        for batch in (3, 1, 4):
            value = np.random.RandomState(batch).rand(batch, 4).astype(np.float32)
            out = sess.run(["y:0", "z:0"], {"x:0": value})
            assert out[0].shape == (batch, 3) and out[1].shape == (batch,)
            _same(out, _plain(graph, ["y:0", "z:0"], {"x:0": value}))
    flags = cann_fakes.atc_flags()
    assert flags["input_shape"] == "x:-1,4" and flags["dynamic_dims"] == "1;2;4"
    assert flags["input_format"] == "ND"
    dims = [args[3]["dims"] for name, args in cann_fakes.acl.fake.calls
            if name == "acl.mdl.set_input_dynamic_dims"]
    assert dims == [[4, 4], [1, 4], [4, 4]]  # 3 rows padded up to the 4-row gear


@pytest.mark.parametrize("name", ["small_cnn", "small_mlp", "bert_tiny", "lenet_train",
                                  "lenet_train_resource"])
@pytest.mark.parametrize("mix", [False, True])
def test_corpus_models(cann_fakes, name, mix):
    from bench import models

    spec = models.get_model(name)
    result = assert_rewrite_equivalent(
        spec.graph_def, {"mix_compile_mode": mix}, spec.feeds, spec.fetches,
        targets=spec.targets, init=[spec.init_op] if spec.init_op else [],
        steps=2 if spec.targets else 1, backend="cann")
    assert result.clusters and cann_fakes.atc_calls()
    assert all(c.op == "StatefulPartitionedCall" for c in result.clusters)
    reasons = {p["reason"] for p in result.placement.values() if p["device"] == "host"}
    if spec.kind == "training":
        assert "state_owner" in reasons  # variables stay with the session


def test_corpus_lstm_with_v1_loop_on_the_host(cann_fakes):
    """The parts before and after a host v1 while loop are never one cluster (that would be a
    cycle through the loop, which the CPU reference's inlining would hide)."""
    from bench import models

    spec = models.get_model("lstm")
    assert_rewrite_equivalent(spec.graph_def, {}, spec.feeds, spec.fetches, backend="cann")


def test_v1_control_flow_stays_on_the_host(cann_fakes):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [2, 3], name="x")
        tf1.disable_control_flow_v2()
        try:
            looped = tf1.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 1.5),
                                    [tf.constant(0), x])[1]
        finally:
            tf1.enable_control_flow_v2()
        w = tf.constant(np.ones((3, 2), np.float32), name="w")
        tf.nn.relu(tf.matmul(looped, w) - 2.0, name="y")
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = assert_rewrite_equivalent(graph.as_graph_def(), {}, {"x:0": value}, ["y:0"],
                                       backend="cann")
    reasons = {name: p["reason"] for name, p in result.placement.items()}
    assert reasons["while/Merge"] == "v1_control_flow"
    assert reasons["while/mul"] == "host_while_frame"
    assert result.placement["MatMul"]["device"] == "npu"


def _cluster_node(fdef, inputs, outputs):
    node = tf1.NodeDef(name="GeOp1_0", op="GeOp")
    node.attr["function"].func.name = fdef.signature.name
    node.attr[CLUSTER_INPUTS_ATTR].list.s.extend(t.encode() for t in inputs)
    node.attr[CLUSTER_OUTPUTS_ATTR].list.s.extend(t.encode() for t in outputs)
    return node


def _function(name, args, rets, body):
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = name
    for arg, dtype in args:
        fdef.signature.input_arg.add(name=arg, type=dtype)
    for ret, dtype, source in rets:
        fdef.signature.output_arg.add(name=ret, type=dtype)
        fdef.ret[ret] = source
    for node in body:
        fdef.node_def.add().CopyFrom(node)
    return fdef


def test_lowering_refuses_state_and_bad_dtypes():
    read = tf1.NodeDef(name="read", op="ReadVariableOp", input=["h"])
    read.attr["dtype"].type = types_pb2.DT_FLOAT
    fdef = _function("GeOp1_0", [("h", types_pb2.DT_RESOURCE)],
                     [("out", types_pb2.DT_FLOAT, "read:value:0")], [read])
    with pytest.raises(CannLoweringError, match="GeOp1_0.*'v:0' is a variable handle"):
        freeze_cluster(_cluster_node(fdef, ["v:0"], ["read:0"]), {"GeOp1_0": fdef})
    handle = tf1.NodeDef(name="var", op="VarHandleOp")
    handle.attr["dtype"].type = types_pb2.DT_FLOAT
    handle.attr["shape"].shape.SetInParent()
    fdef = _function("GeOp1_0", [], [("out", types_pb2.DT_FLOAT, "read:value:0")],
                     [handle, tf1.NodeDef(name="read", op="ReadVariableOp",
                                          input=["var:resource:0"],
                                          attr={"dtype": read.attr["dtype"]})])
    with pytest.raises(CannLoweringError, match="holds state \\(VarHandleOp node 'var'\\)"):
        freeze_cluster(_cluster_node(fdef, [], ["read:0"]), {"GeOp1_0": fdef})
    switch = tf1.NodeDef(name="sw", op="Switch", input=["a", "p"])
    switch.attr["T"].type = types_pb2.DT_FLOAT
    fdef = _function("GeOp1_0", [("a", types_pb2.DT_FLOAT), ("p", types_pb2.DT_BOOL)],
                     [("out", types_pb2.DT_FLOAT, "sw:output_true:0")], [switch])
    with pytest.raises(CannLoweringError, match="TF v1 control flow \\(Switch"):
        freeze_cluster(_cluster_node(fdef, ["a:0", "p:0"], ["sw:1"]), {"GeOp1_0": fdef})
    ident = tf1.NodeDef(name="i", op="Identity", input=["a"])
    ident.attr["T"].type = types_pb2.DT_DOUBLE
    fdef = _function("GeOp1_0", [("a", types_pb2.DT_DOUBLE)],
                     [("out", types_pb2.DT_DOUBLE, "i:output:0")], [ident])
    with pytest.raises(CannLoweringError, match="'a:0' has dtype float64.*ATC does not accept"):
        freeze_cluster(_cluster_node(fdef, ["a:0"], ["i:0"]), {"GeOp1_0": fdef})


def test_rewrite_is_deterministic_and_names_the_body(cann_fakes):
    graph_def = _dense_graph().as_graph_def()
    first = npu_adapter.rewrite(graph_def, {}, fetches=["z:0"], feeds=["x:0"], backend="cann")
    second = npu_adapter.rewrite(graph_def, {}, fetches=["z:0"], feeds=["x:0"], backend="cann")
    assert to_bytes(first.graph_def) == to_bytes(second.graph_def)
    (cluster,) = first.clusters
    assert set(cluster.nodes) == {"w", "MatMul", "add/y", "add", "y", "z/reduction_indices",
                                  "z"}
    node = next(n for n in first.graph_def.node if n.name == cluster.name)
    assert node.op == "StatefulPartitionedCall"
    assert node.attr["f"].func.name == cluster.name + WRAPPER_SUFFIX
    assert node.attr[CLUSTER_BODY_ATTR].s.decode() == cluster.name
    wrapper = next(f for f in first.graph_def.library.function
                   if f.signature.name == cluster.name + WRAPPER_SUFFIX)
    (call,) = wrapper.node_def
    assert call.op == "PyFunc" and call.attr["token"].s.startswith(b"npu_adapter_cann_")
    # Another option that changes compilation gives another token.
    third = npu_adapter.rewrite(graph_def, {"precision_mode": "force_fp32"}, fetches=["z:0"],
                                feeds=["x:0"], backend="cann")
    tokens = {f.node_def[0].attr["token"].s for r in (first, third)
              for f in r.graph_def.library.function if f.signature.name.endswith(WRAPPER_SUFFIX)}
    assert len(tokens) == 2


def test_backend_hooks(cann_fakes):
    backend = get_backend("cann")
    ok, detail = backend.available()
    assert ok and cann_fakes.atc in detail
    assert backend.keeps_state_on_host and backend.hoist_constants_bytes is None
    assert backend.supports_node(tf1.NodeDef(op="Placeholder"), None) == (False, "graph_input")
    assert backend.supports_node(tf1.NodeDef(op="Enter"), None) == (False, "v1_control_flow")
    assert backend.supports_node(tf1.NodeDef(op="VariableV2"), None)[1] == "state_owner"
    assert backend.supports_node(tf1.NodeDef(op="MatMul"), None) == (True, "supported")


def test_compile_failure_reaches_the_run_and_the_stats(cann_fakes, monkeypatch):
    monkeypatch.setenv("FAKE_ATC_FAIL", "internal")
    graph = _dense_graph()
    config = _with_backend(_gear_config())
    with pytest.raises(tf.errors.OpError, match="AtcError.*E19999: Internal Error"), \
            NpuSession(graph=graph, config=config) as sess:
        sess.run("z:0", {"x:0": np.ones((2, 4), np.float32)})
    (runtime,) = runtimes()
    (status,) = runtime.stats().clusters.values()
    assert status["status"] == "failed" and "E19999" in status["last_error"]
    assert cann_fakes.acl.fake.leaks() == {}  # nothing was loaded


def test_missing_soc_fails_at_compile_time_with_a_named_error(cann_fakes, monkeypatch):
    monkeypatch.delenv("SOC_VERSION")
    # A cluster of its own: the models compiled by other tests stay valid in this process.
    graph = _dense_graph(bias=0.125)
    config = _with_backend(_gear_config())
    with NpuSession(graph=graph, config=config) as sess:  # rewriting needs no SoC
        result = runner_of(sess).rewrite_result("z:0", {"x:0": np.ones((2, 4), np.float32)})
        assert len(result.clusters) == 1
        with pytest.raises(tf.errors.OpError, match="soc_config.*SOC_VERSION"):
            sess.run("z:0", {"x:0": np.ones((2, 4), np.float32)})


def test_dump_goes_through_acl_json(cann_fakes, tmp_path):
    dump_dir = tmp_path / "dump"
    dump_dir.mkdir()
    graph = _dense_graph()
    config = _gear_config(dump_path=str(dump_dir), dump_step="0|2-3",
                          dump_mode="all", dump_layer="MatMul y")
    opt = config.graph_options.rewrite_options.custom_optimizers[0]
    opt.parameter_map["enable_dump"].b = True
    with NpuSession(graph=graph, config=config) as sess:
        for _ in range(2):
            sess.run("z:0", {"x:0": np.ones((2, 4), np.float32)})
    acl = cann_fakes.acl
    names = acl.fake.call_names()
    assert names.index("acl.mdl.init_dump") < names.index("acl.mdl.set_dump") < \
        names.index("acl.mdl.load_from_file")
    (section,) = acl.fake.dump_configs
    (entry,) = section["dump_list"]
    assert section["dump_path"] == os.path.realpath(dump_dir)
    assert section["dump_mode"] == "all" and section["dump_step"] == "0|2-3"
    assert section["dump_data"] == "tensor" and entry["layer"] == ["MatMul", "y"]
    (path,) = [args[0] for name, args in acl.fake.calls if name == "acl.mdl.load_from_file"]
    assert entry["model_name"] == os.path.splitext(os.path.basename(path))[0]
    assert entry["model_name"].startswith("GeOp")
    assert [e["step"] for e in acl.fake.dump_events] == [0, 1]
    shutdown()
    assert "acl.mdl.finalize_dump" in acl.fake.call_names()
    assert acl.fake.leaks() == {}
    with open(tmp_path / "record.json", "w") as f:  # the section is JSON-serialisable as is
        json.dump(section, f)
