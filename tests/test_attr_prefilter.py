"""The rare-attribute prefilter (GraphView.record_absent_attrs) and the Const sizes a view keeps.

A rewrite records which of the attributes the passes look for on every node (``_class``,
``_without_npu_compile``, the scopes, the gates, ...) occur nowhere in the graph's bytes, and the
passes skip their walks for those. These tests check the view's bookkeeping and that every
rewrite comes out byte-identical with the prefilter and without it, on graphs that carry each
of those attributes and on graphs that carry none.
"""

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import mix_cnn_graph, mix_compile_graph, without_npu_compile
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorflow.core.framework import attr_value_pb2, graph_pb2

import npu_adapter
import npu_adapter.api as api
from npu_adapter.config import NpuConfig
from npu_adapter.errors import RewriteError
from npu_adapter.graph.extract import extract_client_graph
from npu_adapter.graph.payload import strip_payloads
from npu_adapter.graph.serialize import to_bytes
from npu_adapter.graph.types import tensor_bytes
from npu_adapter.graph.view import GraphView
from npu_adapter.passes import PassManager
from npu_adapter.pipeline.base import PassContext
from npu_adapter.pipeline.graph_config import read_graph_config
from npu_adapter.testing import GraphBuilder
from npu_adapter.vocabulary import CLUSTER_ATTR, PREFILTERED_ATTRS

tf1 = tf.compat.v1


def _recorded(graph_def):
    view = GraphView(graph_def)
    view.record_absent_attrs(graph_def.SerializeToString(), PREFILTERED_ATTRS)
    return view


# --------------------------------------------------------------------------- the view
def test_only_attributes_no_node_carries_are_reported_absent():
    b = GraphBuilder()
    b.placeholder("x", tf.float32, [2])
    b.op("Abs", "a", ["x"], T=tf.float32)
    b.set_attr("a", "_without_npu_compile", True)
    view = _recorded(b.graph_def())
    assert view.may_carry_attr("_without_npu_compile")
    assert not view.may_carry_attr("_class")
    assert not view.may_carry_attr(CLUSTER_ATTR)
    # A key nobody recorded may always be there: the caller looks.
    assert view.may_carry_attr("_anything_else")
    assert GraphView(b.graph_def()).may_carry_attr("_class")


def test_the_record_is_shared_by_rebound_and_subset_views_and_a_write_is_noted():
    b = GraphBuilder()
    b.placeholder("x", tf.float32, [2])
    b.op("Abs", "a", ["x"], T=tf.float32)
    b.op("Neg", "unused", ["x"], T=tf.float32)
    graph_def = b.graph_def()
    view = _recorded(graph_def)
    client = extract_client_graph(graph_def, ["a:0"], view=view)
    assert client.graph_def is not graph_def  # "unused" was pruned: a subset view
    assert not client.view.may_carry_attr(CLUSTER_ATTR)
    rebound = client.view.rebind(client.graph_def)
    rebound.note_attr_written(CLUSTER_ATTR)
    # Every view sharing the cache now looks (for the graph before the write that is only
    # slower, never wrong); the full graph's view is not affected.
    assert rebound.may_carry_attr(CLUSTER_ATTR)
    assert client.view.may_carry_attr(CLUSTER_ATTR)
    assert not view.may_carry_attr(CLUSTER_ATTR)
    assert not rebound.may_carry_attr("_class")


def test_const_bytes_are_the_tensor_sizes_and_follow_a_subset():
    b = GraphBuilder()
    b.const("big", np.zeros([64, 64], np.float32))
    b.const("small", np.float32(1.0))
    b.const("text", np.array([b"abc", b"de"]))
    b.op("Add", "sum", ["big", "small"], T=tf.float32)
    b.op("Neg", "unused", ["small"], T=tf.float32)
    graph_def = b.graph_def()
    view = GraphView(graph_def)
    expected = {i: tensor_bytes(graph_def.node[i].attr["value"].tensor)
                for i in range(len(graph_def.node)) if graph_def.node[i].op == "Const"}
    assert view.const_bytes() == expected
    assert expected[view.index["big"]] == 64 * 64 * 4
    client = extract_client_graph(graph_def, ["sum:0"], view=view)
    sub = client.view
    assert sub.const_bytes() == {sub.index[name]: expected[view.index[name]]
                                 for name in ("big", "small")}
    assert GraphView(client.graph_def).const_bytes() == sub.const_bytes()


