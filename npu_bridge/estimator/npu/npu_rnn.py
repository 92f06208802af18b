"""``npu_bridge.estimator.npu.npu_rnn``: :func:`npu_dynamic_rnn`, the original's time-major
recurrent loop over any RNN cell."""

import tensorflow as tf

__all__ = ["npu_dynamic_rnn"]


def npu_dynamic_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None,
                    scope=None):
    """Runs ``cell`` over time-major ``inputs`` (``[time, batch, ...]``, the time size known) as
    the original does: the steps are unrolled with ``tf.compat.v1.nn.static_rnn``.

    Returns ``(outputs, state)``: ``outputs`` stacked time-major, ``state`` the final state. With
    ``sequence_length``, outputs past a sequence's length are zero and its state is the one at
    its last valid step (``static_rnn`` semantics).
    """
    steps = tf.unstack(inputs, axis=0)
    outputs, state = tf.compat.v1.nn.static_rnn(
        cell, steps, initial_state=initial_state, dtype=dtype, sequence_length=sequence_length,
        scope=scope)
    return tf.stack(outputs, axis=0), state
