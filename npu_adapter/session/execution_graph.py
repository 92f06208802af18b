"""The execution graph: the private ``tf.Graph`` every NPU session of one user graph runs on.

The user's graph is never modified (``sess.graph`` is still it, and a ``.meta``, checkpoint or
``graph_def`` saved afterwards holds only the user's nodes). The execution graph holds:

* a *mirror* of the user's graph: every user node under its own name, imported when a session
  first needs the graph and again, node by node, as the user's graph grows. Variables, queues,
  iterators and tables keep their names, so checkpoints, ``Saver`` and name-based feeds and
  fetches work, and every signature of a session shares one state;
* per installed rewrite, the part the rewrite changed (cluster calls, aliases, what reads them),
  spliced in under a fresh scope ``npu_rewrite_<N>/`` (:mod:`npu_adapter.graph.splice`) and
  bound to the mirror's tensors.

A state owner whose ``shared_name`` is empty keeps a state private to its kernel; copies of it
(the changed part of a rewrite may hold one) would then each start a state of their own. So the
user's graph is read with such state named after its node
(:func:`npu_adapter.graph.state.name_private_state`): one state per session, as the user's graph
has.

An execution graph lives as long as its user graph (a weak reference) and is shared by every NPU
session on it, with the signatures installed in it (:mod:`npu_adapter.session.signatures`) and
the idle TensorFlow sessions of closed NPU sessions (:mod:`npu_adapter.session.reuse`).
"""

import itertools
import threading
import weakref

import tensorflow as tf

from npu_adapter.graph.extract import FED_TENSOR_ATTR
from npu_adapter.graph.names import parse_input
from npu_adapter.graph.payload import PAYLOAD_ATTR, strip_payloads
from npu_adapter.graph.splice import (
    control_anchor,
    drop_foreign_colocation,
    plan_splice,
    splice_into_graph,
)
from npu_adapter.graph.state import name_private_state
from npu_adapter.graph.types import called_functions, may_reference_functions
from npu_adapter.session.reuse import SessionPool, stateful_op_type

__all__ = ["ExecutionGraph", "Installed", "UserGraph", "note_graph_changed"]

_GRAPHS = weakref.WeakKeyDictionary()   # user tf.Graph -> ExecutionGraph
_GENERATIONS = weakref.WeakKeyDictionary()  # user tf.Graph -> attribute-change generation
_LOCK = threading.Lock()
def note_graph_changed(graph):
    """Tell the execution graph of ``graph`` that an attribute of an existing op was set
    (TensorFlow does not bump the graph version for that), so the next signature reads the graph
    afresh. npu_bridge's attribute setters (``set_graph_exec_config``, ``keep_tensors_dtypes``,
    ...) call it."""
    with _LOCK:
        _GENERATIONS[graph] = _GENERATIONS.get(graph, 0) + 1


def _light(graph_def):
    """The light form of ``graph_def`` (itself when it has no large constant): whether a node
    is light depends on that node alone, so a node has one light form in every graph."""
    return strip_payloads(graph_def)[0]


class Installed:
    """Where an installed graph's elements are in the execution graph (compared by identity).

    Attributes:
        tensors: user tensor name → ``tf.Tensor`` of the execution graph (the fetches).
        ops: user op name → ``tf.Operation`` of the execution graph (the targets).
        feeds: user fed tensor name → ``tf.Tensor`` of the execution graph to feed.
    """

    __slots__ = ("tensors", "ops", "feeds")

    def __init__(self, tensors, ops, feeds):
        self.tensors = tensors
        self.ops = ops
        self.feeds = feeds


class UserGraph:
    """The user's graph as one version of it.

    Attributes:
        graph_def: its *light* GraphDef (large constants without their data, see
            :mod:`npu_adapter.graph.payload`; state named as in :func:`name_private_state`),
            which the rewrite reads.
        stamp: what the read is valid for (graph version, attribute-change generation).
    """

    __slots__ = ("graph_def", "stamp", "_digest")

    def __init__(self, graph_def, stamp):
        self.graph_def = graph_def
        self.stamp = stamp
        self._digest = None

    @staticmethod
    def full_graph_def(user_graph):
        """The GraphDef of ``user_graph`` with its constants' data, state named as in
        :attr:`graph_def` (for backends that write the data out)."""
        full = user_graph.as_graph_def()
        name_private_state(full.node)
        for fdef in full.library.function:
            name_private_state(fdef.node_def)
        return full

    def digest(self):
        """The content digest of :attr:`graph_def` (the rewrite cache's key), taken once."""
        if self._digest is None:
            from npu_adapter.session.rewrite_cache import graph_digest

            self._digest = graph_digest(self.graph_def)
        return self._digest


