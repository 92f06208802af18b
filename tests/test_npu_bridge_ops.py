"""npu_bridge.estimator.npu_ops / npu_unary_ops, and the single-rank optimizers and loss
scaling of npu_bridge.estimator.npu."""

import math

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.errors import BackendError, DeviceOnlyError
from npu_adapter.session import runner_of
from npu_bridge import _env
from npu_bridge.estimator import npu_ops
from npu_bridge.estimator.npu.npu_loss_scale_manager import (
    ExponentialUpdateLossScaleManager,
    FixedLossScaleManager,
)
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
from npu_bridge.estimator.npu.npu_optimizer import NPUDistributedOptimizer, NPUOptimizer
from npu_bridge.estimator.npu_unary_ops import gelu, npu_unary_ops


@pytest.fixture(autouse=True)
def _single_rank_env(monkeypatch):
    for name in _env.RANK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


# ---- initialize_system / shutdown_system -----------------------------------------------------


@pytest.mark.parametrize("build,op_type", [
    (npu_ops.initialize_system, "NPUInit"),
    (npu_ops.shutdown_system, "NPUShutdown"),
    (npu_ops.NPUInit, "NPUInit"),
    (npu_ops.NPUShutdown, "NPUShutdown"),
])
def test_system_ops_are_marked_noops_a_plain_session_runs(build, op_type):
    with tf.Graph().as_default() as graph:
        op = build()
        named = build(name="custom")
    assert op.type == "NoOp" and op.name == op_type
    assert named.name == "custom"
    for item in (op, named):
        assert item.node_def.attr[npu_ops.NPU_ADAPTER_OP_ATTR].s == op_type.encode()
    with tf.compat.v1.Session(graph=graph) as sess:
        assert sess.run(op) is None
        assert sess.run(named) is None


def test_system_ops_in_a_session_sequence():
    with tf.Graph().as_default() as graph:
        init = npu_ops.initialize_system()
        shutdown = npu_ops.shutdown_system()
        value = tf.constant(3.0) * 2.0
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        assert sess.run(value) == 6.0
        sess.run(shutdown)


@pytest.mark.parametrize("build,message", [
    (npu_ops.initialize_system, "tf.NPUInit"),
    (npu_ops.shutdown_system, "tf.NPUShutdown"),
    (lambda: npu_ops.dropout(tf.ones([2]), 0.5), "npu_ops.dropout"),
])
def test_graph_only_ops_raise_in_eager_mode(build, message):
    with pytest.raises(RuntimeError, match=message + r"\(\) is not "
                       "compatible with eager execution"):
        build()


def test_npu_onnx_graph_op_is_device_only():
    with tf.Graph().as_default():
        x = tf.zeros([1, 3, 8, 8])
        with pytest.raises(DeviceOnlyError) as info:
            npu_ops.npu_onnx_graph_op([x], [tf.float32], model_path="det.onnx", name="det")
    assert isinstance(info.value, BackendError)
    assert info.value.api == "NpuOnnxGraphOp"
    message = str(info.value)
    assert message.startswith("NpuOnnxGraphOp needs the Ascend device: ")
    assert "det.onnx" in message and "equivalent TensorFlow computation" in message


# ---- dropout ---------------------------------------------------------------------------------


def _run(fetches, feed_dict=None, graph=None):
    with tf.compat.v1.Session(graph=graph or tf.compat.v1.get_default_graph()) as sess:
        return sess.run(fetches, feed_dict)


def test_dropout_statistics():
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(7)
        x = tf.ones([200000])
        out = npu_ops.dropout(x, keep_prob=0.7)
        keep = tf.compat.v1.placeholder(tf.float32, [])
        out_fed = npu_ops.dropout(x, keep_prob=keep)
        values, fed = _run([out, out_fed], {keep: 0.25})
    kept = values[values != 0]
    assert abs(kept.size / values.size - 0.7) < 0.01
    np.testing.assert_allclose(kept, 1 / 0.7, rtol=1e-6)
    assert abs(values.mean() - 1.0) < 0.02
    assert abs(np.count_nonzero(fed) / fed.size - 0.25) < 0.01
    np.testing.assert_allclose(fed[fed != 0], 4.0, rtol=1e-6)


def test_dropout_noise_shape_and_seed():
    with tf.Graph().as_default() as graph:
        tf.compat.v1.set_random_seed(3)
        x = tf.ones([64, 16])
        out = npu_ops.dropout(x, 0.5, noise_shape=[64, 1], seed=11)
    first = _run(out, graph=graph)
    assert np.all((first == 0).all(axis=1) | (first == 2.0).all(axis=1))
    assert 0 < np.count_nonzero(first[:, 0]) < 64
    np.testing.assert_array_equal(first, _run(out, graph=graph))


