"""Splicing a rewritten client graph into the live ``tf.Graph`` it came from.

A session must keep one state: the variables, queues, iterators and tables the rewritten graph
uses must be the session's own, and feeds must land on the user's tensors. So instead of importing
the whole rewritten GraphDef, we import only what changed:

* a node of the rewritten graph is *kept* (mapped to the original) when the original graph has a
  node of the same name with a byte-identical NodeDef and all of its inputs are kept;
* every other node (cluster call nodes, host nodes downstream of a cluster, expanded nodes) is
  imported under a fresh name scope, with ``input_map`` binding its inputs on kept nodes to the
  original tensors, and the placeholders standing for fed tensors to the fed tensors themselves.

Control inputs on a kept node that has no output cannot be expressed through ``input_map`` (TF
binds control inputs through a tensor of the op); such a node is imported too.
"""

import collections

from tensorflow.core.framework import attr_value_pb2, graph_pb2

from npu_adapter import tf_compat
from npu_adapter.graph.extract import FED_TENSOR_ATTR
from npu_adapter.graph.names import parse_input

__all__ = ["SplicePlan", "detach_foreign_colocation", "plan_splice", "splice_into_graph"]


def detach_foreign_colocation(copy, importing, colocations):
    """Drop the ``_class`` colocation groups of ``copy`` (a NodeDef about to be imported) when
    one names a node outside ``importing``: ``import_graph_def`` cannot bind a group to a node
    it does not import. The groups are recorded in ``colocations[name]``, to be set on the
    imported op afterwards."""
    groups = copy.attr.get("_class")
    if groups is not None and any(g.startswith(b"loc:@") and g[5:].decode() not in importing
                                  for g in groups.list.s):
        colocations[copy.name] = list(groups.list.s)
        del copy.attr["_class"]


class SplicePlan(collections.namedtuple(
        "SplicePlan", ["import_graph_def", "input_map", "imported", "kept", "colocations"])):
    """What to import and how to bind it.

    Attributes:
        import_graph_def: GraphDef of the nodes to import (with the rewritten library).
        input_map: dict ``"name:port"`` / ``"^name"`` (names in the rewritten graph) → original
            tensor or op name to bind them to.
        imported: sorted names of imported nodes (names in the rewritten graph).
        kept: set of names of rewritten nodes mapped to the originals.
        colocations: imported node name → its ``_class`` list, to set after the import.
    """

    __slots__ = ()


def _same_node(original, rewritten):
    """Whether ``rewritten`` is unchanged from ``original``. Colocation groups (``_class``) are
    ignored: the rewrite drops references to nodes outside the client graph so that the
    rewritten GraphDef imports on its own, and that alone must not make a stateful node (an
    iterator colocated with its dataset, say) look changed and get duplicated. Message equality
    compares fields (maps regardless of order) without serialising: a 64 MB Const compares in
    milliseconds."""
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


