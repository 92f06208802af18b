"""Named graph factories for partition tests (ASCII art shows each graph).

Graphs built with GraphBuilder follow the original adapter's test pbtxts; the ``*_tf`` variants
are built with TensorFlow so they can run.
"""

import contextlib

import numpy as np
import tensorflow as tf

from npu_adapter import tf_compat
from npu_adapter.testing import GraphBuilder

tf1 = tf.compat.v1


def build_geop_graph(retval_op="_Retval"):
    """The original's unit-test scenario om_test_build_geop::

        Const_1 ──────────────┐
        Variable ─► Variable/read ─► Add ─► ret
    """
    b = GraphBuilder()
    b.const("Const_1", np.ones([2], np.float32))
    b.op("VariableV2", "Variable", dtype=tf.float32, shape=[2], container="", shared_name="")
    b.op("Identity", "Variable/read", ["Variable"], T=tf.float32)
    b.binary("Add", "Add", "Const_1", "Variable/read")
    if retval_op == "_Retval":
        b.op("_Retval", "ret", ["Add"], T=tf.float32, index=0)
    else:
        b.op(retval_op, "ret", ["Add"], T=tf.float32)
    return b.graph_def()


def mix_compile_graph(without_scope=True):
    """The original's unit-test scenario om_test_mix_compile::

        shape, min, max (Const) ─► RandomUniformInt ─► Unique[_without_npu_compile] ─► ArgMax
                                                                  ArgMax/dimension ─┘
    """
    b = GraphBuilder()
    b.const("RandomUniformInt/shape", np.array([10], np.int32))
    b.const("RandomUniformInt/min", np.array(0, np.int32))
    b.const("RandomUniformInt/max", np.array(5, np.int32))
    b.op("RandomUniformInt", "RandomUniformInt",
         ["RandomUniformInt/shape", "RandomUniformInt/min", "RandomUniformInt/max"],
         T=tf.int32, Tout=tf.int32, seed=3, seed2=4)
    b.op("Unique", "Unique", ["RandomUniformInt"], T=tf.int32, out_idx=tf.int32)
    if without_scope:
        b.set_attr("Unique", "_without_npu_compile", True)
    b.const("ArgMax/dimension", np.array(0, np.int32))
    b.op("ArgMax", "ArgMax", ["Unique", "ArgMax/dimension"], T=tf.int32, Tidx=tf.int32,
         output_type=tf.int64)
    return b.graph_def()


def chain_with_branch():
    """A scenario of the original's partitioning tests::

        A ─► B ─► C ─► D
             └──► E
    """
    b = GraphBuilder()
    b.placeholder("in", shape=[3])
    b.unary("Abs", "A", "in")
    b.unary("Floor", "B", "A")
    b.unary("Abs", "C", "B")
    b.unary("Floor", "D", "C")
    b.unary("Abs", "E", "B")
    return b.graph_def()


@contextlib.contextmanager
def control_flow_v1():
    """Build TF1 (Enter/Exit/Switch/Merge) control flow inside the block."""
    was_v2 = tf1.control_flow_v2_enabled()
    tf1.disable_control_flow_v2()
    try:
        yield
    finally:
        if was_v2:
            tf1.enable_control_flow_v2()


def while_loop_v1_graph():
    """A scenario of the original's partitioning tests: ``i = 0; while i < 10: i = i + 1`` as a
    v1 loop, then ``out = Identity``."""
    g = tf.Graph()
    with g.as_default(), control_flow_v1():
        start = tf.constant(0, name="start")
        loop = tf1.while_loop(lambda i: tf.less(i, 10), lambda i: tf.add(i, 1), [start],
                              name="while")
        tf.identity(loop, name="out")
    return g.as_graph_def()


@contextlib.contextmanager
def without_npu_compile(graph):
    """What npu_scope.without_npu_compile_scope does: ``_without_npu_compile=True`` on new ops."""
    from tensorflow.core.framework import attr_value_pb2

    with graph.as_default(), tf_compat.attr_scope(
            {"_without_npu_compile": attr_value_pb2.AttrValue(b=True)}):
        yield


