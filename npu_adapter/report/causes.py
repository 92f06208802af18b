"""What causes each host placement: the op (and function) behind a node's reason code.

A reason code says which rule kept a node on the host (``function_not_supported``,
``const_without_device_consumer``, ...); a person also needs to know *which op* tripped it. For
every host node, :func:`host_causes` names it:

* ``function_not_supported``: the first unsupported op inside the functions the node calls or
  references (If/While branches, function calls), searched callees first as the support rule
  decides them, with the function that holds it (``OptionalFromValue`` in
  ``model_bn_cond_true_123``), through nested calls (``f → g``);
* rules about the op itself (``unsupported_op``, ``gray_op_in_mix_mode``, ``state_owner``,
  ``graph_input``, ...): the node's own op type;
* rules about a neighbour (``ref_edge``, ``resource_edge``, ``variant_edge``, ``string_edge...``,
  ``const_without_device_consumer``, ``const_not_supported_here``, v1 control-flow regions):
  the host neighbours the rule followed, with their op types.

Each cause is ``{"op", "function", "node", "text"}``: ``function`` is the function holding the
op (``outer_true_1 → inner_true_2`` through nested calls), ``node`` the neighbour the rule
followed (either may be None); the text is one sentence fragment for the report, e.g.
``"OptionalFromValue in model_bn_cond_true_123"``.
"""

from npu_adapter.graph.names import parse_input
from npu_adapter.graph.types import called_functions, op_def_for
from npu_adapter.op_support import is_op_supported
from npu_adapter.vocabulary import DEVICE_HOST

__all__ = ["CONSUMER_REASONS", "FunctionSupport", "host_causes"]

# Reasons decided by a neighbour: the cause is the host node on the other side.
_NEIGHBOUR_REASONS = frozenset({
    "ref_edge", "resource_edge", "variant_edge", "string_edge_with_loop_sinking",
    "dead_tensor_edge", "host_while_frame", "in_out_pair_excluded"})
# Consts placed by their consumers: the cause is a consumer.
CONSUMER_REASONS = frozenset({"const_without_device_consumer", "const_not_supported_here"})
_MAX_NAMED = 3


class FunctionSupport:
    """Finds the op that makes a library function unsupported, as the support rule decides:
    every op of the body on the op list (Consts allowed), callees supported, and the backend's
    own exclusions."""

    def __init__(self, functions, op_list, backend, mix_compile_mode):
        self.functions = functions
        self.op_list = op_list
        self.backend = backend
        self.mix = bool(mix_compile_mode)
        self._found = {}

    def _callees(self, node):
        names = [node.op] if node.op in self.functions else []
        return names + sorted(called_functions(node))

    def blocker(self, name, _stack=None):
        """``(op, function path)`` of the first unsupported op inside function ``name``, or
        None when it is wholly supported (or unknown)."""
        if name in self._found:
            return self._found[name]
        function = self.functions.get(name)
        if function is None:
            return None
        stack = set() if _stack is None else _stack
        if name in stack:
            return None   # recursion: decided by the outer frame
        stack.add(name)
        found = None
        for node in function.node_def:
            callees = self._callees(node)
            if node.op not in self.functions:
                ok, _ = is_op_supported(node.op, self.op_list, mix_compile_mode=self.mix,
                                        support_const=True)
                if ok:
                    ok, _ = self.backend.supports_node(node, op_def_for(node.op))
                if not ok:
                    found = (node.op, [name])
                    break
            for callee in callees:
                inner = self.blocker(callee, stack)
                if inner is not None:
                    found = (inner[0], [name] + inner[1])
                    break
            if found is not None:
                break
        stack.discard(name)
        self._found[name] = found
        return found

    def node_blocker(self, node):
        """``(op, function path)`` of the first unsupported op in what ``node`` calls."""
        for name in self._callees(node):
            found = self.blocker(name)
            if found is not None:
                return found
        return None


def _neighbours(graph_def, names):
    """``(producers, consumers)``: node name → names of its data/control neighbours."""
    producers = {n.name: [] for n in graph_def.node}
    consumers = {n.name: [] for n in graph_def.node}
    for node in graph_def.node:
        for text in node.input:
            src, _, _ = parse_input(text)
            if src in producers and src != node.name:
                producers[node.name].append(src)
                consumers[src].append(node.name)
    return producers, consumers


def _named(names, nodes):
    """``"If a/cond, If b/cond and 3 more"`` for neighbour names."""
    unique = list(dict.fromkeys(names))
    text = ", ".join(f'{nodes[n]["op"]} {n}' for n in unique[:_MAX_NAMED])
    if len(unique) > _MAX_NAMED:
        text += f" and {len(unique) - _MAX_NAMED} more"
    return text


def host_causes(graph_def, nodes, support):
    """Node name → cause (see the module docstring) for every host node of ``nodes``.

    Args:
        graph_def: the graph the rewrite received (its library holds the functions).
        nodes: the placement report's ``nodes`` (name → ``{"op", "device", "reason", ...}``).
        support: a :class:`FunctionSupport` for the library, or None (then a function's
            blocker is not searched and its cause names the functions only).
    """
    by_name = {n.name: n for n in graph_def.node}
    producers = consumers = None
    causes = {}
    for name, info in nodes.items():
        if info["device"] != DEVICE_HOST:
            continue
        reason, op = info["reason"], info["op"]
        node = by_name.get(name)
        cause = {"op": op, "function": None, "node": None, "text": op}
        if reason == "function_not_supported" and node is not None:
            found = support.node_blocker(node) if support is not None else None
            if found is not None:
                blocker, path = found
                cause.update(op=blocker, function=" → ".join(path),
                             text=f"{blocker} in {' → '.join(path)}")
            else:
                called = sorted(called_functions(node)) or [op]
                cause.update(function=called[0], text=f"a function it calls: "
                                                      f"{', '.join(called)}")
        elif reason in _NEIGHBOUR_REASONS or reason in CONSUMER_REASONS:
            if producers is None:
                producers, consumers = _neighbours(graph_def, nodes)
            if reason in CONSUMER_REASONS:
                candidates = consumers.get(name, [])
            else:
                candidates = producers.get(name, []) + consumers.get(name, [])
            host = [n for n in candidates if nodes.get(n, {}).get("device") == DEVICE_HOST]
            if host:
                cause.update(op=nodes[host[0]]["op"], node=host[0],
                             text=("feeds only host ops: " if reason in CONSUMER_REASONS
                                   else "next to host ") + _named(host, nodes))
            elif reason in CONSUMER_REASONS:
                cause["text"] = "feeds no op" if not candidates else \
                    "feeds " + _named(candidates, nodes)
        causes[name] = cause
    return causes
