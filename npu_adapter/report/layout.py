"""A small built-in layered layout that draws a graph as SVG when Graphviz is not installed.

Sugiyama-style, kept simple and deterministic: back edges found by a DFS in node order are
ignored for layering, nodes are put on their longest-path layer (then as low as their consumers
allow, so constants sit next to their consumer), a few barycenter sweeps order
each layer (ties keep the previous order, nodes of one group are kept side by side), and edges are
drawn as curves from the bottom of the producer to the top of the consumer. Linear in nodes and
edges per sweep; meant for the drawings of at most a few hundred nodes that the reports make.
"""

import collections
import re
from xml.sax.saxutils import escape

__all__ = ["layered_positions", "render_svg"]

_NODE_H = 34
_LAYER_GAP = 56
_NODE_GAP = 14
_MARGIN = 16
_CHAR_W = 6.4
_MAX_LABEL = 34
_SWEEPS = 4
_LEGEND_MAX_W = 1200
_LEGEND_ROW_H = 18


def _back_edges(n, succ):
    """Edges (u, v) that close a cycle in a DFS taken in node order."""
    state = [0] * n  # 0 new, 1 on stack, 2 done
    back = set()
    for root in range(n):
        if state[root]:
            continue
        state[root] = 1
        stack = [(root, iter(succ[root]))]
        while stack:
            node, it = stack[-1]
            advanced = False
            for nxt in it:
                if state[nxt] == 1:
                    back.add((node, nxt))
                elif state[nxt] == 0:
                    state[nxt] = 1
                    stack.append((nxt, iter(succ[nxt])))
                    advanced = True
                    break
            if not advanced:
                state[node] = 2
                stack.pop()
    return back


def layered_positions(n, edges, groups=None):
    """Layer and in-layer order of ``n`` nodes joined by ``edges`` (index pairs).

    Returns ``(layer, order)``: lists giving each node's layer and its rank within the layer.
    ``groups`` (one hashable per node, or None) keeps the nodes of a group next to each other.
    """
    succ = [[] for _ in range(n)]
    for u, v in edges:
        if u != v:
            succ[u].append(v)
    back = _back_edges(n, succ)
    fwd = [(u, v) for u, v in edges if u != v and (u, v) not in back]
    preds = [[] for _ in range(n)]
    succs = [[] for _ in range(n)]
    indegree = [0] * n
    for u, v in fwd:
        preds[v].append(u)
        succs[u].append(v)
        indegree[v] += 1
    layer = [0] * n
    topo = []
    queue = collections.deque(i for i in range(n) if indegree[i] == 0)
    while queue:
        u = queue.popleft()
        topo.append(u)
        for v in succs[u]:
            layer[v] = max(layer[v], layer[u] + 1)
            indegree[v] -= 1
            if indegree[v] == 0:
                queue.append(v)
    # Move nodes with slack (constants, placeholders) down next to their first consumer.
    for u in reversed(topo):
        if succs[u]:
            layer[u] = min(layer[v] for v in succs[u]) - 1
    depth = max(layer) + 1 if n else 0
    layers = [[] for _ in range(depth)]
    for i in range(n):
        layers[layer[i]].append(i)
    pos = [0.0] * n

    def place():
        for nodes in layers:
            width = max(len(nodes) - 1, 1)
            for rank, i in enumerate(nodes):
                pos[i] = rank / width

    def sort_layer(nodes, neighbours):
        keys = {}
        for i in nodes:
            near = neighbours[i]
            keys[i] = sum(pos[j] for j in near) / len(near) if near else pos[i]
        if groups is not None:
            group_keys = {}
            for i in nodes:
                group_keys.setdefault(groups[i], []).append(keys[i])
            group_key = {g: sum(v) / len(v) for g, v in group_keys.items()}
            nodes.sort(key=lambda i: (group_key[groups[i]], str(groups[i]), keys[i]))
        else:
            nodes.sort(key=lambda i: keys[i])

    place()
    for _ in range(_SWEEPS):
        for nodes in layers[1:]:
            sort_layer(nodes, preds)
        place()
        for nodes in reversed(layers[:-1]):
            sort_layer(nodes, succs)
        place()
    order = [0] * n
    for nodes in layers:
        for rank, i in enumerate(nodes):
            order[i] = rank
    return layer, order


def _legend_positions(groups, max_width):
    """``(positions, width, height)`` of the legend entries laid out in rows of at most
    ``max_width`` pixels; positions are relative to the legend's top left corner."""
    positions, x, y, width = [], 0.0, 0.0, 0.0
    for group in groups:
        entry = 16 + len(group.label) * _CHAR_W + 18
        if x > 0 and x + entry > max_width:
            x, y = 0.0, y + _LEGEND_ROW_H
        positions.append((x, y))
        x += entry
        width = max(width, x)
    height = y + _LEGEND_ROW_H + 6 if groups else 0
    return positions, width, height


def _short(text):
    return text if len(text) <= _MAX_LABEL else "…" + text[-(_MAX_LABEL - 1):]


def _fmt(x):
    return f"{x:.1f}".rstrip("0").rstrip(".")


