"""``npu_aicore_ops`` math and dropout, and the remaining ``npu_ops`` (LARS, the fused Adam steps,
k-means, device-only ops), each against a NumPy reference written here."""

import importlib
import math
import sys

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.errors import DeviceOnlyError, NpuAdapterError
from npu_bridge.estimator import npu_aicore_ops, npu_ops
from tests.npu_cpu_helpers import keras2

RNG = np.random.default_rng(11)


def _run(fetches, feed_dict=None, graph=None, init=False):
    with tf.compat.v1.Session(graph=graph or tf.compat.v1.get_default_graph()) as sess:
        if init:
            sess.run(tf.compat.v1.global_variables_initializer())
        return sess.run(fetches, feed_dict)


def _gelu_erf(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


# ---- GELU family --------------------------------------------------------------------------------


def test_fast_gelu_v2_matches_the_cann_formula_and_approximates_gelu():
    x = np.linspace(-5, 5, 400)  # not 0, where |x| * p(0) has a kink
    with tf.Graph().as_default() as graph:
        out = npu_aicore_ops.fast_gelu_v2(tf.constant(x))
        out32 = npu_aicore_ops.fast_gelu_v2(tf.constant(x, tf.float32))
        tx = tf.constant(x)
        dx = tf.gradients(npu_aicore_ops.fast_gelu_v2(tx), tx)[0]
    values, values32, dx_v = _run([out, out32, dx], graph=graph)
    u = np.minimum(np.abs(0.7071 * x), 1.769)
    expected = x * (np.where(x >= 0, 1.0, -1.0) * (-0.1444 * (u - 1.769) ** 2 + 0.5) + 0.5)
    np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(values32, expected, rtol=1e-5, atol=1e-6)
    assert np.max(np.abs(values - _gelu_erf(x))) < 0.02  # a GELU approximation
    eps = 1e-6
    u_p, u_m = (np.minimum(np.abs(0.7071 * v), 1.769) for v in (x + eps, x - eps))
    f = lambda v, u: v * (np.where(v >= 0, 1.0, -1.0) * (-0.1444 * (u - 1.769) ** 2 + 0.5)  # noqa
                          + 0.5)
    numeric = (f(x + eps, u_p) - f(x - eps, u_m)) / (2 * eps)
    np.testing.assert_allclose(dx_v, numeric, rtol=1e-5, atol=1e-6)


def test_fast_gelu_and_its_grad_in_the_raw_namespace():
    x = np.linspace(-30, 30, 121)
    ops = npu_aicore_ops.npu_aicore_ops
    with tf.Graph().as_default() as graph:
        tx = tf.constant(x)
        y = ops.fast_gelu(tx)
        auto = tf.gradients(y, tx)[0]
        explicit = ops.fast_gelu_grad(tf.ones_like(tx), tx)
    y_v, auto_v, explicit_v = _run([y, auto, explicit], graph=graph)
    np.testing.assert_allclose(y_v, x / (1 + np.exp(-1.702 * x)), rtol=1e-12, atol=1e-300)
    s = 1 / (1 + np.exp(-1.702 * x))
    np.testing.assert_allclose(explicit_v, s + 1.702 * x * s * (1 - s), rtol=1e-10, atol=1e-300)
    np.testing.assert_allclose(auto_v, explicit_v, rtol=1e-9, atol=1e-12)
    assert np.all(np.isfinite(y_v))


# ---- centralization, prelu ----------------------------------------------------------------------


def test_centralization():
    x = RNG.normal(size=(3, 4, 5))
    with tf.Graph().as_default() as graph:
        out = npu_aicore_ops.centralization(tf.constant(x), [1, -1])
        single = npu_aicore_ops.centralization(tf.constant(x), 0)
    value, single_v = _run([out, single], graph=graph)
    np.testing.assert_allclose(value, x - x.mean(axis=(1, 2), keepdims=True), atol=1e-12)
    np.testing.assert_allclose(single_v, x - x.mean(axis=0, keepdims=True), atol=1e-12)
    with tf.Graph().as_default(), pytest.raises(ValueError, match="axes \\[3\\] are out of range"):
        npu_aicore_ops.centralization(tf.constant(x), [3])


@pytest.mark.parametrize("x_shape,w_shape,to_numpy", [
    ((4, 3), (), lambda w: w),
    ((2, 3, 4, 4), (3,), lambda w: w.reshape(1, 3, 1, 1)),        # NCHW channel vector
    ((2, 4, 4, 3), (1, 1, 3), lambda w: w),                        # PReLU layer, shared H, W
    ((2, 5), (5,), lambda w: w),
    ((2, 4, 3), (1,), lambda w: w.reshape(())),
])
def test_prelu_and_its_gradient(x_shape, w_shape, to_numpy):
    x = RNG.normal(size=x_shape)
    w = RNG.uniform(0.1, 0.5, size=w_shape)
    dy = RNG.normal(size=x_shape)
    wb = to_numpy(w)
    expected = np.where(x > 0, x, wb * x)
    exp_dx = np.where(x > 0, dy, wb * dy)
    da_full = np.where(x > 0, 0.0, x * dy)
    wb_padded = np.reshape(wb, (1,) * (x.ndim - np.ndim(wb)) + np.shape(wb))
    broadcast_axes = tuple(i for i in range(x.ndim) if wb_padded.shape[i] == 1)
    exp_da = np.reshape(da_full.sum(axis=broadcast_axes), w_shape)
    with tf.Graph().as_default() as graph:
        tx, tw = tf.constant(x), tf.constant(w)
        y = npu_aicore_ops.prelu(tx, tw)
        auto = tf.gradients(y, [tx, tw], grad_ys=tf.constant(dy))
        explicit = npu_aicore_ops.prelu_grad(y.op, tf.constant(dy))
        kernel = npu_aicore_ops.npu_aicore_ops.p_relu_grad(dy, x, w)
    y_v, auto_v, explicit_v, kernel_v = _run([y, auto, explicit, list(kernel)], graph=graph)
    np.testing.assert_allclose(y_v, expected, atol=1e-14)
    for got in (auto_v, explicit_v, kernel_v):
        np.testing.assert_allclose(got[0], exp_dx, atol=1e-12)
        np.testing.assert_allclose(np.reshape(got[1], w_shape), exp_da, atol=1e-12)


def test_prelu_channel_mismatch_is_an_error():
    with tf.Graph().as_default(), pytest.raises(ValueError, match="must match the channel axis"):
        npu_aicore_ops.prelu(tf.zeros([2, 3, 4, 4]), tf.ones([4]))


# ---- layer_norm ---------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_axis,params_axis", [(1, 1), (2, 2), (-1, -1), (1, 2)])
def test_layer_norm_outputs_and_gradient(norm_axis, params_axis):
    x = RNG.normal(size=(2, 3, 4))
    params_shape = x.shape[params_axis % 3:]
    gamma = RNG.normal(size=params_shape)
    beta = RNG.normal(size=params_shape)
    axes = tuple(range(norm_axis % 3, 3))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    eps = 1e-7
    expected = (x - mean) / np.sqrt(var + eps) * gamma + beta
    dy = RNG.normal(size=x.shape)

    def loss_of(x, gamma, beta):
        m = x.mean(axis=axes, keepdims=True)
        v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
        return np.sum(((x - m) / np.sqrt(v + eps) * gamma + beta) * dy)

    with tf.Graph().as_default() as graph:
        params = [tf.constant(v) for v in (x, gamma, beta)]
        y, m, v = npu_aicore_ops.layer_norm(*params, begin_norm_axis=norm_axis,
                                            begin_params_axis=params_axis)
        # the mean/variance outputs carry no gradient in the original's registered gradient
        loss = tf.reduce_sum(y * dy) + 3.0 * tf.reduce_sum(m) + tf.reduce_sum(v)
        auto = tf.gradients(loss, params)
        kernel = npu_aicore_ops.npu_aicore_ops.fused_layer_norm_grad(dy, params[0], v, m,
                                                                      params[1])
    y_v, m_v, v_v, auto_v, kernel_v = _run([y, m, v, auto, list(kernel)], graph=graph)
    np.testing.assert_allclose(y_v, expected, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(m_v, mean, atol=1e-12)
    np.testing.assert_allclose(v_v, var, atol=1e-12)
    numeric = []
    base = [x, gamma, beta]
    for k, p in enumerate(base):
        g = np.zeros_like(p)
        for idx in np.ndindex(p.shape):
            plus = [q.copy() for q in base]
            minus = [q.copy() for q in base]
            plus[k][idx] += 1e-6
            minus[k][idx] -= 1e-6
            g[idx] = (loss_of(*plus) - loss_of(*minus)) / 2e-6
        numeric.append(g)
    for got in (auto_v, kernel_v):
        for a, n in zip(got, numeric):
            np.testing.assert_allclose(a, n, rtol=1e-5, atol=1e-6)


def test_layer_norm_errors():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="begin_norm_axis=3 is out of range"):
            npu_aicore_ops.layer_norm(tf.zeros([2, 3, 4]), tf.ones([4]), tf.zeros([4]), 3, 2)
        with pytest.raises(ValueError, match="gamma must have the shape of x.shape\\[1:\\]"):
            npu_aicore_ops.layer_norm(tf.zeros([2, 3, 4]), tf.ones([4]), tf.zeros([3, 4]), 1, 1)


# ---- nonzero ------------------------------------------------------------------------------------


def test_nonzero_both_layouts_and_types():
    x = np.array([[0, 1.5, 0], [2, 0, -3], [0, 0, 0]])
    cube = RNG.integers(0, 2, size=(2, 3, 4)).astype(bool)
    with tf.Graph().as_default() as graph:
        plain = npu_aicore_ops.nonzero(tf.constant(x))
        transposed = npu_aicore_ops.nonzero(tf.constant(x), transpose=True,
                                            output_type=tf.int32)
        boolean = npu_aicore_ops.nonzero(tf.constant(cube))
    assert plain.dtype == tf.int64 and transposed.dtype == tf.int32
    plain_v, transposed_v, bool_v = _run([plain, transposed, boolean], graph=graph)
    np.testing.assert_array_equal(plain_v, np.argwhere(x))
    np.testing.assert_array_equal(transposed_v, np.argwhere(x).T)
    np.testing.assert_array_equal(bool_v, np.argwhere(cube))
    with tf.Graph().as_default(), pytest.raises(TypeError, match="int32 or int64"):
        npu_aicore_ops.nonzero(tf.constant(x), output_type=tf.float32)


def test_nonzerowithvalue_layouts():
    x = np.array([[0.0, 4.0, 0.0, -1.0], [0.0, 0.0, 0.0, 2.5], [7.0, 0.0, 0.0, 0.0]])
    coords = np.argwhere(x)
    n, size = len(coords), x.size
    with tf.Graph().as_default() as graph:
        major = npu_aicore_ops.nonzerowithvalue(tf.constant(x), transpose=True)
        pairs = npu_aicore_ops.nonzerowithvalue(tf.constant(x), output_type=tf.int32)
    assert major.value.shape.as_list() == [12] and major.index.shape.as_list() == [24]
    major_v, pairs_v = _run([list(major), list(pairs)], graph=graph)
    values = np.zeros(size)
    values[:n] = x[x != 0]
    index_major = np.zeros(2 * size, np.int64)
    index_major[:n] = coords[:, 0]
    index_major[size:size + n] = coords[:, 1]
    index_pairs = np.zeros(2 * size, np.int64)
    index_pairs[:2 * n] = coords.ravel()
    np.testing.assert_array_equal(major_v[0], values)
    np.testing.assert_array_equal(major_v[1], index_major)
    np.testing.assert_array_equal(major_v[2], [n])
    np.testing.assert_array_equal(pairs_v[1], index_pairs)
    assert pairs_v[1].dtype == np.int32 and major_v[2].dtype == np.int64
    with tf.Graph().as_default(), pytest.raises(ValueError, match="x must be 2-D"):
        npu_aicore_ops.nonzerowithvalue(tf.zeros([2, 2, 2]))


# ---- dropout ------------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [
    lambda x, **kw: npu_ops.dropout(x, **kw),
    lambda x, **kw: npu_aicore_ops.dropout_v3(x, **kw),
    lambda x, **kw: npu_aicore_ops.dropout_v4(x, **kw),
])
def test_dropout_variants_keep_probability_seeds_and_gradient(build):
    data = RNG.uniform(1, 2, size=(400, 50)).astype(np.float32)

    def make_graph():
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.set_random_seed(5)
            x = tf.constant(data)
            y = build(x, keep_prob=0.6)
            dx = tf.gradients(y, x)[0]
        return graph, x, y, dx

    graph, x, y, dx = make_graph()
    with tf.compat.v1.Session(graph=graph) as sess:
        x_v = sess.run(x)
        first, first_dx = sess.run([y, dx])
        second = sess.run(y)
    graph2, _, y2, _ = make_graph()
    again = _run(y2, graph=graph2)
    kept = first != 0
    assert abs(kept.mean() - 0.6) < 0.01
    np.testing.assert_allclose(first[kept], x_v[kept] / 0.6, rtol=1e-6)
    np.testing.assert_allclose(first_dx, kept / 0.6, rtol=1e-6)  # the same mask
    np.testing.assert_array_equal(first, again)  # the same graph seed: the same masks
    assert not np.array_equal(first, second)  # a new mask on every run