@pytest.mark.parametrize("min_bytes", [1, 1024, 1 << 20])
def test_strip_payloads_reads_the_sizes_from_the_view_with_the_same_result(min_bytes):
    b = GraphBuilder()
    b.const("w1", np.ones([32, 32], np.float32))
    b.const("w2", np.ones([16, 64], np.float32))
    b.const("s", np.array([b"x" * 5000]))  # strings are never set aside
    b.op("MatMul", "m", ["w1", "w2"], T=tf.float32)
    graph_def = b.graph_def()
    plain, plain_store = strip_payloads(graph_def, min_bytes)
    viewed, viewed_store = strip_payloads(graph_def, min_bytes, view=GraphView(graph_def))
    assert to_bytes(plain) == to_bytes(viewed)
    assert (plain_store is None) == (viewed_store is None)
    if plain_store is not None:
        assert len(plain_store) == len(viewed_store) > 0
        viewed_store.restore(viewed)
        assert to_bytes(viewed) == to_bytes(graph_def)


# --------------------------------------------------------------------------- graph config
_OPS = ("IteratorGetNext", "RestoreV2", "OneShotIterator", "Conv2D", "NoOp")


@st.composite
def _config_graphs(draw):
    """Graphs of the ops the graph-config walk counts, with or without the attributes it reads
    (data_format, the gates, set_graph_exec_config's)."""
    graph_def = graph_pb2.GraphDef()
    for k in range(draw(st.integers(1, 8))):
        node = graph_def.node.add()
        node.name = f"n{k}"
        node.op = draw(st.sampled_from(_OPS))  # (the walk reads op types and attrs only)
        if draw(st.booleans()):
            node.attr["data_format"].s = draw(st.sampled_from([b"NHWC", b"NCHW", b""]))
        # Mostly none: a graph without any of them takes the prefiltered walk.
        extra = draw(st.sampled_from([None] * 20 + ["_NoNeedOptimize", "_NpuOptimizer",
                                                    "_graph_dynamic_input", "dynamic_pair"]))
        if extra == "dynamic_pair":
            node.attr["_graph_dynamic_input"].b = True
            node.attr["_graph_dynamic_graph_execute_mode"].s = b"dynamic_execute"
        elif extra is not None:
            node.attr[extra].CopyFrom(attr_value_pb2.AttrValue(b=True))
    return graph_def


def _outcome(view, config):
    try:
        return read_graph_config(view, config)
    except RewriteError as exc:
        return ("error", str(exc), exc.code)


@settings(max_examples=300, deadline=None)
@given(_config_graphs(), st.sampled_from([1, 3]), st.booleans())
def test_the_graph_config_is_the_same_with_and_without_the_prefilter(graph_def, loops, off_line):
    config = NpuConfig.from_dict({"iterations_per_loop": loops, "use_off_line": off_line})
    assert _outcome(_recorded(graph_def), config) == _outcome(GraphView(graph_def), config)


# --------------------------------------------------------------------------- rewrites
def _scoped_graph():
    """Colocation, without_npu_compile, a multi-dims scope, keep_dtype_scope and
    set_graph_exec_config."""
    from npu_bridge.estimator.npu import npu_scope, util

    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        w = tf1.get_variable("w", initializer=tf.ones([4, 4]), use_resource=False)
        with g.colocate_with(w.op):
            y = tf.matmul(x, w, name="mm")
        with without_npu_compile(g):
            y = tf.abs(y, name="host_abs")
        with npu_scope.subgraph_multi_dims_scope(0):
            y = tf.nn.relu(y * 2.0, name="scoped")
        with npu_scope.keep_dtype_scope():
            y = tf.sigmoid(y, name="kept_dtype")
        out = tf.reduce_sum(y, name="out")
        util.set_graph_exec_config(out, dynamic_input=True,
                                   dynamic_graph_execute_mode="dynamic_execute",
                                   dynamic_inputs_shape_range="data:[1~4,4]")
    return g.as_graph_def(), ["out:0"], ["x:0"]


def _cases():
    cnn = mix_cnn_graph().as_graph_def()
    from bench.synthetic import synthetic_graph

    synthetic = synthetic_graph(3000, seed=4)
    yield "mix_cnn", cnn, ["probs:0"], ["images:0"]
    yield "mix_compile", mix_compile_graph(), ["ArgMax:0"], []
    yield "scoped", *_scoped_graph()
    yield "synthetic", synthetic.graph_def, list(synthetic.fetches), list(synthetic.feeds)


def _rewrite_bytes(graph_def, fetches, feeds, options):
    result = npu_adapter.rewrite(graph_def, options, fetches=fetches, feeds=feeds)
    return to_bytes(result.graph_def), result.placement


