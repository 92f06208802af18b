"""``report.html``: the placement report as one self-contained page for a person to read.

No network access is needed: CSS, JavaScript and the SVG drawings are inline. Sections, in
page order:

* summary: node counts, share on the device, clusters, bytes crossing the host/device boundary;
* the partitioned graph (coloured by cluster; collapsed to clusters and the host nodes between
  them when large), right after the summary so that it is in the first screen; a wide drawing is
  scrolled to its first layer;
* what keeps ops off the device: host reasons, most frequent first, with their op types and the
  op (and function) that causes each (``OptionalFromValue in model_bn_cond_true_12``);
* clusters, in execution order: size, op types, what separates each from its neighbours (the
  host nodes that feed it and read from it, with their reasons and causes; direct edges to other
  clusters; fetches), boundary tensors (dtype, shape, bytes), gears, and a drill-down drawing of
  each (the overview drawing links to them);
* op types: per op type, how many nodes run where;
* precision (only with ``npu_adapter_emulate_precision``): mode, ops per dtype, casts, the ops a
  ``modify_mixlist`` edit changed; the node table then has a "Dtype · why" column and the search
  fields ``dtype`` and ``dtype_reason``;
* a node table with search: words match any column, ``field:text`` one column (``name``, ``op``,
  ``device``, ``cluster``, ``reason``, ``cause``, ``executes``), ``field=text`` an exact value;
  all words must match. ``device``/``cluster``/``reason`` are the original's placement;
  ``cause`` the op (and function) behind a host placement; ``executes`` is where the node runs
  on the rewrite's backend (``host (<reason>)`` for device nodes the CPU reference runs in the
  outer graph, such as variables and the ops on their ref edges). The page opens with a query
  from its address (``report.html#q=op:Conv2D``); clicking a reason, op type or cluster
  elsewhere in the page fills the search.

Every table sorts by a click on a column header (again: reversed; names sort naturally, so
``GeOp1_2`` comes before ``GeOp1_10``; empty cells stay last). The node table is built by the
page's script from JSON embedded in the page, a page of rows at a time, so graphs of 100k nodes
stay responsive; it sorts all matching nodes, not only the rows shown.
"""

import html
import json

from npu_adapter import __version__
from npu_adapter.report.drawing import cluster_colors
from npu_adapter.report.sortable import SORT_SCRIPT

__all__ = ["render_report_html", "format_bytes"]

_MAX_OP_ROWS = 40


def format_bytes(value):
    """``1536`` → ``"1.5 KiB"``; None → ``"?"``."""
    if value is None:
        return "?"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover - loop always returns


def _bytes_text(total, per_example):
    """``"1.5 KiB + 768 B × batch"`` from a fixed size and a per-example size (either None)."""
    parts = []
    if total is not None:
        parts.append(format_bytes(total))
    if per_example is not None:
        parts.append(f"{format_bytes(per_example)} × batch")
    return " + ".join(parts) or "?"


def _e(value):
    return html.escape(str(value), quote=True)


def _shape(shape):
    if shape is None:
        return "unknown"
    return "[" + ", ".join("?" if d < 0 else str(d) for d in shape) + "]"


def _gear_text(gear):
    """One gear as ``input:0 (1,16,16,3), mask:0 (1,16)``: each input with its shape."""
    return ", ".join(f"{name} ({','.join(str(d) for d in dims)})" for name, dims in gear)


def _q_link(text, query, title=None):
    title_attr = f' title="{_e(title)}"' if title else ""
    return f'<a href="#nodes" class="q" data-q="{_e(query)}"{title_attr}>{_e(text)}</a>'


