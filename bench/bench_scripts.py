"""Section ``scripts``: whole training scripts, import to exit, vs a pass-through ``npu_bridge``.

Users time a script whole: ``python train.py`` from TensorFlow's import to the process's exit.
Each script of ``bench/scripts/`` runs unchanged in fresh processes, with the real ``npu_bridge``
(the NPU side) and with a pass-through ``npu_bridge`` that offers the same names and ignores
every option (``bench/scripts/passthrough``, first on ``PYTHONPATH``: plain TensorFlow sessions,
TensorFlow's loss-scale optimizer, loop sinking as one run per step). The sides alternate
process by process (ABBA); the figure is the wall time of the process, the ratio the median of
per-round ratios.

- ``keras_tcn``: Keras custom layers (a dilated causal residual block, a layer that calls
  ``add_update``) built through ``tf.keras``, ``set_keras_session_npu_config``, three epochs of
  ``Model.fit``, launched through a TF1 alias launcher (``bench/scripts/tf1_launch.py``);
- ``session_loop``: a ``tf.layers`` CNN on ``tf.data`` trained in a ``Session`` loop with
  ``util.set_iteration_per_loop`` (300 steps, 10 per run) and an evaluation every 5 runs;
- ``loss_scale_gan``: a DCGAN-style loop fed by ``feed_dict``, two Adam optimizers each wrapped
  in ``NPULossScaleOptimizer``.

On TensorFlow >= 2.16 both sides get ``TF_USE_LEGACY_KERAS=1`` (``tf.layers`` and TF1 Keras
need Keras 2 there, and the pass-through does not set it); on 2.15 neither does.

Run alone, optionally with other checkouts of the project as further sides (e.g. ``main``, to
measure a change before and after; the checkout's own ``npu_bridge`` and ``npu_adapter`` are
imported, first on ``PYTHONPATH``)::

    python -m bench.bench_scripts [--quick] [--repeats N] [--script NAME ...] [--side NAME=DIR]
"""

import argparse
import compileall
import json
import os
import sys

from bench.harness import (
    REPO_ROOT,
    BenchContext,
    SectionResult,
    Target,
    bench_env,
    make_row,
    run_process,
    summarize,
)

__all__ = ["NAME", "TITLE", "SCRIPTS", "SCRIPT_TARGET", "models_needed", "run", "main"]

NAME = "scripts"
TITLE = "Whole training scripts, import to exit (real npu_bridge vs a pass-through one)"

SCRIPTS_DIR = REPO_ROOT / "bench" / "scripts"
PASSTHROUGH_DIR = SCRIPTS_DIR / "passthrough"

SCRIPTS = {  # name -> command line after the interpreter
    "keras_tcn": [str(SCRIPTS_DIR / "tf1_launch.py"), str(SCRIPTS_DIR / "keras_tcn.py")],
    "session_loop": [str(SCRIPTS_DIR / "session_loop.py")],
    "loss_scale_gan": [str(SCRIPTS_DIR / "loss_scale_gan.py")],
}
QUICK_SCRIPTS = ("keras_tcn",)
# Processes per side and script: a process takes 6-20 s here, so 3 rounds of 3 scripts and 2
# sides already take about 3 minutes.
FULL_REPEATS = 3

SCRIPT_TARGET = Target("<= 1.1x", "ratio", 1.1)


def models_needed(quick):
    """Models this section loads (none: the scripts build their own)."""
    return []


def _legacy_keras_env():
    """``TF_USE_LEGACY_KERAS=1`` where TensorFlow's own Keras is Keras 3 (TensorFlow >= 2.16)."""
    import tensorflow as tf

    major, minor = (int(part) for part in tf.__version__.split(".")[:2])
    return {"TF_USE_LEGACY_KERAS": "1"} if (major, minor) >= (2, 16) else {}


def _side_env(base, first_on_path):
    """The benchmark environment with ``first_on_path`` before everything on ``PYTHONPATH``."""
    env = dict(base)
    env["PYTHONPATH"] = ":".join([str(first_on_path), env["PYTHONPATH"]])
    return env


def _sides(extra_sides):
    """Side name -> environment: ``passthrough``, ``npu`` (this checkout), and ``extra_sides``
    (name -> checkout folder)."""
    base = bench_env()
    base.pop("TF_USE_LEGACY_KERAS", None)
    base.update(_legacy_keras_env())
    sides = {"passthrough": _side_env(base, PASSTHROUGH_DIR), "npu": _side_env(base, REPO_ROOT)}
    for name, root in (extra_sides or {}).items():
        sides[name] = _side_env(base, root)
    return sides


