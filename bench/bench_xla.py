"""Section ``xla``: the xla backend vs plain TensorFlow, steady state and first runs, per model.

Per model, the GraphDef is imported into two graphs: one runs in a plain
``tf.compat.v1.Session``, the other in an :class:`~npu_adapter.session.NpuSession` with
``npu_adapter_backend=xla`` (full offload; clusters XLA cannot compile run on the CPU
reference). The xla side first runs until every compiled cluster is decided (its first runs
measure, cluster by cluster, whether XLA's executable or TensorFlow's kernels run it faster,
and keep the faster: ``docs/xla.md``); then, after warm-up, calls alternate round by round
(ABBA) until the model's time budget is spent. The details give each cluster's decision and
why, the XLA compilations the runtime counted (none in the steady state), and the largest
difference of the outputs from plain TensorFlow (inference models).

First runs: the in-process first run of each side (session creation, variable initialisation
and the first ``run``), and the first run of a fresh process (plain; xla with an empty
``graph_compiler_cache_dir``; xla again with that directory, warm), one process each, with
what each compiled and measured, and the time of the first runs as a whole (as many as two
clusters take to decide: a cold directory pays its compilations and measurements there). The
details also hold the placement report's decisions for the model read from that directory, as
``npu-adapter inspect --backend xla --option graph_compiler_cache_dir=DIR`` prints them.

Run a worker by hand::

    python -m bench.bench_xla --model mobilenet_v2 --runs 12 [--config-hex HEX]
"""

import argparse
import gc
import json
import sys
import tempfile
import time

import numpy as np

from bench.harness import (
    SectionResult,
    Stats,
    autorange,
    bench_env,
    import_graph,
    interleave,
    make_row,
    npu_config_proto,
    plain_session,
    run_process,
)
from npu_adapter.session import runner_of

__all__ = ["NAME", "TITLE", "models_needed", "run", "worker_main"]

NAME = "xla"
TITLE = "xla backend (NpuSession, npu_adapter_backend=xla) vs plain Session.run"

FULL_MODELS = ("resnet50", "mobilenet_v2", "inception_v3", "bert_encoder", "lenet_train")
QUICK_MODELS = ("small_cnn", "lenet_train")
# Runs after which the xla side must have decided every cluster (a cluster takes
# 2 + 2 * PAIRS runs; LeNet training has two); more means something is wrong.
MAX_DECIDING_RUNS = 120


def models_needed(quick):
    """Models this section loads."""
    return list(QUICK_MODELS if quick else FULL_MODELS)


def _first_run(make, fetches, feeds, init_op):
    start = time.perf_counter()
    sess = make()
    if init_op:
        sess.run(init_op)
    out = sess.run(fetches, feeds)
    return sess, time.perf_counter() - start, out


def _max_difference(a, b):
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            worst = max(worst, float(np.max(np.abs(x - y) / (np.abs(y) + 1e-3)))
                        if x.size else 0.0)
    return worst




def _decisions(stats):
    """Cluster → {"status", "why" per executable, runs in each form, compile seconds}."""
    return {name: {"status": st.status, "decisions": dict(st.decisions),
                   "reason": st.reason, "runs_compiled": st.runs_compiled,
                   "runs_tensorflow": st.runs_tensorflow,
                   "compile_seconds": round(st.compile_seconds, 3),
                   "background_compiles": st.background_compiles}
            for name, st in stats.clusters.items()}


def _run_until_decided(run_once, session, fetches, feeds):
    """Run until every cluster of the signature is decided, waiting after each run for the
    executables its replay builds in the background; returns the runs it took."""
    runner = runner_of(session)
    clusters = [c.name for c in runner.rewrite_result(fetches, feeds).clusters]
    runs = 0
    while runs < MAX_DECIDING_RUNS:
        stats = runner.runtime_stats().clusters
        if not any(stats[name].status == "pending" for name in clusters if name in stats):
            break
        run_once()
        runner.runtime.wait_for_builds(timeout=900)
        runs += 1
    return runs


def _worker_argv(model, config_hex, runs, plain):
    argv = [sys.executable, "-m", "bench.bench_xla", "--model", model, "--runs", str(runs),
            "--config-hex", config_hex]
    return argv + (["--plain"] if plain else [])


def _fresh(name, config_hex, runs, env, plain=False):
    proc = run_process(_worker_argv(name, config_hex, runs, plain), env=env, timeout=900)
    return proc.check().json()


