"""Vector-unit ops (``npu_bridge.tbe.npu_vector_ops``): the fused LAMB optimizer steps and the
Keras :class:`PReLU` layer over ``npu_aicore_ops.prelu``. Formulas in ``docs/api-ops.md``."""

import tensorflow as tf

from npu_bridge._kernels import optim as _optim
from npu_bridge._kernels.common import check_graph_mode
from npu_bridge._kernels.gen import gen_npu_ops
from npu_bridge.estimator.npu_aicore_ops import prelu

__all__ = ["PReLU", "gen_npu_ops", "lamb_apply_optimizer_assign", "lamb_apply_weight_assign"]


def lamb_apply_optimizer_assign(input0, input1, input2, input3, mul0_x, mul1_x, mul2_x, mul3_x,
                                add2_y, steps, do_use_weight, weight_decay_rate, name=None):
    """The LAMB moment update (op ``LambApplyOptimizerAssign``): returns ``(update, next_v,
    next_m)`` for the gradient ``input0``, moments ``input1`` (v) and ``input2`` (m) and weight
    ``input3``; ``next_v``/``next_m`` are stored into ``input1``/``input2`` when those are
    variables. Graph mode only, as in the original."""
    check_graph_mode("tf.lamb_apply_optimizer_assign")
    return tuple(_optim.lamb_apply_optimizer_assign(
        input0, input1, input2, input3, mul0_x, mul1_x, mul2_x, mul3_x, add2_y, steps,
        do_use_weight, weight_decay_rate, name))


def lamb_apply_weight_assign(input0, input1, input2, input3, input4, name=None):
    """The LAMB weight step (op ``LambApplyWeightAssign``): ``input4 - ratio * input2 * input3``
    with ``ratio = input0 / input1`` (weight norm over update norm) when both are positive, else
    1; stored into ``input4`` when it is a variable. Graph mode only, as in the original."""
    check_graph_mode("tf.lamb_apply_weight_assign")
    return _optim.lamb_apply_weight_assign(input0, input1, input2, input3, input4, name)


class PReLU(tf.keras.layers.Layer):
    """Parametric ReLU through the NPU ``PRelu`` op: ``x`` where positive, else ``alpha * x``.

    ``alpha`` has the shape ``input_shape[1:]`` with the ``shared_axes`` set to 1, or ``[1]``
    when every remaining axis is 1 (as in the original layer).
    """

    def __init__(self, alpha_initializer="zeros", alpha_regularizer=None, alpha_constraint=None,
                 shared_axes=None, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.alpha_initializer = tf.keras.initializers.get(alpha_initializer)
        self.alpha_regularizer = tf.keras.regularizers.get(alpha_regularizer)
        self.alpha_constraint = tf.keras.constraints.get(alpha_constraint)
        if shared_axes is not None and not isinstance(shared_axes, (list, tuple)):
            shared_axes = [shared_axes]
        self.shared_axes = None if shared_axes is None else list(shared_axes)
        self.alpha = None

    def build(self, input_shape):
        """Creates ``alpha``."""
        input_shape = tf.TensorShape(input_shape).as_list()
        param_shape = list(input_shape[1:])
        for axis in self.shared_axes or ():
            param_shape[axis - 1] = 1
        if any(d is None for d in param_shape):
            raise ValueError(f"PReLU: the dimensions of input_shape[1:] that are not shared "
                             f"must be known, got input shape {input_shape}")
        if sum(param_shape) == len(param_shape):
            param_shape = [1]
        self.alpha = self.add_weight(shape=param_shape, name="alpha",
                                     initializer=self.alpha_initializer,
                                     regularizer=self.alpha_regularizer,
                                     constraint=self.alpha_constraint)
        self.input_spec = tf.keras.layers.InputSpec(ndim=len(input_shape))
        self.built = True

    def call(self, inputs):
        """``prelu(inputs, alpha)``."""
        return prelu(inputs, self.alpha)

    def get_config(self):
        """The layer's configuration (initializer, regularizer, constraint, shared axes)."""
        config = {
            "alpha_initializer": tf.keras.initializers.serialize(self.alpha_initializer),
            "alpha_regularizer": tf.keras.regularizers.serialize(self.alpha_regularizer),
            "alpha_constraint": tf.keras.constraints.serialize(self.alpha_constraint),
            "shared_axes": self.shared_axes,
        }
        return dict(super().get_config(), **config)

    def compute_output_shape(self, input_shape):
        """Same as the input."""
        return input_shape


# The original module's names for the Keras pieces the layer is built from.
Layer = tf.keras.layers.Layer
InputSpec = tf.keras.layers.InputSpec
constraints = tf.keras.constraints
initializers = tf.keras.initializers
regularizers = tf.keras.regularizers
