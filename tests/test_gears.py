"""Gears (dynamic dims), set_graph_exec_config, lazy_recompile and keep_dtype (issue 5)."""

import warnings

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from npu_adapter import rewrite, tf_compat
from npu_adapter.config import NpuConfig
from npu_adapter.errors import NpuConfigError, RewriteError
from npu_adapter.pipeline.gears import GearTable
from npu_adapter.session import LAZY_CACHE_SIZE, NpuSession, plain_session_class, runner_of
from npu_adapter.testing import assert_rewrite_equivalent

tf1 = tf.compat.v1

SEED_INPUT_SHAPE = "data:1,1,40,-1;label:1,-1;mask:-1,-1"
SEED_DYNAMIC_DIMS = "20,20,1,1;40,40,2,2;80,60,4,4"
SEED_GEARS = [((1, 1, 40, 20), (1, 20), (1, 1)),
              ((1, 1, 40, 40), (1, 40), (2, 2)),
              ((1, 1, 40, 80), (1, 60), (4, 4))]


def seed_graph():
    """CANN's TF online inference guide, dynamic dims example: three placeholder inputs
    data/label/mask with the documented shapes."""
    g = tf.Graph()
    with g.as_default():
        data = tf1.placeholder(tf.float32, [1, 1, 40, None], name="data")
        label = tf1.placeholder(tf.float32, [1, None], name="label")
        mask = tf1.placeholder(tf.float32, [None, None], name="mask")
        tf.reduce_sum(tf.nn.relu(data - 0.5), axis=2, name="data_out")
        tf.multiply(label, 3.0, name="label_out")
        tf.matmul(mask, mask, name="mask_out")
    return g.as_graph_def()


def seed_feeds(shapes, seed=0):
    rs = np.random.RandomState(seed)
    return {f"{name}:0": rs.rand(*shape).astype(np.float32)
            for name, shape in zip(("data", "label", "mask"), shapes)}


SEED_CONFIG = {"input_shape": SEED_INPUT_SHAPE, "dynamic_dims": SEED_DYNAMIC_DIMS,
               "dynamic_node_type": 1}
SEED_FETCHES = ["data_out:0", "label_out:0", "mask_out:0"]


@pytest.mark.parametrize("gear", range(3))
def test_guide_example_runs_every_gear_like_plain_tensorflow(gear):
    res = assert_rewrite_equivalent(seed_graph(), SEED_CONFIG, seed_feeds(SEED_GEARS[gear]),
                                    SEED_FETCHES)
    (cluster,) = res.clusters
    assert [tuple(shape for _, shape in g) for g in cluster.gears] == SEED_GEARS
    assert [name for name, _ in cluster.gears[0]] == ["data:0", "label:0", "mask:0"]


def test_guide_example_shape_in_no_gear_is_a_named_error():
    shapes = ((1, 1, 40, 30), (1, 30), (1, 1))
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        assert_rewrite_equivalent(seed_graph(), SEED_CONFIG, seed_feeds(shapes), SEED_FETCHES)
    message = str(info.value)
    assert "match no gear" in message
    assert "input data:0 has shape] [1 1 40 30]" in message
    assert "gear 2: data:0:1,1,40,80;label:0:1,60;mask:0:4,4" in message


def test_gears_are_deterministic():
    a = rewrite(seed_graph(), SEED_CONFIG, fetches=SEED_FETCHES).graph_def
    b = rewrite(seed_graph(), SEED_CONFIG, fetches=SEED_FETCHES).graph_def
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


def test_input_shape_naming_a_missing_input_is_an_error():
    config = dict(SEED_CONFIG, input_shape="data:1,1,40,-1;label:1,-1;nope:-1,-1")
    with pytest.raises(RewriteError, match="'nope'.*placeholders"):
        rewrite(seed_graph(), config, fetches=SEED_FETCHES)


def test_dims_trio_with_mix_compile_mode_is_rejected():
    with pytest.raises(NpuConfigError, match="mix compile"):
        NpuConfig.from_dict(dict(SEED_CONFIG, mix_compile_mode=True))


