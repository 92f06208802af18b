"""Depthwise convolutions rewritten for XLA (npu_adapter/backends/xla/depthwise.py): the same
values as TensorFlow's op, compiled and on TensorFlow's kernels, for every padding, stride,
dilation and layout; what is left alone; and a depthwise net through a session, whose compiled
form holds no depthwise op while TensorFlow's kernels keep the original."""

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.backends.xla.decisions import forget_decisions
from npu_adapter.backends.xla.depthwise import decompose_depthwise
from npu_adapter.backends.xla.trial import PAIRS
from npu_adapter.config import NpuConfig
from npu_adapter.session import NpuSession, plain_session_class, runner_of

tf1 = tf.compat.v1
PlainSession = plain_session_class()
RTOL, ATOL = 1e-4, 1e-5  # float32: the taps are summed in another order


def _function_graph(x_shape, filter_value, strides, padding, dilation, data_format,
                    dtype=tf.float32, filter_as_input=False):
    """A graph calling a function that holds one depthwise convolution, and that function."""
    graph = tf.Graph()
    with graph.as_default():
        @tf.function(autograph=False)
        def conv(x, w):
            return tf.nn.depthwise_conv2d(x, w, strides, padding, data_format=data_format,
                                          dilations=[dilation, dilation])

        @tf.function(autograph=False)
        def conv_const(x):
            return tf.nn.depthwise_conv2d(x, tf.constant(filter_value, dtype), strides, padding,
                                          data_format=data_format,
                                          dilations=[dilation, dilation])

        x = tf1.placeholder(dtype, x_shape, name="x")
        if filter_as_input:
            conv(x, tf1.placeholder(dtype, None, name="w"))
        else:
            conv_const(x)
    graph_def = graph.as_graph_def()
    (fdef,) = graph_def.library.function
    return graph_def, fdef


def _with_rewritten_call(graph_def, fdef, rewritten, compiled):
    """``graph_def`` plus a call ``rewritten`` of the rewritten function (and the original call
    compiled too when TensorFlow's kernels cannot run it: NCHW)."""
    out = tf1.GraphDef()
    out.CopyFrom(graph_def)
    rewritten.signature.name = fdef.signature.name + "_rewritten"
    out.library.function.add().CopyFrom(rewritten)
    (call,) = [n for n in out.node if n.op in ("StatefulPartitionedCall", "PartitionedCall")]
    new = out.node.add()
    new.CopyFrom(call)
    new.name = "rewritten"
    new.attr["f"].func.name = rewritten.signature.name
    if compiled:
        new.attr["_XlaMustCompile"].b = True
    return out, call.name


CASES = [  # (x shape NHWC, kernel hw, strides hw, padding, dilation)
    ((2, 8, 8, 3), (3, 3), (1, 1), "SAME", 1),
    ((2, 9, 7, 4), (3, 3), (2, 2), "SAME", 1),     # odd sizes: SAME pads more at the end
    ((2, 8, 8, 4), (3, 3), (2, 2), "SAME", 1),     # even sizes
    ((1, 9, 8, 4), (5, 3), (2, 2), "VALID", 1),
    ((1, 10, 10, 2), (3, 3), (1, 1), "SAME", 2),
    ((1, 10, 11, 2), (3, 2), (1, 1), "VALID", 2),
    ((1, 9, 9, 3), (3, 3), (1, 1), [[0, 0], [1, 2], [0, 1], [0, 0]], 1),
]