def _dropout_entry_points():
    from npu_bridge.estimator import npu_aicore_ops

    return {"npu_ops.dropout": npu_ops.dropout, "dropout_v3": npu_aicore_ops.dropout_v3,
            "dropout_v4": npu_aicore_ops.dropout_v4}


@pytest.mark.parametrize("entry_point", ["npu_ops.dropout", "dropout_v3", "dropout_v4"])
def test_dropout_with_a_fed_keep_prob_keeps_the_shape_for_the_next_layer(entry_point):
    """The TF1 pattern: keep_prob is a placeholder of unknown shape, fed 0.5 to train and 1.0 to
    evaluate, and a dense layer follows (it needs the last dimension)."""
    from npu_adapter.config import NpuConfig
    from npu_adapter.session import NpuSession, plain_session_class

    dropout = _dropout_entry_points()[entry_point]
    tf1 = tf.compat.v1
    rs = np.random.RandomState(0)
    xs, ys = rs.randn(8, 16).astype(np.float32), rs.randint(0, 3, 8)

    def build():
        graph = tf.Graph()
        with graph.as_default():
            tf1.set_random_seed(5)
            x = tf1.placeholder(tf.float32, [None, 16])
            y = tf1.placeholder(tf.int32, [None])
            keep_prob = tf1.placeholder(tf.float32)
            # Seeded initialisers: tf_keras' own are not reproducible across two graphs.
            hidden = tf1.layers.dense(x, 32, activation=tf.nn.relu,
                                      kernel_initializer=tf1.glorot_uniform_initializer(seed=1))
            dropped = dropout(hidden, keep_prob)
            assert dropped.shape.as_list() == tf1.nn.dropout(hidden, keep_prob).shape.as_list()
            logits = tf1.layers.dense(dropped, 3,
                                      kernel_initializer=tf1.glorot_uniform_initializer(seed=2))
            loss = tf1.losses.sparse_softmax_cross_entropy(y, logits)
            train = tf1.train.AdamOptimizer(0.01).minimize(loss)
            init = tf1.global_variables_initializer()
        return graph, (x, y, keep_prob), dropped, loss, train, init

    results = {}
    config = NpuConfig().to_config_proto()
    for cls in (plain_session_class(), NpuSession):
        graph, (x, y, keep_prob), dropped, loss, train, init = build()
        assert dropped.shape.as_list() == [None, 32]
        with cls(graph=graph, config=config) as sess:
            sess.run(init)
            steps = [sess.run([loss, train], {x: xs, y: ys, keep_prob: 0.5})[0]
                     for _ in range(3)]
            evaluation = sess.run(loss, {x: xs, y: ys, keep_prob: 1.0})
            if cls is NpuSession:
                assert runner_of(sess).rewrite_count == 3  # init, train, evaluation
        results[cls] = steps + [evaluation]
    plain, npu = results.values()
    assert [a.tobytes() for a in plain] == [b.tobytes() for b in npu]
    assert len({float(v) for v in plain}) == 4  # every step trains on new masks


def test_dropout_keep_prob_fed_as_a_vector_fails_at_run_time():
    with tf.Graph().as_default() as graph:
        keep_prob = tf.compat.v1.placeholder(tf.float32)
        out = npu_ops.dropout(tf.ones([4]), keep_prob)
    with pytest.raises(tf.errors.InvalidArgumentError, match="keep_prob_scalar"):
        _run(out, {keep_prob: [0.5, 0.5]}, graph=graph)


def test_dropout_keep_prob_one_returns_input():
    with tf.Graph().as_default():
        x = tf.constant([1.0, 2.0])
        assert npu_ops.dropout(x, 1.0) is x
        assert npu_ops.dropout(x, 1) is x


@pytest.mark.parametrize("keep_prob", [0, 0.0, -0.5, 1.5, True])
def test_dropout_keep_prob_range(keep_prob):
    with tf.Graph().as_default(), pytest.raises(ValueError, match=r"range \(0, 1\]"):
        npu_ops.dropout(tf.ones([2]), keep_prob)


def test_dropout_argument_errors():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="x must be a floating point tensor.*int32"):
            npu_ops.dropout(tf.constant([1, 2]), 0.5)
        with pytest.raises(ValueError, match="keep_prob must be a scalar tensor"):
            npu_ops.dropout(tf.ones([2]), tf.constant([0.5, 0.5]))


# ---- gelu ------------------------------------------------------------------------------------


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_erf(x):
    return np.array([0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x])


