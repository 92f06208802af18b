"""Profiling on the CPU reference, written in the layout of Ascend's profiler.

* :class:`SessionProfiler`: the session calls ``before_run``/``after_run`` around each run; it
  turns TensorFlow's step statistics into per-step Chrome traces, a training trace (fp_point →
  bp_point, iteration time, data wait) and summaries (top ops and op types, host vs cluster
  time) as CSV and HTML (see ``docs/profiling.md``);
* :func:`parse_profiling_options`: ``profiling_options`` validated as the original does;
* :func:`active_api_profiler`: the started ``npu_bridge.profiler.profiler.Profiler``.
"""

import importlib

__all__ = ["ProfilingSettings", "SessionProfiler", "active_api_profiler",
           "parse_profiling_options"]

_LAZY = {
    "ProfilingSettings": "npu_adapter.profiling.settings",
    "SessionProfiler": "npu_adapter.profiling.profiler",
    "active_api_profiler": "npu_adapter.profiling.settings",
    "parse_profiling_options": "npu_adapter.profiling.options",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'npu_adapter.profiling' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
