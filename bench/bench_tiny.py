"""Section ``tiny``: per-call overhead of ``NpuSession.run`` on a tiny graph, in microseconds.

The graph is ``y = tanh(x @ c + 1)`` with ``x`` a fed ``float32[4, 4]`` placeholder: the kernels
cost a few microseconds, so what is measured is the per-call cost of ``Session.run`` itself and
what the NPU session adds to it (signature lookup, fetch mapping, the cluster's function call).
Plain and NPU sessions are set up as in section ``steady``; blocks of calls alternate (ABBA).
``make_callable`` is measured the same way.
"""

import gc

import numpy as np
import tensorflow as tf

from bench.bench_steady import open_sessions
from bench.harness import SectionResult, Target, autorange, interleave, make_row
from npu_adapter.session import runner_of

__all__ = ["NAME", "TITLE", "models_needed", "run", "tiny_graph_def", "OVERHEAD_TARGET"]

NAME = "tiny"
TITLE = "Per-call overhead on a tiny graph (NpuSession vs plain Session, microseconds)"

OVERHEAD_TARGET = Target("<= +20 us/call", "delta", 20.0)


def models_needed(quick):
    """Models this section loads (none: the graph is built here)."""
    return []


def tiny_graph_def():
    """``y = tanh(x @ c + 1)``, ``x``: float32[4, 4] placeholder; fetch ``y:0``, feed ``x:0``."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 4], name="x")
        c = tf.constant(np.eye(4, dtype=np.float32) * 0.5, name="c")
        tf.tanh(tf.matmul(x, c) + 1.0, name="y")
    return graph.as_graph_def()


def run(ctx):
    """Two rows: ``Session.run`` with a feed_dict, and ``make_callable``."""
    feeds = {"x:0": np.full((4, 4), 0.25, np.float32)}
    opened = open_sessions(tiny_graph_def(), ["y:0"], feeds)
    plain, npu = opened["plain"][0], opened["npu"][0]
    repeat = 7 if ctx.quick else 25
    budget = 1.5 if ctx.quick else 8.0
    rows = []
    details = {}
    try:
        clusters = len(runner_of(npu).rewrite_result(["y:0"], feeds).clusters)
        x = feeds["x:0"]
        variants = {
            "Session.run(feed_dict)": {
                "plain": lambda: plain.run("y:0", feeds),
                "npu": lambda: npu.run("y:0", feeds),
            },
        }
        plain_call = plain.make_callable("y:0", ["x:0"])
        npu_call = npu.make_callable("y:0", ["x:0"])
        variants["make_callable"] = {"plain": lambda: plain_call(x), "npu": lambda: npu_call(x)}
        for label, cases in variants.items():
            number = autorange(cases["plain"], min_time=0.02, max_number=5000)
            gc.collect()
            stats = interleave(cases, warmup=1, repeat=repeat, number=number, budget=budget,
                               min_repeat=5, collect=False)
            us = {kind: s.scaled(1e6) for kind, s in stats.items()}
            row_details = {"calls_per_sample": number, "clusters": clusters}
            details[label] = row_details
            rows.append(make_row("tiny graph (4 nodes)", f"{label} per call", "us", us["npu"],
                                 baseline=us["plain"], details=row_details,
                                 target=OVERHEAD_TARGET if label.startswith("Session") else None))
            delta = rows[-1]["delta"]["median"]
            ctx.log(f"tiny {label}: npu {us['npu'].median:.1f} us vs plain "
                    f"{us['plain'].median:.1f} us (+{delta:.1f} us, n={us['npu'].n})")
    finally:
        plain.close()
        npu.close()
    notes = [
        "Blocks of calls (calibrated to >= 20 ms on the plain session) alternate ABBA; the "
        "figure is microseconds per call; delta = median of per-round differences.",
        "The target applies to Session.run with a feed_dict; make_callable is shown for "
        "reference (it maps the signature once).",
    ]
    return SectionResult(rows, notes, details)
