"""Distributed training at N ranks (processes on loopback) against one process and NumPy.

``tests/ranks/training_rank.py`` runs every phase in one launch (see its docstring); the
references here are a single process training on the whole batch (plain TensorFlow) and NumPy
re-computations of the loss-scaling and Keras steps. 2 ranks in CI, 4 with
``NPU_ADAPTER_SLOW_TESTS=1``.
"""

import json
import os
import pathlib
import sys

import numpy as np
import pytest

from npu_adapter.session import plain_session_class
from npu_bridge.estimator.npu.npu_config import HAS_TF_ESTIMATOR

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "ranks"))
import training_model
from harness import run_job

SLOW = os.environ.get("NPU_ADAPTER_SLOW_TESTS") == "1"
STEPS = 50
# float32 tolerance of the equivalence: the ranks sum the shard gradients in another order
# than one process does; after 50 steps the largest difference seen is 1.2e-7 (2 ranks).
EQUIVALENCE_ATOL = 1e-5
AGREE_STEPS = 10
OVERFLOW_STEP = 4
POISONED_RANK = 1


def _scale_schedule(steps, overflow_step):
    """ExponentialUpdateLossScaleManager(2**8, incr_every_n_steps=3, decr_every_n_nan_or_inf=1,
    decr_ratio=0.5) after each step, written out from the manager's documented rules."""
    scale, good, bad, out = 256.0, 0, 0, []
    for step in range(steps):
        if step == overflow_step:
            bad += 1
            good = 0
            if bad >= 1:
                scale, bad = max(1.0, scale * 0.5), 0
        else:
            good += 1
            if good >= 3:
                scale, good, bad = scale * 2.0, 0, 0
        out.append(scale)
    return np.array(out)


def _linear_sgd(x, y, steps, skip=None, learning_rate=0.05):
    w = np.full((x.shape[1], 1), 0.5, np.float64)
    trace = []
    for step in range(steps):
        if step != skip:
            grad = 2.0 / len(x) * x.T @ (x @ w - y)
            w = w - learning_rate * grad
        trace.append(w.copy())
    return np.array(trace)


def _check_training(tmp_path, size):
    status, out, err = run_job(size, "training_rank.py", [tmp_path], collective_timeout=60)
    assert status == 0, out + err
    x, _, y = training_model.data()
    x, y = x.astype(np.float64), y.astype(np.float64)
    reference = training_model.train_single_process(STEPS, 0.1, plain_session_class())
    schedule = _scale_schedule(AGREE_STEPS, OVERFLOW_STEP)
    # The global step after each step: the skipped step does not count.
    expected_steps = np.array([step + 1 - (step >= OVERFLOW_STEP) for step in range(AGREE_STEPS)])
    averaged = _linear_sgd(x, y, AGREE_STEPS, OVERFLOW_STEP)
    kernel = np.full((x.shape[1], 1), 0.1)
    keras_kernel = kernel - 0.1 * (2.0 / len(x) * x.T @ (x @ kernel - y))
    keras_bias = -0.1 * (2.0 / len(x) * np.sum(x @ kernel - y))
    ref_adam = training_model.ref_adam_single_process(size, plain_session_class())
    worst = 0.0
    for rank in range(size):
        with np.load(tmp_path / f"rank{rank}.npz") as data:
            got = {key: data[key] for key in data.files}
        for name, value in reference.items():
            difference = float(np.max(np.abs(got[f"equiv_{name}"] - value)))
            worst = max(worst, difference)
            assert difference <= EQUIVALENCE_ATOL, (rank, name, difference)
        # Loss scaling with is_distributed: rank POISONED_RANK overflows at OVERFLOW_STEP and
        # every rank skips that step (the global step does not move) and halves its scale.
        rows = training_model.shard(rank, size)
        for name in ("agree", "npuopt"):
            np.testing.assert_array_equal(got[f"{name}_scales"], schedule)
            np.testing.assert_array_equal(got[f"{name}_steps"], expected_steps)
        np.testing.assert_allclose(got["agree_weights"],
                                   _linear_sgd(x[rows], y[rows], AGREE_STEPS, OVERFLOW_STEP),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["npuopt_weights"], averaged, rtol=1e-5, atol=1e-6)
        # Weight-update sharding: each variable updated on one rank, then broadcast.
        np.testing.assert_allclose(got["sharded_weights"], _linear_sgd(x, y, AGREE_STEPS),
                                   rtol=1e-5, atol=1e-6)
        # The callback gave every rank rank 0's kernel (0.1) before the averaged step.
        np.testing.assert_allclose(got["keras_kernel"], keras_kernel, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["keras_bias"], [keras_bias], rtol=1e-5, atol=1e-6)
        # TF1 ref variables with Adam, a step split between host and device, the broadcast.
        np.testing.assert_allclose(got["ref_adam_weights"], ref_adam, rtol=1e-5, atol=1e-6)
        info = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert info == {"rank_id": rank, "rank_size": size, "local_rank_id": rank,
                        "local_rank_size": size}
    return worst


def test_two_ranks_train_like_one_process(tmp_path):
    worst = _check_training(tmp_path, 2)
    print(f"2 ranks, {STEPS} SGD steps: max |difference| to one process = {worst:.3g}")


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="4 processes; set NPU_ADAPTER_SLOW_TESTS=1")
def test_four_ranks_train_like_one_process(tmp_path):
    worst = _check_training(tmp_path, 4)
    print(f"4 ranks, {STEPS} SGD steps: max |difference| to one process = {worst:.3g}")


@pytest.mark.skipif(not HAS_TF_ESTIMATOR, reason="tf.estimator exists up to TensorFlow 2.15")
def test_npu_estimator_at_two_ranks(tmp_path):
    status, out, err = run_job(2, "estimator_rank.py", [tmp_path], collective_timeout=60)
    assert status == 0, out + err
    reference = training_model.train_single_process(10, 0.1, plain_session_class())
    for rank in range(2):
        with np.load(tmp_path / f"rank{rank}.npz") as data:
            for name, value in reference.items():
                np.testing.assert_allclose(data[name], value, atol=EQUIVALENCE_ATOL)
