"""The fused recurrent ops and layers (``DynamicRnn``/``DynamicRnnV2``, ``DynamicGruV2``,
``DynamicAUGRU``, ``BasicLSTMCell``, ``npu_dynamic_rnn``) against NumPy time-major loops, and
their gradients against finite differences of those loops."""

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_bridge._kernels import rnn as rnn_kernels
from npu_bridge._kernels.common import NpuOpRecord, op_record
from npu_bridge.estimator import npu_ops
from npu_bridge.estimator.npu import npu_dynamic_rnn, npu_rnn

RNG = np.random.default_rng(20261124)


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


# ---- NumPy references ---------------------------------------------------------------------------


def np_lstm(x, w, b, h0, c0, *, forget_bias=0.0, cell_clip=-1.0, lengths=None, reverse=False):
    """Time-major LSTM; returns the 8 outputs y, h, c, i, j, f, o, tanhc as [T, B, H]."""
    steps, batch, _ = x.shape
    hidden = w.shape[1] // 4
    out = {k: np.zeros((steps, batch, hidden)) for k in ("y", "h", "c", "i", "j", "f", "o", "tc")}
    h, c = h0.copy(), c0.copy()
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        gates = np.concatenate([x[t], h], axis=1) @ w + b
        i, j, f, o = np.split(gates, 4, axis=1)
        i, j, f, o = _sigmoid(i), np.tanh(j), _sigmoid(f + forget_bias), _sigmoid(o)
        c_new = f * c + i * j
        if cell_clip > 0:
            c_new = np.minimum(c_new, cell_clip)
        valid = np.ones((batch, 1), bool) if lengths is None else (t < lengths)[:, None]
        c_new = np.where(valid, c_new, c)
        tc = np.tanh(c_new)
        h_new = tc * o
        out["y"][t] = np.where(valid, h_new, 0.0)
        h = np.where(valid, h_new, h)
        c = c_new
        for k, v in (("h", h), ("c", c), ("i", i), ("j", j), ("f", f), ("o", o), ("tc", tc)):
            out[k][t] = v
    return [out[k] for k in ("y", "h", "c", "i", "j", "f", "o", "tc")]


def np_gru(x, w_in, w_hid, b_in, b_hid, h0, *, gate_order="zrh", reset_after=True, att=None,
           lengths=None, reverse=False):
    """Time-major GRU/AUGRU; returns y, h, update, [update_att,] reset, new, hidden_new."""
    steps, batch, _ = x.shape
    hidden = w_hid.shape[0]
    names = ["y", "h", "z"] + (["za"] if att is not None else []) + ["r", "n", "hn"]
    out = {k: np.zeros((steps, batch, hidden)) for k in names}

    def split(m):
        a, b2, n = m[..., :hidden], m[..., hidden:2 * hidden], m[..., 2 * hidden:]
        return (a, b2, n) if gate_order == "zrh" else (b2, a, n)

    wz, wr, wn = split(w_hid)
    bz, br, bn = split(b_hid)
    h = h0.copy()
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        xz, xr, xn = split(x[t] @ w_in + b_in)
        z = _sigmoid(xz + h @ wz + bz)
        r = _sigmoid(xr + h @ wr + br)
        hn = (h @ wn + bn) if reset_after else ((r * h) @ wn + bn)
        n = np.tanh(xn + r * hn) if reset_after else np.tanh(xn + hn)
        za = z if att is None else z * (1.0 - att[t][:, None])
        h_new = za * h + (1.0 - za) * n
        valid = np.ones((batch, 1), bool) if lengths is None else (t < lengths)[:, None]
        h = np.where(valid, h_new, h)
        out["y"][t] = h
        out["h"][t] = h
        for k, v in (("z", z), ("za", za), ("r", r), ("n", n), ("hn", hn)):
            if k in out:
                out[k][t] = v
    return [out[k] for k in names]


def _run(fetches, feed_dict=None, graph=None):
    with tf.compat.v1.Session(graph=graph or tf.compat.v1.get_default_graph()) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        return sess.run(fetches, feed_dict)


