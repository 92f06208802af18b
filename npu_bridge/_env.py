"""The rank environment of this process, as the ``npu_bridge`` modules read it.

A thin layer over :mod:`npu_adapter.distributed.environment`, which validates ``RANK_SIZE`` /
``CM_WORKER_SIZE``, ``RANK_ID``, ``DEVICE_ID``, ``RANK_TABLE_FILE`` and the addresses together
and raises :class:`~npu_adapter.distributed.errors.RankEnvironmentError` (a ``ValueError``)
naming the variable when something is wrong.
"""

from npu_adapter.distributed import environment as _environment

__all__ = ["RANK_ENV_VARS", "current", "device_id", "rank_id", "rank_size"]

RANK_ENV_VARS = _environment.ENV_VARS
"""The variables that describe the rank of this process."""


def current():
    """The :class:`~npu_adapter.distributed.environment.RankEnvironment` of this process."""
    return _environment.current()


def rank_size():
    """Number of ranks (``RANK_SIZE`` or ``CM_WORKER_SIZE``, never both; 1 when unset). Only
    these variables are validated (the rest of the environment may be incomplete)."""
    return _environment.rank_size()


def rank_id():
    """This process's rank (``RANK_ID``; 0 for a single rank)."""
    return current().rank_id


def device_id():
    """This process's device (``DEVICE_ID``, else the rank table's, else 0)."""
    return current().device_id
