"""``python -m bench``: run the benchmark sections, print one table, write a JSON report.

Usage::

    python -m bench                          # under 10 minutes on 2 cores (see ON_REQUEST)
    python -m bench --all                    # with BERT-base's fresh processes and xla
    python -m bench --quick                  # tiny sizes and small models (well under a minute)
    python -m bench --only steady tiny       # some sections
    python -m bench --json out.json          # default: bench/results/latest.json

Sections (one module each, ``bench/bench_<section>.py``):

- ``rewrite``: rewrite pipeline time per model vs ``tf.import_graph_def`` of the same GraphDef;
- ``scaling``: GraphView index and rewrite (full offload, mix mode) on 10k/30k/100k-node
  synthetic graphs vs import, and the scaling exponent;
- ``steady``: steady-state ``NpuSession.run`` vs ``Session.run`` per model (and the in-process
  first run);
- ``tiny``: per-call overhead in microseconds on a tiny graph;
- ``gears``: gear dispatch overhead (3 gears, exact policy) vs the same graph without gears;
- ``precision``: precision emulation (rewrite time, steady-state run) vs emulation off;
- ``fresh``: first-run latency and peak RSS, each in a fresh interpreter;
- ``fresh_bert``: the same for BERT-base, on request (``--only fresh_bert`` or ``--all``);
- ``dump``: per-run cost of data dump, overflow detection and profiling (off: none);
- ``loop_sinking``: training steps/s with ``iterations_per_loop`` 1, 10, 100 vs plain
  TensorFlow's one run per step (small MLP on ``tf.data``, batch 32);
- ``sessions``: a new session per request on one graph (create, run once, close) vs plain;
- ``xla``: the xla backend vs plain TensorFlow per model (steady state, first run); on
  request (``--only xla`` or ``--all``), see ``ON_REQUEST``;
- ``scripts``: whole training scripts (a Keras model build and fit, session training loops),
  each a fresh process from import to exit, vs the same script with a pass-through
  ``npu_bridge``; on request (``--only scripts`` or ``--all``).

TensorFlow is imported only after the environment is set (``TF_ENABLE_ONEDNN_OPTS=0``,
``TF_CPP_MIN_LOG_LEVEL=2``, ``NPU_ADAPTER_CHECK_PASSES`` unset), in this process and in every
worker process.
"""

import argparse
import datetime
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

from bench.harness import (
    REPO_ROOT,
    SCHEMA,
    BenchContext,
    bench_env,
    format_table,
    machine_info,
    validate_report,
)

__all__ = ["DEFAULT_JSON", "SECTIONS", "NOISE_NOTE", "main", "build_report", "parse_args"]

SECTIONS = {
    "rewrite": "bench.bench_rewrite",
    "scaling": "bench.bench_scaling",
    "steady": "bench.bench_steady",
    "tiny": "bench.bench_tiny",
    "gears": "bench.bench_gears",
    "fresh": "bench.bench_fresh",
    "fresh_bert": "bench.bench_fresh_bert",
    "precision": "bench.bench_precision",
    "dump": "bench.bench_dump",
    "loop_sinking": "bench.bench_loop_sinking",
    "sessions": "bench.bench_sessions",
    "xla": "bench.bench_xla",
    "scripts": "bench.bench_scripts",
}
"""Section name → module (run in this order)."""

ON_REQUEST = ("fresh_bert", "xla", "scripts")
"""Sections left out of a full ``python -m bench`` so that it stays under 10 minutes: BERT-base's
fresh processes (3.5 minutes), the xla backend (no targets, a minute of compiles) and whole
training scripts (18 processes, about 4 minutes);
``--only``, ``--all`` and ``--quick`` run them."""

DEFAULT_JSON = REPO_ROOT / "bench" / "results" / "latest.json"

NOISE_NOTE = (
    "Shared, noisy machine: other work may run at the same time. Every comparison alternates "
    "its cases round by round (ABBA) so noise hits both sides; figures are medians with "
    "[min-max] over rounds, ratios are medians of per-round ratios. Compare the load averages "
    "at start and end."
)


def parse_args(argv=None):
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="npu-adapter benchmarks: rewrite time, scaling, session overhead, "
                    "first-run latency, peak RSS, gear dispatch.")
    parser.add_argument("--quick", action="store_true",
                        help="tiny synthetic sizes, small models, few rounds (a smoke run)")
    parser.add_argument("--only", nargs="+", metavar="SECTION", choices=list(SECTIONS),
                        help=f"run only these sections ({', '.join(SECTIONS)})")
    parser.add_argument("--all", action="store_true",
                        help=f"also run the sections left out by default ({', '.join(ON_REQUEST)})")
    parser.add_argument("--json", metavar="PATH", default=str(DEFAULT_JSON),
                        help="where to write the JSON report (default: %(default)s)")
    parser.add_argument("--list", action="store_true", help="list the sections and exit")
    return parser.parse_args(argv)