def _lstm_inputs(steps=4, batch=3, inputs=3, hidden=2):
    return (RNG.normal(size=(steps, batch, inputs)), 0.5 * RNG.normal(size=(inputs + hidden,
                                                                           4 * hidden)),
            0.3 * RNG.normal(size=4 * hidden), 0.2 * RNG.normal(size=(batch, hidden)),
            0.2 * RNG.normal(size=(batch, hidden)))


def _gru_inputs(steps=4, batch=3, inputs=3, hidden=2):
    return (RNG.normal(size=(steps, batch, inputs)), 0.5 * RNG.normal(size=(inputs, 3 * hidden)),
            0.5 * RNG.normal(size=(hidden, 3 * hidden)), 0.3 * RNG.normal(size=3 * hidden),
            0.3 * RNG.normal(size=3 * hidden), 0.2 * RNG.normal(size=(batch, hidden)))


def _assert_outputs(actual, expected, atol=1e-10):
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_allclose(a, e, rtol=1e-9, atol=atol, err_msg=f"output {k}")


# ---- DynamicRnn ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [
    {},
    {"forget_bias": 1.0, "cell_clip": 0.3},
    {"lengths": np.array([4, 2, 1])},
    {"direction": "REDIRECTIONAL", "lengths": np.array([3, 4, 2])},
])
def test_dynamic_rnn_all_eight_outputs_match_numpy(case):
    x, w, b, h0, c0 = _lstm_inputs()
    lengths = case.get("lengths")
    reverse = case.get("direction") == "REDIRECTIONAL"
    with tf.Graph().as_default() as graph:
        out = npu_ops.gen_npu_ops.dynamic_rnn(
            tf.constant(x), tf.constant(w), tf.constant(b),
            tf.constant(lengths if lengths is not None else [4, 4, 4], tf.int32),
            tf.constant(h0[None]), tf.constant(c0[None]),
            direction=case.get("direction", "UNIDIRECTIONAL"),
            forget_bias=case.get("forget_bias", 0.0), cell_clip=case.get("cell_clip", -1.0))
    assert out._fields == ("y", "output_h", "output_c", "i", "j", "f", "o", "tanhc")
    expected = np_lstm(x, w, b, h0, c0, forget_bias=case.get("forget_bias", 0.0),
                       cell_clip=case.get("cell_clip", -1.0), lengths=lengths, reverse=reverse)
    _assert_outputs(_run(list(out), graph=graph), expected)


def test_dynamic_rnn_v2_unknown_time_uses_a_while_loop_with_the_same_values():
    x, w, b, h0, c0 = _lstm_inputs(steps=5)
    with tf.Graph().as_default() as graph:
        xs = tf.compat.v1.placeholder(tf.float64, [None, 3, 3])
        out = npu_ops.gen_npu_ops.dynamic_rnn_v2(xs, tf.constant(w), tf.constant(b),
                                                 tf.constant(h0[None]), tf.constant(c0[None]))
        lengths = tf.constant([5, 3, 1])
        masked = npu_ops.gen_npu_ops.dynamic_rnn(xs, tf.constant(w), tf.constant(b), lengths,
                                                 tf.constant(h0[None]), tf.constant(c0[None]),
                                                 direction="REDIRECTIONAL")
    assert any(op.type in ("While", "StatelessWhile") for op in graph.get_operations())
    values, values_masked = _run([list(out), list(masked)], {xs: x}, graph=graph)
    _assert_outputs(values, np_lstm(x, w, b, h0, c0))
    _assert_outputs(values_masked, np_lstm(x, w, b, h0, c0, lengths=np.array([5, 3, 1]),
                                           reverse=True))


def test_dynamic_rnn_float32_and_default_initial_state():
    x, w, b, _, _ = _lstm_inputs()
    with tf.Graph().as_default() as graph:
        out = npu_ops.gen_npu_ops.dynamic_rnn_v2(tf.constant(x, tf.float32),
                                                 tf.constant(w, tf.float32),
                                                 tf.constant(b, tf.float32), None, None)
    assert out.y.dtype == tf.float32 and out.y.shape.as_list() == [4, 3, 2]
    zeros = np.zeros((3, 2))
    _assert_outputs(_run(list(out), graph=graph), np_lstm(x, w, b, zeros, zeros), atol=1e-5)