def _script_json(data):
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # Inside <script>, "</" could end the element and "<!--" open a comment.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _summary(report):
    s = report["summary"]
    b = s["boundary"]
    share = f'{100 * s["npu_fraction"]:.1f}%'
    moved = _bytes_text(b["bytes"] or None, b["bytes_per_example"] or None)
    unknown = (f' (+{b["tensors_of_unknown_size"]} tensors of unknown size)'
               if b["tensors_of_unknown_size"] else "")
    rows = [
        ("Nodes", f'{s["nodes"]}'),
        ("On the device", f'{s["npu"]} ({share})'),
        ("On the host", f'{s["host"]}'),
        ("Clusters", f'{s["clusters"]}'),
    ]
    if s.get("npu_executed_on_host"):
        rows.append(("Device nodes run on the host by this backend",
                     f'{s["npu_executed_on_host"]}'))
    rows += [
        ("Boundary tensors", f'{b["inputs"]} in, {b["outputs"]} out'),
        ("Bytes crossing the boundary per step", moved + unknown),
    ]
    cells = "".join(f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}'
                    "</div></div>" for k, v in rows)
    npu_pct = 100 * s["npu_fraction"]
    bar = (f'<div class="bar" title="{_e(share)} of the nodes on the device">'
           f'<span class="npu" style="width:{npu_pct:.2f}%"></span></div>')
    note = ""
    if not report["rewritten"]:
        reason = report["skip_reason"] or "no node could go to the device"
        note = f'<p class="warn">The graph was not rewritten: {_e(reason)}.</p>'
    return f'<section id="summary"><h2>Summary</h2>{note}<div class="cards">{cells}</div>{bar}' \
           "</section>"


def _cause_text(causes):
    return "; ".join(c["text"] for c in causes)


def _blockers(report):
    rows = []
    total = max(report["summary"]["nodes"], 1)
    for b in report["summary"]["host_blockers"]:
        ops = ", ".join(_q_link(f'{o["op"]} ×{o["count"]}', f'op={o["op"]} reason={b["reason"]}')
                        for o in b["op_types"])
        pct = 100 * b["count"] / total
        causes = "<br>".join(_e(c["text"]) for c in b.get("causes", ()))
        rows.append(
            f'<tr><td>{_q_link(b["reason"], "reason=" + b["reason"])}</td>'
            f'<td class="n">{b["count"]}</td>'
            f'<td data-k="{pct:.4f}"><div class="mini"><span style="width:{pct:.2f}%"></span>'
            f'</div></td><td>{_e(b["description"])}</td><td>{ops}</td>'
            f'<td class="cause">{causes}</td></tr>')
    if not rows:
        body = "<p>Every node runs on the device.</p>"
    else:
        body = ('<table class="sortable" id="blocker-table"><thead><tr><th>Reason</th>'
                "<th>Nodes</th><th>Share</th><th>What it means</th>"
                "<th>Op types (most frequent first)</th><th>Caused by</th></tr></thead>"
                f'<tbody>{"".join(rows)}</tbody></table>')
    return ('<section id="blockers"><h2>What keeps ops off the device</h2>'
            "<p>Host nodes by reason, most frequent first, and the op (and function) that "
            "causes each. Click a reason or an op type to list its nodes; click a column to "
            f"sort.</p>{body}</section>")


def _op_types(report):
    rows = []
    for entry in report["summary"]["by_op_type"]:
        reasons = ", ".join(f"{_e(r)} ×{n}" for r, n in entry["host_reasons"].items())
        rows.append(f'<tr><td>{_q_link(entry["op"], "op=" + entry["op"])}</td>'
                    f'<td class="n">{entry["count"]}</td><td class="n">{entry["npu"]}</td>'
                    f'<td class="n">{entry["host"]}</td><td>{reasons}</td></tr>')
    head = ("<thead><tr><th>Op type</th><th>Nodes</th><th>Device</th><th>Host</th>"
            "<th>Host reasons</th></tr></thead>")
    box = ' class="scrollbox"' if len(rows) > _MAX_OP_ROWS else ""
    return (f'<section id="op-types"><h2>Op types</h2><div{box}>'
            f'<table class="sortable" id="op-type-table">{head}<tbody>{"".join(rows)}</tbody>'
            "</table></div></section>")


def _tensor_table(records):
    if not records:
        return "<p>none</p>"
    rows = "".join(
        f'<tr><td class="mono">{_e(r["tensor"])}</td><td>{_e(r["dtype"])}</td>'
        f'<td class="mono">{_e(_shape(r["shape"]))}</td>'
        f'<td class="n">{_e(format_bytes(r["bytes"]))}'
        + (f' <span class="dim">({_e(format_bytes(r["bytes_per_example"]))} per example)</span>'
           if r["bytes_per_example"] is not None else "")
        + "</td></tr>" for r in records)
    return ("<table><thead><tr><th>Tensor</th><th>dtype</th><th>Shape</th><th>Bytes</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>")


