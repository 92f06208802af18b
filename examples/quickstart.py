"""Quick start: run a TF1-style inference script through npu-adapter on the CPU reference.

A small CNN classifier is built and frozen (random weights, fixed seed), then run twice on the same
batch: once in a plain TensorFlow session and once in an ``NpuSession`` configured the way Ascend
scripts configure ``NpuOptimizer``. The script prints where every op went and why, and checks the
two results are bit-for-bit equal (exit code 1 otherwise).

    python examples/quickstart.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # run-to-run reproducible CPU kernels

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

import npu_adapter
from npu_adapter.session import runner_of

tf1 = tf.compat.v1


def build_frozen_cnn():
    """A 2-conv + dense classifier on 32x32x3 images, frozen to a GraphDef."""
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(0)
        images = tf1.placeholder(tf.float32, [None, 32, 32, 3], name="images")
        x = images
        for i, channels in enumerate((16, 32)):
            k = tf1.get_variable(f"conv{i}/kernel", [3, 3, x.shape[-1], channels])
            b = tf1.get_variable(f"conv{i}/bias", [channels], initializer=tf1.zeros_initializer())
            x = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, k, 1, "SAME"), b))
            x = tf.nn.max_pool2d(x, 2, 2, "VALID")
        x = tf.reshape(x, [-1, 8 * 8 * 32])
        w = tf1.get_variable("dense/kernel", [8 * 8 * 32, 10])
        logits = tf.matmul(x, w, name="logits")
        tf.nn.softmax(logits, name="probabilities")
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            return tf1.graph_util.convert_variables_to_constants(
                sess, graph.as_graph_def(), ["probabilities"])


def npu_config():
    """The ConfigProto an Ascend online-inference script builds (CANN's online-inference guide)."""
    config = tf1.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("force_fp16")
    custom_op.parameter_map["graph_run_mode"].i = 0
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    config.graph_options.rewrite_options.memory_optimization = RewriterConfig.OFF
    return config


def main():
    frozen = build_frozen_cnn()
    batch = np.random.RandomState(1).rand(4, 32, 32, 3).astype(np.float32)

    results = {}
    for session_class in (tf1.Session, npu_adapter.NpuSession):
        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(frozen, name="")
        with session_class(graph=graph, config=npu_config()) as sess:
            results[session_class.__name__] = sess.run("probabilities:0", {"images:0": batch})
            if session_class is npu_adapter.NpuSession:
                report = runner_of(sess).rewrite_result("probabilities:0", {"images:0": batch})

    print("clusters:")
    for cluster in report.clusters:
        print(f"  {cluster.name}: {cluster.size} ops, inputs {', '.join(cluster.inputs)}; "
              f"outputs {', '.join(cluster.outputs)}")
    print("placement (device, reason: count):")
    for (device, reason), count in report.reasons():
        print(f"  {device:4s} {reason}: {count}")
    same = results["Session"].tobytes() == results["NpuSession"].tobytes()
    print("NpuSession output equals plain TensorFlow bit for bit:", same)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
