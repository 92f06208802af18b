"""Load model files into a GraphDef, with the fetches and feeds their signatures suggest.

Accepted (:func:`load_model`):

* ``.pb``: a binary ``GraphDef`` (a frozen graph); a binary ``MetaGraphDef`` or ``SavedModel``
  is recognised too;
* ``.pbtxt`` / ``.pbtext`` / ``.txt``: a text ``GraphDef`` (or ``MetaGraphDef`` / ``SavedModel``);
* ``.meta``: a ``MetaGraphDef`` as ``tf.compat.v1.train.Saver`` writes it (binary, or text);
* a SavedModel directory (``saved_model.pb`` or ``saved_model.pbtxt`` inside); a
  ``saved_model.pb`` path is taken as its directory.

Graph files are parsed as protocol buffers only: nothing is executed and no variable is read.
When the model has a ``SignatureDef`` (SavedModel; ``.meta`` files exported with one), the chosen
signature's outputs are the suggested fetches and its inputs the suggested feeds. SavedModels use
the ``serve`` tag set when present and the ``serving_default`` signature when present, else the
first in name order; both can be chosen.

A TensorFlow 2 SavedModel (Keras ``model.export()`` or ``model.save()``, ``tf.saved_model.save``;
it has an object graph) holds its whole model in functions: its graph is a single
``StatefulPartitionedCall`` per signature. The original adapter never sees such a call
(TensorFlow's function optimizer inlines it before the NPU optimizer runs), so when the chosen
signature's outputs come from a function call, :func:`load_model` loads the SavedModel with
TensorFlow and turns the signature into one TensorFlow 1 style graph with
:func:`freeze_saved_model`: the function calls inlined op by op (every layer's ops under their
own names) and the variables folded into constants. Its inputs are Placeholders named after the
signature's input keys and its outputs Identity nodes named after the output keys
(``output_0:0``), so fetches carry the signature's names.

Errors raise :class:`ModelFileError` (a :class:`~npu_adapter.errors.GraphError`) naming the path
and what was expected.
"""

import dataclasses
import os
import typing

from npu_adapter.errors import GraphError

__all__ = ["FrozenSignature", "LoadedModel", "ModelFileError", "freeze_saved_model", "load_model",
           "load_graph_def", "MODEL_FORMATS"]

MODEL_FORMATS = ".pb (GraphDef), .pbtxt (text GraphDef), .meta (MetaGraphDef) or a SavedModel " \
                "directory"

_TEXT_SUFFIXES = (".pbtxt", ".pbtext", ".txt", ".prototxt")
_DEFAULT_SIGNATURE = "serving_default"
_SERVE_TAG = "serve"
_CALL_OPS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})


class ModelFileError(GraphError):
    """A model file is missing, unreadable or not in an accepted format; ``path`` names it."""

    def __init__(self, path, message):
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {message}")


@dataclasses.dataclass
class LoadedModel:
    """A loaded model.

    Attributes:
        graph_def: the GraphDef.
        path: the path given.
        kind: ``"graph_def"``, ``"meta_graph"`` or ``"saved_model"``.
        fetches: suggested fetches (outputs of the chosen signature; empty without one).
        feeds: suggested feeds (inputs of the chosen signature).
        signature: the chosen signature's key, or None.
        signatures: every signature: key → ``{"inputs": {name: tensor}, "outputs": {...}}``.
        tags: the tag set of the chosen MetaGraphDef (SavedModel / meta graph), sorted.
        meta_graph_def: the ``MetaGraphDef`` when the model had one.
        inlined: True when ``graph_def`` is the chosen signature frozen with its function calls
            inlined (a TensorFlow 2 SavedModel; see the module docstring).
        signature_outputs: output key → tensor name in ``graph_def`` of the chosen signature.
        signature_inputs: input key → tensor name in ``graph_def``.
    """

    graph_def: typing.Any
    path: str
    kind: str
    fetches: list = dataclasses.field(default_factory=list)
    feeds: list = dataclasses.field(default_factory=list)
    signature: typing.Optional[str] = None
    signatures: dict = dataclasses.field(default_factory=dict)
    tags: list = dataclasses.field(default_factory=list)
    meta_graph_def: typing.Any = None
    inlined: bool = False
    signature_outputs: dict = dataclasses.field(default_factory=dict)
    signature_inputs: dict = dataclasses.field(default_factory=dict)

    @property
    def name(self):
        """Base name of the model (no directories): safe to write into reports."""
        return os.path.basename(os.path.normpath(self.path)) or self.path


