"""The fused NPU recurrent ops (``DynamicRnn``, ``DynamicRnnV2``, ``DynamicGruV2``,
``DynamicAUGRU``, ``BasicLSTMCell``) and the gradients the original registers for them.

Semantics follow the CANN kernels (``docs/api-ops.md`` has the formulas): inputs are time-major
``[T, B, I]``; the LSTM weight ``w`` is ``[I + H, 4H]`` applied to ``[x_t, h_{t-1}]`` with the
gate order ``i, j, f, o``; the GRU weights are ``[I, 3H]`` and ``[H, 3H]`` with the gate order
``zrh`` (or ``rzh``). With ``seq_length`` the steps ``t >= seq_length[b]`` keep the previous
state. Every op returns its time-major output sequences, so ``output_h[-1]`` is the final state
(``output_h[0]`` for ``direction="REDIRECTIONAL"``, which runs from the last step to the first
and writes each step at its own time index).

The time loop is unrolled when the number of steps is known and at most
:data:`MAX_UNROLLED_STEPS` (every node is then an ordinary supported op that lands in device
clusters); otherwise it is a ``tf.while_loop`` over ``TensorArray``\\ s.
"""

import collections

import tensorflow as tf

from .common import GRAD_ALL, GRAD_FIRST, GRAD_LAST, GRAD_NONE, finish_op, op_record

__all__ = [
    "MAX_UNROLLED_STEPS",
    "basic_lstm_cell",
    "basic_lstm_cell_grad",
    "dynamic_augru",
    "dynamic_augru_grad",
    "dynamic_gru_v2",
    "dynamic_gru_v2_grad",
    "dynamic_rnn",
    "dynamic_rnn_grad",
    "dynamic_rnn_v2",
    "dynamic_rnn_v2_grad",
]

MAX_UNROLLED_STEPS = 256
"""Longest static sequence whose time loop is unrolled into plain ops."""

UNIDIRECTIONAL = "UNIDIRECTIONAL"
REDIRECTIONAL = "REDIRECTIONAL"
_OP_DIRECTIONS = (UNIDIRECTIONAL, REDIRECTIONAL)
_FLOAT_TYPES = (tf.float16, tf.float32, tf.float64)

DynamicRnn = collections.namedtuple(
    "DynamicRnn", ["y", "output_h", "output_c", "i", "j", "f", "o", "tanhc"])
DynamicRnnV2 = collections.namedtuple(
    "DynamicRnnV2", ["y", "output_h", "output_c", "i", "j", "f", "o", "tanhc"])
DynamicGruV2 = collections.namedtuple(
    "DynamicGruV2", ["y", "output_h", "update", "reset", "new", "hidden_new"])
DynamicAUGRU = collections.namedtuple(
    "DynamicAUGRU", ["y", "output_h", "update", "update_att", "reset", "new", "hidden_new"])
BasicLSTMCell = collections.namedtuple(
    "BasicLSTMCell", ["ct", "ht", "it", "jt", "ft", "ot", "tanhct"])


# ---- validation --------------------------------------------------------------------------------


def _float_tensor(value, name, dtype=None):
    tensor = tf.convert_to_tensor(value, dtype=dtype, name=name)
    if tensor.dtype not in _FLOAT_TYPES:
        raise TypeError(f"{name} must be float16, float32 or float64, got {tensor.dtype.name}")
    return tensor


def _check_rank(tensor, name, ranks):
    rank = tensor.shape.rank
    if rank is not None and rank not in ranks:
        allowed = " or ".join(str(r) for r in ranks)
        raise ValueError(f"{name} must have rank {allowed}, got shape {tensor.shape}")


def _static_dim(tensor, axis):
    if tensor.shape.rank is None:
        return None
    return tf.compat.dimension_value(tensor.shape[axis])


def _check_common_attrs(op_type, *, direction, cell_depth, num_proj, time_major, activation):
    if direction not in _OP_DIRECTIONS:
        raise ValueError(f"{op_type}: direction must be one of {_OP_DIRECTIONS} (the DynamicRNN "
                         f"layer builds BIDIRECTIONAL from one op per direction), got "
                         f"{direction!r}")
    if cell_depth != 1:
        raise ValueError(f"{op_type}: only cell_depth=1 is supported, got {cell_depth!r}")
    if num_proj != 0:
        raise ValueError(f"{op_type}: num_proj={num_proj!r} needs a projection weight the op has "
                         "no input for; only num_proj=0 is supported")
    if not time_major:
        raise ValueError(f"{op_type}: only time_major=True ([time, batch, input]) is supported")
    if activation != "tanh":
        raise ValueError(f"{op_type}: only activation='tanh' is supported, got {activation!r}")


