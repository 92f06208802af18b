"""Pass-through ``npu_bridge.estimator``."""
