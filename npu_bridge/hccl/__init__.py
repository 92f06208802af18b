"""HCCL collectives and group management (``npu_bridge.hccl``) on TensorFlow's collectives.

:mod:`npu_bridge.hccl.hccl_ops` holds the collective ops and :mod:`npu_bridge.hccl.manage.api`
the group/rank functions (the original takes those from CANN's ``hccl.manage.api``; the top-level
``hccl`` package shipped with npu-adapter re-exports them).

Importing this package checks which top-level ``hccl`` Python would import: when it is another
one (CANN's, put first on ``sys.path`` by ``PYTHONPATH``), a warning says so once, because
scripts that import ``hccl.manage.api`` then call CANN's HCCL runtime while ``npu_bridge`` uses
npu-adapter's ranks.
"""

import importlib.util
import os

from absl import logging

from npu_bridge.hccl import hccl_ops
from npu_bridge.hccl.manage import api

__all__ = ["api", "hccl_ops", "top_level_hccl_origin"]

_OURS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "hccl")


def top_level_hccl_origin():
    """The directory of the ``hccl`` package Python would import (None if there is none)."""
    try:
        spec = importlib.util.find_spec("hccl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def _warn_about_another_hccl():
    origin = top_level_hccl_origin()
    # npu-adapter installs `hccl` next to `npu_bridge` (site-packages, or the repository for an
    # editable install), so ours is the sibling directory.
    if origin is not None and os.path.normcase(origin) != os.path.normcase(_OURS):
        logging.warning(
            "the top-level 'hccl' package is %s, not npu-adapter's: scripts that import "
            "hccl.manage.api get that package's functions (CANN's need the Ascend runtime), "
            "while npu_bridge uses npu-adapter's ranks. Remove CANN's python directory from "
            "PYTHONPATH to use npu-adapter's hccl.", origin)


_warn_about_another_hccl()
