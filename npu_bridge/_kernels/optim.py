"""Fused optimizer ops of the NPU: ``LARS``/``LarsV2``, ``AdamApplyOneAssign``,
``AdamApplyOneWithDecayAssign``, ``LambApplyOptimizerAssign``, ``LambApplyWeightAssign``.

The ``...Assign`` ops write their results into the memory of their inputs on the device. Here
the inputs that receive results must be variables, or reads of variables (a resource variable's
``ReadVariableOp`` output, a ref variable or its ``/read`` identity): the new values are
assigned to those variables. Formulas in ``docs/api-ops.md``.
"""

import collections

import tensorflow as tf

__all__ = [
    "adam_apply_one_assign",
    "adam_apply_one_with_decay_assign",
    "lamb_apply_optimizer_assign",
    "lamb_apply_weight_assign",
    "lars",
    "lars_v2",
]

LambApplyOptimizerAssign = collections.namedtuple("LambApplyOptimizerAssign",
                                                  ["update", "output1", "output2"])


def _assigner(value, what):
    """A function storing a new value into the variable behind ``value``, or None."""
    if isinstance(value, tf.Variable):
        return lambda new: value.assign(new, read_value=False, name=f"assign_{what}")
    while isinstance(value, tf.Tensor) and hasattr(value, "op"):
        if value.dtype != value.dtype.base_dtype:  # a ref dtype (float32_ref)
            ref = value
            return lambda new: tf.compat.v1.assign(ref, new, name=f"assign_{what}").op
        if value.op.type == "ReadVariableOp":
            handle = value.op.inputs[0]
            return lambda new: tf.raw_ops.AssignVariableOp(resource=handle, value=new,
                                                           name=f"assign_{what}")
        if value.op.type != "Identity":  # reads come through identities (`Variable/read`)
            break
        value = value.op.inputs[0]
    return None


def _required_assigner(value, what, op_type):
    assign = _assigner(value, what)
    if assign is None:
        kind = value.op.type if isinstance(value, tf.Tensor) and hasattr(value, "op") else \
            type(value).__name__
        raise ValueError(f"{op_type}: {what} receives the op's result in place, so it must be a "
                         f"variable or a read of one; got a {kind} value")
    return assign


def _tensors(values, dtype, names):
    out = []
    for value, name in zip(values, names):
        out.append(tf.convert_to_tensor(value, dtype=dtype, name=name))
    return out


def _adam_step(grad, v, m, var, lr, beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon,
               weight_decay=None):
    new_v = v * beta2 + tf.square(grad) * one_minus_beta2
    new_m = m * beta1 + grad * one_minus_beta1
    update = new_m / (tf.sqrt(new_v) + epsilon)
    if weight_decay is not None:
        update = update + var * weight_decay
    return new_v, new_m, var - lr * update


def _adam_apply(op_type, inputs, weight_decay, name):
    with tf.name_scope(name or op_type):
        first = tf.convert_to_tensor(inputs[0], name="input0")
        assigners = [_required_assigner(inputs[k], f"input{k}", op_type) for k in (1, 2, 3)]
        names = [f"input{k}" for k in range(5)] + ["mul0_x", "mul1_x", "mul2_x", "mul3_x",
                                                   "add2_y"]
        values = _tensors(inputs, first.dtype, names)
        decay = None if weight_decay is None else tf.convert_to_tensor(
            weight_decay, dtype=first.dtype, name="mul4_x")
        grad, v, m, var, lr, mul0, mul1, mul2, mul3, add2 = values
        new_v, new_m, new_var = _adam_step(grad, v, m, var, lr, mul0, mul1, mul2, mul3, add2,
                                           decay)
        assigns = [assign(new) for assign, new in zip(assigners, (new_v, new_m, new_var))]
    return tf.group(*assigns, name=name or op_type)


