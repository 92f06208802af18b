"""The shadow graph: the private ``tf.Graph`` NpuSessions run on, one per user graph.

The user's graph is never modified. Every NpuSession on a user graph runs its TensorFlow session
on that graph's shadow, which holds:

* the user's nodes a rewritten signature keeps unchanged, imported under their own names the
  first time a signature needs them, so variables, queues, iterators and tables keep their names
  (checkpoints, ``Saver`` and name-based feeds and fetches work) and every signature of a session
  shares one state;
* the changed part of each rewrite (cluster calls and what depends on them), imported under a
  fresh scope ``npu_rewrite_<N>/`` whose inputs are bound to those originals; a variable, queue
  or table among them keeps the user's node's state through its ``shared_name``.

A shadow lives as long as its user graph (a weak reference) and is shared by every NpuSession on
it: the second session on a graph finds its signatures rewritten and installed, so a new session
per request costs no rewrite and adds no node. Installing is serialised per shadow.
"""

import collections
import itertools
import threading
import weakref

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2

from npu_adapter.backends.cpu import is_state_owner
from npu_adapter.graph.extract import FED_TENSOR_ATTR
from npu_adapter.graph.forwarding import bypass_argument_identities
from npu_adapter.graph.names import parse_input
from npu_adapter.graph.payload import PAYLOAD_ATTR, is_light_form_of
from npu_adapter.graph.serialized import (
    frame_node,
    import_buffer,
    import_serialized,
    per_node_graph_def,
    raw_import_supported,
    serialized_graph_def,
)
from npu_adapter.graph.splice import detach_foreign_colocation
from npu_adapter.graph.types import op_def_for
from npu_adapter.session.reuse import SessionReuse, stateful_op_type

__all__ = ["ShadowGraph", "Installed", "note_graph_changed"]

_RAW_IMPORT = raw_import_supported()
# The first install imports the user's whole graph when the client graph's own nodes hold at
# least this many bytes per other node of the graph (see ShadowGraph._import_user_graph):
# about what copying 50 KB twice costs against importing and placing one more node, measured
# on ResNet-50 (whole graph 0.1 s faster) and MobileNetV2 (17 ms slower).
WHOLE_IMPORT_BYTES_PER_NODE = 50_000

_SHADOWS = weakref.WeakKeyDictionary()
_SHADOWS_LOCK = threading.Lock()
_GENERATIONS = weakref.WeakKeyDictionary()  # user graph -> attribute-change generation


def note_graph_changed(graph):
    """Tell the shadows that an attribute of an existing op of ``graph`` was set (TensorFlow
    does not bump the graph version for that), so the next signature reads it afresh."""
    with _SHADOWS_LOCK:
        _GENERATIONS[graph] = _GENERATIONS.get(graph, 0) + 1


def _graph_stamp(graph):
    """What a read of ``graph`` is valid for: its version and attribute-change generation."""
    return graph.version, _GENERATIONS.get(graph, 0)


def _keep_user_state(node):
    """Give ``node`` (about to be imported under a rewrite scope, its name changed) the state
    of the user's node of its name when it owns one.

    TensorFlow finds a variable's, queue's or table's state by its ``shared_name``; left empty,
    a ``VariableV2`` uses its node name and a queue a state private to its kernel. A state owner
    lands under a scope when the rewrite changed its NodeDef (a control input on an op that went
    into a cluster now names the cluster), and every signature that does so imports its own
    copy: without this, each copy would start a state of its own (an assign in one run, an
    "uninitialized value" in the next). Naming the user's node keeps one state per session, as
    the user's graph has.
    """
    if not is_state_owner(op_def_for(node.op)):
        return
    shared = node.attr.get("shared_name")
    if shared is None or not shared.s:  # absent (a GraphDef without default attrs) or empty
        node.attr["shared_name"].s = node.name.encode()


class Installed(collections.namedtuple("Installed", ["tensors", "ops", "feeds"])):
    """Where one installed graph's elements are in the shadow graph.

    Attributes:
        tensors: user tensor name → shadow ``tf.Tensor`` (fetches of the signature).
        ops: user op name → shadow ``tf.Operation`` (targets of the signature).
        feeds: user fed tensor name → shadow ``tf.Tensor`` to feed.
    """

    __slots__ = ()


