"""Image decoding (``npu_bridge.experimental.image``).

:func:`decode_image` builds ``DecodeImageV3``, which decodes BMP, GIF, JPEG or PNG like
``tf.io.decode_image``: ``channels`` 0 keeps the image's own channel count, ``dtype`` is uint8,
uint16 or float32 (scaled to [0, 1) for float32), and ``expand_animations`` gives GIFs a frame
axis (4-D) or returns their first frame (3-D).
"""

import tensorflow as tf

from npu_bridge.helper import helper

__all__ = ["decode_image", "gen_npu_cpu_ops"]

_DTYPES = (tf.uint8, tf.uint16, tf.float32)


def _decode_image_v3(contents, channels=0, dtype=tf.uint8, expand_animations=True, name=None):
    dtype = tf.as_dtype(dtype)
    if dtype not in _DTYPES:
        raise TypeError(f"decode_image: dtype must be uint8, uint16 or float32, got "
                        f"{dtype.name}")
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 0:
        raise ValueError(f"channels must be non-negative, got {channels!r}")
    return tf.io.decode_image(contents, channels=channels, dtype=dtype,
                              expand_animations=expand_animations, name=name)


helper.register_gen_ops({"DecodeImageV3": _decode_image_v3})
gen_npu_cpu_ops = helper.get_gen_ops()


def decode_image(contents, channels=0, dtype=tf.uint8, expand_animations=True):
    """Decode the image in the scalar string ``contents`` (see the module doc)."""
    return gen_npu_cpu_ops.decode_image_v3(contents=contents, channels=channels, dtype=dtype,
                                           expand_animations=expand_animations)
