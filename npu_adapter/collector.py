"""Keep Python's cyclic garbage collector out of rewrites and shadow-graph installs.

After ``import tensorflow`` a process holds some 270k long-lived Python objects, and a full
(generation 2) collection walks them all: about 120 ms on the benchmark machine, finding nothing.
CPython starts one once enough objects have *survived* younger collections. A rewrite allocates
tens of thousands of short-lived objects (NodeDef wrappers, index dicts, tuples); with the
collector running, those alive at a young collection are promoted, and a session's first run
often ends up paying that full collection (measured: 124 ms of a 0.68 s MobileNetV2 first run,
started while the first session imported the rewrite's modules; ``npu_adapter.session`` now
imports them itself).

The generation scans also made a third of a rewrite's time on 100k-node graphs (and indexing
superlinear). Nothing a rewrite or an install allocates forms reference cycles that need
collecting promptly, so they run with the collector paused: the temporaries die by reference
counting and never count towards a full collection. Only what survives the pause (the result,
the new shadow ops) is seen by the collector afterwards, as usual.
"""

import contextlib
import gc
import threading

__all__ = ["collector_paused"]

_LOCK = threading.Lock()
_state = {"depth": 0, "was_enabled": False}


@contextlib.contextmanager
def collector_paused():
    """Run the body with ``gc`` disabled; nests and works across threads (the collector is
    re-enabled when the last pause ends, and only if it was enabled when the first began)."""
    with _LOCK:
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()
