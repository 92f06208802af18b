"""extract_client_graph: the client graph of one run signature, cut as TensorFlow's session cuts it.

Where it matters, the client graph is also run and compared with a plain session run of the full
graph with the same fetches and feeds.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import function_pb2, graph_pb2

from npu_adapter.errors import GraphError
from npu_adapter.graph.extract import (
    FED_TENSOR_ATTR,
    extract_client_graph,
    normalize_tensor_name,
)
from npu_adapter.graph.serialize import to_bytes
from npu_adapter.graph.view import GraphView
from npu_adapter.testing import GraphBuilder

tf1 = tf.compat.v1


def _names(graph_def):
    return [n.name for n in graph_def.node]


def _node(graph_def, name):
    return next(n for n in graph_def.node if n.name == name)


def _graph():
    """::

        x ─► a(Abs) ─► m(Mul a,a) ─► out
        y ─► b(Neg) ─────────────────┘ (Add m, b)
        z ─► side(Abs)                 (not needed by out)
        init(NoOp) ─^─► out
    """
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.placeholder("y", shape=[2])
    b.placeholder("z", shape=[2])
    b.unary("Abs", "a", "x")
    b.binary("Mul", "m", "a", "a")
    b.unary("Neg", "b", "y")
    b.unary("Abs", "side", "z")
    b.op("NoOp", "init")
    b.op("Add", "out", ["m", "b", "^init"], T=tf.float32)
    return b.graph_def()


def _run(graph_def, fetches, feeds):
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    # Grappler (TF 2.x) rewrites Mul(a, a) into Square(a) even when Mul's output is fed, and then
    # asks for x; without it the session cuts at the feed as TensorFlow documents.
    config = tf1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    with tf1.Session(graph=graph, config=config) as sess:
        return sess.run(fetches, feeds)


def test_normalize_tensor_name():
    assert normalize_tensor_name("x") == "x:0"
    assert normalize_tensor_name("x:2") == "x:2"
    with pytest.raises(GraphError, match="fetch '\\^x' names an operation, not a tensor; pass it "
                                         "as a target"):
        normalize_tensor_name("^x")
    with pytest.raises(GraphError, match="feed '\\^x'"):
        normalize_tensor_name("^x", "feed")


# --------------------------------------------------------------------------- pruning
def test_fetches_keep_only_what_they_need_with_control_dependencies():
    gd = _graph()
    client = extract_client_graph(gd, fetches=["out"])
    assert _names(client.graph_def) == ["x", "y", "a", "m", "b", "init", "out"]
    assert client.fetches == ("out:0",) and client.targets == () and client.feeds == {}


def test_targets_run_ops_and_keep_their_inputs():
    gd = _graph()
    client = extract_client_graph(gd, fetches=["m:0"], targets=["side", "^init"])
    assert _names(client.graph_def) == ["x", "z", "a", "m", "side", "init"]
    assert client.targets == ("side", "^init")


def test_everything_needed_returns_the_graph_itself():
    gd = _graph()
    view = GraphView(gd)
    client = extract_client_graph(gd, fetches=["out", "side"], view=view)
    assert client.graph_def is gd and client.view is view


def test_library_versions_and_order_are_kept():
    gd = _graph()
    gd.versions.producer = 1234
    gd.versions.min_consumer = 12
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = "unused_helper"
    gd.library.function.add().CopyFrom(fdef)
    client = extract_client_graph(gd, fetches=["b:0"], feeds=["a:0"])
    assert client.graph_def.versions == gd.versions
    assert client.graph_def.library == gd.library
    client = extract_client_graph(gd, fetches=["b:0"])
    assert client.graph_def.versions == gd.versions
    assert client.graph_def.library == gd.library
    assert _names(client.graph_def) == ["y", "b"]


def test_the_input_graph_is_never_modified():
    gd = _graph()
    before = to_bytes(gd)
    extract_client_graph(gd, fetches=["out"], feeds=["m:0", "y"], targets=["side"])
    assert to_bytes(gd) == before


# --------------------------------------------------------------------------- feeds
def test_a_fed_placeholder_stands_for_itself():
    gd = _graph()
    client = extract_client_graph(gd, fetches=["b"], feeds=["y:0", "z"])
    # A fed placeholder is part of the client graph even if nothing reads it (as TF's _Arg).
    assert _names(client.graph_def) == ["y", "z", "b"]
    assert client.feeds == {"y:0": "y:0", "z:0": "z:0"}


def test_a_fed_placeholder_does_not_pull_in_its_control_inputs():
    """::

        v ─► AssignAddVariableOp ─^─► p(Placeholder, fed) ─► y(Identity)

    Feeding ``p`` cuts it loose, as TensorFlow's session does: the assignment does not run.
    """
    g = tf.Graph()
    with g.as_default():
        v = tf1.Variable(1.0, name="v")
        add = tf1.assign_add(v, 1.0)
        with tf1.control_dependencies([add]):
            p = tf1.placeholder(tf.float32, [], name="p")
        tf.identity(p, name="y")
    client = extract_client_graph(g.as_graph_def(), fetches=["y"], feeds=["p"])
    assert _names(client.graph_def) == ["p", "y"]
    assert list(_node(client.graph_def, "p").input) == []
    # Needed for another reason than its fed output, it keeps them (and what they need).
    client = extract_client_graph(g.as_graph_def(), fetches=["y"], feeds=["p"], targets=["p"])
    assert add.name in _names(client.graph_def)
    assert list(_node(client.graph_def, "p").input) == [f"^{add.name}"]


def test_the_rewrite_of_a_fed_placeholder_has_no_cluster_for_its_control_inputs():
    import npu_adapter

    g = tf.Graph()
    with g.as_default():
        v = tf1.Variable(1.0, name="v")
        with tf1.control_dependencies([tf1.assign_add(v, 1.0)]):
            p = tf1.placeholder(tf.float32, [], name="p")
        tf.identity(p * 2.0, name="y")
    result = npu_adapter.rewrite(g.as_graph_def(), fetches=["y:0"], feeds=["p:0"])
    ops = {n.op for f in result.graph_def.library.function for n in f.node_def}
    assert "AssignAddVariableOp" not in ops and "VarHandleOp" not in ops


def test_a_fed_tensor_cuts_its_producer_and_becomes_a_placeholder():
    gd = _graph()
    gd.node[4].attr["_output_shapes"].list.shape.add().CopyFrom(
        tf.TensorShape([2]).as_proto())  # m's shape, as graphs exported with shapes carry
    client = extract_client_graph(gd, fetches=["out:0"], feeds=["m:0"])
    out = client.graph_def
    assert _names(out) == ["y", "b", "init", "out", "m_feed_0"]  # x, a, m are cut
    ph = _node(out, "m_feed_0")
    assert ph.op == "Placeholder"
    assert ph.attr["dtype"].type == tf.float32.as_datatype_enum
    assert tf.TensorShape(ph.attr["shape"].shape).as_list() == [2]
    assert ph.attr[FED_TENSOR_ATTR].s == b"m:0"
    assert list(_node(out, "out").input) == ["m_feed_0", "b", "^init"]
    assert client.feeds == {"m:0": "m_feed_0:0"}
    assert client.view is None  # rebuilt graph: no derived view
    # Same numbers as TF's session, which feeds m directly.
    feeds = {"y:0": np.array([1.0, -2.0], np.float32), "m:0": np.array([3.0, 4.0], np.float32)}
    expected = _run(gd, "out:0", feeds)
    actual = _run(out, "out:0", {"y:0": feeds["y:0"], "m_feed_0:0": feeds["m:0"]})
    np.testing.assert_array_equal(actual, expected)


def test_a_fed_tensor_without_shape_gets_an_unknown_shape_placeholder():
    client = extract_client_graph(_graph(), fetches=["out:0"], feeds=["a"])
    ph = _node(client.graph_def, "a_feed_0")
    assert ph.attr["shape"].shape.unknown_rank
    assert list(_node(client.graph_def, "m").input) == ["a_feed_0", "a_feed_0"]
    assert "x" not in _names(client.graph_def) and "a" not in _names(client.graph_def)


def test_a_fed_tensor_keeps_its_producer_when_another_output_is_needed():
    """u = Unique(x): u:0 is fed, u:1 is still computed (so u and x stay)."""
    b = GraphBuilder()
    b.placeholder("x", shape=[4])
    b.op("Unique", "u", ["x"], T=tf.float32, out_idx=tf.int32)
    b.unary("Abs", "vals", "u")
    b.op("Identity", "idx", ["u:1"], T=tf.int32)
    gd = b.graph_def()
    client = extract_client_graph(gd, fetches=["vals:0", "idx:0"], feeds=["u:0"])
    assert _names(client.graph_def) == ["x", "u", "vals", "idx", "u_feed_0"]
    assert list(_node(client.graph_def, "vals").input) == ["u_feed_0"]
    assert list(_node(client.graph_def, "idx").input) == ["u:1"]
    feeds = {"x:0": np.array([3.0, 1.0, 3.0, 2.0], np.float32),
             "u:0": np.array([-5.0, 6.0], np.float32)}
    expected = _run(gd, ["vals:0", "idx:0"], feeds)
    actual = _run(client.graph_def, ["vals:0", "idx:0"],
                  {"x:0": feeds["x:0"], "u_feed_0:0": feeds["u:0"]})
    for e, a in zip(expected, actual):
        np.testing.assert_array_equal(a, e)


def test_a_fed_tensor_keeps_its_producer_when_it_is_a_control_dependency():
    """a is fed, but ``out`` also waits for a (control edge): a and x stay."""
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    b.op("Neg", "out", ["a", "^a"], T=tf.float32)
    client = extract_client_graph(b.graph_def(), fetches=["out"], feeds=["a:0"])
    assert _names(client.graph_def) == ["x", "a", "out", "a_feed_0"]
    assert list(_node(client.graph_def, "out").input) == ["a_feed_0", "^a"]


def test_fetching_a_fed_tensor_does_not_need_its_producer():
    client = extract_client_graph(_graph(), fetches=["m:0"], feeds=["m:0"])
    assert _names(client.graph_def) == ["m_feed_0"]
    assert client.feeds == {"m:0": "m_feed_0:0"}


def test_a_fed_ref_tensor_is_fed_by_value():
    b = GraphBuilder()
    b.op("VariableV2", "v", dtype=tf.float32, shape=[2], container="", shared_name="")
    b.op("Identity", "read", ["v"], T=tf.float32)
    client = extract_client_graph(b.graph_def(), fetches=["read"], feeds=["v:0"])
    ph = _node(client.graph_def, "v_feed_0")
    assert ph.attr["dtype"].type == tf.float32.as_datatype_enum  # not float32_ref


def test_feed_names_are_deduplicated_and_substitute_names_are_unique():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    b.placeholder("a_feed_0")  # the natural substitute name is taken
    b.binary("Add", "out", "a", "a_feed_0")
    client = extract_client_graph(b.graph_def(), fetches=["out"], feeds=["a", "a:0"])
    assert _names(client.graph_def) == ["a_feed_0", "out", "a_feed_0_1"]
    assert list(_node(client.graph_def, "out").input) == ["a_feed_0_1", "a_feed_0"]
    assert client.feeds == {"a:0": "a_feed_0_1:0"}


def test_extraction_is_deterministic():
    gd = _graph()
    first = extract_client_graph(gd, fetches=["out"], feeds=["m", "y"], targets=["side"])
    second = extract_client_graph(graph_pb2.GraphDef.FromString(gd.SerializeToString()),
                                  fetches=["out"], feeds=["y", "m"], targets=["side"])
    assert to_bytes(first.graph_def) == to_bytes(second.graph_def)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("kwargs, message", [
    ({"fetches": ["nope:0"]}, "fetch 'nope:0': the graph has no node named 'nope'"),
    ({"fetches": ["out"], "feeds": ["ghost"]}, "feed 'ghost:0': the graph has no node named "
                                               "'ghost'"),
    ({"targets": ["missing_op"]}, "target 'missing_op': the graph has no node named "
                                  "'missing_op'"),
    ({"targets": ["^missing_op"]}, "target '\\^missing_op': the graph has no node named "
                                   "'missing_op'"),
    ({"fetches": ["out:1"]}, "fetch 'out:1': node 'out' \\(Add\\) has 1 output\\(s\\), so the "
                             "valid ports are 0..0"),
    ({"fetches": ["out"], "feeds": ["m:5"]}, "feed 'm:5': node 'm' \\(Mul\\) has 1 output"),
    ({"fetches": ["init:0"]}, "fetch 'init:0': node 'init' \\(NoOp\\) has 0 output"),
    ({"fetches": ["^out"]}, "fetch '\\^out' names an operation"),
    ({}, "nothing to run: give at least one fetch or target"),
    ({"feeds": ["x"]}, "nothing to run"),
])
def test_bad_run_signatures_are_named_graph_errors(kwargs, message):
    gd = _graph()
    before = to_bytes(gd)
    with pytest.raises(GraphError, match=message):
        extract_client_graph(gd, **kwargs)
    assert to_bytes(gd) == before


def test_feeding_an_output_of_unknown_dtype_is_an_error():
    b = GraphBuilder()
    b.placeholder("x")
    b.op("NotRegistered", "mystery", ["x"])
    b.op("Identity", "out", ["mystery"], T=tf.float32)
    with pytest.raises(GraphError, match="feed 'mystery:0': cannot tell the dtype of output 0 of "
                                         "NotRegistered node 'mystery'"):
        extract_client_graph(b.graph_def(), fetches=["out"], feeds=["mystery"])


def _copied_one_by_one(graph_def, kept_names):
    """The client graph as a copy of the versions, the library and each kept node."""
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name in kept_names:
            out.node.add().CopyFrom(node)
    return out


@pytest.mark.parametrize("dead_every", [2, 50, 1000])
def test_client_graph_is_a_copy_of_the_kept_nodes(dead_every):
    # Chains of Identity nodes; every ``dead_every``-th node is a side branch nothing fetches.
    graph_def = graph_pb2.GraphDef()
    graph_def.versions.producer = 7
    graph_def.debug_info.files.append("not copied into a client graph")
    first = graph_def.node.add(name="x", op="Placeholder")
    first.attr["dtype"].type = tf.float32.as_datatype_enum
    previous = "x"
    kept = {"x"}
    for k in range(3000):
        node = graph_def.node.add(name=f"n{k}", op="Identity", input=[previous])
        node.attr["T"].type = tf.float32.as_datatype_enum
        if k % dead_every == dead_every - 1:
            node.input.append(f"^{previous}")  # a dead end with a control input
            continue
        kept.add(node.name)
        previous = node.name
    client = extract_client_graph(graph_def, [f"{previous}:0"])
    expected = _copied_one_by_one(graph_def, kept)
    assert to_bytes(client.graph_def) == to_bytes(expected)
    assert not client.graph_def.HasField("debug_info")
    # The view handed along is the view of the client graph.
    fresh = GraphView(client.graph_def)
    assert client.view.names == fresh.names
    assert client.view.data_inputs == fresh.data_inputs
    assert client.view.control_inputs == fresh.control_inputs
