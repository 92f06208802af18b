"""A closed NPU session's TensorFlow session serves the next one on the graph when it holds no
state: values stay those of a fresh session, state is never carried over."""

import gc
import weakref

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.session import (
    NpuInteractiveSession,
    NpuSession,
    plain_session_class,
    reuse,
    runner_of,
)

tf1 = tf.compat.v1
PlainSession = plain_session_class()


def npu_config(**options):
    return NpuConfig.from_dict(options).to_config_proto()


# What a fresh TensorFlow session raises for an uninitialised variable (resource or ref).
UNINITIALISED = (tf.errors.FailedPreconditionError, tf.errors.NotFoundError)


def frozen_graph():
    """A small frozen inference graph: weights are Consts, nothing keeps state."""
    rs = np.random.RandomState(3)
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 16], name="x")
        h = x
        for k in range(3):
            w = tf.constant(rs.randn(16, 16).astype(np.float32), name=f"w{k}")
            h = tf.nn.relu(tf.matmul(h, w), name=f"h{k}")
        y = tf.nn.softmax(h, name="y")
    return graph, x, y


def feed_value(seed=0):
    return np.random.RandomState(seed).randn(4, 16).astype(np.float32)


def reused(graph, config, fetch, feed=None):
    """Run ``fetch`` once in a new NPU session; whether it ran on a closed session's."""
    with NpuSession(graph=graph, config=config) as sess:
        sess.run(fetch, feed)
        return runner_of(sess).reused


def test_a_session_per_request_reuses_tensorflows_session_with_plain_values():
    graph, x, y = frozen_graph()
    with PlainSession(graph=graph) as plain:
        expected = [plain.run(y, {x: feed_value(k)}) for k in range(3)]
    adopted = []
    for k in range(3):
        with NpuSession(graph=graph, config=npu_config()) as sess:
            np.testing.assert_array_equal(sess.run(y, {x: feed_value(k)}), expected[k])
            adopted.append(runner_of(sess).reused)
    assert adopted == [False, True, True]
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(y, {x: feed_value()})


def test_installed_sessions_reuse_too():
    graph, x, y = frozen_graph()
    was = npu_adapter.session.is_installed()
    npu_adapter.install()
    try:
        values, adopted = [], []
        for _ in range(2):
            with tf1.Session(graph=graph, config=npu_config()) as sess:
                values.append(sess.run(y, {x: feed_value()}))
                adopted.append(runner_of(sess).reused)
    finally:
        if not was:
            npu_adapter.uninstall()
    assert adopted == [False, True]
    np.testing.assert_array_equal(values[0], values[1])


def test_variables_are_never_carried_to_the_next_session():
    graph = tf.Graph()
    with graph.as_default():
        v = tf1.get_variable("v", initializer=1.0)
        bump = tf1.assign_add(v, 1.0)
        init = tf1.global_variables_initializer()
    config = npu_config()
    with NpuSession(graph=graph, config=config) as sess:
        sess.run(init)
        assert sess.run(bump) == 2.0
    with NpuSession(graph=graph, config=config) as sess:
        with pytest.raises(UNINITIALISED):
            sess.run(bump)  # uninitialised, as in a fresh TensorFlow session
        assert not runner_of(sess).reused


def test_random_ops_restart_their_sequence_in_every_session():
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(7)
        r = tf.random.uniform([3], name="r") * 2.0
    firsts, adopted = [], []
    for _ in range(2):
        with NpuSession(graph=graph, config=npu_config()) as sess:
            firsts.append(sess.run(r))
            adopted.append(runner_of(sess).reused)
    with PlainSession(graph=graph) as plain:
        expected = plain.run(r)
    np.testing.assert_array_equal(firsts[0], expected)
    np.testing.assert_array_equal(firsts[1], expected)
    assert adopted == [False, False]  # a random op keeps state: its session was closed


def test_a_session_whose_graph_became_stateful_is_closed_not_kept():
    graph, x, y = frozen_graph()
    config = npu_config()
    assert not reused(graph, config, y, {x: feed_value()})
    with graph.as_default():
        counter = tf1.get_variable("counter", initializer=0)
        tick = tf1.assign_add(counter, 1)
    with NpuSession(graph=graph, config=config) as sess:
        assert runner_of(sess).reused is False
        sess.run(counter.initializer)
        assert sess.run(tick) == 1
        assert runner_of(sess).reused  # the stateless idle session, taken at the first run
    with NpuSession(graph=graph, config=config) as sess:
        with pytest.raises(UNINITIALISED):
            sess.run(tick)
        assert not runner_of(sess).reused


