"""Mix compile, and choosing what is offloaded with ``in_out_pair`` (mixed computing in CANN's
TensorFlow online-inference guide).

A YOLO-like inference graph: image pre-processing (decoding-like string work that stays on the
host), a convolutional body, and post-processing. It is run three ways, each compared with plain
TensorFlow on the same inputs:

1. ``mix_compile_mode`` alone: unsupported ops stay on the host, the rest is offloaded in
   several clusters;
2. ``in_out_pair`` with ``in_out_pair_flag`` true: only the nodes between the given in/out nodes
   (the body) are offloaded;
3. ``in_out_pair_flag`` false: that region stays on the host and everything else is offloaded.

    python examples/mix_compile.py
"""

import os
import sys

# The helpers set TensorFlow's environment before it is imported: keep this order.
# isort: off
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import compare, quiet, without_npu_optimizer

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from npu_bridge.estimator import npu_ops  # noqa: F401
from npu_bridge.estimator.npu import npu_scope
from npu_adapter.session import runner_of
# isort: on


tf1 = tf.compat.v1


def build_graph():
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(1)
        raw = tf1.placeholder(tf.string, [], name="image_string")
        values = tf.strings.to_number(tf.strings.split([raw], ",").values)  # host-only ops
        image = tf.reshape(values, [1, 16, 16, 3], name="image")
        with npu_scope.without_npu_compile_scope():
            image = tf.identity(image * (1.0 / 255.0), name="normalised")
        # Explicit initializer seeds: Keras-backed layers ignore the graph seed.
        def seeded(k):
            return tf1.glorot_uniform_initializer(seed=k)

        # TF 1.15's tf.layers make ref variables (VariableV2, read through an Identity). With
        # resource variables the original adapter rejects the in_out_pair runs below: the region
        # starts at the convolution, so the ReadVariableOp of its kernel stays on the host, and
        # a host node reading a variable through a resource edge is an error in mix mode.
        with tf1.variable_scope("", use_resource=False):
            x = tf1.layers.conv2d(image, 8, 3, padding="same", activation=tf.nn.relu,
                                  kernel_initializer=seeded(1), name="conv2d_1")
            x = tf1.layers.conv2d(x, 8, 3, padding="same", activation=tf.nn.relu,
                                  kernel_initializer=seeded(2), name="conv2d_2")
            head_a = tf1.layers.conv2d(x, 4, 1, kernel_initializer=seeded(3), name="conv2d_59")
            head_b = tf1.layers.conv2d(x, 4, 1, kernel_initializer=seeded(4), name="conv2d_67")
        boxes = tf.concat([tf.reduce_mean(head_a, [1, 2]), tf.reduce_max(head_b, [1, 2])], 1)
        tf.nn.softmax(boxes, name="scores")
        init = tf1.global_variables_initializer()
    return graph, init


def config(**options):
    cfg = tf1.ConfigProto()
    custom_op = cfg.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["mix_compile_mode"].b = True
    for key, value in options.items():
        if isinstance(value, bool):
            custom_op.parameter_map[key].b = value
        else:
            custom_op.parameter_map[key].s = tf.compat.as_bytes(value)
    cfg.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    return cfg


def in_out_pair():
    all_graph_iop = []
    in_nodes = ["conv2d_1/Conv2D"]
    out_nodes = ["conv2d_59/BiasAdd", "conv2d_67/BiasAdd"]
    all_graph_iop.append([in_nodes, out_nodes])
    return str(all_graph_iop)  # the documented way to build the option


def run(session_config):
    graph, init = build_graph()
    text = ",".join(str(v) for v in np.random.RandomState(0).randint(0, 255, 16 * 16 * 3))
    with tf1.Session(graph=graph, config=session_config) as sess:
        sess.run(init)
        scores = sess.run("scores:0", {"image_string:0": text})
        layout = None
        if runner_of(sess) is not None:
            result = runner_of(sess).rewrite_result("scores:0", {"image_string:0": text})
            if result is not None:
                layout = [(c.name, c.size) for c in result.clusters]
    return scores, layout


def main(argv=None):
    quiet()
    ok = True
    for title, options in (
            ("mix_compile_mode", {}),
            ("in_out_pair, flag true", {"in_out_pair": in_out_pair()}),
            ("in_out_pair, flag false", {"in_out_pair": in_out_pair(),
                                         "in_out_pair_flag": False})):
        npu_scores, layout = run(config(**options))
        plain_scores, _ = run(without_npu_optimizer(config(**options)))
        clusters = ", ".join(f"{name} ({size} nodes)" for name, size in layout or ())
        print(f"{title}: clusters {clusters or 'none'}")
        ok &= compare([npu_scores], [plain_scores])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