def _clusters(report, cluster_svgs):
    if not report["clusters"]:
        return '<section id="clusters"><h2>Clusters</h2><p>No cluster.</p></section>'
    colors = cluster_colors([c["name"] for c in report["clusters"]])
    with_backend = any("compile" in c for c in report["clusters"])
    rows = []
    details = []
    for k, c in enumerate(report["clusters"]):
        fill, stroke = colors[c["name"]]
        swatch = f'<span class="sw" style="background:{fill};border-color:{stroke}"></span>'
        ops = ", ".join(f'{_e(o["op"])} ×{o["count"]}' for o in c["op_types"][:6])
        if len(c["op_types"]) > 6:
            ops += ", …"
        gears = "; ".join(_gear_text(g) for g in c["gears"]) or "–"
        rows.append(
            f'<tr><td data-k="{k}">{swatch}<a href="#cluster-{_e(c["name"])}">'
            f'{_e(c["name"])}</a></td>'
            f'<td class="n">{_q_link(str(c["size"]), "cluster=" + c["name"], "list its nodes")}'
            f'</td><td>{ops}</td><td class="sep">{_separators(c)}</td>'
            f'<td class="n">{len(c["inputs"])} · '
            f'{_e(_bytes_text(c["input_bytes"], c["input_bytes_per_example"]))}</td>'
            f'<td class="n">{len(c["outputs"])} · '
            f'{_e(_bytes_text(c["output_bytes"], c["output_bytes_per_example"]))}</td>'
            f"<td>{_e(gears)}</td>"
            + (f"<td>{_backend_cell(c.get('compile'))}</td>" if with_backend else "")
            + "</tr>")
        svg = cluster_svgs.get(c["name"])
        drawing = (f'<div class="graph">{svg}</div>' if svg else
                   '<p class="dim">Not drawn (only the largest clusters get a drawing); filter '
                   f'the node table with {_q_link("cluster=" + c["name"], "cluster=" + c["name"])}'
                   ".</p>")
        outer = c.get("executed_on_host") or []
        execution = ""
        if outer or len(c.get("calls", ())) > 1:
            execution = (
                f'<p>This backend runs {len(outer)} of its nodes in the outer graph '
                f'({_q_link("list them", "cluster=" + c["name"] + " executes:host")}) and the '
                f'rest in {len(c["calls"])} function call(s): '
                f'{_e(", ".join(c["calls"]))}. The boundary below is the original\'s GeOp.</p>')
        details.append(
            f'<details class="cluster" id="cluster-{_e(c["name"])}"><summary>{swatch}'
            f'<b>{_e(c["name"])}</b> — {c["size"]} nodes, op {_e(c["op"])}</summary>{execution}'
            f'<h4>Inputs (host → device)</h4>{_tensor_table(c["inputs"])}'
            f'<h4>Outputs (device → host)</h4>{_tensor_table(c["outputs"])}'
            f"<h4>Drawing</h4>{drawing}</details>")
    table = ('<table class="sortable" id="cluster-table"><thead><tr><th>Cluster</th>'
             "<th>Nodes</th><th>Op types</th><th>Separated from its neighbours by</th>"
             "<th>Inputs · bytes</th><th>Outputs · bytes</th><th>Gears</th>"
             + ('<th title="how the backend runs the cluster, and why (compiled time over '
                'the time on TensorFlow\'s kernels)">Backend</th>'
                if with_backend else "") + "</tr></thead>"
             f'<tbody>{"".join(rows)}</tbody></table>')
    return (f'<section id="clusters"><h2>Clusters</h2>'
            "<p>In execution order. Each cluster is cut off from the next by the host nodes "
            "that feed it (←) and read from it (→), with the reason each stays on the host and "
            "the op that causes it. Click a column to sort.</p>"
            f'<div class="scrollbox">{table}</div>'
            "<p>Bytes moved per step: fixed sizes plus per-example sizes times the batch size "
            "where only the batch dim is unknown; ? marks unknown sizes.</p>"
            f'{"".join(details)}</section>')


