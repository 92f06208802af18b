"""Section ``scaling``: GraphView index and the partition pipeline on 10k/30k/100k-node graphs.

On synthetic GraphDefs (``bench.synthetic``) of growing size, four things alternate round by round
in this process: ``tf.import_graph_def`` of the GraphDef into a new ``tf.Graph`` (the yardstick),
building a :class:`~npu_adapter.graph.view.GraphView` (the index every pass reads), and
``npu_adapter.rewrite`` with the synthetic graph's fetches and feeds in full-offload mode (default
options) and in mix mode (``mix_compile_mode``). Each is reported against the import of the same
GraphDef; the scaling exponent is the least-squares slope of log(time) over log(nodes).
"""

from bench.harness import (
    SectionResult,
    Stats,
    Target,
    fit_exponent,
    import_graph,
    interleave,
    make_row,
    pass_breakdown,
)
from bench.synthetic import synthetic_graph

__all__ = ["NAME", "TITLE", "models_needed", "run", "FULL_SIZES", "QUICK_SIZES",
           "REWRITE_TARGET", "EXPONENT_TARGET"]

NAME = "scaling"
TITLE = "GraphView index and partition pipeline on synthetic graphs vs tf.import_graph_def"

FULL_SIZES = (10_000, 30_000, 100_000)
QUICK_SIZES = (500, 1_000, 2_000)

REWRITE_TARGET = Target("<= 0.8x import", "ratio", 0.8)
"""Stated for the largest graph (100k nodes)."""

EXPONENT_TARGET = Target("<= 1.15 (near-linear)", "value", 1.15)
"""Our reading of "near-linear scaling": time grows at most like nodes^1.15 from 10k to 100k."""

MODES = (("rewrite full offload", {}), ("rewrite mix mode", {"mix_compile_mode": True}))


def models_needed(quick):
    """Models this section loads (none: the graphs are generated)."""
    return []


def _plan(size, largest, quick):
    """(warm-up rounds, timed rounds) per size: the largest size costs ~25 s a round here."""
    if quick:
        return 1, 3
    if size == largest:
        # No warm-up round at the largest size: the process has already run every step on the
        # smaller graphs, and a 100k round would cost as much as a timed one.
        return 0, 3
    return 1, 5


def run(ctx):
    """Measure every size; rows per size and the fitted exponents."""
    sizes = QUICK_SIZES if ctx.quick else FULL_SIZES
    from npu_adapter.graph.view import GraphView

    rows = []
    details = {"sizes": {}}
    medians = {"import": [], "graph_view": []}
    medians.update({label: [] for label, _ in MODES})
    actual_sizes = []
    for size in sizes:
        synthetic = synthetic_graph(size, seed=0)
        graph_def = synthetic.graph_def
        nodes = len(graph_def.node)
        actual_sizes.append(nodes)
        timings = {label: [] for label, _ in MODES}

        def make_rewrite(options, sink, synthetic=synthetic):
            import npu_adapter

            def do_rewrite():
                result = npu_adapter.rewrite(synthetic.graph_def, options,
                                             fetches=synthetic.fetches,
                                             feeds=list(synthetic.feeds))
                sink.append((result.timings, len(result.clusters)))

            return do_rewrite

        cases = {"import": lambda graph_def=graph_def: import_graph(graph_def),
                 "graph_view": lambda graph_def=graph_def: GraphView(graph_def)}
        for label, options in MODES:
            cases[label] = make_rewrite(options, timings[label])
        warmup, repeat = _plan(size, sizes[-1], ctx.quick)
        stats = interleave(cases, warmup=warmup, repeat=repeat)
        ms = {name: s.scaled(1e3) for name, s in stats.items()}
        largest = size == sizes[-1]
        case = f"{nodes:,} nodes"
        size_details = {"nodes": nodes, "rounds": repeat, "warmup_rounds": warmup}
        rows.append(make_row(case, "tf.import_graph_def", "ms", ms["import"],
                             details={"us_per_node": ms["import"].median * 1e3 / nodes}))
        rows.append(make_row(case, "GraphView index vs import", "ms", ms["graph_view"],
                             baseline=ms["import"]))
        for label, _ in MODES:
            timed = timings[label][-repeat:]
            breakdown = pass_breakdown([t for t, _ in timed], stats[label].values)
            row_details = {"clusters": timed[-1][1],
                           "us_per_node": ms[label].median * 1e3 / nodes,
                           "pass_median_ms": {k: round(v * 1e3, 2) for k, v in breakdown.items()}}
            size_details[label] = row_details
            rows.append(make_row(case, f"{label} vs import", "ms", ms[label],
                                 baseline=ms["import"], details=row_details,
                                 target=REWRITE_TARGET if largest else None))
        for name in medians:
            medians[name].append(stats[name].median)
        details["sizes"][str(nodes)] = size_details
        ctx.log(f"scaling {nodes} nodes: import {ms['import'].median:.0f} ms, view "
                f"{ms['graph_view'].median:.0f} ms, full {ms['rewrite full offload'].median:.0f} "
                f"ms, mix {ms['rewrite mix mode'].median:.0f} ms (n={repeat})")
    span = f"{actual_sizes[0]:,} -> {actual_sizes[-1]:,} nodes"
    exponents = {name: fit_exponent(actual_sizes, times) for name, times in medians.items()}
    details["exponents"] = exponents
    for name in ("import", "graph_view"):
        rows.append(make_row(span, f"scaling exponent, {name}", "exponent",
                             Stats((exponents[name],))))
    for label, _ in MODES:
        rows.append(make_row(span, f"scaling exponent, {label}", "exponent",
                             Stats((exponents[label],)), target=EXPONENT_TARGET))
    notes = [
        "Synthetic graphs from bench.synthetic (seed 0): chains, fan-out/in, TF1 while loops, "
        "string and resource-variable ops. rewrite runs with the graph's fetches and feeds.",
        "import, GraphView, rewrite full offload and rewrite mix mode alternate round by round "
        "(ABBA); ratios are medians of per-round ratios. The largest size has no warm-up round "
        "(the smaller sizes ran the same code first).",
        f"Exponent: least-squares slope of log(median time) over log(nodes), {span}; "
        "1.0 is linear.",
    ]
    return SectionResult(rows, notes, details)