@pytest.mark.parametrize("compiled", [True, False], ids=["xla", "tf_kernels"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", CASES, ids=[str(k) for k in range(len(CASES))])
def test_rewritten_depthwise_computes_the_same(case, data_format, compiled):
    shape, (kh, kw), (sh, sw), padding, dilation = case
    if data_format == "NCHW":
        if isinstance(padding, list):
            padding = [padding[0], padding[3], padding[1], padding[2]]
        shape = (shape[0], shape[3], shape[1], shape[2])
        strides = [1, 1, sh, sw]
        channels = shape[1]
    else:
        strides = [1, sh, sw, 1]
        channels = shape[3]
    if dilation > 1 and max(sh, sw) > 1:
        pytest.skip("TensorFlow takes dilations only with stride 1")
    rng = np.random.RandomState(0)
    filter_value = rng.randn(kh, kw, channels, 1).astype(np.float32)
    graph_def, fdef = _function_graph(shape, filter_value, strides, padding, dilation,
                                      data_format)
    rewritten, count = decompose_depthwise(fdef, {})
    assert count == 1
    assert "DepthwiseConv2dNative" not in {n.op for n in rewritten.node_def}
    # TensorFlow's CPU kernel only takes NHWC: there the original runs compiled too.
    graph_def, original = _with_rewritten_call(graph_def, fdef, rewritten, compiled)
    if data_format == "NCHW":
        (call,) = [n for n in graph_def.node if n.name == original]
        call.attr["_XlaMustCompile"].b = True
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    x = rng.randn(*shape).astype(np.float32)
    with PlainSession(graph=graph) as sess:
        want, got = sess.run([f"{original}:0", "rewritten:0"], {"x:0": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_what_is_left_alone():
    rng = np.random.RandomState(1)
    # A channel multiplier above 1, a float16 convolution, a filter of unknown shape.
    _, fdef = _function_graph((1, 6, 6, 2), rng.randn(3, 3, 2, 2).astype(np.float32),
                              [1, 1, 1, 1], "SAME", 1, "NHWC")
    assert decompose_depthwise(fdef, {}) == (None, 0)
    _, fdef = _function_graph((1, 6, 6, 2), rng.randn(3, 3, 2, 1).astype(np.float16),
                              [1, 1, 1, 1], "SAME", 1, "NHWC", dtype=tf.float16)
    assert decompose_depthwise(fdef, {}) == (None, 0)
    _, fdef = _function_graph((1, 6, 6, 2), None, [1, 1, 1, 1], "SAME", 1, "NHWC",
                              filter_as_input=True)
    assert decompose_depthwise(fdef, {}) == (None, 0)
    # ... unless the caller knows the argument's shape (a constant passed in).
    weights = fdef.signature.input_arg[1].name
    rewritten, count = decompose_depthwise(fdef, {weights: (3, 3, 2, 1)})
    assert count == 1 and rewritten is not None


def depthwise_net():
    graph = tf.Graph()
    rng = np.random.RandomState(2)
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [2, 16, 16, 8], name="x")
        w1 = tf.constant(rng.randn(3, 3, 8, 1).astype(np.float32) * 0.3)   # passed in
        w2 = tf.constant(rng.randn(3, 3, 16, 1).astype(np.float32) * 0.3)
        p = tf.constant(rng.randn(1, 1, 8, 16).astype(np.float32) * 0.3)
        h = tf.nn.relu6(tf.nn.depthwise_conv2d(x, w1, [1, 1, 1, 1], "SAME"))
        h = tf.nn.relu6(tf.nn.conv2d(h, p, 1, "SAME"))
        h = tf.nn.depthwise_conv2d(h, w2, [1, 2, 2, 1], "SAME")
        tf.reduce_mean(h, axis=[1, 2], name="out")
    return graph, {"x:0": rng.randn(2, 16, 16, 8).astype(np.float32)}


def test_depthwise_net_in_both_forms_matches_plain_tensorflow():
    forget_decisions()
    graph, feeds = depthwise_net()
    with PlainSession(graph=graph) as sess:
        want = sess.run("out:0", feeds)
    config = NpuConfig.from_dict({"npu_adapter_backend": "xla"}).to_config_proto()
    with NpuSession(graph=graph, config=config) as sess:
        # The trial runs both forms; every run computes what plain TensorFlow computes.
        for _ in range(2 + 2 * PAIRS + 1):
            np.testing.assert_allclose(sess.run("out:0", feeds), want, rtol=RTOL, atol=ATOL)
            # (the first run's replay builds the executable in the background)
            assert runner_of(sess).runtime.wait_for_builds(timeout=300)
        result = runner_of(sess).rewrite_result("out:0", feeds)
        stats = runner_of(sess).runtime_stats()
    (cluster,) = result.clusters
    functions = {f.signature.name: f for f in result.graph_def.library.function}
    (node,) = [n for n in result.graph_def.node if n.name == cluster.name]
    assert node.attr["f"].func.name == f"{cluster.name}_xla" and node.attr["_XlaMustCompile"].b
    ops = {name: [n.op for n in functions[name].node_def]
           for name in (cluster.name, f"{cluster.name}_xla")}
    assert ops[cluster.name].count("DepthwiseConv2dNative") == 2
    assert "DepthwiseConv2dNative" not in ops[f"{cluster.name}_xla"]
    st = stats.clusters[cluster.name]
    # The compiled arm ran its pairs (its first run was the replay that built it).
    assert st.status in ("compiled", "tensorflow") and st.runs_compiled >= PAIRS
    assert st.compiles == st.background_compiles == 1
    forget_decisions()