def test_gelu_matches_numpy_tanh_approximation():
    x = np.linspace(-6, 6, 241).astype(np.float64)
    with tf.Graph().as_default() as graph:
        out = npu_unary_ops.gelu(tf.constant(x))
        out16 = gelu(tf.constant(x.astype(np.float16)))
    value, value16 = _run([out, out16], graph=graph)
    np.testing.assert_allclose(value, _gelu_tanh(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(value16, _gelu_tanh(x), rtol=2e-2, atol=2e-2)
    assert np.max(np.abs(value - _gelu_erf(x))) > 1e-4  # the approximation, not the erf form
    assert npu_unary_ops.gelu is gelu


def test_gelu_grad_matches_autodiff_and_finite_differences():
    x = np.linspace(-4, 4, 81)
    dy = np.linspace(0.5, 1.5, 81)
    with tf.Graph().as_default() as graph:
        tx = tf.constant(x)
        y = gelu(tx)
        auto = tf.gradients(y, tx, grad_ys=tf.constant(dy))[0]
        explicit = npu_unary_ops.gelu_grad(tf.constant(dy), tx, y)
    auto_value, explicit_value = _run([auto, explicit], graph=graph)
    np.testing.assert_allclose(explicit_value, auto_value, rtol=1e-10, atol=1e-12)
    eps = 1e-6
    numeric = dy * (_gelu_tanh(x + eps) - _gelu_tanh(x - eps)) / (2 * eps)
    np.testing.assert_allclose(explicit_value, numeric, rtol=1e-6, atol=1e-8)


def test_gelu_errors_and_unknown_unary_ops():
    with tf.Graph().as_default(), pytest.raises(TypeError, match="floating point"):
        gelu(tf.constant([1, 2]))
    with pytest.raises(AttributeError, match="gen_npu_ops.gelu_v2 is a custom op of the "
                       "original _tf_adapter.so that this pure-Python build does not provide"):
        npu_unary_ops.gelu_v2  # noqa: B018
    assert not hasattr(npu_unary_ops, "gelu_v2")
    assert {"gelu", "gelu_grad", "fast_gelu", "fast_gelu_grad"} <= set(dir(npu_unary_ops))


# ---- scatter_elements ------------------------------------------------------------------------


def _scatter_elements_reference(data, indices, updates, axis):
    out = data.copy()
    for position in np.ndindex(indices.shape):
        target = list(position)
        index = indices[position]
        target[axis] = index if index >= 0 else index + data.shape[axis]
        out[tuple(target)] = updates[position]
    return out


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_matches_reference(axis):
    rng = np.random.RandomState(0)
    data = rng.rand(4, 5).astype(np.float32)
    shape = (3, 5) if axis == 0 else (4, 2)
    size = data.shape[axis]
    # distinct targets per line so the result is defined
    indices = np.zeros(shape, np.int64)
    for line in np.ndindex(tuple(n for i, n in enumerate(shape) if i != axis % 2)):
        picks = rng.choice(size, shape[axis % 2], replace=False) - size * rng.randint(0, 2)
        for k, pick in enumerate(picks):
            position = list(line)
            position.insert(axis % 2, k)
            indices[tuple(position)] = pick
    updates = rng.rand(*shape).astype(np.float32)
    with tf.Graph().as_default() as graph:
        out = npu_ops.scatter_elements(data, indices, updates, axis=axis)
    np.testing.assert_array_equal(_run(out, graph=graph),
                                  _scatter_elements_reference(data, indices, updates, axis))


def test_scatter_elements_errors():
    with tf.Graph().as_default():
        data = tf.zeros([2, 3])
        with pytest.raises(ValueError, match="axis=2 is out of range for rank 2"):
            npu_ops.scatter_elements(data, [[0]], [[1.0]], axis=2)
        with pytest.raises(ValueError, match="indices must be int32 or int64"):
            npu_ops.scatter_elements(data, [[0.0]], [[1.0]])
        with pytest.raises(ValueError, match="indices must have the rank of data"):
            npu_ops.scatter_elements(data, [0], [[1.0]])


# ---- single-rank optimizers and loss scaling -------------------------------------------------


def _linear_problem(optimizer_factory, feed_value=1.0):
    """One SGD-style step on loss = (w * x - 3)^2 from w = 1; returns (w after, grads)."""
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [])
        w = tf.compat.v1.get_variable("w", initializer=1.0, use_resource=True)
        loss = tf.square(w * x - 3.0)
        optimizer = optimizer_factory()
        grads_and_vars = optimizer.compute_gradients(loss, [w])
        step = tf.compat.v1.train.get_or_create_global_step()
        train = optimizer.apply_gradients(grads_and_vars, global_step=step)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        grad = sess.run(grads_and_vars[0][0], {x: feed_value})
        sess.run(train, {x: feed_value})
        return sess.run(w), grad, sess.run(step), optimizer


def test_distributed_optimizer_on_one_rank_is_the_wrapped_optimizer():
    plain = _linear_problem(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
    wrapped = _linear_problem(lambda: NPUDistributedOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1)))
    assert plain[:3] == wrapped[:3] == (pytest.approx(1.4), pytest.approx(-4.0), 1)
    momentum = _linear_problem(lambda: NPUDistributedOptimizer(
        tf.compat.v1.train.MomentumOptimizer(0.1, 0.9), name="dist"))[3]
    assert momentum.get_slot_names() == ["momentum"] and momentum.get_name() == "dist"
    with pytest.raises(TypeError, match="npu_keras_optimizer"):
        NPUDistributedOptimizer(object())


