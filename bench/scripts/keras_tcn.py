"""A Keras temporal convolutional network trained the ModelZoo way, as a whole script.

Custom layers (a dilated causal residual block with weight-normalised convolutions, a
learned layer scale that keeps a running statistic with ``add_update``) are built through
``tf.keras``; the script configures the Keras session with ``set_keras_session_npu_config``
(``NpuOptimizer`` with ``allow_mix_precision``, remapping off), builds the functional model, and
fits it for a few epochs on in-memory sequences. It is written for TF 1.15: run it through a TF1
alias launcher (``bench/scripts/tf1_launch.py``) so that ``import tensorflow as tf`` gives
``tf.compat.v1``.

Prints one JSON line: the final loss and the seconds spent in the model build and the fit.
"""

import json
import time

import numpy as np
import tensorflow as tf

from npu_bridge.npu_init import *  # noqa: F403 - the ModelZoo way

EPOCHS, SAMPLES, BATCH, STEPS_T, FEATURES, FILTERS, CLASSES = 3, 512, 32, 64, 8, 32, 4


class CausalConv1D(tf.keras.layers.Layer):
    """A dilated causal 1-D convolution with a weight-normalised kernel."""

    def __init__(self, filters, kernel_size, dilation, **kwargs):
        super().__init__(**kwargs)
        self.filters, self.kernel_size, self.dilation = filters, kernel_size, dilation

    def build(self, input_shape):
        self.v = self.add_weight("v", [self.kernel_size, int(input_shape[-1]), self.filters])
        self.g = self.add_weight("g", [self.filters], initializer="ones")
        self.b = self.add_weight("b", [self.filters], initializer="zeros")
        super().build(input_shape)

    def call(self, x):
        kernel = self.g * tf.nn.l2_normalize(self.v, axis=[0, 1])
        pad = (self.kernel_size - 1) * self.dilation
        x = tf.pad(x, [[0, 0], [pad, 0], [0, 0]])
        y = tf.nn.convolution(x, kernel, padding="VALID", dilations=[self.dilation])
        return tf.nn.bias_add(y, self.b)


class LayerScale(tf.keras.layers.Layer):
    """A learned per-channel scale that also tracks the mean activation (``add_update``)."""

    def build(self, input_shape):
        channels = int(input_shape[-1])
        self.scale = self.add_weight("scale", [channels], initializer="ones")
        self.moving_mean = self.add_weight("moving_mean", [channels], initializer="zeros",
                                           trainable=False)
        super().build(input_shape)

    def call(self, x, training=None):
        if training:
            mean = tf.reduce_mean(x, axis=[0, 1])
            self.add_update(tf.compat.v1.assign(self.moving_mean,
                                                0.9 * self.moving_mean + 0.1 * mean))
        return x * self.scale


class ResidualBlock(tf.keras.layers.Layer):
    """Two causal convolutions with ReLU and dropout, a 1x1 projection on the skip path."""

    def __init__(self, filters, dilation, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = CausalConv1D(filters, 3, dilation)
        self.conv2 = CausalConv1D(filters, 3, dilation)
        self.drop = tf.keras.layers.Dropout(0.1)
        self.scale = LayerScale()
        self.project = tf.keras.layers.Conv1D(filters, 1)

    def call(self, x, training=None):
        y = tf.nn.relu(self.conv1(x))
        y = self.drop(y, training=training)
        y = tf.nn.relu(self.conv2(y))
        y = self.scale(y, training=training)
        if x.shape[-1] != y.shape[-1]:
            x = self.project(x)
        return tf.nn.relu(x + y)


def build_model():
    inputs = tf.keras.Input([STEPS_T, FEATURES])
    h = inputs
    for i, dilation in enumerate((1, 2, 4, 8)):
        h = ResidualBlock(FILTERS, dilation, name=f"block{i}")(h)
    h = tf.keras.layers.Lambda(lambda t: t[:, -1, :])(h)
    outputs = tf.keras.layers.Dense(CLASSES, activation="softmax")(h)
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer="adam",
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def main():
    sess_config = tf.ConfigProto()
    custom_op = sess_config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("allow_mix_precision")
    sess_config.graph_options.rewrite_options.remapping = RewriterConfig.OFF  # noqa: F405
    sess = set_keras_session_npu_config(config=sess_config)  # noqa: F405
    rs = np.random.RandomState(0)
    x = rs.randn(SAMPLES, STEPS_T, FEATURES).astype(np.float32)
    y = (x[:, -8:, 0].sum(axis=1) > 0).astype(np.int32) + 2 * (x[:, :, 1].mean(axis=1) > 0)
    tf.set_random_seed(0)
    start = time.perf_counter()
    model = build_model()
    built = time.perf_counter()
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=False)
    fitted = time.perf_counter()
    sess.close()
    print(json.dumps({"loss": float(history.history["loss"][-1]),
                      "build_s": built - start, "fit_s": fitted - built}), flush=True)


if __name__ == "__main__":
    main()
