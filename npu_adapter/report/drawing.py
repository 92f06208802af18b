"""Drawings of the partitioned graph: what to draw, as Graphviz DOT, and as SVG.

Three kinds of drawing are built from the graph the rewrite received and its placement report:

* the whole graph (when it has at most ``limit`` nodes): every node, clusters as coloured groups;
* an overview (larger graphs): one box per cluster and one per host name scope (the scope depth is
  chosen so there are at most :data:`COLLAPSED_LIMIT` boxes), edges labelled with the number of
  tensors;
* one drill-down per cluster: its nodes (collapsed by scope when it is too large) and, as dashed
  boxes, the nodes or groups outside that feed it or read from it.

:func:`render` turns a drawing into SVG with Graphviz's ``dot`` when it is installed (Debian
package ``graphviz``) and with the built-in layout of :mod:`npu_adapter.report.layout` otherwise.
Everything is deterministic: the same graph gives the same DOT text and, with the same ``dot``,
the same SVG.
"""

import dataclasses
import re
import shutil
import subprocess

from npu_adapter.graph.names import parse_input
from npu_adapter.report import layout

__all__ = [
    "DRAW_LIMIT",
    "COLLAPSED_LIMIT",
    "DOT_MAX_EDGES",
    "collapse_by_scope",
    "host_groups",
    "Drawing",
    "DrawNode",
    "DrawEdge",
    "DrawGroup",
    "cluster_colors",
    "full_drawing",
    "overview_drawing",
    "cluster_drawing",
    "partition_drawing",
    "to_dot",
    "render",
    "dot_available",
]

DRAW_LIMIT = 500
"""Most nodes a drawing shows one by one; larger graphs (and clusters) are collapsed."""

COLLAPSED_LIMIT = 120
"""Most boxes of a collapsed drawing (its edges join groups, so they are dense)."""

DOT_MAX_EDGES = 900
"""Drawings with more edges use the built-in layout: dot's run time explodes on dense graphs."""

_DOT_TIMEOUT = 120
_HOST_FILL, _HOST_STROKE = "#f2f2f2", "#9a9a9a"
_STUB_FILL, _STUB_STROKE = "#ffffff", "#b0b0b0"
# (fill, stroke) pairs, distinguishable on screen and in print.
_PALETTE = (
    ("#cfe3ff", "#2f6fd0"), ("#ffd9b3", "#d0701a"), ("#c8f0c8", "#2e9a2e"),
    ("#f7c6c6", "#c23b3b"), ("#e2d4f5", "#7a4fc0"), ("#f5e6b8", "#a88410"),
    ("#c7eef0", "#1d8c94"), ("#f7cce8", "#b8408e"), ("#dde6c4", "#6b7f23"),
    ("#d9d9f7", "#4848b0"), ("#ffe0cc", "#b0501a"), ("#cde8dc", "#2f7a5a"),
)


@dataclasses.dataclass
class DrawNode:
    """A box: ``id`` is unique in its drawing; ``label`` may have two lines."""

    id: str
    label: str
    fill: str = _HOST_FILL
    stroke: str = _HOST_STROKE
    group: str = None
    tooltip: str = ""
    href: str = None
    stub: bool = False


@dataclasses.dataclass
class DrawEdge:
    """An arrow; ``control`` edges are dashed; ``label`` is shown by dot."""

    src: str
    dst: str
    control: bool = False
    label: str = ""
    tooltip: str = ""


@dataclasses.dataclass
class DrawGroup:
    """A legend entry and, for dot, a coloured cluster box around the nodes of ``name``."""

    name: str
    label: str
    fill: str
    stroke: str


@dataclasses.dataclass
class Drawing:
    """A graph to draw: ``name`` is its file stem, ``title`` its caption."""

    name: str
    title: str
    nodes: list
    edges: list
    groups: list
    collapsed: bool = False
    box_groups: bool = True  # dot draws the nodes of each group inside one box
    summary: str = ""        # what a box of a collapsed drawing stands for

    @property
    def size(self):
        """Number of boxes."""
        return len(self.nodes)


