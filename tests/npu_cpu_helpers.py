"""Helpers of the npu_bridge API-module tests: build in a fresh graph, run in a session."""

import tensorflow as tf


def run(build, *more_runs):
    """Build ``build()`` in a new graph and run it; each ``more_runs`` item (a function of the
    first build's result giving fetches) runs afterwards in the same session. Returns the list of
    results (one item when there are no more runs)."""
    with tf.Graph().as_default():
        fetches = build()
        extra = [make(fetches) for make in more_runs]
        with tf.compat.v1.Session() as sess:
            results = [sess.run(fetches)] + [sess.run(e) for e in extra]
    return results if more_runs else results[0]


def keras2():
    """The Keras 2 that scripts use with npu_bridge: TensorFlow's own ``tf.keras`` where it is
    Keras 2 (TensorFlow 2.15), else ``tf_keras`` (skips with Keras 3 alone). Never imports
    ``tf_keras`` on TensorFlow 2.15: there an imported tf_keras takes over Keras 2.15's optimizer
    conversion, and TensorFlow's own ``model_to_estimator`` fails afterwards."""
    import pytest

    import npu_bridge

    if npu_bridge.TENSORFLOW_KERAS_IS_KERAS2:
        return tf.keras
    try:
        import tf_keras
    except ImportError:
        pytest.skip("needs Keras 2 (tf_keras, or TensorFlow 2.15's tf.keras)")
    return tf_keras
