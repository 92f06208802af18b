"""Section ``steady``: steady-state ``NpuSession.run`` vs plain ``Session.run`` per model.

Per model, the GraphDef is imported into two graphs. One gets a plain ``tf.compat.v1.Session``,
the other an :class:`~npu_adapter.session.NpuSession`; both get the same ``ConfigProto`` with an
``NpuOptimizer`` entry and default options (full offload; TensorFlow ignores the unknown custom
optimizer in the plain session). Both run the model's fetches (and train op) with the same feeds.
The first run of each (session creation through the first ``run`` returning; the plain and NPU
sessions of a model are created in alternating order from model to model) is reported as the
in-process first-run latency (one sample). Then a few warm-up calls, and runs alternate round by
round (ABBA) until the time budget of the model is spent.
"""

import gc

import numpy as np

from bench.harness import (
    SectionResult,
    Stats,
    Target,
    autorange,
    import_graph,
    interleave,
    make_row,
    npu_config_proto,
    plain_session,
)
from npu_adapter.session import runner_of

__all__ = ["NAME", "TITLE", "models_needed", "run", "STEADY_TARGET", "open_sessions"]

NAME = "steady"
TITLE = "Steady-state NpuSession.run vs plain Session.run (same graph, feeds, ConfigProto)"

FULL_MODELS = ("resnet50", "mobilenet_v2", "inception_v3", "bert_encoder", "lenet_train")
QUICK_MODELS = ("small_mlp", "lenet_train")

STEADY_TARGET = Target("<= 1.02x", "ratio", 1.02)


def models_needed(quick):
    """Models this section loads."""
    return list(QUICK_MODELS if quick else FULL_MODELS)


def _timed_first_run(make_session, fetches, feeds, init_op):
    import time

    start = time.perf_counter()
    sess = make_session()
    if init_op:
        sess.run(init_op)
    out = sess.run(fetches, feeds)
    return sess, time.perf_counter() - start, out


def open_sessions(graph_def, fetches, feeds, init_op=None, options=None, npu_first=False):
    """Plain and NPU sessions on two imports of ``graph_def``, each created and run once.

    Returns ``{"plain": (session, first-run seconds, first outputs), "npu": (...)}``. The plain
    session gets the same ``ConfigProto`` as the NPU one (``options`` in its ``NpuOptimizer``).
    """
    from npu_adapter.session import NpuSession

    config = npu_config_proto(options)
    makers = {
        "plain": lambda graph: plain_session(graph=graph, config=config),
        "npu": lambda graph: NpuSession(graph=graph, config=config),
    }
    order = ["npu", "plain"] if npu_first else ["plain", "npu"]
    opened = {}
    for kind in order:
        graph = import_graph(graph_def)
        opened[kind] = _timed_first_run(lambda m=makers[kind], g=graph: m(g), fetches, feeds,
                                        init_op)
    return {kind: opened[kind] for kind in ("plain", "npu")}


def _same(a, b):
    try:
        return all(np.array_equal(x, y) for x, y in zip(a, b))
    except (TypeError, ValueError):
        return False


def run(ctx):
    """Measure every model; two rows per model (steady state, in-process first run)."""
    rows = []
    details = {}
    budget = 1.0 if ctx.quick else 6.0
    for k, name in enumerate(models_needed(ctx.quick)):
        spec = ctx.model(name)
        fetches = list(spec.fetches) + list(spec.targets)
        opened = open_sessions(spec.graph_def, fetches, spec.feeds, spec.init_op,
                               npu_first=k % 2 == 1)
        plain, plain_first, plain_out = opened["plain"]
        npu, npu_first, npu_out = opened["npu"]
        try:
            result = runner_of(npu).rewrite_result(fetches, spec.feeds)
            clusters = len(result.clusters) if result is not None else 0
            feeds = spec.feeds
            cases = {"plain": lambda s=plain, f=fetches, d=feeds: s.run(f, d),
                     "npu": lambda s=npu, f=fetches, d=feeds: s.run(f, d)}
            for _ in range(2):  # warm-up beyond the first run (kernels, allocator, caches)
                for case in cases.values():
                    case()
            number = autorange(cases["plain"], min_time=0.02, max_number=50)
            gc.collect()
            # Runs make little garbage; a collection per block would cost more than the block.
            stats = interleave(cases, warmup=1, repeat=41, number=number, budget=budget,
                               min_repeat=5, collect=False)
            same = None
            if spec.kind == "inference":  # training steps differ in count (calibration calls)
                same = _same(plain.run(fetches, spec.feeds), npu.run(fetches, spec.feeds))
        finally:
            plain.close()
            npu.close()
        row_details = {"clusters": clusters, "calls_per_sample": number,
                       "first_outputs_equal": _same(plain_out, npu_out),
                       "outputs_equal_after_runs": same}
        details[name] = row_details
        ms = {kind: s.scaled(1e3) for kind, s in stats.items()}
        rows.append(make_row(name, "steady-state run", "ms", ms["npu"], baseline=ms["plain"],
                             target=STEADY_TARGET, details=row_details))
        rows.append(make_row(name, "first run, in-process (n=1)", "s", Stats((npu_first,)),
                             baseline=Stats((plain_first,))))
        ratio = rows[-2]["ratio"]["median"]
        ctx.log(f"steady {name}: npu {ms['npu'].median:.2f} ms vs plain "
                f"{ms['plain'].median:.2f} ms, ratio {ratio:.3f} (n={ms['npu'].n}); first run "
                f"{npu_first:.2f} s vs {plain_first:.2f} s")
        del opened, plain, npu, cases
        gc.collect()
    notes = [
        "Same GraphDef imported twice, same feeds, same ConfigProto (NpuOptimizer entry, default "
        "options = full offload); plain = tf.compat.v1.Session, NPU = NpuSession. First run and "
        "2 more calls each excluded; then one warm-up round and ABBA rounds of blocks of calls "
        "until the model's time budget is spent; ratio = median of per-round ratios.",
        "The in-process first run is one sample per side (the fresh-process section repeats it "
        "without in-process caches).",
    ]
    return SectionResult(rows, notes, details)
