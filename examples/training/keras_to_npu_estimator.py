"""A Keras model on the NPU (ModelZoo style), two ways:

* ``mode="estimator"`` (TensorFlow <= 2.15): the compiled Keras model becomes an ``NPUEstimator``
  through ``keras_to_npu.model_to_npu_estimator`` with an ``NPURunConfig``
  (``iterations_per_loop`` > 1 allowed); the plain twin is Keras's own ``model_to_estimator``
  with the same session settings minus the ``NpuOptimizer`` entry;
* ``mode="session"`` (TensorFlow 2.15 and 2.21): ``set_keras_session_npu_config`` makes the Keras
  backend session an NPU session and ``model.fit`` trains in it (graph mode), one step per batch;
  the plain twin gives Keras a session without the ``NpuOptimizer`` entry.

Either way the losses per logged run and the final weights equal plain TensorFlow's, bit for bit.

    python examples/training/keras_to_npu_estimator.py
"""

import sys

if __package__ in (None, ""):
    sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np
from _zoo import quiet, report, tf, tf1, training_geops, without_npu_optimizer

FEATURES, HIDDEN, CLASSES = 10, 24, 3


def synthetic_data(samples, seed=0):
    """Three Gaussian blobs in 10 dimensions."""
    rs = np.random.RandomState(seed)
    labels = rs.randint(0, CLASSES, samples).astype(np.int32)
    centres = np.random.RandomState(42).randn(CLASSES, FEATURES).astype(np.float32) * 2
    return (centres[labels] + rs.randn(samples, FEATURES)).astype(np.float32), labels


def keras_module():
    """Keras 2: ``tf.keras`` once npu_bridge is imported (``tf_keras`` on TensorFlow >= 2.16,
    whose own Keras is Keras 3; TensorFlow's own ``keras`` 2.15 on 2.15). ``tf.estimator``
    takes models of that Keras only."""
    return tf.keras


def build_keras_model(keras):
    """A compiled functional MLP (seeded initialisers: the same weights in every run)."""
    inputs = keras.Input(shape=(FEATURES,), name="features")
    h = keras.layers.Dense(HIDDEN, activation="relu", name="hidden",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1))(inputs)
    outputs = keras.layers.Dense(CLASSES, name="logits",
                                 kernel_initializer=keras.initializers.GlorotUniform(seed=2))(h)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.legacy.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


class _LossRecorder(tf1.train.SessionRunHook):
    """Records the loss fetched with every training run and the graph of the run."""

    def __init__(self):
        self.losses, self.graph = [], None

    def begin(self):
        self.graph = tf1.get_default_graph()
        self._loss = tf1.get_collection(tf1.GraphKeys.LOSSES)[-1]

    def before_run(self, run_context):
        return tf1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        self.losses.append(run_values.results)


def run_estimator(npu, model_dir, iterations_per_loop, loops, batch_size, samples):
    """Train through ``model_to_npu_estimator`` (npu) or ``model_to_estimator`` (plain)."""
    from npu_bridge.estimator.npu.keras_to_npu import model_to_estimator, model_to_npu_estimator
    from npu_bridge.estimator.npu.npu_config import NPURunConfig, npu_run_config_to_config_proto

    keras = keras_module()
    model = build_keras_model(keras)
    common = {"tf_random_seed": 1234, "save_checkpoints_steps": None, "save_checkpoints_secs": 3600,
              "save_summary_steps": 0, "log_step_count_steps": None}
    npu_config = NPURunConfig(model_dir=model_dir, iterations_per_loop=iterations_per_loop,
                              **common)
    if npu:
        estimator = model_to_npu_estimator(keras_model=model, model_dir=model_dir,
                                           config=npu_config)
    else:
        session_config = without_npu_optimizer(npu_run_config_to_config_proto(npu_config))
        estimator = model_to_estimator(
            keras_model=model, model_dir=model_dir,
            config=tf.estimator.RunConfig(model_dir=model_dir, session_config=session_config,
                                          **common))
    x, y = synthetic_data(samples)

    def input_fn():
        return (tf.data.Dataset.from_tensor_slices(({"features": x}, y))
                .batch(batch_size, drop_remainder=True).repeat())

    recorder = _LossRecorder()
    estimator.train(input_fn, max_steps=loops * iterations_per_loop, hooks=[recorder])
    weights = {name: estimator.get_variable_value(name)
               for name in estimator.get_variable_names()
               if name.startswith(("hidden", "logits")) and "/" in name
               and "SGD" not in name and "momentum" not in name}
    return recorder.losses, weights, training_geops(recorder.graph) if npu else []


def run_keras_session(npu, epochs, batch_size, samples):
    """``model.fit`` in the Keras backend session (``set_keras_session_npu_config``)."""
    from npu_bridge._init_api import set_keras_session_npu_config  # as npu_init's

    keras = keras_module()
    backend = tf1.keras.backend  # the TF1 backend: get_session/set_session
    x, y = synthetic_data(samples)
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(1234)
        config = tf1.ConfigProto()
        custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
        custom_op.name = "NpuOptimizer"
        custom_op.parameter_map["use_off_line"].b = True
        if npu:
            sess = set_keras_session_npu_config(config)
        else:
            from npu_bridge._init_api import npu_config_proto  # npu_init's, without disabling eager

            sess = tf1.Session(config=without_npu_optimizer(npu_config_proto(config)))
            backend.set_session(sess)
        try:
            model = build_keras_model(keras)
            history = _BatchLosses()
            model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0,
                      callbacks=[history])
            weights = {w.name: backend.get_value(w) for w in model.trainable_weights}
        finally:
            sess.close()
    backend.clear_session()
    return history.losses, weights, training_geops(graph) if npu else []


def _batch_losses_callback_base():
    return keras_module().callbacks.Callback


class _BatchLosses(_batch_losses_callback_base()):
    """The running mean loss Keras reports after every batch."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(np.float32(logs["loss"]))


def main(npu=True, mode="estimator", model_dir=None, iterations_per_loop=4, loops=3,
         epochs=2, batch_size=16, samples=128):
    """Train the Keras model (``mode`` "estimator" or "session"); return the logged losses,
    the final weights and the GeOps holding the training step."""
    import tempfile

    quiet()
    if mode == "session":
        losses, weights, geops = run_keras_session(npu, epochs, batch_size, samples)
        return {"losses": losses, "weights": weights, "geops": geops, "steps_per_run": 1}
    if mode != "estimator":
        raise ValueError(f"mode must be 'estimator' or 'session', got {mode!r}")
    owned = model_dir is None
    if owned:
        tmp = tempfile.TemporaryDirectory(prefix="keras_to_npu_")
        model_dir = tmp.name
    try:
        n = iterations_per_loop if npu else 1
        losses, weights, geops = run_estimator(npu, model_dir, n, loops * iterations_per_loop // n,
                                               batch_size, samples)
    finally:
        if owned:
            tmp.cleanup()
    return {"losses": losses, "weights": weights, "geops": geops, "steps_per_run": n}


def plain_at_loop_ends(plain, npu):
    """The plain run's per-step losses at the steps the NPU run logged (every N-th)."""
    n = npu["steps_per_run"]
    return dict(plain, losses=plain["losses"][n - 1::n])


if __name__ == "__main__":
    status = 0
    modes = ("estimator", "session") if hasattr(tf, "estimator") else ("session",)
    for mode in modes:
        npu_run, plain_run = main(npu=True, mode=mode), main(npu=False, mode=mode)
        status |= report(f"keras_to_npu_estimator ({mode})", npu_run,
                         plain_at_loop_ends(plain_run, npu_run))
    sys.exit(status)
