"""``from npu_bridge.npu_init import *`` of the pass-through: the names the benchmark scripts use,
doing what plain TensorFlow does with them. As the real module, it turns eager execution off."""

import tensorflow as tf
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from npu_bridge.estimator.npu import util
from npu_bridge.estimator.npu.npu_loss_scale_manager import (
    ExponentialUpdateLossScaleManager,
    FixedLossScaleManager,
)
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer

__all__ = ["ExponentialUpdateLossScaleManager", "FixedLossScaleManager", "NPULossScaleOptimizer",
           "RewriterConfig", "npu_config_proto", "set_keras_session_npu_config", "tf", "util"]

tf.compat.v1.disable_eager_execution()


def npu_config_proto(config_proto=None):
    """The ``ConfigProto`` as given (a new one for None)."""
    return config_proto if config_proto is not None else tf.compat.v1.ConfigProto()


def set_keras_session_npu_config(config=None):
    """A plain session with ``config``, made the Keras session; returned."""
    sess = tf.compat.v1.Session(config=npu_config_proto(config))
    tf.compat.v1.keras.backend.set_session(sess)
    return sess
