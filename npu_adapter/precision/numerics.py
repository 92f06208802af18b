"""Find the op that breaks: run a graph in float32 and under precision emulation, and list the
first tensors that overflow float16 or drift beyond a threshold.

:func:`find_numeric_issues` rewrites the graph with emulation on (the placement and the dtype
decisions are the ones a session gets), then builds two flat graphs of the run's client graph:
the reference (the graph as written, which is what the CPU reference computes with emulation
off) and the emulated one (the device ops rewritten by the same engine as the ``precision``
pass). Both run in plain TensorFlow sessions with the same feeds; every float output of every
device op is fetched from both and compared. A third run of the rewritten graph itself checks
that the flat emulation gives the same fetched values (``consistent``).

A tensor is an *overflow* when the emulated value has inf or nan where the reference is finite (a
float16 overflow: |x| > 65504), a *drift* when its maximum relative error (max |emu - ref| / max
|ref|) exceeds ``max_relative_error`` or its cosine similarity to the reference falls below
``min_cosine``, and its largest error exceeds float16's smallest step, 2^-24 (:data:`FP16_TINY`): an
error no larger is what float16 does to values near zero (1e-11 becomes 0, a relative error of 1 and
a cosine of 0 that mean nothing). Issues are listed in topological order; an issue is *first* when
no input of its op has one (an overflow is first when no input overflowed). Each first issue carries
the option that would keep its op in float32: a ``modify_mixlist`` black-list entry in
mixed-precision modes, ``keep_tensors_dtypes`` / a ``customize_dtypes`` line otherwise.
"""

import dataclasses
import math

import numpy as np

__all__ = ["NumericIssue", "NumericsReport", "TensorComparison", "compare_values",
           "find_numeric_issues", "FP16_MAX", "FP16_TINY"]

FP16_MAX = 65504.0
FP16_TINY = 2.0 ** -24
"""float16's smallest subnormal: the largest error that values near zero get from float16."""
REPORT_FORMAT = "npu_adapter.numerics/1"


@dataclasses.dataclass
class TensorComparison:
    """How one tensor's emulated value compares with its float32 reference."""

    tensor: str
    op: str
    dtype: str                 # the dtype its op computes in under emulation
    reason: str                # the decision's reason code
    detail: str
    status: str                # "ok", "overflow", "drift"
    nonfinite: int = 0         # elements inf/nan in the emulation but finite in the reference
    reference_over_fp16: int = 0   # reference elements with |x| > 65504
    reference_max: float = 0.0
    max_abs_error: float = 0.0
    max_relative_error: float = 0.0
    cosine: float = 1.0
    elements: int = 0

    def summary(self):
        """The figures in one line, e.g. ``8 of 8 values inf/nan (max |reference| 1.2e+05)``
        or ``max rel error 0.0612, cosine 0.99971``."""
        if self.nonfinite:
            return (f"{self.nonfinite} of {self.elements} values inf/nan (max |reference| "
                    f"{self.reference_max:.4g})")
        return f"max rel error {self.max_relative_error:.4g}, cosine {self.cosine:.6g}"

    def to_json(self):
        """JSON-serialisable record (floats rounded for stable output)."""
        record = dataclasses.asdict(self)
        for key in ("reference_max", "max_abs_error", "max_relative_error", "cosine"):
            record[key] = _json_float(record[key])
        return record


@dataclasses.dataclass
class NumericIssue:
    """An overflowing or drifting tensor, with what would fix it."""

    comparison: TensorComparison
    first: bool
    inputs_with_issues: tuple
    fix: dict

    def to_json(self):
        """JSON-serialisable record."""
        return {"tensor": self.comparison.tensor, "op": self.comparison.op,
                "kind": self.comparison.status, "first": self.first,
                "dtype": self.comparison.dtype, "reason": self.comparison.reason,
                "detail": self.comparison.detail,
                "inputs_with_issues": list(self.inputs_with_issues), "fix": self.fix,
                "comparison": self.comparison.to_json()}


@dataclasses.dataclass
class NumericsReport:
    """What :func:`find_numeric_issues` found."""

    model: str
    setting: str
    mode: str
    thresholds: dict
    fetches: list
    comparisons: list
    issues: list
    consistent: bool
    consistency_note: str
    casts: int

    @property
    def first_issues(self):
        """The issues whose op has no input with an issue (the places to fix)."""
        return [i for i in self.issues if i.first]

    @property
    def overflows(self):
        """Tensors that overflow under emulation."""
        return [i for i in self.issues if i.comparison.status == "overflow"]

    def to_json(self):
        """The report as a JSON-serialisable dict (deterministic for the same inputs)."""
        counts = {}
        for c in self.comparisons:
            counts[c.status] = counts.get(c.status, 0) + 1
        return {
            "format": REPORT_FORMAT,
            "model": self.model,
            "setting": self.setting,
            "mode": self.mode,
            "thresholds": self.thresholds,
            "fetches": list(self.fetches),
            "summary": {"tensors": len(self.comparisons), "by_status": dict(sorted(
                counts.items())), "issues": len(self.issues),
                "first_issues": [i.comparison.tensor for i in self.first_issues],
                "casts": self.casts, "consistent": self.consistent},
            "consistency_note": self.consistency_note,
            "issues": [i.to_json() for i in self.issues],
            "tensors": [c.to_json() for c in self.comparisons],
        }