def _state(init, name, dtype):
    """``init`` as ``[B, H]``: the ops take ``[1, B, H]`` (LSTM) or ``[B, H]`` (GRU)."""
    state = _float_tensor(init, name, dtype)
    _check_rank(state, name, (2, 3))
    if state.shape.rank == 3:
        if _static_dim(state, 0) not in (None, 1):
            raise ValueError(f"{name} must be [1, batch, hidden] or [batch, hidden], got shape "
                             f"{state.shape}")
        state = state[-1]
    return state


def _sequence_mask(seq_length, x):
    """``[T, B, 1]`` float mask, 1 where ``t < seq_length[b]``; None without ``seq_length``."""
    if seq_length is None:
        return None
    lengths = tf.convert_to_tensor(seq_length, name="seq_length")
    if not lengths.dtype.is_integer:
        raise TypeError(f"seq_length must be an integer tensor, got {lengths.dtype.name}")
    _check_rank(lengths, "seq_length", (1,))
    mask = tf.sequence_mask(lengths, maxlen=tf.shape(x)[0], dtype=x.dtype)  # [B, T]
    return tf.expand_dims(tf.transpose(mask), -1)


# ---- the time loop -----------------------------------------------------------------------------


def _run_steps(step, sequences, init_states, output_dtypes, reverse):
    """Run ``step(inputs_t, states) -> (outputs_t, states)`` over axis 0 of ``sequences`` and
    return each output stacked time-major, every step at its own time index."""
    steps = _static_dim(sequences[0], 0)
    if steps is not None and steps <= MAX_UNROLLED_STEPS:
        if steps == 0:
            raise ValueError("the input sequence has no time steps")
        per_step = [None] * steps
        states = tuple(init_states)
        for t in (reversed(range(steps)) if reverse else range(steps)):
            per_step[t], states = step([seq[t] for seq in sequences], states)
        return [tf.stack([per_step[t][k] for t in range(steps)])
                for k in range(len(output_dtypes))]

    total = tf.shape(sequences[0])[0]
    arrays = tuple(tf.TensorArray(dtype, size=total) for dtype in output_dtypes)

    def body(i, states, arrays):
        t = total - 1 - i if reverse else i
        outputs, states = step([seq[t] for seq in sequences], states)
        return i + 1, tuple(states), tuple(a.write(t, o) for a, o in zip(arrays, outputs))

    _, _, arrays = tf.while_loop(lambda i, *_: i < total, body,
                                 (tf.constant(0), tuple(init_states), arrays))
    return [a.stack() for a in arrays]


def _project_inputs(x, weight, bias=None):
    """``x @ weight (+ bias)`` for all steps at once: ``[T, B, I] -> [T, B, N]``."""
    shape = tf.shape(x)
    flat = tf.reshape(x, [-1, shape[2]])
    out = tf.matmul(flat, weight)
    if bias is not None:
        out = tf.nn.bias_add(out, bias)
    width = _static_dim(weight, 1)
    return tf.reshape(out, tf.stack([shape[0], shape[1], width if width is not None
                                     else tf.shape(weight)[1]]))


# ---- LSTM --------------------------------------------------------------------------------------


def _lstm_gates(pre, c_prev, forget_bias, cell_clip):
    i, j, f, o = tf.split(pre, 4, axis=1)
    i = tf.sigmoid(i)
    j = tf.tanh(j)
    f = tf.sigmoid(f + forget_bias)
    o = tf.sigmoid(o)
    c = c_prev * f + i * j
    if cell_clip > 0:  # the kernel clips from above only
        c = tf.minimum(c, tf.constant(cell_clip, dtype=c.dtype))
    return i, j, f, o, c