def _report_decisions(spec, options, graph_num):
    """What the placement report (and ``inspect``) says of each cluster under ``options``."""
    from npu_adapter import rewrite
    from npu_adapter.config import NpuConfig
    from npu_adapter.report.placement import placement_report

    fetches = list(spec.fetches)
    result = rewrite(spec.graph_def, options, fetches=fetches, targets=list(spec.targets),
                     feeds=list(spec.feeds), backend="xla", graph_num=graph_num)
    report = placement_report(result, spec.graph_def, backend="xla",
                              config=NpuConfig.from_dict(options), fetches=fetches,
                              feeds=list(spec.feeds), shapes=False)
    lines = []
    for cluster in report["clusters"]:
        record = cluster.get("compile")
        if record is None:
            continue
        if "reason" in record:
            lines.append(record["detail"])
        for d in record.get("decisions", []):
            lines.append(f"cluster {cluster['name']} ({d['executable']}): {d['why']}")
        if "reason" not in record and not record.get("decisions"):
            lines.append(f"cluster {cluster['name']}: not measured yet")
    return lines


def run(ctx):
    """Per model: steady-state run, in-process first run, and first runs in fresh processes
    (cold and warm graph_compiler_cache_dir), xla vs plain."""
    from npu_adapter.backends.xla.decisions import forget_decisions
    from npu_adapter.backends.xla.trial import PAIRS
    from npu_adapter.session import NpuSession

    rows, details = [], {}
    budget = 1.0 if ctx.quick else 4.0
    env = bench_env()
    plain_hex = npu_config_proto().SerializeToString().hex()
    for name in models_needed(ctx.quick):
        spec = ctx.model(name)
        fetches = list(spec.fetches) + list(spec.targets)
        forget_decisions()
        # ---- fresh processes: plain, xla with a cold cache directory, then warm
        with tempfile.TemporaryDirectory(prefix="npu-bench-xla-") as cache_dir:
            options = {"npu_adapter_backend": "xla", "graph_compiler_cache_dir": cache_dir}
            xla_hex = npu_config_proto(options).SerializeToString().hex()
            deciding = 2 * (1 + 2 * PAIRS) + 2
            fresh_plain = _fresh(name, plain_hex, deciding, env, plain=True)
            cold = _fresh(name, xla_hex, deciding, env)
            warm = _fresh(name, xla_hex, deciding, env)
            report_lines = _report_decisions(spec, options, 2 if spec.init_op else 1)
        forget_decisions()
        # ---- in-process: first run, then steady state once decided
        plain_config = npu_config_proto()
        xla_config = npu_config_proto({"npu_adapter_backend": "xla"})
        plain, plain_first, plain_out = _first_run(
            lambda g=spec.graph_def, c=plain_config: plain_session(
                graph=import_graph(g), config=c),
            fetches, spec.feeds, spec.init_op)
        xla, xla_first, xla_out = _first_run(
            lambda g=spec.graph_def, c=xla_config: NpuSession(graph=import_graph(g), config=c),
            fetches, spec.feeds, spec.init_op)
        try:
            cases = {"plain": lambda s=plain, f=fetches, d=spec.feeds: s.run(f, d),
                     "xla": lambda s=xla, f=fetches, d=spec.feeds: s.run(f, d)}
            deciding_runs = _run_until_decided(cases["xla"], xla, fetches, spec.feeds)
            for _ in range(2):
                for case in cases.values():
                    case()
            compiles_warm = runner_of(xla).runtime_stats().compiles
            number = autorange(cases["plain"], min_time=0.02, max_number=50)
            gc.collect()
            stats = interleave(cases, warmup=1, repeat=41, number=number, budget=budget,
                               min_repeat=5, collect=False)
            runtime = runner_of(xla).runtime_stats()
            difference = None
            if spec.kind == "inference":
                difference = _max_difference(xla.run(fetches, spec.feeds),
                                             plain.run(fetches, spec.feeds))
        finally:
            plain.close()
            xla.close()
        statuses = [st.status for st in runtime.clusters.values()]
        row_details = {
            "clusters_compiled": statuses.count("compiled"),
            "clusters_on_tensorflow": statuses.count("tensorflow"),
            "clusters_fallback": statuses.count("fallback"),
            "decisions": _decisions(runtime),
            "runs_to_decide": deciding_runs,
            "compile_seconds": round(runtime.compile_seconds, 3),
            "compiles_after_warmup": compiles_warm,
            "compiles_at_end": runtime.compiles,
            "max_relative_difference": difference,
            "calls_per_sample": number,
        }
        fresh_details = {
            "plain": fresh_plain, "cold": cold, "warm": warm,
            "report_decisions": report_lines,
        }
        details[name] = dict(row_details, fresh_processes=fresh_details)
        ms = {kind: s.scaled(1e3) for kind, s in stats.items()}
        rows.append(make_row(name, "steady-state run", "ms", ms["xla"], baseline=ms["plain"],
                             details=row_details))
        rows.append(make_row(name, "first run, in-process (n=1)", "s", Stats((xla_first,)),
                             baseline=Stats((plain_first,))))
        plain_fresh = Stats((fresh_plain["first_run_s"],))
        rows.append(make_row(name, "first run, fresh process, cold cache (n=1)", "s",
                             Stats((cold["first_run_s"],)), baseline=plain_fresh,
                             details={k: cold[k] for k in ("compiles", "decisions_measured",
                                                           "decisions_remembered")}))
        rows.append(make_row(name, "first run, fresh process, warm cache (n=1)", "s",
                             Stats((warm["first_run_s"],)), baseline=plain_fresh,
                             details={k: warm[k] for k in ("compiles", "decisions_measured",
                                                           "decisions_remembered",
                                                           "cache_hits", "cache_misses")}))
        # What the first runs cost as a whole: the compilations and the deciding runs of a
        # cold cache directory are paid here, not in the first run.
        plain_runs = Stats((fresh_plain["first_run_s"] + fresh_plain["runs_s"],))
        for label, side in (("cold", cold), ("warm", warm)):
            rows.append(make_row(
                name, f"first {deciding + 1} runs, fresh process, {label} cache (n=1)", "s",
                Stats((side["first_run_s"] + side["runs_s"],)), baseline=plain_runs))
        ctx.log(f"xla {name}: {ms['xla'].median:.2f} ms vs plain {ms['plain'].median:.2f} ms "
                f"(n={ms['xla'].n}); decided in {deciding_runs} runs: "
                + "; ".join(f"{c} {d['status']}" for c, d in row_details["decisions"].items())
                + f"; first run {xla_first:.2f} s vs {plain_first:.2f} s; fresh process "
                f"plain {fresh_plain['first_run_s']:.2f} s, cold {cold['first_run_s']:.2f} s, "
                f"warm {warm['first_run_s']:.2f} s (compiles {warm['compiles']}, measured "
                f"{warm['decisions_measured']}); max rel diff {difference}")
        del cases, plain, xla
        ctx.release(name)
        gc.collect()
    notes = [
        "Same GraphDef imported twice, same feeds; plain = tf.compat.v1.Session, xla = "
        "NpuSession with npu_adapter_backend=xla (full offload). The xla side runs until every "
        "compiled cluster is decided (compiled or TensorFlow's kernels, measured on its first "
        "runs) before the steady state is timed.",
        "First run = session creation + init + first run, one sample per side; in a fresh "
        "process: plain, xla with an empty graph_compiler_cache_dir, xla again with that "
        "directory (warm: decisions and executables on disk); each process then runs as many "
        "more runs as two clusters take to decide, and 'first N runs' is the time of them all "
        "(session creation included).",
        "Steady state: 2 warm-up calls each, then ABBA rounds; ratio = median of per-round "
        "ratios. compiles_after_warmup == compiles_at_end shows no recompilation.",
    ]
    return SectionResult(rows, notes, details)


