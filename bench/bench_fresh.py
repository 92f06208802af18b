"""Section ``fresh``: first-run latency and peak RSS, each run in a fresh interpreter.

For each model, one process per side (plain ``tf.compat.v1.Session`` / ``NpuSession``, in
alternating order) loads the frozen model from the corpus cache, imports it into a graph, and then
times session creation through the first ``run`` returning (the training model runs its
initialiser and one step; the window starts right after a full garbage collection), runs
``RUNS`` more times, and exits. Both sides parse the same serialized ``ConfigProto`` (an
``NpuOptimizer`` entry with default options). Only the NPU side imports ``npu_adapter.session``
(before the timer starts), as a user script imports ``npu_bridge`` at its top; what the rewrite
imports lazily on first use is part of its first run.

Peak RSS is the worker's ``VmHWM`` (high-water mark of its own address space), printed as its
last act; the runner also polls it from outside as a cross-check. (``ru_maxrss`` is useless here:
on Linux a child's starts at the runner's peak.) The worker also reports its RSS just before the
session is created, which both sides share: interpreter, TensorFlow, the loaded GraphDef and its
imported graph.

Run a worker by hand::

    python -m bench.bench_fresh --model resnet50 --mode npu --runs 5
"""

import argparse
import gc
import json
import sys
import time

from bench.harness import (
    SectionResult,
    Target,
    bench_env,
    make_row,
    npu_config_proto,
    run_process,
    summarize,
)
from npu_adapter.session import runner_of

__all__ = ["NAME", "TITLE", "models_needed", "run", "worker_main", "FIRST_RUN_TARGET",
           "TRAINING_FIRST_RUN_TARGET", "WARM_TARGET", "RSS_TARGET"]

NAME = "fresh"
TITLE = "First-run latency and peak RSS in fresh processes (NpuSession vs plain Session)"

# BERT-base (~20 s a process, 10 processes) has a section of its own, run on request
# (bench/bench_fresh_bert.py): with it the full benchmark would take 13 minutes.
FULL_MODELS = ("resnet50", "mobilenet_v2", "inception_v3", "lenet_train")
QUICK_MODELS = ("small_mlp",)
# Processes per side and model, interleaved: one or two per side moved a ratio by +-0.2x between
# runs. BERT-base's first run alone takes ~10-15 s here.
FULL_REPEATS = 5
# The model whose online-inference scripts open sessions in fresh processes (as the classifier
# of CANN's online-inference guide does) also gets the warm-disk-cache row (a third side whose
# rewrite comes from npu_adapter_cache_dir), as does the quick run's model. One model: the
# whole benchmark stays under 10 minutes.
WARM_MODELS = ("mobilenet_v2",)
RUNS = 1

FIRST_RUN_TARGET = Target("<= 1.3x", "ratio", 1.3)
# A training graph's first run also builds the optimizer's update ops, whose rewrite is a larger
# share of a small model's first step.
TRAINING_FIRST_RUN_TARGET = Target("<= 1.5x", "ratio", 1.5)
WARM_TARGET = Target("<= 1.1x", "ratio", 1.1)
RSS_TARGET = Target("<= 1.3x", "ratio", 1.3)


def models_needed(quick):
    """Models this section needs in the cache (the workers load them)."""
    return list(QUICK_MODELS if quick else FULL_MODELS)


def _compile_bytecode():
    """Byte-compile our packages first, as ``pip install`` does for TensorFlow's: a source
    checkout run with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile every module the
    rewrite imports lazily inside the NPU side's timed first run (~40 ms on lenet_train)."""
    import compileall
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for package in ("npu_adapter", "passes", "npu_bridge"):
        if (root / package).is_dir():
            compileall.compile_dir(str(root / package), quiet=1)


def _worker_argv(model, mode, config_hex, runs):
    return [sys.executable, "-m", "bench.bench_fresh", "--model", model,
            "--mode", "plain" if mode == "plain" else "npu",
            "--config-hex", config_hex, "--runs", str(runs)]


def _measure(name, mode, config_hex, runs, env):
    proc = run_process(_worker_argv(name, mode, config_hex, runs), env=env,
                       timeout=300).check()
    report = proc.json()
    # The worker's own final VmHWM is exact; the polled one can only be lower.
    report["peak_rss_kb"] = max(report["vmhwm_kb"], proc.peak_rss_kb or 0)
    report["polled_vmhwm_kb"] = proc.peak_rss_kb
    report["process_seconds"] = proc.wall_seconds
    return report


