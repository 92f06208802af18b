"""NPU unary ops (``npu_bridge.estimator.npu_unary_ops``): GELU in TensorFlow ops.

In the original, ``npu_unary_ops.npu_unary_ops`` is the generated wrapper module of
``_tf_adapter.so``; scripts call ``npu_unary_ops.gelu(x)``. Here ``npu_unary_ops`` is a namespace
with :func:`gelu` and :func:`gelu_grad`; any other generated op is not available and its
attribute access raises ``AttributeError`` naming it.

GELU: the NPU ``Gelu`` kernel uses the tanh approximation

    gelu(x) = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))

(CANN writes it as ``x / (1 + exp(-sqrt(8 / pi) * (x + 0.044715 * x**3)))``, the same function),
not the exact ``0.5 * x * (1 + erf(x / sqrt(2)))``. :func:`gelu` builds that formula from
TensorFlow ops, so its gradient is TensorFlow's derivative of the same formula, which is what
:func:`gelu_grad` (``GeluGrad``) computes.
"""

import math

import tensorflow as tf

__all__ = ["GELU_COEFF", "gelu", "gelu_grad", "npu_unary_ops"]

GELU_COEFF = 0.044715
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _inner(x):
    return _SQRT_2_OVER_PI * (x + GELU_COEFF * x * x * x)


def gelu(x, name=None):
    """GELU, tanh approximation (the NPU ``Gelu`` kernel's formula; see the module doc)."""
    with tf.name_scope(name or "Gelu"):
        x = tf.convert_to_tensor(x, name="x")
        if not x.dtype.is_floating:
            raise ValueError(f"gelu: x must be a floating point tensor, got {x.dtype.name}")
        return 0.5 * x * (1.0 + tf.tanh(_inner(x)))


def gelu_grad(dy, x, y=None, name=None):
    """Gradient of :func:`gelu` (``GeluGrad``): ``dy * d gelu(x) / dx``. ``y`` (the forward
    output, an input of the NPU kernel) is accepted and not needed."""
    with tf.name_scope(name or "GeluGrad"):
        x = tf.convert_to_tensor(x, name="x")
        dy = tf.convert_to_tensor(dy, dtype=x.dtype, name="dy")
        t = tf.tanh(_inner(x))
        d_inner = _SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_COEFF * x * x)
        return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner)


class _NpuUnaryOps:
    """Namespace standing in for the generated op module ``npu_unary_ops``."""

    gelu = staticmethod(gelu)
    gelu_grad = staticmethod(gelu_grad)

    def __getattr__(self, name):
        raise AttributeError(
            f"npu_unary_ops.{name} is a generated wrapper of a custom op of _tf_adapter.so, "
            "which this pure-Python build does not provide (available: gelu, gelu_grad)")

    def __dir__(self):
        return ["gelu", "gelu_grad"]


npu_unary_ops = _NpuUnaryOps()
"""``npu_unary_ops.gelu(x)`` / ``npu_unary_ops.gelu_grad(dy, x, y)`` as in the original."""
