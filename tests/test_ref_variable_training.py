"""TF1 training steps on ref variables (``disable_v2_behavior``'s default) whose step full offload
splits between host and device: the loss also needs ``tf.linalg.svd``, whose gradient uses an op
the device list lacks. Each runs step by step exactly as plain TensorFlow does.

Ref edges never cross the boundary of a cluster: a variable whose update falls outside the one
cluster full offload keeps goes to the host with its reads and updates, and with
``lazy_recompile`` (several clusters) each cluster that reads a variable gets its own copy,
shared by name. (Two ranks: ``tests/test_distributed_training.py``, phase ``ref_adam``.)
"""

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import control_flow_v1

from npu_adapter.config import NpuConfig
from npu_adapter.session import NpuSession, plain_session_class
from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer

tf1 = tf.compat.v1
X = np.random.RandomState(0).randn(8, 4).astype(np.float32)
W = np.random.RandomState(1).randn(4, 3).astype(np.float32)
STEPS = 3


def _loss(x, w):
    h = tf.matmul(x, w)
    return tf.reduce_mean(tf.square(h)) + tf.reduce_sum(tf.linalg.svd(h, compute_uv=False))


def _trace(session_class, options, loss_scale):
    g = tf.Graph()
    with g.as_default(), control_flow_v1():  # as under disable_v2_behavior
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        w = tf1.Variable(W, name="w", use_resource=False)
        loss = _loss(x, w)
        optimizer = tf1.train.AdamOptimizer(0.01)
        if loss_scale:  # the update sits in the overflow check's TF1 cond
            optimizer = NPULossScaleOptimizer(optimizer, FixedLossScaleManager(128.0))
        train = optimizer.minimize(loss)
        init = tf1.global_variables_initializer()
    config = NpuConfig.from_dict(options).to_config_proto()
    with session_class(graph=g, config=config) as sess:
        sess.run(init)
        return [sess.run([loss, train], {x: X})[0] for _ in range(STEPS)] + [sess.run(w)]


@pytest.mark.parametrize("options, loss_scale", [
    ({}, False),
    ({"dynamic_input": True, "dynamic_graph_execute_mode": "lazy_recompile"}, False),
    ({}, True),
    ({"mix_compile_mode": True}, False),
], ids=["full_offload", "lazy_recompile", "loss_scale_cond", "mix"])
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_adam_on_a_ref_variable_matches_plain_tensorflow(options, loss_scale):
    ours = _trace(NpuSession, options, loss_scale)
    plain = _trace(plain_session_class(), options, loss_scale)
    for got, want in zip(ours, plain):
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not hasattr(tf, "estimator"),
                    reason="tf.estimator exists up to TensorFlow 2.15 only")
def test_npu_estimator_with_adam_on_ref_variables_matches_plain_tensorflow(tmp_path):
    from npu_bridge.estimator.npu.npu_config import NPURunConfig
    from npu_bridge.estimator.npu.npu_estimator import NPUEstimator

    def model_fn(features, labels, mode):
        w = tf1.get_variable("w", initializer=W, use_resource=False)
        loss = _loss(features, w)
        step = tf1.train.get_or_create_global_step()
        train = tf1.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train)

    def input_fn():
        return tf.data.Dataset.from_tensors((X, np.zeros(8, np.float32))).repeat()

    def weights(estimator, model_dir):
        estimator.train(input_fn, steps=STEPS)
        return tf.train.load_variable(str(model_dir), "w")

    npu_dir, plain_dir = tmp_path / "npu", tmp_path / "plain"
    npu = NPUEstimator(model_fn, config=NPURunConfig(model_dir=str(npu_dir),
                                                     iterations_per_loop=1))
    plain = tf.estimator.Estimator(model_fn, config=tf.estimator.RunConfig(
        model_dir=str(plain_dir), session_config=tf1.ConfigProto()))
    np.testing.assert_array_equal(weights(npu, npu_dir), weights(plain, plain_dir))