def _finite_difference(loss_of, params, eps=1e-6):
    grads = []
    for k, p in enumerate(params):
        g = np.zeros_like(p)
        for idx in np.ndindex(p.shape):
            plus = [q.copy() for q in params]
            minus = [q.copy() for q in params]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            g[idx] = (loss_of(*plus) - loss_of(*minus)) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("direction,lengths", [("UNIDIRECTIONAL", None),
                                               ("UNIDIRECTIONAL", np.array([3, 1, 2])),
                                               ("REDIRECTIONAL", np.array([2, 3, 3]))])
def test_dynamic_rnn_gradient_is_the_originals(direction, lengths):
    """The original's registered gradient reads dy, the final step of dh and dc, and nothing
    else: the gradients of the gate outputs and of earlier states are dropped."""
    x, w, b, h0, c0 = _lstm_inputs(steps=3, batch=3, inputs=2, hidden=2)
    reverse = direction == "REDIRECTIONAL"
    final = 0 if reverse else -1
    ry, rh, rc = (RNG.normal(size=(3, 3, 2)) for _ in range(3))

    def loss_of(x, w, b, h0, c0):
        y, h, c = np_lstm(x, w, b, h0, c0, lengths=lengths, reverse=reverse)[:3]
        return np.sum(y * ry) + np.sum(h[final] * rh[final]) + np.sum(c[final] * rc[final])

    with tf.Graph().as_default() as graph:
        params = [tf.constant(v) for v in (x, w, b, h0[None], c0[None])]
        seq = tf.constant(lengths if lengths is not None else [3, 3, 3], tf.int32)
        out = npu_ops.gen_npu_ops.dynamic_rnn(params[0], params[1], params[2], seq, params[3],
                                              params[4], direction=direction)
        loss = (tf.reduce_sum(out.y * ry) + tf.reduce_sum(out.output_h * rh)
                + tf.reduce_sum(out.output_c * rc) + 7.0 * tf.reduce_sum(out.i)
                + tf.reduce_sum(out.tanhc) + tf.reduce_sum(out.f * out.o))
        auto = tf.gradients(loss, params)
        explicit = npu_ops.dynamic_rnn_grad(out.y.op, tf.constant(ry), tf.constant(rh),
                                            tf.constant(rc), *[tf.ones_like(out.i)] * 5)
    auto_v, explicit_v = _run([auto, [explicit[k] for k in (0, 1, 2, 4, 5)]], graph=graph)
    assert explicit[3] is None  # seq_length
    numeric = _finite_difference(loss_of, [x, w, b, h0, c0])
    for k, (a, e, n) in enumerate(zip(auto_v, explicit_v, numeric)):
        np.testing.assert_allclose(np.reshape(a, n.shape), n, rtol=1e-6, atol=1e-7,
                                   err_msg=f"tf.gradients, input {k}")
        np.testing.assert_allclose(np.reshape(e, n.shape), n, rtol=1e-6, atol=1e-7,
                                   err_msg=f"dynamic_rnn_grad, input {k}")