def test_different_options_do_not_share():
    graph, x, y = frozen_graph()
    other = npu_config()
    other.intra_op_parallelism_threads = 1
    assert not reused(graph, npu_config(), y, {x: feed_value()})
    assert not reused(graph, other, y, {x: feed_value()})
    assert reused(graph, other, y, {x: feed_value()})


def test_one_idle_session_per_options_is_kept():
    graph, x, y = frozen_graph()
    config = npu_config()
    first, second = NpuSession(graph=graph, config=config), NpuSession(graph=graph, config=config)
    for sess in (first, second):
        sess.run(y, {x: feed_value()})
    first.close()
    second.close()  # one is kept already: this one is closed
    third, fourth = NpuSession(graph=graph, config=config), NpuSession(graph=graph, config=config)
    for sess in (third, fourth):
        sess.run(y, {x: feed_value()})
    assert [runner_of(s).reused for s in (third, fourth)] == [True, False]
    third.close()
    fourth.close()


@pytest.mark.parametrize("use", ["make_callable", "partial_run"])
def test_callables_and_partial_runs_keep_the_session_out(use):
    graph, x, y = frozen_graph()
    config = npu_config()
    with NpuSession(graph=graph, config=config) as sess:
        if use == "make_callable":
            with graph.as_default():
                total = tf.reduce_sum(tf.constant([1.0, 2.0]), name="total")
            assert sess.make_callable(total)() == 3.0
        else:
            handle = sess.partial_run_setup([y], [x])
            sess.partial_run(handle, y, {x: feed_value()})
    assert not reused(graph, config, y, {x: feed_value()})


def test_the_option_off_dumping_sessions_and_the_xla_backend_do_not_share(tmp_path):
    graph, x, y = frozen_graph()
    configs = [npu_config(npu_adapter_reuse_sessions=False),
               npu_config(enable_dump=True, dump_path=str(tmp_path)),
               npu_config(npu_adapter_backend="xla")]
    for config in configs:
        assert [reused(graph, config, y, {x: feed_value()}) for _ in range(2)] == [False, False]


def test_the_graph_and_its_idle_session_are_released_together():
    graph, x, y = frozen_graph()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(y, {x: feed_value()})
    alive = weakref.ref(graph)
    del sess, graph, x, y
    gc.collect()
    assert alive() is None


def test_an_interactive_session_closes_as_tensorflows_does():
    graph, x, y = frozen_graph()
    sess = NpuInteractiveSession(graph=graph, config=npu_config())
    assert tf1.get_default_session() is sess
    sess.run(y, {x: feed_value()})
    sess.close()
    assert tf1.get_default_session() is None
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(y, {x: feed_value()})


def test_stateful_op_type_reads_types_calls_and_bodies():
    assert reuse.stateful_op_type({"Const", "MatMul", "Placeholder"}) is None
    assert reuse.stateful_op_type({"MatMul", "RandomUniform"}) == "RandomUniform"
    assert reuse.stateful_op_type({"VarHandleOp"}) == "VarHandleOp"
    assert reuse.stateful_op_type({"NoSuchOpAnywhere"}) == "NoSuchOpAnywhere"
    assert reuse.stateful_op_type({"StatefulPartitionedCall", "Assert"}) is None
    # a call of a function whose body was not read counts as stateful
    assert reuse.stateful_op_type({"StatefulPartitionedCall"}, {"f"}, {"f", "g"}) == "g"
    assert reuse.stateful_op_type({"f"}, {"f"}, {"f"}) is None


@pytest.mark.parametrize("session_class", [PlainSession, NpuSession])
def test_a_closed_session_behaves_as_tensorflows_closed_session(session_class):
    graph, x, y = frozen_graph()
    for _ in range(2):  # the second NpuSession adopts the first one's, and hands it on again
        sess = session_class(graph=graph, config=npu_config())
        sess.run(y, {x: feed_value()})
        sess.close()
        with pytest.raises(RuntimeError, match="closed Session"):
            sess.run(y, {x: feed_value()})
        with pytest.raises(tf.errors.CancelledError, match="closed"):
            sess.list_devices()
        with pytest.raises(tf.errors.CancelledError, match="closed"):
            sess.make_callable(y)()


def test_a_random_op_inside_a_loop_body_keeps_the_session_out():
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(5)
        _, total = tf.while_loop(lambda i, acc: i < 3,
                                 lambda i, acc: (i + 1, acc + tf.random.uniform([2])),
                                 (tf.constant(0), tf.zeros([2])))
    values = []
    for _ in range(2):
        with NpuSession(graph=graph, config=npu_config()) as sess:
            values.append(sess.run(total))
            assert not runner_of(sess).reused
    np.testing.assert_array_equal(values[0], values[1])  # each session restarts the sequence
