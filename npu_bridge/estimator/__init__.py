"""``npu_bridge.estimator``: the NPU op wrappers (:mod:`~npu_bridge.estimator.npu_ops`,
:mod:`~npu_bridge.estimator.npu_unary_ops`) and the estimator-era API in
:mod:`npu_bridge.estimator.npu`."""

from npu_bridge.estimator import npu_ops

__all__ = ["npu_ops"]