def _backend_cell(record):
    """The Backend column of a cluster: compiled, kept on TensorFlow's kernels (and the
    measured ratio) or on the CPU reference (and why)."""
    if not record:
        return "–"
    if "reason" in record:
        return f'<span title="{_e(record["detail"])}">CPU reference ({_e(record["reason"])})</span>'
    decisions = record.get("decisions")
    if not decisions:
        return _e("XLA or TensorFlow's kernels, as its first runs measure")
    parts = []
    for d in decisions:
        where = "XLA" if d["runs_on"] == "xla" else "TensorFlow's kernels"
        label = f'{d["executable"]}: ' if len(decisions) > 1 else ""
        measured = "compile failed" if d.get("failure") else f'{d["ratio"]:.2f}×'
        parts.append(f'<span title="{_e(d["why"])}">{_e(label)}{_e(where)} '
                     f'({_e(measured)})</span>')
    return "; ".join(parts)


def _separators(cluster):
    """What separates a cluster from its neighbours (the host nodes on its boundary)."""
    sep = cluster.get("separators")
    if not sep:
        return ""
    lines = []
    for arrow, key in (("←", "inputs"), ("→", "outputs")):
        for s in sep[key]:
            why = s["reason"] + (f': {s["cause"]}' if s["cause"] and s["cause"] != s["op"]
                                 else "")
            lines.append(f'{arrow} {_e(s["op"])} {_q_link(s["node"], "name=" + s["node"])} '
                         f'<span class="dim">({_e(why)})</span>')
        more = sep[key + "_count"] - len(sep[key])
        if more > 0:
            lines.append(f"{arrow} and {more} more host node(s)")
    for arrow, key, word in (("←", "clusters_in", "from"), ("→", "clusters_out", "to")):
        if sep[key]:
            lines.append(f'{arrow} direct edge {word} '
                         + ", ".join(f'<a href="#cluster-{_e(n)}">{_e(n)}</a>' for n in sep[key]))
    if sep["fetched"]:
        lines.append("→ fetched: " + _e(", ".join(sep["fetched"])))
    return "<br>".join(lines) or '<span class="dim">nothing: it has no neighbour</span>'


def _precision(report):
    """The precision-emulation section (only when the report has one)."""
    p = report.get("precision")
    if not p:
        return ""
    cards = [("Mode", p["setting"] or p["mode"]), ("Casts inserted", str(p["casts"]))]
    cards += [(f"Ops in {dtype}", str(n)) for dtype, n in p["ops_per_dtype"].items()]
    cells = "".join(f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}'
                    "</div></div>" for k, v in cards)
    reasons = "".join(
        f'<tr><td>{_q_link(r["reason"], "dtype_reason=" + r["reason"])}</td>'
        f'<td class="n">{r["count"]}</td><td>{_e(r["description"])}</td></tr>'
        for r in p["by_reason"])
    body = (f'<div class="cards">{cells}</div>'
            "<h4>Why ops compute in their dtype</h4>"
            "<table><thead><tr><th>Reason</th><th>Ops</th><th>What it means</th></tr></thead>"
            f"<tbody>{reasons}</tbody></table>")
    if p["mixlist_changes"]:
        rows = "".join(
            f'<tr><td class="mono">{_q_link(c["node"], "name=" + c["node"])}</td>'
            f'<td>{_e(c["op"])}</td><td>{_e(c["before"])}</td><td>{_e(c["after"])}</td>'
            f'<td class="mono">{_e(c["edit"])}</td></tr>' for c in p["mixlist_changes"])
        body += ("<h4>Ops a modify_mixlist edit changed</h4><table><thead><tr><th>Node</th>"
                 "<th>Op</th><th>Before</th><th>After</th><th>Edit</th></tr></thead>"
                 f"<tbody>{rows}</tbody></table>")
    if p.get("customize_ignored"):
        body += f'<p class="warn">{_e(p["customize_ignored"])}.</p>'
    per_function = ", ".join(f"{_e(k)} {v}" for k, v in p["casts_per_function"].items())
    body += (f'<p class="dim">Casts per function: {per_function or "none"}. Search the node '
             "table with <span class=\"mono\">dtype:float16</span> or "
             "<span class=\"mono\">dtype_reason:white_list</span>.</p>")
    return ('<section id="precision"><h2>Precision (emulated)</h2>'
            "<p>Each device op computes in the dtype the NPU would use under these options; "
            f"the node table shows it per op.</p>{body}</section>")


