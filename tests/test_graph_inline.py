"""Inlining cluster calls (npu_adapter/graph/inline.py), as CPU-reference sessions install them.

Each inlined graph is run by plain TensorFlow and compared with the graph that still calls the
function: same values, and the call's control edges still order what they ordered.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from npu_adapter.config import NpuConfig
from npu_adapter.graph import inline
from npu_adapter.graph.functions import graph_to_function_def
from npu_adapter.session import NpuSession, plain_session_class, runner_of

tf1 = tf.compat.v1
PlainSession = plain_session_class()
FLOAT, RESOURCE = types_pb2.DT_FLOAT, types_pb2.DT_RESOURCE


def _function(name, build, inputs, outputs, control_outputs=()):
    """A FunctionDef whose body ``build(placeholders)`` writes into a fresh graph."""
    body = tf.Graph()
    with body.as_default():
        args = [tf1.placeholder(tf.as_dtype(dtype), name=arg) for arg, dtype in inputs]
        build(*args)
    return graph_to_function_def(
        body.as_graph_def(), name, [(arg, arg, dtype) for arg, dtype in inputs],
        [(tensor, out, dtype) for tensor, out, dtype in outputs], is_stateful=True,
        control_outputs=control_outputs)


def _outer(build):
    """The GraphDef of ``build()`` written into a fresh graph."""
    graph = tf.Graph()
    with graph.as_default():
        build()
    return graph.as_graph_def()


def _add_call(graph_def, fdef, inputs, name="call"):
    call = graph_def.node.add(name=name, op="StatefulPartitionedCall")
    call.input.extend(inputs)
    call.attr["f"].func.name = fdef.signature.name
    call.attr["Tin"].list.type.extend(a.type for a in fdef.signature.input_arg)
    call.attr["Tout"].list.type.extend(a.type for a in fdef.signature.output_arg)
    for key in ("config", "config_proto", "executor_type"):
        call.attr[key].s = b""
    graph_def.library.function.add().CopyFrom(fdef)
    return call


def _run(graph_def, fetch):
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with PlainSession(graph=graph) as sess:
        return sess.run(fetch)


def _variable():
    handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name="v", name="v")
    return handle


def _read_twice():
    """F(h) = 2 * read(h)."""
    def build(h):
        tf.multiply(tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32, name="read"),
                    2.0, name="y")
    return _function("F", build, [("h", RESOURCE)], [("y:0", "y", FLOAT)])


def _gated_graph():
    """call(v, ^assign) with assign: v = 5 and F reading v: the call must see 5."""
    def build():
        handle = _variable()
        tf.raw_ops.AssignVariableOp(resource=handle, value=tf.constant(5.0), name="assign")

    graph_def = _outer(build)
    _add_call(graph_def, _read_twice(), ["v", "^assign"])
    return graph_def


def test_an_inlined_call_computes_what_the_call_does_after_its_control_inputs():
    graph_def = _gated_graph()
    inlined, names = inline.inline_calls(graph_def)[:2]
    assert names == ["call"]
    nodes = {n.name: n for n in inlined.node}
    # The body under the call's name; the call's name now an IdentityN of the results.
    assert {"call/read", "call/y", "call/y/y"} <= set(nodes)
    assert nodes["call"].op == "IdentityN"
    assert list(nodes["call"].attr["T"].list.type) == [FLOAT]
    assert nodes["call"].input[0] == "call/y"
    # The argument is the call's input; the body waits for the call's control input.
    assert nodes["call/read"].input[0] == "v"
    gate = nodes["call/input_control_node"]
    assert gate.op == "NoOp" and list(gate.input) == ["^assign"]
    assert "^call/input_control_node" in nodes["call/read"].input
    assert not inlined.library.function  # nothing calls F any more
    assert _run(graph_def, "call:0") == _run(inlined, "call:0") == 10.0


def test_a_control_consumer_of_an_inlined_call_waits_for_the_whole_body():
    def build(h):
        tf.raw_ops.AssignVariableOp(resource=h, value=tf.constant(7.0, name="seven"),
                                    name="write")
        tf.constant(1.0, name="one")
    fdef = _function("W", build, [("h", RESOURCE)], [("one:0", "one", FLOAT)],
                     control_outputs=["write"])
    graph_def = _outer(_variable)
    _add_call(graph_def, fdef, ["v"])
    read = graph_def.node.add(name="after", op="ReadVariableOp", input=["v", "^call"])
    read.attr["dtype"].type = FLOAT
    inlined, _ = inline.inline_calls(graph_def)[:2]
    stand = next(n for n in inlined.node if n.name == "call")
    assert "^call/write" in stand.input
    assert _run(graph_def, "after:0") == _run(inlined, "after:0") == 7.0


def test_a_result_passed_through_from_an_argument_still_waits_for_the_control_inputs():
    def build(x):
        tf.identity(x, name="same")
    fdef = _function("P", build, [("x", FLOAT)], [("x:0", "out", FLOAT)])
    graph_def = _outer(lambda: (tf.constant(3.0, name="three"), tf.no_op(name="first")))
    _add_call(graph_def, fdef, ["three", "^first"])
    inlined, _ = inline.inline_calls(graph_def)[:2]
    stand = next(n for n in inlined.node if n.name == "call")
    assert stand.input[0] == "three" and "^call/input_control_node" in stand.input
    assert _run(inlined, "call:0") == 3.0


def _read_and_triple():
    """F2(h, x) = (read(h), 3 * x)."""
    def build(h, x):
        tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32, name="read")
        tf.multiply(x, 3.0, name="z")
    return _function("F2", build, [("h", RESOURCE), ("x", FLOAT)],
                     [("read:0", "read", FLOAT), ("z:0", "z", FLOAT)])


def _record(call, *entries):
    call.attr["_npu_adapter_control_inputs"].list.s.extend(e.encode() for e in entries)


def test_a_body_node_waits_for_the_control_input_the_call_records_for_it():
    """The call records that ``read`` (input 1) waited for ``assign``: inlined, ``read`` waits
    for it itself and ``z``, which did not, is not held back."""
    graph_def = _gated_graph()
    del graph_def.node[-1]  # (the call of F)
    graph_def.node.add().CopyFrom(_outer(lambda: tf.constant(2.0, name="two")).node[0])
    _record(_add_call(graph_def, _read_and_triple(), ["v", "two", "^assign"]),
            "read 1 assign assign")
    inlined = inline.inline_calls(graph_def, body_names=True).graph_def
    nodes = {n.name: n for n in inlined.node}
    assert list(nodes["read"].input) == ["v", "^assign"]
    assert list(nodes["z"].input) == ["two", "z/y"]
    assert not any(n.name.endswith("input_control_node") for n in inlined.node)
    for fetch, value in (("call:0", 5.0), ("call:1", 6.0)):
        assert _run(graph_def, fetch) == _run(inlined, fetch) == value


def test_records_that_do_not_match_the_call_leave_the_whole_body_held_back():
    graph_def = _gated_graph()
    _record(graph_def.node[-1], "read 1 elsewhere elsewhere")  # not a control input of the call
    nodes = {n.name: n for n in inline.inline_calls(graph_def).graph_def.node}
    assert list(nodes["call/input_control_node"].input) == ["^assign"]
    assert "^call/input_control_node" in nodes["call/read"].input


def test_a_wait_for_a_member_of_another_inlined_call_is_a_wait_for_that_member():
    """``second``'s ``read`` waited for ``first``'s ``one`` (the call waits for the whole of
    ``first``): inlined, it waits for ``one`` itself, and nothing waits for ``first``."""
    def build(h):
        tf.raw_ops.AssignVariableOp(resource=h, value=tf.constant(5.0, name="five"), name="one")
        tf.constant(2.0, name="two")
    writes = _function("W", build, [("h", RESOURCE)], [("two:0", "two", FLOAT)],
                       control_outputs=["one"])
    graph_def = _outer(_variable)
    _add_call(graph_def, writes, ["v"], name="first")
    second = _add_call(graph_def, _read_and_triple(), ["v", "first", "^first"], name="second")
    _record(second, "read 1 first one")
    inlined = inline.inline_calls(graph_def, body_names=True, direct_results=True).graph_def
    nodes = {n.name: n for n in inlined.node}
    assert list(nodes["read"].input) == ["v", "^one"]
    assert "first" not in nodes and list(nodes["z"].input) == ["two", "z/y"]
    again = inline.inline_calls(graph_def, body_names=True, direct_results=True).graph_def
    assert again.SerializeToString(deterministic=True) == \
        inlined.SerializeToString(deterministic=True)
    assert _run(graph_def, "second:0") == _run(inlined, "read:0") == 5.0
    assert _run(graph_def, "second:1") == _run(inlined, "z:0") == 6.0


def _noinline(fdef):
    fdef.attr["_noinline"].b = True
    return fdef


def _frame(fdef):
    switch = fdef.node_def.add(name="switch", op="Switch")
    switch.input.extend(["y:z:0", "y:z:0"])
    return fdef


@pytest.mark.parametrize("spoil", [_noinline, _frame], ids=["noinline", "tf1_control_flow"])
def test_calls_inlining_could_change_are_left_alone(spoil):
    graph_def = _outer(_variable)
    _add_call(graph_def, spoil(_read_twice()), ["v"])
    assert inline.inline_calls(graph_def)[:2] == (graph_def, [])


def test_a_call_whose_body_names_are_taken_is_left_alone():
    graph_def = _outer(lambda: (_variable(), tf.constant(0.0, name="call/y")))
    _add_call(graph_def, _read_twice(), ["v"])
    assert inline.inline_calls(graph_def)[:2] == (graph_def, [])


def test_functions_still_referred_to_stay_in_the_library():
    graph_def = _gated_graph()
    other = _read_twice()
    other.signature.name = "G"
    _add_call(graph_def, other, ["v"], name="kept")
    gradient = graph_def.library.gradient.add(function_name="F", gradient_func="G")
    del gradient
    inlined, names = inline.inline_calls(graph_def, lambda call, fdef: call.name == "call")[:2]
    assert names == ["call"]
    # G: still called; F: named by a gradient entry.
    assert sorted(f.signature.name for f in inlined.library.function) == ["F", "G"]
    assert len(inlined.library.gradient) == 1
    again, _ = inline.inline_calls(graph_def, lambda call, fdef: call.name == "call")[:2]
    assert again.SerializeToString(deterministic=True) == \
        inlined.SerializeToString(deterministic=True)


# ------------------------------------------------------------------------------ sessions
def _model():
    graph = tf.Graph()
    rs = np.random.RandomState(0)
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 16], name="x")
        w = tf.constant(rs.randn(16, 16).astype(np.float32), name="w")
        b = tf.constant(rs.randn(16).astype(np.float32), name="b")
        y = tf.nn.softmax(tf.tanh(tf.matmul(x, w) + b), name="y")
        tf.constant(rs.randn(4).astype(np.float32), name="unused")
    return graph, x, y


def _call_ops(graph):
    return [op for op in graph.get_operations() if op.type in inline.CALL_OPS]


def test_a_variable_no_signature_runs_keeps_the_session_reusable():
    """The execution graph holds every user node, but only what sessions run can hold state: a
    variable the signatures never touch leaves a closed session's TensorFlow session free to
    serve the next one (npu_adapter/session/reuse.py)."""
    graph, x, y = _model()
    with graph.as_default():
        tf1.Variable(1.0, name="elsewhere")
    feed = {x: np.ones((1, 16), np.float32)}
    want = PlainSession(graph=graph).run(y, feed)
    reused = []
    for _ in range(2):
        with NpuSession(graph=graph, config=NpuConfig.from_dict({}).to_config_proto()) as sess:
            np.testing.assert_array_equal(sess.run(y, feed), want)
            reused.append(runner_of(sess).reused)
    assert reused == [False, True]


def test_a_session_computes_the_sign_grapplers_inlining_gets_wrong(monkeypatch):
    # TF 2.15-2.21: once Grappler inlines a cluster call, its arithmetic optimizer drops one Neg
    # of Neg(Neg(Mul(Neg(x), y))) when Neg(x) is also a result of the function
    # (tests/test_partition_properties.py). A session installs the call inlined already, as
    # the user's own nodes: the numbers are plain TensorFlow's.
    from graph_cases import grappler_sign_graph

    from npu_adapter.backends.cpu import CpuReferenceBackend
    from npu_adapter.op_support import OpSupportList

    monkeypatch.setattr(CpuReferenceBackend, "op_support",
                        lambda self, config: OpSupportList.from_names(["Neg", "Mul"]))
    graph_def, feeds, fetches = grappler_sign_graph()
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    want = PlainSession(graph=graph).run(fetches, feeds)
    with NpuSession(graph=graph, config=NpuConfig.from_dict({}).to_config_proto()) as sess:
        got = sess.run(fetches, feeds)
        clusters = runner_of(sess).rewrite_result(fetches, feeds).clusters
    assert [set(c.nodes) for c in clusters] == [{"neg_x", "prod", "neg_prod"}]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], [-8.0, -3.0])
    np.testing.assert_array_equal(got[1], want[1])
