"""Shapes as a tensor (``npu_bridge.experimental.get_shape``).

:func:`getshape` builds ``GetShape``: the int32 vector of the dimensions of ``x`` (for a list of
tensors, their dimensions one after another). ``x`` must be float16, float32 or uint8.
"""

import tensorflow as tf

from npu_bridge.helper import helper

__all__ = ["getshape", "npu_aicore_ops"]

_DTYPES = (tf.float16, tf.float32, tf.uint8)


def _get_shape(x, name=None):
    tensors = list(x) if isinstance(x, (list, tuple)) else [x]
    with tf.name_scope(name or "GetShape"):
        shapes = []
        for tensor in tensors:
            tensor = tf.convert_to_tensor(tensor)
            if tensor.dtype not in _DTYPES:
                raise TypeError(f"getshape: x must be float16, float32 or uint8, got "
                                f"{tensor.dtype.name}")
            shapes.append(tf.shape(tensor, out_type=tf.int32))
        return shapes[0] if len(shapes) == 1 else tf.concat(shapes, axis=0)


helper.register_gen_ops({"GetShape": _get_shape})
npu_aicore_ops = helper.get_gen_ops()


def getshape(x, name=None):
    """The shape of ``x`` as an int32 vector."""
    if not isinstance(x, (list, tuple)):
        x = tf.convert_to_tensor(x, name="x")
    return npu_aicore_ops.get_shape(x, name=name)
