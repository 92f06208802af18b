"""Every session TensorFlow opens is an NPU session once npu_bridge is imported.

MonitoredTrainingSession, SessionManager, tf.estimator (TF 2.15) and the Keras backend create
their sessions through TensorFlow's own session module; each must rewrite (a cluster holding the
training step) and give plain TensorFlow's numbers.
"""

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.session import graph_rewrites, is_npu_session, runner_of

tf1 = tf.compat.v1
HAS_ESTIMATOR = hasattr(tf, "estimator")


@pytest.fixture(autouse=True)
def installed():
    was = npu_adapter.session.is_installed()
    npu_adapter.install()
    yield
    if not was:
        npu_adapter.uninstall()


def npu_config(**options):
    return NpuConfig.from_dict(options).to_config_proto()


def cluster_calls(graph):
    """The clusters of the signatures the NPU sessions on ``graph`` ran."""
    return [c.name for result in graph_rewrites(graph) for c in result.clusters]


def build(graph):
    with graph.as_default():
        tf1.set_random_seed(7)
        x = tf.constant(np.random.RandomState(0).randn(16, 4).astype(np.float32))
        y = tf.constant(np.random.RandomState(1).randn(16, 1).astype(np.float32))
        w = tf1.get_variable("w", [4, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y), name="loss")
        step = tf1.train.get_or_create_global_step()
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return loss, train


class _Probe(tf1.train.SessionRunHook):
    """Records the raw session TensorFlow created (hooks get it in after_create_session)."""

    def after_create_session(self, session, coord):
        self.session = session


def _train_losses(make_session, steps=5):
    graph = tf.Graph()
    loss, train = build(graph)
    with graph.as_default(), make_session() as sess:
        losses = [sess.run([loss, train])[0] for _ in range(steps)]
    return graph, losses


def test_monitored_training_session_rewrites(tmp_path):
    probe = _Probe()
    graph, npu = _train_losses(lambda: tf1.train.MonitoredTrainingSession(
        checkpoint_dir=str(tmp_path / "npu"), config=npu_config(), hooks=[probe],
        save_checkpoint_steps=None, save_summaries_steps=None))
    assert is_npu_session(probe.session)
    assert cluster_calls(graph)
    _, plain = _train_losses(lambda: tf1.train.MonitoredTrainingSession(
        checkpoint_dir=str(tmp_path / "plain"), config=tf1.ConfigProto(),
        save_checkpoint_steps=None, save_summaries_steps=None))
    assert [a.tobytes() for a in npu] == [b.tobytes() for b in plain]


def test_session_manager_prepares_an_npu_session():
    graph = tf.Graph()
    loss, train = build(graph)
    with graph.as_default():
        init = tf1.global_variables_initializer()
    manager = tf1.train.SessionManager(graph=graph)
    sess = manager.prepare_session("", init_op=init, config=npu_config())
    try:
        assert is_npu_session(sess)
        sess.run(train)
        assert runner_of(sess).rewrite_result(loss).clusters
    finally:
        sess.close()


def test_keras_backend_session_after_set_keras_session_npu_config():
    from npu_bridge import _init_api

    keras_backend = tf.compat.v1.keras.backend  # the Keras the NPU session is handed to
    graph = tf.Graph()
    try:
        with graph.as_default():
            sess = _init_api.set_keras_session_npu_config()
            assert is_npu_session(sess) and keras_backend.get_session() is sess
            x = tf1.placeholder(tf.float32, [None, 3], name="kx")
            y = tf.nn.relu(tf.matmul(x, tf.ones([3, 2])), name="ky")
            got = keras_backend.get_session().run(y, {x: np.ones((2, 3), np.float32)})
            np.testing.assert_array_equal(got, np.full((2, 2), 3.0, np.float32))
            assert runner_of(sess).rewrite_result(y, {x: None}).clusters
            sess.close()
    finally:
        keras_backend.clear_session()


@pytest.mark.skipif(not HAS_ESTIMATOR, reason="tf.estimator exists up to TensorFlow 2.15")
def test_estimator_with_an_npu_session_config_rewrites(tmp_path):
    probe = _Probe()

    def model_fn(features, labels, mode):
        w = tf1.get_variable("w", [4, 1])
        pred = tf.matmul(features, w)
        loss = tf.reduce_mean(tf.square(pred - labels))
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf1.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train,
                                          predictions=pred, training_hooks=[probe])

    def input_fn():
        rs = np.random.RandomState(0)
        data = (rs.randn(32, 4).astype(np.float32), rs.randn(32, 1).astype(np.float32))
        return tf.data.Dataset.from_tensor_slices(data).batch(8).repeat()

    run_config = tf.estimator.RunConfig(model_dir=str(tmp_path), session_config=npu_config(),
                                        tf_random_seed=3)
    estimator = tf.estimator.Estimator(model_fn, config=run_config)
    estimator.train(input_fn, steps=4)
    assert is_npu_session(probe.session)
    assert runner_of(probe.session).rewrite_count >= 1