def _protos():
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

    return graph_pb2, meta_graph_pb2, saved_model_pb2


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except IsADirectoryError:
        raise ModelFileError(path, "is a directory but not a SavedModel (no saved_model.pb or "
                                   "saved_model.pbtxt inside)") from None
    except OSError as exc:
        raise ModelFileError(path, f"cannot read: {exc.strerror or exc}") from None


def _parse_binary(data, message_class):
    from google.protobuf.message import DecodeError

    message = message_class()
    try:
        message.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        return None, str(exc) or type(exc).__name__
    return message, None


def _parse_text(data, message_class):
    from google.protobuf import text_format

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    message = message_class()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        return None, str(exc)
    return message, None


def _plausible_graph(graph_def):
    """A parse that succeeded on the wrong kind of file gives nodes without names or ops."""
    return len(graph_def.node) > 0 and all(n.name and n.op for n in graph_def.node)


def _plausible_meta(meta):
    return meta.HasField("graph_def") and _plausible_graph(meta.graph_def)


def _plausible_saved(saved):
    return len(saved.meta_graphs) > 0 and any(_plausible_meta(m) for m in saved.meta_graphs)


def _signatures(meta):
    found = {}
    for key in sorted(meta.signature_def):
        sig = meta.signature_def[key]
        found[key] = {
            "inputs": {k: sig.inputs[k].name for k in sorted(sig.inputs) if sig.inputs[k].name},
            "outputs": {k: sig.outputs[k].name for k in sorted(sig.outputs)
                        if sig.outputs[k].name},
        }
    return found


def _from_meta(path, meta, kind, signature, tags=None):
    sigs = _signatures(meta)
    chosen = None
    if signature is not None:
        if signature not in sigs:
            allowed = ", ".join(sigs) or "none"
            raise ModelFileError(path, f"no signature {signature!r}; signatures: {allowed}")
        chosen = signature
    elif _DEFAULT_SIGNATURE in sigs:
        chosen = _DEFAULT_SIGNATURE
    elif sigs:
        chosen = next(iter(sigs))
    fetches = list(sigs[chosen]["outputs"].values()) if chosen else []
    feeds = list(sigs[chosen]["inputs"].values()) if chosen else []
    return LoadedModel(graph_def=meta.graph_def, path=os.fspath(path), kind=kind,
                       fetches=fetches, feeds=feeds, signature=chosen, signatures=sigs,
                       tags=sorted(tags if tags is not None else meta.meta_info_def.tags),
                       meta_graph_def=meta,
                       signature_outputs=dict(sigs[chosen]["outputs"]) if chosen else {},
                       signature_inputs=dict(sigs[chosen]["inputs"]) if chosen else {})


def _from_saved(path, saved, signature, tags):
    metas = list(saved.meta_graphs)
    if not metas:
        raise ModelFileError(path, "SavedModel has no MetaGraphDef")
    if tags is not None:
        wanted = sorted(tags)
        for meta in metas:
            if sorted(meta.meta_info_def.tags) == wanted:
                return _from_meta(path, meta, "saved_model", signature)
        available = "; ".join(",".join(sorted(m.meta_info_def.tags)) for m in metas)
        raise ModelFileError(path, f"no MetaGraphDef with tags {','.join(wanted)!r}; "
                                   f"tag sets: {available}")
    chosen = metas[0]
    for meta in metas:
        if _SERVE_TAG in meta.meta_info_def.tags:
            chosen = meta
            break
    return _from_meta(path, chosen, "saved_model", signature)


def _saved_model_file(directory):
    for name in ("saved_model.pb", "saved_model.pbtxt"):
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            return candidate
    return None


