"""Loss scaling on one rank: a forced overflow skips the step and drives the scale schedule,
and an fp16 backward pass that overflows is caught by the in-graph "any non-finite gradient"
check. The expected traces are recomputed here from the managers' documented rules."""

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.session import plain_session_class
from npu_bridge import _env
from npu_bridge.estimator.npu.npu_loss_scale_manager import ExponentialUpdateLossScaleManager
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
from npu_bridge.estimator.npu.npu_optimizer import NPUOptimizer

FP16_MAX = 65504.0


@pytest.fixture(autouse=True)
def _single_rank_env(monkeypatch):
    for name in _env.RANK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def _schedule(finite_steps, init, incr_every, decr_every, incr_ratio=2.0, decr_ratio=0.5):
    """The scale after each step, from the rules: grow after ``incr_every`` consecutive finite
    steps, shrink (not below 1) after ``decr_every`` consecutive non-finite ones; a change
    resets both counts, a non-finite step resets the finite count."""
    scale, good, bad, out = float(init), 0, 0, []
    for finite in finite_steps:
        if finite:
            good += 1
            if good >= incr_every:
                scale, good, bad = scale * incr_ratio, 0, 0
        else:
            good, bad = 0, bad + 1
            if bad >= decr_every:
                scale, bad = max(1.0, scale * decr_ratio), 0
        out.append(scale)
    return out


@pytest.mark.parametrize("wrapper", ["NPULossScaleOptimizer", "NPUOptimizer"])
def test_forced_overflow_skips_the_step_and_drives_the_scale(wrapper):
    overflow = {2, 3, 6}  # two consecutive bad steps shrink the scale; a single one does not
    steps = 10
    with tf.Graph().as_default() as graph:
        poison = tf.compat.v1.placeholder(tf.float32, [])
        w = tf.compat.v1.get_variable("w", initializer=1.0, use_resource=True)
        loss = tf.square(w * poison - 3.0)
        manager = ExponentialUpdateLossScaleManager(init_loss_scale=64, incr_every_n_steps=3,
                                                    decr_every_n_nan_or_inf=2)
        sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        optimizer = NPULossScaleOptimizer(sgd, manager) if wrapper == "NPULossScaleOptimizer" \
            else NPUOptimizer(sgd, manager, is_loss_scale=True)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train = optimizer.minimize(loss, global_step=global_step)
        init = tf.compat.v1.global_variables_initializer()
    trace = []
    with plain_session_class()(graph=graph) as sess:
        sess.run(init)
        for step in range(steps):
            sess.run(train, {poison: np.inf if step in overflow else 1.0})
            trace.append(sess.run([manager.get_loss_scale(), global_step, w]))
    # NumPy: w <- w - 0.1 * 2 (w - 3) on the finite steps; the others change nothing.
    w_value, expected_w, expected_step = 1.0, [], []
    for step in range(steps):
        if step not in overflow:
            w_value -= 0.1 * 2.0 * (w_value - 3.0)
        expected_w.append(w_value)
        expected_step.append(sum(1 for s in range(step + 1) if s not in overflow))
    scales = _schedule([s not in overflow for s in range(steps)], 64, 3, 2, decr_ratio=0.8)
    assert [value for value, _, _ in trace] == pytest.approx(scales)
    assert [int(value) for _, value, _ in trace] == expected_step
    np.testing.assert_allclose([value for _, _, value in trace], expected_w, rtol=1e-6)
    print("step  scale  global_step  w")
    for step, (scale, value, weight) in enumerate(trace):
        print(f"{step:4d} {scale:6.1f} {int(value):12d} {weight:.6f}"
              f"{'  overflow: skipped' if step in overflow else ''}")


def test_fp16_backward_overflow_is_caught_in_the_graph():
    """The loss and its gradients are computed in float16; a scale of 2**10 overflows them
    (inf), the step is skipped and the scale halves until the scaled gradients fit."""
    x_value, learning_rate, steps = 100.0, 1e-7, 14
    with tf.Graph().as_default() as graph:
        w = tf.compat.v1.get_variable("w", initializer=1.0, use_resource=True)
        prediction = tf.cast(w, tf.float16) * tf.constant(x_value, tf.float16)
        loss = tf.square(prediction - tf.constant(3.0, tf.float16))  # float16 loss
        manager = ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 10,
                                                    incr_every_n_steps=2,
                                                    decr_every_n_nan_or_inf=1, decr_ratio=0.5)
        optimizer = NPULossScaleOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(learning_rate), manager)
        grads = optimizer.compute_gradients(loss, [w])
        train = optimizer.apply_gradients(grads)
        init = tf.compat.v1.global_variables_initializer()
    scales, weights = [], []
    with plain_session_class()(graph=graph) as sess:
        sess.run(init)
        for _ in range(steps):
            sess.run(train)
            scales.append(float(sess.run(manager.get_loss_scale())))
            weights.append(float(sess.run(w)))
    # Reference: the step overflows when the scaled loss or the scaled gradient
    # 2 (w x - 3) x * scale leaves the float16 range (every value is far from the edge).
    scale, good, w_value, finite_steps, expected_w = 2.0 ** 10, 0, 1.0, [], []
    for _ in range(steps):
        pred = w_value * x_value
        grad = 2.0 * (pred - 3.0) * x_value
        finite = max((pred - 3.0) ** 2 * scale, abs(grad) * scale) < FP16_MAX
        finite_steps.append(finite)
        if finite:
            w_value -= learning_rate * grad
            good += 1
            if good >= 2:
                scale, good = scale * 2, 0
        else:
            scale, good = max(1.0, scale / 2), 0
        expected_w.append(w_value)
    assert finite_steps[:9] == [False] * 9 and any(finite_steps[9:])
    assert scales == _schedule(finite_steps, 2 ** 10, 2, 1)
    np.testing.assert_allclose(weights, expected_w, rtol=1e-6)
