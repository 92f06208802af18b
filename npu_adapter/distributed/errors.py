"""Errors of the distributed runtime: each names the field, variable or rank that is wrong."""

from npu_adapter.errors import NpuAdapterError

__all__ = [
    "MISSING",
    "DistributedError",
    "LaunchError",
    "RankEnvironmentError",
    "RankFailureError",
    "RankTableError",
]


class _Missing:
    def __repr__(self):
        return "<missing>"


MISSING = _Missing()
"""The ``value`` of a :class:`RankTableError` about a field that is not in the file."""


class DistributedError(NpuAdapterError):
    """Root of the errors of :mod:`npu_adapter.distributed`."""


class RankTableError(DistributedError, ValueError):
    """The rank table (``RANK_TABLE_FILE``) cannot be used.

    ``path`` is the file, ``field`` the JSON path of the offending entry (for example
    ``server_list[1].device[0].rank_id``), ``value`` what the file holds there (:data:`MISSING` when
    the field is absent).
    """

    def __init__(self, path, field, value, problem):
        self.path = path
        self.field = field
        self.value = value
        self.problem = problem
        shown = "missing" if value is MISSING else repr(value)
        super().__init__(f"rank table {path}: {field} = {shown}: {problem}")




class RankEnvironmentError(DistributedError, ValueError):
    """An environment variable describing the ranks (``RANK_SIZE``, ``RANK_ID``, ``DEVICE_ID``,
    ``NPU_ADAPTER_WORKERS``, ...) is invalid or inconsistent with the others."""

    def __init__(self, variable, value, problem):
        self.variable = variable
        self.value = value
        self.problem = problem
        shown = "unset" if value is None else repr(value)
        super().__init__(f"environment variable {variable} ({shown}): {problem}")


class RankFailureError(DistributedError):
    """A collective of this rank failed: another rank stopped, timed out, or ran different
    collectives. ``rank``/``rank_size`` describe this process, ``op`` is the collective node
    (when TensorFlow reported it)."""

    def __init__(self, message, rank=None, rank_size=None, op=None):
        self.rank = rank
        self.rank_size = rank_size
        self.op = op
        super().__init__(message)


class LaunchError(DistributedError):
    """``npu-adapter launch`` cannot start the ranks (bad arguments or a bad rank table)."""
