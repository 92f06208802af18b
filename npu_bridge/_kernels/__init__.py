"""CPU-reference implementations of the NPU custom ops of the original ``_tf_adapter.so``.

Every op is composed of TensorFlow ops, so it runs on any TensorFlow backend, lands in device
clusters like any other node and gets its gradient from TensorFlow's own derivatives (masked
where the original's registered gradient ignores some outputs, see :mod:`.common`). The public
modules (``npu_bridge.estimator.npu_ops``, ``npu_aicore_ops``, ``npu_bridge.tbe.*``, ...) are thin
layers over these; :mod:`.gen` gathers the raw op wrappers into the ``gen_npu_ops`` namespace.
"""
