"""``npu_bridge.estimator.npu.npu_convert_dropout``: importing this module makes Keras'
``Dropout`` layer use the NPU dropout (``npu_ops.dropout``), as the original does.

:func:`dropout_call` replaces ``Dropout.call`` of the Keras 2 implementations that are present
(``tf_keras`` — which is ``tf.keras`` once ``npu_bridge`` is imported — and TensorFlow's bundled
``tensorflow.python.keras``). In training, a layer without ``noise_shape`` drops through
``npu_ops.dropout(inputs, keep_prob=1 - rate, seed=self.seed)``; with a ``noise_shape`` it keeps
``tf.nn.dropout``. Outside training the layer is the identity. ``npu_ops.dropout`` builds graph
ops only, so the patched layer runs inside graphs (v1 sessions, ``tf.function``, ``Model.fit``)
and raises ``RuntimeError`` when called eagerly, as the original.
"""

import importlib
import numbers
import sys

import tensorflow as tf
from tensorflow.python.keras.utils import tf_utils
from tensorflow.python.ops import array_ops, nn

from npu_bridge.estimator import npu_ops

__all__ = ["dropout_call"]

# Modules the original imports at its top level; scripts can reach them through this one.
_ORIGINAL_IMPORTS = (tf_utils, array_ops, nn)


def dropout_call(self, inputs, training=None):
    """``Dropout.call`` through the NPU dropout (see the module doc)."""
    if training is None:
        training = tf.compat.v1.keras.backend.learning_phase()
    noise_shape = self._get_noise_shape(inputs)
    if isinstance(self.rate, numbers.Real) and self.rate == 0:
        return tf.identity(inputs)

    if noise_shape is not None:
        def dropped_inputs():
            return tf.nn.dropout(inputs, noise_shape=noise_shape, seed=self.seed, rate=self.rate)
    else:
        def dropped_inputs():
            return npu_ops.dropout(inputs, keep_prob=1.0 - self.rate, seed=self.seed)

    return tf.__internal__.smart_cond.smart_cond(training, dropped_inputs,
                                                 lambda: tf.identity(inputs))


def _keras2_layers():
    """The layers module of the Keras 2 that scripts use: ``tf_keras`` when installed, else
    ``tf.keras`` when it is Keras 2 (TensorFlow 2.15's own); None with Keras 3 alone."""
    try:
        return importlib.import_module("tf_keras.layers")
    except ImportError:
        pass
    layers = getattr(tf.keras, "layers", None)
    keras = sys.modules.get("keras")
    if layers is not None and str(getattr(keras, "__version__", "3")).startswith("2."):
        return layers
    return None


def _dropout_classes():
    """Keras 2's ``Dropout`` first (the original's ``Dropout`` name), then TensorFlow's bundled
    legacy Keras one."""
    classes = []
    keras2 = _keras2_layers()
    try:
        bundled = importlib.import_module("tensorflow.python.keras.layers.core")
    except ImportError:
        bundled = None
    for module in (keras2, bundled):
        cls = getattr(module, "Dropout", None) if module is not None else None
        if cls is not None and cls not in classes:
            classes.append(cls)
    return classes


PATCHED_CLASSES = tuple(_dropout_classes())
"""The ``Dropout`` classes whose ``call`` is :func:`dropout_call`."""

for _cls in PATCHED_CLASSES:
    _cls.call = dropout_call

# The original module's names for the patched layer and the Keras backend.
Dropout = PATCHED_CLASSES[0] if PATCHED_CLASSES else None
backend = tf.compat.v1.keras.backend
