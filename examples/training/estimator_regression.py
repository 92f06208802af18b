"""``NPUEstimator`` with ``tf.estimator.train_and_evaluate`` (ModelZoo style): a small MLP
regressor with ``iterations_per_loop`` > 1 and eval metrics (``mean_squared_error``,
``mean_absolute_error``, the estimator's own ``loss``) computed to the end of the eval input.

The NPU run uses ``NPURunConfig(iterations_per_loop=N)``: each training ``Session.run`` is N
steps. The plain twin (``npu=False``) is ``tf.estimator.Estimator`` with a plain ``RunConfig``,
one step per run. After k·N steps both have the same loss and weights, and the evaluations —
which end when the eval dataset raises ``OutOfRangeError`` — the same metrics, bit for bit.
Needs ``tf.estimator``, which TensorFlow removed in 2.16: on a later TensorFlow the script says so
and exits with status 3.

    python examples/training/estimator_regression.py
"""

import sys

if __package__ in (None, ""):
    sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np
from _zoo import quiet, report, same_bits, tf, tf1, training_geops, without_npu_optimizer

FEATURES, HIDDEN = 8, 16


def synthetic_data(samples, seed):
    """``y = sin(x·a) + x·b + noise``: a smooth regression target."""
    rs = np.random.RandomState(seed)
    x = rs.randn(samples, FEATURES).astype(np.float32)
    a, b = np.random.RandomState(99).randn(2, FEATURES, 1).astype(np.float32)
    y = np.sin(x @ a) + x @ b + 0.1 * rs.randn(samples, 1)
    return x, y.astype(np.float32)


def train_input_fn(batch_size, samples=512):
    """Shuffled, repeated training batches."""
    x, y = synthetic_data(samples, seed=0)
    return (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(samples, seed=3)
            .batch(batch_size, drop_remainder=True).repeat())


def eval_input_fn(batch_size, samples):
    """``samples`` examples in batches (the last one partial unless ``batch_size`` divides
    ``samples``), then ``OutOfRangeError``."""
    x, y = synthetic_data(samples, seed=1)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


def model_fn(features, labels, mode, params, training_hooks=()):
    """Two-layer MLP; Adam; MSE/MAE eval metrics."""
    h = features
    for i, units in enumerate((HIDDEN, HIDDEN, 1)):
        with tf1.variable_scope(f"dense{i}"):
            kernel = tf1.get_variable("kernel", [h.shape[-1], units])
            bias = tf1.get_variable("bias", [units], initializer=tf1.zeros_initializer())
            h = tf.nn.bias_add(tf.matmul(h, kernel), bias)
            if units != 1:
                h = tf.nn.tanh(h)
    predictions = h
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions=predictions)
    loss = tf1.losses.mean_squared_error(labels, predictions)
    if mode == tf.estimator.ModeKeys.EVAL:
        metrics = {"mse": tf1.metrics.mean_squared_error(labels, predictions),
                   "mae": tf1.metrics.mean_absolute_error(labels, predictions)}
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    train_op = tf1.train.AdamOptimizer(params["learning_rate"]).minimize(
        loss, global_step=tf1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                      training_hooks=list(training_hooks))


class LossRecorder(tf1.train.SessionRunHook):
    """Records the loss fetched with every training ``Session.run`` and the global step after
    it, and the graph and session of the run (to look at its GeOps).

    The step is read in a run of its own: fetched beside the train op, the global step (a ref
    variable) may be read before or after the op increments it, in either session.
    """

    def __init__(self):
        self.losses, self.steps = [], []
        self.graph = self.session = None

    def begin(self):
        self.graph = tf1.get_default_graph()
        self._loss = tf1.losses.get_losses()[0]
        self._step = tf1.train.get_global_step()

    def after_create_session(self, session, coord):
        self.session = session

    def before_run(self, run_context):
        return tf1.train.SessionRunArgs({"loss": self._loss})

    def after_run(self, run_context, run_values):
        self.losses.append(run_values.results["loss"])
        self.steps.append(int(run_context.session.run(self._step)))