def mix_cnn_graph(batch=None, extra_placeholder=None):
    """The small CNN the dump, report and inspect tests share (a tf.Graph)::

        images ─► conv1 ─► [host: abs, sqrt under without_npu_compile] ─► conv2 ─► mean ─► probs

    ``extra_placeholder`` adds an unconnected placeholder of that name (name-clash tests).
    """
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [batch, 8, 8, 3], name="images")
        w1 = tf.constant(np.full([3, 3, 3, 4], 0.5, np.float32), name="conv1/w")
        y = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME", name="conv1/conv"), name="conv1/relu")
        with without_npu_compile(g):
            y = tf.identity(tf.math.sqrt(tf.abs(y) + 1.0, name="host/sqrt"), name="host/id")
        w2 = tf.constant(np.full([3, 3, 4, 2], 0.25, np.float32), name="conv2/w")
        y = tf.nn.relu(tf.nn.conv2d(y, w2, 1, "SAME", name="conv2/conv"), name="conv2/relu")
        tf.nn.softmax(tf.reduce_mean(y, axis=[1, 2], name="pool"), name="probs")
        if extra_placeholder:
            tf1.placeholder(tf.float32, [1], name=extra_placeholder)
    return g


def grappler_sign_graph():
    """``(graph_def, feeds, fetches)`` of the graph on which TF 2.15–2.21's Grappler gets a sign
    wrong once it inlines the cluster call (found by the partition property test, seed 13656)::

        x ─► neg_x ─► prod(Mul, y) ─► neg_prod ─► out (host: Neg)
               └──► host_abs (host: Abs not supported)

    With only Neg and Mul supported, the cluster is {neg_x, prod, neg_prod}.
    """
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.placeholder("y", shape=[2])
    b.unary("Neg", "neg_x", "x")
    b.binary("Mul", "prod", "neg_x", "y")
    b.unary("Neg", "neg_prod", "prod")
    b.unary("Abs", "host_abs", "neg_x")
    b.unary("Neg", "out", "neg_prod")
    b.set_attr("out", "_without_npu_compile", True)
    feeds = {"x:0": np.float32([2, 1]), "y:0": np.float32([4, 3])}
    return b.graph_def(), feeds, ["out:0", "host_abs:0"]


def training_optimizer(name):
    """A TF1 optimizer by name: ``sgd``, ``momentum`` or ``adam``."""
    return {"sgd": lambda: tf1.train.GradientDescentOptimizer(0.1),
            "momentum": lambda: tf1.train.MomentumOptimizer(0.1, 0.9),
            "adam": lambda: tf1.train.AdamOptimizer(0.01)}[name]()


def mlp_graph(use_resource, optimizer):
    """x[8,5] → dense(4) → relu → dense(2) → MSE against y; ``train`` with a global step."""
    g = tf.Graph()
    with g.as_default():
        tf1.set_random_seed(11)
        x = tf1.placeholder(tf.float32, [8, 5], name="x")
        y = tf1.placeholder(tf.float32, [8, 2], name="y")
        with tf1.variable_scope("mlp", use_resource=use_resource):
            w1 = tf1.get_variable("w1", [5, 4])
            b1 = tf1.get_variable("b1", [4], initializer=tf1.constant_initializer(0.1))
            w2 = tf1.get_variable("w2", [4, 2])
        h = tf.nn.relu(tf.matmul(x, w1) + b1)
        loss = tf.reduce_mean(tf.square(tf.matmul(h, w2) - y), name="loss")
        step = tf1.train.get_or_create_global_step()
        training_optimizer(optimizer).minimize(loss, global_step=step, name="train")
        tf1.global_variables_initializer()
    return g


def mlp_feeds(seed=0):
    rs = np.random.RandomState(seed)
    return {"x:0": rs.randn(8, 5).astype(np.float32), "y:0": rs.randn(8, 2).astype(np.float32)}