def test_dynamic_rnn_v2_grad_function_and_record():
    x, w, b, h0, c0 = _lstm_inputs(steps=2, batch=2, inputs=2, hidden=2)
    with tf.Graph().as_default() as graph:
        params = [tf.constant(v) for v in (x, w, b, h0[None], c0[None])]
        out = npu_ops.gen_npu_ops.dynamic_rnn_v2(*params, forget_bias=0.5)
        record = op_record(out.output_c.op)
        dy = tf.constant(RNG.normal(size=(2, 2, 2)))
        grads = npu_ops.dynamic_rnn_v2_grad(record, dy, None, None, None, None, None, None, None)
        auto = tf.gradients(out.y, params, grad_ys=dy)
    assert isinstance(record, NpuOpRecord) and record.type == "DynamicRnnV2"
    assert record.get_attr("forget_bias") == 0.5 and record.get_attr("direction") == \
        "UNIDIRECTIONAL"
    assert len(grads) == 5 and record.inputs[0] is params[0]
    with pytest.raises(ValueError, match="has no attr named 'gate_order'"):
        record.get_attr("gate_order")
    for a, e in zip(*_run([auto, list(grads)], graph=graph)):
        np.testing.assert_allclose(e, a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kwargs,message", [
    ({"cell_type": "GRU"}, "only cell_type='LSTM'"),
    ({"use_peephole": True}, "use_peephole=True needs peephole weights"),
    ({"num_proj": 4}, "num_proj=4 needs a projection weight"),
    ({"direction": "BIDIRECTIONAL"}, "direction must be one of"),
    ({"time_major": False}, "only time_major=True"),
    ({"activation": "relu"}, "only activation='tanh'"),
    ({"cell_depth": 2}, "only cell_depth=1"),
])
def test_dynamic_rnn_rejects_what_the_op_cannot_do(kwargs, message):
    x, w, b, _, _ = _lstm_inputs()
    with tf.Graph().as_default(), pytest.raises(ValueError, match=message):
        npu_ops.gen_npu_ops.dynamic_rnn_v2(tf.constant(x), tf.constant(w), tf.constant(b), None,
                                           None, **kwargs)


def test_dynamic_rnn_shape_and_type_errors():
    x, w, b, _, _ = _lstm_inputs()
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="w has 6 rows; input size 3 \\+ hidden size 2"):
            npu_ops.gen_npu_ops.dynamic_rnn_v2(tf.constant(x), tf.zeros([6, 8], tf.float64),
                                               tf.constant(b), None, None)
        with pytest.raises(TypeError, match="x must be float16, float32 or float64"):
            npu_ops.gen_npu_ops.dynamic_rnn_v2(tf.zeros([2, 2, 2], tf.int32), w, b, None, None)
        with pytest.raises(ValueError, match="x must have rank 3"):
            npu_ops.gen_npu_ops.dynamic_rnn_v2(tf.constant(x[0]), w, b, None, None)
        with pytest.raises(TypeError, match="seq_length must be an integer tensor"):
            npu_ops.gen_npu_ops.dynamic_rnn(tf.constant(x), w, b, tf.constant([1.0, 2.0, 3.0],
                                                                              tf.float64),
                                            None, None)
        with pytest.raises(ValueError, match="was not made by an npu_bridge op wrapper"):
            npu_ops.dynamic_rnn_grad(tf.constant(1.0).op, *[None] * 8)
        out = npu_ops.gen_npu_ops.dynamic_rnn_v2(tf.constant(x), w, b, None, None)
        with pytest.raises(ValueError, match="expected an op of type DynamicRnn, got "
                           "DynamicRnnV2"):
            npu_ops.dynamic_rnn_grad(out.y.op, *[None] * 8)


# ---- DynamicGruV2 / DynamicAUGRU ----------------------------------------------------------------


@pytest.mark.parametrize("case", [
    {},
    {"gate_order": "rzh"},
    {"reset_after": False},
    {"lengths": np.array([2, 4, 1])},
    {"direction": "REDIRECTIONAL", "lengths": np.array([4, 1, 3])},
])
def test_dynamic_gru_v2_outputs_match_numpy(case):
    x, w_in, w_hid, b_in, b_hid, h0 = _gru_inputs()
    lengths = case.get("lengths")
    with tf.Graph().as_default() as graph:
        out = npu_ops.gen_npu_ops.dynamic_gru_v2(
            tf.constant(x), tf.constant(w_in), tf.constant(w_hid), tf.constant(b_in),
            tf.constant(b_hid), None if lengths is None else tf.constant(lengths), tf.constant(h0),
            direction=case.get("direction", "UNIDIRECTIONAL"),
            gate_order=case.get("gate_order", "zrh"), reset_after=case.get("reset_after", True))
    assert out._fields == ("y", "output_h", "update", "reset", "new", "hidden_new")
    expected = np_gru(x, w_in, w_hid, b_in, b_hid, h0, gate_order=case.get("gate_order", "zrh"),
                      reset_after=case.get("reset_after", True), lengths=lengths,
                      reverse=case.get("direction") == "REDIRECTIONAL")
    _assert_outputs(_run(list(out), graph=graph), expected)


