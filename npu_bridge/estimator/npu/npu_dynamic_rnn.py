"""Fused recurrent layers (``npu_bridge.estimator.npu.npu_dynamic_rnn``): :class:`DynamicRNN`
(LSTM), :class:`DynamicGRUV2` and :class:`DynamicAUGRU`, ``tf.compat.v1.layers`` layers over the
``DynamicRnn``/``DynamicRnnV2``/``DynamicGruV2``/``DynamicAUGRU`` ops of
:mod:`npu_bridge._kernels.rnn`.

Inputs are time-major ``[time, batch, input]``. The layers create the original's variables
under the original's names and initialisers, so checkpoints carry over:
``dynamicrnn/w`` (``[input + hidden, 4 * hidden]``, Glorot-uniform with seed 10; with
``BIDIRECTIONAL`` ``[2, ...]``, forward first) and ``dynamicrnn/b`` (zeros);
``dynamicgruv2/weight_input`` ``[input, 3 * hidden]``, ``.../weight_hidden`` ``[hidden,
3 * hidden]``, ``.../bias_input`` and ``.../bias_hidden`` (uniform in ``+-1/sqrt(hidden)``; the
AUGRU's under ``dynamicaugru/``); and the non-trainable int32 ``dynamicbase/seq_length``
(``[batch]`` filled with the number of steps, or ``[16]`` of 1 when they are unknown at build
time, as in the original).

``DynamicRNN`` returns the op's 8 outputs ``(y, output_h, output_c, i, j, f, o, tanhc)``, each
``[time, batch, hidden]`` (with ``BIDIRECTIONAL`` a list of 8 ``[2, time, batch, hidden]``
tensors: forward, then the backward pass written at its own time steps); ``DynamicGRUV2`` the
6 outputs ``(y, output_h, update, reset, new, hidden_new)``; ``DynamicAUGRU`` the 7 outputs
``(y, output_h, update, update_att, reset, new, hidden_new)``. Semantics in
``docs/api-ops.md``.
"""

import math

import tensorflow as tf

from npu_bridge._kernels.gen import gen_npu_ops

__all__ = [
    "DYNAMIC_RNN_BIDIRECTION",
    "DYNAMIC_RNN_REDIRECTIONAL",
    "DYNAMIC_RNN_UNIDIRECTION",
    "DynamicAUGRU",
    "DynamicGRUV2",
    "DynamicRNN",
    "gen_npu_ops",
]

# The original's top-level imports that scripts can reach through this module, where TensorFlow
# has a public module for them (its internal array_ops, init_ops and layers base are not
# re-exported).
dtypes = tf.dtypes

DYNAMIC_RNN_UNIDIRECTION = "UNIDIRECTIONAL"
DYNAMIC_RNN_BIDIRECTION = "BIDIRECTIONAL"
DYNAMIC_RNN_REDIRECTIONAL = "REDIRECTIONAL"

_DEFAULT_BATCH = 16  # the original's placeholder batch size for dynamic shapes


def _dim(shape, axis):
    shape = tf.TensorShape(shape)
    if shape.rank is None or shape.rank <= axis:
        return None
    return tf.compat.dimension_value(shape[axis])


