"""HCCL group management; see :mod:`npu_bridge.hccl.manage.api`."""

from npu_bridge.hccl.manage import api

__all__ = ["api"]
