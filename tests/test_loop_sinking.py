"""Loop sinking: with iterations_per_loop = N, one run of the IterationOp target runs N steps.

After k runs the variables equal plain TensorFlow's after k·N steps: on a tf.data input each step
takes the next batch; a feed_dict script feeds the same batch N times, as on the device.
"""

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.config import NpuConfig
from npu_adapter.session import NpuSession, plain_session_class, runner_of
from npu_bridge.estimator.npu import util

tf1 = tf.compat.v1
PlainSession = plain_session_class()


def npu_config(**options):
    return NpuConfig.from_dict(options).to_config_proto()


def dataset_graph(use_resource, optimizer="sgd"):
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(1)
        rs = np.random.RandomState(0)
        xs = rs.randn(64, 4).astype(np.float32)
        ys = (xs @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
        it = tf1.data.make_initializable_iterator(
            tf.data.Dataset.from_tensor_slices((xs, ys)).batch(4).repeat())
        x, y = it.get_next()
        w = tf1.get_variable("w", [4, 1], use_resource=use_resource)
        b = tf1.get_variable("b", [1], use_resource=use_resource,
                             initializer=tf1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y), name="loss")
        step = tf1.train.get_or_create_global_step()
        opt = (tf1.train.GradientDescentOptimizer(0.05) if optimizer == "sgd"
               else tf1.train.AdamOptimizer(0.01))
        train = opt.minimize(loss, global_step=step)
        init = [tf1.global_variables_initializer(), tf1.local_variables_initializer(),
                it.initializer]
    return graph, loss, train, init, step


def _weights(sess, graph):
    return [sess.run(v).tobytes() for v in graph.get_collection(
        tf1.GraphKeys.GLOBAL_VARIABLES)]


@pytest.mark.parametrize("use_resource", [False, True])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_run_is_n_steps_on_a_dataset(use_resource, optimizer):
    n, runs = 5, 3
    graph, loss, train, init, step = dataset_graph(use_resource, optimizer)
    with PlainSession(graph=graph) as sess:
        sess.run(init)
        plain_losses = [sess.run([loss, train])[0] for _ in range(n * runs)]
        plain_weights = _weights(sess, graph)
    graph, loss, train, init, step = dataset_graph(use_resource, optimizer)
    with NpuSession(graph=graph, config=npu_config(iterations_per_loop=n)) as sess:
        sess.run(init)
        with graph.as_default():
            loop_op = util.set_iteration_per_loop(sess, train, n)
        losses = []
        for k in range(runs):
            losses.append(sess.run([loss, loop_op])[0])
            assert sess.run(step) == (k + 1) * n
        assert _weights(sess, graph) == plain_weights
        assert [a.tobytes() for a in losses] == \
            [plain_losses[(k + 1) * n - 1].tobytes() for k in range(runs)]
        result = runner_of(sess).rewrite_result([loss, loop_op])
        assert result.clusters
    # The user's graph holds no loop: ours lives in the session's private graph.
    assert not any(op.type in ("Enter", "Exit") for op in graph.get_operations())


def test_feed_dict_scripts_feed_the_same_batch_n_times():
    n = 4
    rs = np.random.RandomState(3)
    xs, ys = rs.randn(8, 3).astype(np.float32), rs.randn(8, 1).astype(np.float32)

    def build():
        graph = tf.Graph()
        with graph.as_default():
            tf1.set_random_seed(2)
            x = tf1.placeholder(tf.float32, [None, 3], name="x")
            y = tf1.placeholder(tf.float32, [None, 1], name="y")
            w = tf1.get_variable("w", [3, 1])
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
            init = tf1.global_variables_initializer()
        return graph, x, y, loss, train, init

    graph, x, y, loss, train, init = build()
    with PlainSession(graph=graph) as sess:
        sess.run(init)
        for _ in range(2 * n):
            sess.run(train, {x: xs, y: ys})
        want = _weights(sess, graph)
    graph, x, y, loss, train, init = build()
    looper = util.IterationPerLoop()
    with graph.as_default():
        loop_op = looper.create_iteration_per_loop_var(train)
        local_init = tf1.local_variables_initializer()
    with NpuSession(graph=graph, config=npu_config(iterations_per_loop=n)) as sess:
        sess.run([init, local_init])
        looper.load_iteration_per_loop_var(sess, n)
        for _ in range(2):
            sess.run(loop_op, {x: xs, y: ys})
        assert _weights(sess, graph) == want


def test_without_the_option_the_iteration_op_runs_one_step():
    graph, loss, train, init, step = dataset_graph(True)
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        with graph.as_default():
            loop_op = tf.group(train, name="IterationOp")
        sess.run(loop_op)
        assert sess.run(step) == 1
