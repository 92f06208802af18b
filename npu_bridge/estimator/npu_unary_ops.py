"""NPU unary ops (``npu_bridge.estimator.npu_unary_ops``): GELU in TensorFlow ops.

In the original, ``npu_unary_ops.npu_unary_ops`` is the generated wrapper module of
``_tf_adapter.so``; scripts call ``npu_unary_ops.gelu(x)``. Here ``npu_unary_ops`` is the shared
namespace of raw op wrappers (the same object as ``npu_ops.gen_npu_ops``), which has
:func:`gelu` and :func:`gelu_grad` among the others.

GELU: the NPU ``Gelu`` kernel uses the tanh approximation

    gelu(x) = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))

(CANN writes it as ``x / (1 + exp(-sqrt(8 / pi) * (x + 0.044715 * x**3)))``, the same function),
not the exact ``0.5 * x * (1 + erf(x / sqrt(2)))``. :func:`gelu` builds that formula from
TensorFlow ops, so its gradient is TensorFlow's derivative of the same formula, which is what
:func:`gelu_grad` (``GeluGrad``, the gradient the original registers) computes.
"""

from npu_bridge._kernels.gen import gen_npu_ops as npu_unary_ops
from npu_bridge._kernels.math import GELU_COEFF, gelu, gelu_grad

__all__ = ["GELU_COEFF", "gelu", "gelu_grad", "npu_unary_ops"]
