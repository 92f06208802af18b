"""Image warps of ``npu_bridge.npu_cpu.npu_cpu_ops`` against NumPy references."""

import numpy as np
import pytest
import tensorflow as tf

from npu_bridge.npu_cpu import npu_cpu_ops
from tests.npu_cpu_helpers import run


def warp_reference(image, flow):
    """Bilinear warp with the top-left neighbour clipped to [0, size-2], fraction to [0, 1]."""
    b, h, w, _ = image.shape
    out = np.zeros_like(image, dtype=np.float64)
    for n in range(b):
        for y in range(h):
            for x in range(w):
                qy, qx = y - flow[n, y, x, 0], x - flow[n, y, x, 1]
                y0 = int(min(max(np.floor(qy), 0), h - 2))
                x0 = int(min(max(np.floor(qx), 0), w - 2))
                ay = min(max(qy - y0, 0.0), 1.0)
                ax = min(max(qx - x0, 0.0), 1.0)
                top = image[n, y0, x0] * (1 - ax) + image[n, y0, x0 + 1] * ax
                bottom = image[n, y0 + 1, x0] * (1 - ax) + image[n, y0 + 1, x0 + 1] * ax
                out[n, y, x] = top * (1 - ay) + bottom * ay
    return out


def numeric_grad(fn, value, eps=1e-4):
    grad = np.zeros_like(value)
    for i in np.ndindex(value.shape):
        plus, minus = value.copy(), value.copy()
        plus[i] += eps
        minus[i] -= eps
        grad[i] = (fn(plus) - fn(minus)) / (2 * eps)
    return grad


@pytest.fixture
def warp_case():
    rng = np.random.RandomState(0)
    image = rng.uniform(-1, 1, (2, 4, 5, 3))
    # Fractional flows (no sample exactly on a pixel) and some beyond the borders.
    flow = rng.uniform(-2.3, 2.3, (2, 4, 5, 2)) + 0.013
    upstream = rng.uniform(-1, 1, (2, 4, 5, 3))
    return image, flow, upstream


def test_dense_image_warp_matches_reference(warp_case):
    image, flow, _ = warp_case
    got = run(lambda: npu_cpu_ops.dense_image_warp(tf.constant(image, tf.float32),
                                                   tf.constant(flow, tf.float32)))
    np.testing.assert_allclose(got, warp_reference(image, flow), atol=1e-5)


def test_dense_image_warp_zero_flow_is_identity(warp_case):
    image, _, _ = warp_case
    got = run(lambda: npu_cpu_ops.dense_image_warp(tf.constant(image, tf.float32),
                                                   tf.zeros([2, 4, 5, 2])))
    np.testing.assert_allclose(got, image, atol=1e-6)


def test_dense_image_warp_gradients_match_finite_differences(warp_case):
    image, flow, upstream = warp_case

    def build():
        img, flw = tf.constant(image, tf.float32), tf.constant(flow, tf.float32)
        out = npu_cpu_ops.dense_image_warp(img, flw)
        return tf.gradients(tf.reduce_sum(out * upstream), [img, flw])

    grad_image, grad_flow = run(build)
    want_image = numeric_grad(lambda v: np.sum(warp_reference(v, flow) * upstream), image)
    want_flow = numeric_grad(lambda v: np.sum(warp_reference(image, v) * upstream), flow)
    np.testing.assert_allclose(grad_image, want_image, atol=1e-4)
    np.testing.assert_allclose(grad_flow, want_flow, atol=1e-3)


def test_dense_image_warp_grad_function_takes_an_op(warp_case):
    image, flow, upstream = warp_case

    class FakeOp:
        def __init__(self):
            self.inputs = (tf.constant(image, tf.float32), tf.constant(flow, tf.float32))

    def build():
        op = FakeOp()
        return npu_cpu_ops.dense_image_warp_grad(op, tf.constant(upstream, tf.float32))

    grad_image, _ = run(build)
    want = numeric_grad(lambda v: np.sum(warp_reference(v, flow) * upstream), image)
    np.testing.assert_allclose(grad_image, want, atol=1e-4)


def test_dense_image_warp_float16():
    image = np.arange(2 * 3 * 3, dtype=np.float16).reshape(1, 3, 3, 2)
    flow = np.full((1, 3, 3, 2), 0.5, np.float16)
    got = run(lambda: npu_cpu_ops.dense_image_warp(tf.constant(image), tf.constant(flow)))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, warp_reference(image.astype(np.float64),
                                                   flow.astype(np.float64)), atol=1e-2)


