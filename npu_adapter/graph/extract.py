"""Extraction of the client graph of one run signature (fetches, feeds, targets).

Like TensorFlow's session, a run only executes the nodes its fetches and targets need, and a fed
tensor cuts the graph: the producer of a fed tensor is not needed for that tensor. A fed tensor
that is not simply the output of a ``Placeholder`` is replaced, in the client graph, by a new
``Placeholder`` (its consumers are rewired to it) so that the rewrite sees the feed as a graph
input, exactly as TensorFlow's ``DirectSession`` replaces feeds by ``_Arg`` nodes.
"""

import collections

from tensorflow.core.framework import graph_pb2, node_def_pb2

from npu_adapter.errors import GraphError
from npu_adapter.graph.names import format_input, parse_input, unique_name
from npu_adapter.graph.types import base_type
from npu_adapter.graph.view import GraphView

__all__ = ["ClientGraph", "extract_client_graph", "normalize_tensor_name", "FED_TENSOR_ATTR"]

# Placeholders made for fed tensors carry this attr (value: the fed tensor's name) so later code
# (the session, the placement report) can map them back to what the user fed.
FED_TENSOR_ATTR = "_npu_adapter_fed_tensor"


class ClientGraph(collections.namedtuple(
        "ClientGraph", ["graph_def", "fetches", "targets", "feeds", "view"])):
    """The pruned GraphDef of one run signature.

    Attributes:
        graph_def: the client GraphDef (original node order, library and versions kept).
        fetches: tuple of fetched tensor names (``"node:port"``), as given.
        targets: tuple of target op names, as given.
        feeds: dict fed tensor name (as the user wrote it, normalised to ``node:port``) → name of
            the tensor that stands for it in ``graph_def`` (the same name for fed placeholders).
        view: a GraphView of ``graph_def`` (derived from the full graph's view without parsing
            again), or None when feeds were substituted.
    """

    __slots__ = ()


def normalize_tensor_name(text, what="fetch"):
    """``"x"`` → ``"x:0"``; ``"x:1"`` unchanged; ``"^x"`` is rejected (an op, not a tensor)."""
    name, port, is_control = parse_input(text)
    if is_control:
        raise GraphError(f"{what} {text!r} names an operation, not a tensor; pass it as a target")
    return f"{name}:{port}"


def _check_tensor(view, tensor, what):
    name, port, _ = parse_input(tensor)
    if name not in view.index:
        raise GraphError(f"{what} {tensor!r}: the graph has no node named {name!r}")
    out_types = view.output_types(view.index[name])
    if out_types is not None and port >= len(out_types):
        node = view.node(name)
        raise GraphError(
            f"{what} {tensor!r}: node {name!r} ({node.op}) has {len(out_types)} output(s), "
            f"so the valid ports are 0..{len(out_types) - 1}")
    return view.index[name], port


def _shape_attr_for(node, port):
    shapes = node.attr.get("_output_shapes")
    if shapes is not None and port < len(shapes.list.shape):
        return shapes.list.shape[port]
    if node.op in ("Placeholder", "PlaceholderWithDefault") and "shape" in node.attr:
        return node.attr["shape"].shape
    return None


def extract_client_graph(graph_def, fetches=(), targets=(), feeds=(), *, view=None):
    """Prune ``graph_def`` to what ``fetches`` and ``targets`` need, cutting at ``feeds``.

    A fed ``Placeholder`` stands for itself; when nothing needs it but through its fed output,
    its control inputs are dropped: TensorFlow does not run them either.

    Args:
        graph_def: the full GraphDef.
        fetches: tensor names to fetch (``"node:port"``; ``"node"`` means port 0).
        targets: op names to run.
        feeds: tensor names that will be fed.
        view: an existing GraphView of ``graph_def`` to reuse.

    Returns:
        A :class:`ClientGraph`.

    Raises:
        GraphError: a fetch, target or feed names a missing node or an invalid port, or nothing
            is fetched or targeted.
    """
    view = view or GraphView(graph_def)
    fetches = tuple(normalize_tensor_name(f, "fetch") for f in fetches)
    feeds_n = tuple(dict.fromkeys(normalize_tensor_name(f, "feed") for f in feeds))
    targets = tuple(targets)
    if not fetches and not targets:
        raise GraphError("nothing to run: give at least one fetch or target")
    for f in fetches:
        _check_tensor(view, f, "fetch")
    target_ids = []
    for t in targets:
        name = t[1:] if t.startswith("^") else t
        if name not in view.index:
            raise GraphError(f"target {t!r}: the graph has no node named {name!r}")
        target_ids.append(view.index[name])
    fed = {}
    for f in feeds_n:
        fed[_check_tensor(view, f, "feed")] = f

    needed = _needed_nodes(view, fetches, target_ids, fed)
    feed_map, new_nodes, new_inputs = _stand_ins_for_feeds(view, fed, needed)
    kept = [i for i, flag in enumerate(needed) if flag]
    if not new_inputs and not new_nodes and len(kept) == len(view):
        # Everything is needed and nothing was rewired: the client graph is the graph.
        return ClientGraph(graph_def, fetches, targets, feed_map, view)
    out = _copy_kept(graph_def, kept)
    if not new_inputs and not new_nodes:
        return ClientGraph(out, fetches, targets, feed_map, view.subset(out, kept))
    for k, i in enumerate(kept):
        inputs = new_inputs.get(i)
        if inputs is not None:
            del out.node[k].input[:]
            out.node[k].input.extend(inputs)
    out.node.extend(new_nodes)
    return ClientGraph(out, fetches, targets, feed_map, None)


