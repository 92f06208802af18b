"""Sessions install a rewritten graph without its weights (``rewrite(lazy_weights=True)``).

The shadow takes the user's weights from the user's graph; the rewritten graph's own copy of them
is only made when someone reads ``RewriteResult.graph_def``. The weights' thresholds are lowered
here (graph/payload.py) so a small graph has payloads; values are compared with plain
TensorFlow.
"""

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.graph import payload
from npu_adapter.graph.payload import PAYLOAD_ATTR, PayloadStore, is_light_form_of
from npu_adapter.session import NpuSession, plain_session_class
from npu_adapter.session.shadow import ShadowGraph

tf1 = tf.compat.v1
PlainSession = plain_session_class()


@pytest.fixture
def small_payloads(monkeypatch):
    """Consts of 256 bytes and more are payloads, whatever their total."""
    monkeypatch.setattr(payload, "MIN_PAYLOAD_BYTES", 256)
    monkeypatch.setattr(payload, "MIN_TOTAL_BYTES", 0)
    restores = []
    real = PayloadStore.restore

    def counting_restore(self, graph_def):
        restores.append(len(graph_def.node))
        return real(self, graph_def)

    monkeypatch.setattr(PayloadStore, "restore", counting_restore)
    return restores


def _model():
    """x ─► matmul(W1: 4 KB, hoisted: the CPU reference passes it in) ─► + b (512 B: stays in
    the cluster function) ─► tanh ─► matmul(W2) ─► y; ``W1`` is also fetched on its own."""
    graph = tf.Graph()
    rs = np.random.RandomState(0)
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 32], name="x")
        w1 = tf.constant(rs.randn(32, 32).astype(np.float32), name="W1")
        b = tf.constant(rs.randn(128).astype(np.float32)[:32], name="b")
        w2 = tf.constant(rs.randn(32, 8).astype(np.float32), name="W2")
        h = tf.tanh(tf.matmul(x, w1) + b, name="h")
        y = tf.matmul(h, w2, name="y")
    return graph, x, y, w1


def _config(**options):
    # Installed in the shadow graph: a frozen graph's signature would otherwise run on the
    # user's graph, where there is nothing to install (session/direct.py).
    options.setdefault("npu_adapter_run_on_user_graph", False)
    return NpuConfig.from_dict(options).to_config_proto()


@pytest.mark.parametrize("options", [{}, {"mix_compile_mode": True}])
def test_a_session_runs_the_light_rewrite_with_the_users_weights(small_payloads, options):
    graph, x, y, w1 = _model()
    feed = {x: np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)}
    want = PlainSession(graph=graph).run([y, w1], feed)
    with NpuSession(graph=graph, config=_config(**options)) as sess:
        got = sess.run([y, w1], feed)
        assert small_payloads == []  # no copy of the weights was restored for the install
        shadow = ShadowGraph.for_graph(graph)
        names = [op.name for op in shadow.graph.get_operations()]
        # The user's Consts entered the shadow once, under their own names, with their data.
        assert "W1" in names and not any(n.endswith("/W1") for n in names)
        shadow_w1 = shadow.graph.get_operation_by_name("W1").node_def
        assert shadow_w1 == graph.get_operation_by_name("W1").node_def
        for fdef in shadow.graph.as_graph_def().library.function:
            assert not any(PAYLOAD_ATTR in node.attr for node in fdef.node_def)
        result = sess.npu_rewrite_result([y, w1], feed)
        assert result.clusters
        light, store = result.light_parts()
        assert store is not None and any(PAYLOAD_ATTR in n.attr for n in light.node)
        # Read by a user, the result's graph is the full one, equal to an eager rewrite's.
        full = result.graph_def
        assert len(small_payloads) == 1 and result.light_parts() == (full, None)
        eager = npu_adapter.rewrite(graph.as_graph_def(), NpuConfig.from_dict(options),
                                    fetches=["y:0", "W1:0"], feeds=["x:0"],
                                    graph_num=int(result.clusters[0].name[len("GeOp"):].split("_")[0]))
        assert full.SerializeToString(deterministic=True) == \
            eager.graph_def.SerializeToString(deterministic=True)
        assert light.SerializeToString() != full.SerializeToString()  # left as it was
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_second_session_shares_the_light_install(small_payloads):
    graph, x, y, _ = _model()
    feed = {x: np.ones((1, 32), np.float32)}
    want = PlainSession(graph=graph).run(y, feed)
    shadow = ShadowGraph.for_graph(graph)
    sizes = []
    for _ in range(3):
        with NpuSession(graph=graph, config=_config()) as sess:
            np.testing.assert_array_equal(sess.run(y, feed), want)
        sizes.append(len(shadow.graph.get_operations()))
    assert sizes[0] == sizes[1] == sizes[2] and small_payloads == []
    # Another rewrite of the graph (other options) shares the user's Consts too.
    with NpuSession(graph=graph, config=_config(mix_compile_mode=True)) as sess:
        np.testing.assert_array_equal(sess.run(y, feed), want)
    names = [op.name for op in shadow.graph.get_operations()]
    assert names.count("W1") == 1 and not any(n.endswith("/W1") for n in names)
    assert small_payloads == []


