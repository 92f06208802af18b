"""Section ``precision``: the cost of precision emulation (``npu_adapter_emulate_precision``).

Per model, two measurements against the same options with emulation off:

- rewrite: ``npu_adapter.rewrite`` of the model's GraphDef (the ``precision`` pass decides every
  device op's dtype and inserts the casts);
- steady-state run: an NpuSession with ``precision_mode=allow_mix_precision`` and emulation on
  against one with emulation off (same cluster, float32 kernels) and the plain session. On the
  CPU, float16 kernels are usually slower than float32 ones: the figure is what emulation costs
  here, not what the NPU gains.

Calls alternate round by round (ABBA); ratios are medians of per-round ratios.
"""

import gc

import numpy as np

from bench.harness import (
    SectionResult,
    autorange,
    import_graph,
    interleave,
    make_row,
    npu_config_proto,
    plain_session,
)

__all__ = ["NAME", "TITLE", "models_needed", "run"]

NAME = "precision"
TITLE = "Precision emulation (allow_mix_precision): rewrite time and steady-state run vs off"

FULL_MODELS = ("small_cnn", "small_mlp")
QUICK_MODELS = ("small_mlp",)
MODE = {"precision_mode": "allow_mix_precision"}
ON = dict(MODE, npu_adapter_emulate_precision="on")
OFF = dict(MODE, npu_adapter_emulate_precision="off")


def models_needed(quick):
    """Models this section loads."""
    return list(QUICK_MODELS if quick else FULL_MODELS)


def run(ctx):
    """Per model: rewrite with emulation vs without; run with emulation vs without vs plain."""
    import npu_adapter
    from npu_adapter.session import NpuSession

    rows, details = [], {}
    repeat = 7 if ctx.quick else 21
    budget = 1.5 if ctx.quick else 6.0
    for name in models_needed(ctx.quick):
        spec = ctx.model(name)
        fetches = list(spec.fetches)
        feeds = list(spec.feeds)
        rewrites = {key: (lambda o=opts, g=spec.graph_def, f=fetches, d=feeds:
                          npu_adapter.rewrite(g, o, fetches=f, feeds=d))
                    for key, opts in (("on", ON), ("off", OFF))}
        number = autorange(rewrites["off"], min_time=0.02, max_number=200)
        gc.collect()
        rewrite_stats = interleave(rewrites, warmup=1, repeat=repeat, number=number,
                                   budget=budget, min_repeat=5, collect=False)
        info = rewrites["on"]().pass_info["precision"]
        sessions = {
            "plain": plain_session(graph=import_graph(spec.graph_def),
                                   config=npu_config_proto()),
            "off": NpuSession(graph=import_graph(spec.graph_def), config=npu_config_proto(OFF)),
            "on": NpuSession(graph=import_graph(spec.graph_def), config=npu_config_proto(ON)),
        }
        try:
            outputs = {k: s.run(fetches, spec.feeds) for k, s in sessions.items()}
            cases = {k: (lambda s=s, f=fetches, d=spec.feeds: s.run(f, d))
                     for k, s in sessions.items()}
            for _ in range(2):
                for case in cases.values():
                    case()
            number = autorange(cases["plain"], min_time=0.02, max_number=2000)
            gc.collect()
            run_stats = interleave(cases, warmup=1, repeat=repeat, number=number, budget=budget,
                                   min_repeat=5, collect=False)
        finally:
            for sess in sessions.values():
                sess.close()
        dtypes = {}
        for record in info["decisions"].values():
            if record["reason"] != "not_reducible":
                dtypes[record["dtype"]] = dtypes.get(record["dtype"], 0) + 1
        max_diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b))))
                       for a, b in zip(outputs["on"], outputs["plain"]))
        row_details = {"ops_per_dtype": dict(sorted(dtypes.items())),
                       "casts": sum(info["casts"].values()),
                       "off_equals_plain": all(np.array_equal(a, b) for a, b in
                                               zip(outputs["off"], outputs["plain"])),
                       "max_abs_difference_on_vs_plain": max_diff}
        details[name] = row_details
        ms = {k: s.scaled(1e3) for k, s in rewrite_stats.items()}
        us = {k: s.scaled(1e6) for k, s in run_stats.items()}
        rows.append(make_row(name, "rewrite with emulation vs without", "ms", ms["on"],
                             baseline=ms["off"], details=row_details))
        rows.append(make_row(name, "run with emulation vs without", "us", us["on"],
                             baseline=us["off"]))
        rows.append(make_row(name, "run with emulation vs plain Session", "us", us["on"],
                             baseline=us["plain"]))
        ctx.log(f"precision {name}: rewrite {ms['on'].median:.1f} vs {ms['off'].median:.1f} ms; "
                f"run {us['on'].median:.0f} vs {us['off'].median:.0f} us (plain "
                f"{us['plain'].median:.0f} us); {row_details['casts']} casts")
    notes = ["Emulation under precision_mode=allow_mix_precision; rewrite in milliseconds, run in "
             "microseconds per call; ABBA rounds, ratios are medians of per-round ratios."]
    return SectionResult(rows, notes, details)