def _graph(partition_svg, drawing, renderer):
    if partition_svg is None:
        return ""
    note = (f"The graph is large: {drawing.summary}; click a cluster for its drawing."
            if drawing.collapsed else
            "Clusters are coloured groups; host nodes are grey; dashed arrows are control edges.")
    return (f'<section id="graph"><h2>Partitioned graph</h2><p>{_e(note)} '
            f'<span class="dim">Layout: {_e(renderer)}. Also in graph/{_e(drawing.name)}.svg '
            'and .dot.</span> <button type="button" id="fit">Fit width</button></p>'
            f'<div class="graph" id="main-graph">{partition_svg}</div></section>')


def _options(report):
    if not report["options"]:
        opts = "<p>Defaults (no option given).</p>"
    else:
        rows = "".join(f'<tr><td class="mono">{_e(k)}</td><td class="mono">'
                       f"{_e(v if isinstance(v, str) else json.dumps(v))}</td></tr>"
                       for k, v in report["options"].items())
        opts = f"<table><tbody>{rows}</tbody></table>"
    sig = ""
    if report["fetches"] or report["feeds"]:
        sig = (f'<p>Fetches: <span class="mono">{_e(", ".join(report["fetches"]) or "–")}'
               f'</span>; feeds: <span class="mono">{_e(", ".join(report["feeds"]) or "–")}'
               "</span></p>")
    return (f'<section id="options"><h2>Run</h2>{sig}<p>Pipeline: <span class="mono">'
            f'{_e(report["pipeline"])}</span></p>{opts}</section>')


def _table_data(report):
    clusters = [c["name"] for c in report["clusters"]]
    cluster_index = {name: k for k, name in enumerate(clusters)}
    reasons = list(report["reasons"])
    reason_index = {code: k for k, code in enumerate(reasons)}
    colors = cluster_colors(clusters)
    rows = []
    causes = {}     # cause text → index
    precision = {}  # "dtype|reason|detail" → index, when the report has a precision section
    for name, info in report["nodes"].items():
        # Field 5: the reason the node runs on the host here although the original places it
        # on the device (-1: it runs where it is placed); field 6: the op (and function) that
        # causes a host placement; field 7: its precision decision.
        cause = info.get("cause")
        row = [name, info["op"], 1 if info["device"] == "npu" else 0,
               cluster_index.get(info["cluster"], -1), reason_index.get(info["reason"], -1),
               reason_index.get(info.get("executes_reason"), -1),
               causes.setdefault(cause, len(causes)) if cause else -1]
        if "precision" in report:
            decision = info.get("precision")
            key = (decision["dtype"], decision["reason"], decision["detail"]) if decision else None
            row.append(precision.setdefault(key, len(precision)) if key else -1)
        rows.append(row)
    data = {
        "clusters": clusters,
        "colors": [colors[c][0] for c in clusters],
        "reasons": reasons,
        "descriptions": [report["reasons"][r] for r in reasons],
        "causes": list(causes),
        "nodes": rows,
    }
    if "precision" in report:
        data["precision"] = [list(key) for key in precision]
    return data


