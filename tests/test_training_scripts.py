"""The ModelZoo-style training samples (``examples/training``) on the NPU session against the same
scripts on plain TensorFlow: losses at every logged run, global steps and final weights equal
bit for bit, a GeOp holding the training step, eval metrics to the end of the input, and loss
scaling that skips overflowing steps."""

import importlib
import pathlib
import sys

import numpy as np
import pytest
import tensorflow as tf

TRAINING = pathlib.Path(__file__).resolve().parents[1] / "examples" / "training"
HAS_ESTIMATOR = hasattr(tf, "estimator")
needs_estimator = pytest.mark.skipif(
    not HAS_ESTIMATOR, reason="tf.estimator exists up to TensorFlow 2.15 only")
tf1 = tf.compat.v1


@pytest.fixture(autouse=True)
def installed():
    """Every session is an NPU session, as after the samples' ``import npu_bridge`` (another
    test may have uninstalled it since that import)."""
    import npu_adapter
    from npu_adapter.session import is_installed

    was = is_installed()
    npu_adapter.install()
    yield
    if not was:
        npu_adapter.uninstall()


def sample(name):
    """Import ``examples/training/<name>.py``."""
    if str(TRAINING) not in sys.path:
        sys.path.insert(0, str(TRAINING))
    return importlib.import_module(name)


def assert_same_bits(npu, plain, keys):
    zoo = sample("_zoo")
    for key in keys:
        assert zoo.same_bits(npu[key], plain[key]), (key, npu[key], plain[key])


def assert_training_geop(run, loop):
    """A GeOp holds the optimizer update (in a loop-sunk run when ``loop``)."""
    geops = run["geops"]
    assert geops, "no GeOp holds the training step"
    assert any(g["cluster"].startswith("GeOp") and g["applies"]
               and (g["loop"] == "IterationOp") == loop for g in geops), geops


# ---- 1. Session loop with set_iteration_per_loop on tf.data --------------------------------


def test_session_loop_one_run_is_n_steps():
    mlp = sample("session_loop_mlp")
    npu = mlp.main(npu=True, iterations_per_loop=5, loops=3)
    plain = mlp.main(npu=False, iterations_per_loop=5, loops=3)
    assert len(npu["losses"]) == 3 and len(plain["losses"]) == 15
    assert npu["global_step"] == plain["global_step"] == 15
    assert_same_bits(npu, mlp.plain_at_loop_ends(plain, npu), ("losses", "weights"))
    assert_training_geop(npu, loop=True)
    assert plain["losses"][-1] < plain["losses"][0]  # it learns


def _run_script(name):
    import os
    import subprocess

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0")
    return subprocess.run([sys.executable, str(TRAINING / f"{name}.py")], env=env,
                          capture_output=True, text=True, timeout=600)


def test_session_loop_script_logs_the_loss_of_each_run():
    proc = _run_script("session_loop_mlp")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    logged = [line.split("loss ")[1] for line in lines if ": loss " in line]
    steps = [line.split("step ")[1].split(":")[0] for line in lines if ": loss " in line]
    assert steps == ["10", "20", "30"]
    (plain,) = [line for line in lines if "plain TensorFlow at the same steps" in line]
    assert plain.split(": ")[-1] == ", ".join(logged)   # the same losses, as printed
    assert lines[-1].endswith("bit for bit: True")


@pytest.mark.skipif(HAS_ESTIMATOR, reason="this TensorFlow has tf.estimator: the sample runs")
def test_estimator_script_says_why_it_cannot_run():
    proc = _run_script("estimator_regression")
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == (
        f"estimator_regression: cannot run on TensorFlow {tf.__version__}: it needs "
        "tf.estimator, which TensorFlow removed in 2.16 (NPUEstimator builds on it). Run it "
        "with TensorFlow 2.15: pip install 'tensorflow-cpu==2.15.*' tf_keras")


# ---- 2. NPUEstimator with train_and_evaluate ---------------------------------------------