def adam_apply_one_assign(input0, input1, input2, input3, input4, mul0_x, mul1_x, mul2_x, mul3_x,
                          add2_y, name=None):
    """``AdamApplyOneAssign``: one Adam step, stored in place. ``input0`` gradient, ``input1``
    v, ``input2`` m, ``input3`` the weight, ``input4`` the learning rate, ``mul0_x`` beta1,
    ``mul1_x`` 1 - beta1, ``mul2_x`` beta2, ``mul3_x`` 1 - beta2, ``add2_y`` epsilon.

    ``v <- beta2 v + (1 - beta2) g^2``, ``m <- beta1 m + (1 - beta1) g``,
    ``w <- w - lr * m / (sqrt(v) + eps)``. Returns the operation that does it (the op has no
    outputs)."""
    return _adam_apply("AdamApplyOneAssign", [input0, input1, input2, input3, input4, mul0_x,
                                              mul1_x, mul2_x, mul3_x, add2_y], None, name)


def adam_apply_one_with_decay_assign(input0, input1, input2, input3, input4, mul0_x, mul1_x,
                                     mul2_x, mul3_x, mul4_x, add2_y, name=None):
    """``AdamApplyOneWithDecayAssign``: :func:`adam_apply_one_assign` with a decoupled weight
    decay ``mul4_x``: ``w <- w - lr * (m / (sqrt(v) + eps) + mul4_x * w)``."""
    return _adam_apply("AdamApplyOneWithDecayAssign",
                       [input0, input1, input2, input3, input4, mul0_x, mul1_x, mul2_x, mul3_x,
                        add2_y], mul4_x, name)


def _with_assign(value, assigner):
    """``value``, evaluated after it has been stored by ``assigner`` (when there is one)."""
    if assigner is None:
        return value
    with tf.control_dependencies([assigner(value)]):
        return tf.identity(value)


def lamb_apply_optimizer_assign(input0, input1, input2, input3, mul0_x, mul1_x, mul2_x, mul3_x,
                                add2_y, steps, do_use_weight, weight_decay_rate, name=None):
    """``LambApplyOptimizerAssign``: the LAMB moment update and bias-corrected step direction.

    ``input0`` gradient, ``input1`` v, ``input2`` m, ``input3`` the weight, ``mul0_x`` beta1,
    ``mul1_x`` 1 - beta1, ``mul2_x`` beta2, ``mul3_x`` 1 - beta2, ``add2_y`` epsilon, ``steps``
    the step count. Returns ``(update, next_v, next_m)`` with ``next_v = beta2 v + (1 - beta2)
    g^2``, ``next_m = beta1 m + (1 - beta1) g`` and ``update = (next_m / (1 - beta1^steps)) /
    (sqrt(next_v / (1 - beta2^steps)) + eps) + w * weight_decay_rate * do_use_weight``.
    ``next_v``/``next_m`` are also stored into ``input1``/``input2`` when those are variables.
    """
    op_type = "LambApplyOptimizerAssign"
    with tf.name_scope(name or op_type):
        first = tf.convert_to_tensor(input0, name="input0")
        assign_v = _assigner(input1, "input1")
        assign_m = _assigner(input2, "input2")
        names = ["input0", "input1", "input2", "input3", "mul0_x", "mul1_x", "mul2_x", "mul3_x",
                 "add2_y", "steps", "do_use_weight", "weight_decay_rate"]
        (grad, v, m, w, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, steps_t, use_weight,
         decay) = _tensors([input0, input1, input2, input3, mul0_x, mul1_x, mul2_x, mul3_x,
                            add2_y, steps, do_use_weight, weight_decay_rate], first.dtype, names)
        next_v = v * beta2 + tf.square(grad) * one_minus_beta2
        next_m = m * beta1 + grad * one_minus_beta1
        m_hat = next_m / (1.0 - tf.pow(beta1, steps_t))
        v_hat = next_v / (1.0 - tf.pow(beta2, steps_t))
        update = m_hat / (tf.sqrt(v_hat) + eps) + w * decay * use_weight
        return LambApplyOptimizerAssign(tf.identity(update, name="update"),
                                        _with_assign(next_v, assign_v),
                                        _with_assign(next_m, assign_m))


