"""Compare a golden dump with another one, op by op and tensor by tensor.

Ops are matched by name (the sanitised name of the file name, which is the same on the device
and here) within each iteration (``data_index``) both dumps hold. For every input and output of
a matched op both dumps hold, the values (in their logical layout, see
:func:`~npu_adapter.datadump.reader.to_logical`) are compared in float64:

* cosine similarity (1.0 when both are all zeros);
* max absolute error, mean absolute error;
* max relative error ``|other - golden| / |golden|`` over the elements where golden is not 0;
* positions where exactly one side is nan or where the infinities differ.

A tensor diverges when its cosine similarity is below ``min_cosine``, when its max absolute
error exceeds ``atol + rtol * max |golden|``, when the non-finite values differ, or when the
shapes differ. Ops are ordered topologically: models by their first dump in the iteration, ops
within a model by task id (the position in the model's execution order); the first diverging
op of each iteration is reported.
"""

import dataclasses
import json
import os

import numpy as np

from npu_adapter.datadump.reader import (
    DumpFormatError,
    UnsupportedFormatError,
    read_dump_file,
    scan_dump_tree,
)
from npu_adapter.progress import ProgressLog

__all__ = ["ComparisonResult", "OpComparison", "TensorComparison", "compare_dumps",
           "compare_arrays"]


@dataclasses.dataclass
class TensorComparison:
    """The comparison of one input or output of one op."""

    direction: str
    index: int
    status: str
    golden_dtype: str = ""
    other_dtype: str = ""
    golden_shape: tuple = ()
    other_shape: tuple = ()
    cosine: object = None
    max_abs: object = None
    mean_abs: object = None
    max_rel: object = None
    nonfinite_mismatch: int = 0
    note: str = ""

    def to_json(self):
        """A JSON-ready dict."""
        data = dataclasses.asdict(self)
        data["golden_shape"] = list(self.golden_shape)
        data["other_shape"] = list(self.other_shape)
        return data


@dataclasses.dataclass
class OpComparison:
    """One op of one iteration, matched in both dumps."""

    step: object
    order: int
    op_name: str
    op_type: str
    model: str
    golden_file: str
    other_file: str
    tensors: list
    status: str = "ok"

    @property
    def worst_cosine(self):
        """The smallest cosine similarity of its tensors (None when none was computed)."""
        values = [t.cosine for t in self.tensors if t.cosine is not None]
        return min(values) if values else None

    @property
    def worst_rel(self):
        """The largest max relative error of its tensors."""
        values = [t.max_rel for t in self.tensors if t.max_rel is not None]
        return max(values) if values else None

    @property
    def worst_abs(self):
        """The largest max absolute error of its tensors."""
        values = [t.max_abs for t in self.tensors if t.max_abs is not None]
        return max(values) if values else None

    def to_json(self):
        """A JSON-ready dict."""
        return {"step": self.step, "order": self.order, "op_name": self.op_name,
                "op_type": self.op_type, "model": self.model, "status": self.status,
                "golden_file": self.golden_file, "other_file": self.other_file,
                "tensors": [t.to_json() for t in self.tensors]}


@dataclasses.dataclass
class ComparisonResult:
    """Everything :func:`compare_dumps` found."""

    golden: str
    other: str
    thresholds: dict
    steps: list
    ops: list
    only_in_golden: dict
    only_in_other: dict
    notes: list

    def first_divergence(self, step):
        """The first diverging :class:`OpComparison` of iteration ``step``, or None."""
        for op in self.ops:
            if op.step == step and op.status != "ok":
                return op
        return None

    def to_json(self):
        """A JSON-ready dict (what ``npu-adapter dump compare`` writes)."""
        steps = []
        for step in self.steps:
            first = self.first_divergence(step)
            ops = [op for op in self.ops if op.step == step]
            steps.append({
                "step": step, "ops_compared": len(ops),
                "ops_diverged": sum(op.status != "ok" for op in ops),
                "first_divergence": None if first is None else {
                    "op_name": first.op_name, "op_type": first.op_type, "order": first.order,
                    "model": first.model, "worst_cosine": first.worst_cosine,
                    "worst_max_rel": first.worst_rel, "worst_max_abs": first.worst_abs},
                "only_in_golden": self.only_in_golden.get(step, []),
                "only_in_other": self.only_in_other.get(step, []),
            })
        return {"golden": self.golden, "other": self.other, "thresholds": self.thresholds,
                "steps": steps, "ops": [op.to_json() for op in self.ops], "notes": self.notes}

    def write_json(self, path):
        """Write :meth:`to_json` to ``path`` (atomically)."""
        from npu_adapter.datadump.writer import write_atomic

        text = json.dumps(self.to_json(), indent=1, sort_keys=True, allow_nan=False,
                          default=_json_default) + "\n"
        return write_atomic(path, text)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _finite_float(value):
    """``value`` as a float, or None when it is not finite (JSON has no nan or inf)."""
    value = float(value)
    return value if np.isfinite(value) else None


