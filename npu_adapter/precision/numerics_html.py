"""``numerics.html``: the numerics report as one self-contained page (no network needed)."""

import html
import json

from npu_adapter import __version__
from npu_adapter.report.html import _CSS
from npu_adapter.report.sortable import SORT_SCRIPT

__all__ = ["render_numerics_html"]

_MAX_ROWS = 2000
_EXTRA_CSS = """
td.st-overflow{color:#b00020;font-weight:600}td.st-drift{color:#a15c00;font-weight:600}
td.st-ok{color:#2e7d32}table.sortable th{cursor:pointer;user-select:none}
table.sortable th.asc::after{content:" \\25B2"}table.sortable th.desc::after{content:" \\25BC"}
td.mono,td.wrap{overflow-wrap:anywhere}
pre.fix{background:#f6f8fa;border:1px solid var(--line);padding:6px 10px;
border-radius:6px;white-space:pre-wrap;margin:4px 0}
"""


def _e(value):
    return html.escape(str(value), quote=True)


def _num(value):
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    return f"{value:.4g}"


def _cell(value, extra=""):
    """A right-aligned numeric cell whose sort key is the value (inf sorts last, none first)."""
    key = {None: "", "inf": "1e308", "-inf": "-1e308"}.get(value, value) \
        if not isinstance(value, (int, float)) else repr(float(value))
    return f'<td class="n{extra}" data-k="{_e(key)}">{_num(value)}</td>'


def _issue_rows(report):
    rows = []
    for issue in report["issues"]:
        c = issue["comparison"]
        fix = issue["fix"]
        fix_html = ""
        if fix:
            fix_html = f'<div>{_e(fix.get("text", ""))}</div>'
            if fix.get("modify_mixlist"):
                fix_html += ('<pre class="fix">'
                             f'{_e(json.dumps(fix["modify_mixlist"], indent=1))}</pre>')
        first = "first" if issue["first"] else (
            "after " + ", ".join(issue["inputs_with_issues"]))
        rows.append(
            f'<tr><td class="mono">{_e(issue["tensor"])}</td><td>{_e(issue["op"])}</td>'
            f'<td class="st-{_e(issue["kind"])}">{_e(issue["kind"])}</td>'
            f'<td class="wrap">{_e(first)}</td>'
            f'<td>{_e(issue["dtype"])}<div class="dim">{_e(issue["reason"])}: '
            f'{_e(issue["detail"])}</div></td>'
            f'{_cell(c["nonfinite"])}{_cell(c["reference_max"])}'
            f'{_cell(c["max_relative_error"])}{_cell(c["cosine"])}'
            f'<td class="wrap">{fix_html}</td></tr>')
    return rows


def _headline(issue, first):
    c = issue["comparison"]
    figures = (f'{c["nonfinite"]} of {c["elements"]} values inf/nan where float32 is finite'
               if c["nonfinite"] else f'max rel error {_num(c["max_relative_error"])}, '
               f'cosine {_num(c["cosine"])}')
    label = "First problem" if first else f'First {issue["kind"]}'
    return (f'<p class="warn">{label}: <b class="mono">{_e(issue["tensor"])}</b> '
            f'({_e(issue["op"])}, {_e(issue["kind"])} in {_e(issue["dtype"])}: {_e(figures)}). '
            f'{_e(issue["fix"].get("text", ""))}</p>')


def render_numerics_html(report):
    """The HTML text of a numerics report (``NumericsReport.to_json()``)."""
    s = report["summary"]
    first = [i for i in report["issues"] if i["first"]]
    # An overflow is named first (it is what turns a result into inf/nan), then the first drift.
    shown = [i for i in first if i["kind"] == "overflow"][:1] + \
        [i for i in first if i["kind"] != "overflow"][:1]
    headline = "".join(_headline(i, k == 0) for k, i in enumerate(shown)) or \
        "<p>No tensor overflows or drifts beyond the thresholds.</p>"
    if not s["consistent"]:
        headline += f'<p class="warn">{_e(report["consistency_note"])}</p>'
    cards = [("Mode", report["setting"]), ("Tensors compared", s["tensors"]),
             ("Issues", s["issues"]), ("First issues", len(s["first_issues"])),
             ("Casts inserted", s["casts"])]
    cells = "".join(f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}'
                    "</div></div>" for k, v in cards)
    issue_rows = _issue_rows(report)
    head = ("<thead><tr><th>Tensor</th><th>Op</th><th>Kind</th><th>Order</th>"
            "<th>Computes in · why</th><th>inf/nan</th><th>max |ref|</th><th>max rel err</th>"
            "<th>cosine</th><th>Fix</th></tr></thead>")
    issues = (f'<table class="sortable" id="issue-table">{head}<tbody>{"".join(issue_rows)}'
              "</tbody></table>" if issue_rows else "<p>none</p>")
    tensor_rows = "".join(
        f'<tr><td class="mono">{_e(t["tensor"])}</td><td>{_e(t["op"])}</td>'
        f'<td>{_e(t["dtype"])}</td><td class="st-{_e(t["status"])}">{_e(t["status"])}</td>'
        f'{_cell(t["nonfinite"])}{_cell(t["reference_max"])}{_cell(t["max_abs_error"])}'
        f'{_cell(t["max_relative_error"])}{_cell(t["cosine"])}</tr>'
        for t in report["tensors"][:_MAX_ROWS])
    more = ""
    if len(report["tensors"]) > _MAX_ROWS:
        more = f'<p class="dim">{len(report["tensors"]) - _MAX_ROWS} more in numerics.json.</p>'
    th = report["thresholds"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<title>Numerics: {_e(report["model"])}</title>',
        f"<style>{_CSS}{_EXTRA_CSS}</style></head><body>",
        f'<header><h1>Numerics: {_e(report["model"])}</h1><p>float32 reference against the '
        f'NPU\'s dtypes under {_e(report["setting"])}</p></header>',
        '<nav><a href="#summary">Summary</a><a href="#issues">Issues</a>'
        '<a href="#tensors">Tensors</a></nav><main>',
        f'<section id="summary"><h2>Summary</h2>{headline}<div class="cards">{cells}</div>'
        f'<p class="dim">Overflow: inf or nan under emulation where the float32 value is finite '
        f'(float16 holds |x| ≤ {th["fp16_max"]:g}). Drift: max relative error above '
        f'{th["max_relative_error"]:g} or cosine similarity below {th["min_cosine"]:g}, with '
        f'an error larger than float16\'s smallest step ({th.get("min_abs_error", 0):.3g}). '
        f'Fetches: <span class="mono">{_e(", ".join(report["fetches"]) or "–")}</span>.</p>'
        "</section>",
        '<section id="issues"><h2>Issues in topological order</h2>'
        "<p>A <b>first</b> issue is one whose op has no input with an issue: fix those.</p>"
        f"{issues}</section>",
        '<section id="tensors"><h2>Every compared tensor</h2><p class="dim">Click a column '
        'to sort.</p><table class="sortable" id="tensor-table"><thead><tr><th>Tensor</th>'
        "<th>Op</th><th>dtype</th><th>Status</th><th>inf/nan</th><th>max |ref|</th>"
        "<th>max abs err</th><th>max rel err</th><th>cosine</th></tr></thead>"
        f"<tbody>{tensor_rows}</tbody></table>{more}</section>",
        "</main>",
        f"<footer>npu-adapter {_e(__version__)} · numerics.json holds the same report</footer>",
        f"<script>{SORT_SCRIPT}</script>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