def _load_file(path, data, text, signature, tags):
    graph_pb2, meta_graph_pb2, saved_model_pb2 = _protos()
    parse = _parse_text if text else _parse_binary
    suffix = os.path.splitext(path)[1].lower()
    kinds = {"graph_def": graph_pb2.GraphDef, "meta_graph": meta_graph_pb2.MetaGraphDef,
             "saved_model": saved_model_pb2.SavedModel}
    # A parse can "succeed" on another kind of message; try the kind the name suggests first.
    if os.path.basename(path).startswith("saved_model"):
        names = ("saved_model", "meta_graph", "graph_def")
    elif suffix == ".meta":
        names = ("meta_graph", "saved_model", "graph_def")
    else:
        names = ("graph_def", "meta_graph", "saved_model")
    order = [(name, kinds[name]) for name in names]
    first_error = None
    for kind, message_class in order:
        message, error = parse(data, message_class)
        if message is None:
            first_error = first_error or error
            continue
        if kind == "graph_def" and _plausible_graph(message):
            return LoadedModel(graph_def=message, path=os.fspath(path), kind="graph_def")
        if kind == "meta_graph" and _plausible_meta(message):
            return _from_meta(path, message, "meta_graph", signature)
        if kind == "saved_model" and _plausible_saved(message):
            return _from_saved(path, message, signature, tags)
    what = "text" if text else "binary"
    detail = f" ({first_error})" if first_error else ""
    if not data.strip():
        raise ModelFileError(path, "is empty; expected " + MODEL_FORMATS)
    raise ModelFileError(path, f"is not a {what} GraphDef, MetaGraphDef or SavedModel "
                               f"protocol buffer{detail}")


@dataclasses.dataclass
class FrozenSignature:
    """One signature of a SavedModel as a TensorFlow 1 style graph (:func:`freeze_saved_model`).

    Attributes:
        graph_def: the graph: function calls inlined, variables folded into constants.
        inputs: ``[(key, tensor name)]``: the signature's input keys and their Placeholders.
        outputs: ``[(key, tensor name)]``: its output keys and the tensors that give them.
        signature: the signature key.
    """

    graph_def: typing.Any
    inputs: list
    outputs: list
    signature: str


def _name_outputs(graph_def, outputs):
    """Give each output an Identity node named after its key (when no node has that name)."""
    from npu_adapter.graph.types import node_output_types

    nodes = {node.name: node for node in graph_def.node}
    named = []
    for key, tensor in outputs:
        source, _, port = tensor.rpartition(":")
        types = node_output_types(nodes[source]) or [] if source in nodes else []
        if key in nodes or int(port) >= len(types):
            named.append((key, tensor))
            continue
        node = graph_def.node.add(name=key, op="Identity", input=[tensor])
        node.attr["T"].type = types[int(port)]
        nodes[key] = node
        named.append((key, f"{key}:0"))
    return named


def freeze_saved_model(path, *, signature=None, tags=None):
    """The signature ``signature`` of the SavedModel directory ``path`` as one TensorFlow 1
    style graph: loaded with TensorFlow, its function calls inlined op by op and its variables
    folded into constants by TensorFlow's own freezing (``tf_compat.freeze_function``) (control
    flow stays functional: If/While), inputs named after the input keys, outputs after the
    output keys (see the module docstring).

    Args:
        path: the SavedModel directory.
        signature: the SignatureDef key (default ``serving_default``, else the first in order).
        tags: the tag set (default ``serve``).

    Returns:
        A :class:`FrozenSignature`.

    Raises:
        ModelFileError: TensorFlow cannot load the SavedModel, or it has no such signature.
    """
    import tensorflow as tf

    from npu_adapter import tf_compat

    try:
        loaded = tf.saved_model.load(os.fspath(path), tags=list(tags or [_SERVE_TAG]))
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelFileError(path, f"TensorFlow cannot load the SavedModel: {detail}") from None
    names = sorted(loaded.signatures)
    key = signature or (_DEFAULT_SIGNATURE if _DEFAULT_SIGNATURE in names else
                        (names[0] if names else None))
    if key not in loaded.signatures:
        raise ModelFileError(path, f"no signature {key}; signatures: {', '.join(names) or 'none'}")
    function = loaded.signatures[key]
    frozen = tf_compat.freeze_function(function)  # its calls inlined: partitioned per op
    graph_def = frozen.graph.as_graph_def()
    # The flat inputs and outputs follow the structures' keys in sorted order (tf.nest).
    input_keys = sorted(function.structured_input_signature[1])
    placeholders = {n.name for n in graph_def.node if n.op == "Placeholder"}
    inputs = [(k, f"{k}:0" if k in placeholders else t.name)
              for k, t in zip(input_keys, frozen.inputs)]
    structured = function.structured_outputs
    output_keys = (sorted(structured) if isinstance(structured, dict)
                   else [f"output_{k}" for k in range(len(frozen.outputs))])
    outputs = _name_outputs(graph_def, [(k, t.name) for k, t in zip(output_keys,
                                                                     frozen.outputs)])
    return FrozenSignature(graph_def, inputs, outputs, key)


