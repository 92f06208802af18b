"""``tf.compat.v1.train.MonitoredTrainingSession`` with the NPU config (ModelZoo style): a small
CNN classifier on a ``tf.data`` pipeline, with a ``StopAtStepHook``, checkpoints and a hook that
logs the loss of every run.

The session config is what Ascend scripts build: an ``NpuOptimizer`` entry passed through
``npu_config_proto``. ``MonitoredTrainingSession`` creates its session through TensorFlow's own
session module, which is an NPU session once ``npu_bridge`` is imported. With
``iterations_per_loop`` > 1 the train op is grouped as ``IterationOp`` and each run is
N steps (the original's ``SetIterationsVarHook`` loads the loop variables). The plain twin
(``npu=False``) uses the same config without the ``NpuOptimizer`` entry; losses per step and
final weights are equal bit for bit.

    python examples/training/monitored_cnn.py
"""

import sys

if __package__ in (None, ""):
    sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np
from _zoo import quiet, report, tf, tf1, training_geops, without_npu_optimizer

from npu_bridge.estimator.npu.npu_hook import SetIterationsVarHook

IMAGE, CLASSES = 12, 4


def synthetic_images(samples, seed=0):
    """Images whose class is the quadrant holding a bright blob, plus noise."""
    rs = np.random.RandomState(seed)
    labels = rs.randint(0, CLASSES, samples).astype(np.int32)
    images = 0.3 * rs.randn(samples, IMAGE, IMAGE, 1).astype(np.float32)
    half = IMAGE // 2
    for k, label in enumerate(labels):
        r, c = divmod(int(label), 2)
        images[k, r * half + 1:r * half + 4, c * half + 1:c * half + 4, 0] += 2.0
    return images, labels


def build_cnn(images, labels, learning_rate):
    """conv 3x3x8 - maxpool - conv 3x3x16 - global average - dense; RMSProp."""
    x = images
    for i, channels in enumerate((8, 16)):
        with tf1.variable_scope(f"conv{i}"):
            kernel = tf1.get_variable("kernel", [3, 3, x.shape[-1], channels])
            bias = tf1.get_variable("bias", [channels], initializer=tf1.zeros_initializer())
            x = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, kernel, 1, "SAME"), bias))
            if i == 0:
                x = tf.nn.max_pool2d(x, 2, 2, "VALID")
    x = tf.reduce_mean(x, axis=[1, 2])
    with tf1.variable_scope("logits"):
        kernel = tf1.get_variable("kernel", [x.shape[-1], CLASSES])
        logits = tf.matmul(x, kernel)
    loss = tf1.losses.sparse_softmax_cross_entropy(labels, logits)
    global_step = tf1.train.get_or_create_global_step()
    train_op = tf1.train.RMSPropOptimizer(learning_rate).minimize(loss, global_step=global_step)
    return loss, train_op, global_step


def session_config(npu, iterations_per_loop):
    """The Ascend script's config (``npu_config_proto``), or the same without NpuOptimizer."""
    from npu_bridge._init_api import npu_config_proto  # npu_init's, without disabling eager

    config = tf1.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["iterations_per_loop"].i = iterations_per_loop
    custom_op.parameter_map["precision_mode"].s = b"allow_mix_precision"
    config = npu_config_proto(config_proto=config)
    return config if npu else without_npu_optimizer(config)


class _LossLogger(tf1.train.SessionRunHook):
    """The loss of every run, and the global step after it: read in a run of its own, because
    fetched beside the train op the global step (a ref variable) may be read before or after the
    op increments it."""

    def __init__(self, loss):
        self._loss = loss
        self.losses = []
        self.steps = []

    def begin(self):
        self._step = tf1.train.get_global_step()

    def before_run(self, run_context):
        return tf1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        self.losses.append(run_values.results)
        self.steps.append(int(run_context.session.run(self._step)))


def main(npu=True, checkpoint_dir=None, iterations_per_loop=1, steps=12, batch_size=16,
         samples=256, learning_rate=0.01):
    """Train ``steps`` steps in a ``MonitoredTrainingSession``; return the loss of every run,
    the final weights and global step, and the GeOps holding the training step."""
    import tempfile

    quiet()
    steps_per_run = iterations_per_loop if npu else 1
    owned = checkpoint_dir is None
    if owned:
        tmp = tempfile.TemporaryDirectory(prefix="monitored_cnn_")
        checkpoint_dir = tmp.name
    try:
        graph = tf.Graph()
        with graph.as_default():
            tf1.set_random_seed(2024)
            images, labels = synthetic_images(samples)
            dataset = (tf.data.Dataset.from_tensor_slices((images, labels))
                       .shuffle(samples, seed=11).batch(batch_size, drop_remainder=True)
                       .repeat())
            x, y = _initializable_next(dataset)
            loss, train_op, global_step = build_cnn(x, y, learning_rate)
            logger = _LossLogger(loss)
            hooks = [tf1.train.StopAtStepHook(last_step=steps), logger]
            if steps_per_run > 1:
                # The loop variables are loaded by a hook on the raw session: loading them
                # through the MonitoredSession would run every hook's fetches (a batch each).
                hooks.append(SetIterationsVarHook(steps_per_run))
                train_op = tf.group(train_op, name="IterationOp")
            with tf1.train.MonitoredTrainingSession(
                    checkpoint_dir=checkpoint_dir, hooks=hooks, save_summaries_steps=None,
                    save_checkpoint_steps=steps, log_step_count_steps=None,
                    config=session_config(npu, steps_per_run)) as sess:
                while not sess.should_stop():
                    sess.run(train_op)
            weights = _checkpoint_weights(checkpoint_dir)
        geops = training_geops(graph) if npu else []
    finally:
        if owned:
            tmp.cleanup()
    return {"losses": logger.losses, "run_steps": logger.steps, "weights": weights,
            "steps_per_run": steps_per_run,
            "global_step": weights.pop("global_step"), "geops": geops}


def _initializable_next(dataset):
    # An initializable iterator, as loop sinking needs (the original refuses one-shot iterators
    # with iterations_per_loop > 1); the Scaffold runs its initializer.
    iterator = tf1.data.make_initializable_iterator(dataset)
    tf1.add_to_collection(tf1.GraphKeys.TABLE_INITIALIZERS, iterator.initializer)
    return iterator.get_next()


def _checkpoint_weights(checkpoint_dir):
    """Trainable weights and the global step of the final checkpoint."""
    reader = tf1.train.load_checkpoint(checkpoint_dir)
    names = [n for n in reader.get_variable_to_shape_map()
             if (n.startswith(("conv", "logits")) and "RMSProp" not in n) or n == "global_step"]
    return {n: reader.get_tensor(n) for n in sorted(names)}


def plain_at_loop_ends(plain, npu):
    """The plain run's per-step losses at the steps the NPU run logged (every N-th)."""
    n = npu["steps_per_run"]
    return dict(plain, losses=plain["losses"][n - 1::n])


if __name__ == "__main__":
    npu_run, plain_run = main(npu=True), main(npu=False)
    status = report("monitored_cnn", npu_run, plain_run)
    npu_loop = main(npu=True, iterations_per_loop=4)
    sys.exit(status | report("monitored_cnn (iterations_per_loop=4)", npu_loop,
                             plain_at_loop_ends(plain_run, npu_loop)))
