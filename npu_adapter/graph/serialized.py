"""GraphDefs in their wire form: a graph's serialized GraphDef kept next to its parsed one, the
place of each node in it, and an import of serialized nodes with no Python message in between.

Why: a session's first run copies the user's weights into the shadow graph
(:mod:`npu_adapter.session.shadow`). Through ``tf.graph_util.import_graph_def`` every weight is
copied into a new Python GraphDef, serialised again, and only then handed to TensorFlow; on our
benchmark machine touching fresh memory costs about 1.4 ms per MB, so those two copies cost
~0.25 s of a ResNet-50 first run (bench/PERFORMANCE.md). The bytes TensorFlow produced when
the user's graph was read (``TF_GraphToGraphDef``) already hold every node in its wire form:
slices of them, joined, are a valid GraphDef (protobuf concatenates repeated fields), so a node
imported unchanged is copied once on the Python side instead of three times.

The import calls the same TensorFlow functions ``import_graph_def`` calls, in the same order
(``tensorflow/python/framework/importer.py``, identical in TensorFlow 2.15 to 2.21). When a later
TensorFlow lacks one of them, :func:`raw_import_supported` is False and callers use
``import_graph_def``.
"""

import contextlib

from tensorflow.core.framework import graph_pb2

__all__ = ["SerializedGraph", "serialized_graph_def", "node_spans", "frame_node",
           "raw_import_supported", "import_serialized", "import_buffer"]

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
    """A GraphDef's serialized bytes with the span of each node, found on first use; and, when
    TensorFlow wrote them, TensorFlow's own buffer of the same bytes (``buffer``, freed by
    :meth:`release` or with this object), which imports without a copy on the Python side."""

    __slots__ = ("data", "_spans", "_names", "buffer")

    def __init__(self, data, names, buffer=None):
        self.data = data
        self._names = names  # node names in GraphDef order
        self._spans = None
        self.buffer = buffer

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

    def node_bytes(self, names):
        """``{name: memoryview of the node's serialized entry}`` for the nodes ``names`` (a
        set); a name the graph holds twice is left out (which node it means is ambiguous)."""
        if self._spans is None:
            self._spans = node_spans(self.data)
            if len(self._spans) != len(self._names):
                raise ValueError("serialized GraphDef and its parsed nodes disagree")
        view = memoryview(self.data)
        out = {}
        twice = set()
        for name, (start, end) in zip(self._names, self._spans):
            if name in names:
                if name in out:
                    twice.add(name)
                out[name] = view[start:end]
        for name in twice:
            del out[name]
        return out


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