def test_dropout_v3_v4_noise_shape_keep_one_and_errors():
    with tf.Graph().as_default() as graph:
        x = tf.ones([64, 8])
        rows = npu_aicore_ops.dropout_v4(x, 0.5, noise_shape=[64, 1], seed=3)
        assert npu_aicore_ops.dropout_v3(x, 1.0) is x
        assert npu_aicore_ops.dropout_v4(x, 1.0) is x
        mask = npu_aicore_ops.npu_aicore_ops.drop_out_gen_mask_v4([4, 4], 0.5, 1, 2)
        mask8 = npu_aicore_ops.npu_aicore_ops.drop_out_gen_mask([4, 4], 0.5, 1, 2)
    assert mask.dtype == tf.bool and mask8.dtype == tf.uint8
    value = _run(rows, graph=graph)
    assert np.all((value == 0).all(axis=1) | (value == 2.0).all(axis=1))
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="range \\(0, 1\\]"):
            npu_aicore_ops.dropout_v3(tf.ones([2]), 1.5)
        with pytest.raises(ValueError, match="floating point"):
            npu_aicore_ops.dropout_v4(tf.constant([1, 2]), 0.5)
        with pytest.raises(TypeError, match="output_dtype must be bool"):
            npu_aicore_ops.dropout_v4(tf.ones([2]), 0.5, output_dtype=tf.float32)
    out = npu_aicore_ops.dropout_v3(tf.ones([1000]), 0.5, seed=1)  # eagerly
    assert 300 < np.count_nonzero(out.numpy()) < 700


