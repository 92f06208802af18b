"""Rank queries of the HCCL graph adaptor (``npu_bridge.experimental.hccl``).

:func:`get_user_rank_size` and :func:`get_user_rank_id` read the environment as the original
(``RANK_SIZE``/``CM_WORKER_SIZE``, and ``RANK_ID``). :func:`get_actual_rank_size` asks the HCCL
runtime; here it validates ``group`` like the other HCCL functions and answers for the single
rank of this build. ``hccl_graph_adp_ctypes`` stands in for the device library
``libhcom_graph_adaptor.so``: using it raises
:class:`~npu_bridge._device_only.DeviceOnlyError`.
"""

import ctypes
import os

from npu_bridge._device_only import MissingDeviceLibrary
from npu_bridge.estimator.npu import util as util_lib
from npu_bridge.hccl.manage import api as hccl_api

__all__ = ["c_str", "get_actual_rank_size", "get_user_rank_id", "get_user_rank_size",
           "hccl_graph_adp_ctypes"]

hccl_graph_adp_ctypes = MissingDeviceLibrary("libhcom_graph_adaptor.so",
                                             "experimental.hccl.hccl_graph_adp_ctypes")


def c_str(string):
    """``string`` as a NUL-terminated UTF-8 C string (``ctypes.c_char_p``)."""
    return ctypes.c_char_p(string.encode("utf-8"))


def get_actual_rank_size(group="hccl_world_group"):
    """Number of ranks of ``group`` known to the runtime (1 here)."""
    return hccl_api.get_rank_size(group)


def get_user_rank_size():
    """The rank size the user configured (``RANK_SIZE`` or ``CM_WORKER_SIZE``, default 1)."""
    return int(util_lib.get_ranksize())


def get_user_rank_id():
    """The rank id the user configured (``RANK_ID``, which must be set to an integer)."""
    raw = os.environ.get("RANK_ID")
    if raw is None or not raw.strip().lstrip("-").isdigit():
        raise ValueError(f"get_user_rank_id: environment variable RANK_ID must be set to an "
                         f"integer, got {raw!r}")
    return int(raw)