class ExecutionGraph:
    """The private execution graph of one user graph (see the module docstring). Use
    :meth:`for_graph`."""

    def __init__(self, user_graph):
        self._user = weakref.ref(user_graph)
        self.graph = tf.Graph()
        self.lock = threading.RLock()
        self.signatures = {}        # signature key -> Signature (session/signatures.py)
        self.pool = SessionPool(self)
        self._mirrored = {}         # user node name -> its light NodeDef as mirrored
        self._functions = set()     # names of the functions the graph holds
        self._anchors = {}          # op name -> tensor running after it (graph/splice.py)
        self._snapshot = None       # the last UserGraph read
        self._op_types = set()      # the op types of the graph and its functions
        self._called = set()        # the functions its nodes call
        self._graph_nums = itertools.count(1)
        self._taken_nums = None

    @classmethod
    def existing(cls, user_graph):
        """The execution graph of ``user_graph`` when an NPU session made one, else None."""
        with _LOCK:
            return _GRAPHS.get(user_graph)

    @classmethod
    def for_graph(cls, user_graph):
        """The execution graph of ``user_graph`` (made on first use, shared afterwards)."""
        with _LOCK:
            graph = _GRAPHS.get(user_graph)
            if graph is None:
                graph = _GRAPHS[user_graph] = cls(user_graph)
            return graph

    # ------------------------------------------------------------------ the mirror
    def user_graph(self):
        """The user's graph as it is now (a :class:`UserGraph`), mirrored: every user node is in
        the execution graph under its name. Read once per version of the user's graph."""
        user = self._user()
        if user is None:
            raise RuntimeError("the session's graph no longer exists")
        stamp = (user.version, _GENERATIONS.get(user, 0))
        with self.lock:
            if self._snapshot is None or self._snapshot.stamp != stamp:
                full = UserGraph.full_graph_def(user)
                light = self._mirror(full)
                self._snapshot = UserGraph(light if light is not None else _light(full),
                                           stamp)
            return self._snapshot

    def _mirror(self, full):
        """Import the nodes of ``full`` (the user's GraphDef) the execution graph lacks and
        remember them in their light form. Returns the light form of ``full`` when every node
        was new (the first read), else None."""
        first = not self._mirrored
        if first:
            part, new = full, list(full.node)
        else:
            new = [node for node in full.node if node.name not in self._mirrored]
            if not new:
                return None
            part = self._part(full, new)
        input_map = {}
        if not first:
            names = {node.name for node in new}
            for node in new:
                for text in node.input:
                    src, _, is_control = parse_input(text)
                    if src in names:
                        continue
                    op = self.graph.get_operation_by_name(src)
                    input_map[text] = control_anchor(self.graph, op, self._anchors) \
                        if is_control else self.graph.get_tensor_by_name(
                            f"{src}:{parse_input(text)[1]}")
        with self.graph.as_default():
            imported = tf.graph_util.import_graph_def(
                part, input_map=input_map or None, name="",
                return_elements=[node.name for node in new])
        for node, op in zip(new, imported):
            if op.name != node.name:  # a name the execution graph's own nodes took first
                raise RuntimeError(
                    f"the user's node {node.name!r} cannot enter the session's execution graph "
                    f"under its name (TensorFlow named it {op.name!r}); rename it")
        self._functions.update(f.signature.name for f in part.library.function)
        # Kept in light form, in a message of their own (not parts of ``full``, which holds
        # the weights).
        light = _light(part)
        self._mirrored.update((node.name, node) for node in light.node)
        return light if first else None

    def _part(self, full, new):
        """A GraphDef of the ``new`` nodes of ``full`` importable into the execution graph: the
        functions it lacks, colocation groups with nodes outside ``new`` dropped."""
        part = type(full)()
        part.versions.CopyFrom(full.versions)
        part.library.function.extend(f for f in full.library.function
                                     if f.signature.name not in self._functions)
        part.library.gradient.extend(full.library.gradient)
        names = {node.name for node in new}
        for node in new:
            copy = part.node.add()
            copy.CopyFrom(node)
            drop_foreign_colocation(copy, names)
        return part

    def note_ops(self, graph_def):
        """Record the op types of ``graph_def`` (nodes and functions), a graph sessions run
        here (see :meth:`stateful_op`)."""
        with self.lock:
            for nodes in [graph_def.node] + [f.node_def for f in graph_def.library.function]:
                for node in nodes:
                    self._op_types.add(node.op)
                    if may_reference_functions(node.op):
                        self._called.update(called_functions(node))

    def stateful_op(self):
        """An op type of what sessions run here (every installed graph, functions included)
        that keeps state across runs, or None: a TensorFlow session that ran them then holds
        nothing a fresh one would not (see :mod:`npu_adapter.session.reuse`). User nodes no
        signature runs never ran: they hold nothing."""
        with self.lock:
            return stateful_op_type(self._op_types, self._functions, self._called)

    # ------------------------------------------------------------------ installing
    def graph_num(self):
        """A fresh ``N`` for the ``GeOp<N>_<k>`` names of a rewrite installed here: unique in
        this graph and not taken by a function or node of the user's graph (a model loaded from
        a rewritten graph may hold ``GeOp1_0`` already)."""
        with self.lock:
            if self._taken_nums is None:
                self._taken_nums = set()
            names = list(self._functions) + [n for n in self._mirrored if n.startswith("GeOp")]
            for name in names:
                head = name.split("_", 1)[0]
                if head.startswith("GeOp") and head[4:].isdigit():
                    self._taken_nums.add(int(head[4:]))
            while True:
                n = next(self._graph_nums)
                if n not in self._taken_nums:
                    return n

    def light(self, graph_def):
        """``graph_def`` in the light form of the execution graph's nodes (for a rewrite made
        from the full graph)."""
        return _light(graph_def)

    def install(self, graph_def, *, fetches, targets, feeds):
        """Splice ``graph_def`` (a rewritten client graph of the user's graph as last read by
        :meth:`user_graph`: light, state named) into the execution graph.

        Args:
            fetches: user tensor name → tensor name in ``graph_def``.
            targets: user op name → op name in ``graph_def``.
            feeds: user fed tensor name → tensor name in ``graph_def`` standing for it.

        Returns:
            An :class:`Installed`.
        """
        stand_ins = {node.name: node.attr[FED_TENSOR_ATTR].s.decode()
                     for node in graph_def.node if FED_TENSOR_ATTR in node.attr}
        with self.lock:
            plan = plan_splice(graph_def, self._mirrored)
            if plan.imported:
                self.restore_payloads(plan.graph_def)
                library = plan.graph_def.library
                for fdef in [f for f in library.function if f.signature.name in self._functions]:
                    library.function.remove(fdef)
            self.note_ops(graph_def)
            rename = splice_into_graph(self.graph, plan, "npu_rewrite", self._anchors)
            self._functions.update(f.signature.name for f in plan.graph_def.library.function)
        graph = self.graph

        def tensor(name):
            node, port, _ = parse_input(name)
            if node in stand_ins:  # a fed tensor: the user's own, in the mirror
                return graph.get_tensor_by_name(stand_ins[node])
            return graph.get_tensor_by_name(f"{rename(node)}:{port}")

        return Installed({k: tensor(v) for k, v in fetches.items()},
                         {k: graph.get_operation_by_name(rename(v)) for k, v in targets.items()},
                         {k: tensor(v) for k, v in feeds.items()})

    def add_functions(self, library):
        """Add the functions of ``library`` (a FunctionDefLibrary) the execution graph lacks
        (for graphs built here around them: the loop of :mod:`npu_adapter.session.loop`)."""
        with self.lock:
            part = tf.compat.v1.GraphDef()
            part.library.function.extend(f for f in library.function
                                         if f.signature.name not in self._functions)
            part.library.gradient.extend(library.gradient)
            if not part.library.function:
                return
            self.restore_payloads(part)
            self.note_ops(part)
            with self.graph.as_default():
                tf.graph_util.import_graph_def(part, name="")
            self._functions.update(f.signature.name for f in part.library.function)

    def restore_payloads(self, graph_def):
        """Put the user's data back into the light constants of ``graph_def`` (edited in place;
        read from the user's graph: for installs, rare, a constant the rewrite changed or moved
        into a function)."""
        bodies = [graph_def.node] + [f.node_def for f in graph_def.library.function]
        user = None
        for nodes in bodies:
            for node in nodes:
                if PAYLOAD_ATTR not in node.attr:
                    continue
                user = user or self._user()
                source = user.get_operation_by_name(node.attr[PAYLOAD_ATTR].s.decode())
                node.attr["value"].CopyFrom(source.node_def.attr["value"])
                del node.attr[PAYLOAD_ATTR]