@pytest.fixture
def npu_convert_dropout():
    """Import (or re-import) the patching module and undo its patch afterwards, so Keras'
    eager Dropout keeps working in the rest of the session."""
    tf_keras = keras2()
    originals = {tf_keras.layers.Dropout: tf_keras.layers.Dropout.__dict__["call"]}
    name = "npu_bridge.estimator.npu.npu_convert_dropout"
    module = importlib.reload(sys.modules[name]) if name in sys.modules else \
        importlib.import_module(name)
    try:
        yield module
    finally:
        for cls, call in originals.items():
            cls.call = call


def test_keras_dropout_goes_through_the_npu_dropout(npu_convert_dropout):
    tf_keras = keras2()

    assert tf_keras.layers.Dropout.call is npu_convert_dropout.dropout_call
    assert list(npu_convert_dropout.PATCHED_CLASSES) == [tf_keras.layers.Dropout]
    assert npu_convert_dropout.Dropout is tf_keras.layers.Dropout
    with tf.Graph().as_default() as graph:
        tf.compat.v1.set_random_seed(1)
        layer = tf_keras.layers.Dropout(0.25)
        x = tf.ones([2000])
        train = layer(x, training=True)
        infer = layer(x, training=False)
        shaped = tf_keras.layers.Dropout(0.5, noise_shape=[None, 1])(tf.ones([40, 4]),
                                                                     training=True)
        # SpatialDropout1D inherits the patched call and gives its noise shape [batch, 1, ch].
        spatial = tf_keras.layers.SpatialDropout1D(0.5)(tf.ones([8, 30, 6]), training=True)
    assert any("DropOutGenMask/" in op.name for op in graph.get_operations())
    train_v, infer_v, shaped_v, spatial_v = _run([train, infer, shaped, spatial], graph=graph)
    assert abs(np.count_nonzero(train_v) / 2000 - 0.75) < 0.05
    np.testing.assert_allclose(train_v[train_v != 0], 1 / 0.75, rtol=1e-6)
    np.testing.assert_array_equal(infer_v, np.ones(2000))
    assert np.all((shaped_v == 0).all(axis=1) | (shaped_v == 2.0).all(axis=1))
    assert np.all((spatial_v == 0).all(axis=1) | (spatial_v == 2.0).all(axis=1))
    assert 0 < np.count_nonzero(spatial_v[:, 0, :]) < 48