def _prepare_environment():
    """Set the benchmark environment before TensorFlow is imported; say if it was too late."""
    late = "tensorflow" in sys.modules
    env = bench_env()
    for key in ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL"):
        os.environ[key] = env[key]
    os.environ.pop("NPU_ADAPTER_CHECK_PASSES", None)
    if late:
        return ["TensorFlow was imported before the runner set TF_ENABLE_ONEDNN_OPTS=0; "
                "run `python -m bench` in a fresh process for comparable figures."]
    return []


def _setup_models(ctx, modules):
    """Load (building when not cached) every model the sections need; time each once."""
    from bench import models

    needed = []
    for module in modules.values():
        for name in module.models_needed(ctx.quick):
            if name not in needed:
                needed.append(name)
    setup = {}
    for name in needed:
        cached = models.cache_path(name).exists()
        start = time.perf_counter()
        ctx.model(name)
        setup[name] = {"seconds": round(time.perf_counter() - start, 3), "was_cached": cached}
        ctx.log(f"setup {name}: {'loaded' if cached else 'built'} in "
                f"{setup[name]['seconds']:.1f} s")
    return setup


def build_report(*, command, quick, machine, environment, noise, setup, sections, total_seconds):
    """The JSON document (see ``bench.harness.validate_report``) from its parts."""
    targets = []
    for name, section in sections.items():
        for row in section["rows"]:
            if row["target"] is None:
                continue
            figure = row[row["target"]["on"]]
            targets.append({"section": name, "case": row["case"], "metric": row["metric"],
                            "target": row["target"], "figure": figure, "met": row["met"]})
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "quick": quick,
        "machine": machine,
        "environment": environment,
        "noise": noise,
        "setup": setup,
        "sections": sections,
        "targets": targets,
        "total_seconds": total_seconds,
    }


def _summary(doc):
    lines = []
    met = [t for t in doc["targets"] if t["met"]]
    missed = [t for t in doc["targets"] if not t["met"]]
    lines.append(f"Targets: {len(met)} met, {len(missed)} missed.")
    for t in missed:
        unit = "x" if t["target"]["on"] == "ratio" else ""
        lines.append(f"  MISSED {t['section']}: {t['case']} / {t['metric']}: "
                     f"{t['figure']['median']:.3g}{unit} (target {t['target']['text']})")
    for name, section in doc["sections"].items():
        if "error" in section:
            lines.append(f"  ERROR in section {name}: {section['error'].splitlines()[-1]}")
    return "\n".join(lines)


def main(argv=None):
    """Run the benchmark; print the table; write the JSON report. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.list:
        for name, module in SECTIONS.items():
            print(f"{name:12s} {module}")
        return 0
    started = time.perf_counter()
    env_notes = _prepare_environment()
    # A quick run is a smoke test of every section, the on-request ones included.
    selected = args.only or [name for name in SECTIONS
                             if args.all or args.quick or name not in ON_REQUEST]
    selected = [name for name in SECTIONS if name in selected]
    ctx = BenchContext(quick=args.quick)
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    ctx.log(f"sections: {', '.join(selected)}{' (quick)' if args.quick else ''}")
    modules = {name: importlib.import_module(SECTIONS[name]) for name in selected}
    import numpy as np
    import tensorflow as tf

    import npu_adapter

    setup = _setup_models(ctx, modules)
    sections = {}
    failed = False
    for name, module in modules.items():
        start = time.perf_counter()
        ctx.log(f"section {name}: {module.TITLE}")
        try:
            result = module.run(ctx)
            entry = {"title": module.TITLE, "rows": result.rows, "notes": result.notes,
                     "details": result.details}
        except Exception:  # a failing section must not lose the others' figures
            failed = True
            entry = {"title": module.TITLE, "rows": [], "notes": [], "details": {},
                     "error": traceback.format_exc()}
            ctx.log(f"section {name} FAILED:\n{entry['error']}")
        entry["seconds"] = round(time.perf_counter() - start, 2)
        sections[name] = entry
    machine = machine_info()
    noise = {"note": NOISE_NOTE, "load_average_start": [round(x, 2) for x in load_start]
             if load_start else None, "load_average_end": machine.pop("load_average")}
    environment = {
        "tensorflow": tf.__version__,
        "numpy": np.__version__,
        "npu_adapter": npu_adapter.__version__,
        "python_executable": sys.executable,
        "variables": {k: os.environ.get(k) for k in
                      ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL",
                       "NPU_ADAPTER_CHECK_PASSES")},
        "notes": env_notes,
    }
    command = "python -m bench" + ("".join(f" {a}" for a in argv) if argv else "")
    doc = build_report(command=command, quick=args.quick, machine=machine,
                       environment=environment, noise=noise, setup=setup, sections=sections,
                       total_seconds=round(time.perf_counter() - started, 1))
    validate_report(doc)
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

    print(f"npu-adapter benchmark, {doc['created']}, {command}")
    print(f"machine: {machine['cpu']}, {machine['cpus_usable']} usable CPUs, "
          f"{machine['memory_gb']} GB; TensorFlow {tf.__version__}, Python {machine['python']}")
    print(f"load average at start {noise['load_average_start']}, at end "
          f"{noise['load_average_end']}")
    print()
    print(format_table(sections))
    print()
    print(_summary(doc))
    print(f"Total {doc['total_seconds']:.0f} s. JSON: {path}")
    print(NOISE_NOTE)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