def test_dense_image_warp_rejects_bad_inputs():
    with pytest.raises(TypeError, match="float16 or float32"):
        npu_cpu_ops.dense_image_warp(tf.zeros([1, 2, 2, 1], tf.int32), tf.zeros([1, 2, 2, 2]))
    with pytest.raises(ValueError, match="last dimension of flow"):
        npu_cpu_ops.dense_image_warp(tf.zeros([1, 2, 2, 1]), tf.zeros([1, 2, 2, 3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="height and width"):
        run(lambda: npu_cpu_ops.dense_image_warp(tf.zeros([1, 1, 3, 1]),
                                                 tf.zeros([1, 1, 3, 2])))


def bilinear_reference(image, out_h, out_w):
    h, w = image.shape[:2]
    out = np.zeros((out_h, out_w, image.shape[2]))
    for i in range(out_h):
        for j in range(out_w):
            sy = min(max((i + 0.5) * h / out_h - 0.5, 0), h - 1)
            sx = min(max((j + 0.5) * w / out_w - 0.5, 0), w - 1)
            y0, x0 = int(np.floor(sy)), int(np.floor(sx))
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            fy, fx = sy - y0, sx - x0
            out[i, j] = ((image[y0, x0] * (1 - fx) + image[y0, x1] * fx) * (1 - fy)
                         + (image[y1, x0] * (1 - fx) + image[y1, x1] * fx) * fy)
    return out


@pytest.mark.parametrize("size", [(7, 3), (2, 9)])
def test_resize_v2_bilinear(size):
    image = np.random.RandomState(1).uniform(0, 255, (4, 5, 3)).astype(np.float32)
    got = run(lambda: npu_cpu_ops.resize_v2(tf.constant(image), tf.constant(size)))
    np.testing.assert_allclose(got, bilinear_reference(image, *size), atol=1e-3)
    got8 = run(lambda: npu_cpu_ops.resize_v2(tf.constant(image.astype(np.uint8)),
                                             tf.constant(size, tf.int64)))
    want8 = np.clip(np.round(bilinear_reference(image.astype(np.uint8), *size)), 0, 255)
    # float32 versus float64 can round a value at .5 differently: at most one step apart.
    assert got8.dtype == np.uint8
    np.testing.assert_allclose(got8.astype(int), want8, atol=1)


def test_resize_v2_rejects_unknown_interpolation():
    with pytest.raises(ValueError, match="interpolation 'CUBIC'"):
        npu_cpu_ops.resize_v2(tf.zeros([2, 2, 1]), [3, 3], interploation="CUBIC")


def affine_reference(image, matrix, out_h, out_w, border_value):
    full = np.vstack([matrix, [0, 0, 1]])
    inv = np.linalg.inv(full)
    h, w, c = image.shape
    out = np.zeros((out_h, out_w, c))
    for y in range(out_h):
        for x in range(out_w):
            sx, sy, _ = inv @ [x, y, 1]
            x0, y0 = int(np.floor(sx)), int(np.floor(sy))
            fx, fy = sx - x0, sy - y0

            def px(yy, xx):
                if 0 <= yy < h and 0 <= xx < w:
                    return image[yy, xx]
                return np.full(c, border_value, dtype=np.float64)

            out[y, x] = ((px(y0, x0) * (1 - fx) + px(y0, x0 + 1) * fx) * (1 - fy)
                         + (px(y0 + 1, x0) * (1 - fx) + px(y0 + 1, x0 + 1) * fx) * fy)
    return out


def test_warp_affine_v2_constant_border():
    image = np.random.RandomState(2).uniform(0, 10, (5, 6, 2)).astype(np.float32)
    matrix = np.array([[0.9, 0.2, 0.7], [-0.1, 1.1, -0.4]], np.float32)
    got = run(lambda: npu_cpu_ops.warp_affine_v2(tf.constant(image), tf.constant(matrix),
                                                 tf.constant([4, 7]), border_value=3))
    np.testing.assert_allclose(got, affine_reference(image, matrix, 4, 7, 3.0), atol=1e-3)


def test_warp_affine_v2_translation_replicate_uint8():
    image = np.arange(12, dtype=np.uint8).reshape(3, 4, 1) * 10
    matrix = np.array([[1, 0, 1], [0, 1, 0]], np.float32)  # shift right by one pixel
    got = run(lambda: npu_cpu_ops.warp_affine_v2(
        tf.constant(image), tf.constant(matrix), tf.constant([3, 4]),
        border_type="BORDER_REPLICATE"))
    want = np.concatenate([image[:, :1], image[:, :3]], axis=1)
    np.testing.assert_array_equal(got, want)


def test_warp_affine_v2_rejects_bad_arguments():
    with pytest.raises(ValueError, match="border_type"):
        npu_cpu_ops.warp_affine_v2(tf.zeros([2, 2, 1]), tf.zeros([2, 3]), [2, 2],
                                   border_type="BORDER_FANCY")
    with pytest.raises(tf.errors.InvalidArgumentError, match="singular"):
        run(lambda: npu_cpu_ops.warp_affine_v2(tf.zeros([2, 2, 1]), tf.zeros([2, 3]),
                                               tf.constant([2, 2])))
