"""The wire form of a GraphDef (npu_adapter/graph/serialized.py) and the shadow graph's import of
the user's nodes from it."""

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import control_flow_v1
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorflow.core.framework import graph_pb2

from npu_adapter.config import NpuConfig
from npu_adapter.graph import serialized as wire
from npu_adapter.session import NpuSession, plain_session_class
from npu_adapter.session import shadow as shadow_module
from npu_adapter.session.shadow import ShadowGraph

tf1 = tf.compat.v1
PlainSession = plain_session_class()


def weights_graph(big=(256, 256)):
    """A frozen-model-like graph: Consts read through ``/read`` Identities, a placeholder, a
    colocated Identity and an op without outputs the fetch depends on through a control edge."""
    graph = tf.Graph()
    rs = np.random.RandomState(0)
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, big[0]], name="x")
        w1 = tf.constant(rs.randn(*big).astype(np.float32), name="w1")
        w2 = tf.constant(rs.randn(big[1], 8).astype(np.float32), name="w2")
        w1_read = tf.identity(w1, name="w1/read")
        with tf1.colocate_with(w2):
            w2_read = tf.identity(w2, name="w2/read")
        hidden = tf.nn.relu(tf.matmul(x, w1_read), name="hidden")
        done = tf.no_op(name="done")
        with tf1.control_dependencies([done]):
            out = tf.identity(tf.matmul(hidden, w2_read), name="out")
    return graph, x, out


# ------------------------------------------------------------------------------ wire form
def test_spans_cut_the_bytes_into_the_parsed_nodes():
    graph, _, _ = weights_graph()
    graph_def, serialized = wire.serialized_graph_def(graph)
    assert graph_def == graph.as_graph_def()
    spans = wire.node_spans(serialized.data)
    assert len(spans) == len(graph_def.node)
    for node, (start, end) in zip(graph_def.node, spans):
        one = graph_pb2.GraphDef.FromString(serialized.data[start:end])
        assert list(one.node) == [node]
    # Joined slices are a GraphDef holding those nodes.
    picked = [1, 3]
    data = b"".join(serialized.data[spans[k][0]:spans[k][1]] for k in picked)
    assert list(graph_pb2.GraphDef.FromString(data).node) == [graph_def.node[k]
                                                              for k in picked]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.binary(max_size=300)),
                max_size=6),
       st.integers(min_value=0, max_value=2000))
def test_spans_and_frames_round_trip_any_graph_def(nodes, producer):
    graph_def = graph_pb2.GraphDef()
    graph_def.versions.producer = producer
    for name, payload in nodes:
        node = graph_def.node.add(name=name, op="Const")
        node.attr["value"].tensor.tensor_content = payload
    data = graph_def.SerializeToString()
    spans = wire.node_spans(data)
    assert [graph_pb2.GraphDef.FromString(data[a:b]).node[0] for a, b in spans] == \
        list(graph_def.node)
    framed = b"".join(wire.frame_node(n.SerializeToString()) for n in graph_def.node)
    assert list(graph_pb2.GraphDef.FromString(framed).node) == list(graph_def.node)


@pytest.mark.parametrize("data", [b"\x0a\x05abc", b"\x0a", b"\x0f", b"\x0a\x80"])
def test_spans_of_malformed_bytes_raise(data):
    with pytest.raises(ValueError):
        wire.node_spans(data)


def test_node_bytes_picks_names_and_leaves_out_a_name_held_twice():
    graph_def = graph_pb2.GraphDef()
    for name in ("a", "b", "a", "c"):
        graph_def.node.add(name=name, op="NoOp")
    serialized = wire.SerializedGraph(graph_def.SerializeToString(),
                                      [n.name for n in graph_def.node])
    picked = serialized.node_bytes({"a", "c"})
    assert set(picked) == {"c"}
    assert graph_pb2.GraphDef.FromString(bytes(picked["c"])).node[0].name == "c"
    broken = wire.SerializedGraph(graph_def.SerializeToString(), ["a", "b"])
    with pytest.raises(ValueError, match="disagree"):
        broken.node_bytes({"a"})


