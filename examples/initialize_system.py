"""The TF Adapter's ``initialize_system`` / ``shutdown_system`` around training in a session.

The documented pattern: build the NPUInit/NPUShutdown ops, run ``initialize_system`` in a
session configured with NpuOptimizer before anything else (the original initialises GE and
collective communication there; rank queries work afterwards), train, then run
``shutdown_system`` and close the session. On the CPU reference the two ops validate the session
and do nothing else. The losses must equal plain TensorFlow's.

    python examples/initialize_system.py [--steps 10]
"""

import argparse
import os
import sys

# The helpers set TensorFlow's environment before it is imported: keep this order.
# isort: off
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import compare, quiet, without_npu_optimizer

from npu_bridge.npu_init import *  # noqa: F403 - exactly as the sample

import numpy as np
import tensorflow as tf
# isort: on


def npu_config():
    config = tf.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF  # noqa: F405
    config.graph_options.rewrite_options.memory_optimization = RewriterConfig.OFF  # noqa: F405
    return config


def run(config, steps):
    graph = tf.Graph()
    with graph.as_default():
        npu_init = npu_ops.initialize_system()  # noqa: F405
        npu_shutdown = npu_ops.shutdown_system()  # noqa: F405
        tf.set_random_seed(2)
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.float32, [None, 1], name="y")
        # Explicit initializer seeds: Keras-backed layers ignore the graph seed.
        hidden = tf.layers.dense(x, 8, activation=tf.nn.tanh,
                                 kernel_initializer=tf.glorot_uniform_initializer(seed=1))
        pred = tf.layers.dense(hidden, 1, kernel_initializer=tf.glorot_uniform_initializer(seed=2))
        loss = tf.reduce_mean(tf.square(pred - y))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    rs = np.random.RandomState(0)
    xs = rs.randn(32, 6).astype(np.float32)
    ys = np.sin(xs.sum(axis=1, keepdims=True)).astype(np.float32)
    with tf.Session(graph=graph, config=config) as sess:
        sess.run(npu_init)
        rank = (get_rank_size(), get_rank_id())  # noqa: F405 - single rank here
        sess.run(init)
        losses = [sess.run([loss, train], {x: xs, y: ys})[0] for _ in range(steps)]
        sess.run(npu_shutdown)
    return losses, rank


def main(argv=None):
    quiet()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    npu, rank = run(npu_config(), args.steps)
    plain, _ = run(without_npu_optimizer(npu_config()), args.steps)
    print(f"rank size {rank[0]}, rank id {rank[1]}; loss {npu[0]:.5f} -> {npu[-1]:.5f}")
    return 0 if compare(npu, plain) else 1


if __name__ == "__main__":
    sys.exit(main())
