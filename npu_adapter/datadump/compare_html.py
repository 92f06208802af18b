"""The dump comparison as one self-contained HTML page.

Sections: a summary per iteration (ops compared, ops diverged, the first diverging op), an
error-by-op chart (max relative error and 1 - cosine similarity of each op, in topological order,
log scale, the first divergence marked) and a sortable table of every compared tensor.
"""

from npu_adapter.report.sortable import escape, line_chart_svg, page, sortable_table

__all__ = ["render_comparison_html"]


def _fmt(value, digits=6):
    return "" if value is None else f"{value:.{digits}g}"


def _key(value):
    return "" if value is None else repr(float(value))


def render_comparison_html(result):
    """The HTML page of a :class:`~npu_adapter.datadump.compare.ComparisonResult`."""
    parts = ["<h1>Dump comparison</h1>",
             f'<p class="muted">golden <code>{escape(result.golden)}</code><br>other '
             f"<code>{escape(result.other)}</code><br>thresholds: cosine &ge; "
             f"{result.thresholds['min_cosine']}, max abs &le; {result.thresholds['atol']} + "
             f"{result.thresholds['rtol']} &times; max |golden|</p>"]
    for note in result.notes:
        parts.append(f'<p class="muted">{escape(note)}</p>')
    summary = result.to_json()["steps"]
    total_diverged = sum(s["ops_diverged"] for s in summary)
    parts.append('<div class="cards">'
                 f'<div class="card"><b>{len(summary)}</b><span>iterations</span></div>'
                 f'<div class="card"><b>{len(result.ops)}</b><span>ops compared</span></div>'
                 f'<div class="card"><b>{total_diverged}</b><span>ops diverged</span></div>'
                 "</div>")
    rows, classes = [], []
    for step in summary:
        first = step["first_divergence"]
        rows.append([step["step"], step["ops_compared"], step["ops_diverged"],
                     first["op_name"] if first else "none",
                     first["op_type"] if first else "",
                     (_fmt(first["worst_cosine"]), _key(first["worst_cosine"])) if first else "",
                     (_fmt(first["worst_max_rel"]), _key(first["worst_max_rel"])) if first
                     else "",
                     len(step["only_in_golden"]), len(step["only_in_other"])])
        classes.append("first" if first else "")
    parts.append("<h2>Iterations</h2>")
    parts.append(sortable_table(
        "steps", ["iteration", "ops compared", "ops diverged", "first diverging op", "type",
                  "its cosine", "its max rel error", "only in golden", "only in other"],
        rows, classes, numeric=(0, 1, 2, 5, 6, 7, 8)))
    for step in result.steps:
        ops = [op for op in result.ops if op.step == step]
        if not ops:
            continue
        first = result.first_divergence(step)
        rel = [(op.order, op.worst_rel if op.worst_rel else 1e-16, op.op_name) for op in ops
               if op.worst_rel is not None]
        cos = [(op.order, max(1.0 - op.worst_cosine, 1e-16), op.op_name) for op in ops
               if op.worst_cosine is not None]
        markers = [(first.order, f"first divergence: {first.op_name}")] if first else []
        parts.append(f"<h2>Error by op, iteration {escape(step)}</h2>")
        parts.append('<div class="svgbox">' + line_chart_svg(
            [("max relative error", "#d0533f", rel), ("1 - cosine similarity", "#3f6fd0", cos)],
            x_label="op (topological order)", y_label="error (log10)", log_y=True,
            markers=markers) + "</div>")
    rows, classes = [], []
    for op in result.ops:
        first = result.first_divergence(op.step)
        for t in op.tensors or [None]:
            if t is None:
                rows.append([op.step, op.order, op.op_name, op.op_type, op.model, "", "", "",
                             "", "", "", "", op.status])
                classes.append("warn")
                continue
            rows.append([op.step, op.order, op.op_name, op.op_type, op.model,
                         f"{t.direction} {t.index}", "x".join(map(str, t.golden_shape)),
                         t.golden_dtype if t.golden_dtype == t.other_dtype
                         else f"{t.golden_dtype} / {t.other_dtype}",
                         (_fmt(t.cosine), _key(t.cosine)), (_fmt(t.max_abs), _key(t.max_abs)),
                         (_fmt(t.max_rel), _key(t.max_rel)), t.nonfinite_mismatch,
                         t.status + (f" ({t.note})" if t.note else "")])
            classes.append("first" if first is op else ("bad" if t.status != "ok" else ""))
    parts.append("<h2>Tensors</h2><p class=\"muted\">Click a column to sort.</p>")
    parts.append(sortable_table(
        "tensors", ["iteration", "order", "op", "type", "model", "tensor", "shape", "dtype",
                    "cosine", "max abs error", "max rel error", "non-finite mismatches",
                    "status"], rows, classes, numeric=(0, 1, 8, 9, 10, 11)))
    return page("Dump comparison", "".join(parts))
