"""Small building blocks for self-contained HTML pages: sortable tables and SVG bar/line charts.

The dump comparison page and the profiling report share them. No network access is needed:
the CSS and the script are inline. Clicking a column header sorts the table by that column
(numbers numerically, text alphabetically; again to reverse); each cell may carry a sort key.
"""

import html
import math

__all__ = ["BASE_CSS", "SORT_SCRIPT", "bar_chart_svg", "escape", "line_chart_svg", "page",
           "sortable_table"]

BASE_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
color:#1d2430;background:#fff}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px;
border-bottom:1px solid #d8dee8;padding-bottom:4px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.card{border:1px solid #d8dee8;border-radius:6px;padding:8px 14px;background:#f6f8fb;
min-width:140px}
.card b{display:block;font-size:20px}.card span{color:#5a6473;font-size:12px}
table.sortable{border-collapse:collapse;font-size:13px;width:100%}
table.sortable th{background:#e9eef6;cursor:pointer;text-align:left;padding:5px 8px;
position:sticky;top:0;user-select:none;white-space:nowrap}
table.sortable th.asc::after{content:" \\25B2"}table.sortable th.desc::after{content:" \\25BC"}
table.sortable td{padding:4px 8px;border-top:1px solid #eef1f5;vertical-align:top}
table.sortable td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fde8e8}tr.first td{background:#f9c5c5;font-weight:600}
tr.warn td{background:#fff4d6}
.muted{color:#5a6473}.svgbox{overflow-x:auto;border:1px solid #d8dee8;border-radius:6px;
padding:6px;background:#fcfdff}
code{background:#f1f3f7;padding:1px 4px;border-radius:3px}
.tablebox{overflow-x:auto}
"""

SORT_SCRIPT = r"""
(function(){
  function key(cell){
    var k = cell.getAttribute('data-k'); if (k === null) k = cell.textContent;
    var n = parseFloat(k); return (k !== '' && isFinite(n) && /^[-+0-9.eE]+$/.test(k.trim()))
      ? {n: n} : {s: k.toLowerCase()};
  }
  function cmp(a, b){
    if ('n' in a && 'n' in b) return a.n - b.n;
    if ('n' in a) return -1; if ('n' in b) return 1;
    return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
  }
  document.querySelectorAll('table.sortable').forEach(function(table){
    var heads = table.querySelectorAll('thead th');
    heads.forEach(function(th, col){
      th.addEventListener('click', function(){
        var desc = th.classList.contains('asc');
        heads.forEach(function(h){ h.classList.remove('asc', 'desc'); });
        th.classList.add(desc ? 'desc' : 'asc');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function(r1, r2){
          var c = cmp(key(r1.cells[col]), key(r2.cells[col]));
          return desc ? -c : c;
        });
        rows.forEach(function(r){ body.appendChild(r); });
      });
    });
  });
})();
"""


def escape(value):
    """HTML-escaped ``str(value)``."""
    return html.escape(str(value), quote=True)


def sortable_table(table_id, columns, rows, row_classes=None, numeric=()):
    """A ``<table class="sortable">``.

    Args:
        table_id: the element id.
        columns: header texts.
        rows: lists of cells; a cell is a value or a ``(text, sort_key)`` pair.
        row_classes: optional CSS class per row (``bad``, ``first``, ``warn``).
        numeric: indexes of right-aligned numeric columns.
    """
    numeric = set(numeric)
    out = [f'<div class="tablebox"><table class="sortable" id="{escape(table_id)}"><thead><tr>']
    out += [f"<th>{escape(c)}</th>" for c in columns]
    out.append("</tr></thead><tbody>")
    for i, row in enumerate(rows):
        cls = row_classes[i] if row_classes else ""
        out.append(f'<tr class="{escape(cls)}">' if cls else "<tr>")
        for j, cell in enumerate(row):
            text, sort_key = cell if isinstance(cell, tuple) else (cell, None)
            attrs = ' class="num"' if j in numeric else ""
            if sort_key is not None:
                attrs += f' data-k="{escape(sort_key)}"'
            out.append(f"<td{attrs}>{escape(text)}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _ticks(low, high, count=5):
    if high <= low:
        return [low]
    step = (high - low) / (count - 1)
    return [low + k * step for k in range(count)]


def line_chart_svg(series, *, width=900, height=260, x_label="", y_label="", log_y=False,
                   markers=()):
    """An SVG chart of one or more series of points drawn as dots joined by lines.

    ``series`` is a list of ``(name, colour, points)``, a point ``(x, y)`` or ``(x, y, label)``
    (the label is the dot's tooltip); ``log_y`` plots log10(y) (y <= 0 are drawn at the
    bottom); ``markers`` are ``(x, label)`` vertical lines (e.g. the first divergence).
    """
    left, right, top, bottom = 64, 16, 16, 44
    series = [(name, colour, [(p[0], p[1], p[2] if len(p) > 2 else "") for p in points])
              for name, colour, points in series]
    xs = [p[0] for _, _, pts in series for p in pts] or [0]
    ys = [_y(p[1], log_y) for _, _, pts in series for p in pts
          if _y(p[1], log_y) is not None]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 1, y1 + 1

    def px(x):
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def py(y):
        value = _y(y, log_y)
        value = y0 if value is None else value
        return top + (1 - (value - y0) / (y1 - y0)) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-size="11" font-family="sans-serif">',
           f'<rect x="{left}" y="{top}" width="{width - left - right}" '
           f'height="{height - top - bottom}" fill="#fff" stroke="#c9d1dd"/>']
    for t in _ticks(y0, y1):
        y = top + (1 - (t - y0) / (y1 - y0)) * (height - top - bottom)
        label = f"1e{t:.0f}" if log_y else f"{t:.3g}"
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#eef1f5"/><text x="{left - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{escape(label)}</text>')
    for x, label in markers:
        out.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{top}" '
                   f'y2="{height - bottom}" stroke="#d33" stroke-dasharray="4 3"/>'
                   f'<text x="{px(x) + 4:.1f}" y="{top + 12}" fill="#b00">{escape(label)}</text>')
    for k, (name, colour, points) in enumerate(series):
        if not points:
            continue
        path = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}"
                        for i, (x, y, _) in enumerate(points))
        out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                f"<title>{escape(label or x)}: {escape(name)} {escape(f'{y:.4g}')}</title>"
                "</circle>" for x, y, label in points]
        out.append(f'<rect x="{left + 10 + 170 * k}" y="{height - 16}" width="10" height="10" '
                   f'fill="{colour}"/><text x="{left + 24 + 170 * k}" y="{height - 7}">'
                   f"{escape(name)}</text>")
    out.append(f'<text x="{width - right}" y="{height - 22}" text-anchor="end">'
               f"{escape(x_label)}</text>")
    out.append(f'<text x="12" y="{top + 4}" transform="rotate(90 12 {top + 4})">'
               f"{escape(y_label)}</text></svg>")
    return "".join(out)


def _y(value, log_y):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if log_y:
        return math.log10(value) if value > 0 else None
    return float(value)


def bar_chart_svg(items, *, width=900, bar_height=18, colour="#4a7bd0", unit=""):
    """Horizontal bars for ``items`` = ``[(label, value), ...]`` (largest first, as given)."""
    label_width, right = 300, 90
    top = 6
    height = top * 2 + bar_height * max(len(items), 1)
    largest = max((v for _, v in items), default=0) or 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-size="12" font-family="sans-serif">']
    for k, (label, value) in enumerate(items):
        y = top + k * bar_height
        length = (width - label_width - right) * value / largest
        text = label if len(label) <= 46 else "..." + label[-43:]
        out.append(f'<text x="{label_width - 6}" y="{y + bar_height - 5}" text-anchor="end">'
                   f'{escape(text)}</text><rect x="{label_width}" y="{y + 2}" '
                   f'width="{max(length, 1):.1f}" height="{bar_height - 4}" fill="{colour}"/>'
                   f'<text x="{label_width + length + 4:.1f}" y="{y + bar_height - 5}">'
                   f"{escape(f'{value:,.1f}{unit}')}</text>")
    out.append("</svg>")
    return "".join(out)


def page(title, body):
    """A complete HTML document with the shared CSS and the sorting script."""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title><style>{BASE_CSS}</style></head><body>{body}"
            f"<script>{SORT_SCRIPT}</script></body></html>\n")