def _calls_functions(model):
    """True for a TensorFlow 2 SavedModel (saved from objects: it has an object graph) whose
    chosen signature's outputs come from function calls. A TensorFlow 1 SavedModel (written by
    a ``Builder``, e.g. ``convert --to savedmodel``) is taken as it is."""
    meta = model.meta_graph_def
    if not model.fetches or meta is None or not len(meta.object_graph_def.nodes):
        return False
    producers = {name.rpartition(":")[0] if ":" in name else name for name in model.fetches}
    return any(node.op in _CALL_OPS for node in model.graph_def.node if node.name in producers)


def _inline_signature(model, directory):
    """``model`` with its graph replaced by the chosen signature frozen and inlined."""
    frozen = freeze_saved_model(directory, signature=model.signature, tags=model.tags)
    model.graph_def = frozen.graph_def
    model.signature_inputs = dict(frozen.inputs)
    model.signature_outputs = dict(frozen.outputs)
    model.feeds = [t for _, t in frozen.inputs]
    model.fetches = [t for _, t in frozen.outputs]
    model.inlined = True
    return model


def load_model(path, *, signature=None, tags=None):
    """Load the model at ``path`` (see the module docstring for the formats).

    Args:
        path: a file or SavedModel directory.
        signature: the SignatureDef key whose outputs/inputs become the suggested
            fetches/feeds (default ``serving_default``, else the first key in order).
        tags: the SavedModel tag set to load (default: the one with ``serve``, else the first).

    Returns:
        A :class:`LoadedModel` (for a TensorFlow 2 SavedModel: the chosen signature inlined
        and frozen, see the module docstring).

    Raises:
        ModelFileError: missing path, unreadable or corrupt file, unknown format, signature or
            tags; a TensorFlow 2 SavedModel TensorFlow cannot load.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelFileError(path, "no such file or directory")
    if os.path.isdir(path):
        inner = _saved_model_file(path)
        if inner is None:
            raise ModelFileError(path, "is a directory but not a SavedModel (no saved_model.pb "
                                       "or saved_model.pbtxt inside)")
        data = _read(inner)
        model = _load_file(inner, data, inner.endswith(".pbtxt"), signature, tags)
        model.path = path
        if model.kind == "saved_model" and _calls_functions(model):
            _inline_signature(model, path)
        return model
    data = _read(path)
    if os.path.splitext(path)[1].lower() in _TEXT_SUFFIXES:
        model = _load_file(path, data, True, signature, tags)
    else:
        try:
            model = _load_file(path, data, False, signature, tags)
        except ModelFileError as binary_error:
            if not _looks_like_text(data):
                raise
            try:
                model = _load_file(path, data, True, signature, tags)
            except ModelFileError:
                raise binary_error from None
    if model.kind == "saved_model" and _calls_functions(model):
        _inline_signature(model, os.path.dirname(os.path.abspath(path)))
    return model


def _looks_like_text(data):
    sample = data[:4096]
    return b"\x00" not in sample and all(b >= 9 for b in sample)


def load_graph_def(path, **kwargs):
    """The GraphDef of the model at ``path`` (:func:`load_model` ``.graph_def``)."""
    return load_model(path, **kwargs).graph_def
