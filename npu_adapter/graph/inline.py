"""Inlining function calls into the graph that calls them, as TensorFlow does at a first run.

A TF1 session inlines every ``StatefulPartitionedCall``/``PartitionedCall`` not marked
``_noinline`` before it places the graph (TensorFlow's lowering of function calls): the executed
graph holds the function's body under the call's name, ``<call>/<body node>``. Sessions of
backends whose clusters are plain TensorFlow functions (the CPU reference) install their rewrite
with the calls inlined here, so that TensorFlow runs the same kernels on the same nodes as for
the user's graph, and with ``body_names``: a cluster function copies the user's nodes under their
names, so inlined under those names again they are the user's nodes.

What an inlined call keeps of the call's meaning:

* a body node reads the call's input tensors where it read the function's arguments;
* the call's control inputs hold back every body node that reads nothing else of the body
  (through one ``NoOp``), so no body node starts before them, as no body node of a call does;
* the call's name stays, as an ``IdentityN`` of the function's results (a ``NoOp`` when there
  are none) that also waits for every body node nothing else of the body reads and for the
  function's control outputs: a consumer of ``<call>:k`` or of ``^<call>`` waits for the whole
  body, as it waits for a call, and fetches and targets naming the call are unchanged. It keeps
  the call's ``_``-prefixed attributes (the options the rewrite stamped on the cluster).

A call is left as it is when inlining could change what it does: the function is marked
``_noinline`` or for XLA, an argument or result is a list, the body holds TF1 control flow
(frame names are the graph's, not the function's), or a new name would clash with a node of the
graph.
"""

import collections

from tensorflow.core.framework import graph_pb2, node_def_pb2

from npu_adapter.graph.names import format_input, parse_input, unique_name
from npu_adapter.graph.types import (
    called_functions,
    may_reference_functions,
    op_def_for,
    output_port_names,
)

__all__ = ["CALL_OPS", "Inlined", "inline_calls", "inlinable"]

CALL_OPS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})
# TF1 control flow: frames are named by an attr of the graph, not scoped by the function.
_FRAME_OPS = frozenset({"Enter", "RefEnter", "Exit", "RefExit", "NextIteration",
                        "RefNextIteration", "LoopCond", "Switch", "RefSwitch", "Merge",
                        "RefMerge"})
_COMPILED_ATTRS = ("_XlaMustCompile", "_XlaCompile", "_noinline")


class Inlined(collections.namedtuple(
        "Inlined", ["graph_def", "calls", "origins", "pass_through", "gates"])):
    """What :func:`inline_calls` made.

    Attributes:
        graph_def: the graph with the calls inlined (the input graph when none was).
        calls: names of the inlined calls, in graph order.
        origins: graph node name → name of the body node it is, for every inlined body node.
        pass_through: names of the nodes standing for inlined calls that only pass their
            results on: the call had no control inputs and its body no stateful op, so what
            the stand adds to its results (waiting for the whole body) changes no value.
        gates: names of the nodes inlining added that only order the body as the call did:
            every inlined call's stand and the ``NoOp`` holding back its body for the call's
            control inputs (the stand also passes the call's results on).
    """

    __slots__ = ()


def _flag(attrs, key):
    value = attrs.get(key)
    return value is not None and value.b


def inlinable(call, fdef, body_names=False):
    """Whether the call node ``call`` of FunctionDef ``fdef`` may be inlined (see the module
    docstring for what is left alone). TF1 control flow is inlined only under ``body_names``:
    a cluster holds a whole loop or cond (they are never split), so its frames come back under
    the user's own names, as the user's graph had them."""
    if call.op not in CALL_OPS or any(_flag(call.attr, k) for k in _COMPILED_ATTRS):
        return False
    if any(_flag(fdef.attr, k) for k in _COMPILED_ATTRS):
        return False
    signature = fdef.signature
    args = list(signature.input_arg) + list(signature.output_arg)
    if any(a.number_attr or a.type_list_attr or a.type_attr or a.is_ref for a in args):
        return False
    if sum(1 for t in call.input if not t.startswith("^")) != len(signature.input_arg):
        return False
    return body_names or not any(node.op in _FRAME_OPS for node in fdef.node_def)