def _batch_mse_reference(weights, samples, batch_size):
    """Per-batch MSE of the final weights over the eval input (NumPy, float64)."""
    est = sample("estimator_regression")
    x, y = est.synthetic_data(samples, seed=1)
    h = x.astype(np.float64)
    for i in range(3):
        h = h @ weights[f"dense{i}/kernel"] + weights[f"dense{i}/bias"]
        h = np.tanh(h) if i < 2 else h
    err = (h - y) ** 2
    return [err[k:k + batch_size].mean() for k in range(0, samples, batch_size)], err, h - y


@needs_estimator
@pytest.mark.parametrize("eval_samples", [160, 165], ids=["10_full_batches", "partial_last"])
def test_npu_estimator_train_and_evaluate(eval_samples):
    est = sample("estimator_regression")
    kwargs = {"iterations_per_loop": 5, "loops": 2, "batch_size": 16, "eval_samples": eval_samples}
    npu = est.main(npu=True, **kwargs)
    plain = est.main(npu=False, **kwargs)
    assert npu["steps"] == [5, 10] and plain["steps"] == list(range(1, 11))
    assert_same_bits(npu, est.plain_at_loop_ends(plain, npu),
                     ("losses", "steps", "weights", "metrics"))
    assert_training_geop(npu, loop=True)
    # The metrics end at OutOfRangeError: the failed final step must not count. The estimator's
    # `loss` metric is the mean of per-batch losses (10 or 11 batches, never one more), the
    # MSE/MAE the means over every example.
    batch_mse, err, diff = _batch_mse_reference(npu["weights"], eval_samples, 16)
    metrics = npu["metrics"]
    assert metrics["global_step"] == 10
    np.testing.assert_allclose(metrics["loss"], np.mean(batch_mse), rtol=1e-5)
    np.testing.assert_allclose(metrics["mse"], err.mean(), rtol=1e-5)
    np.testing.assert_allclose(metrics["mae"], np.abs(diff).mean(), rtol=1e-5)


def test_metrics_at_end_of_input_with_loop_sinking():
    """Eval-style metric updates sunk N per run until the input ends: the step that hits the
    end of the input updates nothing, as in plain TensorFlow (count 10, not 11)."""
    zoo = sample("_zoo")
    from npu_bridge.estimator.npu import util

    rs = np.random.RandomState(0)
    xs, ys = rs.randn(160, 3).astype(np.float32), rs.randn(160, 1).astype(np.float32)
    w0 = rs.randn(3, 1).astype(np.float32)

    def run(npu, n):
        graph = tf.Graph()
        with graph.as_default():
            it = tf1.data.make_initializable_iterator(
                tf.data.Dataset.from_tensor_slices((xs, ys)).batch(16))
            x, y = it.get_next()
            w = tf1.get_variable("w", initializer=w0, use_resource=False)
            loss = tf1.losses.mean_squared_error(y, tf.matmul(x, w))
            mean_loss, update_loss = tf1.metrics.mean(loss)
            mse, update_mse = tf1.metrics.mean_squared_error(y, tf.matmul(x, w))
            update = tf.group(update_loss, update_mse)
            init = [tf1.global_variables_initializer(), tf1.local_variables_initializer(),
                    it.initializer]
        config = zoo.npu_session_config(iterations_per_loop=n, npu=npu)
        with tf1.Session(graph=graph, config=config) as sess:
            sess.run(init)
            with graph.as_default():
                loop = util.set_iteration_per_loop(sess, update, n)
            runs = 0
            with pytest.raises(tf.errors.OutOfRangeError):
                while True:
                    sess.run(loop)
                    runs += 1
            state = zoo.variable_values(graph, sess, tf1.GraphKeys.LOCAL_VARIABLES)
            return runs, sess.run([mean_loss, mse]), state

    runs, (mean_loss, mse), state = run(True, 3)
    plain_runs, plain_values, plain_state = run(False, 1)
    assert (runs, plain_runs) == (3, 10)  # 3 runs of 3 steps, then one batch and the end
    assert zoo.same_bits([mean_loss, mse], plain_values)
    assert zoo.same_bits({k: v for k, v in state.items() if not k.startswith("npu_runconfig")},
                         plain_state)
    assert state["mean/count"] == 10.0 and state["mean_squared_error_1/count"] == 160.0
    err = (xs.astype(np.float64) @ w0 - ys) ** 2
    np.testing.assert_allclose(mean_loss, err.reshape(10, 16).mean(axis=1).mean(), rtol=1e-5)
    np.testing.assert_allclose(mse, err.mean(), rtol=1e-5)