# ---- LARS ---------------------------------------------------------------------------------------


def _lars(w, g, wd, hyper=0.001, eps=1e-5):
    coeff = hyper * np.linalg.norm(w) / (np.linalg.norm(g) + wd * np.linalg.norm(w) + eps)
    return coeff, coeff * (g + wd * w)


def test_lars_and_larsv2():
    ws = [RNG.normal(size=(3, 4)), RNG.normal(size=5)]
    gs = [RNG.normal(size=(3, 4)), RNG.normal(size=5)]
    with tf.Graph().as_default() as graph:
        outs = npu_ops.LARS([tf.constant(w, tf.float32) for w in ws],
                            [tf.constant(g, tf.float32) for g in gs], 0.01, hyperpara=0.02)
        v2 = npu_ops.LARSV2(tf.constant(ws[0]), tf.constant(gs[0]), 0.01, 0.5)
        clipped = npu_ops.LARSV2(tf.constant(ws[0]), tf.constant(gs[0]), 0.01, 1e-5,
                                 hyperpara=10.0, use_clip=True)
        small = npu_ops.LARSV2(tf.constant(ws[0]), tf.constant(gs[0]), 0.01, 0.5,
                               use_clip=True)
    outs_v, v2_v, clipped_v, small_v = _run([outs, v2, clipped, small], graph=graph)
    for w, g, got in zip(ws, gs, outs_v):
        np.testing.assert_allclose(got, _lars(w, g, 0.01, hyper=0.02)[1], rtol=1e-5)
    np.testing.assert_allclose(v2_v, _lars(ws[0], gs[0], 0.01)[1], rtol=1e-12)
    np.testing.assert_allclose(clipped_v, gs[0] + 0.01 * ws[0], rtol=1e-12)  # coeff clipped to 1
    coeff, _ = _lars(ws[0], gs[0], 0.01)
    np.testing.assert_allclose(small_v, coeff / 0.5 * (gs[0] + 0.01 * ws[0]), rtol=1e-12)
    with tf.Graph().as_default(), pytest.raises(ValueError, match="same, non-zero length"):
        npu_ops.LARS([tf.ones([2])], [], 0.1)