def _lstm_sequence(x, w, b, seq_mask, init_h, init_c, forget_bias, cell_clip, reverse):
    input_size = _static_dim(x, 2)
    if input_size is None:
        input_size = tf.shape(x)[2]
    x_proj = _project_inputs(x, w[:input_size], b)
    w_hidden = w[input_size:]
    sequences = [x_proj] + ([seq_mask] if seq_mask is not None else [])

    def step(inputs, states):
        h_prev, c_prev = states
        pre = inputs[0] + tf.matmul(h_prev, w_hidden)
        i, j, f, o, c = _lstm_gates(pre, c_prev, forget_bias, cell_clip)
        if seq_mask is not None:
            m = inputs[1]
            c = c_prev + m * (c - c_prev)
        tanhc = tf.tanh(c)
        h = tanhc * o
        y = h
        if seq_mask is not None:
            y = h * m
            h = h_prev + m * (y - h_prev)
        return (y, h, c, i, j, f, o, tanhc), (h, c)

    return _run_steps(step, sequences, (init_h, init_c), [x.dtype] * 8, reverse)


def _lstm_op(op_type, result_type, x, w, b, seq_length, init_h, init_c, attrs, name):
    _check_common_attrs(op_type, direction=attrs["direction"], cell_depth=attrs["cell_depth"],
                        num_proj=attrs["num_proj"], time_major=attrs["time_major"],
                        activation=attrs["activation"])
    if attrs["cell_type"] != "LSTM":
        raise ValueError(f"{op_type}: only cell_type='LSTM' is supported, got "
                         f"{attrs['cell_type']!r}")
    if attrs["use_peephole"]:
        raise ValueError(f"{op_type}: use_peephole=True needs peephole weights the op has no "
                         "input for; only use_peephole=False is supported")
    with tf.name_scope(name or op_type):
        x = _float_tensor(x, "x")
        w = _float_tensor(w, "w", x.dtype)
        b = _float_tensor(b, "b", x.dtype)
        _check_rank(x, "x", (3,))
        _check_rank(w, "w", (2,))
        _check_rank(b, "b", (1,))
        input_size, rows, cols = _static_dim(x, 2), _static_dim(w, 0), _static_dim(w, 1)
        if cols is not None and cols % 4:
            raise ValueError(f"{op_type}: w must be [input + hidden, 4 * hidden], got {w.shape}")
        if None not in (input_size, rows, cols) and rows - input_size != cols // 4:
            raise ValueError(f"{op_type}: w has {rows} rows; input size {input_size} + hidden "
                             f"size {cols // 4} = {input_size + cols // 4} expected")
        if seq_length is not None:
            seq_length = tf.convert_to_tensor(seq_length, name="seq_length")
        inputs = [x, w, b] + ([seq_length] if op_type == "DynamicRnn" else [])
        batch = tf.shape(x)[1]
        hidden = cols // 4 if cols is not None else tf.shape(w)[1] // 4
        if init_h is None:
            init_h = tf.zeros(tf.stack([1, batch, hidden]), dtype=x.dtype)
        if init_c is None:
            init_c = tf.zeros(tf.stack([1, batch, hidden]), dtype=x.dtype)
        init_h = tf.convert_to_tensor(init_h, dtype=x.dtype, name="init_h")
        init_c = tf.convert_to_tensor(init_c, dtype=x.dtype, name="init_c")
        inputs += [init_h, init_c]
        reverse = attrs["direction"] == REDIRECTIONAL
        outputs = _lstm_sequence(x, w, b, _sequence_mask(seq_length, x),
                                 _state(init_h, "init_h", x.dtype),
                                 _state(init_c, "init_c", x.dtype), attrs["forget_bias"],
                                 attrs["cell_clip"], reverse)
        state_rule = GRAD_FIRST if reverse else GRAD_LAST
        rules = [GRAD_ALL, state_rule, state_rule] + [GRAD_NONE] * 5
        return result_type(*finish_op(op_type, inputs, outputs, attrs, grad_rules=rules))


def _lstm_attrs(cell_type, direction, cell_depth, use_peephole, keep_prob, cell_clip, num_proj,
                time_major, activation, forget_bias, is_training):
    return {"cell_type": cell_type, "direction": direction, "cell_depth": int(cell_depth),
            "use_peephole": bool(use_peephole), "keep_prob": float(keep_prob),
            "cell_clip": float(cell_clip), "num_proj": int(num_proj),
            "time_major": bool(time_major), "activation": activation,
            "forget_bias": float(forget_bias), "is_training": bool(is_training)}


