"""Rewriting without the weights: large Const payloads are set aside and put back afterwards.

No pass reads the value of a constant, yet every pass that writes a new GraphDef copies it: on a
BERT-base encoder (438 MB of constants) the copies were most of the rewrite time and a few
seconds of the session's first run. So the rewrite works on a *light* graph whose large Consts
keep their dtype and shape but no data, each marked with the name it had in the input graph
(``PAYLOAD_ATTR``); the marker travels with every copy a pass makes (a ``<name>_copied`` const in
a cluster function, a hoisted const), and ``PayloadStore.restore`` puts the user's tensor back
into each marked node of the final graph and drops the marker. The result is byte-identical to a
rewrite of the full graph (tests/test_payload.py checks this on the model corpus).

Function bodies in the input library are left as they are (they are copied whole, as before).
"""

from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2

from npu_adapter.graph.types import const_sizes

__all__ = ["PAYLOAD_ATTR", "MIN_PAYLOAD_BYTES", "PayloadStore", "strip_payloads",
           "is_light_form_of"]

PAYLOAD_ATTR = "_npu_adapter_payload"
# Consts smaller than this are copied as they are: rebuilding a node attribute by attribute costs
# more than copying a few kilobytes. The rule depends on the Const alone, so a node has one light
# form in every graph (the session's execution graph relies on it).
MIN_PAYLOAD_BYTES = 16 * 1024


class PayloadStore:
    """The tensors set aside by ``strip_payloads``: input node name → the user's TensorProto
    (a reference into the input GraphDef, not a copy)."""

    def __init__(self):
        self._tensors = {}

    def __len__(self):
        return len(self._tensors)

    def set_aside(self, name, tensor):
        """Remember ``tensor`` (not copied) as the payload of the node called ``name``."""
        self._tensors[name] = tensor

    def restore_node(self, node):
        """Put the payload back into ``node`` (a NodeDef, edited in place) when it is marked;
        returns whether it was."""
        if PAYLOAD_ATTR not in node.attr:
            return False
        key = node.attr[PAYLOAD_ATTR].s.decode()
        node.attr["value"].tensor.CopyFrom(self._tensors[key])
        del node.attr[PAYLOAD_ATTR]
        return True

    def restored_function(self, fdef):
        """``fdef`` itself when no node of its body is marked, else a copy with the payloads
        put back."""
        if not any(PAYLOAD_ATTR in node.attr for node in fdef.node_def):
            return fdef
        copy = type(fdef)()
        copy.CopyFrom(fdef)
        for node in copy.node_def:
            self.restore_node(node)
        return copy

    def restore(self, graph_def):
        """Put the payloads back into every marked node of ``graph_def`` (in place, top-level
        nodes and function bodies) and drop the markers. Returns ``graph_def``."""
        if not self._tensors:
            return graph_def
        bodies = [graph_def.node] + [f.node_def for f in graph_def.library.function]
        for nodes in bodies:
            for node in nodes:
                self.restore_node(node)
        return graph_def


def is_light_form_of(light, node, ignore_attrs=()):
    """Whether ``light`` is what ``strip_payloads`` makes of ``node`` (a NodeDef whose value
    ``light`` does not hold): marked with ``node``'s name and equal to it but for the data and
    the attributes ``ignore_attrs``. Compares without copying the data."""
    if PAYLOAD_ATTR not in light.attr or light.attr[PAYLOAD_ATTR].s != node.name.encode() \
            or PAYLOAD_ATTR in node.attr or "value" not in node.attr:
        return False
    expected = node_def_pb2.NodeDef()
    _light_copy(node, expected, node.attr["value"].tensor)
    ignored = [key for key in ignore_attrs if key in light.attr or key in expected.attr]
    if ignored:
        copy = node_def_pb2.NodeDef()
        copy.CopyFrom(light)  # light: no data to copy
        for key in ignored:
            for message in (copy, expected):
                if key in message.attr:
                    del message.attr[key]
        light = copy
    return expected == light


def _light_copy(node, target, tensor):
    target.name = node.name
    target.op = node.op
    target.input.extend(node.input)
    if node.device:
        target.device = node.device
    for key, value in node.attr.items():
        if key == "value":
            light = target.attr["value"].tensor
            light.dtype = tensor.dtype
            light.tensor_shape.CopyFrom(tensor.tensor_shape)
            light.version_number = tensor.version_number
        else:
            target.attr[key].CopyFrom(value)
    if node.HasField("experimental_debug_info"):
        target.experimental_debug_info.CopyFrom(node.experimental_debug_info)
    if node.HasField("experimental_type"):
        target.experimental_type.CopyFrom(node.experimental_type)
    target.attr[PAYLOAD_ATTR].s = node.name.encode()


def strip_payloads(graph_def, min_bytes=None, *, view=None):
    """A light copy of ``graph_def`` and the store that restores it.

    Non-string Consts of at least ``min_bytes`` (default ``MIN_PAYLOAD_BYTES``) are set aside;
    ``(graph_def, None)`` when there are none. ``graph_def`` itself is never modified. ``view``,
    a GraphView of ``graph_def``, gives the Consts' sizes it keeps (where the passes find them
    again: see :meth:`GraphView.const_bytes`) instead of reading every node.
    """
    if min_bytes is None:
        min_bytes = MIN_PAYLOAD_BYTES
    big = []
    nodes = graph_def.node
    if view is not None:
        sizes = view.const_bytes()
    else:
        sizes = const_sizes(nodes, [node.op for node in nodes])
    for k, size in sizes.items():
        if size < min_bytes:
            continue
        node = nodes[k]
        # Strings are kept: their data is not one buffer that could be moved cheaply.
        if node.attr["value"].tensor.dtype != types_pb2.DT_STRING and \
                PAYLOAD_ATTR not in node.attr:
            big.append(k)
    if not big:
        return graph_def, None
    out = graph_pb2.GraphDef()
    for field, value in graph_def.ListFields():
        if field.name == "node":
            continue
        if field.message_type is not None:
            getattr(out, field.name).CopyFrom(value)
        else:
            setattr(out, field.name, value)
    store = PayloadStore()
    big_set = set(big)
    for k, node in enumerate(graph_def.node):
        target = out.node.add()
        if k not in big_set:
            target.CopyFrom(node)
            continue
        tensor = node.attr["value"].tensor
        _light_copy(node, target, tensor)
        store.set_aside(node.name, tensor)
    return out, store
