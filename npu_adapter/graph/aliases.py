"""Keep the user's fetched, fed and target names valid in a rewritten GraphDef.

A rewrite moves nodes into clusters: a fetched ``probs:0`` is then computed inside ``GeOp1_0``
and leaves it as ``GeOp1_0:0``, and a fed tensor is read from a placeholder made for it. Code
that loads the rewritten graph by the original names (serving code, ``sess.run("probs:0")``
after ``npu-adapter convert``) would break. :func:`keep_user_names` adds, for every such name
whose node no longer exists in the rewritten graph, a small alias node carrying the user's name:

* a fetched tensor ``n:p`` → ``n`` becomes an ``Identity`` (port 0 only) or an ``IdentityN``
  (ports 0..p) reading the tensors that now hold the values;
* a fed tensor ``n:p`` → ``n`` becomes an ``Identity``/``IdentityN`` of the placeholder(s) made
  for the feed, and the consumers of those placeholders read the alias instead, so feeding
  ``n:p`` reaches them (TensorFlow replaces a fed tensor wherever it is read);
* a target op ``t`` that moved into a cluster → ``t`` becomes a ``NoOp`` with a control input
  on the cluster, so running ``t`` runs the cluster.

The aliases are plain TensorFlow ops; ``result.tensor_map`` and ``result.op_map`` still give the
direct names for those who want them. Names that still exist (host nodes, placeholders) are left
alone, so a graph that was not rewritten gets no alias at all.
"""

import collections

from tensorflow.core.framework import graph_pb2

from npu_adapter.graph.names import format_input, parse_input
from npu_adapter.graph.types import base_type, node_output_types

__all__ = ["complete_fetch_ports", "keep_user_names", "without_aliases"]


def complete_fetch_ports(fetches):
    """``fetches`` plus the lower ports of every node fetched at a port above 0 but not at all
    the ports below it (``split:2`` alone adds ``split:0`` and ``split:1``).

    An ``IdentityN`` alias named like the node needs a tensor for every port up to the highest
    one fetched; fetching the missing ones too makes the rewrite keep them available. The order
    of ``fetches`` is kept, additions come last.
    """
    ports = collections.defaultdict(set)
    for fetch in fetches:
        node, port, _ = parse_input(fetch)
        ports[node].add(port)
    extra = [f"{node}:{p}" for node, seen in ports.items() for p in range(max(seen))
             if p not in seen]
    return list(fetches) + extra


def _alias_node(graph, name, inputs, dtypes):
    node = graph.node.add()
    node.name = name
    if len(inputs) == 1:
        node.op = "Identity"
        node.attr["T"].type = dtypes[0]
    else:
        node.op = "IdentityN"
        node.attr["T"].list.type.extend(dtypes)
    node.input.extend(inputs)
    return node


class _IndexedNodes:
    """``name -> NodeDef`` lookups through a GraphView's index (what ``_types`` needs)."""

    __slots__ = ("_view",)

    def __init__(self, view):
        self._view = view

    def get(self, name):
        i = self._view.index.get(name)
        return None if i is None else self._view.graph_def.node[i]


def _types(user_nodes, functions, name):
    node = user_nodes.get(name)
    if node is None:
        return None
    types = node_output_types(node, functions)
    return None if types is None else [base_type(t) for t in types]


def keep_user_names(graph_def, user_graph_def, *, fetches=(), feed_map=None, targets=(),
                    tensor_map=None, op_map=None, in_place=False, present=None,
                    user_view=None):
    """Add alias nodes so that the user's names stay valid in ``graph_def``.

    Args:
        graph_def: the rewritten GraphDef (not modified).
        user_graph_def: the graph that was rewritten (for the dtypes of the user's nodes).
        fetches: fetched tensor names (``"node:port"``).
        feed_map: fed tensor name → the tensor standing for it in ``graph_def``.
        targets: target op names.
        tensor_map: user tensor name → tensor in ``graph_def`` (``RewriteResult.tensor_map``).
        op_map: user op name → op in ``graph_def`` (``RewriteResult.op_map``).
        in_place: add the aliases to ``graph_def`` itself instead of a copy (for a GraphDef
            nobody else holds: copying a model with large constants costs time and memory).
        present: the set of node names of ``graph_def``, when the caller has it.
        user_view: a GraphView of ``user_graph_def``, when the caller has one (its index finds
            the few nodes that need aliases without reading every name again).

    Returns:
        ``(graph_def, aliases)``: the GraphDef with the aliases (``graph_def`` itself when none
        was needed or ``in_place``) and a dict alias name → list of the tensors (or ``^ops``) it
        reads.
    """
    if present is None:
        present = {node.name for node in graph_def.node}
    fed, fetched, no_ops = _names_to_keep(present, fetches, feed_map or {}, targets,
                                          tensor_map or {}, op_map or {})
    if not fetched and not fed and not no_ops:
        return graph_def, {}
    if user_view is not None and user_view.graph_def is user_graph_def:
        user_nodes = _IndexedNodes(user_view)
    else:
        user_nodes = {node.name: node for node in user_graph_def.node}
    functions = {f.signature.name: f for f in user_graph_def.library.function}
    if in_place:
        out = graph_def
    else:
        out = graph_pb2.GraphDef()
        out.CopyFrom(graph_def)
    aliases = {}
    rewire = {}
    for node, ports in sorted(fed.items()):
        types = _types(user_nodes, functions, node)
        if types is None or max(ports) >= len(types):
            continue
        inputs = []
        for port in range(max(ports) + 1):
            if port in ports:
                inputs.append(ports[port])
                continue
            # A port below a fed one that is not fed: only its consumers would run the alias,
            # and it has none (the node was cut from the graph), so a placeholder stands in.
            filler = out.node.add()
            filler.name = f"{node}/_npu_adapter_unfed_{port}"
            filler.op = "Placeholder"
            filler.attr["dtype"].type = types[port]
            inputs.append(f"{filler.name}:0")
        _alias_node(out, node, inputs, types[:len(inputs)])
        aliases[node] = inputs
        for port, standing in ports.items():
            rewire[standing] = format_input(node, port)
    for node, ports in sorted(fetched.items()):
        types = _types(user_nodes, functions, node)
        if types is None or max(ports) >= len(types):
            continue
        inputs = [ports[port] for port in range(max(ports) + 1)]
        _alias_node(out, node, inputs, types[:len(inputs)])
        aliases[node] = inputs
    for name, control in sorted(no_ops.items()):
        node = out.node.add()
        node.name = name
        node.op = "NoOp"
        node.input.append(control)
        aliases[name] = [control]
    if rewire:
        _read_fed_aliases(out, rewire, set(aliases))
    return out, aliases


