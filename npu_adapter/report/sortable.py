"""Small building blocks for self-contained HTML pages: sortable tables, SVG bar charts and
per-op charts.

The dump comparison page and the profiling report share them. No network access is needed:
the CSS and the script are inline. Clicking a column header sorts the table by that column
(numbers numerically, text naturally: ``GeOp1_2`` before ``GeOp1_10``; again to reverse); each
cell may carry a sort key.
"""

import html
import math

__all__ = ["BASE_CSS", "FOCUS_SCRIPT", "SORT_SCRIPT", "bar_chart_svg", "escape", "op_chart_svg",
           "page", "sortable_table"]

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
  // Text sorts naturally: runs of digits compare as numbers (GeOp1_2 before GeOp1_10).
  function chunks(text){
    return (text.toLowerCase().match(/\d+|\D+/g) || []).map(function(c){
      return /^\d/.test(c) ? {n: parseInt(c, 10)} : {s: c}; });
  }
  function natural(a, b){
    for (var i = 0; i < Math.min(a.length, b.length); i++){
      var x = a[i], y = b[i];
      if ('n' in x && 'n' in y){ if (x.n !== y.n) return x.n - y.n; }
      else if ('n' in x) return -1; else if ('n' in y) return 1;
      else if (x.s !== y.s) return x.s < y.s ? -1 : 1;
    }
    return a.length - b.length;
  }
  function key(cell){
    var k = cell.getAttribute('data-k'); if (k === null) k = cell.textContent;
    var n = parseFloat(k); return (k !== '' && isFinite(n) && /^[-+0-9.eE]+$/.test(k.trim()))
      ? {n: n} : {s: chunks(k)};
  }
  function cmp(a, b){
    if ('n' in a && 'n' in b) return a.n - b.n;
    if ('n' in a) return -1; if ('n' in b) return 1;
    return natural(a.s, b.s);
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
          var a = key(r1.cells[col]), b = key(r2.cells[col]);
          var blank = (!!a.s && !a.s.length) - (!!b.s && !b.s.length);   // empty cells last
          if (blank) return blank;
          var c = cmp(a, b);
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


def _short(text, limit=40):
    return text if len(text) <= limit else "\u2026" + text[-(limit - 1):]


def op_chart_svg(points, *, threshold=1.0, y_label="", marker=None, step=14, height=230,
                 floor=1e-4):
    """An SVG chart of one value per op, in execution order, each op named under the x axis.

    Args:
        points: ``(name, value, state, tooltip)`` per op; ``value`` >= 0 (None for
            ``nonfinite``); ``state`` ``"ok"``, ``"bad"`` or ``"nonfinite"``.
        threshold: drawn as a dashed line; values are on a log scale.
        y_label: the axis title.
        marker: index of the op to mark (a red line; its name in bold red).
        step: pixels per op (the chart grows to the right; the page scrolls it).
        height: height of the plot area.
        floor: values below it (0 included) are drawn at it.

    ``nonfinite`` points are drawn as crosses on a band above the plot, labelled inf/nan: they
    have no finite value, and they are what a person looks for first.
    """
    left, right, top, band = 70, 24, 10, 26
    names = [_short(p[0]) for p in points]
    label_room = int(max([len(n) for n in names] + [4]) * 5.4 * 0.8) + 16
    width = left + right + max(step * len(points), 480)
    plot_top = top + band
    plot_bottom = plot_top + height
    total_h = plot_bottom + label_room + 8
    logs = [math.log10(max(p[1], floor)) for p in points if p[1] is not None]
    t = math.log10(threshold)
    y0 = math.floor(min(logs + [t - 2]))
    y1 = math.ceil(max(logs + [t + 1]))

    def px(i):
        return left + step * (i + 0.5)

    def py(value):
        v = math.log10(max(value, floor))
        return plot_bottom - (v - y0) / (y1 - y0) * height

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="opchart" width="{width}" '
           f'height="{total_h}" viewBox="0 0 {width} {total_h}" font-size="10" '
           'font-family="sans-serif">',
           f'<rect x="{left}" y="{plot_top}" width="{width - left - right}" height="{height}" '
           'fill="#fff" stroke="#c9d1dd"/>',
           f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{band - 4}" '
           'fill="#fdecec"/>',
           f'<text x="{left - 6}" y="{top + band / 2 + 2}" text-anchor="end" fill="#b00020">'
           "inf/nan</text>"]
    for k in range(y0, y1 + 1):
        y = plot_bottom - (k - y0) / (y1 - y0) * height
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#eef1f5"/><text x="{left - 6}" y="{y + 3:.1f}" '
                   f'text-anchor="end">1e{k}</text>')
    ty = py(threshold)
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{ty:.1f}" y2="{ty:.1f}" '
               'stroke="#b00020" stroke-dasharray="5 3"/>'
               f'<text x="{left + 4}" y="{ty - 3:.1f}" fill="#b00020">threshold</text>')
    if marker is not None:
        mx = px(marker)
        out.append(f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{top}" y2="{plot_bottom}" '
                   'stroke="#d33" stroke-width="2" stroke-dasharray="4 3"/>')
    path = " ".join(f"{'M' if k == 0 else 'L'}{px(i):.1f},{py(p[1]):.1f}"
                    for k, (i, p) in enumerate((i, p) for i, p in enumerate(points)
                                               if p[1] is not None))
    if path:
        out.append(f'<path d="{path}" fill="none" stroke="#c5cbd6" stroke-width="1"/>')
    for i, (name, value, state, tooltip) in enumerate(points):
        x = px(i)
        tip = f"<title>{escape(tooltip or name)}</title>"
        if state == "nonfinite":
            y = top + (band - 4) / 2
            out.append(f'<g class="pt nonfinite" stroke="#b00020" stroke-width="2">{tip}'
                       f'<line x1="{x - 4:.1f}" y1="{y - 4:.1f}" x2="{x + 4:.1f}" '
                       f'y2="{y + 4:.1f}"/><line x1="{x - 4:.1f}" y1="{y + 4:.1f}" '
                       f'x2="{x + 4:.1f}" y2="{y - 4:.1f}"/></g>')
        else:
            colour = "#d0533f" if state == "bad" else "#3f8f4f"
            out.append(f'<circle class="pt {escape(state)}" cx="{x:.1f}" cy="{py(value):.1f}" '
                       f'r="3.5" fill="{colour}">{tip}</circle>')
        ly = plot_bottom + 8
        style = ' fill="#b00020" font-weight="bold"' if i == marker else (
            ' fill="#b00020"' if state != "ok" else ' fill="#333"')
        out.append(f'<text class="oplabel" x="{x + 3:.1f}" y="{ly}" text-anchor="end" '
                   f'transform="rotate(-60 {x + 3:.1f} {ly})"{style}>{escape(names[i])}'
                   "</text>")
    out.append(f'<text x="12" y="{plot_top + height / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 12 {plot_top + height / 2:.1f})">{escape(y_label)}'
               "</text></svg>")
    return "".join(out)


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


FOCUS_SCRIPT = r"""
(function(){
  document.querySelectorAll('.svgbox[data-focus]').forEach(function(box){
    var x = parseFloat(box.getAttribute('data-focus'));
    box.scrollLeft = Math.max(0, x - box.clientWidth / 2);
  });
})();
"""


def page(title, body, extra_css=""):
    """A complete HTML document with the shared CSS, the sorting script and the script that
    scrolls a wide chart (``<div class="svgbox" data-focus="x">``) to its point of interest."""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title><style>{BASE_CSS}{extra_css}</style></head><body>"
            f"{body}<script>{SORT_SCRIPT}{FOCUS_SCRIPT}</script></body></html>\n")
