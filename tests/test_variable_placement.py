"""Training graphs are placed as the original places them: the whole step, variables included,
in one cluster (``variable_placement=Device``), and the CPU reference runs it bit for bit like
plain TensorFlow.

The CPU reference runs the whole step in the cluster's function, the variables and (for TF1 ref
variables) the ops on their ref edges included, as the original's GeOp does: the placement says
``executes: npu`` for every device node. The XLA backend, which compiles no state, runs the
variables and their ref-edge ops in the outer graph (``executes: host``).
"""

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import mlp_feeds, mlp_graph
from graph_cases import training_optimizer as _optimizer

import npu_adapter
from npu_adapter import tf_compat
from npu_adapter.config import NpuConfig
from npu_adapter.report.placement import placement_report
from npu_adapter.session import plain_session_class, runner_of
from npu_adapter.testing import assert_rewrite_equivalent

tf1 = tf.compat.v1
PlainSession = plain_session_class()

_RESOURCE_OUTSIDE = "resource_handle_cpu_reference"
_REF_OUTSIDE = "ref_edge_cpu_reference"


def cnn_graph(use_resource, optimizer, batch_norm=False):
    """conv 3x3 → relu [→ batch norm with a moving mean updated before the step, TF1 style:
    ``with control_dependencies(update_ops): minimize``] → max pool → dense → softmax cross
    entropy."""
    g = tf.Graph()
    with g.as_default():
        tf1.set_random_seed(5)
        x = tf1.placeholder(tf.float32, [4, 6, 6, 2], name="x")
        y = tf1.placeholder(tf.int32, [4], name="y")
        with tf1.variable_scope("net", use_resource=use_resource):
            kernel = tf1.get_variable("conv/kernel", [3, 3, 2, 3])
            h = tf.nn.relu(tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME"))
            update_ops = []
            if batch_norm:
                mean, var = tf.nn.moments(h, [0, 1, 2])
                moving = tf1.get_variable("bn/moving_mean", [3], trainable=False,
                                          initializer=tf1.zeros_initializer())
                update_ops.append(tf1.assign_sub(moving, (moving - mean) * 0.1,
                                                 name="bn/update"))
                h = tf.nn.batch_normalization(h, mean, var, None, None, 1e-3)
            h = tf.reshape(tf.nn.max_pool2d(h, 2, 2, "VALID"), [4, 27])
            w = tf1.get_variable("dense/kernel", [27, 3])
            b = tf1.get_variable("dense/bias", [3], initializer=tf1.zeros_initializer())
            logits = tf.matmul(h, w) + b
        loss = tf.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits), name="loss")
        step = tf1.train.get_or_create_global_step()
        with tf.control_dependencies(update_ops):
            _optimizer(optimizer).minimize(loss, global_step=step, name="train")
        tf1.global_variables_initializer()
    return g


def cnn_feeds(seed=0):
    rs = np.random.RandomState(seed)
    return {"x:0": rs.randn(4, 6, 6, 2).astype(np.float32),
            "y:0": np.array([0, 2, 1, 1], np.int32)}


def _variables(graph):
    return {v.op.name for v in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)}


def _is_ref(tensor):
    return tensor.dtype != tensor.dtype.base_dtype  # float32_ref and the like


def _check_one_cluster(res, graph, use_resource):
    """The whole step is one cluster, called once; only the fed placeholders stay on the host;
    the CPU reference runs every device node, variables included, in the cluster's function."""
    del use_resource  # ref and resource variables alike
    host = {n: p["reason"] for n, p in res.placement.items() if p["device"] == "host"}
    placeholders = [op.name for op in graph.get_operations() if op.type == "Placeholder"]
    assert host == dict.fromkeys(placeholders, "graph_input")
    (cluster,) = res.membership()
    assert set(res.membership()[cluster]) == set(res.placement) - set(host)
    assert _variables(graph) <= set(res.membership()[cluster])
    assert all(p["executes"] == p["device"] for p in res.placement.values())
    assert [c.name for c in res.clusters] == [cluster]  # one call
    return cluster


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_mlp_training_step_is_one_cluster_and_runs_bit_for_bit(use_resource, optimizer):
    graph = mlp_graph(use_resource, optimizer)
    res = assert_rewrite_equivalent(graph.as_graph_def(), {}, mlp_feeds(), ["loss:0"],
                                    targets=["train"], init=["init"], steps=4)
    _check_one_cluster(res, graph, use_resource)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_cnn_training_step_is_one_cluster_and_runs_bit_for_bit(use_resource, optimizer):
    graph = cnn_graph(use_resource, optimizer)
    res = assert_rewrite_equivalent(graph.as_graph_def(), {}, cnn_feeds(), ["loss:0"],
                                    targets=["train"], init=["init"], steps=3)
    _check_one_cluster(res, graph, use_resource)