@pytest.mark.parametrize("option, value", [
    ("input_shape", "data:1,a"),
    ("input_shape", "data"),
    ("input_shape", ":1,2"),
    ("input_shape", "data:1,,2"),
    ("input_shape", "data:1,-2"),
    ("input_shape", "b:-1;a:-1"),          # not in alphabetical order
    ("dynamic_dims", "1,a"),
    ("dynamic_dims", "20"),                # a single gear
    ("dynamic_dims", "20;30,40"),          # values per gear differ from the -1 count
    ("dynamic_dims", "0;1"),               # dims must be positive
    ("dynamic_dims", ";".join(str(k) for k in range(1, 102))),  # more than 100 gears
    ("dynamic_node_type", 2),
])
def test_malformed_dims_options_are_named_errors(option, value):
    base = {"input_shape": "data:-1", "dynamic_dims": "1;2", "dynamic_node_type": 1}
    base[option] = value
    with pytest.raises(NpuConfigError) as info:
        NpuConfig.from_dict(base)
    assert info.value.option in (option, "input_shape + dynamic_dims",
                                 "dynamic_dims + input_shape") or option in str(info.value)


@pytest.mark.parametrize("value", ["foo:[1]", "data:[1~2", "data:[a]", "data:[1];data:[2]",
                                   "data:[1];getnext:[2];data:[3]", "data[1]", "data:[3~1]"])
def test_malformed_shape_ranges_are_named_errors(value):
    with pytest.raises(NpuConfigError, match="dynamic_inputs_shape_range"):
        NpuConfig.from_dict({"dynamic_input": True, "dynamic_inputs_shape_range": value})


# --------------------------------------------------------------------------- subgraph gears
def subgraph_scope_graph(extra_whole_graph=False):
    """The second part of that guide's example, with a TF computation in place of the ONNX op."""
    g = tf.Graph()
    with g.as_default():
        ori = tf1.placeholder(tf.uint8, [None, None, 3], name="ori_image")
        pre = tf.identity(ori, name="pre")
        with tf_compat.attr_scope({"_subgraph_multi_dims_index": attr_value_pb2.AttrValue(i=0)}):
            image = tf.expand_dims(pre, axis=0)
            tf_compat.set_op_attr(image.op, "_subgraph_multi_dims_input_shape",
                                  attr_value_pb2.AttrValue(s=b"0:-1,-1,3"))
            tf_compat.set_op_attr(image.op, "_subgraph_multi_dims_input_dims",
                                  attr_value_pb2.AttrValue(s=b"48,48;96,96;192,192"))
            fp32 = tf.cast(image, tf.float32)
            nchw = tf.transpose(fp32, [0, 3, 1, 2])
            tf.reduce_mean(tf.nn.sigmoid(nchw / 255.0), axis=[1], name="score")
    return g.as_graph_def()


@pytest.mark.parametrize("side", [48, 96, 192])
def test_subgraph_scope_gears_run_like_plain_tensorflow(side):
    feeds = {"ori_image:0": (np.random.RandomState(side).rand(side, side, 3) * 255)
             .astype(np.uint8)}
    res = assert_rewrite_equivalent(subgraph_scope_graph(), {}, feeds, ["score:0"])
    scoped = [c for c in res.clusters if c.gears]
    assert len(scoped) == 1
    assert [g[0][1] for g in scoped[0].gears] == [(48, 48, 3), (96, 96, 3), (192, 192, 3)]


def test_subgraph_scope_shape_in_no_gear_is_a_named_error():
    feeds = {"ori_image:0": np.zeros((50, 48, 3), np.uint8)}
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"input pre:0 has shape\] \[50 48 3\]"):
        assert_rewrite_equivalent(subgraph_scope_graph(), {}, feeds, ["score:0"])


def test_whole_graph_gears_win_over_subgraph_scopes():
    gd = subgraph_scope_graph()
    config = {"input_shape": "ori_image:-1,-1,3", "dynamic_dims": "48,48;96,96",
              "dynamic_node_type": 1}
    with pytest.warns(UserWarning, match="whole-graph gears win"):
        res = rewrite(gd, config, fetches=["score:0"])
    gears = [c.gears for c in res.clusters if c.gears]
    assert gears and all(g[0][0][0] == "ori_image:0" for g in gears)