def plan_splice(rewritten, original_nodes, *, has_outputs):
    """Plan the import of ``rewritten`` into a graph whose NodeDefs are ``original_nodes``.

    Args:
        rewritten: the rewritten client GraphDef.
        original_nodes: dict name → NodeDef of the live graph (only the names the rewritten graph
            mentions are looked up).
        has_outputs: callable name → bool, whether the original op has at least one output.
    """
    nodes = list(rewritten.node)
    by_name = {n.name: n for n in nodes}
    changed = set()
    for node in nodes:
        orig = original_nodes.get(node.name)
        if FED_TENSOR_ATTR in node.attr:
            continue  # stands for a fed tensor: bound through input_map, never imported
        if orig is None or not _same_node(orig, node):
            changed.add(node.name)
    consumers = collections.defaultdict(list)
    for node in nodes:
        for text in node.input:
            consumers[parse_input(text)[0]].append(node.name)
    queue = collections.deque(sorted(changed))
    while queue:
        name = queue.popleft()
        for c in consumers.get(name, ()):
            if c not in changed and FED_TENSOR_ATTR not in by_name[c].attr:
                changed.add(c)
                queue.append(c)
    # Kept nodes without outputs that imported nodes depend on through control edges.
    grew = True
    while grew:
        grew = False
        for name in sorted(changed):
            for text in by_name[name].input:
                src, _, is_control = parse_input(text)
                if is_control and src not in changed and src in by_name and \
                        FED_TENSOR_ATTR not in by_name[src].attr and not has_outputs(src):
                    changed.add(src)
                    grew = True
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(rewritten.versions)
    out.library.CopyFrom(rewritten.library)
    input_map = {}
    colocations = {}
    for node in nodes:
        if node.name not in changed:
            continue
        copy = out.node.add()
        copy.CopyFrom(node)
        detach_foreign_colocation(copy, changed, colocations)
        for text in node.input:
            src, port, is_control = parse_input(text)
            if src in changed:
                continue
            src_node = by_name.get(src)
            if src_node is not None and FED_TENSOR_ATTR in src_node.attr:
                target = src_node.attr[FED_TENSOR_ATTR].s.decode()
                if is_control:
                    input_map["^" + src] = "^" + parse_input(target)[0]
                else:
                    input_map[f"{src}:{port}"] = target
            elif is_control:
                input_map["^" + src] = "^" + src
            else:
                input_map[f"{src}:{port}"] = f"{src}:{port}"
    kept = {n.name for n in nodes if n.name not in changed}
    return SplicePlan(out, input_map, sorted(changed), kept, colocations)


def splice_into_graph(tf_graph, rewritten, scope, original_graph_def=None):
    """Import the changed part of ``rewritten`` into ``tf_graph`` under ``scope``.

    ``original_graph_def``, when given, is ``tf_graph.as_graph_def()`` taken since the graph last
    changed (the GraphDef that was rewritten): its NodeDefs are compared instead of asking every
    op for its ``node_def`` (a serialisation per op, slow for large constants).

    Returns ``rename``: a callable mapping a node name of the rewritten graph to the name of the
    op that stands for it in ``tf_graph`` (imported or original).
    """
    import tensorflow as tf

    original = {}
    if original_graph_def is not None:
        original = {n.name: n for n in original_graph_def.node}

    def lookup(name):
        if name not in original:
            if original_graph_def is not None:
                return None
            try:
                original[name] = tf_graph.get_operation_by_name(name).node_def
            except (KeyError, ValueError):
                original[name] = None
        return original[name]

    wanted = {n.name for n in rewritten.node}
    for text in (t for n in rewritten.node for t in n.input):
        wanted.add(parse_input(text)[0])
    nodes = {name: lookup(name) for name in wanted}
    nodes = {k: v for k, v in nodes.items() if v is not None}

    def has_outputs(name):
        return bool(tf_graph.get_operation_by_name(name).outputs)

    plan = plan_splice(rewritten, nodes, has_outputs=has_outputs)
    imported = set(plan.imported)
    if plan.import_graph_def.node:
        input_map = {}
        for key, target in plan.input_map.items():
            if key.startswith("^"):
                op = tf_graph.get_operation_by_name(target[1:])
                input_map[key] = op.outputs[0]
            else:
                input_map[key] = tf_graph.get_tensor_by_name(target)
        with tf_graph.as_default():
            tf.graph_util.import_graph_def(plan.import_graph_def, input_map=input_map, name=scope)
        for name, groups in plan.colocations.items():
            mapped = []
            for group in groups:
                if group.startswith(b"loc:@"):
                    target = group[5:].decode()
                    target = f"{scope}/{target}" if target in imported else target
                    group = b"loc:@" + target.encode()
                mapped.append(group)
            op = tf_graph.get_operation_by_name(f"{scope}/{name}")
            tf_compat.set_op_attr(op, "_class", attr_value_pb2.AttrValue(
                list=attr_value_pb2.AttrValue.ListValue(s=mapped)))

    def rename(name):
        return f"{scope}/{name}" if name in imported else name

    return rename
