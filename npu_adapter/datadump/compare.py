"""Compare a golden dump with another one, op by op and tensor by tensor.

Ops are matched by name (the sanitised name of the file name, which is the same on the device
and here) within each iteration (``data_index``) both dumps hold. For every input and output of
a matched op both dumps hold, the values (in their logical layout, see
:func:`~npu_adapter.datadump.reader.to_logical`) are compared in float64:

* the inf/nan values of each side, and the positions where they differ (one side nan, or
  infinities that differ, or an inf/nan against a finite value);
* over the positions finite on both sides: cosine similarity (1.0 when both are all zeros),
  max absolute error, mean absolute error, max relative error ``|other - golden| / |golden|``
  over the elements where golden is not 0. When the inf/nan values differ these figures are left
  out (None): an overflow has no finite error, and the finite rest would read as a match.

A tensor *diverges* when its inf/nan values differ (status ``nonfinite``), when the shapes differ
(``shape mismatch``), or when its max absolute error exceeds ``atol + rtol * max |golden|`` or
its cosine similarity is below ``min_cosine`` (``diverged``). Errors no larger than ``atol`` are a
match whatever the cosine says: the cosine of values near zero (1e-11 against 0 under float16) is
noise. ``error_ratio`` says how close a tensor is to diverging: the larger of
``max_abs / (atol + rtol * max |golden|)`` and, when ``max_abs`` exceeds ``atol``,
``(1 - cosine) / (1 - min_cosine)``; 1 is the threshold.

An op diverges when one of its *outputs* diverges (an op dumped without outputs: when one of its
inputs does): an input that differs was made by the op upstream, which is the one to look at.
Ops are ordered topologically: models by their last dump in the iteration (when the model's result
was ready: ops that need no input, such as the reads of weights, may run long before the model's
turn), ops within a model by task id (the position in the model's execution order). Per iteration
the report names the first op whose output gains inf/nan (the usual cause of a loss that turns nan;
named first) and the first diverging op, with the figures of that op's output.
"""

import dataclasses
import json
import math
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
           "compare_arrays", "op_status"]


# Op status when several of its tensors diverge: the most telling first.
_STATUS_ORDER = ("nonfinite", "shape mismatch", "diverged", "unreadable")


@dataclasses.dataclass
class TensorComparison:
    """The comparison of one input or output of one op (see the module docstring)."""

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
    golden_nonfinite: int = 0
    other_nonfinite: int = 0
    elements: int = 0
    error_ratio: object = None
    note: str = ""

    @property
    def label(self):
        """``"output 0"``, ``"input 1"``."""
        return f"{self.direction} {self.index}"

    def summary(self):
        """One line of figures, e.g. ``output 0: 8 of 8 values inf/nan (golden 0)`` or
        ``output 0: cosine 0.999987, max abs error 0.0312, max rel error 0.0041``."""
        if self.status == "nonfinite":
            return (f"{self.label}: {self.other_nonfinite} of {self.elements} values inf/nan "
                    f"(golden {self.golden_nonfinite}), {self.nonfinite_mismatch} differ")
        if self.status in ("shape mismatch", "unreadable"):
            shapes = (f" (golden {_shape_text(self.golden_shape)}, other "
                      f"{_shape_text(self.other_shape)})" if self.status == "shape mismatch"
                      else f" ({self.note})")
            return f"{self.label}: {self.status}{shapes}"
        return (f"{self.label}: cosine {_num(self.cosine)}, max abs error {_num(self.max_abs)}, "
                f"max rel error {_num(self.max_rel)}")

    def to_json(self):
        """A JSON-ready dict."""
        data = dataclasses.asdict(self)
        data["golden_shape"] = list(self.golden_shape)
        data["other_shape"] = list(self.other_shape)
        return data


def _num(value):
    """A figure with 6 significant digits (``-`` when there is none)."""
    return "-" if value is None else f"{value:.6g}"


