"""The dump comparison as one self-contained HTML page.

Sections: what went wrong first in each iteration (the first op whose output gains inf/nan, the
first diverging op, with the figures of its output and whether its inputs agree), a summary per
iteration, an error-by-op chart (each op's error over the threshold, in execution order, op names
on the axis, inf/nan on a band above, the first divergence marked) and a sortable table of every
compared tensor.
"""

from npu_adapter.report.sortable import escape, op_chart_svg, page, sortable_table

__all__ = ["render_comparison_html"]

_EXTRA_CSS = ("p.finding{background:#fde8e8;border:1px solid #f0b4b4;border-radius:6px;"
              "padding:8px 12px}p.finding b{font-family:ui-monospace,Menlo,monospace}")


def _fmt(value, digits=6):
    return "" if value is None else f"{value:.{digits}g}"


def _key(value):
    return "" if value is None else repr(float(value))


def _finding(step, label, op, same):
    inputs = {True: " Its inputs agree with the golden dump: the op itself makes the difference.",
              False: " Its inputs differ too (look upstream as well).", None: ""}
    also = " It is also the first diverging op." if same else ""
    return (f'<p class="finding">Iteration {escape(step)}: {escape(label)} '
            f'<b>{escape(op["op_name"])}</b> ({escape(op["op_type"])}): '
            f'{escape(op["figures"])}.{escape(inputs[op["inputs_agree"]])}{escape(also)}</p>')


def _chart(result, step):
    ops = [op for op in result.ops if op.step == step]
    first = result.first_divergence(step)
    points, marker = [], None
    for k, op in enumerate(ops):
        worst = op.worst_tensor
        figures = worst.summary() if worst else op.status
        tooltip = f"{op.op_name} ({op.op_type}): {op.status}; {figures}"
        if op.output_nonfinite or (worst is not None and worst.status == "nonfinite"):
            points.append((op.op_name, None, "nonfinite", tooltip))
        else:
            ratio = op.error_ratio
            state = "ok" if op.status == "ok" else "bad"
            if ratio is None:   # unreadable or a shape mismatch: no figure, drawn as failing
                ratio = 10.0 if state == "bad" else 0.0
            points.append((op.op_name, ratio, state, tooltip))
        if op is first:
            marker = k
    if not points:
        return ""
    svg = op_chart_svg(points, threshold=1.0, marker=marker,
                       y_label="error / threshold (log)")
    focus = f' data-focus="{70 + 14 * marker}"' if marker is not None else ""
    return (f"<h2>Error by op, iteration {escape(step)}</h2>"
            '<p class="muted">Each op\'s output against the golden dump, in execution order: its '
            "error over the threshold (the larger of max abs error / allowed error and "
            "(1 - cosine) / (1 - min cosine)); above the dashed line an op diverges. Ops whose "
            "output gains inf/nan are crosses on the red band. The dashed red line marks the "
            "first diverging op. Hover a point for its figures.</p>"
            f'<div class="svgbox"{focus}>{svg}</div>')


def _tensor_cells(t):
    dtype = (t.golden_dtype if t.golden_dtype == t.other_dtype
             else f"{t.golden_dtype} / {t.other_dtype}")
    nonfinite = (f"{t.golden_nonfinite} / {t.other_nonfinite}",
                 repr(float(t.nonfinite_mismatch)))
    status = t.status + (f" ({t.note})" if t.note else "")
    if t.status == "nonfinite":
        status = f"inf/nan: {t.nonfinite_mismatch} of {t.elements} differ"
    return [f"{t.direction} {t.index}", "x".join(map(str, t.golden_shape)), dtype, nonfinite,
            (_fmt(t.cosine) or "–", _key(t.cosine)), (_fmt(t.max_abs) or "–", _key(t.max_abs)),
            (_fmt(t.max_rel) or "–", _key(t.max_rel)),
            (_fmt(t.error_ratio, 3) or ("inf/nan" if t.status == "nonfinite" else "–"),
             _key(t.error_ratio) if t.error_ratio is not None else
             ("1e300" if t.status == "nonfinite" else "")),
            status]


