"""Signatures whose installed form is the user's own graph, run where that graph already is.

The CPU reference installs a signature with its cluster calls inlined under the user's node names
(:mod:`npu_adapter.graph.inline`): a cluster function copies the user's nodes, so its body,
inlined, is those nodes again. When nothing else of the rewrite changes what the signature
computes, its installed form is a subset of the user's graph plus nodes that only pass tensors
on or keep the calls' order (the node standing for a call, the ``NoOp`` holding a body back for
the call's control inputs, the ``Identity`` keeping a fetched name). Importing that into the
shadow graph (:mod:`npu_adapter.session.shadow`) copies the user's nodes and weights once more
for TensorFlow to prepare a graph it already has: on a frozen ResNet-50 that is 0.1-0.2 s of a
2 s first run; on a LeNet training script (initialiser and one step) the installs, the cluster
functions' copies and their instantiation took ~30 ms of a ~160 ms first run whose plain
TensorFlow counterpart takes ~100 ms (bench/PERFORMANCE.md).

:func:`resolves_to_user_graph` proves, node by node, that a signature's installed graph runs the
user's own nodes for every fetch, target and feed; the session then runs such a signature on a
TensorFlow session of the user's graph (``NpuSession``'s direct session), as plain TensorFlow
would run it.

A signature that keeps no state (:func:`keeps_no_state`) may run there whatever the session's
other signatures do: a run of the direct session and a run of the shadow's session then share
nothing a run could observe. A signature with state (a training step, an initialiser) runs
there only while the session's state lives there, and only when every op of the user's graph
that keeps state keeps it where it can be moved (:func:`movable_variables`: variables, which
the session copies, random ops, checkpoint files): the first signature with state that runs
decides where the session's state lives, and when a later one must run on the shadow (its
rewrite changes what it computes, e.g. under ``precision_mode``), the variables' values are
moved there first and every later signature with state runs there.
"""

from npu_adapter.graph.extract import FED_TENSOR_ATTR
from npu_adapter.graph.names import format_input, parse_input
from npu_adapter.graph.payload import PAYLOAD_ATTR, is_light_form_of
from npu_adapter.graph.types import called_functions, may_reference_functions
from npu_adapter.session.reuse import stateful_op_type

__all__ = ["resolves_to_user_graph", "keeps_no_state", "movable_variables", "Variable"]

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


# Stateful ops whose state one TensorFlow session can hand to another: the variables (their
# values are copied) and the ops that read or update them, the random ops (kept per kernel:
# a moved session's generators start again from their seeds), the checkpoint ops (their
# state is files) and the TensorArray and stack ops (their state lives for one run: TF1's
# dynamic_rnn and while loops).
_MOVABLE_STATE = frozenset({
    "VariableV2", "Variable", "VarHandleOp", "ReadVariableOp", "IsVariableInitialized",
    "VarIsInitializedOp", "ResourceGather", "ResourceGatherNd", "CountUpTo", "ResourceCountUpTo",
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "RandomShuffle", "RandomGamma", "RandomPoisson", "RandomPoissonV2", "Multinomial",
    "ParameterizedTruncatedNormal",
    "SaveV2", "Save", "SaveSlices", "RestoreV2", "Restore", "RestoreSlice", "MergeV2Checkpoints",
})
_MOVABLE_STATE_PREFIXES = ("Assign", "Apply", "ResourceApply", "SparseApply",
                           "ResourceSparseApply", "Scatter", "ResourceScatter", "TensorArray",
                           "Stack")
_REF_VARIABLES = frozenset({"VariableV2", "Variable"})


class Variable:
    """A variable of the user's graph as :func:`movable_variables` finds it.

    Attributes:
        name: the variable's node (``VariableV2``/``Variable``/``VarHandleOp``).
        resource: a resource variable (assigned with ``AssignVariableOp``).
        value: the user's tensor that reads its value (the ref itself, or a reader).
        dtype: its ``DataType`` enum.
    """

    __slots__ = ("name", "resource", "value", "dtype")

    def __init__(self, name, resource, value, dtype):
        self.name, self.resource, self.value, self.dtype = name, resource, value, dtype


def movable_variables(graph_def):
    """The variables of the user's graph ``graph_def`` (a list of :class:`Variable`, sorted by
    name) when all the state its ops keep can move from one TensorFlow session to another (see
    the module docstring), or None: a stateful op of another kind (queue, iterator, table,
    summary writer, ...) or in a function, a function call, or a resource variable the graph
    never reads plainly (an unconditional ``ReadVariableOp`` of it is how its value is
    copied)."""
    if graph_def.library.function:
        return None
    op_types = {node.op for node in graph_def.node}
    if stateful_op_type(t for t in op_types if t not in _MOVABLE_STATE
                        and not t.startswith(_MOVABLE_STATE_PREFIXES)) is not None:
        return None
    readers = {}
    for node in graph_def.node:
        if node.op == "ReadVariableOp" and len(node.input) == 1:
            readers.setdefault(parse_input(node.input[0])[0], node.name)
    found = []
    for node in graph_def.node:
        if node.op in _REF_VARIABLES:
            found.append(Variable(node.name, False, node.name + ":0", node.attr["dtype"].type))
        elif node.op == "VarHandleOp":
            reader = readers.get(node.name)
            if reader is None:
                return None
            found.append(Variable(node.name, True, reader + ":0", node.attr["dtype"].type))
    return sorted(found, key=lambda v: v.name)