def dynamic_rnn(x, w, b, seq_length, init_h, init_c, cell_type="LSTM", direction=UNIDIRECTIONAL,
                cell_depth=1, use_peephole=False, keep_prob=1.0, cell_clip=-1.0, num_proj=0,
                time_major=True, activation="tanh", forget_bias=0.0, is_training=True,
                name=None):
    """The ``DynamicRnn`` op: a time-major LSTM over ``x`` with per-batch ``seq_length``.

    Returns ``(y, output_h, output_c, i, j, f, o, tanhc)``, each ``[T, B, H]``: ``y`` is ``h``
    with the padded steps zeroed, ``output_h``/``output_c`` the states (carried over padded
    steps), ``i, j, f, o`` the activated gates and ``tanhc = tanh(c)``. ``keep_prob`` and
    ``is_training`` are recorded and, as on the device (no dropout mask input), not applied.
    """
    attrs = _lstm_attrs(cell_type, direction, cell_depth, use_peephole, keep_prob, cell_clip,
                        num_proj, time_major, activation, forget_bias, is_training)
    return _lstm_op("DynamicRnn", DynamicRnn, x, w, b, seq_length, init_h, init_c, attrs, name)


def dynamic_rnn_v2(x, w, b, init_h, init_c, cell_type="LSTM", direction=UNIDIRECTIONAL,
                   cell_depth=1, use_peephole=False, keep_prob=1.0, cell_clip=-1.0, num_proj=0,
                   time_major=True, activation="tanh", forget_bias=0.0, is_training=True,
                   name=None):
    """The ``DynamicRnnV2`` op: :func:`dynamic_rnn` without ``seq_length`` (every step valid)."""
    attrs = _lstm_attrs(cell_type, direction, cell_depth, use_peephole, keep_prob, cell_clip,
                        num_proj, time_major, activation, forget_bias, is_training)
    return _lstm_op("DynamicRnnV2", DynamicRnnV2, x, w, b, None, init_h, init_c, attrs, name)


# ---- GRU and AUGRU ----------------------------------------------------------------------------


def _gru_split(tensor, gate_order):
    first, second, new = tf.split(tensor, 3, axis=-1)
    return (first, second, new) if gate_order == "zrh" else (second, first, new)


def _gru_sequence(x, w_in, w_hid, b_in, b_hid, seq_mask, att, init_h, gate_order, reset_after,
                  reverse):
    x_proj = _project_inputs(x, w_in, b_in)
    sequences = [x_proj]
    if seq_mask is not None:
        sequences.append(seq_mask)
    if att is not None:
        sequences.append(att)
    w_z, w_r, w_n = _gru_split(w_hid, gate_order)
    w_zr = tf.concat([w_z, w_r], axis=1)
    if b_hid is not None:
        b_z, b_r, b_n = _gru_split(b_hid, gate_order)
        b_zr = tf.concat([b_z, b_r], axis=0)

    def step(inputs, states):
        (h_prev,) = states
        gx_z, gx_r, gx_n = _gru_split(inputs[0], gate_order)
        gh_zr = tf.matmul(h_prev, w_zr)
        if b_hid is not None:
            gh_zr = tf.nn.bias_add(gh_zr, b_zr)
        gh_z, gh_r = tf.split(gh_zr, 2, axis=1)
        z = tf.sigmoid(gx_z + gh_z)
        r = tf.sigmoid(gx_r + gh_r)
        hidden_new = tf.matmul(h_prev if reset_after else r * h_prev, w_n)
        if b_hid is not None:
            hidden_new = tf.nn.bias_add(hidden_new, b_n)
        n = tf.tanh(gx_n + r * hidden_new if reset_after else gx_n + hidden_new)
        update = z
        if att is not None:
            update = z * (1 - tf.expand_dims(inputs[-1], -1))
        h = (h_prev - n) * update + n
        if seq_mask is not None:
            h = h_prev + inputs[1] * (h - h_prev)
        gates = (z, update, r, n, hidden_new) if att is not None else (z, r, n, hidden_new)
        return (h, h) + gates, (h,)

    count = 7 if att is not None else 6
    return _run_steps(step, sequences, (init_h,), [x.dtype] * count, reverse)


