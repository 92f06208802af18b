"""Data dump and overflow detection in Ascend's formats, and their reader and comparison.

* :class:`DumpSession` / :func:`instrument_for_dump`: the cluster functions of a rewritten graph
  report every op's tensors, which are written as the device writes them (see
  ``docs/data-dump.md``);
* :func:`read_dump_file`, :func:`scan_dump_tree`: read dumps, ours or a device's;
* :func:`compare_dumps`: per-op, per-tensor errors between a golden dump and another one.

Names are loaded on first use: reading and comparing dumps does not import TensorFlow.
"""

import importlib

__all__ = [
    "DumpFormatError",
    "DumpSession",
    "DumpSettings",
    "compare_dumps",
    "inf_nan_enabled",
    "instrument_for_dump",
    "read_dump_file",
    "read_stats_file",
    "scan_dump_tree",
]

_LAZY = {
    "DumpFormatError": "npu_adapter.datadump.reader",
    "DumpSession": "npu_adapter.datadump.session",
    "DumpSettings": "npu_adapter.datadump.settings",
    "compare_dumps": "npu_adapter.datadump.compare",
    "inf_nan_enabled": "npu_adapter.datadump.overflow",
    "instrument_for_dump": "npu_adapter.datadump.instrument",
    "read_dump_file": "npu_adapter.datadump.reader",
    "read_stats_file": "npu_adapter.datadump.reader",
    "scan_dump_tree": "npu_adapter.datadump.reader",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'npu_adapter.datadump' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