def test_import_serialized_equals_import_graph_def():
    graph, _, _ = weights_graph((16, 16))
    graph_def, serialized = wire.serialized_graph_def(graph)
    assert wire.raw_import_supported()
    ours = tf.Graph()
    wire.import_serialized(ours, serialized.data)
    theirs = tf.Graph()
    with theirs.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    assert ours.as_graph_def() == theirs.as_graph_def()
    assert ours.get_operation_by_name("w2/read").colocation_groups() == [b"loc:@w2"]


@pytest.mark.parametrize("scope", ["", "outer"])
def test_naming_the_colocated_nodes_registers_the_ops_as_import_graph_def_does(scope):
    # Devices: an op with its own device keeps it; a colocated op takes its group's device
    # (or none), as importer._ProcessNewOps decides; the buffer import takes the same path.
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/device:CPU:0"):
            a = tf.constant([1.0], name="a")
        b = tf.constant([2.0], name="b")
        with tf1.colocate_with(a):
            tf.identity(b, name="near_a")
        with tf1.colocate_with(b), tf.device("/device:CPU:0"):
            tf.identity(a, name="near_b")
    graph_def, serialized = wire.serialized_graph_def(graph, keep_buffer=True)
    colocated = {n.name for n in graph_def.node if "_class" in n.attr}
    assert colocated == {"near_a", "near_b"}
    ours = tf.Graph()
    wire.import_serialized(ours, serialized.data, scope=scope, colocated=colocated)
    theirs = tf.Graph()
    with theirs.as_default():
        tf.graph_util.import_graph_def(graph_def, name=scope)
    assert ours.as_graph_def() == theirs.as_graph_def()
    assert [op.device for op in ours.get_operations()] == \
        [op.device for op in theirs.get_operations()]
    if not scope:
        from_buffer = tf.Graph()
        wire.import_buffer(from_buffer, serialized.buffer, colocated=colocated)
        assert from_buffer.as_graph_def() == theirs.as_graph_def()
    serialized.release()
    assert serialized.buffer is None


def test_import_serialized_binds_the_input_map_and_names_a_missing_key():
    source = graph_pb2.GraphDef()
    node = source.node.add(name="y", op="Identity", input=["x:0", "^gate"])
    node.attr["T"].type = tf.float32.as_datatype_enum
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(2.0, name="x_in_graph")
        gate = tf.constant(0.0, name="gate_in_graph")
    wire.import_serialized(graph, source.SerializeToString(), {"x:0": x, "^gate": gate})
    y = graph.get_operation_by_name("y")
    assert y.inputs[0] is x and y.control_inputs == [gate.op]
    with PlainSession(graph=graph) as sess:
        assert sess.run(y.outputs[0]) == 2.0
    with pytest.raises(ValueError, match="not found in graph_def: \\[nothing:0\\]"):
        wire.import_serialized(graph, source.SerializeToString(),
                               {"x:0": x, "^gate": gate, "nothing:0": x})
    with pytest.raises(ValueError):
        wire.import_serialized(tf.Graph(), source.SerializeToString())  # x is unknown


# ------------------------------------------------------------------------ read op by op
def edited_graph():
    """A graph whose ops' own NodeDefs are not as ``as_graph_def`` writes them: a TF1 while
    loop (its Merge's back edge is set with ``_update_input``: ``next:0``), control inputs
    added out of name order and after the op was made, an input updated by hand, and a copy
    imported with an ``input_map``."""
    graph = tf.Graph()
    with graph.as_default(), control_flow_v1():
        i = tf1.placeholder(tf.float32, [], name="i")
        loop = tf1.while_loop(lambda v: v < 10.0, lambda v: v + 1.0, [i], name="loop")
        c = tf.constant(1.0, name="c")
        b = tf.constant(2.0, name="b")
        a = tf.constant(3.0, name="a")
        with tf1.control_dependencies([c, a, b]):
            w = tf.identity(loop, name="w")
        w.op._add_control_input(i.op)
        m = tf.add(w, 1.0, name="m")
        m.op._update_input(1, c)
    copy = graph.as_graph_def()
    with graph.as_default():
        p = tf1.placeholder(tf.float32, [], name="p")
        tf.import_graph_def(copy, input_map={"i:0": p}, name="imported")
    return graph