class _DynamicBasic(tf.compat.v1.layers.Layer):
    """Shared attributes, validation and the ``seq_length`` variable of the fused RNN layers."""

    def __init__(self, hidden_size, dtype, direction=DYNAMIC_RNN_UNIDIRECTION, cell_depth=1,
                 keep_prob=1.0, cell_clip=-1.0, num_proj=0, time_major=True, activation="tanh",
                 is_training=True):
        super().__init__()
        self._direction = direction
        self._cell_depth = cell_depth
        self._keep_prob = keep_prob
        self._cell_clip = cell_clip
        self._num_proj = num_proj
        self._time_major = time_major
        self._activation = activation
        self._is_training = is_training
        self._hidden_size = int(hidden_size)
        self._rnn_dtype = tf.as_dtype(dtype)
        self._args = {"direction": direction, "cell_depth": cell_depth, "keep_prob": keep_prob,
                      "cell_clip": cell_clip, "num_proj": num_proj, "time_major": time_major,
                      "activation": activation, "is_training": is_training}
        self._seq_length = None
        self._seq_length_is_full = False
        self._init_h = None

    @property
    def direction(self):
        """``UNIDIRECTIONAL`` or ``BIDIRECTIONAL``."""
        return self._direction

    @property
    def cell_depth(self):
        """Number of stacked cells (1)."""
        return self._cell_depth

    @property
    def keep_prob(self):
        """Keep probability attribute (recorded; the op applies no dropout)."""
        return self._keep_prob

    @property
    def cell_clip(self):
        """Upper clip of the cell state when positive."""
        return self._cell_clip

    @property
    def num_proj(self):
        """Projection size (0: none)."""
        return self._num_proj

    @property
    def time_major(self):
        """Inputs are ``[time, batch, input]``."""
        return self._time_major

    @property
    def activation(self):
        """Cell activation (``tanh``)."""
        return self._activation

    @property
    def is_training(self):
        """Training attribute of the op."""
        return self._is_training

    def check_direction(self):
        """``ValueError`` unless the direction is ``UNIDIRECTIONAL`` or ``BIDIRECTIONAL``."""
        if self._direction not in (DYNAMIC_RNN_UNIDIRECTION, DYNAMIC_RNN_BIDIRECTION):
            raise ValueError(f"Invalid direction: {self._direction}, expecting "
                             f"{DYNAMIC_RNN_UNIDIRECTION} or {DYNAMIC_RNN_BIDIRECTION}")

    def reshape(self, shape):
        """``shape`` with a leading 2 for ``BIDIRECTIONAL`` (one set of weights per pass)."""
        if self._direction == DYNAMIC_RNN_BIDIRECTION:
            return [2] + list(shape)
        return list(shape)

    def _input_size(self, input_shape):
        size = _dim(input_shape, 2)
        if size is None:
            raise ValueError("Expected input_shape[2] to be known, saw shape: input_size.")
        return size

    def build(self, input_shape):
        """Creates the non-trainable ``dynamicbase/seq_length`` variable."""
        time_size = _dim(input_shape, 0)
        batch_size = _dim(input_shape, 1)
        self._seq_length_is_full = time_size is not None and batch_size is not None
        self._seq_length = self.add_weight(
            "dynamicbase/seq_length", shape=[batch_size or _DEFAULT_BATCH], dtype=tf.int32,
            initializer=tf.compat.v1.constant_initializer(time_size or 1, dtype=tf.int32),
            trainable=False)
        super().build(input_shape)

    def call(self, x, seq_length=None):
        """Checks the direction and returns the ``seq_length`` to give the op: the argument, or
        the ``seq_length`` variable when it covers the whole input, else None (every step)."""
        self.check_direction()
        if seq_length is None and self._seq_length_is_full:
            seq_length = self._seq_length
        return seq_length


class _DynamicGRUBase(_DynamicBasic):
    _weights_scope = None

    def __init__(self, hidden_size, dtype, direction=DYNAMIC_RNN_UNIDIRECTION, cell_depth=1,
                 keep_prob=1.0, cell_clip=-1.0, num_proj=0, time_major=True, activation="tanh",
                 gate_order="zrh", reset_after=True, is_training=True):
        super().__init__(hidden_size, dtype, direction=direction, cell_depth=cell_depth,
                         keep_prob=keep_prob, cell_clip=cell_clip, num_proj=num_proj,
                         time_major=time_major, activation=activation, is_training=is_training)
        self._gate_order = gate_order
        self._reset_after = reset_after
        self._args["gate_order"] = gate_order
        self._args["reset_after"] = reset_after
        self._weight_input = None
        self._weight_hidden = None
        self._bias_input = None
        self._bias_hidden = None

    @property
    def gate_order(self):
        """Order of the gates in the weights: ``zrh`` or ``rzh``."""
        return self._gate_order

    @property
    def reset_after(self):
        """Whether the reset gate is applied after the hidden matmul."""
        return self._reset_after

    def build(self, input_shape):
        """Creates the input and hidden weights and biases."""
        input_size = self._input_size(input_shape)
        hidden = self._hidden_size
        stdv = 1.0 / math.sqrt(hidden)

        def weight(name, shape):
            return self.add_weight(
                f"{self._weights_scope}/{name}", shape=shape, dtype=self._rnn_dtype,
                initializer=tf.compat.v1.random_uniform_initializer(-stdv, stdv))

        self._weight_input = weight("weight_input", [input_size, 3 * hidden])
        self._weight_hidden = weight("weight_hidden", [hidden, 3 * hidden])
        self._bias_input = weight("bias_input", [3 * hidden])
        self._bias_hidden = weight("bias_hidden", [3 * hidden])
        super().build(input_shape)

    def _initial_state(self, x, init_h):
        if init_h is not None:
            return init_h
        batch = _dim(x.shape, 1)
        self._init_h = tf.zeros([batch if batch is not None else tf.shape(x)[1],
                                 self._hidden_size], dtype=self._rnn_dtype)
        return self._init_h

    def _attrs(self):
        return dict(self._args)


class DynamicGRUV2(_DynamicGRUBase):
    """A fused GRU layer (op ``DynamicGruV2``); see the module doc for variables and outputs."""

    _weights_scope = "dynamicgruv2"

    def call(self, x, seq_length=None, init_h=None):
        """Runs the GRU over ``x`` ``[time, batch, input]``; returns the op's 6 outputs."""
        x = tf.convert_to_tensor(x)
        seq_length = super().call(x, seq_length=seq_length)
        return gen_npu_ops.dynamic_gru_v2(
            x, self._weight_input, self._weight_hidden, self._bias_input, self._bias_hidden,
            seq_length, self._initial_state(x, init_h), **self._attrs())


