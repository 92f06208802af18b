"""Shared by the examples: quiet, reproducible TensorFlow and the NPU-vs-plain comparison."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # run-to-run reproducible CPU kernels


def quiet():
    """Silence TensorFlow's deprecation chatter about the TF1 APIs these samples use on purpose."""
    import warnings

    import tensorflow as tf

    warnings.filterwarnings("ignore")
    tf.get_logger().setLevel("ERROR")


def compare(npu, plain):
    """Print and return whether two lists of numpy results are equal bit for bit."""
    import numpy as np

    same = len(npu) == len(plain) and all(
        np.asarray(a).tobytes() == np.asarray(b).tobytes() for a, b in zip(npu, plain))
    print("NpuSession output equals plain TensorFlow bit for bit:", same)
    return same


def without_npu_optimizer(config):
    """A copy of ``config`` without its NpuOptimizer entry: the same script, plain TensorFlow
    (a session whose config has no NpuOptimizer is exactly TensorFlow's)."""
    import tensorflow as tf

    plain = tf.compat.v1.ConfigProto()
    plain.CopyFrom(config)
    optimizers = plain.graph_options.rewrite_options.custom_optimizers
    kept = [o for o in optimizers if o.name != "NpuOptimizer"]
    del optimizers[:]
    optimizers.extend(kept)
    return plain
