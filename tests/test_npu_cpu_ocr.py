"""OCR pre/post-processing ops of ``npu_bridge.npu_cpu.npu_cpu_ops`` against hand-computed and
NumPy references."""

import numpy as np
import pytest
import tensorflow as tf

from npu_bridge.npu_cpu import npu_cpu_ops
from tests.npu_cpu_helpers import run


def unpack(data, offsets, sizes):
    return [data[o:o + 2 * s].reshape(s, 2).tolist() for o, s in zip(offsets, sizes)]


@pytest.mark.parametrize("shape,side", [((30, 700, 3), 480), ((1000, 20, 3), 960),
                                        ((1500, 10, 3), 1920)])
def test_ocr_detection_pre_handle_sizes(shape, side):
    img = np.zeros(shape, np.uint8)
    resized, h_scale, w_scale = run(lambda: npu_cpu_ops.ocr_detection_pre_handle(
        tf.constant(img)))
    assert resized.shape == (side, side, 3)
    assert h_scale == pytest.approx(side / shape[0]) and w_scale == pytest.approx(side / shape[1])


def test_ocr_detection_pre_handle_values_and_nchw():
    img = np.random.RandomState(0).randint(0, 255, (8, 4, 3)).astype(np.uint8)
    nhwc = run(lambda: npu_cpu_ops.ocr_detection_pre_handle(tf.constant(img)))[0]
    nchw = run(lambda: npu_cpu_ops.ocr_detection_pre_handle(
        tf.constant(img.transpose(2, 0, 1)), "NCHW"))[0]
    np.testing.assert_array_equal(nchw, nhwc.transpose(2, 0, 1))
    # The corner of an upscaled image is the corner pixel (half-pixel centres).
    np.testing.assert_array_equal(nhwc[0, 0], img[0, 0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="3 channels"):
        run(lambda: npu_cpu_ops.ocr_detection_pre_handle(tf.zeros([4, 4, 2], tf.uint8)))


def test_ocr_find_contours_rectangle_pixel_and_order():
    img = np.zeros((6, 7), np.uint8)
    img[1:3, 1:4] = 1        # a 2x3 rectangle
    img[4, 5] = 1            # an isolated pixel
    data, offsets, sizes = run(lambda: npu_cpu_ops.ocr_find_contours(tf.constant(img)))
    contours = unpack(data, offsets, sizes)
    # Clockwise on screen from the first pixel: along the top, then back along the bottom.
    assert contours == [[[1, 1], [2, 1], [3, 1], [3, 2], [2, 2], [1, 2]], [[5, 4]]]


def test_ocr_find_contours_value_mode_and_l_shape():
    img = np.zeros((5, 5), np.uint8)
    img[1, 1] = img[2, 1] = img[3, 1] = img[3, 2] = img[3, 3] = 255
    data, offsets, sizes = run(lambda: npu_cpu_ops.ocr_find_contours(tf.constant(img), 1))
    (contour,) = unpack(data, offsets, sizes)
    assert contour == [[1, 1], [1, 2], [2, 3], [3, 3], [2, 3], [1, 3], [1, 2]]
    assert run(lambda: npu_cpu_ops.ocr_find_contours(tf.constant(img), 0))[2].tolist() == []


def test_batch_dilate_polys_filters_and_offsets():
    square = [2, 2, 6, 2, 6, 6, 2, 6]          # area 16, perimeter 16
    thin = [0, 0, 9, 0, 9, 1, 0, 1]            # a 10x2 box: min border 2
    faint = [8, 8, 9, 8, 9, 9, 8, 9]           # over low scores
    data = np.array(square + thin + faint, np.int32)
    offsets = np.array([0, 8, 16], np.int32)
    sizes = np.array([4, 4, 4], np.int32)
    score = np.ones((12, 12), np.float32)
    score[7:, 7:] = 0.1
    out = run(lambda: npu_cpu_ops.batch_dilate_polys(
        tf.constant(data), tf.constant(offsets), tf.constant(sizes), tf.constant(score),
        tf.constant(3), tf.constant(2), tf.constant(0.5), tf.constant(1.5)))
    polys = unpack(*out)
    # Only the square passes; d = 16 * 1.5 / 16 = 1.5, mitred corners move 1.5 on each axis.
    assert polys == [[[0, 0], [8, 0], [8, 8], [0, 8]]]
    # Rounding of 0.5 and 7.5 follows NumPy's round-half-even: the corners land at 0 and 8.


def test_resize_and_clip_polys():
    data = np.array([10, 20, 200, 40, -5, 7], np.int32)
    out = run(lambda: npu_cpu_ops.resize_and_clip_polys(
        tf.constant(data), tf.constant([0, 4]), tf.constant([2, 1]), tf.constant(2.0),
        tf.constant(0.5), tf.constant(30), tf.constant(100)))
    clipped, offsets, sizes, num = out
    # x / w_scale (0.5), y / h_scale (2.0), clipped to [0, 99] x [0, 29].
    assert clipped.tolist() == [20, 10, 99, 20, 0, 4]
    assert offsets.tolist() == [0, 4] and sizes.tolist() == [2, 1] and num == 2


def test_ocr_detection_post_handle_crops():
    img = np.arange(5 * 6 * 3, dtype=np.uint8).reshape(5, 6, 3)
    data = np.array([1, 1, 3, 1, 3, 2, 1, 2, 4, 3, 9, 9], np.int32)
    imgs, offsets, shapes, rects = run(lambda: npu_cpu_ops.ocr_detection_post_handle(
        tf.constant(img), tf.constant(data), tf.constant([0, 8]), tf.constant([4, 2])))
    first = img[1:3, 1:4]
    second = img[3:5, 4:6]   # (9, 9) is clipped to the last row and column
    assert shapes.tolist() == [[2, 3, 3], [2, 2, 3]]
    assert offsets.tolist() == [0, first.size]
    np.testing.assert_array_equal(imgs, np.concatenate([first.ravel(), second.ravel()]))
    assert rects.tolist() == [[[1, 1], [3, 1], [3, 2], [1, 2]], [[4, 3], [5, 3], [5, 4],
                                                                 [4, 4]]]


def resize_reference(image, out_h, out_w):
    h, w = image.shape[:2]
    out = np.zeros((out_h, out_w, image.shape[2]))
    for i in range(out_h):
        for j in range(out_w):
            sy = min(max((i + 0.5) * h / out_h - 0.5, 0), h - 1)
            sx = min(max((j + 0.5) * w / out_w - 0.5, 0), w - 1)
            y0, x0 = int(sy), int(sx)
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            fy, fx = sy - y0, sx - x0
            out[i, j] = ((image[y0, x0] * (1 - fx) + image[y0, x1] * fx) * (1 - fy)
                         + (image[y1, x0] * (1 - fx) + image[y1, x1] * fx) * fy)
    return np.clip(np.round(out), 0, 255)


def test_ocr_identify_pre_handle():
    rng = np.random.RandomState(4)
    a = rng.randint(0, 255, (3, 5, 3)).astype(np.uint8)
    b = rng.randint(0, 255, (6, 2, 3)).astype(np.uint8)
    data = np.concatenate([a.ravel(), b.ravel()])
    got = run(lambda: npu_cpu_ops.ocr_identify_pre_handle(
        tf.constant(data), tf.constant([0, a.size]), tf.constant([[3, 5, 3], [6, 2, 3]]),
        [4, 4]))
    assert got.shape == (2, 4, 4, 3)
    np.testing.assert_allclose(got[0], resize_reference(a, 4, 4), atol=1)
    np.testing.assert_allclose(got[1], resize_reference(b, 4, 4), atol=1)
    with pytest.raises(ValueError, match="size must be"):
        npu_cpu_ops.ocr_identify_pre_handle(tf.constant(data), [0], [[1, 1, 3]], [4])


def test_ocr_recognition_pre_handle_batches_by_language():
    imgs = [np.full((2, 3, 3), 10, np.uint8), np.full((3, 2, 3), 20, np.uint8),
            np.full((2, 2, 3), 30, np.uint8)]
    data = np.concatenate([i.ravel() for i in imgs])
    offsets = [0, imgs[0].size, imgs[0].size + imgs[1].size]
    sizes = [list(i.shape) for i in imgs]
    out, relation, langs, fillers = run(lambda: npu_cpu_ops.ocr_recognition_pre_handle(
        tf.constant(data), tf.constant(offsets), tf.constant(sizes), tf.constant([1, 0, 1]),
        tf.constant([0.9, 0.8, 0.7]), batch_size=2, pad_mode="ZERO"))
    assert langs.tolist() == [0, 1] and fillers.tolist() == [1, 0]
    assert relation.tolist() == [1, -1, 0, 2]
    # Batch of language 0: image 1 (3x2) and a zero filler; language 1: images 0 and 2 padded
    # to 2x3 with zeros.
    first = np.stack([imgs[1], np.zeros_like(imgs[1])])
    second = np.stack([imgs[0], np.pad(imgs[2], ((0, 0), (0, 1), (0, 0)))])
    np.testing.assert_array_equal(out, np.concatenate([first.ravel(), second.ravel()]))
