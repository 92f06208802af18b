"""Section ``loop_sinking``: training throughput with ``iterations_per_loop`` vs plain TensorFlow.

A small MLP classifier (64 → 128 → 128 → 10, ReLU, softmax cross-entropy, Momentum, resource
variables) trains on a ``tf.data`` pipeline of batch 32 (in-memory, shuffled, repeated). Plain
TensorFlow runs one ``Session.run`` per step (the train op grouped as ``IterationOp``, which a
plain session runs once). The NPU session runs the same script with ``iterations_per_loop`` = 1,
10 and 100 (``util.set_iteration_per_loop``): one run is N steps inside one TensorFlow while loop.
Each case has its own graph and session; blocks of the same number of steps alternate round by
round (ABBA). The figure is microseconds per training step; steps per second are in the details
and the printed table.

    python -m bench --only loop_sinking
    python -m bench.bench_loop_sinking          # this section alone, its own table
"""

import gc

import numpy as np
import tensorflow as tf

from bench.harness import SectionResult, Target, interleave, make_row

__all__ = ["NAME", "TITLE", "LOOP_TARGET", "models_needed", "run", "build_training", "main"]

NAME = "loop_sinking"
TITLE = "Training steps/s with iterations_per_loop 1/10/100 vs plain one-run-per-step"

# At least 1.3x plain steps/s at iterations_per_loop=100: time per step <= 1/1.3 of plain's.
LOOP_TARGET = Target(">= 1.3x steps/s (<= 0.77x time/step)", "ratio", 1 / 1.3)

FEATURES, HIDDEN, CLASSES, BATCH, SAMPLES = 64, 128, 10, 32, 4096
LOOPS = (1, 10, 100)

tf1 = tf.compat.v1


def models_needed(quick):
    """Models this section loads (none: the graph is built here)."""
    return []


def build_training(seed=0):
    """``(graph, train_op, loss, init_ops)`` of the MLP on its ``tf.data`` pipeline."""
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(seed)
        rs = np.random.RandomState(seed)
        x_all = rs.randn(SAMPLES, FEATURES).astype(np.float32)
        y_all = rs.randint(0, CLASSES, SAMPLES).astype(np.int32)
        # Pre-batched in memory (one dataset element per batch, batches shuffled): the input
        # pipeline costs little per step, so what is compared is the step and its run.
        batches = SAMPLES // BATCH
        dataset = (tf.data.Dataset.from_tensor_slices(
            (x_all.reshape(batches, BATCH, FEATURES), y_all.reshape(batches, BATCH)))
            .shuffle(batches, seed=seed).repeat().prefetch(2))
        iterator = tf1.data.make_initializable_iterator(dataset)
        x, y = iterator.get_next()
        h = x
        for i, units in enumerate((HIDDEN, HIDDEN, CLASSES)):
            with tf1.variable_scope(f"dense{i}"):
                kernel = tf1.get_variable("kernel", [h.shape[-1], units], use_resource=True)
                bias = tf1.get_variable("bias", [units], initializer=tf1.zeros_initializer(),
                                        use_resource=True)
                h = tf.nn.bias_add(tf.matmul(h, kernel), bias)
                if units != CLASSES:
                    h = tf.nn.relu(h)
        loss = tf1.losses.sparse_softmax_cross_entropy(y, h)
        step = tf1.train.get_or_create_global_step()
        train_op = tf1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=step)
        init = [tf1.global_variables_initializer(), tf1.local_variables_initializer(),
                iterator.initializer]
    return graph, train_op, loss, init


def _session_config(iterations_per_loop, npu):
    from npu_adapter.config import NpuConfig

    if not npu:
        return tf1.ConfigProto()
    return NpuConfig.from_dict({"iterations_per_loop": iterations_per_loop}).to_config_proto()


