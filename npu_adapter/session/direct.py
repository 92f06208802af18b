"""Signatures whose installed form is the user's own graph, run where that graph already is.

The CPU reference installs a signature with its cluster calls inlined under the user's node names
(:mod:`npu_adapter.graph.inline`): a cluster function copies the user's nodes, so its body,
inlined, is those nodes again. When nothing else of the rewrite changes what the signature
computes, its installed form is a subset of the user's graph plus nodes that only pass tensors
on (the node standing for a call whose body is pure, the ``Identity`` keeping a fetched name).
Importing that into the shadow graph (:mod:`npu_adapter.session.shadow`) copies the user's nodes
and weights once more for TensorFlow to prepare a graph it already has: on a frozen ResNet-50
that is 0.1-0.2 s of a 2 s first run (bench/PERFORMANCE.md).

:func:`resolves_to_user_graph` proves, node by node, that a signature's installed graph runs the
user's own nodes for every fetch, target and feed; the session then runs such a signature on a
TensorFlow session of the user's graph (``NpuSession``'s direct session). Only for signatures
that keep no state (:func:`keeps_no_state`): a run of the direct session and a run of the shadow's
session then share nothing a run could observe, as one session's runs share nothing either.
"""

from npu_adapter.graph.extract import FED_TENSOR_ATTR
from npu_adapter.graph.names import format_input, parse_input
from npu_adapter.graph.payload import PAYLOAD_ATTR, is_light_form_of
from npu_adapter.graph.types import called_functions, may_reference_functions
from npu_adapter.session.reuse import stateful_op_type

__all__ = ["resolves_to_user_graph", "keeps_no_state"]

_FORWARDING = frozenset({"Identity", "IdentityN"})
# Checks of a static shape the rewrite pins on a fed input (a gear's copy of a cluster, a
# lazy_recompile specialisation): they pass their input on when the fed shape was checked.
_SHAPE_CHECKS = frozenset({"EnsureShape"})


def keeps_no_state(graph_def):
    """Whether no op of ``graph_def`` or of its functions keeps state across runs (the test
    :mod:`npu_adapter.session.reuse` applies before a TensorFlow session serves another
    NpuSession)."""
    op_types = set()
    called = set()

    def visit(node):
        op_types.add(node.op)
        if may_reference_functions(node.op):
            called.update(called_functions(node))

    for node in graph_def.node:
        visit(node)
    functions = set()
    for fdef in graph_def.library.function:
        functions.add(fdef.signature.name)
        for node in fdef.node_def:
            visit(node)
    return stateful_op_type(op_types, functions, called) is None