def compare_arrays(golden, other, *, min_cosine=0.99, rtol=1e-3, atol=1e-5):
    """Compare two arrays of the same shape; returns a dict with ``cosine``, ``max_abs``,
    ``mean_abs``, ``max_rel``, ``nonfinite_mismatch`` and ``diverged``."""
    g = np.asarray(golden, dtype=np.float64).ravel()
    o = np.asarray(other, dtype=np.float64).ravel()
    g_bad, o_bad = ~np.isfinite(g), ~np.isfinite(o)
    same_special = (np.isnan(g) & np.isnan(o)) | (g_bad & o_bad & (g == o))
    mismatch = int(((g_bad | o_bad) & ~same_special).sum())
    both = ~(g_bad | o_bad)
    gf, of = g[both], o[both]
    diff = np.abs(of - gf)
    max_abs = float(diff.max()) if diff.size else 0.0
    mean_abs = float(diff.mean()) if diff.size else 0.0
    nonzero = gf != 0
    max_rel = float((diff[nonzero] / np.abs(gf[nonzero])).max()) if nonzero.any() else 0.0
    norm_g, norm_o = float(np.linalg.norm(gf)), float(np.linalg.norm(of))
    if (norm_g == 0 and norm_o == 0) or np.array_equal(gf, of):
        cosine = 1.0
    elif norm_g == 0 or norm_o == 0:
        cosine = 0.0
    else:
        cosine = float(np.clip(np.dot(gf, of) / (norm_g * norm_o), -1.0, 1.0))
    largest = float(np.abs(gf).max()) if gf.size else 0.0
    diverged = (mismatch > 0 or cosine < min_cosine or max_abs > atol + rtol * largest)
    return {"cosine": cosine, "max_abs": max_abs, "mean_abs": mean_abs, "max_rel": max_rel,
            "nonfinite_mismatch": mismatch, "diverged": bool(diverged)}


def _compare_tensor(golden, other, thresholds):
    result = TensorComparison(golden.direction, golden.index, "ok", golden.dtype, other.dtype)
    try:
        g = golden.values()
        o = other.values()
    except (UnsupportedFormatError, ValueError) as exc:
        result.status, result.note = "unreadable", str(exc)
        return result
    result.golden_shape, result.other_shape = tuple(g.shape), tuple(o.shape)
    if g.shape != o.shape:
        result.status = "shape mismatch"
        return result
    if np.iscomplexobj(g) or np.iscomplexobj(o):
        g = np.concatenate([np.real(g).ravel(), np.imag(g).ravel()])
        o = np.concatenate([np.real(o).ravel(), np.imag(o).ravel()])
    metrics = compare_arrays(g, o, **thresholds)
    result.cosine = _finite_float(metrics["cosine"])
    result.max_abs = _finite_float(metrics["max_abs"])
    result.mean_abs = _finite_float(metrics["mean_abs"])
    result.max_rel = _finite_float(metrics["max_rel"])
    result.nonfinite_mismatch = metrics["nonfinite_mismatch"]
    if metrics["diverged"]:
        result.status = "diverged"
    return result


