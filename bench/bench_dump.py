"""Section ``dump``: what data dump, overflow detection and profiling cost per run.

Per model, the graph is rewritten once per configuration and imported into a plain
``tf.compat.v1.Session``, the way the session will run it:

* ``plain``: the rewrite of a config without any dump or profiling option;
* ``off``: every dump option given but ``enable_dump``/``enable_dump_debug`` off and profiling
  off, run through the per-run path a session takes (``DumpSession.from_config`` → None, so the
  graph is not instrumented; ``SessionProfiler.before_run``/``after_run`` around each run). The
  target: steady-state ratio <= 1.02 against ``plain`` — dump off costs nothing;
* with it on (for information, against ``plain``): a tensor dump of every op at every step,
  the statistics dump, overflow detection without overflows, a dump whose ``dump_step`` excludes
  the measured steps (the reporting ops run but write nothing), and profiling.

Runs alternate round by round (ABBA) within each pair. Dumps go to a temporary directory,
removed afterwards.
"""

import gc
import io
import json
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from bench.harness import SectionResult, Target, autorange, interleave, make_row

__all__ = ["NAME", "TITLE", "models_needed", "run", "OFF_TARGET"]

NAME = "dump"
TITLE = "Data dump, overflow detection and profiling: cost per run (plain Session)"

FULL_MODELS = ("small_cnn", "small_mlp", "bert_tiny", "lenet_train_resource")
QUICK_MODELS = ("small_mlp",)

OFF_TARGET = Target("<= 1.02x", "ratio", 1.02)


def models_needed(quick):
    """Models this section loads."""
    return list(QUICK_MODELS if quick else FULL_MODELS)


class _Runner:
    """One rewritten (and maybe instrumented) model in its own graph and session."""

    def __init__(self, spec, options, workdir):
        import npu_adapter
        from npu_adapter.config import NpuConfig
        from npu_adapter.datadump import DumpSession
        from npu_adapter.profiling import SessionProfiler

        config = NpuConfig.from_dict(options)
        fetches = list(spec.fetches)
        result = npu_adapter.rewrite(spec.graph_def, config, fetches=fetches,
                                     targets=list(spec.targets), feeds=list(spec.feeds))
        self.dump = DumpSession.from_config(config, stream=io.StringIO(), progress_interval=0)
        graph_def = self.dump.instrument(result.graph_def) if self.dump else result.graph_def
        self.instrumented = graph_def is not result.graph_def
        self.profiler = SessionProfiler(config, environ={}, stream=io.StringIO(),
                                        progress_interval=0)
        self.profiler.register_graph(graph_def)
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
            if spec.init_op:
                # The user's graph beside it initialises the same (shared_name) variables.
                tf.compat.v1.import_graph_def(spec.graph_def, name="user")
        self.session = tf.compat.v1.Session(graph=self.graph)
        if spec.init_op:
            self.session.run(f"user/{spec.init_op}")
        self.fetches = [result.tensor_map[f] for f in fetches] + [
            result.op_map[t] for t in spec.targets]
        self.feeds = spec.feeds
        self.workdir = workdir

    def __call__(self):
        options, metadata = self.profiler.before_run()
        out = self.session.run(self.fetches, self.feeds, options=options, run_metadata=metadata)
        self.profiler.after_run(metadata)
        return out

    def plain_call(self):
        return self.session.run(self.fetches, self.feeds)

    def close(self):
        self.session.close()
        self.profiler.close()
        if self.dump:
            self.dump.close()


def _configs(workdir):
    dump_dir = f"{workdir}/dump"
    prof = json.dumps({"output": f"{workdir}/prof", "training_trace": "on"})
    every = {"dump_path": dump_dir, "dump_mode": "all", "dump_step": "0|2-5",
             "dump_layer": "", "dump_data": "tensor", "dump_debug_mode": "all"}
    return {
        "off": {**every, "enable_dump": False, "enable_dump_debug": False,
                "profiling_mode": False, "profiling_options": prof},
        "tensor dump, every op, every step": {"enable_dump": True, "dump_path": dump_dir,
                                              "dump_mode": "all"},
        "stats dump, every op, every step": {"enable_dump": True, "dump_path": dump_dir,
                                             "dump_mode": "all", "dump_data": "stats"},
        "overflow detection (no overflow)": {"enable_dump_debug": True, "dump_path": dump_dir},
        "dump on, dump_step excludes the steps": {"enable_dump": True, "dump_path": dump_dir,
                                                  "dump_step": "0"},
        "profiling (FULL_TRACE + files)": {"profiling_mode": True, "profiling_options": prof},
    }


def run(ctx):
    """Per model: the ``off`` row with its target, then one row per way of turning it on."""
    import os

    rows, details = [], {}
    budget = 1.0 if ctx.quick else 2.5
    for name in models_needed(ctx.quick):
        spec = ctx.model(name)
        workdir = tempfile.mkdtemp(prefix="npu-adapter-bench-dump-")
        os.makedirs(f"{workdir}/dump")
        try:
            base = {"mix_compile_mode": False}
            plain = _Runner(spec, base, workdir)
            configs = _configs(workdir)
            model_details = {}
            try:
                for label, extra in configs.items():
                    if ctx.quick and label not in ("off", "tensor dump, every op, every step"):
                        continue
                    other = _Runner(spec, {**base, **extra}, workdir)
                    try:
                        same = all(np.array_equal(a, b) for a, b in
                                   zip(plain.plain_call()[:len(spec.fetches)],
                                       other()[:len(spec.fetches)]))
                        for _ in range(2):
                            plain.plain_call()
                            other()
                        number = autorange(plain.plain_call, min_time=0.02, max_number=200)
                        gc.collect()
                        stats = interleave({"plain": plain.plain_call, "other": other},
                                           warmup=1, repeat=41, number=number, budget=budget,
                                           min_repeat=5, collect=False)
                        ms = {k: s.scaled(1e3) for k, s in stats.items()}
                        row_details = {"instrumented": other.instrumented,
                                       "outputs_equal": bool(same),
                                       "calls_per_sample": number}
                        model_details[label] = row_details
                        rows.append(make_row(name, f"run, {label}", "ms", ms["other"],
                                             baseline=ms["plain"], details=row_details,
                                             target=OFF_TARGET if label == "off" else None))
                        ctx.log(f"dump {name} [{label}]: {ms['other'].median:.3f} ms vs plain "
                                f"{ms['plain'].median:.3f} ms, ratio "
                                f"{rows[-1]['ratio']['median']:.3f}")
                    finally:
                        other.close()
            finally:
                plain.close()
            details[name] = model_details
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        gc.collect()
    notes = [
        "plain = the model's rewrite without dump or profiling options, in a plain "
        "tf.compat.v1.Session; each other configuration is rewritten and run the same way, "
        "through DumpSession.from_config / instrument and SessionProfiler.before_run / "
        "after_run as a session runs it. ABBA rounds; ratio = median of per-round ratios.",
        "'off' gives every dump option but leaves the switches off: the graph is not "
        "instrumented (details.instrumented) and the per-run hooks return at once.",
        "The 'on' rows write files to a temporary directory on every step (tmpfs or disk: the "
        "figure depends on it) and are for information only.",
    ]
    return SectionResult(rows, notes, details)