def _json_float(value):
    if value is None or math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return float(f"{value:.6g}")


def compare_values(reference, emulated):
    """``dict`` of the comparison figures between a float32 reference and an emulated value.

    ``nonfinite`` counts the elements inf/nan under emulation but finite in the reference; when
    there is one, the errors are inf and the cosine nan (undefined).
    """
    ref = np.asarray(reference, dtype=np.float64).ravel()
    emu = np.asarray(emulated, dtype=np.float64).ravel()
    ref_finite = np.isfinite(ref)
    both = ref_finite & np.isfinite(emu)
    figures = {"elements": int(ref.size),
               "nonfinite": int(np.count_nonzero(ref_finite & ~np.isfinite(emu))),
               "reference_over_fp16": int(np.count_nonzero(np.abs(ref[ref_finite]) > FP16_MAX)),
               "reference_max": float(np.max(np.abs(ref[ref_finite]))) if ref_finite.any()
               else 0.0}
    if figures["nonfinite"]:
        # An overflow has no finite error; the figures of the finite rest would read as a
        # match (cosine 1, error 0 when every element overflows).
        figures.update(max_abs_error=math.inf, max_relative_error=math.inf, cosine=math.nan)
    elif both.any():
        r, e = ref[both], emu[both]
        err = np.abs(e - r)
        scale = float(np.max(np.abs(r)))
        figures["max_abs_error"] = float(np.max(err))
        figures["max_relative_error"] = float(np.max(err) / scale) if scale > 0 else (
            0.0 if float(np.max(err)) == 0 else math.inf)
        nr, ne = float(np.linalg.norm(r)), float(np.linalg.norm(e))
        figures["cosine"] = float(np.dot(r, e) / (nr * ne)) if nr > 0 and ne > 0 else (
            1.0 if nr == ne else 0.0)
    else:
        figures.update(max_abs_error=0.0, max_relative_error=0.0, cosine=1.0)
    return figures


def _status(figures, max_relative_error, min_cosine):
    if figures["nonfinite"]:
        return "overflow"
    if figures["max_abs_error"] > FP16_TINY and (
            figures["max_relative_error"] > max_relative_error
            or figures["cosine"] < min_cosine):
        return "drift"
    return "ok"


def _fix(policy, decision, node_name, op_type, port_count):
    """The option that keeps ``node_name`` in float32."""
    from npu_adapter.precision import policy as P

    entry = policy.lists.entry(op_type)
    tensors = [f"{node_name}:{p}" for p in range(max(port_count, 1))]
    customize = f"{node_name}::OutputDtype:float32"
    if policy.mode == P.MIXED:
        return {"option": "modify_mixlist",
                "modify_mixlist": {"black-list": {"to-add": [entry.ir_name]}},
                "text": f'modify_mixlist file: {{"black-list": {{"to-add": ["{entry.ir_name}"]}}}}'
                        f" (keeps every {entry.ir_name} op in float32; or keep only this op: "
                        f"npu_bridge.estimator.npu.util.keep_tensors_dtypes(graph, "
                        f"{tensors[:1]}))",
                "keep_tensors_dtypes": tensors[:1], "customize_dtypes": customize}
    return {"option": "keep_dtype_scope",
            "text": f"create the op under npu_scope.keep_dtype_scope(), or call "
                    f"util.keep_tensors_dtypes(graph, {tensors[:1]}); or the customize_dtypes "
                    f"line '{customize}'",
            "keep_tensors_dtypes": tensors[:1], "customize_dtypes": customize}


def _run(graph_def, fetches, feeds):
    import tensorflow as tf

    from npu_adapter.session import plain_session_class

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    # TensorFlow's own session, even while npu_adapter.install() is in effect: these graphs
    # are already rewritten.
    with plain_session_class()(graph=graph) as sess:
        values = sess.run(list(fetches), feeds)
    return dict(zip(fetches, values))


