"""Splicing a rewritten client graph into the live graph: only changed nodes are imported."""

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from npu_adapter import rewrite
from npu_adapter.graph.extract import FED_TENSOR_ATTR
from npu_adapter.graph.splice import plan_splice, splice_into_graph
from npu_adapter.testing import GraphBuilder

tf1 = tf.compat.v1


def _original():
    """::

        x ─► a(Abs) ─► b(Neg) ─► c(Identity)
        init(NoOp)   k(Const) ─► kc(Identity)
    """
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    b.unary("Neg", "b", "a")
    b.op("Identity", "c", ["b"], T=tf.float32)
    b.op("NoOp", "init")
    b.const("k", np.float32(2.0))
    b.op("Identity", "kc", ["k"], T=tf.float32)
    return b.graph_def()


def _copy(graph_def):
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    return out


def _by_name(graph_def):
    return {n.name: n for n in graph_def.node}


def test_unchanged_graph_imports_nothing():
    gd = _original()
    plan = plan_splice(_copy(gd), _by_name(gd))
    assert plan.imported == frozenset() and len(plan.graph_def.node) == 0
    assert plan.bindings == {}


def test_a_changed_node_and_everything_downstream_are_imported():
    gd = _original()
    rewritten = _copy(gd)
    rewritten.node[2].op = "Floor"  # b changed: b and its consumer c are imported
    plan = plan_splice(rewritten, _by_name(gd))
    assert plan.imported == {"b", "c"}
    assert plan.bindings == {"a:0": "a:0"}
    assert [n.name for n in plan.graph_def.node] == ["b", "c"]
    assert plan.graph_def.versions == rewritten.versions
    rename = plan.rename("scope")
    assert (rename("a"), rename("b")) == ("a", "scope/b")


def test_new_nodes_bind_their_kept_inputs_including_control_inputs():
    """A control input on a kept op without outputs (init, a NoOp) is bound through a constant
    that waits for it: the op itself is never copied."""
    gd = _original()
    rewritten = _copy(gd)
    new = rewritten.node.add()
    new.CopyFrom(rewritten.node[1])  # a second Abs reading x, with control deps
    new.name = "new"
    new.input[:] = ["x", "^k", "^init"]
    plan = plan_splice(rewritten, _by_name(gd))
    assert plan.imported == {"new"}
    assert plan.bindings == {"x:0": "x:0", "^k": "^k", "^init": "^init"}
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    anchors = {}
    rename = splice_into_graph(graph, plan, "spliced", anchors)
    op = graph.get_operation_by_name(rename("new"))
    waits_for = {c.name for c in op.control_inputs}
    assert "k" in waits_for and "init" not in waits_for
    (anchor,) = waits_for - {"k"}
    assert [c.name for c in graph.get_operation_by_name(anchor).control_inputs] == ["init"]
    assert anchors["init"].op.name == anchor


def test_fed_placeholders_bind_to_the_fed_tensor_and_are_never_imported():
    gd = _original()
    rewritten = _copy(gd)
    del rewritten.node[:2]  # x and a are cut by feeding a:0
    ph = rewritten.node.add(name="a_feed_0", op="Placeholder")
    ph.attr["dtype"].type = tf.float32.as_datatype_enum
    ph.attr[FED_TENSOR_ATTR].s = b"a:0"
    rewritten.node[0].input[:] = ["a_feed_0", "^a_feed_0"]  # b reads the placeholder
    plan = plan_splice(rewritten, _by_name(gd))
    assert plan.imported == {"b", "c"}
    assert plan.bindings == {"a_feed_0:0": "a:0", "^a_feed_0": "^a"}


def test_colocation_is_ignored_for_change_detection_and_dropped_when_foreign():
    gd = _original()
    rewritten = _copy(gd)
    by_name = _by_name(rewritten)
    by_name["kc"].attr["_class"].list.s.append(b"loc:@k")  # only _class differs: kept
    by_name["c"].attr["_class"].list.s.append(b"loc:@a")
    by_name["b"].op = "Floor"
    plan = plan_splice(rewritten, _by_name(gd))
    assert "kc" not in plan.imported
    assert plan.imported == {"b", "c"}
    assert "_class" not in _by_name(plan.graph_def)["c"].attr


def test_splice_into_graph_shares_state_and_computes_the_rewrite():
    """A variable updated through the rewritten graph is the session's own variable."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2], name="x")
        v = tf1.get_variable("v", initializer=np.array([1.0, 2.0], np.float32),
                             use_resource=False)
        y = tf.identity(tf.abs(x) * v, name="y")
        tf1.assign_add(v, y, name="update")
        tf1.global_variables_initializer()
    gd = g.as_graph_def()
    res = rewrite(gd, {}, fetches=["y:0"], feeds=["x:0"], targets=["update"])
    assert res.clusters
    rename = splice_into_graph(g, plan_splice(res.graph_def, _by_name(gd)), "spliced")
    new_y = res.tensor_map["y:0"]
    node, _, port = new_y.partition(":")
    assert rename("v") == "v"  # the variable is the session's own
    assert rename(node).startswith("spliced/")
    feed = {"x:0": np.array([-3.0, 0.5], np.float32)}
    with tf1.Session(graph=g) as sess:
        sess.run("init")
        out = sess.run([f"{rename(node)}:{port}", rename(res.op_map.get("update", "update"))],
                       feed)[0]
        np.testing.assert_array_equal(out, [3.0, 1.0])
        # The spliced update changed the original variable.
        np.testing.assert_array_equal(sess.run("v:0"), [4.0, 3.0])


def test_a_constant_whose_value_changed_is_imported_and_map_order_does_not_matter():
    """Change detection compares field values: a Const with one different element is changed,
    the same attrs written in another order are not."""
    gd = _original()
    rewritten = _copy(gd)
    k = _by_name(rewritten)["k"]
    k.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.float32(2.5)))
    c = _by_name(rewritten)["c"]
    attrs = {key: c.attr[key] for key in sorted(c.attr, reverse=True)}
    c.ClearField("attr")
    for key, value in attrs.items():
        c.attr[key].CopyFrom(value)
    plan = plan_splice(rewritten, _by_name(gd))
    assert plan.imported == {"k", "kc"}


def test_a_hoisted_weight_stays_the_users_own_const():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 64], name="x")
        w = tf.constant(np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(64, 64), name="w")
        tf.nn.relu(tf.matmul(x, w), name="y")
    gd = g.as_graph_def()
    res = rewrite(gd, {}, fetches=["y:0"], feeds=["x:0"])
    rename = splice_into_graph(g, plan_splice(res.graph_def, _by_name(gd)), "spliced")
    assert rename("w") == "w", "the hoisted weight is the user's own Const"
    with tf1.Session(graph=g) as sess:
        feed = {"x:0": np.ones([2, 64], np.float32)}
        node, _, port = res.tensor_map["y:0"].partition(":")
        np.testing.assert_array_equal(sess.run(f"{rename(node)}:{port}", feed),
                                      sess.run("y:0", feed))
