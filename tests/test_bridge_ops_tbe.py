"""``npu_bridge.tbe``: the deformable convolution, the LAMB steps and the PReLU layer against
NumPy references written here."""

import numpy as np
import pytest
import tensorflow as tf

from npu_bridge.estimator import npu_ops
from npu_bridge.tbe import npu_cube_ops, npu_vector_ops

RNG = np.random.default_rng(3)


def _run(fetches, feed_dict=None, graph=None, init=False):
    with tf.compat.v1.Session(graph=graph or tf.compat.v1.get_default_graph()) as sess:
        if init:
            sess.run(tf.compat.v1.global_variables_initializer())
        return sess.run(fetches, feed_dict)


# ---- deformable convolution ---------------------------------------------------------------------


def _bilinear(image, y, x):
    """image [H, W, C] sampled at (y, x), zero outside."""
    height, width = image.shape[:2]
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    total = np.zeros(image.shape[2])
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < height and 0 <= xx < width:
                total += wy * wx * image[yy, xx]
    return total


def np_deformable_conv2d(x, filt, offsets, strides, pads, dilations, groups):
    """NHWC deformable convolution v2, one output position and tap at a time."""
    n, _, _, channels = x.shape
    kh, kw, _, out_c = filt.shape
    _, out_h, out_w, _ = offsets.shape
    per_group = channels // groups
    k = kh * kw
    out = np.zeros((n, out_h, out_w, out_c))
    for b in range(n):
        for oh in range(out_h):
            for ow in range(out_w):
                for ky in range(kh):
                    for kx in range(kw):
                        tap = np.zeros(channels)
                        for g in range(groups):
                            c = g * k + ky * kw + kx
                            dx = offsets[b, oh, ow, c]
                            dy = offsets[b, oh, ow, groups * k + c]
                            mask = offsets[b, oh, ow, 2 * groups * k + c]
                            y = oh * strides[1] - pads[0] + ky * dilations[1] + dy
                            xp = ow * strides[2] - pads[2] + kx * dilations[2] + dx
                            chans = slice(g * per_group, (g + 1) * per_group)
                            tap[chans] = mask * _bilinear(x[b], y, xp)[chans]
                        out[b, oh, ow] += tap @ filt[ky, kx]
    return out


def _deformable_case(groups=2, strides=(1, 2, 1, 1), pads=(1, 0, 1, 1), dilations=(1, 1, 2, 1)):
    x = RNG.normal(size=(2, 5, 6, 4))
    filt = RNG.normal(size=(2, 3, 4, 3))
    out_h = (5 + pads[0] + pads[1] - (dilations[1] * 1 + 1)) // strides[1] + 1
    out_w = (6 + pads[2] + pads[3] - (dilations[2] * 2 + 1)) // strides[2] + 1
    k = 2 * 3
    offsets = np.concatenate([RNG.uniform(-1.5, 1.5, size=(2, out_h, out_w, 2 * groups * k)),
                              RNG.uniform(0.2, 1.0, size=(2, out_h, out_w, groups * k))], -1)
    return x, filt, offsets, list(strides), list(pads), list(dilations), groups


def test_deformable_conv2d_nhwc_matches_numpy():
    x, filt, offsets, strides, pads, dilations, groups = _deformable_case()
    with tf.Graph().as_default() as graph:
        out = npu_cube_ops.deformable_conv2d(tf.constant(x), tf.constant(filt),
                                             tf.constant(offsets), strides=strides, pads=pads,
                                             dilations=dilations, deformable_groups=groups)
    value = _run(out, graph=graph)
    expected = np_deformable_conv2d(x, filt, offsets, strides, pads, dilations, groups)
    assert value.shape == expected.shape == (2, 3, 4, 3)
    np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)


def test_deformable_conv2d_nchw_is_the_transposed_nhwc():
    x, filt, offsets, strides, pads, dilations, groups = _deformable_case(
        groups=1, strides=(1, 1, 1, 1), dilations=(1, 1, 1, 1))
    nchw = [1, 0, 2, 3]
    with tf.Graph().as_default() as graph:
        out = npu_cube_ops.deformable_conv2d(
            tf.constant(x.transpose(0, 3, 1, 2)), tf.constant(filt),
            tf.constant(offsets.transpose(0, 3, 1, 2)), strides=[strides[i] for i in nchw],
            pads=pads, dilations=[dilations[i] for i in nchw], data_format="NCHW")
    value = _run(out, graph=graph)
    expected = np_deformable_conv2d(x, filt, offsets, strides, pads, dilations, groups)
    np.testing.assert_allclose(value, expected.transpose(0, 3, 1, 2), rtol=1e-10, atol=1e-10)