# --------------------------------------------------------------------------- pad_up
def mlp_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 16], name="x")
        rs = np.random.RandomState(4)
        h = tf.nn.relu(tf.matmul(x, rs.randn(16, 32).astype(np.float32)) + 0.1)
        tf.nn.softmax(tf.matmul(h, rs.randn(32, 5).astype(np.float32)), name="probs")
    return g.as_graph_def()


def cnn_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 12, 12, 3], name="images")
        rs = np.random.RandomState(5)
        y = tf.nn.conv2d(x, rs.randn(3, 3, 3, 8).astype(np.float32), 1, "SAME")
        y = tf.nn.max_pool2d(tf.nn.relu(y), 2, 2, "VALID")
        y = tf.reshape(y, [-1, 6 * 6 * 8])
        tf.matmul(y, rs.randn(6 * 6 * 8, 4).astype(np.float32), name="logits")
    return g.as_graph_def()


PAD_UP = {"npu_adapter_gear_policy": "pad_up", "dynamic_node_type": 1}


@pytest.mark.parametrize("rows", [1, 3, 8, 13, 16])
def test_pad_up_mlp_equals_unpadded_plain_tensorflow(rows):
    config = dict(PAD_UP, input_shape="x:-1,16", dynamic_dims="4;8;16",
                  npu_adapter_gear_unpad="probs:0:0")
    feeds = {"x:0": np.random.RandomState(rows).randn(rows, 16).astype(np.float32)}
    # Rows are independent, so padding changes nothing for the real rows — up to rounding: the
    # CPU GEMM picks its kernel and blocking from the row count (1-ulp differences).
    assert_rewrite_equivalent(mlp_graph(), config, feeds, ["probs:0"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("rows", [2, 5])
def test_pad_up_cnn_with_a_pad_value(rows):
    config = dict(PAD_UP, input_shape="images:-1,12,12,3", dynamic_dims="4;8",
                  npu_adapter_gear_pad_values="images:-7.5", npu_adapter_gear_unpad="logits:0:0")
    feeds = {"images:0": np.random.RandomState(rows).rand(rows, 12, 12, 3).astype(np.float32)}
    assert_rewrite_equivalent(cnn_graph(), config, feeds, ["logits:0"], rtol=1e-5, atol=1e-5)


def test_pad_up_without_unpad_returns_the_padded_rows():
    config = dict(PAD_UP, input_shape="x:-1,16", dynamic_dims="4;8")
    res = rewrite(mlp_graph(), config, fetches=["probs:0"], feeds=["x:0"])
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(res.graph_def, name="")
    with plain_session_class()(graph=g) as sess:
        out = sess.run(res.tensor_map["probs:0"], {"x:0": np.ones((3, 16), np.float32)})
    assert out.shape == (4, 5)


def test_pad_up_waste_is_reported_by_the_session():
    config = NpuConfig.from_dict(dict(PAD_UP, input_shape="x:-1,16", dynamic_dims="4;8;16",
                                      npu_adapter_gear_unpad="probs:0:0")).to_config_proto()
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(mlp_graph(), name="")
    with NpuSession(graph=g, config=config) as sess:
        for rows in (3, 4, 9):
            sess.run("probs:0", {"x:0": np.zeros((rows, 16), np.float32)})
        stats = runner_of(sess).gear_stats()
    (st,) = stats.values()
    assert st["runs"] == 3 and st["gear_counts"] == {0: 2, 2: 1}
    assert st["actual_elements"] == (3 + 4 + 9) * 16
    assert st["padded_elements"] == (4 + 4 + 16) * 16
    assert st["waste_ratio"] == pytest.approx(1 - 16 / 24)


def test_gear_table_selection_reference():
    table = GearTable(("x:0",), ((-1, 16),), (((4, 16),), ((8, 16),), ((16, 16),)))
    assert table.select([(8, 16)]) == 1
    assert table.select([(5, 16)]) is None
    assert table.select([(5, 16)], "pad_up") == 1
    assert table.select([(5, 15)], "pad_up") is None  # static dims must match
    assert table.select([(17, 16)], "pad_up") is None


# --------------------------------------------------------------------------- graph exec config
def _exec_config(op, dynamic_input, mode="dynamic_execute", shape_range=""):
    attrs = {"_graph_dynamic_input": attr_value_pb2.AttrValue(b=dynamic_input),
             "_graph_dynamic_graph_execute_mode": attr_value_pb2.AttrValue(s=mode.encode()),
             "_graph_dynamic_inputs_shape_range":
                 attr_value_pb2.AttrValue(s=shape_range.encode()),
             "_is_train_graph": attr_value_pb2.AttrValue(b=False)}
    for name, value in attrs.items():
        tf_compat.set_op_attr(op, name, value)


def dynamic_graph(graph_level=None):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        out = tf.nn.relu(x * 2.0, name="out")
        if graph_level is not None:
            _exec_config(out.op, *graph_level)
    return g.as_graph_def()


def geop_attrs(res):
    node = next(n for n in res.graph_def.node if n.name == res.clusters[0].name)
    return {k: v.s.decode() for k, v in node.attr.items() if k.startswith("_")}


def test_graph_level_config_overrides_the_session_even_when_false():
    session = {"dynamic_input": True, "dynamic_graph_execute_mode": "dynamic_execute",
               "dynamic_inputs_shape_range": "data:[1~8,4]"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = rewrite(dynamic_graph((False,)), session, fetches=["out:0"])
        assert geop_attrs(res)["_dynamic_input"] == "0"
        assert "_data_inputs_shape_range" not in geop_attrs(res)
        res = rewrite(dynamic_graph(), session, fetches=["out:0"])
    attrs = geop_attrs(res)
    assert attrs["_dynamic_input"] == "1" and attrs["_data_inputs_shape_range"] == "[1~8,4]"


def test_shape_range_routing_without_dataset():
    gd = dynamic_graph((True, "dynamic_execute", "getnext:[2~3,4~5];data:[2,3],[1~2,3~4]"))
    attrs = geop_attrs(rewrite(gd, {}, fetches=["out:0"]))
    assert attrs["_data_inputs_shape_range"] == "[2~3,4~5],[2,3],[1~2,3~4]"
    assert attrs["_dynamic_graph_execute_mode"] == "dynamic_execute"


def test_lazy_recompile_with_loop_sinking_is_rejected():
    gd = dynamic_graph((True, "lazy_recompile"))
    with pytest.raises(RewriteError, match="lazy_recompile mode. Current is:2"):
        rewrite(gd, {"iterations_per_loop": 2}, fetches=["out:0"])


def test_dynamic_execute_cluster_runs_any_shape():
    gd = dynamic_graph((True, "dynamic_execute", ""))
    for rows in (1, 5, 9):
        assert_rewrite_equivalent(gd, {}, {"x:0": np.ones((rows, 4), np.float32)}, ["out:0"])


def test_lazy_recompile_specialises_per_shape_with_lfu_eviction():
    gd = dynamic_graph((True, "lazy_recompile"))
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    config = NpuConfig.from_dict({}).to_config_proto()
    with plain_session_class()(graph=g) as plain:
        def expected(rows):
            return plain.run("out:0", {"x:0": np.full((rows, 4), rows, np.float32)})
        with NpuSession(graph=g, config=config) as sess:
            for rows in [1, 1, 2, 1] + list(range(3, 3 + LAZY_CACHE_SIZE)) + [2, 1]:
                got = sess.run("out:0", {"x:0": np.full((rows, 4), rows, np.float32)})
                np.testing.assert_array_equal(got, expected(rows))
            stats = runner_of(sess).lazy_stats()
    # Shapes 1 (used 3 times) and 2 (once), then 10 new ones: the cache holds 10, so the 11th and
    # 12th evict the least frequently used, oldest first (2, then 3). 2 comes back: rebuilt (a
    # re-specialisation, evicting 4); 1 never left: a hit.
    assert stats["specializations"] == 2 + LAZY_CACHE_SIZE
    assert stats["evictions"] == 3
    assert stats["respecializations"] == 1
    assert stats["hits"] == 3


# --------------------------------------------------------------------------- keep_dtype
def test_keep_dtype_is_carried_into_the_cluster_and_reported():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [4], name="x")
        y = tf.nn.softmax(x * 2.0, name="soft")
        tf_compat.set_op_attr(y.op, "_keep_dtype", attr_value_pb2.AttrValue(i=1))
        tf.identity(y, name="out")
    res = rewrite(g.as_graph_def(), {}, fetches=["out:0"])
    assert res.placement["soft"]["keep_dtype"] is True
    assert "keep_dtype" not in res.placement["out"]
    fdef = next(f for f in res.graph_def.library.function if f.signature.name == "GeOp1_0")
    assert next(n for n in fdef.node_def if n.name == "soft").attr["_keep_dtype"].i == 1


def test_session_calls_the_chosen_gear_directly():
    """With fed inputs and the exact policy the session picks the gear from the fed shapes (as
    the original GeOp kernel does on the host) and runs that gear's copy of the cluster,
    skipping the in-graph dispatcher (no ``Case`` runs). A shape in no gear still gets the
    dispatcher's named error."""
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(seed_graph(), name="")
    config = NpuConfig.from_dict(SEED_CONFIG).to_config_proto()
    plain = plain_session_class()(graph=g)
    with NpuSession(graph=g, config=config) as sess:
        for gear in (0, 1, 2, 1, 0):
            feeds = seed_feeds(SEED_GEARS[gear], seed=gear)
            got = sess.run(SEED_FETCHES, feeds)
            want = plain.run(SEED_FETCHES, feeds)
            assert [a.tobytes() for a in got] == [b.tobytes() for b in want]
        traced = tf1.RunMetadata()
        sess.run(SEED_FETCHES, seed_feeds(SEED_GEARS[2], seed=2),
                 options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                 run_metadata=traced)
        labels = [n.timeline_label for d in traced.step_stats.dev_stats for n in d.node_stats]
        assert any(label.startswith("GeOp1_0 = ") for label in labels)
        assert not any("= Case(" in label for label in labels)
        assert not any(op.type == "StatefulPartitionedCall" for op in g.get_operations())
        with pytest.raises(tf.errors.InvalidArgumentError, match="match no gear"):
            sess.run(SEED_FETCHES, seed_feeds(((1, 1, 40, 30), (1, 30), (1, 1))))
        assert runner_of(sess).gear_stats()["GeOp1_0"]["gear_counts"] == {0: 2, 1: 2, 2: 2}
    plain.close()


def test_repeated_shapes_are_counted_each_run():
    """Every run is counted, in the right gear, whether its fed shapes are new or repeat an
    earlier step's; a shape in no gear is refused each time."""
    config = NpuConfig.from_dict(dict(PAD_UP, input_shape="x:-1,16", dynamic_dims="4;8;16",
                                      npu_adapter_gear_unpad="probs:0:0")).to_config_proto()
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(mlp_graph(), name="")
    plain = plain_session_class()(graph=g)
    rows_run = (3, 3, 9, 3, 4, 9, 9)
    with NpuSession(graph=g, config=config) as sess:
        for k, rows in enumerate(rows_run):
            value = np.random.RandomState(k).rand(rows, 16).astype(np.float32)
            np.testing.assert_allclose(sess.run("probs:0", {"x:0": value}),
                                       plain.run("probs:0", {"x:0": value}), rtol=1e-5)
        with pytest.raises(tf.errors.InvalidArgumentError, match="match no gear"):
            sess.run("probs:0", {"x:0": np.zeros((17, 16), np.float32)})
        with pytest.raises(tf.errors.InvalidArgumentError, match="match no gear"):
            sess.run("probs:0", {"x:0": np.zeros((17, 16), np.float32)})
        (st,) = runner_of(sess).gear_stats().values()
    plain.close()
    assert st["runs"] == len(rows_run) and st["gear_counts"] == {0: 4, 2: 3}
    assert st["actual_elements"] == sum(rows_run) * 16
    assert st["padded_elements"] == (4 * 4 + 16 * 3) * 16


def test_large_constants_stay_outside_cluster_functions():
    res = rewrite(cnn_graph(), {}, fetches=["logits:0"])
    (cluster,) = res.clusters
    fdef = next(f for f in res.graph_def.library.function if f.signature.name == cluster.name)
    big = [n.name for n in fdef.node_def if n.op == "Const"
           and len(n.attr["value"].tensor.tensor_content) >= 1024]
    assert big == []
    outer_consts = {n.name for n in res.graph_def.node if n.op == "Const"}
    hoisted = set(cluster.nodes) & outer_consts
    assert hoisted, "the conv and dense weights are passed in as arguments"
    node = next(n for n in res.graph_def.node if n.name == cluster.name)
    assert {s.decode() for s in node.attr["_npu_adapter_hoisted"].list.s} == hoisted


def test_gears_on_a_placeholder_with_default_and_without_feed_dict():
    """dynamic_node_type=1 may name a placeholder_with_default: fed, it is a gear input; not
    fed, it computes its default inside the cluster (a static shape, as in the original, where
    gears are the GeOp's arguments)."""
    g = tf.Graph()
    with g.as_default():
        default = tf.constant(np.ones((2, 3), np.float32))
        x = tf1.placeholder_with_default(default, [None, 3], name="x")
        tf.nn.relu(tf.matmul(x, tf.ones([3, 4])) - 1.0, name="out")
    config = NpuConfig.from_dict({"input_shape": "x:-1,3", "dynamic_dims": "2;4",
                                  "dynamic_node_type": 1}).to_config_proto()
    plain = plain_session_class()(graph=g)
    with NpuSession(graph=g, config=config) as sess:
        got = sess.run("out:0")
        assert got.tobytes() == plain.run("out:0").tobytes()
        assert not runner_of(sess).rewrite_result("out:0").clusters[0].gears
        four = {"x:0": np.full((4, 3), 0.5, np.float32)}
        assert sess.run("out:0", four).tobytes() == plain.run("out:0", four).tobytes()
        assert runner_of(sess).rewrite_result("out:0", four).clusters[0].gears
        assert runner_of(sess).gear_stats()["GeOp2_0"]["gear_counts"] == {1: 1}
    plain.close()


def test_gears_fed_by_a_dataset_without_feed_dict():
    g = tf.Graph()
    with g.as_default():
        data = tf.data.Dataset.from_tensor_slices(np.arange(24, dtype=np.float32).reshape(12, 2))
        batch = tf1.data.make_one_shot_iterator(data.batch(4)).get_next()
        tf.reduce_sum(tf.square(batch), axis=1, name="out")
    config = NpuConfig.from_dict({"input_shape": "IteratorGetNext:-1,2", "dynamic_dims": "2;4",
                                  "dynamic_node_type": 0}).to_config_proto()
    with NpuSession(graph=g, config=config) as sess:
        values = [sess.run("out:0") for _ in range(3)]
    want = np.square(np.arange(24, dtype=np.float32).reshape(12, 2)).sum(axis=1)
    np.testing.assert_array_equal(np.concatenate(values), want)


def test_dataset_gears_give_plain_tensorflows_convolutions_bit_for_bit():
    """Batches of 2 then 4 from a tf.data pipeline through two convolutions: every gear gives
    exactly what plain TensorFlow gives for the same batch."""
    images = np.random.RandomState(0).randn(12, 8, 8, 3).astype(np.float32)

    def run(session_class):
        g = tf.Graph()
        with g.as_default():
            data = tf.data.Dataset.from_tensor_slices(images)
            data = data.batch(2).take(2).concatenate(
                tf.data.Dataset.from_tensor_slices(images).batch(4))
            x = tf1.data.make_one_shot_iterator(data).get_next()
            w1 = tf.constant(np.random.RandomState(1).randn(3, 3, 3, 16).astype(np.float32))
            w2 = tf.constant(np.random.RandomState(2).randn(3, 3, 16, 8).astype(np.float32))
            y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w1, 1, "SAME"), tf.ones([16])))
            tf.reduce_sum(tf.nn.conv2d(y, w2, 1, "SAME"), [1, 2], name="out")
        config = NpuConfig.from_dict({"input_shape": "IteratorGetNext:-1,8,8,3",
                                      "dynamic_dims": "2;4",
                                      "dynamic_node_type": 0}).to_config_proto()
        with session_class(graph=g, config=config) as sess:
            return [sess.run("out:0") for _ in range(5)]

    ours, plain = run(NpuSession), run(plain_session_class())
    assert [v.shape[0] for v in ours] == [2, 2, 4, 4, 4]
    for a, b in zip(ours, plain):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("node_type", [1, 0], ids=["placeholder", "dataset"])