# ---- fused Adam ---------------------------------------------------------------------------------


@pytest.mark.parametrize("resource", [True, False])
@pytest.mark.parametrize("decay", [None, 0.01])
def test_adam_apply_one_assign_updates_the_variables(resource, decay):
    grad, v0, m0, w0 = (RNG.normal(size=(3, 2)) for _ in range(4))
    v0 = np.abs(v0)
    lr, b1, b2, eps = 0.1, 0.9, 0.999, 1e-8
    with tf.Graph().as_default() as graph:
        make = (lambda v, n: tf.compat.v1.get_variable(n, initializer=v, use_resource=True)) \
            if resource else (lambda v, n: tf.compat.v1.Variable(v, name=n, use_resource=False))
        v, m, w = make(v0, "v"), make(m0, "m"), make(w0, "w")
        args = [tf.constant(grad), v, m, w.read_value() if resource else w, lr, b1, 1 - b1, b2,
                1 - b2]
        if decay is None:
            op = npu_ops.adam_apply_one_assign(*args, eps)
        else:
            op = npu_ops.adam_apply_one_with_decay_assign(*args, decay, eps)
        init = tf.compat.v1.global_variables_initializer()
    assert isinstance(op, tf.Operation)
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(op)
        v1, m1, w1 = sess.run([v, m, w])
    v_exp = b2 * v0 + (1 - b2) * grad ** 2
    m_exp = b1 * m0 + (1 - b1) * grad
    step = m_exp / (np.sqrt(v_exp) + eps) + (0 if decay is None else decay * w0)
    np.testing.assert_allclose(v1, v_exp, rtol=1e-12)
    np.testing.assert_allclose(m1, m_exp, rtol=1e-12)
    np.testing.assert_allclose(w1, w0 - lr * step, rtol=1e-12)