def cluster_colors(cluster_names):
    """Cluster name → ``(fill, stroke)``, by position in ``cluster_names``."""
    return {name: _PALETTE[k % len(_PALETTE)] for k, name in enumerate(cluster_names)}


def _edges(graph_def, keep):
    """Deduplicated ``(src, dst, control)`` between names in ``keep``; data wins over control."""
    seen = {}
    for node in graph_def.node:
        if node.name not in keep:
            continue
        for text in node.input:
            src, _, control = parse_input(text)
            if src not in keep or src == node.name:
                continue
            key = (src, node.name)
            if key not in seen or seen[key]:
                seen[key] = control
    return [(src, dst, control) for (src, dst), control in seen.items()]


_NUMBERED_RE = re.compile(r"_\d+\Z")


def _scope(name, depth):
    return "/".join(name.split("/")[:depth])


def collapse_by_scope(names, limit):
    """Name → group label: the deepest name-scope prefix that keeps at most ``limit`` groups.

    When even the first scope level gives too many groups, numbered siblings share a group
    (``dense_1``, ``dense_2`` → ``dense_*``); if there are still too many, the largest
    ``limit - 1`` are kept and the rest share the group ``"(other)"``.
    """
    best = None
    for depth in range(1, 9):
        groups = {}
        for name in names:
            groups.setdefault(_scope(name, depth), 0)
        if len(groups) > limit:
            break
        best = depth
        if len(groups) == len(names):
            break
    if best is not None:
        return {name: _scope(name, best) for name in names}
    # Too many top-level scopes: merge numbered siblings (dense_1, dense_2 → dense_*).
    family = {name: _NUMBERED_RE.sub("_*", _scope(name, 1)) for name in names}
    sizes = {}
    for key in family.values():
        sizes[key] = sizes.get(key, 0) + 1
    if len(sizes) <= limit:
        return family
    kept = {k for k, _ in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:limit - 1]}
    return {name: (key if key in kept else "(other)") for name, key in family.items()}


def _legend(report, colors, with_host=True):
    groups = [DrawGroup(c["name"], f'{c["name"]} ({c["size"]} nodes)', *colors[c["name"]])
              for c in report["clusters"]]
    if with_host:
        groups.append(DrawGroup("", "host", _HOST_FILL, _HOST_STROKE))
    return groups


def _node_tooltip(name, info):
    where = info["device"] + (f' in {info["cluster"]}' if info["cluster"] else "")
    return f'{name} ({info["op"]}): {where}, {info["reason"]}'


def full_drawing(graph_def, report, name="partition"):
    """Every node of the graph, coloured by cluster (host nodes grey)."""
    nodes_info = report["nodes"]
    colors = cluster_colors([c["name"] for c in report["clusters"]])
    nodes = []
    for node_name, info in nodes_info.items():
        fill, stroke = colors.get(info["cluster"], (_HOST_FILL, _HOST_STROKE))
        nodes.append(DrawNode(node_name, f'{node_name}\n{info["op"]}', fill, stroke,
                              group=info["cluster"], tooltip=_node_tooltip(node_name, info)))
    edges = [DrawEdge(s, d, c) for s, d, c in _edges(graph_def, nodes_info)]
    return Drawing(name, "Partitioned graph", nodes, edges, _legend(report, colors))


def _group_edges(graph_def, group_of):
    counts = {}
    for node in graph_def.node:
        dst = group_of.get(node.name)
        if dst is None:
            continue
        for text in node.input:
            src_name, _, control = parse_input(text)
            src = group_of.get(src_name)
            if src is None or src == dst:
                continue
            entry = counts.setdefault((src, dst), [0, 0])
            entry[1 if control else 0] += 1
    edges = []
    for (src, dst), (data, control) in counts.items():
        label = str(data) if data else ""
        tip = f"{data} tensor(s), {control} control edge(s)"
        edges.append(DrawEdge(src, dst, control=not data, label=label, tooltip=tip))
    return edges


