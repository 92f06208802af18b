"""CANN's top-level ``hccl`` Python package, for scripts that import it directly
(``from hccl.manage.api import get_rank_size, get_rank_id``).

On an Ascend machine this package comes with CANN and talks to the HCCL runtime. npu-adapter
ships its own with the same modules and names: :mod:`hccl.manage.api` (ranks and groups) and
:mod:`hccl.split.api` (gradient split strategies), both backed by
:mod:`npu_bridge.hccl.manage.api` and the rank environment of ``npu_adapter.distributed``.
Whichever ``hccl`` comes first on ``sys.path`` wins; see the README ("CANN's hccl package").
"""

__all__ = ["manage", "split"]
