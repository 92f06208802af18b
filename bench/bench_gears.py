"""Section ``gears``: the cost of dispatching to a gear, at steady state.

A model whose input batch is dynamic (``input`` float32[None, ...]) runs in three sessions on
three imports of the same GraphDef, all fed the same batch-4 input:

- ``gears``: an NpuSession with ``input_shape`` ``input:-1,...``, ``dynamic_dims`` ``1;4;8`` (three
  gears), ``dynamic_node_type`` 1 and the ``exact`` gear policy: the cluster is a ``Case`` over
  three static-shape copies, and the fed shape selects gear 1;
- ``no gears``: an NpuSession with default options (the same cluster without the dispatch);
- ``plain``: ``tf.compat.v1.Session``.

Calls alternate round by round (ABBA). The target compares ``gears`` with ``no gears``.
"""

import gc

import numpy as np

from bench.harness import (
    SectionResult,
    Target,
    autorange,
    import_graph,
    interleave,
    make_row,
    npu_config_proto,
    plain_session,
)
from npu_adapter.session import runner_of

__all__ = ["NAME", "TITLE", "models_needed", "run", "GEAR_TARGET", "gear_options"]

NAME = "gears"
TITLE = "Gear dispatch overhead (3 gears, exact policy) vs the same graph without gears"

FULL_MODELS = ("small_cnn", "small_mlp")
QUICK_MODELS = ("small_mlp",)
GEAR_DIMS = "1;4;8"

GEAR_TARGET = Target("<= 1.05x", "ratio", 1.05)


def models_needed(quick):
    """Models this section loads."""
    return list(QUICK_MODELS if quick else FULL_MODELS)


def gear_options(spec):
    """Gear options for a model with one fed input of dynamic batch: three gears (1, 4, 8)."""
    (feed,) = spec.feeds
    name = feed.partition(":")[0]
    dims = ",".join(str(d) for d in spec.feeds[feed].shape[1:])
    return {"input_shape": f"{name}:-1,{dims}", "dynamic_dims": GEAR_DIMS,
            "dynamic_node_type": 1, "npu_adapter_gear_policy": "exact"}


def run(ctx):
    """Two rows per model: gears vs no gears (target), gears vs plain."""
    from npu_adapter.session import NpuSession

    rows = []
    details = {}
    repeat = 7 if ctx.quick else 31
    budget = 1.5 if ctx.quick else 6.0
    for name in models_needed(ctx.quick):
        spec = ctx.model(name)
        options = gear_options(spec)
        fetches = list(spec.fetches)
        sessions = {
            "plain": plain_session(graph=import_graph(spec.graph_def),
                                   config=npu_config_proto()),
            "no gears": NpuSession(graph=import_graph(spec.graph_def), config=npu_config_proto()),
            "gears": NpuSession(graph=import_graph(spec.graph_def),
                                config=npu_config_proto(options)),
        }
        try:
            outputs = {k: s.run(fetches, spec.feeds) for k, s in sessions.items()}
            feeds = spec.feeds
            cases = {k: (lambda s=s, f=fetches, d=feeds: s.run(f, d))
                     for k, s in sessions.items()}
            for _ in range(2):
                for case in cases.values():
                    case()
            number = autorange(cases["plain"], min_time=0.02, max_number=2000)
            gc.collect()
            stats = interleave(cases, warmup=1, repeat=repeat, number=number, budget=budget,
                               min_repeat=5, collect=False)
            gear_stats = runner_of(sessions["gears"]).gear_stats()
        finally:
            for sess in sessions.values():
                sess.close()
        counts = {cluster: st["gear_counts"] for cluster, st in gear_stats.items()}
        row_details = {
            "options": options,
            "batch": int(next(iter(spec.feeds.values())).shape[0]),
            "gear_counts": {c: {str(g): n for g, n in v.items()} for c, v in counts.items()},
            "calls_per_sample": number,
            "outputs_equal": all(np.array_equal(a, b) for a, b in
                                 zip(outputs["gears"], outputs["plain"])),
        }
        details[name] = row_details
        us = {k: s.scaled(1e6) for k, s in stats.items()}
        rows.append(make_row(name, "run with gears vs NpuSession without gears", "us",
                             us["gears"], baseline=us["no gears"], target=GEAR_TARGET,
                             details=row_details))
        rows.append(make_row(name, "run with gears vs plain Session", "us", us["gears"],
                             baseline=us["plain"]))
        ctx.log(f"gears {name}: gears {us['gears'].median:.0f} us, no gears "
                f"{us['no gears'].median:.0f} us, plain {us['plain'].median:.0f} us "
                f"(n={us['gears'].n})")
    notes = [
        f"Gears: input_shape <input>:-1,<dims>, dynamic_dims {GEAR_DIMS}, dynamic_node_type 1, "
        "exact policy; fed batch 4 (gear 1). Per call times in microseconds, ABBA rounds over "
        "three sessions; ratios are medians of per-round ratios.",
    ]
    return SectionResult(rows, notes, details)
