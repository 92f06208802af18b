"""Update the weights of a running online-inference session, then infer, in a loop (updating
weights in CANN's TensorFlow online-inference guide).

The original sample restores ``mnist_deep_model`` from a checkpoint, builds an assign graph fed by
placeholders (the new weights come from a training server as key-value pairs), and alternates
weight updates and inference. Here the checkpoint is produced first by training a small MNIST-style
model on synthetic data (no downloads); the ``TestPolicy`` class is the sample's, unchanged but for
the paths. The whole loop runs with and without NpuOptimizer and the predictions must match.

    python examples/weight_update.py [--updates 3] [--infers 4]
"""

import argparse
import os
import sys
import tempfile

# The helpers set TensorFlow's environment before it is imported: keep this order.
# isort: off
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import compare, quiet, without_npu_optimizer

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from npu_adapter.session import runner_of
from npu_bridge.estimator import npu_ops  # noqa: F401 - as in the sample
# isort: on


tf1 = tf.compat.v1


def train_and_save(ckpt_path, seed=0):
    """A small MNIST-style model (784 → 64 → 10) with an ``accuracy/ArgMax`` output."""
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(seed)
        x = tf1.placeholder(tf.float32, [None, 784], name="Placeholder")
        y = tf1.placeholder(tf.int64, [None], name="labels")
        w1 = tf1.get_variable("fc1/w", [784, 64])
        b1 = tf1.get_variable("fc1/b", [64], initializer=tf1.zeros_initializer())
        w2 = tf1.get_variable("fc2/w", [64, 10])
        b2 = tf1.get_variable("fc2/b", [10], initializer=tf1.zeros_initializer())
        h = tf.nn.relu(tf.matmul(x / 255.0, w1) + b1)
        logits = tf.matmul(h, w2) + b2
        with tf.name_scope("accuracy"):
            tf.argmax(logits, 1, name="ArgMax")
        loss = tf1.losses.sparse_softmax_cross_entropy(y, logits)
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        saver = tf1.train.Saver()
        rs = np.random.RandomState(seed)
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(3):
                sess.run(train, {x: 255 * rs.rand(32, 784), y: rs.randint(0, 10, 32)})
            saver.save(sess, ckpt_path)


class TestPolicy:
    """The sample's policy class."""

    def __init__(self, ckpt_path, config):
        self.sess = tf1.Session(config=config, graph=tf.Graph())
        self.ckpt_path = ckpt_path
        with self.sess.graph.as_default():
            self.load_graph()
        self.graph = self.sess.graph

    def load_graph(self):
        saver = tf1.train.import_meta_graph(self.ckpt_path + ".meta")
        saver.restore(self.sess, self.ckpt_path)
        self.vars = tf1.trainable_variables()
        self.var_placeholder_dict = {}
        self.var_id_to_name = {}
        self.update_op = []
        for i, var in enumerate(self.vars):
            self.var_placeholder_dict[var.name] = tf1.placeholder(
                var.dtype.base_dtype, shape=var.get_shape(), name="PlaceHolder_" + str(i))
            self.var_id_to_name[i] = var.name
            self.update_op.append(tf1.assign(var, self.var_placeholder_dict[var.name]))
        self.update_op = tf.group(*self.update_op)
        self.key_value = self.get_dummy_weights_for_test()

    def get_dummy_weights_for_test(self):
        weights = self.sess.run(self.vars)
        return {self.var_id_to_name[i]: w for i, w in enumerate(weights)}

    def update_weights(self, scale):
        feed_dict = {self.var_placeholder_dict[k]: v * scale for k, v in self.key_value.items()}
        self.sess.run(self.update_op, feed_dict=feed_dict)

    def infer(self, input_image):
        image = self.graph.get_operation_by_name("Placeholder").outputs[0]
        label_output = self.graph.get_operation_by_name("accuracy/ArgMax").outputs[0]
        return self.sess.run([label_output], feed_dict={image: input_image})

    def unload(self):
        self.sess.close()


def npu_config():
    config = tf1.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("force_fp16")
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    custom_op.parameter_map["graph_run_mode"].i = 0
    custom_op.parameter_map["stream_max_parallel_num"].s = tf.compat.as_bytes("AIcoreEngine:4")
    return config


def run(ckpt_path, config, updates, infers):
    policy = TestPolicy(ckpt_path, config)
    results = []
    try:
        for update in range(updates):
            policy.update_weights(1.0 + 0.5 * update)  # new weights each round
            rs = np.random.RandomState(update)
            for _ in range(infers):
                results.append(policy.infer(255 * rs.rand(16, 784).astype(np.float32))[0])
        runner = runner_of(policy.sess)
        rewritten = runner.rewrite_count if runner is not None else 0
    finally:
        policy.unload()
    return results, rewritten


def main(argv=None):
    quiet()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--infers", type=int, default=4)
    args = parser.parse_args(argv)
    ckpt = os.path.join(tempfile.mkdtemp(), "mnist_deep_model")
    train_and_save(ckpt)
    npu, rewritten = run(ckpt, npu_config(), args.updates, args.infers)
    plain, _ = run(ckpt, without_npu_optimizer(npu_config()), args.updates, args.infers)
    print("run signatures rewritten by the NpuSession:", rewritten)
    print("predictions of the last batch:", npu[-1].tolist())
    return 0 if compare(npu, plain) else 1


if __name__ == "__main__":
    sys.exit(main())