# --------------------------------------------------------------------------------------------
# Worker (a fresh interpreter per first-run measurement)
# --------------------------------------------------------------------------------------------


def worker_main(argv=None):
    """Load one model, time the first run of one session, run it ``--runs`` more times (each
    timed), close it (timed), print JSON (with the xla runtime's counts)."""
    parser = argparse.ArgumentParser(prog="python -m bench.bench_xla",
                                     description="one fresh-process first run of the xla section")
    parser.add_argument("--model", required=True)
    parser.add_argument("--config-hex", required=True, help="serialized ConfigProto in hex")
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--plain", action="store_true", help="a plain tf.compat.v1.Session")
    args = parser.parse_args(argv)

    import os

    for key, value in bench_env({}).items():
        if key != "PYTHONPATH":
            os.environ.setdefault(key, value)
    import tensorflow as tf

    from bench import models

    config = tf.compat.v1.ConfigProto.FromString(bytes.fromhex(args.config_hex))
    session_cls = tf.compat.v1.Session
    if not args.plain:
        from npu_adapter.session import NpuSession

        session_cls = NpuSession
    spec = models.get_model(args.model)
    graph = import_graph(spec.graph_def)
    fetches = list(spec.fetches) + list(spec.targets)
    spec.graph_def = None
    start = time.perf_counter()
    sess = session_cls(graph=graph, config=config)
    if spec.init_op:
        sess.run(spec.init_op)
    sess.run(fetches, spec.feeds)
    first_run_s = time.perf_counter() - start
    each = []
    for _ in range(args.runs):
        start = time.perf_counter()
        sess.run(fetches, spec.feeds)
        each.append(time.perf_counter() - start)
    runs_s = sum(each)
    report = {"model": args.model, "first_run_s": first_run_s, "runs": args.runs,
              "runs_s": runs_s, "each_run_s": [round(t, 4) for t in each]}
    if not args.plain:
        stats = runner_of(sess).runtime_stats()
        report.update(compiles=stats.compiles, compile_seconds=stats.compile_seconds,
                      background_compiles=stats.background_compiles,
                      decisions_measured=stats.decisions_measured,
                      decisions_remembered=stats.decisions_remembered,
                      cache_hits=stats.cache_hits, cache_misses=stats.cache_misses,
                      statuses={name: st.status for name, st in stats.clusters.items()})
    start = time.perf_counter()
    sess.close()  # waits for a build under way
    report["close_s"] = time.perf_counter() - start
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