def test_adam_apply_one_assign_needs_variables_and_graph_mode():
    with tf.Graph().as_default(), pytest.raises(
            ValueError, match="input1 receives the op's result in place, so it must be a "
            "variable or a read of one; got a Const value"):
        npu_ops.adam_apply_one_assign(*[tf.constant(1.0)] * 10)
    with pytest.raises(RuntimeError, match="adam_apply_one_assign"):
        npu_ops.adam_apply_one_assign(*[1.0] * 10)


# ---- k-means -----------------------------------------------------------------------------------


def test_k_means_centroids_both_versions():
    x = RNG.normal(size=(40, 3)).astype(np.float32)
    y = RNG.normal(size=(4, 3)).astype(np.float32)
    ssy = np.sum(y ** 2, axis=1)[None]
    ssx = np.sum(x ** 2, axis=1)[:, None]
    dist = ((x[:, None, :] - y[None]) ** 2).sum(-1)
    nearest = dist.argmin(1)
    exp_sum = np.stack([x[nearest == k].sum(0) for k in range(4)])
    exp_count = np.bincount(nearest, minlength=4)[:, None]
    with tf.Graph().as_default() as graph:
        full = npu_ops.k_means_centroids(x, y, ssy, ssx)
        partial = npu_ops.k_means_centroids(x, y, ssy, None, use_actual_distance=True)
    full_v, partial_v = _run([list(full), list(partial)], graph=graph)
    for got, total in ((full_v, dist.min(1).sum()), (partial_v, (dist.min(1) - ssx[:, 0]).sum())):
        np.testing.assert_allclose(got[0], exp_sum, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got[1], exp_count)
        assert got[2].shape == (1,)
        np.testing.assert_allclose(got[2][0], total, rtol=1e-4)


# ---- device-only ---------------------------------------------------------------------------------


@pytest.mark.parametrize("build,api", [
    (lambda: npu_ops.outfeed_enqueue_op("c", [tf.ones([2])]), "outfeed_enqueue_op"),
    (lambda: npu_ops.outfeed_dequeue_op("c", [tf.float32], [[2]]), "outfeed_dequeue_op"),
    (lambda: npu_ops.stop_outfeed_dequeue_op("c"), "stop_outfeed_dequeue_op"),
    (lambda: npu_ops.channel_get_next("queue_0", [tf.float32], [[2]]), "channel_get_next"),
    (lambda: npu_ops.npu_onnx_graph_op([], [tf.float32], "m.onnx"), "NpuOnnxGraphOp"),
])
def test_device_only_ops_raise_a_named_error_when_built(build, api):
    with tf.Graph().as_default() as graph, pytest.raises(DeviceOnlyError) as info:
        build()
    assert isinstance(info.value, NpuAdapterError) and info.value.api == api
    assert str(info.value).startswith(f"{api} needs the Ascend device: ")
    assert not [op for op in graph.get_operations() if "outfeed" in op.type.lower()]


def test_raw_namespace_is_shared_and_names_what_is_missing():
    ops = npu_ops.gen_npu_ops
    assert npu_aicore_ops.npu_aicore_ops is ops
    assert {"dynamic_rnn", "fused_layer_norm", "lars_v2", "non_zero", "p_relu"} <= set(dir(ops))
    with pytest.raises(AttributeError, match="gen_npu_ops.dynamic_rnn_grad is a custom op of the "
                       "original _tf_adapter.so that this pure-Python build does not provide"):
        ops.dynamic_rnn_grad  # noqa: B018
    assert npu_ops.DEFAULT_GRAPH_SEED == npu_aicore_ops.DEFAULT_GRAPH_SEED == 87654321


def test_keras_dropout_is_restored_after_the_patch_test():
    tf_keras = keras2()

    layer = tf_keras.layers.Dropout(0.5)
    # eagerly in training: the stock Keras call again (the NPU dropout refuses eager mode)
    out = np.asarray(layer(tf.ones([200]), training=True))
    assert set(np.unique(out)) <= {0.0, 2.0} and 0 < np.count_nonzero(out) < 200


