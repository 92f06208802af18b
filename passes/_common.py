"""Small helpers shared by the passes (not a pass)."""

from tensorflow.core.framework import graph_pb2, node_def_pb2

from npu_adapter.vocabulary import DEVICE_HOST, DEVICE_NPU, PLACEMENT_ATTR

__all__ = ["copy_graph", "write_placements", "read_placements"]


def copy_graph(graph_def):
    """A deep copy of ``graph_def`` that the pass may edit."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    return out


def read_placements(view):
    """``(candidate list, reasons dict)`` from the placement annotations of the view's nodes.

    Nodes without an annotation count as host with no reason. The caller may edit both.
    """
    candidate = []
    reasons = {}
    parsed = {}  # annotation -> (candidate, reason): a graph has a few distinct ones
    # (One read per node from the GraphDef: the view's list of NodeDefs is not made for it.)
    for i, node in enumerate(view.graph_def.node):
        value = node.attr.get(PLACEMENT_ATTR)
        if value is None:
            candidate.append(False)
            continue
        text = value.s
        entry = parsed.get(text)
        if entry is None:
            device, _, reason = text.decode().partition(":")
            entry = parsed[text] = (device == DEVICE_NPU, reason)
        candidate.append(entry[0])
        reasons[i] = entry[1]
    return candidate, reasons


def write_placements(graph_def, candidate, reasons):
    """Annotate every node of ``graph_def`` with its placement.

    Returns ``(graph_def_out, modified)``: the input object itself when every annotation was
    already as requested, else an annotated copy.
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
    out = copy_graph(graph_def)
    # Merging a serialized map entry replaces the attr as an assignment would (an AttrValue
    # holds one value of its oneof), and costs about half as much from Python.
    for node, patch in zip(out.node, map(patches.__getitem__, wanted)):
        node.MergeFromString(patch)
    return out, True
