"""An LSTM on the fused ``DynamicRNN`` layer with loss scaling (ModelZoo style):
``npu_dynamic_rnn.DynamicRNN`` over time-major sequences, a dense classifier on the last hidden
state, Adam wrapped in ``NPULossScaleOptimizer`` with an ``ExponentialUpdateLossScaleManager``.

The manager grows the scale after ``incr_every_n_steps`` finite steps and shrinks it after
``decr_every_n_nan_or_inf`` overflowing ones; an overflowing step (inf/nan gradients) applies
nothing — weights, Adam slots and the global step stay as they were. ``overflow_steps`` makes
the batches of those steps carry an ``inf`` (what a float16 overflow on the device looks like to
the optimizer): their gradients are not finite, so those steps are skipped and the scale
shrinks. The script logs, per run, the loss, the loss scale, the global step and the weights;
the plain twin (``npu=False``) gives the same, bit for bit. Runs on TensorFlow 2.15 and 2.21
(Keras 2 layers: ``tf_keras`` on 2.21, TensorFlow's own ``keras`` on 2.15).

    python examples/training/lstm_loss_scale.py
"""

import sys

if __package__ in (None, ""):
    sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np
from _zoo import npu_session_config, quiet, report, tf, tf1, training_geops, variable_values

from npu_bridge.estimator.npu import util
from npu_bridge.estimator.npu.npu_dynamic_rnn import DynamicRNN
from npu_bridge.estimator.npu.npu_loss_scale_manager import (
    ExponentialUpdateLossScaleManager,
)
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer

STEPS_T, FEATURES, HIDDEN, CLASSES = 8, 4, 16, 2


def synthetic_sequences(samples, seed=0):
    """Sequences ``[samples, time, features]``; the label says whether the running sum of the
    first feature ends positive."""
    rs = np.random.RandomState(seed)
    x = rs.randn(samples, STEPS_T, FEATURES).astype(np.float32)
    return x, (x[:, :, 0].sum(axis=1) > 0).astype(np.int32)


def build_model(x, y, loss_scale_manager, learning_rate):
    """DynamicRNN (time-major) -> last hidden state -> dense logits; loss-scaled Adam."""
    time_major = tf.transpose(x, [1, 0, 2])
    lstm = DynamicRNN(HIDDEN, tf.float32, forget_bias=1.0)
    outputs = lstm(time_major)
    last_h = outputs[1][-1]                       # output_h of the last time step
    with tf1.variable_scope("classifier"):
        kernel = tf1.get_variable("kernel", [HIDDEN, CLASSES])
        bias = tf1.get_variable("bias", [CLASSES], initializer=tf1.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(last_h, kernel), bias)
    loss = tf1.losses.sparse_softmax_cross_entropy(y, logits)
    global_step = tf1.train.get_or_create_global_step()
    optimizer = NPULossScaleOptimizer(tf1.train.AdamOptimizer(learning_rate), loss_scale_manager)
    train_op = optimizer.minimize(loss, global_step=global_step)
    return loss, train_op, global_step


def overflowing_batches(dataset, overflow_steps):
    """``dataset`` (batches of ``(x, y)``) whose batches number ``overflow_steps`` (0-based)
    have ``x`` multiplied by ``inf``."""
    if not overflow_steps:
        return dataset
    bad = tf.constant(sorted(overflow_steps), tf.int64)

    def poison(index, batch):
        x, y = batch
        factor = tf.where(tf.reduce_any(tf.equal(index, bad)), np.float32(np.inf),
                          np.float32(1.0))
        return x * factor, y

    return dataset.enumerate().map(poison)


def main(npu=True, iterations_per_loop=1, steps=12, batch_size=16, samples=256,
         init_loss_scale=2.0 ** 10, incr_every_n_steps=4, decr_every_n_nan_or_inf=1,
         decr_ratio=0.5, overflow_steps=(), learning_rate=0.01):
    """Train ``steps`` steps (``iterations_per_loop`` per run on the NPU); after every run
    record the fetched loss, the loss scale, the global step and the trainable weights."""
    quiet()
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(77)
        xs, ys = synthetic_sequences(samples)
        dataset = (tf.data.Dataset.from_tensor_slices((xs, ys)).shuffle(samples, seed=5)
                   .batch(batch_size, drop_remainder=True).repeat())
        dataset = overflowing_batches(dataset, overflow_steps)
        iterator = tf1.data.make_initializable_iterator(dataset)
        x, y = iterator.get_next()
        manager = ExponentialUpdateLossScaleManager(
            init_loss_scale, incr_every_n_steps=incr_every_n_steps,
            decr_every_n_nan_or_inf=decr_every_n_nan_or_inf, decr_ratio=decr_ratio)
        loss, train_op, global_step = build_model(x, y, manager, learning_rate)
        loss_scale = manager.get_loss_scale()
        init = [tf1.global_variables_initializer(), tf1.local_variables_initializer(),
                iterator.initializer]
    steps_per_run = iterations_per_loop if npu else 1
    config = npu_session_config(iterations_per_loop=steps_per_run, npu=npu,
                                precision_mode="allow_mix_precision")
    trace = {"losses": [], "loss_scales": [], "global_steps": [], "weights_per_run": []}
    with tf1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        with graph.as_default():
            loop_op = util.set_iteration_per_loop(sess, train_op, steps_per_run)
        trace["initial_weights"] = variable_values(graph, sess, tf1.GraphKeys.TRAINABLE_VARIABLES)
        trace["initial_loss_scale"] = sess.run(loss_scale)
        for _ in range(0, steps, steps_per_run):
            trace["losses"].append(sess.run([loss, loop_op])[0])
            scale, step = sess.run([loss_scale, global_step])
            trace["loss_scales"].append(scale)
            trace["global_steps"].append(step)
            trace["weights_per_run"].append(
                variable_values(graph, sess, tf1.GraphKeys.TRAINABLE_VARIABLES))
        weights = variable_values(graph, sess)
    trace.update(weights=weights, steps_per_run=steps_per_run,
                 geops=training_geops(graph) if npu else [])
    return trace


def plain_at_loop_ends(plain, npu):
    """The plain run's per-step records at the steps the NPU run logged (every N-th)."""
    n = npu["steps_per_run"]
    return dict(plain, **{k: plain[k][n - 1::n] for k in
                          ("losses", "loss_scales", "global_steps", "weights_per_run")})


if __name__ == "__main__":
    keys = ("losses", "loss_scales", "global_steps", "weights")
    status = 0
    for title, kwargs in (("lstm_loss_scale", {}),
                          ("lstm_loss_scale (forced overflow)", {"overflow_steps": (2, 3, 9)})):
        npu_run, plain_run = main(npu=True, **kwargs), main(npu=False, **kwargs)
        print(f"{title}: loss scale per step:", [float(s) for s in npu_run["loss_scales"]])
        print(f"{title}: global step per step:", [int(s) for s in npu_run["global_steps"]])
        status |= report(title, npu_run, plain_run, keys=keys)
    sys.exit(status)