def test_dynamic_augru_outputs_match_numpy_in_both_loop_forms():
    x, w_in, w_hid, b_in, b_hid, h0 = _gru_inputs()
    att = RNG.uniform(size=(4, 3))
    lengths = np.array([4, 2, 3])
    with tf.Graph().as_default() as graph:
        xs = tf.compat.v1.placeholder(tf.float64, [None, 3, 3])
        built = [npu_ops.gen_npu_ops.dynamic_augru(
            inputs, tf.constant(w_in), tf.constant(w_hid), tf.constant(att), tf.constant(b_in),
            tf.constant(b_hid), tf.constant(lengths), tf.constant(h0))
            for inputs in (tf.constant(x), xs)]
    assert built[0]._fields == ("y", "output_h", "update", "update_att", "reset", "new",
                                "hidden_new")
    expected = np_gru(x, w_in, w_hid, b_in, b_hid, h0, att=att, lengths=lengths)
    for values in _run([list(out) for out in built], {xs: x}, graph=graph):
        _assert_outputs(values, expected)


@pytest.mark.parametrize("augru", [False, True])
def test_gru_gradients_are_the_originals(augru):
    x, w_in, w_hid, b_in, b_hid, h0 = _gru_inputs(steps=3, batch=2, inputs=2, hidden=2)
    att = RNG.uniform(size=(3, 2))
    lengths = np.array([3, 2])
    ry, rh = RNG.normal(size=(3, 2, 2)), RNG.normal(size=(3, 2, 2))
    params = [x, w_in, w_hid] + ([att] if augru else []) + [b_in, b_hid, h0]

    def loss_of(*p):
        if augru:
            x, w_in, w_hid, att_, b_in, b_hid, h0 = p
        else:
            (x, w_in, w_hid, b_in, b_hid, h0), att_ = p, None
        y, h = np_gru(x, w_in, w_hid, b_in, b_hid, h0, att=att_, lengths=lengths)[:2]
        return np.sum(y * ry) + np.sum(h[-1] * rh[-1])

    with tf.Graph().as_default() as graph:
        tensors = [tf.constant(v) for v in params]
        seq = lengths.tolist()  # a Python list is accepted too
        if augru:
            out = npu_ops.gen_npu_ops.dynamic_augru(*tensors[:6], seq, tensors[6])
        else:
            out = npu_ops.gen_npu_ops.dynamic_gru_v2(*tensors[:5], seq, tensors[5])
        loss = (tf.reduce_sum(out.y * ry) + tf.reduce_sum(out.output_h * rh)
                + tf.reduce_sum(out.update) + tf.reduce_sum(out.hidden_new * out.new))
        auto = tf.gradients(loss, tensors)
        rest = [tf.ones_like(out.update)] * (len(out) - 2)
        grad_fn = npu_ops.dynamic_augru_grad if augru else npu_ops.dynamic_gru_v2_grad
        explicit = grad_fn(out.y.op, tf.constant(ry), tf.constant(rh), *rest)
    # the original's order: dx, dw_input, dw_hidden, [dw_att,] db_input, db_hidden, seq, dh_prev
    assert explicit[-2] is None
    explicit_in_input_order = [e for e in explicit if e is not None]
    auto_v, explicit_v = _run([auto, explicit_in_input_order], graph=graph)
    numeric = _finite_difference(loss_of, params)
    for k, (a, e, n) in enumerate(zip(auto_v, explicit_v, numeric)):
        np.testing.assert_allclose(a, n, rtol=1e-6, atol=1e-7, err_msg=f"tf.gradients {k}")
        np.testing.assert_allclose(e, n, rtol=1e-6, atol=1e-7, err_msg=f"grad function {k}")


def test_gru_errors():
    x, w_in, w_hid, b_in, b_hid, h0 = _gru_inputs()
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="gate_order must be 'zrh' or 'rzh'"):
            npu_ops.gen_npu_ops.dynamic_gru_v2(x, w_in, w_hid, b_in, b_hid, None, h0,
                                               gate_order="hzr")
        with pytest.raises(ValueError, match="weight_input must have 3 \\* hidden = 6 columns"):
            npu_ops.gen_npu_ops.dynamic_gru_v2(x, w_in[:, :4], w_hid, b_in, b_hid, None, h0)
        with pytest.raises(ValueError, match="weight_att must have rank 2"):
            npu_ops.gen_npu_ops.dynamic_augru(x, w_in, w_hid, np.ones(4), b_in, b_hid, None, h0)