def host_groups(graph_def, host_names, limit):
    """Host node name → group label for the overview: the host nodes joined by host-to-host
    edges form one group (the unsupported node and the Consts that feed only it), named after
    its first node that is not a Const. When that gives more than ``limit`` groups, or one group
    holds more than half of the host nodes (a host backbone that would join distant parts of the
    graph into one box), the groups are name scopes (:func:`collapse_by_scope`)."""
    index = {name: k for k, name in enumerate(host_names)}
    parent = list(range(len(host_names)))

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for node in graph_def.node:
        dst = index.get(node.name)
        if dst is None:
            continue
        for text in node.input:
            src = index.get(parse_input(text)[0])
            if src is not None:
                a, b = root(src), root(dst)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    members = {}
    for k in range(len(host_names)):
        members.setdefault(root(k), []).append(k)
    largest = max((len(m) for m in members.values()), default=0)
    if len(members) > limit or (len(host_names) > 2 and 2 * largest > len(host_names)):
        return collapse_by_scope(host_names, limit), False
    ops = {node.name: node.op for node in graph_def.node}
    groups = {}
    for ks in members.values():
        names = [host_names[k] for k in ks]
        label = next((n for n in names if ops.get(n) != "Const"), names[0])
        groups.update((n, label) for n in names)
    return groups, True


def overview_drawing(graph_def, report, limit=COLLAPSED_LIMIT, name="partition"):
    """One box per cluster and per group of host nodes (see :func:`host_groups`), with a link to
    each cluster's drill-down."""
    colors = cluster_colors([c["name"] for c in report["clusters"]])
    host_names = [n for n, info in report["nodes"].items() if info["cluster"] is None]
    budget = max(limit - len(report["clusters"]), 1)
    host_group, by_component = host_groups(graph_def, host_names, budget)
    group_of = {}
    for node_name, info in report["nodes"].items():
        if info["cluster"] is not None:
            group_of[node_name] = "cluster:" + info["cluster"]
        else:
            group_of[node_name] = "host:" + host_group[node_name]
    nodes = []
    for cluster in report["clusters"]:
        fill, stroke = colors[cluster["name"]]
        nodes.append(DrawNode("cluster:" + cluster["name"],
                              f'{cluster["name"]}\n{cluster["size"]} nodes', fill, stroke,
                              group=None, href="#cluster-" + cluster["name"],
                              tooltip=f'{cluster["name"]}: {cluster["size"]} nodes '
                                      "(click for its drawing)"))
    sizes = {}
    for node_name in host_names:
        key = host_group[node_name]
        sizes[key] = sizes.get(key, 0) + 1
    for key in dict.fromkeys(host_group[n] for n in host_names):
        if by_component:
            info = report["nodes"][key]
            extra = f" + {sizes[key] - 1} host nodes" if sizes[key] > 1 else ""
            label = f'{key}\n{info["op"]}{extra}'
            tip = (f'{key} ({info["op"]}): host, {info["reason"]}'
                   + (f' ({info["cause"]})' if info.get("cause") else "")
                   + (f"; with {sizes[key] - 1} host node(s) joined to it" if extra else ""))
        else:
            label = f"{key}/\n{sizes[key]} host nodes" if sizes[key] > 1 else key
            tip = f"{key}: {sizes[key]} host node(s)"
        nodes.append(DrawNode("host:" + key, label, _HOST_FILL, _HOST_STROKE, tooltip=tip))
    if by_component:
        title = "Partitioned graph (overview: clusters and the host nodes between them)"
        summary = ("each box is a cluster or a host node with the host nodes joined to it "
                   "(the Consts that feed it)")
    else:
        title = "Partitioned graph (overview: clusters and host name scopes)"
        summary = "each box is a cluster or a host name scope"
    return Drawing(name, title, nodes, _group_edges(graph_def, group_of),
                   _legend(report, colors), collapsed=True, box_groups=False, summary=summary)


def partition_drawing(graph_def, report, limit=DRAW_LIMIT):
    """The whole graph when it has at most ``limit`` nodes, else the overview."""
    if len(report["nodes"]) <= limit:
        return full_drawing(graph_def, report)
    return overview_drawing(graph_def, report, min(limit, COLLAPSED_LIMIT))