def run(ctx, model_names=None):
    """Per model (``model_names``, default :func:`models_needed`): first-run latency and peak
    RSS (NPU vs plain); for ``WARM_MODELS`` also the first run of a process whose rewrite is on
    disk already."""
    import tempfile

    _compile_bytecode()
    config_hex = npu_config_proto().SerializeToString().hex()
    env = bench_env()
    rows = []
    details = {}
    runs = 2 if ctx.quick else RUNS
    k = 0
    with tempfile.TemporaryDirectory(prefix="npu-bench-cache-") as cache_dir:
        warm_hex = npu_config_proto({"npu_adapter_cache_dir": cache_dir}) \
            .SerializeToString().hex()
        for name in model_names or models_needed(ctx.quick):
            repeats = 1 if ctx.quick else FULL_REPEATS
            modes = {"plain": config_hex, "npu": config_hex}
            if ctx.quick or name in WARM_MODELS:
                _measure(name, "warm", warm_hex, 0, env)  # fills the disk cache (not timed)
                modes["warm"] = warm_hex
            samples = {m: [] for m in modes}
            for _ in range(repeats):
                order = list(modes) if k % 2 == 0 else list(reversed(modes))
                k += 1
                for mode in order:
                    samples[mode].append(_measure(name, mode, modes[mode], runs, env))
            rows += _model_rows(ctx, name, repeats, runs, samples, details)
    notes = [
        "One fresh interpreter per measurement (plain, NPU and, for "
        f"{', '.join(WARM_MODELS)}, NPU with a warm npu_adapter_cache_dir, in alternating "
        "order); first run = session "
        "creation through the first run returning (training: initialiser + one step); "
        f"then {runs} more runs; peak RSS = VmHWM of the worker, read by itself at the end.",
        "Our packages are byte-compiled before the workers start (as pip does for "
        "TensorFlow), so neither side compiles Python source inside its timed first run.",
        "Peak RSS includes what both sides share (interpreter, TensorFlow, the loaded GraphDef "
        "and its graph); details.peak_minus_before_session_mb isolates the session part.",
        "The NPU side imports npu_adapter.session before its timer starts, as a script imports "
        "npu_bridge at its top (that import loads every module a session uses); its cost is "
        "in details.npu_adapter_import_seconds.",
    ]
    return SectionResult(rows, notes, details)


def _model_rows(ctx, name, repeats, runs, samples, details):
    """The rows of one model from its workers' reports."""
    first = {m: summarize(r["first_run_s"] for r in samples[m]) for m in samples}
    peak = {m: summarize(r["peak_rss_kb"] / 1024 for r in samples[m]) for m in samples}
    before = {m: summarize(r["rss_before_session_kb"] / 1024 for r in samples[m])
              for m in samples}
    own = {m: summarize((r["peak_rss_kb"] - r["rss_before_session_kb"]) / 1024
                        for r in samples[m]) for m in samples}
    steady = {m: summarize(t for r in samples[m] for t in r["steady_s"]) for m in samples}
    row_details = {
        "processes_per_side": repeats,
        "runs_after_first": runs,
        "rss_before_session_mb": {m: before[m].median for m in samples},
        "peak_minus_before_session_mb": {m: own[m].median for m in samples},
        "session_part_ratio": own["npu"].median / own["plain"].median
        if own["plain"].median > 0 else None,
        "polled_vmhwm_mb": {m: [(r["polled_vmhwm_kb"] or 0) / 1024 for r in samples[m]]
                            for m in samples},
        "steady_median_ms": {m: steady[m].median * 1e3 for m in samples},
        "worker_seconds": {m: [round(r["process_seconds"], 2) for r in samples[m]]
                           for m in samples},
        "clusters": samples["npu"][0].get("clusters"),
        "npu_pass_seconds": [r["passes_s"] for r in samples["npu"]],
        "npu_disk_hits": [r["disk_hits"] for r in samples["npu"]],
        "npu_adapter_import_seconds": [r.get("adapter_import_s") for r in samples["npu"]],
    }
    details[name] = row_details
    rows = [make_row(name, f"first run, fresh process (n={repeats})", "s", first["npu"],
                     baseline=first["plain"],
                     target=TRAINING_FIRST_RUN_TARGET if name.endswith("_train")
                     else FIRST_RUN_TARGET,
                     details={"processes_per_side": repeats})]
    if "warm" in samples:
        rows.append(make_row(name, f"first run, fresh process, warm disk cache (n={repeats})",
                             "s", first["warm"], baseline=first["plain"], target=WARM_TARGET,
                             details={"warm_disk_hits":
                                      [r["disk_hits"] for r in samples["warm"]]}))
    rows.append(make_row(name, f"peak RSS, fresh process (n={repeats})", "MB", peak["npu"],
                         baseline=peak["plain"], target=RSS_TARGET, details=row_details))
    warm = f", warm cache {first['warm'].median:.2f} s" if "warm" in samples else ""
    ctx.log(f"fresh {name}: first run {first['npu'].median:.2f} s vs "
            f"{first['plain'].median:.2f} s{warm}; peak RSS {peak['npu'].median:.0f} MB vs "
            f"{peak['plain'].median:.0f} MB (before session: "
            f"{before['plain'].median:.0f} MB)")
    return rows


