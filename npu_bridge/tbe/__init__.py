"""``npu_bridge.tbe``: wrappers of the TBE cube and vector ops (:mod:`.npu_cube_ops`,
:mod:`.npu_vector_ops`), built from TensorFlow ops."""

__all__ = []