_CSS = """
:root{--npu:#2f6fd0;--host:#9a9a9a;--bg:#fafafa;--line:#e3e3e3}
*{box-sizing:border-box}
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;color:#222;
background:var(--bg)}
header{background:#1f2d3d;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px}header p{margin:4px 0 0;color:#c9d3de}
nav{position:sticky;top:0;background:#fff;border-bottom:1px solid var(--line);padding:6px 24px;
z-index:2}nav a{margin-right:16px;color:#1f5fbf;text-decoration:none}
main{padding:8px 24px 40px;max-width:1400px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:4px 16px 12px;
margin:14px 0}
h2{font-size:17px;margin:12px 0 8px}h4{margin:10px 0 4px}
section,details{scroll-margin-top:44px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eee;vertical-align:top}
th{background:#f3f5f8;font-weight:600;position:sticky;top:0}
tbody tr:nth-child(even){background:#fbfbfd}
td.n{text-align:right;white-space:nowrap}
.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
.dim{color:#777}.warn{background:#fff4d6;border:1px solid #f0d27a;padding:6px 10px;
border-radius:6px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{border:1px solid var(--line);border-radius:8px;padding:8px 14px;min-width:150px}
.card .k{color:#666;font-size:12px}.card .v{font-size:20px;font-weight:600}
.bar{height:12px;background:var(--host);border-radius:6px;overflow:hidden;margin:12px 0 4px}
.bar .npu{display:block;height:100%;background:var(--npu)}
.mini{width:120px;height:9px;background:#eee;border-radius:4px;overflow:hidden;margin-top:5px}
.mini span{display:block;height:100%;background:#c23b3b}
.sw{display:inline-block;width:12px;height:12px;border:1px solid;border-radius:3px;
margin-right:6px;vertical-align:-1px}
.graph{overflow:auto;max-height:80vh;border:1px solid var(--line);border-radius:6px;
background:#fff;padding:6px}
.graph.fit svg{width:100%;height:auto}
details.cluster{border-top:1px solid var(--line);padding:6px 0}
details.cluster summary{cursor:pointer}
a.q{color:#1f5fbf;text-decoration:none}a.q:hover{text-decoration:underline}
#search{width:min(520px,100%);padding:6px 10px;font-size:14px;border:1px solid #bbb;
border-radius:6px}
#nodes .tools{display:flex;gap:12px;align-items:center;flex-wrap:wrap;margin:6px 0}
td.dev-npu{color:var(--npu);font-weight:600}td.dev-host{color:#666}
#more{margin:8px 0}
footer{color:#888;font-size:12px;padding:0 24px 20px}
table.sortable th,#nodes th{cursor:pointer;user-select:none;white-space:nowrap}
th.asc::after{content:" \\25B2"}th.desc::after{content:" \\25BC"}
.scrollbox{max-height:70vh;overflow:auto}
td.sep,td.cause{font-size:12.5px;max-width:620px;overflow-wrap:anywhere}
#node-rows td:nth-child(4){white-space:nowrap}
"""