def _gru_attrs(direction, cell_depth, keep_prob, cell_clip, num_proj, time_major, activation,
               gate_order, reset_after, is_training):
    return {"direction": direction, "cell_depth": int(cell_depth), "keep_prob": float(keep_prob),
            "cell_clip": float(cell_clip), "num_proj": int(num_proj),
            "time_major": bool(time_major), "activation": activation, "gate_order": gate_order,
            "reset_after": bool(reset_after), "is_training": bool(is_training)}


def _gru_op(op_type, result_type, x, weight_input, weight_hidden, weight_att, bias_input,
            bias_hidden, seq_length, init_h, attrs, name):
    _check_common_attrs(op_type, direction=attrs["direction"], cell_depth=attrs["cell_depth"],
                        num_proj=attrs["num_proj"], time_major=attrs["time_major"],
                        activation=attrs["activation"])
    if attrs["gate_order"] not in ("zrh", "rzh"):
        raise ValueError(f"{op_type}: gate_order must be 'zrh' or 'rzh', got "
                         f"{attrs['gate_order']!r}")
    with tf.name_scope(name or op_type):
        x = _float_tensor(x, "x")
        w_in = _float_tensor(weight_input, "weight_input", x.dtype)
        w_hid = _float_tensor(weight_hidden, "weight_hidden", x.dtype)
        _check_rank(x, "x", (3,))
        _check_rank(w_in, "weight_input", (2,))
        _check_rank(w_hid, "weight_hidden", (2,))
        hidden = _static_dim(w_hid, 0)
        for wname, wt in (("weight_input", w_in), ("weight_hidden", w_hid)):
            cols = _static_dim(wt, 1)
            if cols is not None and hidden is not None and cols != 3 * hidden:
                raise ValueError(f"{op_type}: {wname} must have 3 * hidden = {3 * hidden} "
                                 f"columns, got shape {wt.shape}")
        b_in = None if bias_input is None else _float_tensor(bias_input, "bias_input", x.dtype)
        b_hid = None if bias_hidden is None else _float_tensor(bias_hidden, "bias_hidden",
                                                               x.dtype)
        att = None
        if op_type == "DynamicAUGRU":
            att = _float_tensor(weight_att, "weight_att", x.dtype)
            _check_rank(att, "weight_att", (2,))
        if init_h is None:
            size = hidden if hidden is not None else tf.shape(w_hid)[0]
            init_h = tf.zeros(tf.stack([tf.shape(x)[1], size]), dtype=x.dtype)
        init_h = tf.convert_to_tensor(init_h, dtype=x.dtype, name="init_h")
        if seq_length is not None:
            seq_length = tf.convert_to_tensor(seq_length, name="seq_length")
        inputs = [x, w_in, w_hid] + ([att] if att is not None else [])
        inputs += [b_in, b_hid, seq_length, init_h]
        reverse = attrs["direction"] == REDIRECTIONAL
        outputs = _gru_sequence(x, w_in, w_hid, b_in, b_hid, _sequence_mask(seq_length, x), att,
                                _state(init_h, "init_h", x.dtype), attrs["gate_order"],
                                attrs["reset_after"], reverse)
        rules = [GRAD_ALL, GRAD_FIRST if reverse else GRAD_LAST]
        rules += [GRAD_NONE] * (len(outputs) - 2)
        return result_type(*finish_op(op_type, inputs, outputs, attrs, grad_rules=rules))


def dynamic_gru_v2(x, weight_input, weight_hidden, bias_input, bias_hidden, seq_length, init_h,
                   direction=UNIDIRECTIONAL, cell_depth=1, keep_prob=1.0, cell_clip=-1.0,
                   num_proj=0, time_major=True, activation="tanh", gate_order="zrh",
                   reset_after=True, is_training=True, name=None):
    """The ``DynamicGruV2`` op: a time-major GRU (reset gate after the hidden matmul).

    Returns ``(y, output_h, update, reset, new, hidden_new)``, each ``[T, B, H]``: ``y`` and
    ``output_h`` are the states (carried over padded steps), ``update = z``, ``reset = r``,
    ``new = n`` and ``hidden_new = h_{t-1} @ W_hn + b_hn``; ``h = z * h_{t-1} + (1 - z) * n``.
    With ``reset_after=False`` the reset gate is applied before the matmul:
    ``hidden_new = (r * h_{t-1}) @ W_hn + b_hn``. ``bias_input``/``bias_hidden`` may be None.
    """
    attrs = _gru_attrs(direction, cell_depth, keep_prob, cell_clip, num_proj, time_major,
                       activation, gate_order, reset_after, is_training)
    return _gru_op("DynamicGruV2", DynamicGruV2, x, weight_input, weight_hidden, None,
                   bias_input, bias_hidden, seq_length, init_h, attrs, name)


