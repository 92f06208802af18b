"""Data dump and overflow detection in Ascend's formats, and their reader and comparison.

* :class:`DumpSession` / :func:`instrument_for_dump`: the cluster functions of a rewritten graph
  report every op's tensors, which are written as the device writes them (see
  ``docs/data-dump.md``);
* :func:`read_dump_file`, :func:`scan_dump_tree`: read dumps, ours or a device's;
* :func:`compare_dumps`: per-op, per-tensor errors between a golden dump and another one.
"""

from npu_adapter.datadump.instrument import instrument_for_dump
from npu_adapter.datadump.overflow import inf_nan_enabled
from npu_adapter.datadump.reader import (
    DumpFormatError,
    read_dump_file,
    read_stats_file,
    scan_dump_tree,
)
from npu_adapter.datadump.session import DumpSession
from npu_adapter.datadump.settings import DumpSettings

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


def compare_dumps(golden, other, **kwargs):
    """Compare two dump trees; see :func:`npu_adapter.datadump.compare.compare_dumps`."""
    from npu_adapter.datadump.compare import compare_dumps as compare

    return compare(golden, other, **kwargs)
