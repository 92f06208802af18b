"""``npu_bridge.estimator.npu``: scopes, utilities, run configuration, hooks, optimizers and
``NPUEstimator`` with the original module paths."""

__all__ = []