def _index(entries, root, notes, label):
    """``{step: {op_name: entry}}`` of the tensor dumps of a tree (one run per tree)."""
    times = sorted({e.time for e in entries if e.time is not None})
    if len(times) > 1:
        notes.append(f"{label} holds {len(times)} runs ({', '.join(times)}); the first, "
                     f"{times[0]}, is compared")
        entries = [e for e in entries if e.time in (None, times[0])]
    by_step = {}
    for entry in entries:
        if entry.kind != "tensor":
            continue
        ops = by_step.setdefault(entry.step, {})
        previous = ops.get(entry.op_name)
        if previous is None or entry.name.timestamp < previous.name.timestamp:
            ops[entry.op_name] = entry
    return by_step


def _ordered(ops):
    """Entries of one iteration in topological order (see the module docstring)."""
    first_seen = {}
    for entry in ops.values():
        key = (entry.model_id, entry.model_name)
        first_seen[key] = min(first_seen.get(key, entry.name.timestamp), entry.name.timestamp)
    return sorted(ops.values(), key=lambda e: (first_seen[(e.model_id, e.model_name)],
                                               e.model_id or 0, e.name.task_id,
                                               e.name.timestamp, e.op_name))


def compare_dumps(golden, other, *, steps=None, min_cosine=0.99, rtol=1e-3, atol=1e-5,
                  progress_interval=None, stream=None):
    """Compare the dump trees ``golden`` and ``other`` (directories).

    Args:
        golden, other: dump directories (any level at or above the iteration directories).
        steps: iterations to compare (default: every one both trees hold).
        min_cosine, rtol, atol: the divergence thresholds (see the module docstring).
        progress_interval: seconds between progress lines (None: the environment's).
        stream: where progress lines go (default stderr).

    Returns:
        A :class:`ComparisonResult`.

    Raises:
        DumpFormatError: a directory is missing or holds no dump, or a file is malformed.
    """
    thresholds = {"min_cosine": float(min_cosine), "rtol": float(rtol), "atol": float(atol)}
    notes = []
    indexes = []
    for label, root in (("golden", golden), ("other", other)):
        entries = scan_dump_tree(root)
        if not any(e.kind == "tensor" for e in entries):
            raise DumpFormatError(f"{root}: no tensor dump files found (a dump of dump_data "
                                  "'stats' cannot be compared value by value)")
        indexes.append(_index(entries, root, notes, label))
    golden_index, other_index = indexes
    common = sorted(set(golden_index) & set(other_index), key=lambda s: (s is None, s))
    if steps is not None:
        wanted = set(steps)
        common = [s for s in common if s in wanted]
    if not common:
        notes.append("the two dumps hold no common iteration")
    progress = ProgressLog("dump compare", "", interval=progress_interval, stream=stream)
    ops = []
    only_golden, only_other = {}, {}
    for step in common:
        g_ops, o_ops = golden_index[step], other_index[step]
        only_golden[step] = sorted(set(g_ops) - set(o_ops))
        only_other[step] = sorted(set(o_ops) - set(g_ops))
        for order, entry in enumerate(_ordered(g_ops)):
            match = o_ops.get(entry.op_name)
            if match is None:
                continue
            g_rec, o_rec = read_dump_file(entry.path), read_dump_file(match.path)
            o_tensors = {(t.direction, t.index): t for t in o_rec.tensors()}
            tensors = [_compare_tensor(t, o_tensors[(t.direction, t.index)], thresholds)
                       for t in g_rec.tensors() if (t.direction, t.index) in o_tensors]
            status = "ok"
            for t in tensors:
                if t.status != "ok":
                    status = t.status if status == "ok" else status
            ops.append(OpComparison(step, order, g_rec.op_name or entry.op_name,
                                    entry.name.op_type, entry.model_name or "",
                                    os.path.relpath(entry.path, golden),
                                    os.path.relpath(match.path, other), tensors, status))
            progress.add(files=2, nbytes=os.path.getsize(entry.path)
                         + os.path.getsize(match.path), step=step)
    progress.close()
    return ComparisonResult(os.path.abspath(golden), os.path.abspath(other), thresholds,
                            common, ops, only_golden, only_other, notes)
