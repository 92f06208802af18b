"""npu_adapter.testing: builders, structural comparison, the numerical-equivalence harness."""

import contextlib

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, function_pb2, types_pb2

import npu_adapter.passes
from npu_adapter.pipeline import registry
from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.testing import (
    GraphBuilder,
    assert_graph_equal,
    assert_rewrite_equivalent,
    attr_value,
    canonical_edges,
    compare_values,
    graph_defs_equal,
    node_def,
    run_graph_def,
)

tf1 = tf.compat.v1


# --------------------------------------------------------------------------- attr_value
@pytest.mark.parametrize("value, field, expected", [
    (tf.float16, "type", types_pb2.DT_HALF),
    (True, "b", True),
    (3, "i", 3),
    (np.int64(4), "i", 4),
    (2.5, "f", 2.5),
    ("text", "s", b"text"),
    (b"raw", "s", b"raw"),
])
def test_attr_value_scalars(value, field, expected):
    av = attr_value(value)
    assert av.WhichOneof("value") == field
    assert getattr(av, field) == expected


def test_attr_value_lists_shapes_and_tensors():
    assert list(attr_value([tf.float32, tf.int32]).list.type) == [types_pb2.DT_FLOAT,
                                                                  types_pb2.DT_INT32]
    assert list(attr_value([True, False]).list.b) == [True, False]
    assert list(attr_value([1, 2]).list.i) == [1, 2]
    assert list(attr_value([0.5]).list.f) == [0.5]
    assert list(attr_value(["a", b"b"]).list.s) == [b"a", b"b"]
    empty = attr_value([], "Tin")
    assert empty.WhichOneof("value") == "list" and not empty.list.type
    shape = attr_value([None, 3], "shape")
    assert tf.TensorShape(shape.shape).as_list() == [None, 3]
    assert tf.TensorShape(attr_value(tf.TensorShape([2])).shape).as_list() == [2]
    tensor = attr_value(np.array([[1, 2]], np.int32)).tensor
    np.testing.assert_array_equal(tf.make_ndarray(tensor), [[1, 2]])
    proto = attr_value_pb2.AttrValue(i=9)
    copy = attr_value(proto)
    assert copy == proto and copy is not proto


@pytest.mark.parametrize("value, message", [
    ([1, "a"], "cannot convert list attr 'k': \\[1, 'a'\\]"),
    ({"a": 1}, "cannot convert attr 'k' of type dict"),
    (None, "cannot convert attr 'k' of type NoneType"),
])
def test_attr_value_rejects_what_it_cannot_convert(value, message):
    with pytest.raises(TypeError, match=message):
        attr_value(value, "k")


# --------------------------------------------------------------------------- builder
def test_node_def_and_builder():
    node = node_def("Add", "sum", ["a", "b:1", "^c"], device="/cpu:0", T=tf.float32)
    assert (node.op, node.name, list(node.input), node.device) == \
        ("Add", "sum", ["a", "b:1", "^c"], "/cpu:0")
    assert node.attr["T"].type == types_pb2.DT_FLOAT

    b = GraphBuilder()
    assert b.placeholder("x") == "x"
    b.placeholder("y", dtype=tf.int32, shape=[None, 2])
    b.const("c", [1.0, 2.0])  # numpy's default dtype: float64
    b.const("c32", [1.0, 2.0], dtype=tf.float32)
    b.const("k", 3, dtype=tf.int64)
    b.binary("Mul", "m", "x", "c")
    b.unary("Abs", "a", "m", extra_inputs=["^k"])
    b.set_attr("a", "_marker", "yes")
    with pytest.raises(KeyError):
        b.set_attr("missing", "_marker", 1)
    gd = b.graph_def()
    nodes = {n.name: n for n in gd.node}
    assert "shape" not in nodes["x"].attr
    assert nodes["y"].attr["dtype"].type == types_pb2.DT_INT32
    assert tf.TensorShape(nodes["y"].attr["shape"].shape).as_list() == [None, 2]
    assert nodes["c"].attr["dtype"].type == types_pb2.DT_DOUBLE
    assert nodes["c32"].attr["dtype"].type == types_pb2.DT_FLOAT
    assert nodes["c32"].attr["value"].tensor.dtype == types_pb2.DT_FLOAT
    assert nodes["k"].attr["dtype"].type == types_pb2.DT_INT64
    assert tf.make_ndarray(nodes["k"].attr["value"].tensor) == 3
    assert list(nodes["a"].input) == ["m", "^k"]
    assert nodes["a"].attr["_marker"].s == b"yes"
    assert gd.versions.producer > 0
    # graph_def() is a copy: editing it leaves the builder alone.
    gd.node[0].name = "renamed"
    assert b.graph_def().node[0].name == "x"


