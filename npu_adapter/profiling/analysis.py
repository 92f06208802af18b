"""What a profile says: the training trace of each step and the time per op and op type.

Training trace (the ``step_trace`` files), per step, in µs:

* ``FP Start``: start of the ``fp_point`` op; when ``fp_point`` is empty, of the step's first
  computing cluster op outside the backward pass (the first op of the forward pass on the
  device; constants, identities and variable reads do not count), else of its first computing op;
* ``BP End``: end of the ``bp_point`` op; when empty, of the last op of the backward pass (the
  last-ending op under a ``gradients`` name scope or of a ``*Grad`` type), else of the last
  cluster op;
* ``Iteration End``: end of the step's last op; ``Iteration Time``: from the previous step's end
  (or this step's first op) to ``Iteration End``;
* ``FP to BP Time`` = ``BP End - FP Start``; ``Iteration Refresh`` = ``Iteration End - BP End``
  (the weight update after the backward pass);
* ``Data Aug Bound``: ``FP Start`` minus the previous step's end (or this step's first op): the
  time the step waited before the forward pass; ``Data Wait`` is the time spent in input ops
  (``IteratorGetNext``, queue dequeues) of the step.

Times are relative to the profile's first event. ``fp_point``/``bp_point`` name ops as the user's
graph names them (e.g. ``conv1/Conv2D``).
"""

import dataclasses

from npu_adapter.profiling.trace import CLUSTER_CALL, CLUSTER_OP, HOST, RUNTIME

__all__ = ["DATA_OPS", "StepTrace", "iteration_summary", "op_statistics", "op_totals",
           "step_trace", "time_split"]

DATA_OPS = frozenset({"IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
                      "QueueDequeue", "QueueDequeueV2", "QueueDequeueMany", "QueueDequeueManyV2",
                      "QueueDequeueUpTo", "QueueDequeueUpToV2", "GetNext", "DynamicGetNext",
                      "DynamicGetNextV2"})


# Ops that compute nothing: never the automatic fp_point or bp_point.
_NOT_COMPUTE = frozenset({"Const", "NoOp", "Identity", "IdentityN", "Placeholder", "_Arg",
                          "_Retval", "ReadVariableOp", "VarHandleOp", "VariableV2"})


@dataclasses.dataclass
class StepTrace:
    """One row of the training trace (µs, relative to the profile's origin; None when the step
    has no such op)."""

    step: int
    fp_start: object
    bp_end: object
    iteration_end: float
    iteration_time: float
    fp_to_bp: object
    refresh: object
    data_aug_bound: object
    data_wait: float
    fp_op: str = ""
    bp_op: str = ""

    CSV_HEADER = ("Iteration ID", "FP Start(us)", "BP End(us)", "Iteration End(us)",
                  "Iteration Time(us)", "FP to BP Time(us)", "Iteration Refresh(us)",
                  "Data Aug Bound(us)", "Data Wait(us)", "FP Point", "BP Point")

    def csv_row(self):
        """The row as strings, in :attr:`CSV_HEADER` order."""
        def text(value):
            return "" if value is None else f"{value:.3f}"

        return [str(self.step), text(self.fp_start), text(self.bp_end), text(self.iteration_end),
                text(self.iteration_time), text(self.fp_to_bp), text(self.refresh),
                text(self.data_aug_bound), text(self.data_wait), self.fp_op, self.bp_op]

    def to_json(self):
        """A JSON-ready dict."""
        return dataclasses.asdict(self)


def _is_backward(event):
    return (event.op.startswith("gradients/") or "/gradients/" in event.op
            or event.op_type.endswith("Grad") or event.op_type.endswith("GradV2"))


def _named(events, name):
    return [e for e in events if e.op == name or e.node == name
            or e.node.endswith("/" + name)]


