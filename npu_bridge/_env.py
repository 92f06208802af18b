"""The rank environment of this process: ``RANK_SIZE``/``CM_WORKER_SIZE``, ``RANK_ID``,
``DEVICE_ID``.

The original reads these variables (spec §5.1, Python side) to decide whether collectives, the
broadcast hook and the distributed optimizers do anything. This build has no HCCL and no other
distributed backend: it runs exactly one rank. Every distributed entry point calls
:func:`require_single_rank`, which raises :class:`~npu_adapter.errors.BackendError` when the
environment asks for more than one rank, and every reader raises ``ValueError`` naming the
variable when a value is not a valid integer.
"""

import os
import re

from npu_adapter.errors import BackendError

__all__ = [
    "RANK_ENV_VARS",
    "device_id",
    "rank_id",
    "rank_size",
    "require_single_rank",
]

RANK_ENV_VARS = ("RANK_SIZE", "CM_WORKER_SIZE", "RANK_ID", "DEVICE_ID")
"""The variables that describe the rank of this process."""

_INT_RE = re.compile(r"[+-]?\d+\Z")


def _int_env(name, minimum):
    """The integer value of ``$name`` (None when unset or empty); ValueError when invalid."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if not _INT_RE.match(text):
        raise ValueError(f"environment variable {name}={raw!r} is not an integer; "
                         f"expected an integer >= {minimum}")
    value = int(text)
    if value < minimum:
        raise ValueError(f"environment variable {name}={raw!r} is out of range; "
                         f"expected an integer >= {minimum}")
    return value


def rank_size():
    """Number of ranks: ``RANK_SIZE`` or ``CM_WORKER_SIZE`` (never both), 1 when neither is set.

    Raises ``ValueError`` when both are set (as the original's ``util.get_ranksize``) or when the
    value is not an integer >= 1.
    """
    if os.environ.get("RANK_SIZE") is not None and os.environ.get("CM_WORKER_SIZE") is not None:
        raise ValueError("environment variables RANK_SIZE and CM_WORKER_SIZE cannot be "
                         "configured at the same time; set only one of them")
    size = _int_env("RANK_SIZE", 1)
    if size is None:
        size = _int_env("CM_WORKER_SIZE", 1)
    return 1 if size is None else size


def rank_id():
    """This process's rank: ``RANK_ID`` (default 0); ValueError unless ``0 <= RANK_ID < rank
    size``."""
    size = rank_size()
    value = _int_env("RANK_ID", 0)
    if value is None:
        return 0
    if value >= size:
        raise ValueError(f"environment variable RANK_ID={value} must be smaller than the rank "
                         f"size {size} (RANK_SIZE/CM_WORKER_SIZE)")
    return value


def device_id():
    """The device of this process: ``DEVICE_ID`` (default 0); ValueError unless an integer
    >= 0."""
    value = _int_env("DEVICE_ID", 0)
    return 0 if value is None else value


def require_single_rank(entry):
    """Validate the rank environment and return the rank size, which is then 1.

    ``entry`` names the API being called, for the message. Raises
    :class:`~npu_adapter.errors.BackendError` when more than one rank is configured and
    ``ValueError`` when a variable is invalid.
    """
    size = rank_size()
    if size > 1:
        source = "RANK_SIZE" if os.environ.get("RANK_SIZE") is not None else "CM_WORKER_SIZE"
        raise BackendError(
            f"{entry}: distributed training needs the Ascend collective communication library "
            f"(HCCL/a distributed backend); this build runs a single rank, but {source}={size}. "
            "Unset RANK_SIZE and CM_WORKER_SIZE (or set them to 1) and keep RANK_ID=0 to run "
            "on one rank; DEVICE_ID selects the device.")
    rank_id()
    device_id()
    return size