@pytest.mark.parametrize("options", [{}, {"mix_compile_mode": True}], ids=["full", "mix"])
def test_rewrites_are_byte_identical_with_and_without_the_prefilter(monkeypatch, options):
    for name, graph_def, fetches, feeds in _cases():
        with_prefilter = _rewrite_bytes(graph_def, fetches, feeds, options)
        with monkeypatch.context() as m:
            m.setattr(api, "_record_absent_attrs", lambda graph_def, view: None)
            without = _rewrite_bytes(graph_def, fetches, feeds, options)
        assert with_prefilter == without, name


def test_a_second_cluster_pass_sees_the_first_ones_clusters_through_the_prefilter():
    graph_def = mix_cnn_graph().as_graph_def()
    config = NpuConfig.from_dict({"mix_compile_mode": True})

    def run(record):
        ctx = PassContext(config=config)
        if record:
            ctx.register_view(graph_def, _recorded(graph_def))
        # The second pass keeps one cluster of the first one's two: it must see their marks
        # (a stale clustering) and remove the other's.
        manager = PassManager.from_pipeline("mark_candidates,cluster,cluster(max_clusters=1)")
        return manager.run(graph_def, ctx)

    recorded, plain = run(True), run(False)
    assert to_bytes(recorded.graph_def) == to_bytes(plain.graph_def)
    first, second = (r.info["clusters"] for name, r in recorded.results if name == "cluster")
    assert len(first) == 2 and len(second) == 1
    marked = {node.attr[CLUSTER_ATTR].s.decode() for node in recorded.graph_def.node
              if CLUSTER_ATTR in node.attr}
    assert marked == set(second)
    assert [r.info for _, r in recorded.results] == [r.info for _, r in plain.results]


def test_ports_past_zero_are_the_same_from_the_parse_and_from_a_scan():
    b = GraphBuilder()
    b.placeholder("x", tf.float32, [4])
    b.op("Unique", "u", ["x"], T=tf.float32, out_idx=tf.int32)
    b.op("Identity", "idx", ["u:1"], T=tf.int32)
    b.op("Identity", "val", ["u:0"], T=tf.float32)
    b.op("Abs", "bad", ["x:3"], T=tf.float32)  # x has one output
    b.op("Neg", "unused", ["x"], T=tf.float32)
    graph_def = b.graph_def()
    view = GraphView(graph_def)
    parsed = [i for i, _ in view.inputs_past_port_zero()]
    assert [view.names[i] for i in parsed] == ["idx", "val", "bad"]
    client = extract_client_graph(graph_def, ["idx:0", "val:0", "bad:0"], view=view)
    scanned = [client.view.names[i] for i, _ in client.view.inputs_past_port_zero()]
    assert scanned == ["idx", "bad"]  # ("u:0" reads port 0: only a parse lists it)
    from npu_adapter.graph.verify import verify_graph

    kinds = [(v.kind, v.node) for v in verify_graph(client.graph_def, view=client.view)]
    assert kinds == [(v.kind, v.node) for v in verify_graph(client.graph_def)]
    assert ("port_out_of_range", "bad") in kinds


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="_abcXYZ019/", min_size=1, max_size=300))
def test_an_attribute_key_is_found_in_the_serialized_graph_whatever_its_length(key):
    graph_def = graph_pb2.GraphDef()
    node = graph_def.node.add()
    node.name, node.op = "n", "NoOp"
    node.attr[key].b = True
    view = GraphView(graph_def)
    view.record_absent_attrs(graph_def.SerializeToString(), [key, key + "_other"])
    assert view.may_carry_attr(key)
    assert not view.may_carry_attr(key + "_other")


def test_a_rewrite_that_keeps_the_weights_in_its_graphs_does_not_serialize_them(
        monkeypatch, tmp_path):
    # With dumps (or instruments) the passes see the user's full weights: serializing those for
    # the prefilter could cost more than the walks it saves, so it is not done.
    calls = []
    original = GraphView.record_absent_attrs
    monkeypatch.setattr(GraphView, "record_absent_attrs",
                        lambda self, data, keys: calls.append(len(data)) or original(
                            self, data, keys))
    graph_def = mix_cnn_graph().as_graph_def()
    npu_adapter.rewrite(graph_def, {}, fetches=["probs:0"], feeds=["images:0"])
    assert len(calls) == 1
    npu_adapter.rewrite(graph_def, {}, fetches=["probs:0"], feeds=["images:0"],
                        dump_dir=str(tmp_path))
    assert len(calls) == 1
    assert any(tmp_path.iterdir())