def _compile_bytecode(roots):
    """Byte-compile the packages the sides import, as ``pip install`` does, so that no side
    compiles Python source inside its timed process."""
    for root in roots:
        for package in ("npu_adapter", "passes", "npu_bridge", "hccl"):
            if (root / package).is_dir():
                compileall.compile_dir(str(root / package), quiet=1)
    compileall.compile_dir(str(PASSTHROUGH_DIR), quiet=1)


def _run_script(script, env):
    proc = run_process([sys.executable, "-W", "ignore", *SCRIPTS[script]], env=env,
                       timeout=600).check()
    return proc.wall_seconds, proc.json()


def run(ctx, scripts=None, repeats=None, extra_sides=None):
    """Time each script (``scripts``, default all; quick: ``keras_tcn``) in fresh processes per
    side, ``repeats`` rounds (ABBA); rows compare the NPU side (and each extra side) with the
    pass-through."""
    from pathlib import Path

    extra_sides = {name: Path(root).resolve() for name, root in (extra_sides or {}).items()}
    _compile_bytecode([REPO_ROOT, *extra_sides.values()])
    sides = _sides(extra_sides)
    scripts = list(scripts or (QUICK_SCRIPTS if ctx.quick else SCRIPTS))
    repeats = repeats or (1 if ctx.quick else FULL_REPEATS)
    rows, details = [], {}
    k = 0
    for script in scripts:
        if not ctx.quick:
            for env in sides.values():  # one untimed process per side: disk caches warm
                _run_script(script, env)
        wall = {side: [] for side in sides}
        printed = {side: [] for side in sides}
        for _ in range(repeats):
            order = list(sides) if k % 2 == 0 else list(reversed(sides))
            k += 1
            for side in order:
                seconds, output = _run_script(script, sides[side])
                wall[side].append(seconds)
                printed[side].append(output)
        stats = {side: summarize(values) for side, values in wall.items()}
        details[script] = {"seconds": wall, "printed": printed}
        for side in sides:
            if side == "passthrough":
                continue
            label = "" if side == "npu" else f", {side}"
            rows.append(make_row(script, f"whole script{label} (n={repeats})", "s", stats[side],
                                 baseline=stats["passthrough"], target=SCRIPT_TARGET))
        ctx.log(f"scripts {script}: " + ", ".join(
            f"{side} {stats[side].median:.1f} s" for side in sides))
    legacy = ", ".join(f"{k}={v}" for k, v in _legacy_keras_env().items())
    notes = [
        "One fresh process per measurement, from the interpreter's start to its exit (the "
        "script imports TensorFlow and npu_bridge, builds, trains and exits); the sides "
        "alternate (ABBA) after one untimed process each.",
        "Baseline: the same script with a pass-through npu_bridge (bench/scripts/passthrough) "
        "that offers the same names and ignores every option.",
        f"Both sides: {legacy or 'TF_USE_LEGACY_KERAS unset'} (set where TensorFlow's own "
        "Keras is Keras 3).",
    ]
    return SectionResult(rows, notes, details)


def main(argv=None):
    """Run this section alone; print one line per script and side, and the ratios."""
    parser = argparse.ArgumentParser(prog="python -m bench.bench_scripts",
                                     description=TITLE)
    parser.add_argument("--quick", action="store_true", help="keras_tcn only, one round")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (processes per side)")
    parser.add_argument("--script", nargs="+", choices=list(SCRIPTS), default=None)
    parser.add_argument("--side", action="append", default=[], metavar="NAME=DIR",
                        help="another checkout of the project to time as a side of its own")
    parser.add_argument("--json", metavar="PATH", help="also write the rows and details here")
    args = parser.parse_args(argv)
    extra = {}
    for item in args.side:
        name, sep, root = item.partition("=")
        if not sep or not name or name in ("npu", "passthrough"):
            parser.error(f"--side {item}: expected NAME=DIR with a NAME other than npu and "
                         "passthrough")
        extra[name] = root
    for key, value in bench_env({}).items():
        if key != "PYTHONPATH":
            os.environ.setdefault(key, value)
    result = run(BenchContext(quick=args.quick), scripts=args.script, repeats=args.repeats,
                 extra_sides=extra)
    for row in result.rows:
        ratio = row["ratio"]
        print(f"{row['case']:16s} {row['metric']:28s} {row['value']['median']:7.2f} s vs "
              f"{row['baseline']['median']:7.2f} s  ratio {ratio['median']:.2f}x "
              f"[{ratio['min']:.2f}-{ratio['max']:.2f}]")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": result.rows, "notes": result.notes, "details": result.details},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
