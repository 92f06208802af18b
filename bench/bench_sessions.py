"""Section ``sessions``: a new session per request on one graph, as online-inference scripts do.

Scripts written for Ascend often open a session per request or per image (the classifier of
CANN's TensorFlow online-inference guide, ModelZoo's STNet inference script): each session is
created on the same imported graph, runs the model once and is closed. Per model, both sides
(plain ``tf.compat.v1.Session`` and ``NpuSession``, same ``ConfigProto``, each on its own import
of the frozen GraphDef) open ``SESSIONS`` sessions in turn (``SESSIONS_OF`` for some models),
alternating side by side, and time
each one from creation through ``close``. Rows: the second session (the first pays one-time
costs such as the rewrite) and the median of sessions 2..N, each against plain; plus whether
session N costs what session 2 does (a session must leave nothing behind that slows the next).

A closed NpuSession's TensorFlow session serves the next one on a graph without state (see
``npu_adapter/session/reuse.py``), so a session per request skips TensorFlow's preparation of the
graph, which plain sessions pay every time. The ``reuse off`` side
(``npu_adapter_reuse_sessions=false``, on MobileNetV2) shows what a session costs without it:
the rewrite still comes from the cache, TensorFlow prepares the rewritten graph again.
"""

import gc
import time

from bench.harness import (
    SectionResult,
    Stats,
    Target,
    import_graph,
    make_row,
    npu_config_proto,
    plain_session,
    summarize,
)

__all__ = ["NAME", "TITLE", "models_needed", "run", "SESSIONS", "SESSIONS_OF",
           "PER_SESSION_TARGET"]

NAME = "sessions"
TITLE = "New session per request on one graph (create, run once, close) vs plain"

FULL_MODELS = ("mobilenet_v2", "resnet50")
QUICK_MODELS = ("small_mlp",)
REUSE_OFF_MODELS = ("mobilenet_v2", "small_mlp")  # the third side, reuse off
SESSIONS = 20
# ResNet-50's plain sessions cost 1.5 s each: 10 of them show the same (and keep the benchmark
# under 10 minutes); MobileNetV2 opens the 20 of the STNet script.
SESSIONS_OF = {"resnet50": 10}

PER_SESSION_TARGET = Target("<= 1.1x", "ratio", 1.1)


def models_needed(quick):
    """Models this section loads."""
    return list(QUICK_MODELS if quick else FULL_MODELS)


def _one_session(make_session, fetches, feeds):
    start = time.perf_counter()
    sess = make_session()
    try:
        sess.run(fetches, feeds)
    finally:
        sess.close()
    return time.perf_counter() - start


def run(ctx):
    """Time ``SESSIONS`` sessions per side and model."""

    from npu_adapter.session import NpuSession

    rows = []
    details = {}
    for name in models_needed(ctx.quick):
        sessions = 6 if ctx.quick else SESSIONS_OF.get(name, SESSIONS)
        spec = ctx.model(name)
        fetches = list(spec.fetches)
        config = npu_config_proto()
        graphs = {"plain": import_graph(spec.graph_def), "npu": import_graph(spec.graph_def)}
        makers = {
            "plain": lambda g=graphs["plain"], c=config: plain_session(graph=g, config=c),
            "npu": lambda g=graphs["npu"], c=config: NpuSession(graph=g, config=c),
        }
        if name in REUSE_OFF_MODELS:
            graphs["reuse_off"] = import_graph(spec.graph_def)
            off = npu_config_proto({"npu_adapter_reuse_sessions": False})
            makers["reuse_off"] = lambda g=graphs["reuse_off"], c=off: NpuSession(graph=g,
                                                                                 config=c)
        times = {side: [] for side in makers}
        nodes_before = len(graphs["npu"].as_graph_def().node)
        for k in range(sessions):
            order = sorted(makers, reverse=bool(k % 2))
            for side in order:
                gc.collect()
                times[side].append(_one_session(makers[side], fetches, spec.feeds))
        nodes_after = len(graphs["npu"].as_graph_def().node)
        later = {side: summarize(t[1:]).scaled(1e3) for side, t in times.items()}
        second = {side: Stats((t[1] * 1e3,)) for side, t in times.items()}
        # The last quarter against sessions 2..(N/4+1): a slowdown session after session shows.
        quarter = max(1, (sessions - 1) // 4)
        growth = summarize(times["npu"][-quarter:]).median / \
            summarize(times["npu"][1:1 + quarter]).median
        row_details = {"sessions": sessions, "first_session_ms": {
            side: round(t[0] * 1e3, 2) for side, t in times.items()},
            "user_graph_nodes_before_after": [nodes_before, nodes_after],
            "late_vs_early_npu_sessions": round(growth, 3)}
        details[name] = row_details
        rows.append(make_row(name, f"session 2..{sessions} (create, run, close)", "ms",
                             later["npu"], baseline=later["plain"],
                             target=PER_SESSION_TARGET, details=row_details))
        rows.append(make_row(name, "second session (n=1)", "ms", second["npu"],
                             baseline=second["plain"]))
        if "reuse_off" in later:
            rows.append(make_row(name, f"session 2..{sessions}, npu_adapter_reuse_sessions off",
                                 "ms", later["reuse_off"], baseline=later["plain"]))
        ctx.log(f"sessions {name}: npu {later['npu'].median:.1f} ms vs plain "
                f"{later['plain'].median:.1f} ms per session; late/early {growth:.2f}; user graph "
                f"{nodes_before} -> {nodes_after} nodes")
    notes = [
        "Each session: create on the model's imported graph, run the fetches once, close. Sides "
        "alternate session by session; the first session of each side is reported in details "
        "(it pays the rewrite, which later sessions take from the rewrite cache).",
        "late_vs_early_npu_sessions compares the last quarter of NPU sessions with the first "
        "quarter after the first: 1.0 means a session leaves nothing behind that slows the next.",
    ]
    return SectionResult(rows, notes, details)