# ---- 3. MonitoredTrainingSession ---------------------------------------------------------


def test_monitored_training_session_per_step_and_loop():
    cnn = sample("monitored_cnn")
    plain = cnn.main(npu=False, steps=8)
    npu = cnn.main(npu=True, steps=8)
    assert len(plain["losses"]) == 8 and plain["global_step"] == npu["global_step"] == 8
    assert_same_bits(npu, plain, ("losses", "weights"))
    assert_training_geop(npu, loop=False)
    looped = cnn.main(npu=True, steps=8, iterations_per_loop=4)
    assert looped["run_steps"] == [4, 8]  # the global step after each run of 4 steps
    assert plain["run_steps"] == list(range(1, 9))
    assert_same_bits(looped, cnn.plain_at_loop_ends(plain, looped), ("losses", "weights"))
    assert_training_geop(looped, loop=True)


# ---- 4. DynamicRNN LSTM with NPULossScaleOptimizer ---------------------------------------


def _loss_scale_schedule(initial, finite_steps, incr_every, decr_every, incr_ratio, decr_ratio):
    """The exponential-update rules, written out: the scale after each step."""
    scale, good, bad, out = initial, 0, 0, []
    for finite in finite_steps:
        if finite:
            good += 1
            if good >= incr_every:
                scale, good, bad = scale * incr_ratio, 0, 0
        else:
            bad += 1
            good = 0
            if bad >= decr_every:
                scale, good, bad = max(1.0, scale * decr_ratio), 0, 0
        out.append(scale)
    return out


def test_dynamic_rnn_lstm_with_loss_scaling_matches_plain():
    lstm = sample("lstm_loss_scale")
    keys = ("losses", "loss_scales", "global_steps", "weights")
    npu = lstm.main(npu=True, steps=8)
    plain = lstm.main(npu=False, steps=8)
    assert_same_bits(npu, plain, keys)
    assert_training_geop(npu, loop=False)
    assert npu["global_steps"] == list(range(1, 9))
    assert npu["loss_scales"] == _loss_scale_schedule(1024.0, [True] * 8, 4, 1, 2.0, 0.5)


def test_loss_scaling_overflow_skips_the_step_and_shrinks_the_scale():
    lstm = sample("lstm_loss_scale")
    overflow = (2, 3, 9)
    kwargs = {"steps": 12, "overflow_steps": overflow, "incr_every_n_steps": 4,
              "decr_every_n_nan_or_inf": 1, "decr_ratio": 0.5, "init_loss_scale": 1024.0}
    npu = lstm.main(npu=True, **kwargs)
    plain = lstm.main(npu=False, **kwargs)
    assert_same_bits(npu, plain, ("losses", "loss_scales", "global_steps", "weights_per_run"))
    finite = [step not in overflow for step in range(12)]
    assert npu["loss_scales"] == _loss_scale_schedule(1024.0, finite, 4, 1, 2.0, 0.5)
    assert npu["global_steps"] == list(np.cumsum(finite))  # skipped steps do not count
    before = [npu["initial_weights"]] + npu["weights_per_run"][:-1]
    zoo = sample("_zoo")
    for step, (old, new) in enumerate(zip(before, npu["weights_per_run"])):
        # An overflowing step leaves every weight as it was, bit for bit; a finite one moves
        # them all (and stays finite).
        assert zoo.same_bits(old, new) == (step in overflow), step
        assert all(np.isfinite(v).all() for v in new.values())
    assert all(not np.isfinite(npu["losses"][s]) for s in overflow)
    # Loop sinking: 4 steps per run, the overflowing ones skipped inside the loop.
    looped = lstm.main(npu=True, iterations_per_loop=4, **kwargs)
    assert_same_bits(looped, lstm.plain_at_loop_ends(plain, looped),
                     ("losses", "loss_scales", "global_steps", "weights_per_run", "weights"))
    assert_training_geop(looped, loop=True)