def open_case(iterations_per_loop, npu):
    """A session training the MLP with ``iterations_per_loop`` steps per run (plain: 1).
    Returns ``(session, run_block(steps), step_variable_reader)``."""
    from npu_bridge.estimator.npu import util

    graph, train_op, _, init = build_training()
    sess = tf1.Session(graph=graph, config=_session_config(iterations_per_loop, npu))
    sess.run(init)
    n = iterations_per_loop if npu else 1
    with graph.as_default():
        loop_op = util.set_iteration_per_loop(sess, train_op, n) if n > 1 else \
            tf.group(train_op, name="IterationOp")
        step = tf1.train.get_global_step()
    graph.finalize()
    callable_ = sess.make_callable(loop_op)

    def run_block(steps):
        for _ in range(steps // n):
            callable_()

    return sess, run_block, lambda: int(sess.run(step))


def _measure(ctx, steps, repeat, budget):
    from npu_adapter.session import is_installed, uninstall

    was_installed = is_installed()
    import npu_bridge  # noqa: F401  (the NPU session, as a training script imports it)

    cases, sessions = {}, []
    try:
        for label, n, npu in [("plain", 1, False)] + [(f"ipl={n}", n, True) for n in LOOPS]:
            sess, run_block, read_step = open_case(n, npu)
            sessions.append((label, n, sess, read_step))
            cases[label] = (lambda rb=run_block: rb(steps))
        # Sanity: every case trains the number of steps it claims (global step after one block).
        for label, _, _, read_step in sessions:
            cases[label]()
            if read_step() != steps:
                raise RuntimeError(f"{label}: {read_step()} steps after one block of {steps}")
        gc.collect()
        stats = interleave(cases, warmup=1, repeat=repeat, number=1, budget=budget,
                           min_repeat=3, collect=True)
        return {label: s.scaled(1e6 / steps) for label, s in stats.items()}
    finally:
        for _, _, sess, _ in sessions:
            sess.close()
        if not was_installed:
            uninstall()  # later sections compare with TensorFlow's own sessions


def run(ctx):
    """Rows: microseconds per step for plain and each ``iterations_per_loop`` (ratio to plain;
    the target applies to 100)."""
    steps = 200 if ctx.quick else 1000
    repeat = 5 if ctx.quick else 15
    budget = 4.0 if ctx.quick else 8.0
    us = _measure(ctx, steps, repeat, budget)
    plain = us["plain"]
    rows, details = [], {}
    for label, stats in us.items():
        per_second = 1e6 / stats.median
        details[label] = {"steps_per_second": round(per_second, 1),
                          "speedup_vs_plain": round(plain.median / stats.median, 3)}
        if label == "plain":
            continue
        rows.append(make_row(f"MLP batch {BATCH}, tf.data, {label}", "time per step", "us",
                             stats, baseline=plain, details=details[label],
                             target=LOOP_TARGET if label == "ipl=100" else None))
        ctx.log(f"loop_sinking {label}: {stats.median:.1f} us/step vs plain "
                f"{plain.median:.1f} us/step ({details[label]['speedup_vs_plain']:.2f}x steps/s)")
    details["steps_per_block"] = steps
    notes = [
        f"Blocks of {steps} training steps alternate ABBA over the cases (plain, ipl=1, 10, "
        "100); figure: microseconds per step; ratio < 1 is faster than plain.",
        "Plain: one Session.run per step. ipl=N: NPU session, one run = N steps in a while "
        "loop around the rewritten step (the next batch per iteration).",
    ]
    return SectionResult(rows, notes, details)


def main(quick=False):
    """Run this section alone and print a steps/s table."""
    from bench.harness import BenchContext

    result = run(BenchContext(quick=quick))
    print(f"{'case':10s} {'us/step':>10s} {'steps/s':>10s} {'vs plain':>9s}")
    for label, info in result.details.items():
        if not isinstance(info, dict):
            continue
        row = next((r for r in result.rows if r["case"].endswith(label)), None)
        us = row["value"]["median"] if row else 1e6 / info["steps_per_second"]
        print(f"{label:10s} {us:10.1f} {info['steps_per_second']:10.1f} "
              f"{info['speedup_vs_plain']:8.2f}x")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(quick="--quick" in sys.argv))
