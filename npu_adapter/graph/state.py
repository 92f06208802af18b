"""State owners: the ops that own state living across session runs, and their names.

A TensorFlow session finds a variable's, queue's, iterator's or table's state by the op's
``shared_name``; left empty, a ``VariableV2`` uses its node name and most other state owners a
state private to their kernel. A rewrite copies state owners (into a cluster function, under a
scope when the session installs a changed node), and every copy must find the one state of the
user's node. :func:`name_private_state` gives every state owner with an empty ``shared_name`` its
node's name, which keeps one state per session, as the user's graph has.
"""

from npu_adapter.graph.types import op_def_for

__all__ = ["is_state_owner", "name_private_state", "name_state_of_copies"]

_RESOURCE = 20  # types_pb2.DT_RESOURCE
# Left as they are: a VarHandleOp with an empty shared_name names the resource "" (not its
# node); a OneShotIterator refuses a shared_name (its state cannot be shared by name at all).
_KEEP_SHARED_NAME = frozenset({"VarHandleOp", "OneShotIterator"})


def is_state_owner(op_def):
    """An op that owns state living across session runs: variables, queues, iterators, tables,
    mutexes, accumulators.

    They are exactly the stateful ops that hand out a ref or a resource *and* take a
    ``shared_name`` attr (the resource is looked up in the session's resource manager).
    Per-step resources such as ``TensorArrayV3`` or ``StackV2`` have no ``shared_name`` and may
    live inside a cluster function.
    """
    if op_def is None or not op_def.is_stateful:
        return False
    if not any(attr.name == "shared_name" for attr in op_def.attr):
        return False
    return any(arg.is_ref or arg.type == _RESOURCE for arg in op_def.output_arg)


def _unnamed_state_owner(node):
    if node.op in _KEEP_SHARED_NAME or "shared_name" not in node.attr or \
            node.attr["shared_name"].s:
        return False
    return is_state_owner(op_def_for(node.op))


def name_private_state(nodes):
    """Give every state owner among ``nodes`` (NodeDefs, edited in place) whose ``shared_name``
    is empty the name of its node as ``shared_name``."""
    for node in nodes:
        if _unnamed_state_owner(node):
            node.attr["shared_name"].s = node.name.encode()


def name_state_of_copies(graph_def):
    """Name the state of the state owners a rewrite copied into ``graph_def``'s functions (edited
    in place): each copy, and the graph's node it copies (same name), get that name as
    ``shared_name`` when theirs is empty, so the copy finds the node's state wherever the
    function runs (TensorFlow renames the nodes of a function it inlines)."""
    copied = set()
    for fdef in graph_def.library.function:
        for node in fdef.node_def:
            if _unnamed_state_owner(node):
                node.attr["shared_name"].s = node.name.encode()
                copied.add(node.name)
    if copied:
        name_private_state(node for node in graph_def.node if node.name in copied)
    return graph_def
