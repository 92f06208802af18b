"""A ModelZoo-style session training loop with loop sinking, as a whole script.

A small convolutional classifier (``tf.layers``) on a ``tf.data`` pipeline, Momentum with a
global step, ``NpuOptimizer`` configured in the ``ConfigProto`` (``iterations_per_loop``,
``allow_mix_precision``, remapping off), ``util.set_iteration_per_loop``; every loop it logs the
loss, and every few loops it evaluates the accuracy on a held-out batch (another run
signature), as training scripts do. TF1 style: ``import tensorflow.compat.v1 as tf`` with
``disable_v2_behavior()`` (ref variables).

Prints one JSON line: the final loss and accuracy and the seconds spent in the training loop.
"""

import json
import time

import numpy as np

# isort: off
from npu_bridge.npu_init import *  # noqa: F403 - the ModelZoo way
import tensorflow.compat.v1 as tf  # after the star import, which exports TensorFlow's tf
# isort: on

tf.disable_v2_behavior()

ITERATIONS_PER_LOOP, LOOPS, EVAL_EVERY, BATCH, SAMPLES, SIZE, CLASSES = 10, 30, 5, 32, 1024, 16, 4


def data(seed):
    rs = np.random.RandomState(seed)
    x = rs.rand(SAMPLES, SIZE, SIZE, 3).astype(np.float32)
    y = (x[:, :SIZE // 2, :, 0].mean(axis=(1, 2)) > 0.5).astype(np.int32) \
        + 2 * (x[:, :, :SIZE // 2, 1].mean(axis=(1, 2)) > 0.5)
    return x, y.astype(np.int32)


def network(x, training):
    h = x
    for i, filters in enumerate((16, 32)):
        h = tf.layers.conv2d(h, filters, 3, padding="same", activation=tf.nn.relu,
                             name=f"conv{i}", reuse=tf.AUTO_REUSE)
        h = tf.layers.max_pooling2d(h, 2, 2)
    h = tf.layers.flatten(h)
    h = tf.layers.dense(h, 64, activation=tf.nn.relu, name="fc", reuse=tf.AUTO_REUSE)
    h = tf.layers.dropout(h, 0.1, training=training)
    return tf.layers.dense(h, CLASSES, name="logits", reuse=tf.AUTO_REUSE)


def main():
    tf.set_random_seed(0)
    x_all, y_all = data(0)
    dataset = (tf.data.Dataset.from_tensor_slices((x_all, y_all))
               .shuffle(SAMPLES, seed=1).batch(BATCH, drop_remainder=True).repeat())
    iterator = tf.data.make_initializable_iterator(dataset)
    x, y = iterator.get_next()
    logits = network(x, training=True)
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    global_step = tf.train.get_or_create_global_step()
    train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss, global_step=global_step)
    x_eval, y_eval = data(1)
    x_eval, y_eval = tf.constant(x_eval[:128]), tf.constant(y_eval[:128])
    predictions = tf.argmax(network(x_eval, training=False), axis=1, output_type=tf.int32)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(predictions, y_eval), tf.float32))

    config = tf.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["iterations_per_loop"].i = ITERATIONS_PER_LOOP
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("allow_mix_precision")
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF  # noqa: F405
    start = time.perf_counter()
    with tf.Session(config=config) as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer(),
                  iterator.initializer])
        loop_op = util.set_iteration_per_loop(sess, train_op, ITERATIONS_PER_LOOP)  # noqa: F405
        acc = None
        for loop in range(1, LOOPS + 1):
            loss_value, _ = sess.run([loss, loop_op])
            if loop % EVAL_EVERY == 0:
                acc = sess.run(accuracy)
        step = sess.run(global_step)
    print(json.dumps({"loss": float(loss_value), "accuracy": float(acc), "global_step": int(step),
                      "loop_s": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