def render_comparison_html(result):
    """The HTML page of a :class:`~npu_adapter.datadump.compare.ComparisonResult`."""
    th = result.thresholds
    parts = ["<h1>Dump comparison</h1>",
             f'<p class="muted">golden <code>{escape(result.golden)}</code><br>other '
             f"<code>{escape(result.other)}</code><br>thresholds: cosine &ge; "
             f"{th['min_cosine']}, max abs &le; {th['atol']} + {th['rtol']} &times; max "
             "|golden|; inf/nan values must match</p>"]
    for note in result.notes:
        parts.append(f'<p class="muted">{escape(note)}</p>')
    summary = result.to_json()["steps"]
    total_diverged = sum(s["ops_diverged"] for s in summary)
    total_nonfinite = sum(s["ops_with_new_nonfinite"] for s in summary)
    parts.append('<div class="cards">'
                 f'<div class="card"><b>{len(summary)}</b><span>iterations</span></div>'
                 f'<div class="card"><b>{len(result.ops)}</b><span>ops compared</span></div>'
                 f'<div class="card"><b>{total_diverged}</b><span>ops diverged</span></div>'
                 f'<div class="card"><b>{total_nonfinite}</b><span>ops with inf/nan in their '
                 "output that the golden dump has not</span></div></div>")
    for step in summary:
        nonfinite, first = step["first_nonfinite"], step["first_divergence"]
        same = nonfinite is not None and first is not None and \
            nonfinite["order"] == first["order"]
        if nonfinite is not None:
            parts.append(_finding(step["step"], "the first op whose output has inf/nan is",
                                  nonfinite, same))
        if first is not None and not same:
            parts.append(_finding(step["step"], "the first diverging op is", first, False))
    rows, classes = [], []
    for step in summary:
        first, nonfinite = step["first_divergence"], step["first_nonfinite"]
        rows.append([step["step"], step["ops_compared"], step["ops_diverged"],
                     nonfinite["op_name"] if nonfinite else "none",
                     first["op_name"] if first else "none",
                     first["op_type"] if first else "",
                     first["figures"] if first else "",
                     len(step["only_in_golden"]), len(step["only_in_other"])])
        classes.append("first" if first else "")
    parts.append("<h2>Iterations</h2>")
    parts.append(sortable_table(
        "steps", ["iteration", "ops compared", "ops diverged", "first op with inf/nan",
                  "first diverging op", "type", "its output", "only in golden",
                  "only in other"],
        rows, classes, numeric=(0, 1, 2, 7, 8)))
    for step in result.steps:
        parts.append(_chart(result, step))
    rows, classes = [], []
    for op in result.ops:
        first = result.first_divergence(op.step)
        for t in op.tensors or [None]:
            head = [op.step, op.order, op.op_name, op.op_type, op.model]
            if t is None:
                rows.append(head + ["", "", "", "", "", "", "", "", op.status])
                classes.append("warn")
                continue
            rows.append(head + _tensor_cells(t))
            classes.append("first" if first is op and t in op.judged and t.status != "ok"
                           else ("bad" if t.status != "ok" else ""))
    parts.append("<h2>Tensors</h2><p class=\"muted\">Click a column to sort. inf/nan: the "
                 "count in the golden / the other dump. error / threshold: 1 or more "
                 "diverges.</p>")
    parts.append(sortable_table(
        "tensors", ["iteration", "order", "op", "type", "model", "tensor", "shape", "dtype",
                    "inf/nan", "cosine", "max abs error", "max rel error", "error / threshold",
                    "status"], rows, classes, numeric=(0, 1, 8, 9, 10, 11, 12)))
    return page("Dump comparison", "".join(parts), extra_css=_EXTRA_CSS)