class _Resolver:
    """Which user tensor each tensor of an installed graph is (see the module docstring).

    The nodes inlining added to keep a call's order (its stand, the ``NoOp`` holding its body
    back for the call's control inputs: ``Inlined.gates``) are transparent: a stand passes the
    call's results on, and waiting for a gate is waiting for the user's nodes it waits for. A
    node is the user's when its op, attributes and data inputs are, and it waits (through
    gates) for at least the user's node's control inputs: the user's graph orders the same
    nodes no less, and what the call's order adds to it is the call's, not the user's (which
    is what a run of the user's own nodes does, as plain TensorFlow runs them).
    """

    def __init__(self, inlined, user_nodes, shapes_checked=False):
        self.nodes = {n.name: n for n in inlined.graph_def.node}
        self.user_nodes = user_nodes
        self.origins = inlined.origins
        self.stands = inlined.pass_through | inlined.gates
        self.forwarding = _FORWARDING | _SHAPE_CHECKS if shapes_checked else _FORWARDING
        self.user_name = {}  # installed node name -> the user's node it is, or None
        self._frontiers = {}  # installed node name -> user nodes waiting for it waits for
        self._busy = set()    # names being judged or walked (a cycle is no answer)

    def _forwarded(self, node):
        """The inputs ``node`` passes on unchanged (results), or None when it is no forwarder:
        a stand of an inlined call (a ``NoOp`` stand passes nothing), or an
        ``Identity``/``IdentityN`` the user's graph does not hold under its name (or, when the
        fed shapes were checked, such an ``EnsureShape``: its first input); only when what it
        waits for is the user's nodes."""
        if node.name in self.stands or node.op in self.forwarding:
            if self._controls_frontier(node) is None:
                return None
            data = _data(node.input)
            return data[:1] if node.op in _SHAPE_CHECKS else data
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

    def _frontier(self, name):
        """The user's nodes that waiting for installed node ``name`` waits for: itself when it
        is a user's node, through a gate or forwarder what it waits for; None when that
        reaches a node that is neither (the wait would run something not the user's)."""
        if name in self._frontiers:
            return self._frontiers[name]
        node = self.nodes.get(name)
        if node is None or name in self._busy:
            return None
        user = self._resolve(name)
        if user is not None:
            found = frozenset((user,))
        elif name in self.stands or node.op in self.forwarding or node.op == "NoOp" and \
                name not in self.user_nodes:
            self._busy.add(name)
            try:
                found = set()
                for text in node.input:
                    sources = self._frontier(parse_input(text)[0])
                    if sources is None:
                        found = None
                        break
                    found |= sources
            finally:
                self._busy.discard(name)
            found = frozenset(found) if found is not None else None
        else:
            found = None
        self._frontiers[name] = found
        return found

    def _controls_frontier(self, node):
        """What ``node``'s control inputs wait for (user node names), or None."""
        found = set()
        for text in node.input:
            if text.startswith("^"):
                sources = self._frontier(text[1:])
                if sources is None:
                    return None
                found |= sources
        return found

    def _resolve(self, name):
        """The user node that installed node ``name`` is (same NodeDef once its inputs are
        resolved, the data aside for a light Const), or None. Iterative (graphs are deep): a
        node is judged once every node it reads is."""
        if name in self.user_name:
            return self.user_name[name]
        if name in self._busy:
            return None
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
            self._busy.add(current)
            try:
                self.user_name[current] = self._judge(self.nodes[current])
            finally:
                self._busy.discard(current)
        return self.user_name[name]

    def _candidate(self, node):
        """The user's NodeDef ``node`` may be, by name (a body node by its body name)."""
        return self.user_nodes.get(self.origins.get(node.name, node.name))

    def _judge(self, node):
        user = self._candidate(node)
        if user is None or node.op != user.op or node.name in self.stands:
            return None
        if node.name == user.name and len(node.input) == len(user.input) and \
                self._reads_as_user(node, user):
            return user.name if self._same(node, user) else None
        data = _data(node.input)
        if len(data) != len(_data(user.input)):
            return None
        inputs = []
        for text in data:
            mapped = self.tensor(text)
            if mapped is None:
                return None
            inputs.append(mapped)
        if inputs != _data(user.input):
            return None
        waits = self._controls_frontier(node)
        if waits is None or not {t[1:] for t in _controls(user.input)} <= waits:
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
    resolver = _Resolver(inlined, user_nodes, shapes_checked)
    for user, installed in list(fetches.items()) + list(feeds.items()):
        name, port, _ = parse_input(user)
        if resolver.tensor(installed) != format_input(name, port):
            return False
    for user, installed in targets.items():
        # The user's op itself, or a gate (the stand of the call it went into) that waits for
        # it: running that runs the user's op and nodes the signature runs anyway.
        waits = resolver._frontier(installed)
        if waits is None or user not in waits:
            return False
    return True