def dynamic_augru(x, weight_input, weight_hidden, weight_att, bias_input, bias_hidden,
                  seq_length, init_h, direction=UNIDIRECTIONAL, cell_depth=1, keep_prob=1.0,
                  cell_clip=-1.0, num_proj=0, time_major=True, activation="tanh",
                  gate_order="zrh", reset_after=True, is_training=True, name=None):
    """The ``DynamicAUGRU`` op: :func:`dynamic_gru_v2` with an attention score ``weight_att``
    (``[T, B]``) on the update gate: ``update_att = z * (1 - att)`` and
    ``h = update_att * h_{t-1} + (1 - update_att) * n``.

    Returns ``(y, output_h, update, update_att, reset, new, hidden_new)``.
    """
    attrs = _gru_attrs(direction, cell_depth, keep_prob, cell_clip, num_proj, time_major,
                       activation, gate_order, reset_after, is_training)
    return _gru_op("DynamicAUGRU", DynamicAUGRU, x, weight_input, weight_hidden, weight_att,
                   bias_input, bias_hidden, seq_length, init_h, attrs, name)


# ---- BasicLSTMCell ------------------------------------------------------------------------------


def basic_lstm_cell(x, h, c, w, b, keep_prob=1.0, forget_bias=1.0, state_is_tuple=True,
                    activation="tanh", name=None):
    """The ``BasicLSTMCell`` op: one LSTM step, ``[x, h] @ w + b`` split into ``i, j, f, o``.

    Returns ``(ct, ht, it, jt, ft, ot, tanhct)`` with ``ct = sigmoid(f + forget_bias) * c +
    sigmoid(i) * tanh(j)``, ``ht = sigmoid(o) * tanh(ct)`` and the activated gates. As on the
    device, ``keep_prob`` applies a dropout mask only when one is given, which this op has no
    input for, so it is recorded and not applied; ``state_is_tuple`` is recorded.
    """
    if activation != "tanh":
        raise ValueError(f"BasicLSTMCell: only activation='tanh' is supported, got "
                         f"{activation!r}")
    attrs = {"keep_prob": float(keep_prob), "forget_bias": float(forget_bias),
             "state_is_tuple": bool(state_is_tuple), "activation": activation}
    with tf.name_scope(name or "BasicLSTMCell"):
        x = _float_tensor(x, "x")
        h = _float_tensor(h, "h", x.dtype)
        c = _float_tensor(c, "c", x.dtype)
        w = _float_tensor(w, "w", x.dtype)
        b = _float_tensor(b, "b", x.dtype)
        for tname, tensor, rank in (("x", x, 2), ("h", h, 2), ("c", c, 2), ("w", w, 2),
                                    ("b", b, 1)):
            _check_rank(tensor, tname, (rank,))
        pre = tf.nn.bias_add(tf.matmul(tf.concat([x, h], axis=1), w), b)
        i, j, f, o, ct = _lstm_gates(pre, c, attrs["forget_bias"], -1.0)
        tanhct = tf.tanh(ct)
        outputs = [ct, o * tanhct, i, j, f, o, tanhct]
        rules = [GRAD_ALL, GRAD_ALL] + [GRAD_NONE] * 5
        return BasicLSTMCell(*finish_op("BasicLSTMCell", [x, h, c, w, b], outputs, attrs,
                                        grad_rules=rules))


# ---- the gradients the original registers ------------------------------------------------------


def _state_gradient(record, dh):
    """The gradient the original passes for a state sequence: only the final state's."""
    if dh is None:
        return None
    dh = tf.convert_to_tensor(dh)
    if record.get_attr("direction") == REDIRECTIONAL:
        return tf.concat([dh[:1], tf.zeros_like(dh[1:])], axis=0)
    return tf.concat([tf.zeros_like(dh[:-1]), dh[-1:]], axis=0)


