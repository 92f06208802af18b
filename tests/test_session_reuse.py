"""A closed NpuSession's TensorFlow session serves the next one on the graph, when it holds no
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
    core,
    plain_session_class,
    reuse,
)
from npu_adapter.session.shadow import ShadowGraph

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


def reuse_of(graph):
    return ShadowGraph.for_graph(graph).reuse


@pytest.mark.parametrize("on_user_graph", [True, False], ids=["user_graph", "shadow"])
def test_a_session_per_request_reuses_tensorflows_session_with_plain_values(on_user_graph):
    graph, x, y = frozen_graph()
    with PlainSession(graph=graph) as plain:
        expected = [plain.run(y, {x: feed_value(k)}) for k in range(3)]
    # The frozen graph's signature runs on the user's graph (session/direct.py) unless the
    # option sends it to the shadow: either TensorFlow session is reused.
    config = npu_config(npu_adapter_run_on_user_graph=on_user_graph)
    for k in range(3):
        with NpuSession(graph=graph, config=config) as sess:
            np.testing.assert_array_equal(sess.run(y, {x: feed_value(k)}), expected[k])
    pool = reuse_of(graph)
    ran = "user" if on_user_graph else "shadow"
    assert (pool.adopted_direct if on_user_graph else pool.adopted) == 2  # sessions 2 and 3
    assert pool.idle_count(ran) == 1
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(y, {x: feed_value()})


def test_installed_sessions_reuse_too():
    graph, x, y = frozen_graph()
    was = npu_adapter.session.is_installed()
    npu_adapter.install()
    try:
        values = []
        for _ in range(2):
            with tf1.Session(graph=graph, config=npu_config()) as sess:
                values.append(sess.run(y, {x: feed_value()}))
    finally:
        if not was:
            npu_adapter.uninstall()
    assert reuse_of(graph).adopted_direct == 1
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
    with NpuSession(graph=graph, config=config) as sess, pytest.raises(UNINITIALISED):
        sess.run(bump)  # uninitialised, as in a fresh TensorFlow session
    pool = reuse_of(graph)
    # The state lived on the user's graph (session/direct.py): that session is never handed
    # on (the shadow's, which ran nothing, may be).
    assert pool.adopted_direct == 0 and pool.idle_count("user") == 0


def test_random_ops_restart_their_sequence_in_every_session():
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(7)
        r = tf.random.uniform([3], name="r") * 2.0
    firsts = []
    for _ in range(2):
        with NpuSession(graph=graph, config=npu_config()) as sess:
            firsts.append(sess.run(r))
    with PlainSession(graph=graph) as plain:
        expected = plain.run(r)
    np.testing.assert_array_equal(firsts[0], expected)
    np.testing.assert_array_equal(firsts[1], expected)
    assert reuse_of(graph).adopted_direct == 0  # the session that ran them was closed


def test_a_session_whose_graph_became_stateful_is_closed_not_kept():
    graph, x, y = frozen_graph()
    config = npu_config()
    with NpuSession(graph=graph, config=config) as sess:
        sess.run(y, {x: feed_value()})
    with graph.as_default():
        counter = tf1.get_variable("counter", initializer=0)
        tick = tf1.assign_add(counter, 1)
    with NpuSession(graph=graph, config=config) as sess:  # adopts the stateless idle session
        sess.run(counter.initializer)
        assert sess.run(tick) == 1
    pool = reuse_of(graph)
    # The second session took both idle sessions; its state lived on the user's graph
    # (session/direct.py), so that session was closed, and the shadow's, which ran nothing
    # with state, is idle again.
    assert pool.adopted == 1 and pool.adopted_direct == 1
    assert pool.idle_count("shadow") == 1 and pool.idle_count("user") == 0
    with NpuSession(graph=graph, config=config) as sess, pytest.raises(UNINITIALISED):
        sess.run(tick)


def test_different_options_do_not_share():
    graph, x, y = frozen_graph()
    one = npu_config()
    other = npu_config()
    other.intra_op_parallelism_threads = 1
    with NpuSession(graph=graph, config=one) as sess:
        sess.run(y, {x: feed_value()})
    with NpuSession(graph=graph, config=other) as sess:
        sess.run(y, {x: feed_value()})
    pool = reuse_of(graph)
    # Per options: the shadow's session and the user graph's (which ran the signature).
    assert pool.adopted == pool.adopted_direct == 0
    assert pool.idle_count("shadow") == pool.idle_count("user") == 2


def test_one_idle_session_per_options_is_kept():
    graph, x, y = frozen_graph()
    config = npu_config()
    first, second = NpuSession(graph=graph, config=config), NpuSession(graph=graph, config=config)
    for sess in (first, second):
        sess.run(y, {x: feed_value()})
    released = []
    original = reuse.release_handle
    try:
        reuse.release_handle = lambda handle: (released.append(handle), original(handle))
        first.close()
        second.close()
    finally:
        reuse.release_handle = original
    # One of each graph's sessions is kept, the second session's are released.
    assert reuse_of(graph).idle_count("shadow") == reuse_of(graph).idle_count("user") == 1
    assert len(released) == 2


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
    # (The session of the user's graph, which holds neither, may be kept.)
    assert reuse_of(graph).idle_count("shadow") == 0


def test_the_option_off_dumping_sessions_and_the_xla_backend_do_not_share(tmp_path):
    graph, x, y = frozen_graph()
    configs = [npu_config(npu_adapter_reuse_sessions=False),
               npu_config(enable_dump=True, dump_path=str(tmp_path)),
               npu_config(npu_adapter_backend="xla")]
    for config in configs:
        for _ in range(2):
            with NpuSession(graph=graph, config=config) as sess:
                sess.run(y, {x: feed_value()})
    pool = reuse_of(graph)
    assert pool.adopted == pool.adopted_direct == 0 and pool.idle_count() == 0


def test_the_idle_session_is_released_with_the_graph(monkeypatch):
    released = []
    original = reuse.release_handle
    monkeypatch.setattr(reuse, "release_handle",
                        lambda handle: (released.append(handle), original(handle)))
    graph, x, y = frozen_graph()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(y, {x: feed_value()})
        kept = sess._session
    shadow = weakref.ref(ShadowGraph.for_graph(graph))
    assert kept not in released
    del sess, graph, x, y
    gc.collect()
    assert shadow() is None
    assert any(handle is kept for handle in released)


def test_an_interactive_session_closes_as_tensorflows_does():
    graph, x, y = frozen_graph()
    sess = NpuInteractiveSession(graph=graph, config=npu_config())
    assert tf1.get_default_session() is sess
    sess.run(y, {x: feed_value()})
    sess.close()
    assert tf1.get_default_session() is None
    assert tf1.InteractiveSession._active_session_count == 0


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
    for _ in range(2):  # the second NpuSession adopts, and hands the handle back again
        sess = session_class(graph=graph, config=npu_config())
        sess.run(y, {x: feed_value()})
        sess.close()
        with pytest.raises(RuntimeError, match="closed Session"):
            sess.run(y, {x: feed_value()})
        with pytest.raises(tf.errors.CancelledError, match="closed"):
            sess.list_devices()
        with pytest.raises(tf.errors.CancelledError, match="closed"):
            sess.make_callable(y)()


def test_an_adopting_session_closed_for_good_releases_both_handles(monkeypatch):
    graph, x, y = frozen_graph()
    with graph.as_default():
        total = tf.reduce_sum(tf.constant([1.0, 2.0]), name="total")
    config = npu_config()
    with NpuSession(graph=graph, config=config) as sess:
        sess.run(y, {x: feed_value()})
    released = []
    original = reuse.release_handle
    monkeypatch.setattr(reuse, "release_handle",
                        lambda handle, closed=False: (released.append(handle),
                                                      original(handle, closed)))
    monkeypatch.setattr(core, "release_handle", reuse.release_handle)
    sess = NpuSession(graph=graph, config=config)
    stand_in = sess._npu_stand_in
    assert sess.make_callable(total)() == 3.0  # keeps the session out of reuse
    sess.close()
    # The adopted handle is closed by TensorFlow's close. (The others released are the handles
    # the session of the user's graph opened and replaced by the idle one it adopted.)
    assert released.count(stand_in) == 1 and sess._session not in released
    assert sess._closed and reuse_of(graph).idle_count("shadow") == 0


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
    np.testing.assert_array_equal(values[0], values[1])  # each session restarts the sequence
    assert reuse_of(graph).adopted == 0
