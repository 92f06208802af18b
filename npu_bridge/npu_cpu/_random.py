"""Random ops of :mod:`npu_bridge.npu_cpu.npu_cpu_ops`, built from TensorFlow ops.

``random_choice_with_mask(x, count, seed, seed2)``: ``x`` is a bool tensor of rank 1 to 5; the
coordinates of its true elements are shuffled and the first ``count`` returned as ``y``
``[count, rank]`` int32 with ``mask`` ``[count]`` bool. When ``x`` has fewer than ``count``
true elements the remaining rows are zeros with ``mask`` False; ``count`` 0 returns every true
element (in random order). ``seed``/``seed2`` are the op seeds of TensorFlow's stateful random
ops (both 0: a fresh random order on every run; otherwise repeatable in a graph with the same
graph seed).

``stateless_random_choice_with_mask(x, count, seed, offset)``: the same choice, but the order is a
pure function of ``(seed, offset)`` (TensorFlow's stateless Philox generator keyed by
``[seed, offset]``); ``count`` is an int32 scalar tensor.

``stateless_dropout(x, noise_shape, p, seed, offset)``: each element is zeroed with probability
``p`` and the others scaled by ``1 / (1 - p)``; the keep mask is drawn from the stateless
generator keyed by ``[seed, offset]`` with shape ``noise_shape`` (empty: the shape of ``x``),
broadcast to ``x``. ``p`` = 1 gives zeros.
"""

import tensorflow as tf

__all__ = ["random_choice_with_mask", "stateless_dropout", "stateless_random_choice_with_mask"]

_DROPOUT_DTYPES = (tf.float16, tf.float32, tf.bfloat16)


def _bool_input(x, api):
    x = tf.convert_to_tensor(x, name="x")
    if x.dtype != tf.bool:
        raise TypeError(f"{api}: x must be bool, got {x.dtype.name}")
    if x.shape.rank is not None and not 1 <= x.shape.rank <= 5:
        raise ValueError(f"{api}: x must have rank 1 to 5, got shape {x.shape}")
    return x


def _take(coords, order, count):
    """Rows ``order`` of ``coords``, the first ``count`` (all for 0), padded with zeros."""
    chosen = tf.gather(coords, order)
    total = tf.shape(chosen)[0]
    if isinstance(count, int) and count == 0:
        return chosen, tf.ones([total], tf.bool)
    count = tf.cast(count, tf.int32)
    taken = chosen[:count]
    valid = tf.shape(taken)[0]
    y = tf.pad(taken, [[0, count - valid], [0, 0]])
    mask = tf.sequence_mask(valid, count)
    return y, mask


def random_choice_with_mask(x, count=0, seed=0, seed2=0, name=None):
    """Random choice of the true coordinates of ``x`` (see the module doc)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"randomchoicewithmask: count must be an int >= 0, got {count!r}")
    for arg, value in (("seed", seed), ("seed2", seed2)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"randomchoicewithmask: {arg} must be an int, got {value!r}")
    with tf.name_scope(name or "RandomChoiceWithMask"):
        x = _bool_input(x, "randomchoicewithmask")
        coords = tf.cast(tf.where(x), tf.int32)
        positions = tf.range(tf.shape(coords)[0])
        order = tf.raw_ops.RandomShuffle(value=positions, seed=seed, seed2=seed2)
        y, mask = _take(coords, order, count)
        rank = x.shape.rank
        if count > 0 and rank is not None:
            y.set_shape([count, rank])
            mask.set_shape([count])
        return y, mask


def _stateless_seed(seed, offset):
    return tf.stack([tf.cast(seed, tf.int64), tf.cast(offset, tf.int64)])


def stateless_random_choice_with_mask(x, count, seed, offset, name=None):
    """Stateless random choice of the true coordinates of ``x`` (see the module doc)."""
    with tf.name_scope(name or "StatelessRandomChoiceWithMask"):
        x = _bool_input(x, "stateless_random_choice_with_mask")
        count = tf.convert_to_tensor(count, dtype=tf.int32, name="count")
        check = tf.debugging.assert_non_negative(
            count, message="stateless_random_choice_with_mask: count must be >= 0")
        coords = tf.cast(tf.where(x), tf.int32)
        keys = tf.random.stateless_uniform(tf.shape(coords)[:1], _stateless_seed(seed, offset),
                                           dtype=tf.float32, alg="philox")
        order = tf.argsort(keys, stable=True)
        with tf.control_dependencies([check]):
            return _take(coords, order, count)


def stateless_dropout(x, noise_shape, p, seed, offset, name=None):
    """Stateless dropout with drop probability ``p`` (see the module doc)."""
    with tf.name_scope(name or "StatelessDropout"):
        x = tf.convert_to_tensor(x, name="x")
        if x.dtype not in _DROPOUT_DTYPES:
            raise TypeError(f"stateless_dropout: x must be float16, float32 or bfloat16, got "
                            f"{x.dtype.name}")
        p = tf.convert_to_tensor(p, dtype=x.dtype, name="p")
        check = tf.debugging.assert_equal(
            tf.logical_and(p >= 0, p <= 1), True,
            message="stateless_dropout: p must be in [0, 1]")
        noise = tf.reshape(tf.convert_to_tensor(noise_shape, dtype=tf.int64,
                                                name="noise_shape"), [-1])
        shape = tf.cond(tf.size(noise) > 0, lambda: noise,
                        lambda: tf.shape(x, out_type=tf.int64))
        uniform = tf.random.stateless_uniform(shape, _stateless_seed(seed, offset),
                                              dtype=tf.float32, alg="philox")
        p32 = tf.cast(p, tf.float32)
        keep = tf.cast(uniform >= p32, tf.float32)
        scale = tf.where(p32 < 1.0, 1.0 / tf.maximum(1.0 - p32, 1e-30), 0.0)
        with tf.control_dependencies([check]):
            y = tf.cast(x, tf.float32) * keep * scale
        return tf.cast(tf.broadcast_to(y, tf.shape(x)), x.dtype)
