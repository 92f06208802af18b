"""GraphDefs in their wire form: a graph's nodes read with their serialized form kept next to
the parsed GraphDef (op by op, or as one serialized GraphDef with the place of each node in it),
and an import of serialized nodes with no Python message in between.

Why: a session's first run copies the user's weights into the shadow graph
(:mod:`npu_adapter.session.shadow`). Through ``tf.graph_util.import_graph_def`` every weight is
copied into a new Python GraphDef, serialised again, and only then handed to TensorFlow; on our
benchmark machine touching fresh memory costs about 1.4 ms per MB, so those two copies cost
~0.25 s of a ResNet-50 first run (bench/PERFORMANCE.md). The bytes TensorFlow produced when
the user's graph was read (each op's NodeDef, :func:`per_node_graph_def`, or the whole
``TF_GraphToGraphDef``, :func:`serialized_graph_def`) already hold every node in its wire form:
framed and joined they are a valid GraphDef (protobuf concatenates repeated fields), so a node
imported unchanged is copied once on the Python side instead of three times.

The import calls the same TensorFlow functions ``import_graph_def`` calls, in the same order
(``tensorflow/python/framework/importer.py``, identical in TensorFlow 2.15 to 2.21). When a later
TensorFlow lacks one of them, :func:`raw_import_supported` is False and callers use
``import_graph_def``.
"""

import contextlib

from tensorflow.core.framework import graph_pb2

__all__ = ["SerializedGraph", "serialized_graph_def", "per_node_graph_def", "node_spans",
           "frame_node", "raw_import_supported", "import_serialized", "import_buffer"]

_NODE_KEY = 0x0A  # GraphDef field 1 (node), wire type 2 (length-delimited)


