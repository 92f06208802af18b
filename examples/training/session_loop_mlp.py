"""Loop sinking in a ``tf.compat.v1.Session`` training loop (ModelZoo style): an MLP classifier on
a ``tf.data`` pipeline, trained with ``util.set_iteration_per_loop``.

With ``iterations_per_loop`` = N the NPU session runs N training steps per ``Session.run`` of the
``IterationOp`` (each step takes the next batch); the script's loop advances N steps per run and
logs the last step's loss, as on an Ascend device. The plain TensorFlow twin (``npu=False``) runs
one step per run; after k·N steps both have the same loss and weights, bit for bit.

    python examples/training/session_loop_mlp.py
"""

import sys

if __package__ in (None, ""):
    sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np
from _zoo import npu_session_config, quiet, report, tf, tf1, training_geops, variable_values

from npu_bridge.estimator.npu import util

FEATURES, CLASSES, HIDDEN = 20, 5, 32


def synthetic_data(samples, seed=0):
    """A separable classification problem: labels from a fixed random linear teacher."""
    rs = np.random.RandomState(seed)
    x = rs.randn(samples, FEATURES).astype(np.float32)
    teacher = rs.randn(FEATURES, CLASSES).astype(np.float32)
    return x, np.argmax(x @ teacher, axis=1).astype(np.int32)


def dense(x, units, name, activation=None):
    """A fully connected layer with ``tf.compat.v1.get_variable`` weights (Glorot-uniform
    kernel seeded by the graph seed, zero bias)."""
    with tf1.variable_scope(name):
        kernel = tf1.get_variable("kernel", [x.shape[-1], units])
        bias = tf1.get_variable("bias", [units], initializer=tf1.zeros_initializer())
        y = tf.nn.bias_add(tf.matmul(x, kernel), bias)
    return activation(y) if activation is not None else y


def build_model(x, y, learning_rate):
    """Two dense ReLU layers, softmax cross-entropy, momentum SGD with a global step."""
    h = dense(x, HIDDEN, "dense1", tf.nn.relu)
    h = dense(h, HIDDEN, "dense2", tf.nn.relu)
    logits = dense(h, CLASSES, "logits")
    loss = tf1.losses.sparse_softmax_cross_entropy(y, logits)
    global_step = tf1.train.get_or_create_global_step()
    train_op = tf1.train.MomentumOptimizer(learning_rate, 0.9).minimize(
        loss, global_step=global_step)
    return loss, train_op, global_step


def main(npu=True, iterations_per_loop=10, loops=3, batch_size=32, samples=640,
         learning_rate=0.05, log=False):
    """Train ``loops`` × ``iterations_per_loop`` steps; return the loss after each run of the
    loop (the NPU run) or after each step (plain), the global step, the final weights and the
    GeOps that hold the training step. ``log``: print the step and loss after each run."""
    quiet()
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(1234)
        x_all, y_all = synthetic_data(samples)
        dataset = (tf.data.Dataset.from_tensor_slices((x_all, y_all))
                   .shuffle(samples, seed=7).batch(batch_size, drop_remainder=True).repeat())
        iterator = tf1.data.make_initializable_iterator(dataset)
        x, y = iterator.get_next()
        loss, train_op, global_step = build_model(x, y, learning_rate)
        init = [tf1.global_variables_initializer(), tf1.local_variables_initializer(),
                iterator.initializer]
    steps_per_run = iterations_per_loop if npu else 1
    config = npu_session_config(iterations_per_loop=steps_per_run, npu=npu,
                                precision_mode="allow_mix_precision")
    losses = []
    with tf1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        with graph.as_default():
            loop_op = util.set_iteration_per_loop(sess, train_op, steps_per_run)
        for done in range(steps_per_run, loops * iterations_per_loop + 1, steps_per_run):
            loss_value, _ = sess.run([loss, loop_op])
            losses.append(loss_value)
            if log:
                print(f"session_loop_mlp: step {done}: loss {loss_value:.6f}")
        step = sess.run(global_step)
        weights = variable_values(graph, sess, tf1.GraphKeys.TRAINABLE_VARIABLES)
    return {"losses": losses, "global_step": step, "weights": weights,
            "steps_per_run": steps_per_run, "geops": training_geops(graph) if npu else []}


def plain_at_loop_ends(plain, npu):
    """The plain run's per-step losses at the steps the NPU run logged (every N-th)."""
    n = npu["steps_per_run"]
    return dict(plain, losses=plain["losses"][n - 1::n])


if __name__ == "__main__":
    npu_run, plain_run = main(npu=True, log=True), main(npu=False)
    plain_losses = plain_at_loop_ends(plain_run, npu_run)["losses"]
    print("session_loop_mlp: plain TensorFlow at the same steps: "
          + ", ".join(f"{value:.6f}" for value in plain_losses))
    sys.exit(report("session_loop_mlp", npu_run, plain_at_loop_ends(plain_run, npu_run)))