def render_svg(drawing):
    """SVG text of a :class:`~npu_adapter.report.drawing.Drawing` laid out by this module."""
    nodes = drawing.nodes
    index = {node.id: i for i, node in enumerate(nodes)}
    edges = [(index[e.src], index[e.dst]) for e in drawing.edges
             if e.src in index and e.dst in index]
    layer, order = layered_positions(len(nodes), edges, [node.group for node in nodes])
    # Several drawings share one HTML page: marker ids must differ between them.
    marker = "arrow-" + re.sub(r"[^A-Za-z0-9_-]", "_", drawing.name)
    widths = []
    for node in nodes:
        lines = [_short(line) for line in node.label.split("\n")]
        widths.append(max(60.0, max(len(line) for line in lines) * _CHAR_W + 16))
    depth = max(layer) + 1 if nodes else 0
    rows = [[] for _ in range(depth)]
    for i in sorted(range(len(nodes)), key=lambda i: (layer[i], order[i])):
        rows[layer[i]].append(i)
    row_width = [sum(widths[i] for i in row) + _NODE_GAP * max(len(row) - 1, 0) for row in rows]
    # The legend wraps at the width of a screen, so that it neither sets the drawing's width
    # (the graph would sit far to the right of it) nor pushes the graph out of the first screen.
    legend_max = _LEGEND_MAX_W
    legend_at, legend_w, legend_h = _legend_positions(drawing.groups, legend_max)
    total_w = max([300.0, legend_w] + row_width) + 2 * _MARGIN
    x = [0.0] * len(nodes)
    y = [0.0] * len(nodes)
    for k, row in enumerate(rows):
        cursor = _MARGIN + (total_w - 2 * _MARGIN - row_width[k]) / 2
        for i in row:
            x[i] = cursor
            y[i] = _MARGIN + legend_h + k * (_NODE_H + _LAYER_GAP)
            cursor += widths[i] + _NODE_GAP
    total_h = _MARGIN * 2 + legend_h + depth * _NODE_H + max(depth - 1, 0) * _LAYER_GAP
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="npu-graph" width="{_fmt(total_w)}" '
        f'height="{_fmt(total_h)}" viewBox="0 0 {_fmt(total_w)} {_fmt(total_h)}" '
        'font-family="Helvetica,Arial,sans-serif" font-size="11">',
        f"<title>{escape(drawing.title)}</title>",
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#777"/></marker></defs>',
    ]
    out.append('<g class="legend">')
    for group, (lx, ly) in zip(drawing.groups, legend_at):
        lx, ly = lx + _MARGIN, ly + _MARGIN
        out.append(f'<rect x="{_fmt(lx)}" y="{_fmt(ly - 2)}" width="12" height="12" rx="2" '
                   f'fill="{group.fill}" stroke="{group.stroke}"/>')
        out.append(f'<text x="{_fmt(lx + 16)}" y="{_fmt(ly + 8)}">{escape(group.label)}</text>')
    out.append("</g>")
    out.append('<g class="edges" fill="none" stroke="#777" stroke-width="1">')
    for edge in drawing.edges:
        if edge.src not in index or edge.dst not in index:
            continue
        u, v = index[edge.src], index[edge.dst]
        x1, y1 = x[u] + widths[u] / 2, y[u] + _NODE_H
        x2, y2 = x[v] + widths[v] / 2, y[v]
        bend = max(abs(y2 - y1) / 2, 20)
        dash = ' stroke-dasharray="4 3"' if edge.control else ""
        tip = f"<title>{escape(edge.tooltip)}</title>" if edge.tooltip else ""
        out.append(f'<path d="M {_fmt(x1)} {_fmt(y1)} C {_fmt(x1)} {_fmt(y1 + bend)} '
                   f'{_fmt(x2)} {_fmt(y2 - bend)} {_fmt(x2)} {_fmt(y2)}"{dash} '
                   f'marker-end="url(#{marker})">{tip}</path>')
    out.append("</g>")
    out.append('<g class="nodes">')
    for i, node in enumerate(nodes):
        lines = [_short(line) for line in node.label.split("\n")]
        open_a = close_a = ""
        if node.href:
            open_a, close_a = f'<a href="{escape(node.href, {chr(34): "&quot;"})}">', "</a>"
        out.append(f'<g class="node" data-name="{escape(node.id, {chr(34): "&quot;"})}">'
                   f"{open_a}<title>{escape(node.tooltip or node.label)}</title>"
                   f'<rect x="{_fmt(x[i])}" y="{_fmt(y[i])}" width="{_fmt(widths[i])}" '
                   f'height="{_NODE_H}" rx="6" fill="{node.fill}" stroke="{node.stroke}"/>')
        for k, line in enumerate(lines[:2]):
            weight = ' font-weight="bold"' if k == 0 else ' fill="#444"'
            ty = y[i] + (13 if len(lines) > 1 else 21) + k * 13
            out.append(f'<text x="{_fmt(x[i] + widths[i] / 2)}" y="{_fmt(ty)}" '
                       f'text-anchor="middle"{weight}>{escape(line)}</text>')
        out.append(f"{close_a}</g>")
    out.append("</g></svg>")
    return "\n".join(out) + "\n"