def find_numeric_issues(model, config=None, *, feeds, fetches=None, targets=None,
                        max_relative_error=0.05, min_cosine=0.999, backend="cpu",
                        model_name=None):
    """Run ``model`` in float32 and under precision emulation and compare every device tensor.

    Args:
        model: a GraphDef, ``tf.Graph``, MetaGraphDef, model path or LoadedModel.
        config: the session options (``NpuConfig``, ConfigProto, dict or None); emulation is
            switched on for the emulated run whatever ``npu_adapter_emulate_precision`` says.
        feeds: dict tensor name → value.
        fetches: tensor names to fetch (default: the model signature's outputs).
        targets: op names to run.
        max_relative_error: drift threshold on max |emu - ref| / max |ref| per tensor.
        min_cosine: drift threshold on the cosine similarity per tensor.
        backend: backend whose placement is emulated (its op list decides the clusters).
        model_name: name shown in the report.

    Returns:
        A :class:`NumericsReport`.
    """
    from npu_adapter.api import as_npu_config, rewrite
    from npu_adapter.graph.extract import extract_client_graph
    from npu_adapter.graph.types import node_output_types
    from npu_adapter.precision.engine import FLOAT_TYPES, _topological, emulate_graph
    from npu_adapter.precision.policy import policy_from_config
    from npu_adapter.report.api import as_graph_input
    from npu_adapter.vocabulary import DEVICE_NPU

    feeds = dict(feeds or {})
    graph_def, fetches, _, loaded_name = as_graph_input(model, fetches, list(feeds) or None)
    fetches = list(fetches or ())
    config_on = as_npu_config(config).replace(npu_adapter_emulate_precision="on")
    policy = policy_from_config(config_on)
    result = rewrite(graph_def, config_on, fetches=fetches, feeds=list(feeds), targets=targets,
                     backend=backend)
    client = extract_client_graph(graph_def, fetches, targets or (), list(feeds))
    candidates = {name for name, p in result.placement.items() if p["device"] == DEVICE_NPU}
    emulated_gd, body = emulate_graph(client.graph_def, policy, candidates)

    # Every float output of every device op with a dtype decision, in topological order.
    from npu_adapter.precision.engine import _Body

    order_body = _Body(list(client.graph_def.node), {}, False, None)
    order = [order_body.nodes[k] for k in _topological(order_body, len(order_body.nodes))]
    watched, producer = [], {}
    for node in order:
        decision = body.decisions.get(node.name)
        if decision is None or decision.reason == "not_reducible":
            continue
        types = node_output_types(node) or []
        for port, dtype in enumerate(types):
            if dtype in FLOAT_TYPES:
                tensor = f"{node.name}:{port}"
                watched.append(tensor)
                producer[tensor] = (node, decision, len(types))
    client_feeds = {client.feeds.get(k, k): v for k, v in feeds.items()}
    reference = _run(client.graph_def, watched + fetches, client_feeds)
    emulated = _run(emulated_gd, watched + fetches, client_feeds)

    consistent, note = True, "the rewritten graph gives the same fetched values"
    if fetches:
        mapped = [result.tensor_map.get(f, f) for f in fetches]
        rewritten_feeds = {result.feed_map.get(k, k): v for k, v in feeds.items()}
        actual = _run(result.graph_def, mapped, rewritten_feeds)
        for f, m in zip(fetches, mapped):
            a, b = np.asarray(actual[m]), np.asarray(emulated[f])
            if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
                consistent = False
                note = (f"fetch {f} differs between the rewritten graph and the flat emulation "
                        "(max abs difference "
                        f"{float(np.nanmax(np.abs(a.astype(np.float64) - b))):.3g})")
                break

    comparisons, by_tensor = [], {}
    for tensor in watched:
        node, decision, _ = producer[tensor]
        figures = compare_values(reference[tensor], emulated[tensor])
        comparison = TensorComparison(
            tensor=tensor, op=node.op, dtype=_dtype(decision.dtype), reason=decision.reason,
            detail=decision.detail, status=_status(figures, max_relative_error, min_cosine),
            **figures)
        comparisons.append(comparison)
        by_tensor[tensor] = comparison
    issues = []
    for comparison in comparisons:
        if comparison.status == "ok":
            continue
        node, decision, ports = producer[comparison.tensor]
        upstream = []
        for text in node.input:
            if text.startswith("^"):
                continue
            src = text if ":" in text else text + ":0"
            other = by_tensor.get(src)
            if other is not None and other.status != "ok":
                upstream.append((src, other.status))
        if comparison.status == "overflow":
            first = not any(status == "overflow" for _, status in upstream)
        else:
            first = not upstream
        fix = {}
        if first and decision.dtype in (policy.low, ) and decision.dtype != decision.original:
            fix = _fix(policy, decision, node.name, node.op, ports)
        elif first:
            fix = {"option": None,
                   "text": f"{node.name} computes in {_dtype(decision.dtype)}; its error comes "
                           "from inputs computed in low precision upstream (lower the "
                           "threshold to find them)"}
        issues.append(NumericIssue(comparison, first, tuple(t for t, _ in upstream), fix))
    return NumericsReport(
        model=model_name or loaded_name or "graph", setting=policy.setting, mode=policy.mode,
        thresholds={"max_relative_error": max_relative_error, "min_cosine": min_cosine,
                    "fp16_max": FP16_MAX, "min_abs_error": FP16_TINY},
        fetches=fetches, comparisons=comparisons, issues=issues, consistent=consistent,
        consistency_note=note, casts=body.casts)


def _dtype(enum):
    from npu_adapter.graph.types import dtype_name

    return dtype_name(enum)
