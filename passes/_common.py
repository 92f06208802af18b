"""Small helpers shared by the passes (not a pass)."""

from tensorflow.core.framework import graph_pb2, node_def_pb2

from npu_adapter.vocabulary import DEVICE_HOST, DEVICE_NPU, PLACEMENT_ATTR

__all__ = ["copy_graph", "write_placements", "read_placements", "remember_placements",
           "publish_placements"]


def copy_graph(graph_def):
    """A deep copy of ``graph_def`` that the pass may edit."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    return out


def read_placements(view, *, copy=True):
    """``(candidate list, reasons dict)`` from the placement annotations of the view's nodes.

    Nodes without an annotation count as host with no reason. The lists returned are fresh
    copies the caller may edit (with ``copy=False``, possibly the remembered ones: read only).
    """
    cached = view.cache.get(("placements", id(view.graph_def)))
    if cached is not None and cached[0] is view.graph_def:
        return (list(cached[1]), dict(cached[2])) if copy else (cached[1], cached[2])
    candidate = []
    reasons = {}
    for i, node in enumerate(view.nodes):
        value = node.attr.get(PLACEMENT_ATTR)
        if value is None:
            candidate.append(False)
            continue
        device, _, reason = value.s.decode().partition(":")
        candidate.append(device == DEVICE_NPU)
        reasons[i] = reason
    return candidate, reasons


def remember_placements(view, candidate, reasons):
    """Record the placements just written into ``view.graph_def`` so the next pass need not
    parse them back from the attributes. The list and the dict are kept as they are: the caller
    must not change them afterwards (readers get copies, see :func:`read_placements`)."""
    view.cache[("placements", id(view.graph_def))] = (view.graph_def, candidate, reasons)


def write_placements(graph_def, candidate, reasons, in_place=False):
    """Annotate every node of ``graph_def`` with its placement.

    Returns ``(graph_def_out, modified)``: the input object itself when every annotation was
    already as requested, else an edited copy (with ``in_place``, the input edited).
    """
    encoded = {}  # the few distinct "<device>:<reason>" values, encoded once
    patches = {}  # the same values as serialized NodeDefs holding only that annotation

    def text_of(flag, reason):
        key = (flag, reason)
        text = encoded.get(key)
        if text is None:
            device = DEVICE_NPU if flag else DEVICE_HOST
            text = encoded[key] = f"{device}:{reason}".encode()
            patch = node_def_pb2.NodeDef()
            patch.attr[PLACEMENT_ATTR].s = text
            patches[text] = patch.SerializeToString()
        return text

    # The annotation of each node: "supported" for the nodes without a reason, then the others.
    npu, host = text_of(True, "supported"), text_of(False, "supported")
    wanted = [npu if flag else host for flag in candidate]
    for i, reason in reasons.items():
        wanted[i] = text_of(candidate[i], reason)
    changed = False
    for node, text in zip(graph_def.node, wanted):  # stops at the first difference
        current = node.attr.get(PLACEMENT_ATTR)
        if current is None or current.s != text:
            changed = True
            break
    if not changed:
        return graph_def, False
    out = graph_def if in_place else copy_graph(graph_def)
    # Merging a serialized map entry replaces the attr as an assignment would (an AttrValue
    # holds one value of its oneof), and costs about half as much from Python.
    for node, patch in zip(out.node, map(patches.__getitem__, wanted)):
        node.MergeFromString(patch)
    return out, True


def publish_placements(ctx, view, graph_def, candidate, reasons):
    """Write the placements into ``graph_def`` and hand the next pass a ready view of the result
    (same structure, annotations already parsed). Returns ``(graph_def_out, modified)``."""
    in_place = ctx.may_edit(graph_def)
    out, modified = write_placements(graph_def, candidate, reasons, in_place)
    if in_place and modified:
        facts = ctx.known_facts(out)
        if facts is not None:
            facts.pop("annotation_free", None)  # the nodes are annotated now
    if modified:
        out_view = view.rebind(out)
        out_view.note_attr_written(PLACEMENT_ATTR)
        ctx.register_view(out, out_view)
        remember_placements(out_view, candidate, reasons)
    return out, modified