class _Body:
    """One call's function body, renamed into the calling graph."""

    def __init__(self, call, fdef, functions, taken, body_names=False):
        self.call = call
        self.fdef = fdef
        self.prefix = call.name + "/"
        self.args = {}
        data_inputs = [t for t in call.input if not t.startswith("^")]
        for arg, tensor in zip(fdef.signature.input_arg, data_inputs):
            self.args[arg.name] = tensor
        self.controls = [t for t in call.input if t.startswith("^")]
        self.nodes = {n.name: n for n in fdef.node_def}
        self.functions = functions
        self._ports = {}
        if body_names:
            # A body node keeps its own name where the graph leaves it free (the cluster's
            # members were taken out of the graph, so their names are free unless the rewrite
            # reused one, e.g. for the alias of a fetched member); the others take the call's
            # prefix, made unique.
            self.rename = {}
            used = set(taken)
            for name in self.nodes:
                if name not in used:
                    used.add(name)
                    self.rename[name] = name
            for name in self.nodes:
                if name not in self.rename:
                    self.rename[name] = unique_name(self.prefix + name, used)
            self.clash = False
        else:
            self.rename = {name: self.prefix + name for name in self.nodes}
            self.clash = not taken.isdisjoint(self.rename.values())
        names = set(self.rename.values())
        self.pure = not self.controls and all(_pure(node.op) for node in fdef.node_def)
        self.gate = None
        if self.controls and not self.clash:
            self.gate = unique_name(self.prefix + "input_control_node", names | taken)
        self.names = names

    def ref(self, text):
        """The graph form of body input ``text`` (an argument, ``node:out_arg:idx``, ``^node``),
        or None when it names nothing the body has."""
        if text.startswith("^"):
            name = text[1:]
            return "^" + self.rename[name] if name in self.nodes else None
        if text in self.args:
            return self.args[text]
        name, _, suffix = text.partition(":")
        node = self.nodes.get(name)
        if node is None:
            return None
        ports = self._ports.get(name)
        if ports is None:
            names = output_port_names(node, self.functions) or []
            ports = self._ports[name] = {s: k for k, s in enumerate(names)}
        if not suffix:
            port = 0
        else:
            if suffix.count(":") == 0:
                suffix += ":0"  # "node:out_arg" is the arg's first tensor
            port = ports.get(suffix)
            if port is None:
                return None
        return format_input(self.rename[name], port)

    def write(self, out):
        """Add the body and the node standing for the call to ``out``; False (``out``
        unchanged) when some reference cannot be mapped."""
        rename = self.rename
        added = []
        read_inside = set()
        for body in self.fdef.node_def:
            node = node_def_pb2.NodeDef()
            node.CopyFrom(body)
            node.name = rename[body.name]
            if not node.device:
                node.device = self.call.device
            inputs = []
            internal = False
            for text in body.input:
                mapped = self.ref(text)
                if mapped is None:
                    return False
                source = _node_of(text)
                if source in self.nodes:
                    # Any input from the body, a control input included, waits for the gate
                    # already (a Const in a loop frame waits for the frame's Merge: the gate,
                    # outside every frame, may not be its input).
                    internal = True
                    read_inside.add(source)
                inputs.append(mapped)
            if self.gate is not None and not internal:
                inputs.append("^" + self.gate)
            del node.input[:]
            node.input.extend(inputs)
            if "_class" in node.attr:
                groups = node.attr["_class"].list.s
                groups[:] = [b"loc:@" + rename[g[5:].decode()].encode()
                             if g.startswith(b"loc:@") and g[5:].decode() in self.nodes else g
                             for g in groups]
            added.append(node)
        results = []
        for arg in self.fdef.signature.output_arg:
            mapped = self.ref(self.fdef.ret[arg.name])
            if mapped is None:
                return False
            results.append(mapped)
            read_inside.add(_node_of(self.fdef.ret[arg.name]))
        waits = [name for name in self.nodes if name not in read_inside]
        waits += [n for n in self.fdef.control_ret.values() if n not in waits]
        if self.gate is not None:
            gate = out.node.add(name=self.gate, op="NoOp", device=self.call.device)
            gate.input.extend(self.controls)
        out.node.extend(added)
        stand = out.node.add(name=self.call.name, device=self.call.device)
        for key, value in self.call.attr.items():
            if key.startswith("_"):  # the options the rewrite stamped on the cluster
                stand.attr[key].CopyFrom(value)
        if results:
            stand.op = "IdentityN"
            stand.attr["T"].list.type.extend(a.type for a in self.fdef.signature.output_arg)
        else:
            stand.op = "NoOp"
        stand.input.extend(results)
        stand.input.extend("^" + rename[name] for name in waits if name in self.nodes)
        if self.gate is not None:  # a result may be an argument passed through
            stand.input.append("^" + self.gate)
        return True