def step_trace(events, step, origin, previous_end=None, fp_point="", bp_point=""):
    """The :class:`StepTrace` of one step's events (see the module docstring)."""
    ops = [e for e in events if e.kind in (CLUSTER_OP, HOST, CLUSTER_CALL)]
    if not ops:
        ops = list(events)
    first = min((e.start for e in ops), default=origin)
    end = max((e.end for e in ops), default=first)
    cluster_ops = [e for e in ops if e.kind == CLUSTER_OP and e.op_type not in _NOT_COMPUTE]
    if fp_point:
        fp_candidates = _named(ops, fp_point)
    else:
        forward = [e for e in cluster_ops if not _is_backward(e)]
        fp_candidates = forward or cluster_ops or [
            e for e in ops if e.op_type not in DATA_OPS and e.op_type not in _NOT_COMPUTE] or ops
    fp = min(fp_candidates, key=lambda e: (e.start, e.node)) if fp_candidates else None
    if bp_point:
        bp_candidates = _named(ops, bp_point)
    else:
        bp_candidates = [e for e in ops if _is_backward(e)] or cluster_ops
    bp = max(bp_candidates, key=lambda e: (e.end, e.node)) if bp_candidates else None
    begin = previous_end if previous_end is not None else first
    fp_start = None if fp is None else fp.start - origin
    bp_end = None if bp is None else bp.end - origin
    data_wait = sum(e.duration for e in ops if e.op_type in DATA_OPS)
    return StepTrace(
        step=step, fp_start=fp_start, bp_end=bp_end, iteration_end=end - origin,
        iteration_time=end - begin,
        fp_to_bp=None if fp is None or bp is None else bp.end - fp.start,
        refresh=None if bp is None else end - bp.end,
        data_aug_bound=None if fp is None else fp.start - begin,
        data_wait=data_wait, fp_op=fp.op if fp else "", bp_op=bp.op if bp else "")


def iteration_summary(steps):
    """``{"steps", "first", "steady_mean", "steady_median", "steady_steps"}`` of a list of
    :class:`StepTrace` (µs): the first profiled step apart (it pays the warm-up: graph
    optimisation, kernel creation, first allocations) and the mean and median of the others
    (None with fewer than two steps)."""
    times = [s.iteration_time for s in steps]
    steady = sorted(times[1:])
    median = None
    if steady:
        mid = len(steady) // 2
        median = steady[mid] if len(steady) % 2 else (steady[mid - 1] + steady[mid]) / 2
    return {"steps": len(times), "first": times[0] if times else None,
            "steady_mean": sum(steady) / len(steady) if steady else None,
            "steady_median": median, "steady_steps": len(steady)}


def op_totals(events):
    """``{(cluster or "host", op, op_type): [count, total µs, min, max]}`` over ``events``."""
    totals = {}
    for e in events:
        if e.kind not in (CLUSTER_OP, HOST):
            continue
        key = (e.cluster or "host", e.op, e.op_type)
        entry = totals.get(key)
        if entry is None:
            totals[key] = [1, e.duration, e.duration, e.duration]
        else:
            entry[0] += 1
            entry[1] += e.duration
            entry[2] = min(entry[2], e.duration)
            entry[3] = max(entry[3], e.duration)
    return totals


def op_statistics(totals):
    """Per (where, op type): ``[count, total, min, avg, max]`` from :func:`op_totals`."""
    stats = {}
    for (where, _op, op_type), (count, total, low, high) in totals.items():
        key = ("host" if where == "host" else "cluster", op_type)
        entry = stats.get(key)
        if entry is None:
            stats[key] = [count, total, low, high]
        else:
            entry[0] += count
            entry[1] += total
            entry[2] = min(entry[2], low)
            entry[3] = max(entry[3], high)
    return {key: [c, t, lo, t / c if c else 0.0, hi] for key, (c, t, lo, hi) in stats.items()}


def time_split(events):
    """``{"host": µs, "cluster": µs, "runtime": µs, "wall": µs}``: op time on the host and in
    clusters (sums of op durations), bookkeeping, and the step's wall time."""
    split = {"host": 0.0, "cluster": 0.0, "runtime": 0.0}
    for e in events:
        if e.kind == HOST:
            split["host"] += e.duration
        elif e.kind == CLUSTER_OP:
            split["cluster"] += e.duration
        elif e.kind == RUNTIME:
            split["runtime"] += e.duration
    if events:
        split["wall"] = max(e.end for e in events) - min(e.start for e in events)
    else:
        split["wall"] = 0.0
    return split