def test_a_graph_with_variables_runs_every_signature_with_gears(node_type):
    """Gears belong to the runs that read the gear input: the initialiser, a read of a variable
    and a checkpoint run as usual, and the step matches plain TensorFlow."""
    def build():
        graph = tf.Graph()
        with graph.as_default():
            if node_type == 1:
                x = tf1.placeholder(tf.float32, [None, 4], name="x")
            else:
                data = tf.data.Dataset.from_tensor_slices(
                    np.arange(40, dtype=np.float32).reshape(10, 4)).batch(4).repeat()
                x = tf1.data.make_one_shot_iterator(data).get_next(name="batch")
            v = tf1.get_variable("v", initializer=np.ones(4, np.float32), use_resource=False)
            y = tf.reduce_sum(x * v, name="y")
            with tf.control_dependencies([y]):  # read, then update: no race
                step = tf1.assign_add(v, tf.reduce_mean(x, 0), name="step")
            init = tf1.global_variables_initializer()
        return graph, y, step, init, v

    name = "x" if node_type == 1 else "batch"
    config = NpuConfig.from_dict({"input_shape": f"{name}:-1,4", "dynamic_dims": "2;4",
                                  "dynamic_node_type": node_type}).to_config_proto()
    feeds = [{"x:0": np.full((rows, 4), k, np.float32)} for k, rows in enumerate((2, 4, 2))] \
        if node_type == 1 else [None] * 3
    seen = {}
    for cls in (plain_session_class(), NpuSession):
        graph, y, step, init, v = build()
        with cls(graph=graph, config=config) as sess:
            sess.run(init)
            seen[cls] = [sess.run([y, step], feed)[0] for feed in feeds] + [sess.run(v)]
    for plain, npu in zip(*seen.values()):
        assert np.asarray(plain).tobytes() == np.asarray(npu).tobytes()