# --------------------------------------------------------------------------------------------
# Worker (a fresh interpreter per measurement)
# --------------------------------------------------------------------------------------------


def worker_main(argv=None):
    """Load one model, time the first run of one session kind, run it again, print JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.bench_fresh",
                                     description="one first-run / peak-RSS measurement")
    parser.add_argument("--model", required=True)
    parser.add_argument("--mode", required=True, choices=("plain", "npu"))
    parser.add_argument("--config-hex", default=None,
                        help="serialized ConfigProto in hex (default: NpuOptimizer, defaults)")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args(argv)

    import os

    for key, value in bench_env({}).items():
        if key != "PYTHONPATH":
            os.environ.setdefault(key, value)  # normally set by the parent already
    start = time.perf_counter()
    import tensorflow as tf

    from bench import models
    from bench.harness import current_rss_kb, import_graph, peak_rss_self_kb

    tf_import_s = time.perf_counter() - start
    if args.config_hex:
        config = tf.compat.v1.ConfigProto.FromString(bytes.fromhex(args.config_hex))
    else:
        config = npu_config_proto()
    session_cls = tf.compat.v1.Session
    adapter_import_s = None
    if args.mode == "npu":
        t = time.perf_counter()
        from npu_adapter.session import NpuSession

        adapter_import_s = time.perf_counter() - t
        session_cls = NpuSession
    t = time.perf_counter()
    spec = models.get_model(args.model)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    # As a script loads a frozen model: parse the GraphDef, tf.import_graph_def. (Importing the
    # serialized bytes directly saved ~3 s per BERT-base process but left ~100 MB less freed
    # memory for TensorFlow's first run to reuse: both sides' first runs were 25-45 % slower on
    # this machine, where touching fresh memory is slow.)
    graph = import_graph(spec.graph_def)
    import_s = time.perf_counter() - t
    fetches = list(spec.fetches) + list(spec.targets)
    spec.graph_def = None  # the session works from the graph; drop the parsed copy
    rss_before = current_rss_kb()
    # Both sides start their timed window right after a full collection, as the other sections
    # do: loading the model leaves a generation-2 collection (~0.13 s in a process holding
    # TensorFlow) nearly due, and it would otherwise fall in whichever first run allocates more,
    # charging one side for garbage both made. The collections the rewrite's own allocations
    # cause are still timed.
    gc.collect()

    t = time.perf_counter()
    sess = session_cls(graph=graph, config=config)
    if spec.init_op:
        sess.run(spec.init_op)
    sess.run(fetches, spec.feeds)
    first_run_s = time.perf_counter() - t
    steady = []
    for _ in range(args.runs):
        t = time.perf_counter()
        sess.run(fetches, spec.feeds)
        steady.append(time.perf_counter() - t)
    clusters = rewrite_s = disk_hits = None
    if args.mode == "npu":
        from npu_adapter.config import NpuConfig
        from npu_adapter.session import rewrite_cache

        disk = rewrite_cache.disk_cache(NpuConfig.from_config_proto(config))
        disk_hits = disk.stats.hits if disk is not None else None
        result = runner_of(sess).rewrite_result(fetches, spec.feeds)
        clusters = len(result.clusters) if result is not None else 0
        rewrite_s = sum(t for _, t in result.timings) if result is not None else 0.0
    sess.close()
    print(json.dumps({
        "model": args.model, "mode": args.mode, "tensorflow": tf.__version__,
        "tf_import_s": tf_import_s, "load_s": load_s, "import_graph_s": import_s,
        "first_run_s": first_run_s, "steady_s": steady, "clusters": clusters,
        "adapter_import_s": adapter_import_s,
        "passes_s": rewrite_s, "disk_hits": disk_hits,
        "rss_before_session_kb": rss_before, "vmhwm_kb": peak_rss_self_kb(),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