def make_estimator(npu, model_dir, iterations_per_loop, params, recorder):
    """``NPUEstimator`` + ``NPURunConfig`` (npu) or ``Estimator`` + ``RunConfig`` (plain)."""
    def recorded_model_fn(features, labels, mode, params):
        return model_fn(features, labels, mode, params, training_hooks=[recorder])

    common = {"model_dir": model_dir, "tf_random_seed": 1234, "save_checkpoints_steps": None,
              "save_checkpoints_secs": 3600, "save_summary_steps": 0,
              "log_step_count_steps": None}
    from npu_bridge.estimator.npu.npu_config import (
        NPURunConfig,
        npu_run_config_to_config_proto,
    )
    from npu_bridge.estimator.npu.npu_estimator import NPUEstimator

    config = NPURunConfig(iterations_per_loop=iterations_per_loop,
                          precision_mode="allow_mix_precision", **common)
    if npu:
        return NPUEstimator(recorded_model_fn, config=config, params=params)
    # The same session settings (NPURunConfig's Grappler list) without the NpuOptimizer entry.
    session_config = without_npu_optimizer(npu_run_config_to_config_proto(config))
    return tf.estimator.Estimator(
        recorded_model_fn, config=tf.estimator.RunConfig(session_config=session_config, **common),
        params=params)


def main(npu=True, model_dir=None, iterations_per_loop=5, loops=4, batch_size=16,
         eval_samples=160, learning_rate=0.01):
    """``train_and_evaluate`` for ``loops`` × ``iterations_per_loop`` steps; return the
    recorded losses and global steps, the final weights, the final evaluation and the GeOps
    holding the training step."""
    import tempfile

    quiet()
    owned = model_dir is None
    if owned:
        tmp = tempfile.TemporaryDirectory(prefix="estimator_regression_")
        model_dir = tmp.name
    try:
        recorder = LossRecorder()
        estimator = make_estimator(npu, model_dir, iterations_per_loop,
                                   {"learning_rate": learning_rate}, recorder)
        max_steps = loops * iterations_per_loop
        train_spec = tf.estimator.TrainSpec(lambda: train_input_fn(batch_size),
                                            max_steps=max_steps)
        eval_spec = tf.estimator.EvalSpec(lambda: eval_input_fn(batch_size, eval_samples),
                                          steps=None, throttle_secs=3600, start_delay_secs=0)
        metrics, _ = tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
        weights = {name: estimator.get_variable_value(name)
                   for name in estimator.get_variable_names()
                   if name.startswith("dense") and "Adam" not in name}
        geops = training_geops(recorder.graph) if npu else []
    finally:
        if owned:
            tmp.cleanup()
    return {"losses": recorder.losses, "steps": recorder.steps, "weights": weights,
            "metrics": dict(metrics.items()),
            "steps_per_run": iterations_per_loop if npu else 1, "geops": geops}


def plain_at_loop_ends(plain, npu):
    """The plain run's per-step losses at the steps the NPU run logged (every N-th)."""
    n = npu["steps_per_run"]
    return dict(plain, losses=plain["losses"][n - 1::n], steps=plain["steps"][n - 1::n])


def eval_reference(weights, samples):
    """MSE and MAE of the final weights over the eval set, in NumPy (float64)."""
    x, y = synthetic_data(samples, seed=1)
    h = x.astype(np.float64)
    for i in range(3):
        h = h @ weights[f"dense{i}/kernel"] + weights[f"dense{i}/bias"]
        if i < 2:
            h = np.tanh(h)
    return {"mse": np.mean((h - y) ** 2), "mae": np.mean(np.abs(h - y))}


EXIT_NEEDS_ESTIMATOR = 3
"""Exit status when this TensorFlow has no ``tf.estimator`` (the sample cannot run)."""

if __name__ == "__main__":
    if not hasattr(tf, "estimator"):
        print(f"estimator_regression: cannot run on TensorFlow {tf.__version__}: it needs "
              "tf.estimator, which TensorFlow removed in 2.16 (NPUEstimator builds on it). "
              "Run it with TensorFlow 2.15: pip install 'tensorflow-cpu==2.15.*' tf_keras",
              file=sys.stderr)
        sys.exit(EXIT_NEEDS_ESTIMATOR)
    npu_run, plain_run = main(npu=True), main(npu=False)
    print("eval metrics (npu):", npu_run["metrics"])
    print("eval metrics (plain):", plain_run["metrics"])
    print("eval metrics equal bit for bit:", same_bits(npu_run["metrics"], plain_run["metrics"]))
    sys.exit(report("estimator_regression", npu_run, plain_at_loop_ends(plain_run, npu_run),
                    keys=("losses", "steps", "weights", "metrics")))