# ---- 5. Keras ------------------------------------------------------------------------------


@needs_estimator
def test_keras_model_to_npu_estimator():
    keras_sample = sample("keras_to_npu_estimator")
    npu = keras_sample.main(npu=True, mode="estimator", iterations_per_loop=4, loops=2)
    plain = keras_sample.main(npu=False, mode="estimator", iterations_per_loop=4, loops=2)
    assert len(npu["losses"]) == 2 and len(plain["losses"]) == 8
    assert_same_bits(npu, keras_sample.plain_at_loop_ends(plain, npu), ("losses", "weights"))
    assert_training_geop(npu, loop=True)


def test_keras_fit_in_the_npu_keras_session():
    keras_sample = sample("keras_to_npu_estimator")
    npu = keras_sample.main(npu=True, mode="session", epochs=1)
    plain = keras_sample.main(npu=False, mode="session", epochs=1)
    assert len(npu["losses"]) == 8
    assert_same_bits(npu, plain, ("losses", "weights"))
    assert_training_geop(npu, loop=False)


def test_samples_leave_eager_execution_on():
    """The samples take npu_init's functions from the module without its side effect, so the
    test process (and any program importing them) keeps eager execution."""
    for name in ("monitored_cnn", "keras_to_npu_estimator", "lstm_loss_scale"):
        sample(name)
    assert tf.executing_eagerly()


@needs_estimator
def test_keras_model_with_adam_to_an_estimator_keeps_the_optimizer_slots(tmp_path):
    """A compiled Keras model with Adam, turned into an estimator once npu_bridge is imported,
    by TensorFlow's own model_to_estimator and by model_to_npu_estimator: both save their first
    checkpoint (the Adam slots initialised) and train to the same weights."""
    from npu_bridge.estimator.npu.keras_to_npu import model_to_npu_estimator
    from npu_bridge.estimator.npu.npu_config import NPURunConfig, npu_run_config_to_config_proto

    keras = tf.keras

    def model():
        seeded = keras.initializers.GlorotUniform
        inputs = keras.Input((8, 8, 3))
        h = keras.layers.Conv2D(4, 3, kernel_initializer=seeded(seed=1), name="conv")(inputs)
        outputs = keras.layers.Dense(1, kernel_initializer=seeded(seed=2), name="out")(
            keras.layers.Flatten()(h))
        built = keras.Model(inputs, outputs)
        built.compile(optimizer=keras.optimizers.legacy.Adam(0.01), loss="mse")
        return built

    def input_fn():
        x = np.random.RandomState(0).randn(16, 8, 8, 3).astype(np.float32)
        y = np.random.RandomState(1).randn(16, 1).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()

    def kernel(estimator, model_dir):
        estimator.train(input_fn, steps=3)
        return tf.train.load_variable(str(model_dir), "out/kernel")

    npu_config = NPURunConfig(model_dir=str(tmp_path / "npu"), iterations_per_loop=1)
    npu = model_to_npu_estimator(keras_model=model(), config=npu_config)
    # Plain TensorFlow with the same session settings (NPURunConfig turns Grappler's remapping
    # off, as the original does; its fused kernels round differently).
    session_config = npu_run_config_to_config_proto(npu_config)
    options = session_config.graph_options.rewrite_options.custom_optimizers
    del options[:]
    plain = tf.keras.estimator.model_to_estimator(
        keras_model=model(), checkpoint_format="saver", config=tf.estimator.RunConfig(
            model_dir=str(tmp_path / "plain"), session_config=session_config))
    np.testing.assert_array_equal(kernel(npu, tmp_path / "npu"), kernel(plain, tmp_path / "plain"))