def test_loss_scale_optimizer_fixed_scale_matches_plain_step():
    plain = _linear_problem(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
    scaled = _linear_problem(lambda: NPULossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1), FixedLossScaleManager(1024)))
    assert scaled[0] == pytest.approx(plain[0]) and scaled[1] == pytest.approx(plain[1])
    assert scaled[2] == 1


def test_loss_scale_optimizer_skips_non_finite_steps():
    w, grad, step, _ = _linear_problem(lambda: NPULossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1), FixedLossScaleManager(8)),
        feed_value=np.inf)
    assert not np.isfinite(grad)
    assert w == 1.0 and step == 0  # the update and the global step were skipped
    w, _, step, _ = _linear_problem(lambda: NPULossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1),
        FixedLossScaleManager(8, enable_overflow_check=False)), feed_value=np.inf)
    assert not np.isfinite(w) and step == 1


def test_npu_optimizer_loss_scale_and_plain():
    plain = _linear_problem(lambda: NPUOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1)))
    assert plain[0] == pytest.approx(1.4)
    scaled = _linear_problem(lambda: NPUOptimizer(
        tf.compat.v1.train.AdamOptimizer(0.1), FixedLossScaleManager(64), is_loss_scale=True,
        is_distributed=True))
    reference = _linear_problem(lambda: tf.compat.v1.train.AdamOptimizer(0.1))
    assert scaled[0] == pytest.approx(reference[0]) and scaled[3].get_slot_names() == ["m", "v"]
    skipped = _linear_problem(lambda: NPUOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1), FixedLossScaleManager(2),
        is_loss_scale=True), feed_value=np.nan)
    assert skipped[0] == 1.0 and skipped[2] == 0
    with pytest.raises(ValueError, match="loss_scale_manager can not be None"):
        NPUOptimizer(tf.compat.v1.train.AdamOptimizer(0.1), is_loss_scale=True)
    with pytest.raises(TypeError, match="loss_scale_manager must be"):
        NPUOptimizer(tf.compat.v1.train.AdamOptimizer(0.1), 4, is_loss_scale=True)


def test_exponential_update_loss_scale_manager_rules():
    with tf.Graph().as_default() as graph:
        manager = ExponentialUpdateLossScaleManager(16, incr_every_n_steps=2,
                                                    decr_every_n_nan_or_inf=2, decr_ratio=0.5)
        finite = tf.compat.v1.placeholder(tf.bool, [])
        update = manager.update_loss_scale(finite)
        state = [manager.get_loss_scale(), manager._num_good_steps, manager._num_bad_steps]
        init = tf.compat.v1.global_variables_initializer()
    trace = []
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        for step_finite in (True, True, False, True, False, False, False, False, False):
            sess.run(update, {finite: step_finite})
            trace.append(tuple(sess.run(state)))
    assert trace == [
        (16.0, 1, 0), (32.0, 0, 0),               # 2 finite steps: grow, reset
        (32.0, 0, 1), (32.0, 1, 1),               # a bad step; a good one keeps the bad count
        (16.0, 0, 0),                             # the 2nd bad step: shrink, reset
        (16.0, 0, 1), (8.0, 0, 0), (8.0, 0, 1), (4.0, 0, 0),
    ]


def test_exponential_manager_floor_and_validation():
    with tf.Graph().as_default() as graph:
        manager = ExponentialUpdateLossScaleManager(1, 1, 1, decr_ratio=0.5)
        update = manager.update_loss_scale(tf.constant(False))
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(update)
        assert sess.run(manager.get_loss_scale()) == 1.0  # never below 1
    with pytest.raises(ValueError, match="init_loss_scale"):
        ExponentialUpdateLossScaleManager(0.5, 1)
    with pytest.raises(ValueError, match="decr_ratio"):
        ExponentialUpdateLossScaleManager(2, 1, decr_ratio=1.5)
    with pytest.raises(ValueError, match="loss scale must be at least 1"):
        FixedLossScaleManager(0.5)
    with pytest.raises(TypeError, match="loss_scale_manager must be"):
        NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(0.1), None)
