"""HCCL rank and group management; see :mod:`hccl.manage.api`."""

__all__ = ["api"]
