"""HCCL gradient split strategies; see :mod:`hccl.split.api`."""

__all__ = ["api"]
