"""graph_to_function_def / rename_function / pin_arg_shapes, and the deterministic serialisation."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2

from npu_adapter.errors import GraphError
from npu_adapter.graph.functions import graph_to_function_def, pin_arg_shapes, rename_function
from npu_adapter.graph.serialize import fingerprint, to_bytes, to_text
from npu_adapter.testing import GraphBuilder

tf1 = tf.compat.v1
F32 = tf.float32.as_datatype_enum
I32 = tf.int32.as_datatype_enum


def _body():
    """p, q (placeholders = arguments) ─► s = p + q ─► u = Unique(s); ``side`` runs for effect."""
    g = tf.Graph()
    with g.as_default():
        p = tf1.placeholder(tf.float32, [None], name="p")
        q = tf1.placeholder(tf.float32, [None], name="q")
        s = tf.add(p, q, name="s")
        tf.unique(s, name="u")
        tf.no_op(name="scope/Side")
    return g.as_graph_def()


def _function(name="fn"):
    return graph_to_function_def(
        _body(), name,
        inputs=[("p", "p_arg", F32), ("q", "q_arg", F32)],
        outputs=[("s:0", "sum", F32), ("u:1", "idx", I32), ("u", "uniq", F32)],
        control_outputs=["scope/Side"])


def _call(fdef, feeds, out_types):
    """Run ``fdef`` through a PartitionedCall in a fresh graph."""
    b = GraphBuilder()
    b.add_function(fdef)
    names = [b.placeholder(f"in{k}", shape=None) for k in range(len(feeds))]
    av = attr_value_pb2.AttrValue()
    av.func.name = fdef.signature.name
    b.op("PartitionedCall", "call", names, Tin=[tf.float32] * len(names), Tout=out_types, f=av)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(b.graph_def(), name="")
    with tf1.Session(graph=graph) as sess:
        return sess.run([f"call:{k}" for k in range(len(out_types))],
                        {f"in{k}:0": v for k, v in enumerate(feeds)})


def test_signature_inputs_and_port_names():
    fdef = _function()
    assert fdef.signature.name == "fn"
    assert [(a.name, a.type) for a in fdef.signature.input_arg] == [("p_arg", F32),
                                                                   ("q_arg", F32)]
    assert [(a.name, a.type) for a in fdef.signature.output_arg] == [
        ("sum", F32), ("idx", I32), ("uniq", F32)]
    assert dict(fdef.ret) == {"sum": "s:z:0", "idx": "u:idx:0", "uniq": "u:y:0"}
    body = {n.name: n for n in fdef.node_def}
    assert "p" not in body and "q" not in body  # placeholders became arguments
    assert list(body["s"].input) == ["p_arg", "q_arg"]
    assert list(body["u"].input) == ["s:z:0"]
    assert list(fdef.signature.control_output) == ["scope_side"]
    assert dict(fdef.control_ret) == {"scope_side": "scope/Side"}
    assert not fdef.signature.is_stateful


def test_the_function_computes_what_the_graph_computes():
    p = np.array([1.0, 2.0, 1.0], np.float32)
    q = np.array([2.0, 1.0, 0.5], np.float32)
    total, idx, uniq = _call(_function(), [p, q], [tf.float32, tf.int32, tf.float32])
    np.testing.assert_array_equal(total, p + q)
    np.testing.assert_array_equal(uniq, [3.0, 1.5])  # Unique keeps first-seen order
    np.testing.assert_array_equal(idx, [0, 0, 1])


def test_conversion_is_deterministic():
    assert _function().SerializeToString(deterministic=True) == \
        _function().SerializeToString(deterministic=True)


def test_control_inputs_are_kept_in_function_form():
    b = GraphBuilder()
    b.placeholder("p")
    b.op("NoOp", "first")
    b.op("Identity", "out", ["p", "^first"], T=tf.float32)
    fdef = graph_to_function_def(b.graph_def(), "f", [("p", "p", F32)], [("out:0", "o", F32)])
    body = {n.name: n for n in fdef.node_def}
    assert list(body["out"].input) == ["p", "^first"]


@pytest.mark.parametrize("outputs, message", [
    ([("p:1", "o", F32)], "argument placeholder 'p' has a single output"),
    ([("ghost:0", "o", F32)], "function 'f': input 'ghost:0' names no node of the body"),
    ([("weird:0", "o", F32)], "function 'f': cannot map outputs of op 'NotRegistered'"),
])
def test_conversion_errors_name_the_function_and_tensor(outputs, message):
    b = GraphBuilder()
    b.placeholder("p")
    b.op("NotRegistered", "weird", ["p"])
    with pytest.raises(GraphError, match=message):
        graph_to_function_def(b.graph_def(), "f", [("p", "p", F32)], outputs)


def test_rename_function_returns_a_renamed_copy():
    fdef = _function()
    copy = rename_function(fdef, "fn_gear_0")
    assert copy.signature.name == "fn_gear_0" and fdef.signature.name == "fn"
    copy.signature.name = "fn"
    assert copy == fdef


def test_pin_arg_shapes_checks_the_shape_at_run_time():
    fdef = _function()
    pinned = pin_arg_shapes(fdef, {0: (3,)})
    assert fdef == _function()  # the input is not modified
    assert tf.TensorShape(pinned.arg_attr[0].attr["_output_shapes"].list.shape[0]).as_list() == [3]
    assert 1 not in pinned.arg_attr
    body = {n.name: n for n in pinned.node_def}
    ensure = body["p_arg_pinned_shape"]
    assert ensure.op == "EnsureShape" and list(ensure.input) == ["p_arg"]
    assert list(body["s"].input) == ["p_arg_pinned_shape:output:0", "q_arg"]
    ok = np.ones([3], np.float32)
    (total,) = _call(pinned, [ok, ok], [tf.float32, tf.int32, tf.float32])[:1]
    np.testing.assert_array_equal(total, ok * 2)
    bad = np.ones([4], np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError):
        _call(pinned, [bad, bad], [tf.float32, tf.int32, tf.float32])


def test_pin_arg_shapes_renames_returns_that_read_an_argument():
    b = GraphBuilder()
    b.placeholder("p")
    b.placeholder("q")
    b.binary("Add", "s", "p", "q")
    fdef = graph_to_function_def(b.graph_def(), "f", [("p", "p", F32), ("q", "q", F32)],
                                 [("p:0", "passthrough", F32), ("s:0", "total", F32)])
    assert fdef.ret["passthrough"] == "p"
    pinned = pin_arg_shapes(fdef, {0: (2,), 1: (2,)})
    assert pinned.ret["passthrough"] == "p_pinned_shape:output:0"
    body = {n.name: n for n in pinned.node_def}
    assert list(body["s"].input) == ["p_pinned_shape:output:0", "q_pinned_shape:output:0"]


# --------------------------------------------------------------------------- serialize
def _attr_order_variants():
    """The same GraphDef built with node attrs inserted in two different orders."""
    out = []
    for keys in (("T", "_a", "_b"), ("_b", "_a", "T")):
        gd = graph_pb2.GraphDef()
        node = gd.node.add(name="n", op="Identity", input=["x"])
        for key in keys:
            if key == "T":
                node.attr["T"].type = F32
            else:
                node.attr[key].s = key.encode()
        out.append(gd)
    return out


def test_serialisation_does_not_depend_on_attr_insertion_order():
    a, b = _attr_order_variants()
    assert to_bytes(a) == to_bytes(b)
    assert to_text(a) == to_text(b)
    assert fingerprint(a) == fingerprint(b)
    assert len(fingerprint(a)) == 64 and int(fingerprint(a), 16) >= 0


def test_fingerprint_changes_with_content():
    a, _ = _attr_order_variants()
    b = graph_pb2.GraphDef()
    b.CopyFrom(a)
    b.node[0].attr["_a"].s = b"other"
    assert fingerprint(a) != fingerprint(b)
    assert graph_pb2.GraphDef.FromString(to_bytes(a)) == a