_JS = r"""
(function(){
"use strict";
var data=JSON.parse(document.getElementById("report-data").textContent);
var PAGE=500,limit=PAGE,matches=[];
var DEV=["host","npu"];
var FIELDS=["name","op","device","cluster","reason","executes","dtype","dtype_reason","cause"];
var PREC=data.precision||null;
var q=document.getElementById("search"),body=document.getElementById("node-rows");
var count=document.getElementById("match-count"),more=document.getElementById("more");
function fields(r){var p=PREC&&r[7]>=0?PREC[r[7]]:null;
  return [r[0],r[1],DEV[r[2]],r[3]<0?"":data.clusters[r[3]],
  r[4]<0?"":data.reasons[r[4]],r[5]<0?DEV[r[2]]:"host ("+data.reasons[r[5]]+")",
  p?p[0]:"",p?p[1]:"",r[6]<0?"":data.causes[r[6]]];}
function parse(text){
  return text.trim().split(/\s+/).filter(Boolean).map(function(tok){
    var m=/^(name|op|device|cluster|reason|executes|dtype|dtype_reason|cause)([:=])(.*)$/i
      .exec(tok);
    if(m){return {f:FIELDS.indexOf(m[1].toLowerCase()),exact:m[2]==="=",v:m[3].toLowerCase()};}
    return {f:-1,exact:false,v:tok.toLowerCase()};});
}
function test(t,vals){
  if(t.f>=0){var x=vals[t.f].toLowerCase();return t.exact?x===t.v:x.indexOf(t.v)>=0;}
  for(var i=0;i<vals.length;i++){if(vals[i].toLowerCase().indexOf(t.v)>=0)return true;}
  return false;
}
function cell(tr,text,cls){var td=document.createElement("td");td.textContent=text;
  if(cls)td.className=cls;tr.appendChild(td);return td;}
function render(){
  body.textContent="";
  var n=Math.min(limit,matches.length),frag=document.createDocumentFragment();
  for(var i=0;i<n;i++){
    var r=data.nodes[matches[i]],v=fields(r),tr=document.createElement("tr");
    cell(tr,v[0],"mono");cell(tr,v[1]);cell(tr,v[2],"dev-"+v[2]);
    var c=cell(tr,v[3]);
    if(r[3]>=0){var sw=document.createElement("span");sw.className="sw";
      sw.style.background=data.colors[r[3]];c.insertBefore(sw,c.firstChild);}
    var rc=cell(tr,v[4]);if(r[4]>=0)rc.title=data.descriptions[r[4]];
    cell(tr,v[8],"cause");
    var ec=cell(tr,v[5],r[5]<0?"dev-"+v[2]:"dev-host");
    if(r[5]>=0)ec.title=data.descriptions[r[5]];
    if(PREC){var dc=cell(tr,v[6]?v[6]+" · "+v[7]:"");if(r[7]>=0)dc.title=PREC[r[7]][2];}
    frag.appendChild(tr);
  }
  body.appendChild(frag);
  count.textContent=matches.length+" of "+data.nodes.length+" nodes match"+
    (matches.length>n?" (showing "+n+")":"");
  more.style.display=matches.length>n?"":"none";
}
// Sorting: a click on a column header sorts the matching nodes by it (again: reversed); text
// sorts naturally (GeOp1_2 before GeOp1_10), the cluster column by cluster order.
var sortCol=-1,sortDesc=false;
var COLUMN_FIELD=[0,1,2,3,4,8,5,6];
function chunks(text){return (text.toLowerCase().match(/\d+|\D+/g)||[]).map(function(c){
  return /^\d/.test(c)?{n:parseInt(c,10)}:{s:c};});}
function natural(a,b){
  for(var i=0;i<Math.min(a.length,b.length);i++){var x=a[i],y=b[i];
    if("n" in x&&"n" in y){if(x.n!==y.n)return x.n-y.n;}
    else if("n" in x)return -1;else if("n" in y)return 1;
    else if(x.s!==y.s)return x.s<y.s?-1:1;}
  return a.length-b.length;}
function sortMatches(){
  if(sortCol<0)return;
  var f=COLUMN_FIELD[sortCol],keys={};
  matches.forEach(function(i){var r=data.nodes[i],v=fields(r);
    keys[i]=f===3?[{n:r[3]<0?1e9:r[3]}]:chunks(f===6?v[6]+" "+v[7]:v[f]);});
  matches.sort(function(a,b){
    var blank=(keys[a].length===0)-(keys[b].length===0);   // empty cells last, both ways
    if(blank)return blank;
    var c=natural(keys[a],keys[b]);if(!c)c=a-b;return sortDesc?-c:c;});
}
var heads=document.querySelectorAll("#nodes thead th");
heads.forEach(function(th,col){th.addEventListener("click",function(){
  sortDesc=sortCol===col?!sortDesc:false;sortCol=col;
  heads.forEach(function(h){h.classList.remove("asc","desc");});
  th.classList.add(sortDesc?"desc":"asc");limit=PAGE;sortMatches();render();});});
function run(){
  var toks=parse(q.value);matches=[];limit=PAGE;
  for(var i=0;i<data.nodes.length;i++){
    var v=fields(data.nodes[i]),ok=true;
    for(var k=0;k<toks.length&&ok;k++)ok=test(toks[k],v);
    if(ok)matches.push(i);
  }
  sortMatches();render();
}
var timer=null;
q.addEventListener("input",function(){clearTimeout(timer);timer=setTimeout(run,120);});
more.addEventListener("click",function(){limit+=PAGE;render();});
document.addEventListener("click",function(ev){
  var a=ev.target.closest?ev.target.closest("a.q"):null;
  if(a){ev.preventDefault();q.value=a.getAttribute("data-q");run();
    document.getElementById("nodes").scrollIntoView();}
});
function openHash(){
  var h=decodeURIComponent(location.hash.slice(1));
  if(h.indexOf("q=")===0){q.value=h.slice(2);return true;}
  var el=h?document.getElementById(h):null;
  if(el&&el.tagName==="DETAILS"){el.open=true;}
  return false;
}
window.addEventListener("hashchange",function(){if(openHash())run();});
var fit=document.getElementById("fit");
if(fit){fit.addEventListener("click",function(){
  document.getElementById("main-graph").classList.toggle("fit");});}
// A wide drawing centres its layers: show its first layer in the box, not the empty left.
var box=document.getElementById("main-graph");
if(box){var top=null;box.querySelectorAll("g.node rect, g.node polygon, g.node ellipse")
  .forEach(function(n){var b=n.getBoundingClientRect();if(!top||b.top<top.top-1)top=b;});
  if(top){var left=top.left-box.getBoundingClientRect().left+box.scrollLeft;
    if(left+top.width>box.clientWidth)box.scrollLeft=Math.max(0,left-box.clientWidth/3);}}
openHash();run();
})();
"""