@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_updates_before_the_gradients_keep_the_gradients_in_the_cluster(use_resource):
    """``with control_dependencies(update_ops): minimize`` makes the gradients wait for the
    moving-mean update: the update, the gradients and the step are one cluster, called once."""
    graph = cnn_graph(use_resource, "momentum", batch_norm=True)
    res = assert_rewrite_equivalent(graph.as_graph_def(), {}, cnn_feeds(1), ["loss:0"],
                                    targets=["train"], init=["init"], steps=3)
    cluster = _check_one_cluster(res, graph, use_resource)
    grads = [n for n in res.placement if n.startswith("gradients/")]
    assert grads and all(res.placement[n]["cluster"] == cluster for n in grads)
    updates = [n for n in res.placement if "bn/update" in n or "AssignSub" in n]
    assert updates and all(res.placement[n]["cluster"] == cluster for n in updates)


def test_ref_variables_under_disable_resource_variables():
    """The default of TF1 scripts (``disable_v2_behavior`` disables resource variables):
    ``tf.compat.v1.Variable`` is a ``VariableV2``."""
    graph = tf.Graph()
    was_enabled = tf1.resource_variables_enabled()
    tf1.disable_resource_variables()
    try:
        with graph.as_default():
            x = tf1.placeholder(tf.float32, [3, 2], name="x")
            w = tf1.Variable(np.full([2, 2], 0.5, np.float32), name="w")
            loss = tf.reduce_sum(tf.matmul(x, w) ** 2, name="loss")
            tf1.train.MomentumOptimizer(0.05, 0.9).minimize(loss, name="train")
            tf1.global_variables_initializer()
    finally:
        if was_enabled:
            tf1.enable_resource_variables()
    assert graph.get_operation_by_name("w").type == "VariableV2"
    feeds = {"x:0": np.array([[1.0, 2.0], [-0.5, 0.25], [3.0, -1.0]], np.float32)}
    res = assert_rewrite_equivalent(graph.as_graph_def(), {}, feeds, ["loss:0"],
                                    targets=["train"], init=["init"], steps=4)
    _check_one_cluster(res, graph, use_resource=False)


@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_variable_placement_host_keeps_variables_on_the_host(use_resource):
    graph = mlp_graph(use_resource, "momentum")
    options = {"variable_placement": "Host", "mix_compile_mode": True}  # Host needs mix mode
    res = assert_rewrite_equivalent(graph.as_graph_def(), options, mlp_feeds(2), ["loss:0"],
                                    targets=["train"], init=["init"], steps=3)
    for name in _variables(graph):
        assert res.placement[name]["device"] == "host"
        assert res.placement[name]["reason"] == "variable_placement_host"
    updates = [n for n in res.placement if "/Apply" in n or "ResourceApply" in n]
    assert updates and all(res.placement[n]["device"] == "host" for n in updates)
    assert {res.placement[n]["reason"] for n in updates} == (
        {"resource_edge"} if use_resource else {"ref_edge"})
    assert res.placement["loss"]["device"] == "npu"
    # Nothing the original places on the device runs elsewhere here.
    assert all(p["executes"] == p["device"] for p in res.placement.values())


