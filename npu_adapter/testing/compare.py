"""Structural comparison of GraphDefs with a readable diff."""

import difflib

from npu_adapter.graph.names import parse_input
from npu_adapter.graph.serialize import to_text

__all__ = ["graph_defs_equal", "assert_graph_equal", "canonical_edges"]


def _canonical_node(node):
    data = [t for t in node.input if not t.startswith("^")]
    controls = sorted(t for t in node.input if t.startswith("^"))
    copy = type(node)()
    copy.CopyFrom(node)
    del copy.input[:]
    copy.input.extend(data + controls)
    return copy


def _canonical_text(graph_def, ignore_attrs):
    nodes = sorted(graph_def.node, key=lambda n: n.name)
    parts = []
    for node in nodes:
        node = _canonical_node(node)
        for key in ignore_attrs:
            if key in node.attr:
                del node.attr[key]
        parts.append("node {\n" + to_text(node) + "}\n")
    for fdef in sorted(graph_def.library.function, key=lambda f: f.signature.name):
        parts.append("function {\n" + to_text(fdef) + "}\n")
    return "".join(parts)


def graph_defs_equal(a, b, ignore_attrs=()):
    """True when ``a`` and ``b`` hold the same nodes (any order; control inputs as a set) and
    the same functions, ignoring the attrs named in ``ignore_attrs``."""
    return _canonical_text(a, ignore_attrs) == _canonical_text(b, ignore_attrs)


def assert_graph_equal(actual, expected, ignore_attrs=(), max_lines=80):
    """Assert structural equality (see :func:`graph_defs_equal`) with a unified diff on failure."""
    text_a = _canonical_text(actual, ignore_attrs)
    text_b = _canonical_text(expected, ignore_attrs)
    if text_a == text_b:
        return
    diff = list(difflib.unified_diff(text_b.splitlines(), text_a.splitlines(), "expected",
                                     "actual", lineterm="", n=2))
    shown = "\n".join(diff[:max_lines])
    more = f"\n... ({len(diff) - max_lines} more diff lines)" if len(diff) > max_lines else ""
    raise AssertionError(f"GraphDefs differ:\n{shown}{more}")


def canonical_edges(graph_def, names=None):
    """Sorted edge strings ``src[:port]->dst[:slot]`` (``:control`` for control edges) over op
    nodes, the format the original adapter's tests compare. ``names`` may rename nodes."""
    rename = names or {}
    edges = []
    for node in graph_def.node:
        dst = rename.get(node.name, node.name)
        slot = 0
        for text in node.input:
            src, port, is_control = parse_input(text)
            src = rename.get(src, src)
            if is_control:
                edges.append(f"{src}:control->{dst}:control")
            else:
                left = src if port == 0 else f"{src}:{port}"
                right = dst if slot == 0 else f"{dst}:{slot}"
                edges.append(f"{left}->{right}")
                slot += 1
    return sorted(edges)
