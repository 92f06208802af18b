"""Splicing a rewritten client graph into a ``tf.Graph`` that holds the user's nodes.

A session must keep one state: the variables, queues, iterators and tables a rewritten graph uses
must be the session's own, and feeds must land on the user's tensors. So a rewritten graph is not
imported whole into the graph that holds the user's nodes (the session's execution graph, or a
copy of the user's graph in a test); only what changed is:

* a node of the rewritten graph is *kept* (bound to the target graph's node of that name) when
  the target graph has a node of the same name with an equal NodeDef (colocation groups aside),
  and every input it reads is kept too;
* every other node (cluster calls, aliases, host nodes downstream of a cluster) is imported under
  a fresh name scope, its inputs on kept nodes bound to the target graph's tensors through
  ``import_graph_def``'s ``input_map``, and the placeholders that stand for fed tensors
  (:data:`~npu_adapter.graph.extract.FED_TENSOR_ATTR`) bound to the fed tensors themselves;
* a control input on a kept op without outputs is bound through a constant that waits for that
  op (:func:`control_anchor`): ``input_map`` binds control inputs through a tensor.

Colocation groups naming nodes that are not imported are dropped: ``import_graph_def`` cannot
resolve them, and they only steer placement, which the rewrite owns.
"""

import collections

from npu_adapter.graph.extract import FED_TENSOR_ATTR
from npu_adapter.graph.names import format_input, parse_input

__all__ = ["SplicePlan", "plan_splice", "splice_into_graph", "control_anchor",
           "drop_foreign_colocation"]


class SplicePlan(collections.namedtuple(
        "SplicePlan", ["graph_def", "bindings", "imported"])):
    """What to import and how to bind it.

    Attributes:
        graph_def: GraphDef of the nodes to import (with the rewritten graph's library).
        bindings: dict input of an imported node (``"name:port"`` or ``"^name"``, names of the
            rewritten graph) → what it binds to in the target graph (``"name:port"`` or
            ``"^name"``).
        imported: frozenset of the imported node names (names of the rewritten graph).
    """

    __slots__ = ()

    def rename(self, scope):
        """A function: node name of the rewritten graph → name of the op standing for it in
        the target graph once imported under ``scope``."""
        imported = self.imported

        def rename(name):
            return f"{scope}/{name}" if name in imported else name

        return rename


def drop_foreign_colocation(node, importing):
    """Remove from ``node`` (a NodeDef about to be imported, edited in place) the colocation
    groups that name a node outside ``importing``."""
    groups = node.attr.get("_class")
    if groups is None:
        return
    kept = [g for g in groups.list.s if not g.startswith(b"loc:@") or g[5:].decode() in importing]
    if len(kept) == len(groups.list.s):
        return
    if kept:
        del groups.list.s[:]
        groups.list.s.extend(kept)
    else:
        del node.attr["_class"]


def _same_node(original, rewritten):
    """Whether ``rewritten`` is ``original`` unchanged, colocation groups aside (the rewrite
    drops groups naming nodes outside the client graph). Field comparison, no serialisation."""
    if "_class" in original.attr or "_class" in rewritten.attr:
        original, rewritten = _without_class(original), _without_class(rewritten)
    return original == rewritten


def _without_class(node):
    if "_class" not in node.attr:
        return node
    copy = type(node)()
    copy.CopyFrom(node)
    del copy.attr["_class"]
    return copy


def _reading_fed_tensors(node, stand_ins):
    """``node`` with each input that names a feed's stand-in naming the fed tensor itself (the
    splice binds stand-ins to the fed tensors): a node that reads a fed tensor as the user's
    node does is that node, unchanged. Keeping the user's node matters beyond saving a copy: a
    stateful kernel such as a random op keeps its state only under the user's name."""
    if not stand_ins or not any(parse_input(text)[0] in stand_ins for text in node.input):
        return node
    copy = type(node)()
    copy.CopyFrom(node)
    del copy.input[:]
    for text in node.input:
        src, _, is_control = parse_input(text)
        fed = stand_ins.get(src)
        if fed is None:
            copy.input.append(text)
        else:
            fed_node, fed_port, _ = parse_input(fed)
            copy.input.append(format_input(fed_node, fed_port, is_control))
    return copy


