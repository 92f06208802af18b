"""Pass-through loss-scale optimizer: TensorFlow's ``MixedPrecisionLossScaleOptimizer``."""

import tensorflow as tf

__all__ = ["NPULossScaleOptimizer"]


def NPULossScaleOptimizer(opt, loss_scale_manager, is_distributed=False):
    """``opt`` with TensorFlow's loss scaling by ``loss_scale_manager``."""
    del is_distributed
    return tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(opt, loss_scale_manager)