@pytest.mark.parametrize("build", [lambda: weights_graph()[0], edited_graph])
def test_nodes_read_op_by_op_are_what_as_graph_def_writes(build):
    graph = build()
    graph_def, serialized = wire.per_node_graph_def(graph)
    assert graph_def.SerializeToString(deterministic=True) == \
        graph.as_graph_def().SerializeToString(deterministic=True)
    assert serialized.buffer is None  # nothing of TensorFlow's kept until asked
    # Each node's wire form is TensorFlow's NodeDef of the op; where that is not the parsed
    # node (inputs rewritten as the edges say), it is left out of the wire forms.
    names = {node.name for node in graph_def.node}
    found = serialized.node_bytes(names)
    for node in graph_def.node:
        if node.name in found:
            one = graph_pb2.GraphDef.FromString(bytes(found[node.name]))
            assert list(one.node) == [node]
    left_out = names - set(found)
    if build is edited_graph:
        # w: control inputs out of order; m, loop/Merge: updated inputs (c:0, NextIteration:0);
        # imported/loop/Enter: bound by the input_map (p:0). The import wrote the rest as
        # as_graph_def does.
        assert left_out == {"w", "m", "loop/Merge", "imported/loop/Enter"}
    else:
        assert not left_out
    assert serialized.byte_count(names) == sum(
        len(graph.get_operation_by_name(n)._node_def) for n in names)


@pytest.mark.parametrize("name", ["small_cnn", "lenet_train", "lenet_train_resource",
                                  "bert_tiny", "lstm"])
def test_models_read_op_by_op_are_what_as_graph_def_writes(name):
    from bench import models

    spec = models.get_model(name)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(spec.graph_def, name="")
    read = wire.per_node_graph_def(graph)
    if read is None:  # a model with functions is read whole
        assert graph.as_graph_def().library.function
        return
    assert read[0].SerializeToString(deterministic=True) == \
        graph.as_graph_def().SerializeToString(deterministic=True)


def test_the_whole_buffer_of_nodes_read_op_by_op_is_serialised_when_asked():
    graph, _, _ = weights_graph()
    graph_def, serialized = wire.per_node_graph_def(graph)
    buffer = serialized.whole_buffer()
    assert buffer is not None and serialized.whole_buffer() is buffer
    into = tf.Graph()
    wire.import_buffer(into, buffer)
    assert into.as_graph_def().node == graph_def.node
    serialized.release()
    assert serialized.buffer is None


def test_a_graph_with_functions_is_read_whole():
    graph, _, _ = weights_graph()

    @tf.function
    def double(t):
        return t * 2.0

    double.get_concrete_function(tf.TensorSpec([], tf.float32)).add_to_graph(graph)
    assert wire.per_node_graph_def(graph) is None
    graph_def, serialized = wire.serialized_graph_def(graph)
    assert graph_def == graph.as_graph_def() and graph_def.library.function


# ------------------------------------------------------------------------- in the shadow
@pytest.fixture
def taken(monkeypatch):
    """The names of the nodes each install takes from the bytes, one set per install.

    The shadow's first install imports the user's whole graph from TensorFlow's buffer when it
    can (tests/test_graph_inline.py); that is turned off here, so these tests see the node by
    node import that later installs and graphs with functions take."""
    monkeypatch.setattr(ShadowGraph, "_import_user_graph", lambda self, *args: False)
    found_per_install = []
    real = wire.SerializedGraph.node_bytes

    def spy(self, names):
        found = real(self, names)
        found_per_install.append(set(found))
        return found

    monkeypatch.setattr(wire.SerializedGraph, "node_bytes", spy)
    return found_per_install