class DynamicAUGRU(_DynamicGRUBase):
    """A fused GRU layer with an attention-scaled update gate (op ``DynamicAUGRU``)."""

    _weights_scope = "dynamicaugru"

    def call(self, x, weight_att, seq_length=None, init_h=None):
        """Runs the AUGRU over ``x`` with attention scores ``weight_att`` ``[time, batch]``;
        returns the op's 7 outputs."""
        x = tf.convert_to_tensor(x)
        seq_length = super().call(x, seq_length=seq_length)
        return gen_npu_ops.dynamic_augru(
            x, self._weight_input, self._weight_hidden, weight_att, self._bias_input,
            self._bias_hidden, seq_length, self._initial_state(x, init_h), **self._attrs())


class DynamicRNN(_DynamicBasic):
    """A fused LSTM layer (ops ``DynamicRnn``/``DynamicRnnV2``); see the module doc."""

    def __init__(self, hidden_size, dtype, cell_type="LSTM", direction=DYNAMIC_RNN_UNIDIRECTION,
                 cell_depth=1, use_peephole=False, keep_prob=1.0, cell_clip=-1.0, num_proj=0,
                 time_major=True, activation="tanh", forget_bias=0.0, is_training=True):
        super().__init__(hidden_size, dtype, direction=direction, cell_depth=cell_depth,
                         keep_prob=keep_prob, cell_clip=cell_clip, num_proj=num_proj,
                         time_major=time_major, activation=activation, is_training=is_training)
        self._cell_type = cell_type
        self._use_peephole = use_peephole
        self._forget_bias = forget_bias
        self._args["cell_type"] = cell_type
        self._args["use_peephole"] = use_peephole
        self._args["forget_bias"] = forget_bias
        self._rnn_w = None
        self._rnn_b = None
        self._init_c = None

    @property
    def cell_type(self):
        """``LSTM``."""
        return self._cell_type

    @property
    def use_peephole(self):
        """Peephole connections (not supported: the op has no peephole weights)."""
        return self._use_peephole

    @property
    def forget_bias(self):
        """Added to the forget gate before its sigmoid."""
        return self._forget_bias

    def build(self, input_shape):
        """Creates ``dynamicrnn/w`` and ``dynamicrnn/b``."""
        input_size = self._input_size(input_shape)
        hidden = self._hidden_size
        self._rnn_w = self.add_weight(
            "dynamicrnn/w", shape=self.reshape([input_size + hidden, 4 * hidden]),
            dtype=self._rnn_dtype,
            initializer=tf.compat.v1.glorot_uniform_initializer(seed=10, dtype=self._rnn_dtype))
        self._rnn_b = self.add_weight(
            "dynamicrnn/b", shape=self.reshape([4 * hidden]), dtype=self._rnn_dtype,
            initializer=tf.compat.v1.zeros_initializer(dtype=self._rnn_dtype))
        super().build(input_shape)

    def _run(self, x, seq_length, weight, bias, init_h, init_c, direction):
        args = dict(self._args, direction=direction)
        if seq_length is None:
            return gen_npu_ops.dynamic_rnn_v2(x, weight, bias, init_h, init_c, **args)
        return gen_npu_ops.dynamic_rnn(x, weight, bias, seq_length, init_h, init_c, **args)

    def call(self, x, seq_length=None, init_h=None, init_c=None, weight=None, bias=None):
        """Runs the LSTM over ``x`` ``[time, batch, input]``; ``init_h``/``init_c`` are
        ``[1, batch, hidden]`` (``[2, ...]`` bidirectional). Returns the op's 8 outputs."""
        self.check_direction()  # the LSTM has no default sequence lengths: None runs every step
        x = tf.convert_to_tensor(x)
        batch = _dim(x.shape, 1)
        if batch is None:
            batch = tf.shape(x)[1]
        passes = 2 if self._direction == DYNAMIC_RNN_BIDIRECTION else 1
        init_shape = [passes, batch, self._hidden_size]
        if init_h is None:
            self._init_h = init_h = tf.zeros(init_shape, dtype=self._rnn_dtype)
        if init_c is None:
            self._init_c = init_c = tf.zeros(init_shape, dtype=self._rnn_dtype)
        weight = self._rnn_w if weight is None else weight
        bias = self._rnn_b if bias is None else bias
        if passes == 1:
            return self._run(x, seq_length, weight, bias, init_h, init_c,
                             DYNAMIC_RNN_UNIDIRECTION)
        init_h_f, init_h_b = tf.split(init_h, 2, 0)
        init_c_f, init_c_b = tf.split(init_c, 2, 0)
        forward = self._run(x, seq_length, weight[0], bias[0], init_h_f, init_c_f,
                            DYNAMIC_RNN_UNIDIRECTION)
        backward = self._run(x, seq_length, weight[1], bias[1], init_h_b, init_c_b,
                             DYNAMIC_RNN_REDIRECTIONAL)
        return [tf.stack([f, b]) for f, b in zip(forward, backward)]
