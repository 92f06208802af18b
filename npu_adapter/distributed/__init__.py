"""Multi-process training on TensorFlow's collective ops and gRPC runtime.

Scripts written for 8 NPUs over HCCL run as N processes: each process is one rank, described
by the original's environment (``RANK_TABLE_FILE``, ``RANK_SIZE``, ``RANK_ID``, ``DEVICE_ID``;
:mod:`~npu_adapter.distributed.environment`), runs a TensorFlow server for its task
(:mod:`~npu_adapter.distributed.server`), and its sessions connect to it automatically
(:func:`session_target`, called by every session's ``__init__`` once ``npu_adapter.install()``
has run, as importing ``npu_bridge`` does). The ``hccl_ops`` collectives, the group functions
and the distributed optimizers of ``npu_bridge`` build on
:mod:`~npu_adapter.distributed.collectives` and :mod:`~npu_adapter.distributed.groups`;
``npu-adapter launch`` (:mod:`~npu_adapter.distributed.launcher`) starts the ranks.
``docs/distributed.md`` has the whole story.

Modules load lazily: importing this package does not import TensorFlow.
"""

import importlib

__all__ = [
    "RankEnvironment",
    "current_environment",
    "local_server",
    "session_target",
]

_LAZY = {
    "RankEnvironment": ("npu_adapter.distributed.environment", "RankEnvironment"),
    "current_environment": ("npu_adapter.distributed.environment", "current"),
    "local_server": ("npu_adapter.distributed.server", "local_server"),
}


def session_target(target, config):
    """``(target, config)`` for a new session: in a rank of a multi-rank job, a session without
    a target runs on this rank's server with the collective settings; otherwise the arguments
    are returned unchanged (see :func:`npu_adapter.distributed.server.session_target`)."""
    from npu_adapter.distributed import server

    return server.session_target(target, config)


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'npu_adapter.distributed' has no attribute {name!r}")