def _read_varint(data, pos):
    result = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _varint_bytes(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def node_spans(data):
    """``[(start, end), ...]``: where each ``node`` entry (key and length included) lies in the
    serialized GraphDef ``data``, in the order of ``GraphDef.node``.

    Reads only the top-level keys and lengths (a node's contents are skipped, not parsed).

    Raises:
        ValueError: ``data`` is not a well-formed serialized message.
    """
    spans = []
    pos = 0
    end = len(data)
    try:
        while pos < end:
            start = pos
            key, pos = _read_varint(data, pos)
            wire_type = key & 7
            if wire_type == 2:
                length, pos = _read_varint(data, pos)
                pos += length
            elif wire_type == 0:
                _, pos = _read_varint(data, pos)
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            else:
                raise ValueError(f"wire type {wire_type} at byte {start}")
            if key == _NODE_KEY:
                spans.append((start, pos))
    except IndexError:
        raise ValueError("serialized GraphDef ends inside a field") from None
    if pos != end:
        raise ValueError("serialized GraphDef ends inside a field")
    return spans


def frame_node(serialized_node):
    """``serialized_node`` (a serialized NodeDef) as one ``node`` entry of a GraphDef."""
    return bytes((_NODE_KEY,)) + _varint_bytes(len(serialized_node)) + serialized_node


class SerializedGraph:
    """A GraphDef's nodes in their wire form, in one of two shapes:

    - the serialized GraphDef ``data`` (the span of each node found on first use) and, when
      TensorFlow wrote it, TensorFlow's own buffer of the same bytes (``buffer``), which
      imports without a copy on the Python side (:func:`serialized_graph_def`);
    - ``parts``, each node's serialized NodeDef as TensorFlow holds it, read op by op
      (:func:`per_node_graph_def`); ``graph`` (a weak reference to the ``tf.Graph`` they were
      read from) then lets :meth:`whole_buffer` ask TensorFlow for the whole GraphDef later.

    ``buffer`` is freed by :meth:`release` or with this object.
    """

    __slots__ = ("data", "_spans", "_names", "buffer", "_parts", "_graph", "_skip")

    def __init__(self, data, names, buffer=None, *, parts=None, graph=None, skip=()):
        self.data = data
        self._names = names  # node names in GraphDef order
        self._spans = None
        self.buffer = buffer
        self._parts = parts
        self._graph = graph
        self._skip = frozenset(skip)  # nodes whose wire form differs from their parsed node

    def release(self):
        """Free TensorFlow's buffer (the bytes stay)."""
        buffer, self.buffer = self.buffer, None
        if buffer is not None:
            from tensorflow.python.client import pywrap_tf_session as c_api

            c_api.TF_DeleteBuffer(buffer)

    def __del__(self):
        # At interpreter shutdown TensorFlow may be gone before this object.
        with contextlib.suppress(Exception):
            self.release()

    def whole_buffer(self):
        """TensorFlow's buffer of the whole serialized GraphDef: the one kept, or (for nodes
        read op by op) a new one serialised now from the graph they were read from, which the
        caller must know to be unchanged since. None when there is neither."""
        if self.buffer is None and self._graph is not None:
            graph = self._graph()
            if graph is not None:
                self.buffer = _graph_buffer(graph)
        return self.buffer

    def _entries(self):
        """``(name, wire form of its GraphDef entry, or None)`` per node (parts are framed
        when read, so only the nodes asked for are copied)."""
        if self._parts is not None:
            return zip(self._names, self._parts)
        if self._spans is None:
            self._spans = node_spans(self.data)
            if len(self._spans) != len(self._names):
                raise ValueError("serialized GraphDef and its parsed nodes disagree")
        view = memoryview(self.data)
        return ((name, view[start:end]) for name, (start, end) in zip(self._names, self._spans))

    def node_bytes(self, names):
        """``{name: the node's serialized GraphDef entry}`` for the nodes ``names`` (a set); a
        name the graph holds twice is left out (which node it means is ambiguous), and so is a
        node whose wire form is not its parsed form (see :func:`per_node_graph_def`)."""
        out = {}
        twice = set()
        framed = self._parts is not None
        for name, entry in self._entries():
            if name in names and name not in self._skip:
                if name in out:
                    twice.add(name)
                out[name] = frame_node(entry) if framed else entry
        for name in twice:
            del out[name]
        return out

    def byte_count(self, names):
        """How many bytes the nodes ``names`` (a set) hold in their wire form."""
        return sum(len(entry) for name, entry in self._entries() if name in names)


def _graph_buffer(graph):
    """A new TensorFlow buffer holding ``graph``'s serialized GraphDef (freed by the caller),
    taken under the locks ``Graph._as_graph_def`` takes."""
    from tensorflow.python.client import pywrap_tf_session as c_api

    buffer = c_api.TF_NewBuffer()
    try:
        with graph._lock, graph._c_graph.get() as c_graph:
            c_api.TF_GraphToGraphDef(c_graph, buffer)
    except BaseException:
        c_api.TF_DeleteBuffer(buffer)
        raise
    return buffer


def per_node_supported():
    """True when this TensorFlow's ops expose their serialized NodeDef (``_node_def``, as
    ``Operation.node_def`` reads it in TensorFlow 2.15 to 2.21)."""
    from tensorflow.python.framework import ops

    return hasattr(ops.Operation, "_node_def")


def per_node_graph_def(graph):
    """``(GraphDef, SerializedGraph)`` of ``graph`` read op by op, equal to what
    ``graph.as_graph_def()`` returns; None for a graph with functions (its library is read
    with the whole GraphDef, :func:`serialized_graph_def`).

    Why: ``as_graph_def`` has TensorFlow serialise the whole graph into one buffer, copies
    it into Python bytes and parses those: three copies of every weight at once (a frozen
    ResNet-50: 0.15 s and 190 MB of fresh memory, BERT-base 0.7 s). Read op by op, each node
    is serialised and parsed on its own and the transient copies are one node's size.

    ``as_graph_def`` writes each node's inputs from the graph's edges (the graph's
    ``ToGraphDef``): port 0 as the bare node name and control inputs after the data inputs,
    sorted by name. An op's own NodeDef keeps its inputs as written when it was made or last
    edited (``node:0`` after ``Operation._update_input``, control inputs in the order they
    were added), so those are written the same way here; such a node's own wire form is then
    not its parsed form, and :meth:`SerializedGraph.node_bytes` leaves it out.
    """
    import weakref

    if getattr(graph, "_functions", None) or not per_node_supported():
        return None
    graph_def = graph_pb2.GraphDef()
    graph_def.versions.CopyFrom(graph.graph_def_versions)
    add = graph_def.node.add
    names = []
    parts = []
    skip = []
    with graph._lock:
        for op in graph.get_operations():
            data = op._node_def
            node = add()
            node.MergeFromString(data)
            names.append(node.name)
            parts.append(data)
            if node.input and _write_inputs_as_edges(node):
                skip.append(node.name)
    return graph_def, SerializedGraph(None, names, parts=parts, graph=weakref.ref(graph),
                                      skip=skip)


def _write_inputs_as_edges(node):
    """Rewrite ``node``'s inputs as TensorFlow's ``ToGraphDef`` writes them from the edges
    (see :func:`per_node_graph_def`); returns whether anything changed."""
    inputs = list(node.input)
    data = [text[:-2] if text.endswith(":0") and not text.startswith("^") else text
            for text in inputs if not text.startswith("^")]
    controls = sorted({text for text in inputs if text.startswith("^")},
                      key=lambda text: text[1:])
    wanted = data + controls
    if wanted == inputs:
        return False
    del node.input[:]
    node.input.extend(wanted)
    return True


def serialized_graph_def(graph, keep_buffer=False):
    """``(GraphDef, SerializedGraph)`` of ``graph``: what ``graph.as_graph_def()`` returns, and
    the bytes it was parsed from (which ``as_graph_def`` drops); with ``keep_buffer``, also
    TensorFlow's buffer of them (see :func:`import_buffer`)."""
    from tensorflow.python.client import pywrap_tf_session as c_api

    # The locks and calls of Graph._as_graph_def (whose tf_buffer() frees the buffer at once).
    buffer = c_api.TF_NewBuffer()
    try:
        with graph._lock, graph._c_graph.get() as c_graph:
            c_api.TF_GraphToGraphDef(c_graph, buffer)
            data = c_api.TF_GetBuffer(buffer)
    except BaseException:
        c_api.TF_DeleteBuffer(buffer)
        raise
    if not keep_buffer:
        c_api.TF_DeleteBuffer(buffer)
        buffer = None
    graph_def = graph_pb2.GraphDef.FromString(data)
    if not graph_def.library.function:
        graph_def.ClearField("library")  # as as_graph_def does
    return graph_def, SerializedGraph(data, [n.name for n in graph_def.node], buffer)


def raw_import_supported():
    """True when this TensorFlow has every function :func:`import_serialized` calls."""
    try:
        from tensorflow.python.client import pywrap_tf_session as c_api
        from tensorflow.python.framework import c_api_util, importer
    except ImportError:  # pragma: no cover - a TensorFlow without these modules
        return False
    return all((
        hasattr(importer, "_PopulateTFImportGraphDefOptions"),
        hasattr(importer, "_ProcessNewOps"),
        hasattr(c_api_util, "ScopedTFImportGraphDefOptions"),
        hasattr(c_api_util, "ScopedTFImportGraphDefResults"),
        hasattr(c_api_util, "tf_buffer"),
        hasattr(c_api, "TF_GraphImportGraphDefWithResults"),
        hasattr(c_api, "TF_NewBuffer"),
        hasattr(c_api, "TF_DeleteBuffer"),
        hasattr(c_api, "TF_ImportGraphDefResultsMissingUnusedInputMappings_wrapper"),
    ))


def import_serialized(graph, data, input_map=None, *, scope="", colocated=None):
    """Import the serialized GraphDef ``data`` into ``graph`` under the nodes' own names
    (prefixed ``<scope>/`` with a ``scope``, which must be unused in ``graph``).

    What ``tf.graph_util.import_graph_def(graph_def, input_map, name=scope)`` does with a
    GraphDef that has no function library, from bytes. ``input_map`` maps ``"node:port"`` (or
    ``"^node"``) of ``data`` to tensors of ``graph``. ``colocated``: the names (in ``data``) of
    the nodes with colocation groups, when the caller knows them (see :func:`_register_new_ops`).

    Raises:
        ValueError: TensorFlow rejects the graph, or an ``input_map`` key names no input of it
            (as ``import_graph_def`` raises).
    """
    from tensorflow.python.framework import c_api_util

    with c_api_util.tf_buffer(data) as buffer:
        _import(graph, buffer, input_map, scope, colocated)


def import_buffer(graph, buffer, colocated=None):
    """Import the GraphDef in TensorFlow's buffer ``buffer`` (a ``SerializedGraph.buffer``)
    into ``graph`` under the nodes' own names, as :func:`import_serialized` does with bytes,
    without copying them into a new buffer first. The GraphDef must have no function library
    (``import_graph_def`` also registers imported functions on the Python side).

    Raises:
        ValueError: TensorFlow rejects the graph.
    """
    _import(graph, buffer, None, "", colocated)


def _import(graph, buffer, input_map, scope, colocated):
    from tensorflow.python.client import pywrap_tf_session as c_api
    from tensorflow.python.framework import c_api_util, errors, importer

    input_map = dict(input_map or {})
    scoped_options = c_api_util.ScopedTFImportGraphDefOptions()
    importer._PopulateTFImportGraphDefOptions(
        scoped_options.options, scope, input_map, None, True)
    with graph._mutation_lock():
        try:
            with graph._c_graph.get() as c_graph:
                results = c_api.TF_GraphImportGraphDefWithResults(
                    c_graph, buffer, scoped_options.options)
            results = c_api_util.ScopedTFImportGraphDefResults(results)
        except errors.InvalidArgumentError as exc:
            raise ValueError(str(exc)) from None
        if colocated is None:
            importer._ProcessNewOps(graph)
        else:
            _register_new_ops(graph, {f"{scope}/{n}" for n in colocated} if scope
                              else colocated)
    missing = c_api.TF_ImportGraphDefResultsMissingUnusedInputMappings_wrapper(results.results)
    if missing:
        names = ", ".join(m.decode() if isinstance(m, bytes) else str(m) for m in missing)
        raise ValueError(f"Attempted to map inputs that were not found in graph_def: [{names}]")


def _register_new_ops(graph, colocated):
    """What ``importer._ProcessNewOps`` does after an import, for a graph without device
    functions whose imported nodes with colocation groups are ``colocated`` (names).

    ``_ProcessNewOps`` clears each new op's device and applies the graph's device functions
    under the op's own device, which, with no device function, gives the op its device back;
    and it reads every op's colocation groups through ``get_attr``, which raises (slowly) for
    the many ops without one. Here only the colocated ops are visited, as ``_ProcessNewOps``
    visits them: the device cleared, then taken from the first colocated op that has one. The
    Python ops are created as ``_ProcessNewOps`` creates them. Half its cost on a 1,200-op
    import (23 ms of 46 on a frozen MobileNetV2's first run).
    """
    from tensorflow.python.framework import device as pydev
    from tensorflow.python.framework import importer

    new_ops = graph._add_new_tf_operations(compute_devices=False)
    if not colocated:
        return
    for op in new_ops:
        if op.name not in colocated:
            continue
        names = importer._GetColocationNames(op)
        op._set_device("")
        for name in names:
            try:
                other = graph._get_operation_by_name(name)
            except KeyError:  # a colocation with an op the graph lacks is a hint (TF2)
                continue
            if other.device:
                op._set_device(pydev.DeviceSpec.from_string(other.device))
                break
