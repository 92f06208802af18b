"""Section ``rewrite``: the rewrite pipeline per model next to ``tf.import_graph_def``.

For each model, ``npu_adapter.rewrite`` of its GraphDef (default options: full offload; the run
signature of the model's fetches, feeds and targets, as a session run would rewrite it) and
``tf.import_graph_def`` of the same GraphDef into a new ``tf.Graph`` alternate round by round in
this process. The row gives both times and their per-round ratio; the details hold the median
time of every pass and of the work around the passes (input checks, client-graph extraction,
result description).
"""

import npu_adapter
from bench.harness import SectionResult, import_graph, interleave, make_row, pass_breakdown

__all__ = ["NAME", "TITLE", "models_needed", "run"]

NAME = "rewrite"
TITLE = "Rewrite pipeline time per model vs tf.import_graph_def (same GraphDef, same process)"

FULL_MODELS = ("resnet50", "mobilenet_v2", "inception_v3", "bert_encoder", "lenet_train")
QUICK_MODELS = ("small_mlp", "lenet_train")


def models_needed(quick):
    """Models this section loads."""
    return list(QUICK_MODELS if quick else FULL_MODELS)


def run(ctx):
    """Measure every model; one row per model."""
    rows = []
    details = {}
    repeat, budget = (3, 2.0) if ctx.quick else (7, 12.0)
    for name in models_needed(ctx.quick):
        spec = ctx.model(name)
        graph_def = spec.graph_def
        timings = []

        def do_import(graph_def=graph_def):
            import_graph(graph_def)

        def do_rewrite(spec=spec, timings=timings):
            result = npu_adapter.rewrite(spec.graph_def, {}, fetches=spec.fetches,
                                         feeds=list(spec.feeds), targets=spec.targets)
            timings.append((result.timings, len(result.clusters)))

        stats = interleave({"import": do_import, "rewrite": do_rewrite}, warmup=1,
                           repeat=repeat, budget=budget)
        rewrite_ms = stats["rewrite"].scaled(1e3)
        import_ms = stats["import"].scaled(1e3)
        timed = [t for t, _ in timings[-stats["rewrite"].n:]]
        breakdown = pass_breakdown(timed, stats["rewrite"].values)
        nodes = len(graph_def.node)
        row_details = {"nodes": nodes, "clusters": timings[-1][1],
                       "pass_median_ms": {k: round(v * 1e3, 3) for k, v in breakdown.items()}}
        rows.append(make_row(f"{name} ({nodes} nodes)", "rewrite vs import", "ms", rewrite_ms,
                             baseline=import_ms, details=row_details))
        details[name] = row_details
        ctx.log(f"rewrite {name}: {rewrite_ms.median:.1f} ms vs import {import_ms.median:.1f} ms "
                f"(n={rewrite_ms.n})")
    notes = [
        "rewrite = npu_adapter.rewrite(graph_def, {} (full offload), fetches, feeds, targets); "
        "import = tf.import_graph_def into a new tf.Graph; alternated round by round (ABBA), "
        "one warm-up round excluded; ratio = median of the per-round ratios.",
        "No stated target per model (the 0.5x target is for 100k-node graphs, see 'scaling').",
    ]
    return SectionResult(rows, notes, details)
