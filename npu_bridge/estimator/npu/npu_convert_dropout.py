"""``npu_bridge.estimator.npu.npu_convert_dropout``: importing this module makes Keras'
``Dropout`` layer use the NPU dropout (``npu_ops.dropout``), as the original does.

:func:`dropout_call` replaces ``Dropout.call`` of Keras 2 (``tf_keras`` — which is ``tf.keras``
once ``npu_bridge`` is imported — or TensorFlow 2.15's own ``tf.keras``), and so of its
subclasses (``SpatialDropout1D``/``2D``/``3D``). In training, a layer without a noise shape drops
through ``npu_ops.dropout(inputs, keep_prob=1 - rate, seed=self.seed)``; with one it keeps
``tf.nn.dropout``. Outside training the layer is the identity. ``npu_ops.dropout`` builds graph
ops only, so the patched layer runs inside graphs (v1 sessions, ``tf.function``, ``Model.fit``)
and raises ``RuntimeError`` when called eagerly, as the original.

TensorFlow's internal copy of Keras (``tensorflow.python.keras``, which the original patched when
it was TensorFlow 1.15's ``tf.keras``) is not patched: no public TensorFlow 2 API uses it.
"""

import importlib
import numbers

import tensorflow as tf

import npu_bridge
from npu_adapter import tf_compat
from npu_bridge.estimator import npu_ops

__all__ = ["dropout_call"]

# Modules the original imports at its top level; scripts can reach them through this one.
nn = tf.nn


def _smart_cond(pred, true_fn, false_fn):
    """Keras' ``smart_cond``: a Python bool or a tensor of known value picks the branch while
    the graph is built; the learning-phase placeholder or a variable picks it at run time."""
    if isinstance(pred, tf.Variable):
        return tf.cond(pred, true_fn, false_fn)
    value = pred if isinstance(pred, (bool, int)) else tf.get_static_value(pred)
    if value is None:
        return tf.cond(pred, true_fn, false_fn)
    return true_fn() if value else false_fn()


def dropout_call(self, inputs, training=None):
    """``Dropout.call`` through the NPU dropout (see the module doc)."""
    if training is None:
        training = tf.compat.v1.keras.backend.learning_phase()
    noise_shape = tf_compat.keras_noise_shape(self, inputs)
    if isinstance(self.rate, numbers.Real) and self.rate == 0:
        return tf.identity(inputs)

    if noise_shape is not None:
        def dropped_inputs():
            return tf.nn.dropout(inputs, noise_shape=noise_shape, seed=self.seed, rate=self.rate)
    else:
        def dropped_inputs():
            return npu_ops.dropout(inputs, keep_prob=1.0 - self.rate, seed=self.seed)

    return _smart_cond(training, dropped_inputs, lambda: tf.identity(inputs))


def _keras2_layers():
    """The layers module of the Keras 2 that scripts use: ``tf.keras`` when it is Keras 2
    (TensorFlow 2.15's own, which npu_bridge leaves in place), else ``tf_keras`` when installed
    (TensorFlow >= 2.16, where npu_bridge points ``tf.keras`` at it); None with Keras 3 alone."""
    if npu_bridge.TENSORFLOW_KERAS_IS_KERAS2:
        return tf.keras.layers
    try:
        return importlib.import_module("tf_keras.layers")
    except ImportError:
        return None


def _dropout_classes():
    """Keras 2's ``Dropout`` (the original's ``Dropout`` name), when there is a Keras 2."""
    layers = _keras2_layers()
    cls = getattr(layers, "Dropout", None) if layers is not None else None
    return [cls] if cls is not None else []


PATCHED_CLASSES = tuple(_dropout_classes())
"""The ``Dropout`` classes whose ``call`` is :func:`dropout_call`."""

for _cls in PATCHED_CLASSES:
    _cls.call = dropout_call

# The original module's names for the patched layer and the Keras backend.
Dropout = PATCHED_CLASSES[0] if PATCHED_CLASSES else None
backend = tf.compat.v1.keras.backend