def _input_gradients(record, ys, grad_ys, inputs):
    """``d(ys . grad_ys) / d inputs`` through the op's own graph; zeros where no path, None for
    missing or integer inputs (the original returns ``seq_length`` itself there, which
    TensorFlow ignores)."""
    pairs = [(y, g) for y, g in zip(ys, grad_ys) if g is not None]
    wanted = [t for t in inputs if t is not None and t.dtype.is_floating]
    grads = tf.gradients([y for y, _ in pairs], wanted,
                         grad_ys=[tf.convert_to_tensor(g, dtype=y.dtype) for y, g in pairs])
    by_input = {}
    for tensor, grad in zip(wanted, grads):
        by_input[id(tensor)] = tf.zeros_like(tensor) if grad is None else grad
    return [by_input.get(id(t)) if t is not None else None for t in inputs]


def dynamic_rnn_grad(op, dy, dh, dc, di, dj, df, do, dtanhc):
    """The original's gradient of ``DynamicRnn``: from ``dy`` and the final step of ``dh`` and
    ``dc`` (the gate gradients ``di .. dtanhc`` are ignored, as the original does), returns
    ``(dx, dw, db, None, dh_prev, dc_prev)`` for the inputs
    ``(x, w, b, seq_length, init_h, init_c)``."""
    record = op_record(op, "DynamicRnn")
    y, h, c = record.inner_outputs[:3]
    return tuple(_input_gradients(record, (y, h, c),
                                  (dy, _state_gradient(record, dh), _state_gradient(record, dc)),
                                  record.inputs))


def dynamic_rnn_v2_grad(op, dy, dh, dc, di, dj, df, do, dtanhc):
    """The original's gradient of ``DynamicRnnV2``: as :func:`dynamic_rnn_grad`, for the inputs
    ``(x, w, b, init_h, init_c)``."""
    record = op_record(op, "DynamicRnnV2")
    y, h, c = record.inner_outputs[:3]
    return tuple(_input_gradients(record, (y, h, c),
                                  (dy, _state_gradient(record, dh), _state_gradient(record, dc)),
                                  record.inputs))


def dynamic_gru_v2_grad(op, dy, doutput_h, dupdate, dreset, dnew, dhidden_new):
    """The original's gradient of ``DynamicGruV2``: from ``dy`` and the final step of
    ``doutput_h``; returns ``(dx, dw_input, dw_hidden, db_input, db_hidden, None, dh_prev)``."""
    record = op_record(op, "DynamicGruV2")
    x, w_in, w_hid, b_in, b_hid, seq_length, init_h = record.inputs
    grads = _input_gradients(record, record.inner_outputs[:2],
                             (dy, _state_gradient(record, doutput_h)),
                             (x, w_in, w_hid, b_in, b_hid, init_h))
    dx, dw_in, dw_hid, db_in, db_hid, dh_prev = grads
    return (dx, dw_in, dw_hid, db_in, db_hid, None, dh_prev)


def dynamic_augru_grad(op, dy, doutput_h, dupdate, dupdate_att, dreset, dnew, dhidden_new):
    """The original's gradient of ``DynamicAUGRU``: from ``dy`` and the final step of
    ``doutput_h``; returns ``(dx, dw_input, dw_hidden, dw_att, db_input, db_hidden, None,
    dh_prev)``."""
    record = op_record(op, "DynamicAUGRU")
    x, w_in, w_hid, att, b_in, b_hid, seq_length, init_h = record.inputs
    grads = _input_gradients(record, record.inner_outputs[:2],
                             (dy, _state_gradient(record, doutput_h)),
                             (x, w_in, w_hid, att, b_in, b_hid, init_h))
    dx, dw_in, dw_hid, datt, db_in, db_hid, dh_prev = grads
    return (dx, dw_in, dw_hid, datt, db_in, db_hid, None, dh_prev)


def basic_lstm_cell_grad(op, dct, dht, dit, djt, dft, dot, dtanhct):
    """The original's gradient of ``BasicLSTMCell``: from ``dct`` and ``dht`` (the gate
    gradients are ignored); returns ``[dxt, dht, dct_1, dw, db]`` for ``(x, h, c, w, b)``."""
    record = op_record(op, "BasicLSTMCell")
    return _input_gradients(record, record.inner_outputs[:2], (dct, dht), record.inputs)