def test_deformable_offsets_gradients_match_finite_differences():
    x, filt, offsets, strides, pads, dilations, groups = _deformable_case()
    x, offsets = x[:1], offsets[:1]
    dy = RNG.normal(size=(1, 3, 4, 3))

    def loss_of(x, offsets):
        return np.sum(np_deformable_conv2d(x, filt, offsets, strides, pads, dilations, groups)
                      * dy)

    with tf.Graph().as_default() as graph:
        tx, toff = tf.constant(x), tf.constant(offsets)
        out = npu_cube_ops.deformable_conv2d(tx, tf.constant(filt), toff, strides=strides,
                                             pads=pads, dilations=dilations,
                                             deformable_groups=groups)
        auto = tf.gradients(out, [tx, toff], grad_ys=tf.constant(dy))
        sampled = out.op.inputs[0]
        # the conv's input is the DeformableOffsets output
        upstream = tf.gradients(out, sampled, grad_ys=tf.constant(dy))[0]
        explicit = npu_cube_ops.deformable_offsets_grad(sampled.op, upstream)
        kernel = npu_ops.gen_npu_ops.deformable_offsets_grad(
            upstream, tx, toff, strides, pads, [2, 3], dilations=dilations,
            deformable_groups=groups)
    auto_v, explicit_v, kernel_v = _run([auto, explicit, list(kernel)], graph=graph)
    for k, p in enumerate((x, offsets)):
        # a sample of the entries keeps the NumPy loop fast
        picks = RNG.choice(p.size, size=40, replace=False)
        for flat in picks:
            idx = np.unravel_index(flat, p.shape)
            plus, minus = [x.copy(), offsets.copy()], [x.copy(), offsets.copy()]
            plus[k][idx] += 1e-6
            minus[k][idx] -= 1e-6
            numeric = (loss_of(*plus) - loss_of(*minus)) / 2e-6
            for got in (auto_v, explicit_v, kernel_v):
                np.testing.assert_allclose(got[k][idx], numeric, rtol=1e-5, atol=1e-6)


def test_deformable_conv2d_argument_checks():
    x, filt, offsets, strides, pads, dilations, groups = _deformable_case()
    with tf.Graph().as_default():
        with pytest.raises(RuntimeError, match="only supports modulated is True"):
            npu_cube_ops.deformable_conv2d(x, filt, offsets, strides, pads, modulated=False)
        with pytest.raises(RuntimeError, match="only supports groups is 1"):
            npu_cube_ops.deformable_conv2d(x, filt, offsets, strides, pads, groups=2)
        with pytest.raises(ValueError, match="offsets must have 3 \\* deformable_groups \\* kh "
                           "\\* kw = 18 channels, got 36"):
            npu_cube_ops.deformable_conv2d(x, filt, offsets, strides, pads, dilations=dilations)
        with pytest.raises(ValueError, match="strides must be a list of 4 ints"):
            npu_cube_ops.deformable_conv2d(x, filt, offsets, [1, 1], pads, deformable_groups=2)
        with pytest.raises(ValueError, match="strides and pads are required"):
            npu_cube_ops.deformable_conv2d(x, filt, offsets)
    with pytest.raises(RuntimeError, match="not compatible with eager"):
        npu_cube_ops.deformable_conv2d(x, filt, offsets, strides, pads)


# ---- LAMB ---------------------------------------------------------------------------------------