def plan_splice(rewritten, target_nodes):
    """Plan the import of ``rewritten`` into a graph whose NodeDefs are ``target_nodes``.

    Args:
        rewritten: the rewritten client GraphDef.
        target_nodes: dict name → NodeDef of the target graph (in the form the rewritten graph's
            nodes are compared with).

    Returns:
        A :class:`SplicePlan`.
    """
    nodes = rewritten.node
    stand_ins = {n.name: n.attr[FED_TENSOR_ATTR].s.decode() for n in nodes
                 if FED_TENSOR_ATTR in n.attr}
    # The rewrite keeps a fed tensor's name with an Identity of its stand-in (``x`` reading
    # ``x_feed_0``): that alias is the fed tensor too.
    for n in nodes:
        if n.op == "Identity" and len(n.input) == 1:
            src, port, is_control = parse_input(n.input[0])
            if not is_control and port == 0 and stand_ins.get(src) == f"{n.name}:0":
                stand_ins[n.name] = stand_ins[src]
    changed = set()
    for node in nodes:
        if node.name in stand_ins:
            continue
        original = target_nodes.get(node.name)
        if original is None or not _same_node(original, _reading_fed_tensors(node, stand_ins)):
            changed.add(node.name)
    consumers = collections.defaultdict(list)
    for node in nodes:
        for text in node.input:
            consumers[parse_input(text)[0]].append(node.name)
    queue = collections.deque(sorted(changed))
    while queue:
        for consumer in consumers.get(queue.popleft(), ()):
            if consumer not in changed and consumer not in stand_ins:
                changed.add(consumer)
                queue.append(consumer)
    out = type(rewritten)()
    out.versions.CopyFrom(rewritten.versions)
    out.library.CopyFrom(rewritten.library)
    bindings = {}
    for node in nodes:
        if node.name not in changed:
            continue
        copy = out.node.add()
        copy.CopyFrom(node)
        drop_foreign_colocation(copy, changed)
        for text in node.input:
            src, port, is_control = parse_input(text)
            if src in changed:
                continue
            key = "^" + src if is_control else f"{src}:{port}"
            fed = stand_ins.get(src)
            if fed is None:
                bindings[key] = key
            else:
                bindings[key] = "^" + parse_input(fed)[0] if is_control else fed
    return SplicePlan(out, bindings, frozenset(changed))


def control_anchor(tf_graph, op, cache):
    """A tensor of ``tf_graph`` whose op runs after ``op``: ``op``'s first output, or for an op
    without outputs a scalar constant waiting for it (made once per op, kept in ``cache``)."""
    if op.outputs:
        return op.outputs[0]
    anchor = cache.get(op.name)
    if anchor is None:
        import tensorflow as tf

        with tf_graph.as_default(), tf_graph.control_dependencies([op]):
            anchor = cache[op.name] = tf.constant(
                False, name="npu_adapter_after")
    return anchor


def splice_into_graph(tf_graph, plan, scope, anchors=None):
    """Import ``plan`` (a :class:`SplicePlan`) into ``tf_graph`` under a fresh name scope made
    from ``scope`` (``scope`` itself, or ``scope_1``, ... when taken); returns the
    :meth:`SplicePlan.rename` function of the import. ``anchors`` keeps the control anchors
    made for ops without outputs between calls (see :func:`control_anchor`)."""
    import tensorflow as tf

    if not plan.imported:
        return plan.rename(scope)
    scope = tf_graph.unique_name(scope)
    anchors = {} if anchors is None else anchors
    input_map = {}
    for key, target in plan.bindings.items():
        if target.startswith("^"):
            input_map[key] = control_anchor(
                tf_graph, tf_graph.get_operation_by_name(target[1:]), anchors)
        else:
            input_map[key] = tf_graph.get_tensor_by_name(target)
    with tf_graph.as_default():
        # "<scope>/": the scope reserved above, entered as it is.
        tf.graph_util.import_graph_def(plan.graph_def, input_map=input_map or None,
                                       name=scope + "/")
    return plan.rename(scope)