def render_report_html(report, *, partition_svg=None, partition_drawing=None, renderer="",
                       cluster_svgs=None, title=None):
    """The HTML text of the report page (deterministic for the same inputs).

    Args:
        report: the placement report (:func:`npu_adapter.report.placement.placement_report`).
        partition_svg: SVG text of the partition drawing (None: no graph section).
        partition_drawing: the :class:`~npu_adapter.report.drawing.Drawing` it shows.
        renderer: ``"dot"`` or ``"builtin"`` (shown in the page).
        cluster_svgs: cluster name → SVG text of its drill-down.
        title: page title (default: the model name).
    """
    name = title or report.get("model") or "graph"
    s = report["summary"]
    subtitle = (f'{s["nodes"]} nodes · {s["npu"]} on the device in {s["clusters"]} cluster(s) · '
                f'{s["host"]} on the host · backend {report["backend"] or "?"}')
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Placement report: {_e(name)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<header><h1>Placement report: {_e(name)}</h1><p>{_e(subtitle)}</p></header>",
        '<nav><a href="#summary">Summary</a>'
        + ('<a href="#graph">Graph</a>' if partition_svg else "")
        + '<a href="#blockers">Host blockers</a><a href="#clusters">Clusters</a>'
        '<a href="#op-types">Op types</a>'
        + ('<a href="#precision">Precision</a>' if report.get("precision") else "")
        + '<a href="#nodes">Nodes</a><a href="#options">Run</a></nav><main>',
        _summary(report),
        _graph(partition_svg, partition_drawing, renderer),
        _blockers(report),
        _clusters(report, cluster_svgs or {}),
        _op_types(report),
        _precision(report),
        '<section id="nodes"><h2>Nodes</h2><div class="tools">'
        '<input id="search" type="search" autocomplete="off" spellcheck="false" '
        'placeholder="Search: words, or name: op: device: cluster: reason: cause: executes: '
        '(= for exact)" '
        'aria-label="Search nodes">'
        '<span id="match-count" class="dim"></span></div>'
        "<noscript><p>The node table needs JavaScript; placement.json has the same data.</p>"
        "</noscript>"
        '<p class="dim">Click a column to sort.</p>'
        "<table><thead><tr><th>Name</th><th>Op</th><th>Device</th><th>Cluster</th>"
        '<th>Reason</th><th title="the op (and function) behind a host placement">Cause</th>'
        '<th title="where the node runs on this backend">Executes</th>'
        + ("<th>Dtype · why</th>" if report.get("precision") else "")
        + '</tr></thead><tbody id="node-rows"></tbody></table>'
        '<button type="button" id="more">Show more</button></section>',
        _options(report),
        "</main>",
        f"<footer>npu-adapter {_e(__version__)} · {_e(REPORT_NOTE)}</footer>",
        f'<script type="application/json" id="report-data">{_script_json(_table_data(report))}'
        "</script>",
        f"<script>{_JS}{SORT_SCRIPT}</script>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


REPORT_NOTE = "placement.json holds the same report for programs"