def test_a_random_op_keeps_one_sequence_across_gears():
    """Batches 2, 4, 2, 4 through gears 2;4 draw from one random kernel, as in a plain
    session."""
    def build():
        graph = tf.Graph()
        with graph.as_default():
            x = tf1.placeholder(tf.float32, [None, 3], name="x")
            tf.identity(x + tf.random.uniform(tf.shape(x), seed=7), name="y")
        return graph

    config = NpuConfig.from_dict({"input_shape": "x:-1,3", "dynamic_dims": "2;4",
                                  "dynamic_node_type": 1}).to_config_proto()
    seen = {}
    for cls in (plain_session_class(), NpuSession):
        with cls(graph=build(), config=config) as sess:
            seen[cls] = [sess.run("y:0", {"x:0": np.zeros((rows, 3), np.float32)})
                         for rows in (2, 4, 2, 4)]
    for plain, npu in zip(*seen.values()):
        assert plain.tobytes() == npu.tobytes()


def test_input_shape_naming_no_graph_input_is_refused():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        tf.identity(x * 2.0, name="y")
    config = NpuConfig.from_dict({"input_shape": "nope:-1,4", "dynamic_dims": "2;4",
                                  "dynamic_node_type": 1}).to_config_proto()
    with NpuSession(graph=graph, config=config) as sess, \
            pytest.raises(tf.errors.InvalidArgumentError, match="input_shape names 'nope'"):
        sess.run("y:0", {"x:0": np.zeros((2, 4), np.float32)})
