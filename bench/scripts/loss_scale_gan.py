"""A DCGAN-style training loop with two loss-scale optimizers, as a whole script.

A generator (dense, two transposed convolutions) and a discriminator (two strided
convolutions, dense), each trained by Adam wrapped in ``NPULossScaleOptimizer`` with an
``ExponentialUpdateLossScaleManager``; noise and real images are fed per step
(``feed_dict``), the discriminator and the generator step alternate, and the losses are logged
every few steps, as ModelZoo's DCGAN does. ``NpuOptimizer`` in the ``ConfigProto``
(``allow_mix_precision``). TF1 style: ``import tensorflow.compat.v1 as tf`` with
``disable_v2_behavior()``.

Prints one JSON line: the final losses and the seconds spent in the training loop.
"""

import json
import time

import numpy as np

# isort: off
from npu_bridge.npu_init import *  # noqa: F403 - the ModelZoo way
import tensorflow.compat.v1 as tf  # after the star import, which exports TensorFlow's tf
# isort: on

tf.disable_v2_behavior()

STEPS, LOG_EVERY, BATCH, NOISE, SIZE = 60, 10, 16, 32, 16


def generator(z):
    with tf.variable_scope("generator", reuse=tf.AUTO_REUSE):
        h = tf.layers.dense(z, 4 * 4 * 32, activation=tf.nn.relu)
        h = tf.reshape(h, [-1, 4, 4, 32])
        h = tf.layers.conv2d_transpose(h, 16, 4, 2, padding="same", activation=tf.nn.relu)
        return tf.layers.conv2d_transpose(h, 1, 4, 2, padding="same", activation=tf.tanh)


def discriminator(x):
    with tf.variable_scope("discriminator", reuse=tf.AUTO_REUSE):
        h = tf.layers.conv2d(x, 16, 4, 2, padding="same", activation=tf.nn.leaky_relu)
        h = tf.layers.conv2d(h, 32, 4, 2, padding="same", activation=tf.nn.leaky_relu)
        return tf.layers.dense(tf.layers.flatten(h), 1)


def loss_scaled_adam(scope_loss, scope, learning_rate=2e-4):
    manager = ExponentialUpdateLossScaleManager(  # noqa: F405
        init_loss_scale=2 ** 12, incr_every_n_steps=100, decr_every_n_nan_or_inf=2,
        decr_ratio=0.5)
    optimizer = NPULossScaleOptimizer(  # noqa: F405
        tf.train.AdamOptimizer(learning_rate, beta1=0.5), manager)
    variables = tf.trainable_variables(scope)
    return optimizer.minimize(scope_loss, var_list=variables)


def main():
    tf.set_random_seed(0)
    z = tf.placeholder(tf.float32, [BATCH, NOISE], name="z")
    real = tf.placeholder(tf.float32, [BATCH, SIZE, SIZE, 1], name="real")
    fake = generator(z)
    d_real, d_fake = discriminator(real), discriminator(fake)
    xent = tf.nn.sigmoid_cross_entropy_with_logits
    d_loss = tf.reduce_mean(xent(labels=tf.ones_like(d_real), logits=d_real)) \
        + tf.reduce_mean(xent(labels=tf.zeros_like(d_fake), logits=d_fake))
    g_loss = tf.reduce_mean(xent(labels=tf.ones_like(d_fake), logits=d_fake))
    d_step = loss_scaled_adam(d_loss, "discriminator")
    g_step = loss_scaled_adam(g_loss, "generator")

    config = tf.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("allow_mix_precision")
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF  # noqa: F405
    rs = np.random.RandomState(0)
    images = np.tanh(rs.randn(256, SIZE, SIZE, 1)).astype(np.float32)
    start = time.perf_counter()
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(1, STEPS + 1):
            batch = images[rs.randint(0, len(images), BATCH)]
            noise = rs.uniform(-1, 1, [BATCH, NOISE]).astype(np.float32)
            sess.run(d_step, {z: noise, real: batch})
            sess.run(g_step, {z: noise})
            if step % LOG_EVERY == 0:
                d_value, g_value = sess.run([d_loss, g_loss], {z: noise, real: batch})
    print(json.dumps({"d_loss": float(d_value), "g_loss": float(g_value),
                      "loop_s": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