def test_lamb_apply_optimizer_assign_with_and_without_variables():
    grad, v0, m0, w = (RNG.normal(size=(3, 4)) for _ in range(4))
    v0 = np.abs(v0)
    b1, b2, eps, steps, decay = 0.9, 0.999, 1e-6, 3.0, 0.01
    next_v = b2 * v0 + (1 - b2) * grad ** 2
    next_m = b1 * m0 + (1 - b1) * grad
    update = (next_m / (1 - b1 ** steps)) / (np.sqrt(next_v / (1 - b2 ** steps)) + eps)
    with tf.Graph().as_default() as graph:
        v = tf.compat.v1.get_variable("v", initializer=v0, use_resource=True)
        m = tf.compat.v1.Variable(m0, name="m", use_resource=False)
        args = [b1, 1 - b1, b2, 1 - b2, eps, steps]
        assigned = npu_vector_ops.lamb_apply_optimizer_assign(grad, v, m, w, *args, 1.0, decay)
        plain = npu_vector_ops.lamb_apply_optimizer_assign(grad, v0, m0, w, *args, 0.0, decay)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        plain_v = sess.run(plain)
        assert np.array_equal(sess.run(v), v0)  # the plain call stored nothing
        assigned_v = sess.run(assigned)
        stored_v, stored_m = sess.run([v, m])
    np.testing.assert_allclose(plain_v[0], update, rtol=1e-12)
    np.testing.assert_allclose(assigned_v[0], update + w * decay, rtol=1e-12)
    for got in (plain_v, assigned_v):
        np.testing.assert_allclose(got[1], next_v, rtol=1e-12)
        np.testing.assert_allclose(got[2], next_m, rtol=1e-12)
    np.testing.assert_allclose(stored_v, next_v, rtol=1e-12)
    np.testing.assert_allclose(stored_m, next_m, rtol=1e-12)


@pytest.mark.parametrize("w_norm,g_norm,ratio", [(2.0, 4.0, 0.5), (0.0, 4.0, 1.0),
                                                 (2.0, 0.0, 1.0)])
def test_lamb_apply_weight_assign(w_norm, g_norm, ratio):
    w0, update = RNG.normal(size=(5,)), RNG.normal(size=(5,))
    with tf.Graph().as_default() as graph:
        w = tf.compat.v1.get_variable("w", initializer=w0, use_resource=True)
        new = npu_vector_ops.lamb_apply_weight_assign(w_norm, g_norm, 0.1, update, w)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        value = sess.run(new)
        stored = sess.run(w)
    np.testing.assert_allclose(value, w0 - ratio * 0.1 * update, rtol=1e-12)
    np.testing.assert_allclose(stored, value, rtol=1e-12)


def test_lamb_ops_are_graph_only():
    assert tf.executing_eagerly()  # the test process runs eagerly outside graph contexts
    with pytest.raises(RuntimeError, match="lamb_apply_weight_assign"):
        npu_vector_ops.lamb_apply_weight_assign(1.0, 1.0, 1.0, 1.0, 1.0)
    with pytest.raises(RuntimeError, match="lamb_apply_optimizer_assign"):
        npu_vector_ops.lamb_apply_optimizer_assign(*[1.0] * 12)


# ---- PReLU layer --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,shared_axes,alpha_shape", [
    ((2, 4, 4, 3), [1, 2], (1, 1, 3)),
    ((2, 5), None, (5,)),
    ((2, 3, 2), [1, 2], (1,)),
])
def test_prelu_layer_matches_numpy_and_trains(shape, shared_axes, alpha_shape):
    x = RNG.normal(size=shape).astype(np.float32)
    with tf.Graph().as_default() as graph:
        layer = npu_vector_ops.PReLU(alpha_initializer=tf.keras.initializers.Constant(0.25),
                                     shared_axes=shared_axes)
        y = layer(tf.constant(x))
        grad = tf.gradients(tf.reduce_sum(y), layer.alpha)[0]
    assert tuple(layer.alpha.shape.as_list()) == alpha_shape
    y_v, grad_v = _run([y, grad], graph=graph, init=True)
    np.testing.assert_allclose(y_v, np.where(x > 0, x, 0.25 * x), rtol=1e-6)
    negative = np.where(x > 0, 0.0, x)
    padded = (1,) * (x.ndim - len(alpha_shape)) + alpha_shape
    axes = tuple(i for i in range(x.ndim) if padded[i] == 1)
    np.testing.assert_allclose(grad_v, negative.sum(axis=axes).reshape(alpha_shape), rtol=1e-5)
    config = layer.get_config()
    assert config["shared_axes"] == shared_axes
    assert npu_vector_ops.gen_npu_ops is npu_ops.gen_npu_ops
    assert npu_cube_ops.gen_npu_ops is npu_ops.gen_npu_ops