def test_the_first_session_imports_the_users_nodes_from_their_bytes(taken):
    graph, x, out = weights_graph()
    feed = {x: np.random.RandomState(1).randn(3, 256).astype(np.float32)}
    with PlainSession(graph=graph) as sess:
        expected = sess.run(out, feed)
    # (A frozen graph's signature would run on the user's graph: session/direct.py.)
    config = NpuConfig.from_dict({"npu_adapter_run_on_user_graph": False}).to_config_proto()
    with NpuSession(graph=graph, config=config) as sess:
        got = sess.run(out, feed)
    np.testing.assert_array_equal(got, expected)
    # The user's nodes the shadow holds under their own names come from the bytes: the
    # cluster's body, inlined under the users' names, is theirs too (graph/inline.py). Nodes
    # with colocation groups (w2/read) are imported from copies, the fetched node that moved
    # into the cluster (out) is the rewrite's alias.
    assert taken == [{"x", "w1", "w2", "w1/read", "MatMul", "hidden", "done", "MatMul_1"}]
    shadow = ShadowGraph.for_graph(graph)
    assert shadow._serialized is None  # dropped once the install used it
    for name in ("w1", "w2"):
        assert shadow.graph.get_operation_by_name(name).node_def == \
            graph.get_operation_by_name(name).node_def


def test_without_the_bytes_the_shadow_imports_copies(monkeypatch):
    graph, x, out = weights_graph((8, 8))
    monkeypatch.setattr(shadow_module, "_RAW_IMPORT", False)
    calls = []
    monkeypatch.setattr(shadow_module, "import_serialized", lambda *a, **k: calls.append(a))
    feed = {x: np.ones((2, 8), np.float32)}
    with PlainSession(graph=graph) as sess:
        expected = sess.run(out, feed)
    with NpuSession(graph=graph, config=NpuConfig.from_dict({}).to_config_proto()) as sess:
        np.testing.assert_array_equal(sess.run(out, feed), expected)
    assert not calls


def test_a_control_input_on_a_present_op_without_outputs_takes_the_copy(monkeypatch):
    graph = tf.Graph()
    with graph.as_default():
        gate = tf.no_op(name="gate")
        with tf1.control_dependencies([gate]):
            tf.constant(1.0, name="after_gate")
    shadow = ShadowGraph.for_graph(graph)
    graph_def, user_nodes = shadow.user_graph_def()
    shadow.install(graph_def, user_nodes, targets={"gate": "gate"})
    with graph.as_default():
        tf.constant(2.0, name="unrelated")  # a new graph version
    imports = []
    monkeypatch.setattr(shadow_module, "import_serialized",
                        lambda *args: imports.append(args) or wire.import_serialized(*args))
    graph_def, user_nodes = shadow.user_graph_def()  # a new graph version: new bytes
    assert shadow._serialized is not None
    client = graph_pb2.GraphDef()
    client.node.extend([user_nodes["gate"], user_nodes["after_gate"]])
    installed = shadow.install(client, user_nodes, fetches={"after_gate:0": "after_gate:0"})
    # "gate" has no output for input_map to bind the control edge through: the node is
    # copied and the edge added after the import, so nothing came from the bytes.
    assert not imports
    op = installed.tensors["after_gate:0"].op
    assert op.name == "after_gate" and [c.name for c in op.control_inputs] == ["gate"]
    with PlainSession(graph=shadow.graph) as sess:
        assert sess.run(installed.tensors["after_gate:0"]) == 1.0


def test_a_colocated_node_is_imported_from_a_copy(taken):
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant([1.0, 2.0], name="a")
        with tf1.colocate_with(a):
            tf.identity(a, name="b")
    shadow = ShadowGraph.for_graph(graph)
    graph_def, user_nodes = shadow.user_graph_def()
    installed = shadow.install(graph_def, user_nodes, fetches={"b:0": "b:0"})
    # The colocation group may have to be detached: "b" is copied, "a" comes from the bytes.
    assert taken == [{"a"}]
    b = installed.tensors["b:0"].op
    assert b.name == "b" and b.colocation_groups() == [b"loc:@a"]
    assert b.node_def == graph.get_operation_by_name("b").node_def
    with PlainSession(graph=shadow.graph) as sess:
        np.testing.assert_array_equal(sess.run(installed.tensors["b:0"]), [1.0, 2.0])
