"""Random ops of ``npu_bridge.npu_cpu.npu_cpu_ops``: properties checked with NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from npu_bridge.npu_cpu import npu_cpu_ops
from tests.npu_cpu_helpers import run

MASK = np.array([[True, False, True], [False, True, True], [False, False, True]])


def true_coords(mask):
    return {tuple(c) for c in np.argwhere(mask)}


def check_choice(y, mask_out, mask, count):
    expected_valid = min(count, int(mask.sum())) if count else int(mask.sum())
    assert mask_out.sum() == expected_valid
    assert list(mask_out) == [True] * expected_valid + [False] * (len(mask_out) - expected_valid)
    chosen = [tuple(r) for r in y[mask_out]]
    assert len(set(chosen)) == len(chosen)
    assert set(chosen) <= true_coords(mask)
    assert not y[~mask_out].any()


@pytest.mark.parametrize("count", [0, 3, 8])
def test_randomchoicewithmask(count):
    y, m = run(lambda: npu_cpu_ops.randomchoicewithmask(tf.constant(MASK), count, 5, 7))
    assert y.dtype == np.int32 and y.shape[1] == 2
    check_choice(y, m, MASK, count)


def test_randomchoicewithmask_is_repeatable_with_seeds_and_varies_across_runs():
    def build():
        return npu_cpu_ops.randomchoicewithmask(tf.constant(np.ones(40, bool)), 40, 3, 4)

    first = run(build)[0]
    second = run(build)[0]
    np.testing.assert_array_equal(first, second)  # same seeds in a fresh graph
    many = run(build, lambda f: f, lambda f: f)
    assert not all(np.array_equal(many[0][0], r[0]) for r in many[1:])  # new order per run
    assert sorted(first[:, 0].tolist()) == list(range(40))


def test_randomchoicewithmask_static_shape_and_errors():
    with tf.Graph().as_default():
        y, m = npu_cpu_ops.randomchoicewithmask(tf.zeros([4, 5], tf.bool), 6)
        assert y.shape.as_list() == [6, 2] and m.shape.as_list() == [6]
    with pytest.raises(ValueError, match="count must be an int >= 0"):
        npu_cpu_ops.randomchoicewithmask(tf.zeros([3], tf.bool), -1)
    with pytest.raises(TypeError, match="x must be bool"):
        npu_cpu_ops.randomchoicewithmask(tf.zeros([3]), 1)


def test_stateless_random_choice_with_mask_is_a_function_of_seed_and_offset():
    def build(offset):
        return lambda: npu_cpu_ops.stateless_random_choice_with_mask(
            tf.constant(np.ones(30, bool)), tf.constant(30), tf.constant(11, tf.int64),
            tf.constant(offset, tf.int64))

    a, a_mask = run(build(0))
    b, _ = run(build(0))
    c, _ = run(build(1))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    check_choice(a, a_mask, np.ones(30, bool), 30)
    y, m = run(lambda: npu_cpu_ops.stateless_random_choice_with_mask(
        tf.constant(MASK), tf.constant(6), tf.constant(1, tf.int64), tf.constant(2, tf.int64)))
    check_choice(y, m, MASK, 6)


def test_stateless_dropout_statistics_and_scaling():
    x = np.full([200, 50], 2.0, np.float32)

    def build(offset, p=0.25, noise=()):
        return lambda: npu_cpu_ops.stateless_dropout(
            tf.constant(x), tf.constant(list(noise), tf.int64), tf.constant(p),
            tf.constant(3, tf.int64), tf.constant(offset, tf.int64))

    y = run(build(0))
    kept = y != 0
    np.testing.assert_allclose(y[kept], 2.0 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_array_equal(y, run(build(0)))
    assert not np.array_equal(y, run(build(1)))
    np.testing.assert_array_equal(run(build(0, p=0.0)), x)
    np.testing.assert_array_equal(run(build(0, p=1.0)), np.zeros_like(x))
    rows = run(build(0, noise=(200, 1)))  # one decision per row
    assert all(len(set(r.tolist())) == 1 for r in rows)


def test_stateless_dropout_checks():
    with pytest.raises(TypeError, match="float16, float32 or bfloat16"):
        npu_cpu_ops.stateless_dropout(tf.zeros([2], tf.int32), [], 0.5, 1, 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"p must be in \[0, 1\]"):
        run(lambda: npu_cpu_ops.stateless_dropout(tf.zeros([2]), tf.zeros([0], tf.int64),
                                                  tf.constant(1.5), 1, 1))
