"""Structural checks of a GraphDef that report every problem at once.

Used by the ``verify`` instrument after each pass and by ``rewrite`` on its input, so a bad graph is
rejected with the full list of what is wrong (node names included) before anything is rewritten.
"""

import collections

from npu_adapter.errors import GraphInvariantError
from npu_adapter.graph.names import invalid_node_names, node_name_of
from npu_adapter.graph.types import may_reference_functions
from npu_adapter.graph.view import GraphView

__all__ = ["Violation", "verify_graph", "check_graph"]


class Violation(collections.namedtuple("Violation", ["kind", "node", "message"])):
    """One invariant violation: ``kind`` is a stable code, ``node`` the node (or function) name."""

    __slots__ = ()

    def __str__(self):
        return f"[{self.kind}] {self.message}"


def _referenced_functions(node_defs):
    """Names of functions referenced from func-valued attrs of ``node_defs`` (with node names)."""
    for node in node_defs:
        if not may_reference_functions(node.op):
            continue  # its OpDef declares no func attr: skip reading its attrs
        for attr_name in sorted(node.attr):
            value = node.attr[attr_name]
            if value.HasField("func"):
                yield node.name, attr_name, value.func.name
            elif value.HasField("list"):
                for f in value.list.func:
                    yield node.name, attr_name, f.name


def verify_graph(graph_def, *, view=None, check_ports=True, check_op_registry=False,
                 allowed_unregistered_ops=("GeOp",)):
    """Return the list of :class:`Violation` found in ``graph_def`` (empty when valid).

    Checks: unique and valid node names; every input names an existing node; data inputs come
    before control inputs; no cycle except through v1 loop back edges (``NextIteration``); every
    function referenced by an attr exists in the library or the op registry; output ports in
    range when the producer's outputs are known. With ``check_op_registry``, op types that are
    neither registered nor library functions are reported too (ops in
    ``allowed_unregistered_ops`` excepted).
    """
    view = view or GraphView(graph_def)
    found = []
    for name in view.duplicate_names:
        found.append(
            Violation("duplicate_name", name, f"node name {name!r} is used more than once"))
    for name in invalid_node_names(view.names):
        found.append(Violation("invalid_name", name, f"invalid node name {name!r}"))
    for i in view.misordered:
        node = view.nodes[i]
        found.append(Violation(
            "control_before_data", node.name,
            f"node {node.name!r} lists a data input after a control input"))
    for i, text in view.dangling:
        node = view.nodes[i]
        found.append(Violation(
            "dangling_input", node.name,
            f"node {node.name!r} ({node.op}) has input {text!r} but no node "
            f"{node_name_of(text)!r} exists"))
    if check_ports:
        for dst, inputs in view.inputs_past_port_zero():
            for slot, (src, port) in enumerate(inputs):
                if src < 0 or port == 0:
                    continue  # output 0 exists on every op that can feed data
                out_types = view.output_types(src)
                if out_types is not None and port >= len(out_types):
                    found.append(Violation(
                        "port_out_of_range", view.nodes[dst].name,
                        f"node {view.nodes[dst].name!r} input {slot} reads output {port} of "
                        f"{view.nodes[src].name!r} ({view.nodes[src].op}), which has "
                        f"{len(out_types)} output(s)"))
    cycle = view.find_cycle(skip_back_edges=True)
    if cycle:
        found.append(Violation(
            "cycle", cycle[0],
            "graph has a cycle not through a NextIteration back edge: " + " -> ".join(cycle)))

    from npu_adapter.graph.types import op_def_for

    library = view.functions
    # Only nodes whose op can carry a func-valued attr are read (by op type, from the index).
    calling = {op for op in view.op_types() if may_reference_functions(op)}
    callers = [view.node_at(i) for i, op in enumerate(view.ops) if op in calling] \
        if calling else []
    for node_name, attr_name, fname in _referenced_functions(callers):
        if fname not in library and op_def_for(fname) is None:
            found.append(Violation(
                "missing_function", node_name,
                f"node {node_name!r} attr {attr_name!r} references function {fname!r}, which is "
                "not in the graph's library"))
    for fname in sorted(library):
        fdef = library[fname]
        for node_name, attr_name, ref in _referenced_functions(fdef.node_def):
            if ref not in library and op_def_for(ref) is None:
                found.append(Violation(
                    "missing_function", f"{fname}/{node_name}",
                    f"function {fname!r} node {node_name!r} attr {attr_name!r} references "
                    f"function {ref!r}, which is not in the library"))
    if check_op_registry:
        for node in view.nodes:
            if (node.op not in library and node.op not in allowed_unregistered_ops
                    and op_def_for(node.op) is None):
                found.append(Violation(
                    "unknown_op", node.name,
                    f"node {node.name!r} has op {node.op!r}, which is neither registered nor a "
                    "library function"))
    return found


def check_graph(graph_def, context=None, **kwargs):
    """Raise :class:`GraphInvariantError` listing every violation, if there is any."""
    violations = verify_graph(graph_def, **kwargs)
    if violations:
        raise GraphInvariantError([str(v) for v in violations], context=context)