def _names_to_keep(present, fetches, feed_map, targets, tensor_map, op_map):
    """The user's names a rewritten graph (whose node names are ``present``) lacks and must
    get back as aliases: ``(fed, fetched, no_ops)``, a fed node → port → the tensor standing
    for it; a fetched node → port → the tensor that now computes it (every port up to the
    highest fetched one); a target → the ``^op`` that now runs it."""
    fed = collections.defaultdict(dict)
    for tensor, standing in sorted(feed_map.items()):
        node, port, _ = parse_input(tensor)
        if node not in present and standing != tensor:
            fed[node][port] = standing
    fetched = collections.defaultdict(dict)
    for tensor in fetches:
        node, port, _ = parse_input(tensor)
        if node in present or node in fed:
            continue  # still there, or its alias comes from the feed
        mapped = tensor_map.get(f"{node}:{port}")
        if mapped is not None:
            fetched[node][port] = mapped
    for node in list(fetched):  # every port up to the highest one must have a value
        ports = fetched[node]
        for port in range(max(ports)):
            mapped = tensor_map.get(f"{node}:{port}")
            if mapped is None:
                del fetched[node]
                break
            ports[port] = mapped
    no_ops = {}
    for target in targets:
        name = target[1:] if target.startswith("^") else target
        moved = op_map.get(name)
        if moved and moved in present and name not in present and name not in fetched \
                and name not in fed:
            no_ops[name] = "^" + moved
    return fed, fetched, no_ops


def _read_fed_aliases(graph_def, rewire, alias_names):
    """Make the nodes of ``graph_def`` (but the aliases) read the aliases of fed tensors:
    ``rewire`` maps the tensor standing for a feed to the alias's tensor."""
    for node in graph_def.node:
        if node.name in alias_names:
            continue
        changed = False
        new_inputs = []
        for text in node.input:
            name, port, is_control = parse_input(text)
            target = None if is_control else rewire.get(f"{name}:{port}")
            if target is not None:
                new_inputs.append(target)
                changed = True
            else:
                new_inputs.append(text)
        if changed:
            del node.input[:]
            node.input.extend(new_inputs)


def without_aliases(graph_def, aliases):
    """``graph_def`` without the alias nodes of :func:`keep_user_names` (the partition as the
    passes left it): alias nodes and their filler placeholders are dropped and the consumers
    of fed aliases read the placeholders again. A new GraphDef; ``graph_def`` is not changed."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    if not aliases:
        return out
    fillers = {text.partition(":")[0] for inputs in aliases.values() for text in inputs
               if "/_npu_adapter_unfed_" in text}
    kept = [node for node in out.node if node.name not in aliases and node.name not in fillers]
    for node in kept:
        if not any(parse_input(t)[0] in aliases for t in node.input):
            continue
        new_inputs = []
        for text in node.input:
            name, port, is_control = parse_input(text)
            if not is_control and name in aliases and port < len(aliases[name]):
                text = aliases[name][port]
                if text.endswith(":0"):
                    text = text[:-2]
            new_inputs.append(text)
        del node.input[:]
        node.input.extend(new_inputs)
    nodes = [type(node)() for node in kept]
    for copy, node in zip(nodes, kept):
        copy.CopyFrom(node)
    del out.node[:]
    out.node.extend(nodes)
    return out
