"""Overflow detection (``enable_dump_debug``): which ops overflow, and the per-step summary.

An op overflows when one of its floating-point outputs holds ``inf`` or ``nan``; with precision
emulation on (the device computes in float16), a float32 value beyond float16's largest finite
value (65504) counts too, because the device would have produced ``inf`` there. The CPU reference
follows IEEE 754, which is the device's INF_NAN mode (:func:`inf_nan_enabled`).

``dump_debug_mode`` selects the ops: ``aicore_overflow`` the ops computed by the AI Core,
``atomic_overflow`` the ops whose device kernels accumulate partial results with atomic adds
(:data:`ATOMIC_ACCUMULATE_OPS`), ``all`` both.

The first overflowing op of a model iteration is the one earliest in topological order (lowest
task id) whose inputs were all finite — where the overflow started; later ops only carry it on.
"""

import json
import os
import threading

import numpy as np

from npu_adapter.datadump.writer import write_atomic

__all__ = [
    "ATOMIC_ACCUMULATE_OPS",
    "OverflowEvent",
    "OverflowSummary",
    "SUMMARY_FILE",
    "checks_op",
    "inf_nan_enabled",
    "overflow_kind",
]

SUMMARY_FILE = "overflow_summary.json"

# TensorFlow op types whose Ascend kernels sum partial results from several cores with atomic
# adds (segment and scatter sums, reductions of gradients over a batch).
ATOMIC_ACCUMULATE_OPS = frozenset({
    "UnsortedSegmentSum", "SegmentSum", "SparseSegmentSum", "SparseSegmentSumWithNumSegments",
    "ScatterAdd", "ScatterNdAdd", "TensorScatterAdd", "BiasAddGrad", "Conv2DBackpropFilter",
    "Conv3DBackpropFilterV2", "DepthwiseConv2dNativeBackpropFilter", "EmbeddingBagDense",
})

_FINITE_MAX = {"float16": float(np.finfo(np.float16).max),
               "bfloat16": 3.3895313892515355e38}


def inf_nan_enabled():
    """True: the CPU reference computes in IEEE 754 arithmetic, so an overflow gives ``inf`` or
    ``nan`` (the device's INF_NAN mode) rather than a saturated value."""
    return True


def checks_op(op_type, debug_mode):
    """True when ``dump_debug_mode`` ``debug_mode`` checks ops of type ``op_type``."""
    atomic = op_type in ATOMIC_ACCUMULATE_OPS
    if debug_mode == "atomic_overflow":
        return atomic
    if debug_mode == "aicore_overflow":
        return not atomic
    return True


def overflow_kind(array, emulated_dtype=None):
    """``"nan"``, ``"inf"``, ``"exceeds <dtype> range"`` or None for a floating-point array."""
    values = np.asarray(array)
    if values.dtype.kind != "f" and values.dtype.name != "bfloat16":
        return None
    if values.dtype.name == "bfloat16":
        values = values.astype(np.float32)
    if np.isnan(values).any():
        return "nan"
    if np.isinf(values).any():
        return "inf"
    limit = _FINITE_MAX.get(emulated_dtype)
    if (limit is not None and values.dtype.itemsize > 2 and values.size
            and float(np.max(np.abs(values))) > limit):
        return f"exceeds {emulated_dtype} range"
    return None


class OverflowEvent:
    """One overflowing op execution."""

    __slots__ = ("model", "model_id", "step", "op_name", "op_type", "task_id", "output_index",
                 "kind", "inputs_finite", "file", "global_step")

    def __init__(self, model, model_id, step, op_name, op_type, task_id, output_index, kind,
                 inputs_finite, file, global_step=None):
        self.model, self.model_id, self.step = model, model_id, step
        self.op_name, self.op_type, self.task_id = op_name, op_type, task_id
        self.output_index, self.kind, self.inputs_finite = output_index, kind, inputs_finite
        self.file, self.global_step = file, global_step

    def to_json(self):
        """A JSON-ready dict."""
        return {"op_name": self.op_name, "op_type": self.op_type, "task_id": self.task_id,
                "output_index": self.output_index, "kind": self.kind,
                "inputs_finite": self.inputs_finite, "file": self.file}


class OverflowSummary:
    """The overflow events of a session, per model iteration, written as JSON.

    ``overflow_summary.json`` (in the session's ``{time}`` directory) lists, per model and step,
    the first overflowing op (see the module docstring), every overflowing op in task order, and
    the training step ``TellMeStepOrLossHook`` reported (``STEP_NOW``) when one did.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._events = {}

    def add(self, event):
        """Record ``event``; returns True when it is the first event of its model iteration
        whose inputs were finite (an overflow that starts there)."""
        key = (event.model_id, event.model, event.step)
        with self._lock:
            events = self._events.setdefault(key, [])
            events.append(event)
            return event.inputs_finite and sum(e.inputs_finite for e in events) == 1

    def __len__(self):
        with self._lock:
            return len(self._events)

    def entries(self):
        """One dict per model iteration with overflows, ordered by (step, model id)."""
        with self._lock:
            items = sorted(self._events.items(), key=lambda kv: (kv[0][2], kv[0][0]))
            snapshot = [(key, sorted(events, key=lambda e: (e.task_id, e.output_index)))
                        for key, events in items]
        result = []
        for (model_id, model, step), events in snapshot:
            origins = [e for e in events if e.inputs_finite]
            first = (origins or events)[0]
            global_steps = sorted({e.global_step for e in events if e.global_step is not None})
            result.append({
                "model_name": model, "model_id": model_id, "step": step,
                "global_step": global_steps[0] if global_steps else None,
                "first_overflow": first.to_json(),
                "overflowing_ops": [e.to_json() for e in events],
            })
        return result

    def write(self, directory):
        """Write ``overflow_summary.json`` into ``directory``; returns its path."""
        text = json.dumps({"overflows": self.entries()}, indent=1, sort_keys=True) + "\n"
        return write_atomic(os.path.join(directory, SUMMARY_FILE), text)