def test_a_light_node_is_the_users_only_with_the_same_name_and_metadata(small_payloads):
    with tf.Graph().as_default():
        w = tf.constant(np.ones([16, 16], np.float32), name="w").op.node_def
    light_graph, store = payload.strip_payloads(_graph_of(w), min_bytes=64)
    assert store is not None
    light = light_graph.node[0]
    assert is_light_form_of(light, w)
    other = type(w)()
    other.CopyFrom(w)
    other.attr["dtype"].type = tf.float64.as_datatype_enum
    assert not is_light_form_of(light, other)  # another attr
    renamed = type(w)()
    renamed.CopyFrom(w)
    renamed.name = "v"
    assert not is_light_form_of(light, renamed)  # the marker names another node
    assert not is_light_form_of(w, w)  # not light at all
    # Colocation groups the rewrite may drop are ignored when asked.
    grouped = type(w)()
    grouped.CopyFrom(w)
    grouped.attr["_class"].list.s.append(b"loc:@elsewhere")
    assert not is_light_form_of(light, grouped)
    assert is_light_form_of(light, grouped, ignore_attrs=("_class",))


def _graph_of(node):
    graph_def = tf1.GraphDef()
    graph_def.node.add().CopyFrom(node)
    return graph_def


def test_a_light_library_with_gradients_enters_the_shadow_with_its_data():
    """Libraries with gradient entries take TensorFlow's own path: with their data too."""
    weights = np.arange(64, dtype=np.float32).reshape(8, 8)

    @tf.function(input_signature=[tf.TensorSpec([8, 8], tf.float32)], autograph=False)
    def matmul(x):
        return tf.matmul(x, tf.constant(weights))

    library = tf1.GraphDef().library
    for name in ("MatMulWeights", "MatMulWeightsGrad"):
        fdef = library.function.add()
        fdef.CopyFrom(matmul.get_concrete_function().function_def)
        fdef.signature.name = name
    library.gradient.add(function_name="MatMulWeights", gradient_func="MatMulWeightsGrad")
    full = type(library)()
    full.CopyFrom(library)
    store = PayloadStore()
    for fdef, original in zip(library.function, full.function):
        # Mark each body's Const as strip_payloads marks a node.
        const = next(node for node in fdef.node_def if node.op == "Const")
        kept = next(node for node in original.node_def if node.name == const.name)
        store.set_aside(const.name, kept.attr["value"].tensor)
        const.attr["value"].tensor.ClearField("tensor_content")
        const.attr[PAYLOAD_ATTR].s = const.name.encode()
    shadow = ShadowGraph.for_graph(tf.Graph())
    shadow.add_functions(library, store)
    held = {f.signature.name: f for f in shadow.graph.as_graph_def().library.function}
    for name in ("MatMulWeights", "MatMulWeightsGrad"):
        const = next(node for node in held[name].node_def if node.op == "Const")
        assert PAYLOAD_ATTR not in const.attr
        np.testing.assert_array_equal(tf.make_ndarray(const.attr["value"].tensor), weights)
    assert any(PAYLOAD_ATTR in n.attr for n in library.function[0].node_def)  # input unchanged