def _pure(op_type):
    """Whether ``op_type`` is known to TensorFlow, not stateful and calls no function."""
    op_def = op_def_for(op_type)
    return op_def is not None and not op_def.is_stateful and not may_reference_functions(op_type)


def _node_of(text):
    """The body node (or argument) a FunctionDef input names: ``a`` of ``^a``, ``a``,
    ``a:out:0``."""
    return text.lstrip("^").partition(":")[0]


def _referenced_functions(graph_def, library):
    """Names of the functions of ``library`` (name → FunctionDef) that ``graph_def``'s nodes,
    the functions they reach and ``graph_def``'s gradient entries refer to."""
    found = set()
    pending = []

    def visit_node(node):
        if node.op in library:
            pending.append(node.op)
        if may_reference_functions(node.op):  # the attrs of other ops name no function
            pending.extend(called_functions(node))

    for node in graph_def.node:
        visit_node(node)
    for grad in graph_def.library.gradient:
        pending.extend((grad.function_name, grad.gradient_func))
    while pending:
        name = pending.pop()
        if name in found or name not in library:
            continue
        found.add(name)
        for node in library[name].node_def:
            visit_node(node)
    return found


def inline_calls(graph_def, select=None, *, body_names=False, direct_results=False):
    """An :class:`Inlined`: a copy of ``graph_def`` with each call node that ``select(call,
    fdef)`` accepts (all, by default) and :func:`inlinable` allows replaced by its function's
    body (see the module docstring); functions no node refers to any more are left out of the
    library. ``graph_def`` itself is returned when no call is inlined.

    Body nodes are named ``<call>/<body node>``, as TensorFlow names them; with ``body_names``
    they keep their own names where the graph leaves them free (a cluster function's nodes are
    named after the user's nodes they copy, so the inlined cluster is those nodes again).

    With ``direct_results`` (and ``body_names``) the graph reads each result where the body
    computes it, as the graph before the rewrite did, instead of through the node standing for
    the call (:func:`read_results_directly`)."""
    library = {f.signature.name: f for f in graph_def.library.function}
    unchanged = Inlined(graph_def, [], {}, frozenset(), frozenset())
    if not library:
        return unchanged
    taken = None
    bodies = {}
    for node in graph_def.node:
        if node.op not in CALL_OPS:
            continue
        fdef = library.get(node.attr["f"].func.name)
        if fdef is None or not inlinable(node, fdef, body_names) or \
                (select and not select(node, fdef)):
            continue
        if taken is None:
            taken = {n.name for n in graph_def.node}
        body = _Body(node, fdef, library, taken, body_names)
        if not body.clash:
            bodies[node.name] = body
            taken.update(body.names)
            if body.gate is not None:
                taken.add(body.gate)
    if not bodies:
        return unchanged
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    inlined = []
    origins = {}
    pass_through = set()
    gates = set()
    for node in graph_def.node:
        body = bodies.get(node.name)
        if body is not None:
            mark = len(out.node)
            if body.write(out):
                inlined.append(node.name)
                origins.update((name, body_name) for body_name, name in body.rename.items())
                gates.add(node.name)
                if body.gate is not None:
                    gates.add(body.gate)
                if body.pure:
                    pass_through.add(node.name)
                continue
            del out.node[mark:]
        out.node.add().CopyFrom(node)
    if not inlined:
        return unchanged
    if direct_results and body_names:
        origins = read_results_directly(out, {name: bodies[name] for name in inlined}, origins)
    out.library.gradient.extend(graph_def.library.gradient)
    used = _referenced_functions(out, library)
    for fdef in graph_def.library.function:
        if fdef.signature.name in used:
            out.library.function.add().CopyFrom(fdef)
    return Inlined(out, inlined, origins, frozenset(pass_through), frozenset(gates))


