"""Section ``xla``: the xla backend vs plain TensorFlow, steady state and first run, per model.

Per model, the GraphDef is imported into two graphs: one runs in a plain
``tf.compat.v1.Session``, the other in an :class:`~npu_adapter.session.NpuSession` with
``npu_adapter_backend=xla`` (full offload; clusters XLA cannot compile run on the CPU
reference). The first run of each side (session creation, variable initialisation and the first
``run``; for xla that includes the rewrite and every XLA compilation the run needs) is one
sample; then, after warm-up, calls alternate round by round (ABBA) until the model's time budget
is spent. The details give the clusters compiled and fallen back, XLA compilations counted by
the runtime (none after the first run: the steady state compiles nothing), and the largest
difference of the outputs from plain TensorFlow (inference models).
"""

import gc
import time

import numpy as np

from bench.harness import (
    SectionResult,
    Stats,
    autorange,
    import_graph,
    interleave,
    make_row,
    npu_config_proto,
    plain_session,
)
from npu_adapter.session import runner_of

__all__ = ["NAME", "TITLE", "models_needed", "run"]

NAME = "xla"
TITLE = "xla backend (NpuSession, npu_adapter_backend=xla) vs plain Session.run"

FULL_MODELS = ("resnet50", "mobilenet_v2", "inception_v3", "bert_encoder", "lenet_train")
QUICK_MODELS = ("small_cnn", "lenet_train")


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


def run(ctx):
    """Two rows per model: steady-state run and in-process first run, xla vs plain."""
    from npu_adapter.session import NpuSession

    rows, details = [], {}
    budget = 1.0 if ctx.quick else 4.0
    for name in models_needed(ctx.quick):
        spec = ctx.model(name)
        fetches = list(spec.fetches) + list(spec.targets)
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
            "clusters_fallback": statuses.count("fallback"),
            "fallback_reasons": sorted(st.reason for st in runtime.clusters.values()
                                       if st.status == "fallback"),
            "compiles_after_warmup": compiles_warm,
            "compiles_at_end": runtime.compiles,
            "max_relative_difference": difference,
            "calls_per_sample": number,
        }
        details[name] = row_details
        ms = {kind: s.scaled(1e3) for kind, s in stats.items()}
        rows.append(make_row(name, "steady-state run", "ms", ms["xla"], baseline=ms["plain"],
                             details=row_details))
        rows.append(make_row(name, "first run, in-process (n=1)", "s", Stats((xla_first,)),
                             baseline=Stats((plain_first,))))
        ctx.log(f"xla {name}: {ms['xla'].median:.2f} ms vs plain {ms['plain'].median:.2f} ms "
                f"(n={ms['xla'].n}); first run {xla_first:.2f} s vs {plain_first:.2f} s; "
                f"clusters {row_details['clusters_compiled']} compiled, "
                f"{row_details['clusters_fallback']} fallback; compiles "
                f"{compiles_warm} -> {runtime.compiles}; max rel diff {difference}")
        del cases, plain, xla
        gc.collect()
    notes = [
        "Same GraphDef imported twice, same feeds; plain = tf.compat.v1.Session, xla = "
        "NpuSession with npu_adapter_backend=xla (full offload). First run = session creation "
        "+ init + first run (rewrite and XLA compilation included), one sample per side.",
        "Steady state: 2 warm-up calls each, then ABBA rounds; ratio = median of per-round "
        "ratios. compiles_after_warmup == compiles_at_end shows no recompilation.",
    ]
    return SectionResult(rows, notes, details)