# ---- BasicLSTMCell ------------------------------------------------------------------------------


def test_basic_lstm_cell_and_its_gradient():
    x, w, b, h0, c0 = _lstm_inputs(steps=1, batch=2, inputs=3, hidden=2)
    x = x[0]
    rc, rh = RNG.normal(size=(2, 2)), RNG.normal(size=(2, 2))

    def outputs(x, h, c, w, b):
        y, hs, cs, i, j, f, o, tc = np_lstm(x[None], w, b, h, c, forget_bias=1.0)
        return cs[0], hs[0], i[0], j[0], f[0], o[0], tc[0]

    with tf.Graph().as_default() as graph:
        tensors = [tf.constant(v) for v in (x, h0, c0, w, b)]
        out = npu_ops.basic_lstm_cell(*tensors, keep_prob=1.0, forget_bias=1.0,
                                      state_is_tuple=True, activation="tanh")
        loss = (tf.reduce_sum(out.ct * rc) + tf.reduce_sum(out.ht * rh)
                + tf.reduce_sum(out.it + out.tanhct))
        auto = tf.gradients(loss, tensors)
        explicit = npu_ops.basic_lstm_cell_grad(out.ct.op, tf.constant(rc), tf.constant(rh),
                                                *[tf.ones_like(out.it)] * 5)
    values, auto_v, explicit_v = _run([list(out), auto, explicit], graph=graph)
    _assert_outputs(values, outputs(x, h0, c0, w, b))
    numeric = _finite_difference(
        lambda *p: np.sum(outputs(*p)[0] * rc) + np.sum(outputs(*p)[1] * rh),
        [x, h0, c0, w, b])
    for a, e, n in zip(auto_v, explicit_v, numeric):
        np.testing.assert_allclose(a, n, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(e, n, rtol=1e-6, atol=1e-7)


def test_basic_lstm_cell_is_graph_only():
    with pytest.raises(RuntimeError, match="tf.basic_lstm_cell\\(\\) is "
                       "not compatible with eager execution"):
        npu_ops.basic_lstm_cell(*[None] * 5, 1.0, 1.0, True, "tanh")


# ---- the layers ---------------------------------------------------------------------------------


def test_dynamic_rnn_layer_unidirectional_matches_numpy_and_names_variables():
    x = RNG.normal(size=(5, 2, 3)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        layer = npu_dynamic_rnn.DynamicRNN(4, tf.float32, forget_bias=1.0)
        out = layer(tf.constant(x))
        fed = layer(tf.constant(x), seq_length=tf.constant([5, 2]))
    names = sorted(v.name for v in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES))
    assert names == ["dynamic_rnn/dynamicbase/seq_length:0", "dynamic_rnn/dynamicrnn/b:0",
                     "dynamic_rnn/dynamicrnn/w:0"]
    assert [v.name for v in layer.trainable_weights] == ["dynamic_rnn/dynamicrnn/w:0",
                                                         "dynamic_rnn/dynamicrnn/b:0"]
    assert layer.cell_type == "LSTM" and layer.forget_bias == 1.0 and not layer.use_peephole
    assert len(out) == 8 and out.y.op.type == "IdentityN"
    values, fed_values, w, b = _run([list(out), list(fed), layer._rnn_w, layer._rnn_b],
                                    graph=graph)
    zeros = np.zeros((2, 4))
    _assert_outputs(values, np_lstm(x, w, b, zeros, zeros, forget_bias=1.0), atol=2e-6)
    _assert_outputs(fed_values, np_lstm(x, w, b, zeros, zeros, forget_bias=1.0,
                                        lengths=np.array([5, 2])), atol=2e-6)
    limit = np.sqrt(6.0 / (7 + 16))
    assert w.shape == (7, 16) and np.abs(w).max() <= limit and not b.any()


def test_dynamic_rnn_layer_bidirectional_stacks_both_passes():
    x = RNG.normal(size=(4, 3, 2))
    h_init = 0.1 * RNG.normal(size=(2, 3, 3))
    c_init = 0.1 * RNG.normal(size=(2, 3, 3))
    with tf.Graph().as_default() as graph:
        layer = npu_dynamic_rnn.DynamicRNN(3, tf.float64,
                                           direction=npu_dynamic_rnn.DYNAMIC_RNN_BIDIRECTION)
        out = layer(tf.constant(x), init_h=tf.constant(h_init), init_c=tf.constant(c_init))
    assert isinstance(out, list) and len(out) == 8
    values, w, b = _run([out, layer._rnn_w, layer._rnn_b], graph=graph)
    assert w.shape == (2, 5, 12) and b.shape == (2, 12)
    forward = np_lstm(x, w[0], b[0], h_init[0], c_init[0])
    backward = np_lstm(x, w[1], b[1], h_init[1], c_init[1], reverse=True)
    _assert_outputs(values, [np.stack([f, r]) for f, r in zip(forward, backward)])


def test_dynamic_rnn_layer_gradient_flows_to_its_variables():
    x = RNG.normal(size=(3, 2, 2))
    with tf.Graph().as_default() as graph:
        layer = npu_dynamic_rnn.DynamicRNN(2, tf.float64)
        out = layer(tf.constant(x))
        loss = tf.reduce_sum(out.y) + tf.reduce_sum(out.output_h[-1])
        grads = tf.gradients(loss, layer.trainable_weights)
    (dw, db), w, b = _run([grads, layer._rnn_w, layer._rnn_b], graph=graph)
    zeros = np.zeros((2, 2))

    def loss_of(w, b):
        y, h = np_lstm(x, w, b, zeros, zeros)[:2]
        return y.sum() + h[-1].sum()

    numeric = _finite_difference(loss_of, [w, b])
    np.testing.assert_allclose(dw, numeric[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(db, numeric[1], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("augru", [False, True])
def test_gru_layers_match_numpy(augru):
    x = RNG.normal(size=(4, 2, 3))
    att = RNG.uniform(size=(4, 2))
    with tf.Graph().as_default() as graph:
        cls = npu_dynamic_rnn.DynamicAUGRU if augru else npu_dynamic_rnn.DynamicGRUV2
        layer = cls(3, tf.float64, gate_order="rzh")
        out = layer(tf.constant(x), tf.constant(att)) if augru else layer(tf.constant(x))
        lengths = tf.constant([2, 4])
        masked = (layer(tf.constant(x), tf.constant(att), seq_length=lengths) if augru
                  else layer(tf.constant(x), seq_length=lengths))
    scope = "dynamicaugru" if augru else "dynamicgruv2"
    assert sorted(v.name.split("/", 1)[1] for v in layer.weights) == sorted(
        [f"{scope}/weight_input:0", f"{scope}/weight_hidden:0", f"{scope}/bias_input:0",
         f"{scope}/bias_hidden:0", "dynamicbase/seq_length:0"])
    assert layer.gate_order == "rzh" and layer.reset_after
    weights = [layer._weight_input, layer._weight_hidden, layer._bias_input, layer._bias_hidden]
    values, masked_values, w, seq = _run([list(out), list(masked), weights, layer._seq_length],
                                         graph=graph)
    np.testing.assert_array_equal(seq, [4, 4])
    assert np.abs(np.concatenate([v.ravel() for v in w])).max() <= 1 / np.sqrt(3)
    h0 = np.zeros((2, 3))
    kwargs = {"gate_order": "rzh", "att": att if augru else None}
    _assert_outputs(values, np_gru(x, *w, h0, **kwargs))
    _assert_outputs(masked_values, np_gru(x, *w, h0, lengths=np.array([2, 4]), **kwargs))


def test_layer_errors():
    with tf.Graph().as_default():
        layer = npu_dynamic_rnn.DynamicRNN(2, tf.float32, direction="SIDEWAYS")
        with pytest.raises(ValueError, match="Invalid direction: SIDEWAYS"):
            layer(tf.zeros([3, 2, 2]))
        gru = npu_dynamic_rnn.DynamicGRUV2(2, tf.float32)
        with pytest.raises(ValueError, match="Expected input_shape\\[2\\] to be known"):
            gru(tf.compat.v1.placeholder(tf.float32, [3, 2, None]))
    assert npu_dynamic_rnn.DYNAMIC_RNN_UNIDIRECTION == "UNIDIRECTIONAL"
    assert npu_dynamic_rnn.DYNAMIC_RNN_REDIRECTIONAL == "REDIRECTIONAL"
    assert npu_dynamic_rnn.gen_npu_ops is npu_ops.gen_npu_ops


# ---- npu_rnn.npu_dynamic_rnn --------------------------------------------------------------------


def test_npu_dynamic_rnn_is_a_time_major_loop_of_the_cell():
    x = RNG.normal(size=(4, 2, 3)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        cell = tf.compat.v1.nn.rnn_cell.BasicLSTMCell(2)
        outputs, state = npu_rnn.npu_dynamic_rnn(cell, tf.constant(x), dtype=tf.float32)
        masked, masked_state = npu_rnn.npu_dynamic_rnn(cell, tf.constant(x), dtype=tf.float32,
                                                       sequence_length=tf.constant([4, 2]),
                                                       scope="masked")
        kernels = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    assert len(kernels) == 2  # the cell's kernel and bias, shared by both loops
    values = _run([outputs, state.c, state.h, masked, masked_state.h] + kernels, graph=graph)
    outputs_v, c_v, h_v, masked_v, masked_h, w1, b1 = values
    zeros = np.zeros((2, 2))
    y, h, c = np_lstm(x, w1, b1, zeros, zeros, forget_bias=1.0)[:3]
    np.testing.assert_allclose(outputs_v, y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_v, h[-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c_v, c[-1], rtol=1e-5, atol=1e-6)
    y2, h2 = np_lstm(x, w1, b1, zeros, zeros, forget_bias=1.0, lengths=np.array([4, 2]))[:2]
    np.testing.assert_allclose(masked_v, y2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(masked_h, h2[-1], rtol=1e-5, atol=1e-6)


# ---- on the NPU session -------------------------------------------------------------------------


def test_unrolled_lstm_lands_in_one_cluster_and_runs_the_same_on_the_npu_session():
    x = RNG.normal(size=(3, 2, 3)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        xs = tf.compat.v1.placeholder(tf.float32, [3, 2, 3], name="xs")
        layer = npu_dynamic_rnn.DynamicRNN(2, tf.float32)
        out = layer(xs)
        loss = tf.reduce_sum(out.y)
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    result = npu_adapter.rewrite(graph.as_graph_def(), {}, fetches=[out.y.name],
                                 feeds=[xs.name])
    placed = {name: p for name, p in result.placement.items()
              if name.startswith("dynamic_rnn/DynamicRnnV2/")}
    on_host = {p["reason"] for p in placed.values() if p["cluster"] is None}
    # Variables, their reads and the whole time loop are on the device (one cluster).
    assert len(placed) > 50 and on_host == set()
    assert len({p["cluster"] for p in placed.values()} - {None}) == 1
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.custom_optimizers.add().name = "NpuOptimizer"
    runs = []
    for make in (lambda: tf.compat.v1.Session(graph=graph),
                 lambda: npu_adapter.NpuSession(graph=graph, config=config)):
        with make() as sess:
            sess.run(init)
            sess.run(train, {xs: x})
            runs.append(sess.run(list(out), {xs: x}))
    for plain, npu in zip(*runs):
        np.testing.assert_allclose(npu, plain, rtol=1e-6, atol=1e-7)


def test_records_are_per_graph():
    x, w, b, _, _ = _lstm_inputs()
    with tf.Graph().as_default():
        out = rnn_kernels.dynamic_rnn_v2(x, w, b, None, None, name="first")
    assert op_record(out.y).name == "first/IdentityN"
    with tf.Graph().as_default(), pytest.raises(ValueError, match="not made by an npu_bridge"):
        op_record(tf.identity(tf.constant(1.0)))