def cluster_drawing(graph_def, report, cluster, limit=DRAW_LIMIT, max_outside=40):
    """Drill-down of ``cluster`` (a report cluster record) with its neighbours as dashed boxes."""
    colors = cluster_colors([c["name"] for c in report["clusters"]])
    fill, stroke = colors[cluster["name"]]
    nodes_info = report["nodes"]
    # Only nodes of the user's graph are drawn (a cluster may also list nodes the rewrite made).
    members = [m for m in cluster["nodes"] if m in nodes_info]
    member_set = set(members)
    collapsed = len(members) > limit
    inner = (collapse_by_scope(members, min(limit, COLLAPSED_LIMIT)) if collapsed
             else {m: m for m in members})
    outside = {}
    for node in graph_def.node:
        dst_in = node.name in member_set
        for text in node.input:
            src, _, _ = parse_input(text)
            if src not in nodes_info or (src in member_set) == dst_in:
                continue
            other = node.name if not dst_in else src
            outside.setdefault(other, True)
    outside_names = list(outside)
    if len(outside_names) > max_outside:
        host = [n for n in outside_names if nodes_info[n]["cluster"] is None]
        scoped = collapse_by_scope(host, max_outside)
        outer = {n: ("cluster:" + nodes_info[n]["cluster"] if nodes_info[n]["cluster"]
                     else "host:" + scoped[n]) for n in outside_names}
    else:
        outer = {n: "node:" + n for n in outside_names}
    group_of = {m: "in:" + inner[m] for m in members}
    group_of.update(outer)
    boxes = []
    counts = {}
    for m in members:
        counts[inner[m]] = counts.get(inner[m], 0) + 1
    for key in dict.fromkeys(inner[m] for m in members):
        if collapsed:
            label = f"{key}/\n{counts[key]} nodes" if counts[key] > 1 else key
            tip = f"{key}: {counts[key]} node(s) of {cluster['name']}"
        else:
            info = nodes_info[key]
            label = f'{key}\n{info["op"]}'
            tip = _node_tooltip(key, info)
        boxes.append(DrawNode("in:" + key, label, fill, stroke, group=cluster["name"],
                              tooltip=tip))
    for key in dict.fromkeys(outer[n] for n in outside_names):
        kind, _, rest = key.partition(":")
        if kind == "node":
            info = nodes_info[rest]
            where = info["cluster"] or "host"
            label, tip = f"{rest}\n{where}", _node_tooltip(rest, info)
        elif kind == "cluster":
            label, tip = f"{rest}\n(cluster)", f"nodes of {rest}"
        else:
            label, tip = f"{rest}\n(host)", f"host nodes under {rest}"
        boxes.append(DrawNode(key, label, _STUB_FILL, _STUB_STROKE, tooltip=tip, stub=True,
                              href=("#cluster-" + rest) if kind == "cluster" else None))
    edges = [e for e in _group_edges(graph_def, group_of)
             if e.src.startswith("in:") or e.dst.startswith("in:")]
    if not collapsed:
        for edge in edges:
            edge.label = ""
    legend = [DrawGroup(cluster["name"], f'{cluster["name"]} ({cluster["size"]} nodes)',
                        fill, stroke),
              DrawGroup("", "outside the cluster", _STUB_FILL, _STUB_STROKE)]
    return Drawing(cluster["name"], f'Cluster {cluster["name"]}', boxes, edges, legend,
                   collapsed=collapsed)


# --------------------------------------------------------------------------------------------
# DOT and rendering


