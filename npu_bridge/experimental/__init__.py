"""``npu_bridge.experimental``: ``file_constant``, ``get_shape``, ``hccl`` and ``image``."""