def test_mix_mode_training_step_with_a_host_op_in_the_middle():
    """Mix mode splits the step at a host op; each cluster reading a variable through a ref
    edge holds it (the original copies it in); the CPU reference runs it bit for bit."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 3], name="x")
        w = tf1.get_variable("w", [3, 3], use_resource=False,
                             initializer=tf1.constant_initializer(0.3))
        h = tf.matmul(x, w, name="mm1")
        with tf_compat.attr_scope({"_without_npu_compile": tf1.AttrValue(b=True)}):
            h = tf.add(h, 1.0, name="middle")
        loss = tf.reduce_sum(tf.matmul(h, w, name="mm2") ** 2, name="loss")
        tf1.train.GradientDescentOptimizer(0.01).minimize(loss, name="train")
        tf1.global_variables_initializer()
    feeds = {"x:0": np.random.RandomState(3).randn(4, 3).astype(np.float32)}
    res = assert_rewrite_equivalent(graph.as_graph_def(), {"mix_compile_mode": True}, feeds,
                                    ["loss:0"], targets=["train"], init=["init"], steps=3)
    membership = res.membership()
    assert len(membership) >= 2
    place = res.placement["w"]
    holders = {place["cluster"], *place.get("copied_into", ())}
    readers = {res.placement[n]["cluster"] for n in ("w/read", "train/update_w/"
                                                     "ApplyGradientDescent")}
    assert readers <= holders
    for name in holders:
        assert "w" in membership[name]


def test_report_shows_the_training_step_on_the_device():
    graph = cnn_graph(False, "adam")
    gd = graph.as_graph_def()
    config = NpuConfig.from_dict({})
    res = npu_adapter.rewrite(gd, config, fetches=["loss:0"], targets=["train"],
                              feeds=["x:0", "y:0"])
    report = placement_report(res, gd, config=config, shapes=False)
    summary = report["summary"]
    assert (summary["host"], summary["clusters"]) == (2, 1)  # the two fed placeholders
    assert summary["npu"] == summary["nodes"] - 2
    assert summary["npu_fraction"] == round(summary["npu"] / summary["nodes"], 4)
    assert summary["npu_executed_on_host"] == 0
    assert not any(r.get("executes_reason") for r in report["nodes"].values())
    (record,) = report["clusters"]
    assert record["size"] == summary["npu"]
    assert record["calls"] == ["GeOp1_0"]
    # The boundary is the original's GeOp: the fed inputs in, the fetched loss out.
    assert [t["tensor"] for t in record["inputs"]] == ["x:0", "y:0"]
    assert [t["tensor"] for t in record["outputs"]] == ["loss:0"]


def test_the_xla_backend_runs_state_outside_its_compiled_clusters():
    """XLA compiles no variable and no ref edge: the report keeps the original's placement and
    says where each of those runs on this backend."""
    graph = cnn_graph(False, "adam")
    gd = graph.as_graph_def()
    config = NpuConfig.from_dict({})
    res = npu_adapter.rewrite(gd, config, fetches=["loss:0"], targets=["train"],
                              feeds=["x:0", "y:0"], backend="xla")
    report = placement_report(res, gd, config=config, shapes=False)
    outside = [n for n, r in report["nodes"].items() if r.get("executes_reason")]
    assert report["summary"]["npu_executed_on_host"] == len(outside) > 0
    for name in outside:
        node = report["nodes"][name]
        assert (node["device"], node["cluster"], node["executes"]) == ("npu", "GeOp1_0", "host")
        assert node["executes_reason"] == (
            _RESOURCE_OUTSIDE if name == "global_step" else _REF_OUTSIDE)
    assert _REF_OUTSIDE in report["reasons"]


@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_npu_session_trains_like_plain_tensorflow(use_resource):
    """Through ``npu_adapter.install()``: build, initialise, run steps, compare."""
    losses = {}
    was_installed = npu_adapter.session.is_installed()
    npu_adapter.install()
    try:
        for cls in (PlainSession, tf1.Session):
            graph = cnn_graph(use_resource, "adam", batch_norm=True)
            with graph.as_default():
                loss = graph.get_tensor_by_name("loss:0")
                train = graph.get_operation_by_name("train")
                init = graph.get_operation_by_name("init")
            feeds = {graph.get_tensor_by_name(k): v for k, v in cnn_feeds(4).items()}
            config = NpuConfig.from_dict({}).to_config_proto()
            with cls(graph=graph, config=config) as sess:
                sess.run(init)
                losses[cls] = [sess.run([loss, train], feeds)[0] for _ in range(4)]
                if cls is not PlainSession:
                    assert npu_adapter.session.is_npu_session(sess)
                    result = runner_of(sess).rewrite_result([loss, train], feeds)
                    assert len(result.membership()) == 1
    finally:
        if not was_installed:
            npu_adapter.uninstall()
    plain, npu = losses[PlainSession], losses[tf1.Session]
    assert [v.tobytes() for v in plain] == [v.tobytes() for v in npu]
    assert plain[-1] < plain[0]


def test_report_html_has_the_executes_column(tmp_path):
    import json
    import pathlib
    import re

    graph = mlp_graph(False, "sgd")
    dumped = npu_adapter.dump_graphs(graph.as_graph_def(), {}, str(tmp_path),
                                     fetches=["loss:0"], targets=["train"],
                                     feeds=["x:0", "y:0"], backend="xla", tensorboard=False,
                                     dot=False, model_name="mlp")
    html = pathlib.Path(dumped.path("report.html")).read_text(encoding="utf-8")
    assert "<th title=\"where the node runs on this backend\">Executes</th>" in html
    assert "Device nodes run on the host by this backend" in html
    blob = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html,
                     re.S).group(1)
    data = json.loads(blob)
    rows = {row[0]: row for row in data["nodes"]}
    assert data["reasons"][rows["mlp/w1"][5]] == _REF_OUTSIDE
    assert rows["loss"][5] == -1  # runs in the cluster function
    report = json.loads(pathlib.Path(dumped.path("placement.json")).read_text(encoding="utf-8"))
    assert report["nodes"]["mlp/w1"]["executes"] == "host"
    assert report["nodes"]["mlp/w1"]["device"] == "npu"