def lamb_apply_weight_assign(input0, input1, input2, input3, input4, name=None):
    """``LambApplyWeightAssign``: the LAMB weight step. ``input0`` the weight norm, ``input1``
    the update norm, ``input2`` the learning rate, ``input3`` the update, ``input4`` the weight.

    Returns ``w - ratio * lr * update`` with ``ratio = w_norm / g_norm`` when both norms are
    positive, else 1; stored into ``input4`` when it is a variable."""
    with tf.name_scope(name or "LambApplyWeightAssign"):
        assign_w = _assigner(input4, "input4")
        param = tf.convert_to_tensor(input4, name="input4")
        w_norm, g_norm, lr, update = _tensors([input0, input1, input2, input3], param.dtype,
                                              ["input0", "input1", "input2", "input3"])
        one = tf.ones_like(w_norm * g_norm)
        safe_g = tf.where(g_norm > 0, g_norm, one)
        ratio = tf.where(w_norm > 0, tf.where(g_norm > 0, w_norm / safe_g, one), one)
        return _with_assign(param - ratio * lr * update, assign_w)


def _lars_coeff(w, g, weight_decay, hyperpara, epsilon):
    w_norm = tf.norm(tf.reshape(w, [-1]))
    g_norm = tf.norm(tf.reshape(g, [-1]))
    return hyperpara * w_norm / (g_norm + weight_decay * w_norm + epsilon)


def lars(inputs_w, inputs_g, weight_decay, hyperpara=0.001, epsilon=0.00001, name=None):
    """``LARS`` over lists of weights and gradients: for each pair,
    ``coeff = hyperpara * |w| / (|g| + weight_decay * |w| + epsilon)`` (L2 norms of the whole
    tensors) and the output is ``coeff * (g + weight_decay * w)``."""
    inputs_w, inputs_g = list(inputs_w), list(inputs_g)
    if len(inputs_w) != len(inputs_g) or not inputs_w:
        raise ValueError(f"LARS: inputs_w and inputs_g must be lists of the same, non-zero "
                         f"length, got {len(inputs_w)} and {len(inputs_g)}")
    with tf.name_scope(name or "LARS"):
        decay = tf.convert_to_tensor(weight_decay, dtype=tf.float32, name="weight_decay")
        outputs = []
        for k, (w, g) in enumerate(zip(inputs_w, inputs_g)):
            w = tf.convert_to_tensor(w, name=f"inputs_w_{k}")
            g = tf.convert_to_tensor(g, dtype=w.dtype, name=f"inputs_g_{k}")
            d = tf.cast(decay, w.dtype)
            outputs.append(_lars_coeff(w, g, d, hyperpara, epsilon) * (g + d * w))
        return outputs


def lars_v2(input_weight, input_grad, weight_decay, learning_rate, hyperpara=0.001,
            epsilon=0.00001, use_clip=False, name=None):
    """``LarsV2``: one pair of :func:`lars`; with ``use_clip`` the coefficient becomes
    ``clip(coeff / learning_rate, 0, 1)`` (the learning rate is used only then)."""
    with tf.name_scope(name or "LarsV2"):
        w = tf.convert_to_tensor(input_weight, name="input_weight")
        g = tf.convert_to_tensor(input_grad, dtype=w.dtype, name="input_grad")
        decay = tf.convert_to_tensor(weight_decay, dtype=w.dtype, name="weight_decay")
        lr = tf.convert_to_tensor(learning_rate, dtype=w.dtype, name="learning_rate")
        coeff = _lars_coeff(w, g, decay, hyperpara, epsilon)
        if use_clip:
            coeff = tf.clip_by_value(coeff / lr, 0.0, 1.0)
        return coeff * (g + decay * w)
