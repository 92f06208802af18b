"""Graph dumps and inspection: per-pass dumps, the original's dump files, placement reports.

* :func:`rewrite_dump_instruments`: the instruments :func:`npu_adapter.rewrite` runs for dumps
  (``dump_dir``; ``PRINT_MODEL``/``DUMP_GRAPH_PATH``/``NPU_COLLECT_PATH``; ``DUMP_GE_GRAPH`` and
  ``DUMP_GRAPH_LEVEL``; see :mod:`npu_adapter.dump.env`).
* :func:`dump_graphs`: rewrite and write the per-pass dumps, ``placement.json``, ``report.html``,
  Graphviz/SVG drawings and TensorBoard runs (see :mod:`npu_adapter.dump.api`).
* :func:`placement_report`: the report as a dict, from a ``RewriteResult``.
"""

from npu_adapter.dump.env import DumpSettings, read_dump_settings
from npu_adapter.dump.instruments import CompatDumpInstrument, PassDumpInstrument

__all__ = [
    "rewrite_dump_instruments",
    "dump_graphs",
    "DumpGraphsResult",
    "placement_report",
    "read_dump_settings",
    "DumpSettings",
    "PassDumpInstrument",
    "CompatDumpInstrument",
]


def rewrite_dump_instruments(dump_dir, graph_num, environ=None):
    """Instruments ``rewrite`` adds for dumping, with the environment read now.

    * ``dump_dir`` given: every pass's input and output in ``<dump_dir>/graph_<graph_num>/``
      (:class:`PassDumpInstrument`), at the ``DUMP_GE_GRAPH`` content level and the
      ``DUMP_GRAPH_LEVEL`` count level;
    * ``PRINT_MODEL=1``: the original's ``BeforeSubGraph_<n>``/``AfterSubGraph_<n>``/
      ``TF_<GeOp>`` files in ``DUMP_GRAPH_PATH`` or under ``NPU_COLLECT_PATH``
      (:class:`CompatDumpInstrument`).

    Args:
        dump_dir: directory for the per-pass dumps, or None.
        graph_num: the rewrite's graph number (names the run directory and the original's files).
        environ: mapping to read the variables from (default ``os.environ``).

    Raises:
        NpuConfigError: an invalid ``DUMP_GE_GRAPH``, ``DUMP_GRAPH_LEVEL``, ``ASCEND_DEVICE_ID``
            or ``DEVICE_ID``.
    """
    settings = read_dump_settings(environ)
    instruments = []
    if dump_dir:
        instruments.append(PassDumpInstrument(dump_dir, run_name=f"graph_{graph_num}",
                                              content_level=settings.content_level,
                                              count_level=settings.count_level))
    if settings.print_model:
        instruments.append(CompatDumpInstrument(settings, graph_num))
    return instruments


def __getattr__(name):
    # dump_graphs and the report pull in TensorFlow-heavy modules: load them on first use.
    if name in ("dump_graphs", "DumpGraphsResult"):
        from npu_adapter.dump import api

        return getattr(api, name)
    if name == "placement_report":
        from npu_adapter.dump.report import placement_report

        return placement_report
    raise AttributeError(f"module 'npu_adapter.dump' has no attribute {name!r}")