def _without_class(node):
    if "_class" not in node.attr:
        return node
    copy = type(node)()
    copy.CopyFrom(node)
    del copy.attr["_class"]
    return copy


def _same_node(a, b):
    """NodeDef equality ignoring colocation groups (the rewrite drops references to nodes outside
    the client graph). Field comparison, no serialisation: a 64 MB Const compares in ms."""
    if "_class" in a.attr or "_class" in b.attr:
        a, b = _without_class(a), _without_class(b)
    return a == b


class ShadowGraph:
    """The private execution graph of one user graph (see the module docstring).

    Use :meth:`for_graph`; never construct directly.
    """

    def __init__(self, user_graph):
        self._user = weakref.ref(user_graph)
        self.graph = tf.Graph()
        self.lock = threading.RLock()
        self._present = {}      # user node name -> its NodeDef, imported under its own name
        self._name_scopes = set()  # scopes of the shadow's op names (see _taken_scopes)
        self._name_scopes_seen = 0
        self._scopes = itertools.count(1)
        self._graph_nums = itertools.count(1)
        self._taken_prefixes = None
        self.signatures = {}    # shared installed signatures (see session.core)
        self._functions = {}    # function name -> the FunctionDef the shadow holds
        self._graph_def = None  # (user graph version, generation, GraphDef, {name: NodeDef})
        self._facts = {}        # name -> (graph stamp, what user_graph_fact computed)
        # The bytes that GraphDef was parsed from, kept until the next install has imported
        # the user's nodes from them (see graph/serialized.py), then dropped: holding them
        # longer would hold a second copy of the weights.
        self._serialized = None
        self.reuse = SessionReuse(self)  # idle TensorFlow sessions on this shadow

    @classmethod
    def for_graph(cls, user_graph):
        """The shadow of ``user_graph`` (created on first use, shared afterwards)."""
        with _SHADOWS_LOCK:
            shadow = _SHADOWS.get(user_graph)
            if shadow is None:
                shadow = _SHADOWS[user_graph] = cls(user_graph)
            return shadow

    @property
    def user_graph(self):
        """The user's ``tf.Graph`` (None once it is gone)."""
        return self._user()

    def user_graph_def(self):
        """``(GraphDef, {name: NodeDef})`` of the user's graph as it is now.

        Taken once per graph version and shared by every signature and session (serialising a
        large graph costs seconds). TensorFlow bumps the version when an op is added; our own
        attribute setters (``set_graph_exec_config``, ``keep_tensors_dtypes``, ...) call
        :func:`note_graph_changed` because setting an attribute does not.
        """
        user_graph = self._user()
        if user_graph is None:
            raise RuntimeError("the session's graph no longer exists")
        stamp = _graph_stamp(user_graph)
        with self.lock:
            cached = self._graph_def
            if cached is None or cached[0] != stamp:
                if _RAW_IMPORT:
                    # Read op by op when the graph has no functions (see per_node_graph_def);
                    # else whole, and before the first install TensorFlow's buffer is kept
                    # too: the whole graph may then be imported from it (_import_user_graph).
                    self._drop_serialized()
                    read = per_node_graph_def(user_graph)
                    if read is None:
                        read = serialized_graph_def(user_graph, keep_buffer=not self._present)
                    graph_def, self._serialized = read
                else:  # a TensorFlow without the import functions graph/serialized.py calls
                    graph_def = user_graph.as_graph_def()
                cached = self._graph_def = (stamp, graph_def,
                                            {n.name: n for n in graph_def.node})
            return cached[1], cached[2]

    def user_graph_fact(self, name, compute):
        """``compute(GraphDef)`` of the user's graph as it is now, computed once per graph
        version (as :meth:`user_graph_def` is taken) and kept under ``name``."""
        with self.lock:  # reentrant: the GraphDef and its stamp are read together
            graph_def, _ = self.user_graph_def()
            stamp = self._graph_def[0]
            cached = self._facts.get(name)
            if cached is None or cached[0] != stamp:
                cached = self._facts[name] = (stamp, compute(graph_def))
            return cached[1]

    def user_graph_op_fact(self, name, compute):
        """``compute(tf.Graph)`` of the user's graph as it is now, once per graph version, for
        facts its operations tell without serialising the graph (kept apart from
        :meth:`user_graph_fact`'s under ``name``)."""
        user_graph = self._user()
        if user_graph is None:
            raise RuntimeError("the session's graph no longer exists")
        stamp = _graph_stamp(user_graph)
        key = ("ops", name)
        with self.lock:
            cached = self._facts.get(key)
            if cached is None or cached[0] != stamp:
                cached = self._facts[key] = (stamp, compute(user_graph))
            return cached[1]

    def graph_num(self, user_graph_def):
        """A fresh ``N`` for ``GeOp<N>_<k>`` names: unique in this shadow and not the prefix of
        a function or node of the user's graph (a graph loaded from a rewritten model may
        already hold ``GeOp1_0``)."""
        with self.lock:
            if self._taken_prefixes is None:
                self._taken_prefixes = set()
            names = [f.signature.name for f in user_graph_def.library.function]
            names += [n.name for n in user_graph_def.node if n.name.startswith("GeOp")]
            for name in names:
                if name.startswith("GeOp"):
                    self._taken_prefixes.add(name.split("_", 1)[0])
            while True:
                n = next(self._graph_nums)
                if f"GeOp{n}" not in self._taken_prefixes:
                    return n

    def new_scope(self):
        """A fresh ``npu_rewrite_<N>`` scope name for an installed rewrite."""
        while True:
            scope = f"npu_rewrite_{next(self._scopes)}"
            if self.graph.unique_name(scope, mark_as_used=False) == scope:
                # Taken now, as import_graph_def's name scope would take it (the serialized
                # import does not).
                self.graph.unique_name(scope)
                return scope

    # ---------------------------------------------------------------------------- install
    def install(self, graph_def, user_nodes, *, fetches=None, targets=None, feeds=None,
                payloads=None):
        """Import ``graph_def`` (a rewritten client graph, or an unrewritten one) into the shadow.

        Nodes equal to the user's node of the same name (``user_nodes``: name → NodeDef of the
        user's graph), with all their inputs equal too, are the user's own: imported under their
        name the first time, shared afterwards. The others are imported under a fresh scope.
        Placeholders the client-graph extraction made for fed tensors are bound to the fed
        tensor when the shadow has it, and are fed themselves otherwise.

        Args:
            fetches: user tensor name → tensor name in ``graph_def``.
            targets: user op name → op name in ``graph_def``.
            feeds: user fed tensor name → tensor name in ``graph_def`` standing for it.
            payloads: the ``PayloadStore`` of a light ``graph_def`` (see graph/payload.py): a
                light Const marked with its own name counts as the user's node when it is that
                node but for the data, and the data of every other marked node is put back in
                the copy that is imported.

        Returns:
            An :class:`Installed` mapping those user names to shadow tensors and ops.
        """
        with self.lock:
            try:
                return self._install(graph_def, user_nodes, fetches or {}, targets or {},
                                     feeds or {}, payloads)
            finally:
                self._drop_serialized()

    def release_serialized(self):
        """Free the serialized user graph kept for the next install (a signature that
        installs nothing would otherwise hold a copy of the weights until the next one)."""
        with self.lock:
            self._drop_serialized()

    def _drop_serialized(self):
        serialized, self._serialized = self._serialized, None
        if serialized is not None:
            serialized.release()

    def _install(self, graph_def, user_nodes, fetches, targets, feeds, payloads):
        graph = self.graph
        nodes = list(graph_def.node)
        by_name = {n.name: n for n in nodes}
        stand_ins = {n.name: n.attr[FED_TENSOR_ATTR].s.decode() for n in nodes
                     if FED_TENSOR_ATTR in n.attr}
        # 1. Which nodes are the user's own (same NodeDef, and inputs own too).
        changed = set()
        taken = self._taken_scopes()
        for node in nodes:
            if node.name in stand_ins:
                continue
            orig = user_nodes.get(node.name)
            if orig is None:
                changed.add(node.name)
                continue
            if payloads is not None and PAYLOAD_ATTR in node.attr:
                same = is_light_form_of(node, orig, ignore_attrs=("_class",))
            else:
                same = _same_node(orig, node)
            if not same:
                changed.add(node.name)
                continue
            present = self._present.get(node.name)
            if present is not None and present is not orig and not _same_node(present, orig):
                changed.add(node.name)  # the user's node changed since the shadow imported it
            elif present is None and node.name in taken:
                # The shadow has a node under this name's scope (``a/b``, from an earlier
                # install): TensorFlow would import ``a`` as ``a_1``. A copy under the scope
                # serves (a state owner's copy keeps the user's state: _keep_user_state).
                changed.add(node.name)
        consumers = collections.defaultdict(list)
        for node in nodes:
            for text in node.input:
                consumers[parse_input(text)[0]].append(node.name)
        queue = collections.deque(sorted(changed))
        while queue:
            name = queue.popleft()
            for c in consumers.get(name, ()):
                if c not in changed and c not in stand_ins:
                    changed.add(c)
                    queue.append(c)
        # A fed tensor whose producer the shadow has (or gets now) is fed where it is; otherwise
        # its stand-in placeholder is imported and fed instead.
        bound = {}
        for stand_in, fed in stand_ins.items():
            src = parse_input(fed)[0]
            if src in self._present or (src in by_name and src not in changed):
                bound[stand_in] = fed
            else:
                changed.add(stand_in)
        self.add_functions(graph_def.library, payloads)
        # 2. The user's own nodes the shadow does not have yet, under their own names.
        own_new = [n for n in nodes if n.name not in changed and n.name not in stand_ins
                   and n.name not in self._present]
        if own_new and self._import_user_graph(user_nodes, by_name, own_new):
            own_new = []
        if own_new:
            self._import(graph_def, own_new, {n.name for n in own_new}, None, {},
                         wire=self._wire_forms(own_new, user_nodes), payloads=payloads)
            for node in own_new:
                # The user's NodeDef (``node`` equals it, or is its light form).
                self._present[node.name] = user_nodes[node.name]
        # 3. The changed part, under a fresh scope.
        scope = self.new_scope() if changed else None
        if changed:
            self._import(graph_def, [n for n in nodes if n.name in changed], changed, scope,
                         bound, payloads=payloads)

        def tensor(name):
            node, port, _ = parse_input(name)
            if node in bound:
                return graph.get_tensor_by_name(bound[node])
            if node in changed:
                node = f"{scope}/{node}"
            return graph.get_tensor_by_name(f"{node}:{port}")

        def op(name):
            if name in bound:
                return graph.get_operation_by_name(parse_input(bound[name])[0])
            return graph.get_operation_by_name(f"{scope}/{name}" if name in changed else name)

        return Installed({k: tensor(v) for k, v in fetches.items()},
                         {k: op(v) for k, v in targets.items()},
                         {k: tensor(v) for k, v in feeds.items()})

    def _taken_scopes(self):
        """The scopes of the shadow's op names (``a`` and ``a/b`` of ``a/b/c``): names an
        import cannot give a new node. Kept up to date with the ops added since the last call
        (a graph only grows)."""
        ops = self.graph.get_operations()
        scopes = self._name_scopes
        for op in ops[self._name_scopes_seen:]:
            name = op.name
            while "/" in name:
                name = name.rpartition("/")[0]
                if name in scopes:
                    break  # and so are its own scopes
                scopes.add(name)
        self._name_scopes_seen = len(ops)
        return scopes

    def stateful_op(self):
        """An op type of the shadow (its functions included) that keeps state across runs, or
        None: then a TensorFlow session that ran it holds nothing a fresh one would not (see
        :mod:`npu_adapter.session.reuse`)."""
        with self.lock:
            return self.reuse.stateful_op(self.graph, self._functions)

    def add_functions(self, library, payloads=None):
        """Add the functions of ``library`` the shadow does not hold yet, each exactly once.

        ``import_graph_def`` would copy a GraphDef's whole library at every import and then
        serialise and compare every function again on the Python side; a frozen model's cluster
        functions hold its weights, so that cost ~0.4 s per install on ResNet-50. Here a new
        function is serialised once; one the shadow holds is skipped when equal (field
        comparison, no serialisation). A different function under a taken name is handed to
        TensorFlow, which rejects it as an import would. Libraries with gradient entries take
        TensorFlow's own path (``function.from_library`` pairs them). With ``payloads`` (a light
        library), functions are compared and added with their data put back.
        """
        from tensorflow.python.framework import function as tf_function

        functions = list(library.function)
        if payloads is not None:
            functions = [payloads.restored_function(f) for f in functions]
        new = [f for f in functions if self._functions.get(f.signature.name) != f]
        if not new and not library.gradient:
            return
        if library.gradient:
            subset = type(library)()
            subset.CopyFrom(library)
            if payloads is not None:  # the functions with their data, restored above
                del subset.function[:]
                subset.function.extend(functions)
            defined = tf_function.from_library(subset)
        else:
            # The rewrite's functions (not the user's) run without their forwarding
            # Identities: see graph/forwarding.py.
            user = self._user_function_names()
            defined = [tf_function._from_definition(
                f if f.signature.name in user else bypass_argument_identities(f)) for f in new]
        with self.graph.as_default():  # outside it, add_to_graph adds to the eager context
            for f in defined:
                f.add_to_graph(self.graph)
        for f in functions:
            self._functions[f.signature.name] = f

    def _user_function_names(self):
        user_graph = self._user()
        if user_graph is None:
            return frozenset()
        graph_def, _ = self.user_graph_def()
        return frozenset(f.signature.name for f in graph_def.library.function)

    def _import_user_graph(self, user_nodes, client, own_new):
        """On the first install, import the user's whole graph (``user_nodes``) under its own
        names from the buffer TensorFlow serialised it into, and return True.

        Importing every node rather than the client graph's own nodes (``own_new``; ``client``:
        the client graph's node names) spares the two copies of their bytes that joining them
        and handing them to TensorFlow make (~0.15 s of a frozen ResNet-50's first run, 100 MB
        of weights), and costs TensorFlow the other nodes (the originals of the cluster members
        and the nodes outside the client graph: imported, placed with the rest). Done when the
        own nodes hold at least :data:`WHOLE_IMPORT_BYTES_PER_NODE` bytes per other node: on
        MobileNetV2 (14 MB, 550 cluster members) the whole graph cost 17 ms more than the own
        nodes. Later installs add the nodes they need, as before. Not done (False) when the
        shadow already holds user nodes, when the bytes are not those of ``user_nodes``'s graph,
        when the graph has a function library (its functions would also need registering on the
        Python side), or when a node outside the client graph keeps state across runs (the
        shadow would then no longer let a closed session's TensorFlow session serve the next
        one: session/reuse.py).
        """
        serialized = self._serialized
        cached = self._graph_def
        if self._present or serialized is None or cached is None or \
                cached[2] is not user_nodes or cached[1].library.function:
            return False
        others = len(user_nodes) - len(own_new)
        own_bytes = serialized.byte_count({n.name for n in own_new})
        if own_bytes < others * WHOLE_IMPORT_BYTES_PER_NODE:
            return False
        outside = {node.op for name, node in user_nodes.items() if name not in client}
        if stateful_op_type(outside) is not None:
            return False
        user_graph = self._user()
        if user_graph is None or cached[0] != _graph_stamp(user_graph):
            return False  # (nodes read op by op: the whole buffer is serialised now)
        buffer = serialized.whole_buffer()
        if buffer is None:
            return False
        colocated = {name for name, node in user_nodes.items() if "_class" in node.attr}
        import_buffer(self.graph, buffer, colocated=colocated)
        self._present.update(user_nodes)
        return True

    def _wire_forms(self, nodes, user_nodes):
        """``{name: serialized node}`` of the user's ``nodes`` whose wire form can be imported
        as it is (see graph/serialized.py): read from the bytes of ``user_nodes``'s GraphDef
        when the shadow still has them. A node with colocation groups on either side is left
        out: its groups may have to be detached (and the user's may differ from the rewrite's,
        which drops groups naming nodes outside the client graph)."""
        serialized = self._serialized
        cached = self._graph_def
        if serialized is None or cached is None or cached[2] is not user_nodes:
            return None
        names = {n.name for n in nodes
                 if "_class" not in n.attr and "_class" not in user_nodes[n.name].attr}
        return serialized.node_bytes(names) if names else None

    def _has_outputs(self, name, importing):
        """Whether the shadow's op ``name`` (not one being imported) has an output, through
        which ``input_map`` can bind a control input on it."""
        if name in importing:
            return True
        return bool(self.graph.get_operation_by_name(name).outputs)

    def _import(self, graph_def, nodes, importing, scope, bound, wire=None, payloads=None):
        """Import ``nodes`` of ``graph_def`` (their names: ``importing``) under ``scope`` (None:
        their own names), binding every other input to the shadow's node of that name, or to
        the fed tensor for ``bound`` stand-ins. ``wire`` (own names only) holds serialized
        nodes equal to theirs (or to their data, for light nodes), imported from those bytes
        instead of a copy; the copies of light nodes get their data back from ``payloads``."""
        graph = self.graph
        out = graph_pb2.GraphDef()
        out.versions.CopyFrom(graph_def.versions)  # the library is added by add_functions
        input_map = {}
        colocations = {}
        late_controls = collections.defaultdict(list)
        raw = []  # the serialized nodes taken from ``wire``
        for node in nodes:
            serialized = wire.get(node.name) if wire else None
            if serialized is not None and not any(
                    t.startswith("^") and not self._has_outputs(t[1:], importing)
                    for t in node.input):
                raw.append(serialized)
                copy = None
            else:
                copy = out.node.add()
                copy.CopyFrom(node)
                if payloads is not None:
                    payloads.restore_node(copy)
                if FED_TENSOR_ATTR in copy.attr:
                    del copy.attr[FED_TENSOR_ATTR]
                detach_foreign_colocation(copy, importing, colocations)
                if scope is not None:
                    _keep_user_state(copy)
            for text in node.input:
                src, port, is_control = parse_input(text)
                if src in importing:
                    continue
                if src in bound:
                    fed = graph.get_tensor_by_name(bound[src])
                    input_map["^" + src if is_control else f"{src}:{port}"] = fed
                    continue
                source = graph.get_operation_by_name(src)
                if not is_control:
                    input_map[f"{src}:{port}"] = source.outputs[port]
                elif source.outputs:
                    input_map["^" + src] = source.outputs[0]
                else:
                    # input_map binds control inputs through an output; for an op without one
                    # the control edge is added after the import.
                    copy.input.remove(text)
                    late_controls[node.name].append(source)
        # The wire forms come from nodes without colocation groups (_wire_forms).
        colocated = {n.name for n in out.node if "_class" in n.attr}
        if raw:
            # One copy of each weight on the Python side (the join) instead of a message copy
            # and a serialisation; the copied nodes follow in their own wire form.
            parts = [graph_pb2.GraphDef(versions=out.versions).SerializeToString(), *raw]
            parts += [frame_node(n.SerializeToString()) for n in out.node]
            import_serialized(graph, b"".join(parts), input_map, colocated=colocated)
        elif _RAW_IMPORT:
            import_serialized(graph, out.SerializeToString(), input_map, scope=scope or "",
                              colocated=colocated)
        else:
            with graph.as_default():
                # "<scope>/": the scope new_scope took, entered as it is.
                tf.graph_util.import_graph_def(out, input_map=input_map or None,
                                               name=scope + "/" if scope else "")

        def imported(name):
            return graph.get_operation_by_name(f"{scope}/{name}" if scope else name)

        for name, sources in late_controls.items():
            target = imported(name)
            for source in sources:
                target._add_control_input(source)
        for name, groups in colocations.items():
            mapped = []
            for group in groups:
                if group.startswith(b"loc:@"):
                    target = group[5:].decode()
                    if target in importing:
                        target = imported(target).name
                    elif target not in self._present:
                        continue  # the colocated node is not in the shadow: drop the group
                    group = b"loc:@" + target.encode()
                mapped.append(group)
            if mapped:
                imported(name)._set_attr("_class", attr_value_pb2.AttrValue(
                    list=attr_value_pb2.AttrValue.ListValue(s=mapped)))