# ---- every op is built from ops of the bundled device list --------------------------------------


def _op_list_cases():
    from npu_bridge.tbe import npu_cube_ops, npu_vector_ops

    g = npu_ops.gen_npu_ops
    return {
        "DynamicRnn": lambda: g.dynamic_rnn(tf.ones([3, 2, 3]), tf.ones([5, 8]), tf.ones([8]),
                                            [3, 2], None, None),
        "DynamicAUGRU": lambda: g.dynamic_augru(tf.ones([3, 2, 3]), tf.ones([3, 6]),
                                                tf.ones([2, 6]), tf.ones([3, 2]), tf.ones([6]),
                                                tf.ones([6]), [3, 2], None),
        "BasicLSTMCell": lambda: g.basic_lstm_cell(tf.ones([2, 3]), tf.ones([2, 2]),
                                                   tf.ones([2, 2]), tf.ones([5, 8]), tf.ones([8])),
        "math": lambda: [npu_aicore_ops.fast_gelu_v2(tf.ones([2])),
                         npu_aicore_ops.prelu(tf.ones([2, 3]), tf.ones([3])),
                         npu_aicore_ops.layer_norm(tf.ones([2, 3]), tf.ones([3]), tf.ones([3]),
                                                   1, 1),
                         npu_aicore_ops.centralization(tf.ones([2, 3]), [1]),
                         npu_aicore_ops.nonzero(tf.ones([2, 3])),
                         npu_aicore_ops.nonzerowithvalue(tf.ones([2, 3]))],
        "dropout": lambda: [npu_ops.dropout(tf.ones([4]), 0.5),
                            npu_aicore_ops.dropout_v4(tf.ones([4]), 0.5)],
        "LARS": lambda: [npu_ops.LARS([tf.ones([2])], [tf.ones([2])], 0.1),
                         npu_ops.LARSV2(tf.ones([2]), tf.ones([2]), 0.1, 0.1, use_clip=True)],
        "KMeansCentroids": lambda: npu_ops.k_means_centroids(tf.ones([4, 2]), tf.ones([2, 2]),
                                                             tf.ones([1, 2]), tf.ones([4, 1])),
        "DeformableConv2D": lambda: npu_cube_ops.deformable_conv2d(
            tf.ones([1, 4, 4, 2]), tf.ones([3, 3, 2, 2]), tf.ones([1, 4, 4, 27]), [1, 1, 1, 1],
            [1, 1, 1, 1]),
        "Lamb": lambda: npu_vector_ops.lamb_apply_optimizer_assign(*[tf.ones([2])] * 12),
        "ProdEnvMatA": lambda: npu_aicore_ops.prod_env_mat_a(
            tf.ones([1, 9]), tf.zeros([1, 3], tf.int32), [3, 3, 3], tf.ones([1, 9]),
            tf.zeros([6], tf.int32), tf.ones([1, 8]), tf.ones([1, 8]), rcut_r=1.0,
            rcut_r_smth=0.5, sel_a=[2]),
        "ProdForceVirial": lambda: [
            npu_aicore_ops.prodforcesea(tf.ones([1, 8]), tf.ones([1, 24]),
                                        tf.zeros([1, 2], tf.int32), [1, 1, 1], n_a_sel=2),
            npu_aicore_ops.prodvirialsea(tf.ones([1, 8]), tf.ones([1, 24]), tf.ones([1, 6]),
                                         tf.zeros([1, 2], tf.int32), [1, 1, 1], n_a_sel=2)],
        "TabulateFusionSeA": lambda: npu_aicore_ops.tabulatefusionsea(
            tf.ones([3, 12]), tf.constant([0.0, 1.0, 2.0, 0.5, 0.5]), tf.ones([2, 1]),
            tf.ones([1, 2, 4]), 2),
    }


@pytest.mark.parametrize("case", sorted(_op_list_cases()))
def test_ops_are_built_from_the_device_op_list(case):
    from npu_adapter.op_support import bundled_op_support_list

    supported = bundled_op_support_list()
    with tf.Graph().as_default() as graph:
        _op_list_cases()[case]()
    off_list = sorted({op.type for op in graph.get_operations()} - set(supported))
    assert off_list == []