def _shape_text(shape):
    return "x".join(str(d) for d in shape) or "scalar"


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
    def judged(self):
        """The tensors that decide the op's status: its outputs (its inputs when the dump
        holds no output)."""
        outputs = [t for t in self.tensors if t.direction == "output"]
        return outputs or list(self.tensors)

    @property
    def worst_tensor(self):
        """The judged tensor that diverges most (a non-finite one first), or None."""
        judged = self.judged
        bad = [t for t in judged if t.status != "ok"]
        if bad:
            return min(bad, key=lambda t: (_STATUS_ORDER.index(t.status)
                                           if t.status in _STATUS_ORDER else 9,
                                           -(t.error_ratio or 0.0)))
        scored = [t for t in judged if t.error_ratio is not None]
        return max(scored, key=lambda t: t.error_ratio) if scored else None

    @property
    def worst_cosine(self):
        """The smallest cosine similarity of its judged tensors (None when none was computed)."""
        values = [t.cosine for t in self.judged if t.cosine is not None]
        return min(values) if values else None

    @property
    def worst_rel(self):
        """The largest max relative error of its judged tensors."""
        values = [t.max_rel for t in self.judged if t.max_rel is not None]
        return max(values) if values else None

    @property
    def worst_abs(self):
        """The largest max absolute error of its judged tensors."""
        values = [t.max_abs for t in self.judged if t.max_abs is not None]
        return max(values) if values else None

    @property
    def error_ratio(self):
        """The largest ``error_ratio`` of its judged tensors (None when one is non-finite or
        none was computed)."""
        judged = self.judged
        if any(t.status == "nonfinite" for t in judged):
            return None
        values = [t.error_ratio for t in judged if t.error_ratio is not None]
        return max(values) if values else None

    @property
    def output_nonfinite(self):
        """inf/nan values its outputs have in the other dump where the golden one has none."""
        return sum(t.nonfinite_mismatch for t in self.tensors if t.direction == "output")

    @property
    def inputs_agree(self):
        """True when every compared input is within the thresholds (the op itself made the
        difference), False when one is not, None when no input was compared."""
        inputs = [t for t in self.tensors if t.direction == "input"]
        return all(t.status == "ok" for t in inputs) if inputs else None

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

    def first_nonfinite(self, step):
        """The first :class:`OpComparison` of iteration ``step`` whose output has inf/nan
        values the golden dump does not have, or None."""
        for op in self.ops:
            if op.step == step and op.output_nonfinite:
                return op
        return None

    def to_json(self):
        """A JSON-ready dict (what ``npu-adapter dump compare`` writes)."""
        steps = []
        for step in self.steps:
            first = self.first_divergence(step)
            nonfinite = self.first_nonfinite(step)
            ops = [op for op in self.ops if op.step == step]
            steps.append({
                "step": step, "ops_compared": len(ops),
                "ops_diverged": sum(op.status != "ok" for op in ops),
                "ops_with_new_nonfinite": sum(bool(op.output_nonfinite) for op in ops),
                "first_nonfinite": None if nonfinite is None else _op_summary(nonfinite),
                "first_divergence": None if first is None else _op_summary(first),
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


def _op_summary(op):
    """The figures of an op's most diverging judged tensor (its output), for the summary."""
    worst = op.worst_tensor
    return {"op_name": op.op_name, "op_type": op.op_type, "order": op.order,
            "model": op.model, "status": op.status,
            "tensor": worst.label if worst else None,
            "figures": worst.summary() if worst else op.status,
            "cosine": worst.cosine if worst else None,
            "max_abs": worst.max_abs if worst else None,
            "max_rel": worst.max_rel if worst else None,
            "golden_nonfinite": worst.golden_nonfinite if worst else 0,
            "other_nonfinite": worst.other_nonfinite if worst else 0,
            "elements": worst.elements if worst else 0,
            "inputs_agree": op.inputs_agree,
            "worst_cosine": op.worst_cosine, "worst_max_rel": op.worst_rel,
            "worst_max_abs": op.worst_abs}


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _finite_float(value):
    """``value`` as a float, or None when it is None or not finite (JSON has no nan or inf)."""
    if value is None:
        return None
    value = float(value)
    return value if np.isfinite(value) else None


def compare_arrays(golden, other, *, min_cosine=0.99, rtol=1e-3, atol=1e-5):
    """Compare two arrays of the same shape (see the module docstring).

    Returns a dict with ``cosine``, ``max_abs``, ``mean_abs``, ``max_rel`` (None when the inf/nan
    values differ), ``golden_nonfinite``, ``other_nonfinite``, ``nonfinite_mismatch``,
    ``elements``, ``error_ratio`` (None when the inf/nan values differ) and ``diverged``.
    """
    g = np.asarray(golden, dtype=np.float64).ravel()
    o = np.asarray(other, dtype=np.float64).ravel()
    g_bad, o_bad = ~np.isfinite(g), ~np.isfinite(o)
    same_special = (np.isnan(g) & np.isnan(o)) | (g_bad & o_bad & (g == o))
    mismatch = int(((g_bad | o_bad) & ~same_special).sum())
    figures = {"golden_nonfinite": int(g_bad.sum()), "other_nonfinite": int(o_bad.sum()),
               "nonfinite_mismatch": mismatch, "elements": int(g.size)}
    if mismatch:
        figures.update(cosine=None, max_abs=None, mean_abs=None, max_rel=None,
                       error_ratio=None, diverged=True)
        return figures
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
    allowed = atol + rtol * largest
    ratios = [max_abs / allowed if allowed > 0 else (0.0 if max_abs == 0 else math.inf)]
    cosine_counts = max_abs > atol   # below atol the cosine of near-zero values is noise
    if cosine_counts and min_cosine < 1:
        ratios.append((1.0 - cosine) / (1.0 - min_cosine))
    elif cosine_counts and cosine < min_cosine:
        ratios.append(math.inf)
    figures.update(cosine=cosine, max_abs=max_abs, mean_abs=mean_abs, max_rel=max_rel,
                   error_ratio=max(ratios),
                   diverged=bool((cosine_counts and cosine < min_cosine) or max_abs > allowed))
    return figures


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
    for key in ("cosine", "max_abs", "mean_abs", "max_rel", "error_ratio"):
        setattr(result, key, _finite_float(metrics[key]))
    for key in ("nonfinite_mismatch", "golden_nonfinite", "other_nonfinite", "elements"):
        setattr(result, key, metrics[key])
    if metrics["nonfinite_mismatch"]:
        result.status = "nonfinite"
    elif metrics["diverged"]:
        result.status = "diverged"
    return result


def op_status(tensors):
    """The status of an op from its tensors' (see :attr:`OpComparison.judged`)."""
    outputs = [t for t in tensors if t.direction == "output"]
    statuses = {t.status for t in (outputs or tensors)} - {"ok"}
    for status in _STATUS_ORDER:
        if status in statuses:
            return status
    return next(iter(sorted(statuses)), "ok")


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
    last_seen = {}
    for entry in ops.values():
        key = (entry.model_id, entry.model_name)
        last_seen[key] = max(last_seen.get(key, entry.name.timestamp), entry.name.timestamp)
    return sorted(ops.values(), key=lambda e: (last_seen[(e.model_id, e.model_name)],
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
            ops.append(OpComparison(step, order, g_rec.op_name or entry.op_name,
                                    entry.name.op_type, entry.model_name or "",
                                    os.path.relpath(entry.path, golden),
                                    os.path.relpath(match.path, other), tensors,
                                    op_status(tensors)))
            progress.add(files=2, nbytes=os.path.getsize(entry.path)
                         + os.path.getsize(match.path), step=step)
    progress.close()
    return ComparisonResult(os.path.abspath(golden), os.path.abspath(other), thresholds,
                            common, ops, only_golden, only_other, notes)