def test_builder_graphs_run():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.const("c", np.array([2.0, -1.0], np.float32))
    b.binary("Mul", "m", "x", "c")
    b.unary("Abs", "a", "m")
    (out,) = run_graph_def(b.graph_def(), ["a:0"], {"x": np.array([1.5, 3.0], np.float32)})
    np.testing.assert_array_equal(out, [3.0, 3.0])


def test_run_graph_def_runs_init_and_targets():
    b = GraphBuilder()
    b.op("VariableV2", "v", dtype=tf.float32, shape=[], container="", shared_name="")
    b.const("one", np.float32(1.0))
    b.op("Assign", "init", ["v", "one"], T=tf.float32)
    b.op("AssignAdd", "bump", ["v", "one"], T=tf.float32)
    b.op("Identity", "read", ["v"], T=tf.float32)
    (value,) = run_graph_def(b.graph_def(), ["read:0"], init=["init"])
    assert value == 1.0


# --------------------------------------------------------------------------- comparison
def _pair():
    b = GraphBuilder()
    b.placeholder("x")
    b.op("NoOp", "i1")
    b.op("NoOp", "i2")
    b.binary("Sub", "d", "x", "x")
    b.op("Identity", "out", ["d", "^i1", "^i2"], T=tf.float32)
    first = b.graph_def()
    second = b.graph_def()
    # Reverse the node order and the order of the control inputs.
    nodes = list(second.node)[::-1]
    del second.node[:]
    second.node.extend(nodes)
    out = next(n for n in second.node if n.name == "out")
    out.input[:] = ["d", "^i2", "^i1"]
    return first, second


def test_graphs_compare_equal_regardless_of_node_and_control_order():
    first, second = _pair()
    assert graph_defs_equal(first, second)
    assert_graph_equal(first, second)


def test_data_input_order_matters():
    first, second = _pair()
    d = next(n for n in second.node if n.name == "d")
    d.input[:] = ["x", "x:0"]  # same tensor, spelled differently: a real difference
    assert not graph_defs_equal(first, second)


def test_diff_is_readable_and_ignore_attrs_works():
    first, second = _pair()
    next(n for n in second.node if n.name == "d").attr["_note"].s = b"added"
    with pytest.raises(AssertionError) as info:
        assert_graph_equal(second, first)
    text = str(info.value)
    assert text.startswith("GraphDefs differ:")
    assert "--- expected" in text and "+++ actual" in text
    assert "+" in text and "_note" in text and "added" in text
    assert_graph_equal(second, first, ignore_attrs=("_note",))


def test_long_diffs_are_truncated():
    first, second = _pair()
    for node in second.node:
        for k in range(30):
            node.attr[f"_extra_{k}"].i = k
    with pytest.raises(AssertionError, match=r"\.\.\. \(\d+ more diff lines\)") as info:
        assert_graph_equal(second, first, max_lines=10)
    assert len(str(info.value).splitlines()) <= 12


def test_library_functions_are_compared():
    first, second = _pair()
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = "helper"
    second.library.function.add().CopyFrom(fdef)
    assert not graph_defs_equal(first, second)
    with pytest.raises(AssertionError, match="helper"):
        assert_graph_equal(second, first)


