"""Extraction of the client graph of one run signature (fetches, feeds, targets).

Like TensorFlow's session, a run only executes the nodes its fetches and targets need, and a fed
tensor cuts the graph: the producer of a fed tensor is not needed for that tensor. A fed tensor
that is not simply the output of a ``Placeholder`` is replaced, in the client graph, by a new
``Placeholder`` (its consumers are rewired to it) so that the rewrite sees the feed as a graph
input, exactly as TensorFlow's ``DirectSession`` replaces feeds by ``_Arg`` nodes.
"""

import collections

from google.protobuf import unknown_fields
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

    # Backward reachability that does not follow fed edges.
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
    preds_of = view.cache.get("predecessors")
    if preds_of is not None and all(port == 0 and view.ops[i] == "Placeholder"
                                    for i, port in fed):
        # Every feed is a Placeholder standing for itself (kept below either way, and with no
        # input to cut): the closure over the producers the index already lists is the same.
        while stack:
            for src in preds_of[stack.pop()]:
                if not needed[src]:
                    needed[src] = 1
                    stack.append(src)
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

    # Placeholders that stand for fed tensors (a fed Placeholder:0 stands for itself).
    taken = None  # (the names in use, once a placeholder needs a name)
    substitutes = {}
    feed_map = {}
    new_nodes = []
    for (i, port), tensor in sorted(fed.items()):
        node = view.node_at(i)
        if node.op == "Placeholder" and port == 0:
            feed_map[tensor] = tensor
            needed[i] = 1
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

    kept = [i for i, flag in enumerate(needed) if flag]
    if not substitutes and len(kept) == len(view):
        # Everything is needed and nothing was substituted: the client graph is the graph.
        return ClientGraph(graph_def, fetches, targets, feed_map, view)
    if not substitutes:
        out = _copy_kept(graph_def, kept)
        return ClientGraph(out, fetches, targets, feed_map, view.subset(out, kept))
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for i in kept:
        node = view.nodes[i]
        copy = out.node.add()
        copy.CopyFrom(node)
        if substitutes:
            rewired = False
            new_inputs = []
            for text in node.input:
                name, port, is_control = parse_input(text)
                sub = None if is_control else substitutes.get((view.index.get(name, -1), port))
                if sub is not None:
                    new_inputs.append(format_input(sub, 0))
                    rewired = True
                else:
                    new_inputs.append(text)
            if rewired:
                del copy.input[:]
                copy.input.extend(new_inputs)
    out.node.extend(new_nodes)
    return ClientGraph(out, fetches, targets, feed_map, None)


def _copy_kept(graph_def, kept):
    """A GraphDef with the versions, the library and the nodes ``kept`` (sorted indices) of
    ``graph_def``, byte-identical to copying those fields one node at a time.

    When most nodes are kept, copying the whole message in one call and deleting the runs of
    left-out nodes is several times cheaper than a copy per node; each deletion shifts the tail
    of the node list, so the cost of both ways is estimated and the cheaper one taken."""
    n = len(graph_def.node)
    runs = []  # [start, end) of left-out nodes
    previous = -1
    for i in kept:
        if i != previous + 1:
            runs.append((previous + 1, i))
        previous = i
    if previous + 1 < n:
        runs.append((previous + 1, n))
    # Rough costs per node copied one by one, per node copied in bulk and per node shifted.
    per_node = 1000 * len(kept)
    bulk = 250 * n + sum(n - start for start, _ in runs)
    out = graph_pb2.GraphDef()
    # A whole copy would also carry fields this TensorFlow does not know (the field copies
    # below do not): then copy node by node.
    if bulk < per_node and not len(unknown_fields.UnknownFieldSet(graph_def)):
        out.CopyFrom(graph_def)
        for field, _ in out.ListFields():
            if field.name not in ("node", "versions", "library"):
                out.ClearField(field.name)
        # Copying the two fields marks them present even when empty: so does this.
        out.versions.SetInParent()
        out.library.SetInParent()
        for start, end in reversed(runs):
            del out.node[start:end]
        return out
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    nodes = graph_def.node
    add = out.node.add
    for i in kept:
        add().CopyFrom(nodes[i])
    return out
