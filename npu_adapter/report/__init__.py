"""Inspection of a rewrite: ``dump_graphs``, the placement report, drawings, TensorBoard runs.

This layer sits above :func:`npu_adapter.rewrite`; the per-pass dump instruments that ``rewrite``
itself runs live below it, in :mod:`npu_adapter.pipeline.dump_instruments`.

* :func:`dump_graphs`: rewrite and write the per-pass dumps, ``placement.json``, ``report.html``,
  Graphviz/SVG drawings and TensorBoard runs (see :mod:`npu_adapter.report.api`).
* :func:`placement_report`: the report as a dict, from a ``RewriteResult``.
"""


__all__ = [
    "dump_graphs",
    "DumpGraphsResult",
    "placement_report",
]


def __getattr__(name):
    # dump_graphs and the report pull in TensorFlow-heavy modules: load them on first use.
    if name in ("dump_graphs", "DumpGraphsResult"):
        from npu_adapter.report import api

        return getattr(api, name)
    if name == "placement_report":
        from npu_adapter.report.placement import placement_report

        return placement_report
    raise AttributeError(f"module 'npu_adapter.report' has no attribute {name!r}")
