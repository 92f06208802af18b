"""JPEG decode, crop and resize in one op (``npu_bridge.image.image_ops``).

On the device these run in the image-processing unit. Here they are TensorFlow's decoder and
bilinear resize: the JPEG is decoded to 3 channels (RGB), optionally cropped to
``[y_min, x_min, crop_height, crop_width]`` while decoding, resized to ``[new_height,
new_width]`` with bilinear interpolation (half-pixel centres), rounded and returned as uint8
``[new_height, new_width, 3]``.
"""

import tensorflow as tf

from npu_bridge.helper import helper

__all__ = ["decode_and_crop_and_resize_jpeg", "decode_and_resize_jpeg", "gen_npu_image_ops"]


def _resize_uint8(image, size):
    size = tf.convert_to_tensor(size, dtype=tf.int32, name="size")
    check = tf.debugging.assert_equal(tf.size(size), 2,
                                      message="size must hold 2 values: new_height, new_width")
    with tf.control_dependencies([check]):
        resized = tf.image.resize(image, size, method=tf.image.ResizeMethod.BILINEAR)
    return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)


def _decode_and_resize_jpeg(image, size, name=None):
    with tf.name_scope(name or "DecodeAndResizeJpeg"):
        decoded = tf.io.decode_jpeg(image, channels=3)
        return _resize_uint8(decoded, size)


def _decode_and_crop_and_resize_jpeg(image, crop_size, size, name=None):
    with tf.name_scope(name or "DecodeAndCropAndResizeJpeg"):
        crop = tf.convert_to_tensor(crop_size, dtype=tf.int32, name="crop_size")
        check = tf.debugging.assert_equal(
            tf.size(crop), 4, message="crop_size must hold 4 values: y_min, x_min, "
                                      "crop_height, crop_width")
        with tf.control_dependencies([check]):
            decoded = tf.io.decode_and_crop_jpeg(image, crop, channels=3)
        return _resize_uint8(decoded, size)


helper.register_gen_ops({"DecodeAndResizeJpeg": _decode_and_resize_jpeg,
                         "DecodeAndCropAndResizeJpeg": _decode_and_crop_and_resize_jpeg})
gen_npu_image_ops = helper.get_gen_ops()


def decode_and_resize_jpeg(image, size):
    """Decode the JPEG ``image`` and resize it to ``size`` = [new_height, new_width]:
    uint8 ``[new_height, new_width, 3]``."""
    return gen_npu_image_ops.decode_and_resize_jpeg(image, size)


def decode_and_crop_and_resize_jpeg(image, crop_size, size):
    """Decode the JPEG ``image``, crop it to ``crop_size`` = [y_min, x_min, crop_height,
    crop_width] and resize to ``size``: uint8 ``[new_height, new_width, 3]``."""
    return gen_npu_image_ops.decode_and_crop_and_resize_jpeg(image, crop_size, size)