def test_canonical_edges_format():
    b = GraphBuilder()
    b.placeholder("x")
    b.op("Unique", "u", ["x"], T=tf.float32, out_idx=tf.int32)
    b.op("NoOp", "init")
    b.op("Pack", "p", ["u", "^init", "u:1"], T=tf.float32, N=2)  # control in the middle
    gd = b.graph_def()
    assert canonical_edges(gd) == ["init:control->p:control", "u->p", "u:1->p:1", "x->u"]
    assert canonical_edges(gd, names={"u": "U", "p": "P"}) == [
        "U->P", "U:1->P:1", "init:control->P:control", "x->U"]


def test_compare_values():
    compare_values(np.float32([1.0, np.nan]), np.float32([1.0, np.nan]))  # NaNs compare equal
    compare_values(np.float32(0.0), np.float32(-0.0))
    with pytest.raises(AssertionError, match="differs after the rewrite \\(max abs difference"):
        compare_values(np.float32([1.0]), np.float32([1.0 + 1e-6]), what="fetch 'y'")
    compare_values(np.float32([1.0]), np.float32([1.0 + 1e-6]), rtol=1e-5)
    with pytest.raises(AssertionError, match=r"fetch 'y': expected float32\[2\], got float64\[2\]"):
        compare_values(np.float32([1, 2]), np.float64([1, 2]), what="fetch 'y'")
    with pytest.raises(AssertionError, match=r"expected int32\[2\], got int32\[3\]"):
        compare_values(np.int32([1, 2]), np.int32([1, 2, 3]))
    with pytest.raises(AssertionError, match="differs"):
        compare_values(np.int32([1, 2]), np.int32([1, 3]), rtol=0.5)  # ints compare exactly


# --------------------------------------------------------------------------- equivalence
def _dense_graph():
    """x ─► MatMul(w) ─► Add(b) ─► Relu ─► out, with a variable w updated by ``train``."""
    g = tf.Graph()
    with g.as_default():
        tf1.set_random_seed(3)
        x = tf1.placeholder(tf.float32, [2, 3], name="x")
        w = tf1.get_variable("w", [3, 2], use_resource=False)
        y = tf.nn.relu(tf.matmul(x, w) + 0.5, name="out")
        loss = tf.reduce_sum(y, name="loss")
        tf1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        tf1.global_variables_initializer()
    return g.as_graph_def()


def test_equivalence_harness_accepts_a_correct_rewrite_over_several_steps():
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    res = assert_rewrite_equivalent(_dense_graph(), {"mix_compile_mode": True}, feeds,
                                    ["out", "loss:0"], targets=["train"], init=["init"], steps=3)
    assert res.clusters and res.modified


class _CorruptConst(PassBase):
    """A buggy pass: changes the value of the scalar Const ``add/y`` (0.5 → 0.25)."""

    name = "corrupt_const_for_test"

    def run(self, graph_def, ctx, view):
        out = type(graph_def)()
        out.CopyFrom(graph_def)
        for node in out.node:
            if node.op == "Const" and node.name.endswith("add/y"):
                node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.float32(0.25)))
        return PassResult(out, True)


@contextlib.contextmanager
def _registered(cls):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
        registry.register_pass(cls)
        yield


def test_equivalence_harness_catches_a_wrong_rewrite():
    feeds = {"x:0": np.arange(6, dtype=np.float32).reshape(2, 3)}
    pipeline = "corrupt_const_for_test," + npu_adapter.passes.DEFAULT_PIPELINE
    with _registered(_CorruptConst), \
            pytest.raises(AssertionError, match="fetch 'out:0' at step 0 differs"):
        assert_rewrite_equivalent(_dense_graph(), {}, feeds, ["out:0"], init=["init"],
                                  pipeline=pipeline)


def test_equivalence_harness_tolerances():
    feeds = {"x:0": np.arange(6, dtype=np.float32).reshape(2, 3)}
    pipeline = "corrupt_const_for_test," + npu_adapter.passes.DEFAULT_PIPELINE
    with _registered(_CorruptConst):
        assert_rewrite_equivalent(_dense_graph(), {}, feeds, ["out:0"], init=["init"],
                                  pipeline=pipeline, atol=0.3)