_FORWARDERS = frozenset({"Identity", "IdentityN"})


def _rename_everywhere(graph_def, old, new):
    """Rename node ``old`` to ``new`` in ``graph_def`` (its references included)."""
    prefix = old + ":"
    for node in graph_def.node:
        if node.name == old:
            node.name = new
        for k, text in enumerate(node.input):
            if text == old or text == "^" + old:
                node.input[k] = text.replace(old, new)
            elif text.startswith(prefix):
                node.input[k] = new + text[len(old):]


def read_results_directly(graph_def, bodies, origins):
    """Make the inlined ``graph_def`` (edited in place) read each call's results where its body
    computes them, and give the body nodes the names of the aliases that stood for them.
    Returns the updated ``origins`` (graph node name → body node name).

    * A data input ``<call>:k`` becomes the body tensor of result ``k``: the graph waits for
      what it reads, as the graph before the rewrite did, not for the whole body. The node
      standing for the call stays, as a ``NoOp`` waiting for the body, only when something
      waits for ``^<call>``.
    * An alias the rewrite added to keep a user's name (an ``Identity``/``IdentityN`` of one body
      node's outputs, or a ``NoOp`` waiting for a call whose body holds the user's node, see
      :mod:`npu_adapter.graph.aliases`) is dropped, and the body node takes that name back.

    So a cluster that only partitions the user's graph is inlined into the user's nodes
    themselves: TensorFlow then optimises and runs exactly the graph a plain session runs.
    """
    results = {name: [body.ref(body.fdef.ret[arg.name])
                      for arg in body.fdef.signature.output_arg]
               for name, body in bodies.items()}
    for node in graph_def.node:
        if node.name in bodies:
            continue
        for k, text in enumerate(node.input):
            source, port, is_control = parse_input(text)
            if source in bodies and not is_control:
                node.input[k] = results[source][port]
    # Aliases of body nodes: the body node takes its name back.
    renames = {}  # body node's graph name -> the alias's name
    for node in graph_def.node:
        if node.name in bodies or node.name in origins:
            continue
        target = None
        if node.op in _FORWARDERS and node.input and \
                not any(t.startswith("^") for t in node.input):
            parsed = [parse_input(t) for t in node.input]
            sources = {source for source, _, _ in parsed}
            if len(sources) == 1 and origins.get(parsed[0][0]) == node.name and \
                    [port for _, port, _ in parsed] == list(range(len(parsed))):
                target = parsed[0][0]
        elif node.op == "NoOp" and len(node.input) == 1 and node.input[0][1:] in bodies \
                and node.input[0].startswith("^"):
            renamed = bodies[node.input[0][1:]].rename.get(node.name)
            if renamed is not None and renamed != node.name:
                target = renamed
        if target is not None and target not in renames:
            renames[target] = node.name
    aliases = set(renames.values())
    for old, new in renames.items():
        origins[new] = origins.pop(old)
    waited = set()
    kept = []
    for node in graph_def.node:
        if node.name in aliases and node.name not in renames:
            continue  # an alias whose body node takes its name
        node.name = renames.get(node.name, node.name)
        for k, text in enumerate(node.input):
            source, port, is_control = parse_input(text)
            if source in renames:
                node.input[k] = format_input(renames[source], port, is_control)
            elif is_control and source in bodies:
                waited.add(source)
        kept.append(node)
    final = []
    for node in kept:
        if node.name in bodies:
            if node.name not in waited:
                continue  # nothing reads or waits for the call any more
            node.op = "NoOp"  # waits for the whole body
            waits = ["^" + renames.get(parse_input(t)[0], parse_input(t)[0])
                     for t in node.input]
            del node.input[:]
            node.input.extend(dict.fromkeys(waits))
            if "T" in node.attr:
                del node.attr["T"]
        final.append(node)
    copies = [type(node)() for node in final]
    for copy, node in zip(copies, final):
        copy.CopyFrom(node)
    del graph_def.node[:]
    graph_def.node.extend(copies)
    return origins