def _needed_nodes(view, fetches, target_ids, fed):
    """Per node of ``view``, 1 when a fetch or a target needs it: backward reachability that
    does not follow fed edges (``fed`` maps ``(node index, port)`` to the fed tensor)."""
    needed = bytearray(len(view))
    stack = []
    for f in fetches:
        src, port, _ = parse_input(f)
        i = view.index[src]
        if (i, port) not in fed and not needed[i]:
            needed[i] = 1
            stack.append(i)
    for i in target_ids:
        if not needed[i]:
            needed[i] = 1
            stack.append(i)
    fed_nodes = {i for i, _ in fed}
    data_inputs = view.data_inputs
    control_inputs = view.control_inputs
    while stack:
        i = stack.pop()
        for src, port in data_inputs[i]:
            if src >= 0 and not needed[src] and (src not in fed_nodes or (src, port) not in fed):
                needed[src] = 1
                stack.append(src)
        for src in control_inputs[i]:
            if src >= 0 and not needed[src]:
                needed[src] = 1
                stack.append(src)
    return needed


def _stand_ins_for_feeds(view, fed, needed):
    """What stands for each fed tensor in the client graph: a fed ``Placeholder:0`` for itself
    (marked in ``needed``; without its control inputs when nothing else needed it), any other
    fed tensor a new ``Placeholder`` its consumers are rewired to.

    Returns:
        ``(feed_map, new_nodes, new_inputs)``: fed tensor -> the tensor standing for it; the new
        placeholders; node index -> its new inputs, for the kept nodes whose inputs change.
    """
    taken = None  # (the names in use, once a placeholder needs a name)
    substitutes = {}
    feed_map = {}
    new_nodes = []
    new_inputs = {}
    for (i, port), tensor in sorted(fed.items()):
        node = view.node_at(i)
        if node.op == "Placeholder" and port == 0:
            feed_map[tensor] = tensor
            if not needed[i]:
                needed[i] = 1
                if view.control_inputs[i]:
                    new_inputs[i] = [t for t in node.input if not t.startswith("^")]
            continue
        out_types = view.output_types(i)
        if out_types is None:
            raise GraphError(
                f"feed {tensor!r}: cannot tell the dtype of output {port} of {node.op} node "
                f"{node.name!r}, so it cannot be fed")
        ph = node_def_pb2.NodeDef()
        if taken is None:
            taken = set(view.index)
        ph.name = unique_name(f"{node.name}_feed_{port}", taken)
        ph.op = "Placeholder"
        ph.attr["dtype"].type = base_type(out_types[port])  # ref outputs are fed by value
        shape = _shape_attr_for(node, port)
        if shape is not None:
            ph.attr["shape"].shape.CopyFrom(shape)
        else:
            ph.attr["shape"].shape.unknown_rank = True
        ph.attr[FED_TENSOR_ATTR].s = tensor.encode()
        substitutes[(i, port)] = ph.name
        feed_map[tensor] = f"{ph.name}:0"
        new_nodes.append(ph)
    if substitutes:
        for i, flag in enumerate(needed):
            if flag and any((src, port) in substitutes for src, port in view.data_inputs[i]):
                new_inputs[i] = [_rewired(view.index, text, substitutes)
                                 for text in view.node_at(i).input]
    return feed_map, new_nodes, new_inputs


def _rewired(index, text, substitutes):
    """The input ``text`` of a node, naming the substitute placeholder when it reads a fed
    tensor."""
    name, port, is_control = parse_input(text)
    sub = None if is_control else substitutes.get((index.get(name, -1), port))
    return text if sub is None else format_input(sub, 0)


def _copy_kept(graph_def, kept):
    """A GraphDef with the versions, the library and the nodes ``kept`` (sorted indices) of
    ``graph_def``."""
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    nodes = graph_def.node
    add = out.node.add
    for i in kept:
        add().CopyFrom(nodes[i])
    return out