class _Resolver:
    """Which user tensor each tensor of an installed graph is (see the module docstring)."""

    def __init__(self, graph_def, user_nodes, origins, pass_through, shapes_checked=False):
        self.nodes = {n.name: n for n in graph_def.node}
        self.user_nodes = user_nodes
        self.origins = origins
        self.pass_through = pass_through
        self.forwarding = _FORWARDING | _SHAPE_CHECKS if shapes_checked else _FORWARDING
        self.user_name = {}  # installed node name -> the user's node it is, or None

    def _forwarded(self, node):
        """The inputs ``node`` passes on unchanged (results), or None when it is no forwarder:
        a stand of a pure call without control inputs, or an ``Identity``/``IdentityN`` the
        user's graph does not hold under its name, without control inputs (or, when the fed
        shapes were checked, such an ``EnsureShape``: its first input)."""
        if node.name in self.pass_through:
            return [t for t in node.input if not t.startswith("^")]
        if node.op in self.forwarding and not any(t.startswith("^") for t in node.input):
            return list(node.input[:1]) if node.op in _SHAPE_CHECKS else list(node.input)
        return None

    def tensor(self, text):
        """The user's tensor (canonical input text) that installed input ``text`` is, or None.
        Control inputs resolve only onto a node that is the user's own."""
        name, port, is_control = parse_input(text)
        for _ in range(len(self.nodes) + 1):  # forwarders chain; a cycle of them is no answer
            node = self.nodes.get(name)
            if node is None:
                return None
            user = self._resolve(name)
            if user is not None:
                return format_input(user, port, is_control)
            if is_control:
                return None
            if FED_TENSOR_ATTR in node.attr:
                fed = node.attr[FED_TENSOR_ATTR].s.decode()
                return format_input(*parse_input(fed)[:2])
            forwarded = self._forwarded(node)
            if forwarded is None or port >= len(forwarded):
                return None
            name, port, is_control = parse_input(forwarded[port])
            if is_control:
                return None
        return None

    def _resolve(self, name):
        """The user node that installed node ``name`` is (same NodeDef once its inputs are
        resolved, the data aside for a light Const), or None. Iterative (graphs are deep): a
        node is judged once every node it reads is."""
        if name in self.user_name:
            return self.user_name[name]
        stack = [name]
        visiting = set()
        while stack:
            current = stack[-1]
            if current in self.user_name:
                stack.pop()
                continue
            pending = [src for src in (parse_input(t)[0] for t in self.nodes[current].input)
                       if src in self.nodes and src not in self.user_name]
            if pending and current not in visiting:
                visiting.add(current)
                stack.extend(pending)
                continue
            for src in pending:  # a cycle: no user node (the signature takes the shadow)
                self.user_name[src] = None
            stack.pop()
            self.user_name[current] = self._judge(self.nodes[current])
        return self.user_name[name]

    def _candidate(self, node):
        """The user's NodeDef ``node`` may be, by name (a body node by its body name)."""
        return self.user_nodes.get(self.origins.get(node.name, node.name))

    def _judge(self, node):
        user = self._candidate(node)
        if user is None or node.op != user.op or len(node.input) != len(user.input):
            return None
        if node.name == user.name and self._reads_as_user(node, user):
            return user.name if self._same(node, user) else None
        inputs = []
        for text in node.input:
            mapped = self.tensor(text)
            if mapped is None:
                return None
            inputs.append(mapped)
        # Data inputs in order; control inputs as a set (their order means nothing).
        if _data(inputs) != _data(user.input) or \
                sorted(_controls(inputs)) != sorted(_controls(user.input)):
            return None
        copy = type(node)()
        copy.CopyFrom(node)  # a light node: no data to copy
        copy.name = user.name
        del copy.input[:]
        copy.input.extend(user.input)
        return user.name if self._same(copy, user) else None

    def _reads_as_user(self, node, user):
        """Whether ``node``'s inputs are written as the user's node's are and each names a
        node that is the user's own node of that name (judged already): then they resolve to
        the user's inputs as they stand (the common case, without parsing them)."""
        judged = self.user_name
        for text, user_text in zip(node.input, user.input):
            if text != user_text:
                return False
            source = text[1:] if text.startswith("^") else text.partition(":")[0]
            if judged.get(source) != source:
                return False
        return True

    @staticmethod
    def _same(node, user):
        """NodeDef equality but for colocation groups and, for a light Const, the data."""
        if PAYLOAD_ATTR in node.attr:
            return is_light_form_of(node, user, ignore_attrs=("_class",))
        return _same_but_colocation(node, user)


def _data(inputs):
    return [t for t in inputs if not t.startswith("^")]


def _controls(inputs):
    return [t for t in inputs if t.startswith("^")]


def _same_but_colocation(a, b):
    if "_class" not in a.attr and "_class" not in b.attr:
        return a == b
    copies = []
    for node in (a, b):
        copy = type(node)()
        copy.CopyFrom(node)
        if "_class" in copy.attr:
            del copy.attr["_class"]
        copies.append(copy)
    return copies[0] == copies[1]


def resolves_to_user_graph(inlined, user_nodes, *, fetches, targets, feeds,
                           shapes_checked=False):
    """Whether the installed graph ``inlined`` (an :class:`~npu_adapter.graph.inline.Inlined`)
    computes each fetch with the user's own nodes, runs each target as the user's own op and
    reads each feed where the user's graph has it.

    Args:
        user_nodes: name → NodeDef of the user's graph.
        fetches: user tensor name → its tensor in the installed graph.
        targets: user op name → its op in the installed graph.
        feeds: user fed tensor name → the tensor standing for it in the installed graph.
        shapes_checked: the fed shapes were checked against the static shapes the graph pins
            (a gear or lazy_recompile variant, chosen for them): the rewrite's shape checks
            then pass their input on.
    """
    resolver = _Resolver(inlined.graph_def, user_nodes, inlined.origins, inlined.pass_through,
                         shapes_checked)
    for user, installed in list(fetches.items()) + list(feeds.items()):
        name, port, _ = parse_input(user)
        if resolver.tensor(installed) != format_input(name, port):
            return False
    for user, installed in targets.items():
        if installed not in resolver.nodes or resolver._resolve(installed) != user:
            return False
    return True
