"""Precision emulation: run a graph on the CPU with the dtypes the NPU would use.

The NPU decides per op whether it computes in float32, float16 or bfloat16 from the session's
precision options (``precision_mode`` / ``precision_mode_v2``, ``modify_mixlist``,
``customize_dtypes``, ``_keep_dtype``). With ``npu_adapter_emulate_precision=on`` the
``precision`` pass rewrites every cluster the same way, so the CPU reference shows the device's
numbers. This package holds the rules and their data:

* :mod:`~npu_adapter.precision.lists`: the default white / black / gray lists;
* :mod:`~npu_adapter.precision.mixlist`, :mod:`~npu_adapter.precision.customize`: the files;
* :mod:`~npu_adapter.precision.policy`: options → :class:`PrecisionPolicy`;
* :mod:`~npu_adapter.precision.engine`: the rewrite of one body;
* :mod:`~npu_adapter.precision.numerics`: :func:`find_numeric_issues`, the first tensors that
  overflow or drift under emulation;
* :mod:`~npu_adapter.precision.accelerate`: the ``accelerate_train_mode`` schedule.

See ``docs/precision.md``.
"""

from npu_adapter.precision.lists import ListEntry, PrecisionLists, default_precision_lists
from npu_adapter.precision.policy import (
    EMULATE_ENV,
    EMULATE_OPTION,
    PrecisionPolicy,
    emulation_enabled,
    policy_from_config,
)

__all__ = [
    "EMULATE_ENV",
    "EMULATE_OPTION",
    "ListEntry",
    "PrecisionLists",
    "PrecisionPolicy",
    "default_precision_lists",
    "emulation_enabled",
    "find_numeric_issues",
    "policy_from_config",
]


def find_numeric_issues(*args, **kwargs):
    """See :func:`npu_adapter.precision.numerics.find_numeric_issues`."""
    from npu_adapter.precision.numerics import find_numeric_issues as run

    return run(*args, **kwargs)
