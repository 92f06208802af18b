"""HCCL collectives and group management (``npu_bridge.hccl``) on TensorFlow's collectives.

:mod:`npu_bridge.hccl.hccl_ops` holds the collective ops and :mod:`npu_bridge.hccl.manage.api`
the group/rank functions (the original takes those from CANN's ``hccl.manage.api``).
"""

from npu_bridge.hccl import hccl_ops
from npu_bridge.hccl.manage import api

__all__ = ["api", "hccl_ops"]