def _q(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(drawing):
    """Graphviz DOT text of ``drawing`` (deterministic)."""
    lines = [
        f"digraph {_q(drawing.name)} {{",
        f"  graph [label={_q(drawing.title)}, labelloc=t, fontname=\"Helvetica\", "
        "fontsize=12, rankdir=TB, nodesep=0.2, ranksep=0.35];",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9, '
        "height=0.3, margin=\"0.08,0.03\"];",
        '  edge [color="#777777", arrowsize=0.5, fontname="Helvetica", fontsize=8];',
    ]
    by_group = {}
    for node in drawing.nodes:
        by_group.setdefault(node.group if drawing.box_groups else None, []).append(node)
    legend = {g.name: g for g in drawing.groups}

    def node_line(node, indent):
        attrs = [f"label={_q(node.label)}", f"fillcolor={_q(node.fill)}",
                 f"color={_q(node.stroke)}", f"tooltip={_q(node.tooltip or node.label)}"]
        if node.stub:
            attrs.append('style="rounded,filled,dashed"')
        if node.href:
            attrs.append(f"href={_q(node.href)}")
        return f"{indent}{_q(node.id)} [{', '.join(attrs)}];"

    for group, members in by_group.items():
        if group is None:
            continue
        info = legend.get(group)
        label = info.label if info else group
        fill = info.fill if info else "#ffffff"
        stroke = info.stroke if info else "#999999"
        lines.append(f"  subgraph {_q('cluster_' + group)} {{")
        lines.append(f"    label={_q(label)}; style=\"rounded,filled\"; "
                     f"fillcolor={_q(_lighter(fill))}; color={_q(stroke)}; fontsize=10;")
        lines.extend(node_line(node, "    ") for node in members)
        lines.append("  }")
    lines.extend(node_line(node, "  ") for node in by_group.get(None, ()))
    for edge in drawing.edges:
        attrs = []
        if edge.control:
            attrs.append("style=dashed")
        if edge.label:
            attrs.append(f"label={_q(edge.label)}")
        if edge.tooltip:
            attrs.append(f"tooltip={_q(edge.tooltip)}")
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"  {_q(edge.src)} -> {_q(edge.dst)}{suffix};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _lighter(color):
    """Half-way between ``color`` (``#rrggbb``) and white, for group backgrounds."""
    value = int(color[1:], 16)
    parts = [(value >> shift) & 0xFF for shift in (16, 8, 0)]
    return "#" + "".join(f"{(p + 255) // 2:02x}" for p in parts)


def dot_available():
    """Path of Graphviz's ``dot`` executable, or None."""
    return shutil.which("dot")


_PROLOG_RE = re.compile(r"\A(?:<\?xml[^>]*>\s*)?(?:<!DOCTYPE[^>]*>\s*)?", re.S)


def render(drawing, renderer="auto"):
    """``(svg text, dot text, renderer used)``; ``renderer`` is ``auto``, ``dot`` or ``builtin``.

    ``auto`` uses ``dot`` when installed and the drawing is drawn node by node with at most
    :data:`DOT_MAX_EDGES` edges, and the built-in layout otherwise (or when ``dot`` fails or
    runs longer than two minutes — the one case where the output depends on the machine). A
    collapsed drawing (a large graph's overview) is always laid out here: its legend wraps at
    the width of a screen and the graph starts in the first screen, where ``dot`` puts a wide
    overview's boxes off to the right and draws no legend. The SVG has no XML prolog, so it
    can be inlined in HTML.
    """
    if renderer not in ("auto", "dot", "builtin"):
        raise ValueError(f"renderer must be 'auto', 'dot' or 'builtin', got {renderer!r}")
    dot_text = to_dot(drawing)
    dot = dot_available() if renderer in ("auto", "dot") else None
    if renderer == "auto" and (drawing.collapsed or len(drawing.edges) > DOT_MAX_EDGES):
        dot = None
    if renderer == "dot" and dot is None:
        raise FileNotFoundError("Graphviz 'dot' is not installed (Debian package: graphviz)")
    if dot is not None:
        try:
            done = subprocess.run([dot, "-Tsvg"], input=dot_text.encode("utf-8"),
                                  capture_output=True, timeout=_DOT_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0:
            return _PROLOG_RE.sub("", done.stdout.decode("utf-8")), dot_text, "dot"
        if renderer == "dot":
            detail = done.stderr.decode("utf-8", "replace").strip() if done else "timed out"
            raise RuntimeError(f"dot failed on drawing {drawing.name!r}: {detail}")
    return layout.render_svg(drawing), dot_text, "builtin"
