"""``npu-adapter convert --to om|savedmodel``: offline conversion of a whole model.

Both targets start from the model frozen for one signature (:func:`freeze_model`): a frozen
``.pb`` as it is, or a SavedModel whose signature (``--signature``, default
``serving_default``) is frozen with its variables folded into constants and its functional
control flow kept (ATC converts If/While, not TF v1 control flow).

* ``--to om`` compiles the frozen graph with ATC into ``--out`` (a ``.om``), as the TF Adapter's
  SavedModel-to-om tool does: ``--soc-version`` (or ``soc_config``, or ``$SOC_VERSION``); input
  shapes from ``--input-shape`` (``name:dims;...``) or the model, unknown dimensions set to 1;
  gears from the ``input_shape`` / ``dynamic_dims`` / ``dynamic_node_type`` options
  (``--dynamic_dims`` with ``--input_format=ND``); every other ATC flag from the options, as in a
  session (see ``docs/cann.md``). ``<out>.json`` records the model's inputs and outputs with
  their signature keys.
* ``--to savedmodel`` writes a SavedModel (directory ``--out``, which must not exist) whose graph
  is the rewritten one, plain TensorFlow (clusters as function calls), with one signature
  keeping the original's name and input and output keys: TensorFlow Serving and
  ``tf.saved_model.load`` load it as they load the original.
"""

import dataclasses
import json
import os
import shutil
import sys
import warnings

from npu_adapter.cli.common import EXIT_OK, PROG, config_from_args
from npu_adapter.cli.outputs import OutputFile, make_sibling_directory
from npu_adapter.cli.soc_versions import check_soc_version
from npu_adapter.errors import GraphError, NpuConfigError

__all__ = ["TARGETS", "FrozenModel", "add_target_arguments", "check_om_target",
           "check_savedmodel_target", "convert_to_om", "convert_to_savedmodel", "freeze_model",
           "run_conversion_target"]

TARGETS = ("pb", "om", "savedmodel")
_V1_CONTROL_FLOW = frozenset({"Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter",
                              "Exit", "RefExit", "NextIteration", "RefNextIteration",
                              "LoopCond"})
_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})
_SERVE = "serve"
_DEFAULT_SIGNATURE = "serving_default"


def add_target_arguments(parser):
    """Add ``--to``, ``--soc-version`` and ``--input-shape`` to the convert parser."""
    parser.add_argument("--to", choices=TARGETS, default="pb",
                        help="pb: the rewritten GraphDef (default); om: an Ascend model "
                             "compiled by ATC; savedmodel: a SavedModel of the rewritten graph")
    parser.add_argument("--soc-version", metavar="SOC",
                        help="--to om: the SoC to compile for, e.g. Ascend310P3 (default: the "
                             "soc_config option, then $SOC_VERSION)")
    parser.add_argument("--input-shape", metavar="SHAPES",
                        help="--to om: 'name:d0,d1,...;name2:...' input shapes (unknown "
                             "dimensions default to 1)")


@dataclasses.dataclass
class FrozenModel:
    """A model frozen for one signature.

    Attributes:
        graph_def: the frozen GraphDef (only what the outputs need).
        inputs: ``[(key, tensor name)]``: signature input keys and their Placeholder tensors.
        outputs: ``[(key, tensor name)]``.
        signature: the signature key (``serving_default`` for a plain ``.pb``).
    """

    graph_def: object
    inputs: list
    outputs: list
    signature: str = _DEFAULT_SIGNATURE


def _key_of(tensor):
    node, _, port = tensor.rpartition(":")
    return node if port == "0" else f"{node}_{port}"


def _freeze_saved_model(path, signature, tags):
    from npu_adapter import model_io

    try:
        frozen = model_io.freeze_saved_model(path, signature=signature, tags=tags)
    except model_io.ModelFileError as exc:
        raise GraphError(str(exc)) from None
    return FrozenModel(frozen.graph_def, frozen.inputs, frozen.outputs, frozen.signature)


def freeze_model(path, *, signature=None, tags=None, fetches=None, feeds=None):
    """The model at ``path`` frozen for one signature (see the module docstring).

    ``fetches``/``feeds`` choose the outputs and inputs of a plain GraphDef (default: the
    outputs of the nodes nothing consumes, and the Placeholders they need).

    Raises:
        GraphError: the model cannot be loaded, is not frozen, or names no such tensors.
    """
    from npu_adapter import model_io
    from npu_adapter.graph.extract import extract_client_graph

    if os.path.isdir(path):
        model = _freeze_saved_model(path, signature, tags)
    else:
        loaded = model_io.load_model(path, signature=signature, tags=tags)
        if loaded.kind != "graph_def":
            raise GraphError(f"{path}: a {loaded.kind.replace('_', ' ')} file has no variable "
                             "values; give the SavedModel directory or a frozen .pb")
        graph_def = loaded.graph_def
        outputs = list(fetches or ())
        if not outputs:
            consumed = {i.lstrip("^").split(":")[0] for n in graph_def.node for i in n.input}
            outputs = [f"{n.name}:0" for n in graph_def.node
                       if n.name not in consumed and n.op not in ("NoOp", "Placeholder", "Assert")]
        model = FrozenModel(graph_def, [], [(_key_of(t), t) for t in outputs])
        if feeds:
            model.inputs = [(_key_of(t), t if ":" in t else t + ":0") for t in feeds]
    output_nodes = [t.rpartition(":")[0] for _, t in model.outputs]
    known = {n.name for n in model.graph_def.node}
    missing = [name for name in output_nodes if name not in known]
    if missing:
        raise GraphError(f"{path}: no node named {missing[0]!r} (an output)")
    model.graph_def = extract_client_graph(model.graph_def, [t for _, t in model.outputs]).graph_def
    if not model.inputs:
        model.inputs = [(n.name, f"{n.name}:0") for n in model.graph_def.node
                        if n.op == "Placeholder"]
    for node in model.graph_def.node:
        if node.op in _VARIABLE_OPS:
            raise GraphError(f"{path}: the graph is not frozen ({node.op} node {node.name!r}); "
                             "give the SavedModel directory, or freeze the graph first")
    return model


def _parse_shapes(text):
    shapes = {}
    for entry in (text or "").split(";"):
        if not entry.strip():
            continue
        name, sep, dims = entry.rpartition(":")
        try:
            values = [int(d) for d in dims.split(",")] if dims.strip() else []
        except ValueError:
            values = None
        if not sep or not name or values is None:
            raise NpuConfigError("--input-shape", text, "'name:d0,d1,...;name2:...' with "
                                 "integer dimensions")
        shapes[name.strip()] = values
    return shapes


def _model_inputs(model, config, shape_text):
    """``[(placeholder name, dims)]`` in ``--input_shape`` order, and the gears (or None)."""
    from tensorflow.core.framework import types_pb2

    placeholders = {n.name: n for n in model.graph_def.node if n.op == "Placeholder"}
    given = _parse_shapes(shape_text)
    for name in given:
        if name not in placeholders:
            raise NpuConfigError("--input-shape", name, "names of the model's inputs: "
                                 + ", ".join(sorted(placeholders)))
    trio = config.dims_trio()
    gear_names = []
    gears = None
    if trio is not None:
        for name, _ in trio.inputs:
            if name not in placeholders:
                raise NpuConfigError("input_shape", config.input_shape, "Placeholder names of "
                                     "the model: " + ", ".join(sorted(placeholders)))
        gear_names = [name for name, _ in trio.inputs]
        gears = [tuple(g) for g in trio.gears]
    order = gear_names + [t.rpartition(":")[0] for _, t in model.inputs
                          if t.rpartition(":")[0] not in gear_names]
    patterns = dict(trio.inputs) if trio is not None else {}
    inputs = []
    for name in order:
        node = placeholders[name]
        if node.attr["dtype"].type == types_pb2.DT_STRING:
            raise GraphError(f"input {name!r} is a string tensor, which ATC cannot take")
        if name in patterns:
            dims = list(patterns[name])
        elif name in given:
            dims = given[name]
        else:
            shape = node.attr["shape"].shape
            if shape.unknown_rank:
                raise NpuConfigError("--input-shape", shape_text or "", f"the shape of input "
                                     f"{name!r}, whose rank the model does not fix")
            dims = [d.size if d.size >= 0 else 1 for d in shape.dim]
        inputs.append((name, dims))
    return inputs, gears


def _check_convertible(model):
    for node in model.graph_def.node:
        if node.op in _V1_CONTROL_FLOW:
            raise GraphError(
                f"the model has TF v1 control flow ({node.op} node {node.name!r}), which ATC "
                "cannot convert; export it with control flow v2 (TensorFlow 2, or "
                "tf.compat.v1.enable_control_flow_v2() before building the graph)")


def check_om_target(out, config, soc_version=None):
    """What ``--to om`` needs, checked before any work: ``out`` ends in ``.om`` in an existing
    folder, ``atc`` is found, the SoC is known. Returns ``(toolkit, atc, AtcOptions)``.

    Raises:
        NpuConfigError: a bad ``out``. CannNotAvailableError: no ``atc``. CannConfigError: no
        SoC (``--soc-version``, ``soc_config`` or ``$SOC_VERSION``).
    """
    from npu_adapter.backends.cann.atc import atc_options_from_config, require_soc
    from npu_adapter.backends.cann.toolkit import detect

    if not out.endswith(".om"):
        raise NpuConfigError("--out", out, "a file name ending in .om (with --to om)")
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise NpuConfigError("--out", out, "a path in an existing directory")
    toolkit = detect(config)
    atc = toolkit.require_atc()
    options = atc_options_from_config(config, soc_version=soc_version)
    require_soc(options.soc_version)
    given_by = "--soc-version" if soc_version else \
        "soc_config" if getattr(config, "soc_config", "") else "SOC_VERSION"
    check_soc_version(options.soc_version, given_by, toolkit.home)
    return toolkit, atc, options


def check_savedmodel_target(out, backend):
    """What ``--to savedmodel`` needs, checked before any work: a plain-TensorFlow backend and
    an ``out`` that does not exist yet, in an existing folder."""
    if backend == "cann":
        raise NpuConfigError("--backend", backend, "a backend whose rewrite is plain TensorFlow "
                             "(e.g. cpu): the cann backend's graph calls into this process's "
                             "runtime and cannot be served; use --to om for the Ascend model")
    if os.path.exists(out):
        raise NpuConfigError("--out", out, "a directory that does not exist yet (with --to "
                             "savedmodel)")
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise NpuConfigError("--out", out, "a path in an existing directory")


def _work_directory(out, tag):
    """A temporary folder beside ``out`` (the check that its folder is writable)."""
    try:
        return make_sibling_directory(out, tag)
    except OSError as exc:
        raise NpuConfigError("--out", out, "a path in a writable folder",
                             detail=exc.strerror or str(exc)) from None


def convert_to_om(model, out, config, *, soc_version=None, input_shape=None, report=None,
                  work_dir=None):
    """Compile ``model`` (a :class:`FrozenModel`) with ATC into ``out``; returns the path.

    ``work_dir``: an empty folder beside ``out`` for ATC's files (default: one made here); it
    is removed either way.

    Raises:
        CannNotAvailableError: no ``atc``. AtcError: ATC failed. CannConfigError,
        NpuConfigError, GraphError: bad options, shapes or model.
    """
    from npu_adapter.backends.cann.atc import build_atc_command, run_atc
    from npu_adapter.graph.serialize import to_bytes

    toolkit, atc, options = check_om_target(out, config, soc_version)
    _check_convertible(model)
    inputs, gears = _model_inputs(model, config, input_shape)
    scratch = work_dir or _work_directory(out, "atc")
    try:
        pb = os.path.join(scratch, "model.pb")
        with open(pb, "wb") as f:
            f.write(to_bytes(model.graph_def))
        stem = os.path.join(scratch, "model")
        gear_values = None
        if gears:
            gear_values = [tuple(g) for g in gears]
        command = build_atc_command(atc, pb, stem, options, inputs=inputs, gears=gear_values,
                                    out_nodes=[t for _, t in model.outputs])
        if report:
            report("running " + " ".join(command[1:]))
        run_atc(command, cwd=scratch, env=toolkit.environment(), om_path=stem + ".om",
                what=f"model {os.path.basename(out)!r}")
        # Copied, not renamed: the .om gets the mode the umask gives, whatever ATC chose.
        with OutputFile(out) as om:
            om.copy_from(stem + ".om")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    dtypes = {n.name: n.attr["dtype"].type for n in model.graph_def.node if n.op == "Placeholder"}
    keys = {t.rpartition(":")[0]: k for k, t in model.inputs}
    description = {
        "signature": model.signature, "soc_version": options.soc_version,
        "inputs": [{"key": keys.get(name, name), "name": name, "shape": dims,
                    "dtype": _dtype_name(dtypes[name])} for name, dims in inputs],
        "outputs": [{"key": k, "tensor": t} for k, t in model.outputs],
        "dynamic_dims": [list(g) for g in gears] if gears else None,
    }
    _write_text(out + ".json", json.dumps(description, indent=1, sort_keys=True) + "\n")
    return out


def _dtype_name(enum):
    from npu_adapter.graph.types import dtype_name

    return dtype_name(enum)


def _write_text(path, text):
    with OutputFile(path) as output:
        output.write(text.encode("utf-8"))


def _predict_signature(inputs, outputs):
    """The ``tensorflow/serving/predict`` SignatureDef of ``{key: tf.Tensor}`` inputs and
    outputs (what ``predict_signature_def`` builds, without its deprecated helpers)."""
    from tensorflow.core.protobuf import meta_graph_pb2

    signature = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    for field, tensors in ((signature.inputs, inputs), (signature.outputs, outputs)):
        for key, tensor in tensors.items():
            info = field[key]
            info.name = tensor.name
            info.dtype = tensor.dtype.as_datatype_enum
            info.tensor_shape.CopyFrom(tensor.shape.as_proto())
    return signature


def convert_to_savedmodel(model, out, config, *, backend="cpu", work_dir=None):
    """Rewrite ``model`` and write it as a SavedModel in ``out`` (which must not exist);
    returns the :class:`~npu_adapter.pipeline.result.RewriteResult`. ``work_dir``: an empty
    folder beside ``out`` to build it in (default: one made here); it is removed either way."""
    import tensorflow as tf

    from npu_adapter.api import rewrite
    from npu_adapter.session import plain_session_class

    check_savedmodel_target(out, backend)
    fetches = [t for _, t in model.outputs]
    feeds = [t for _, t in model.inputs]
    result = rewrite(model.graph_def, config, fetches=fetches, feeds=feeds, backend=backend)
    graph = tf.Graph()
    staging = work_dir or _work_directory(out, "staging")
    target = os.path.join(staging, "model")
    try:
        with graph.as_default(), plain_session_class()(graph=graph) as sess:
            tf.graph_util.import_graph_def(result.graph_def, name="")
            inputs = {key: graph.get_tensor_by_name(result.feed_map.get(t, t))
                      for key, t in model.inputs}
            outputs = {key: graph.get_tensor_by_name(result.tensor_map.get(t, t))
                       for key, t in model.outputs}
            signature = _predict_signature(inputs, outputs)
            builder = tf.compat.v1.saved_model.Builder(target)
            builder.add_meta_graph_and_variables(
                sess, [tf.compat.v1.saved_model.tag_constants.SERVING],
                signature_def_map={model.signature: signature}, strip_default_attrs=False)
            builder.save()
        os.replace(target, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def run_conversion_target(args):
    """``convert`` with ``--to om`` or ``--to savedmodel`` (the handler's dispatch)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = config_from_args(args)
    for warning in caught:
        sys.stderr.write(f"{PROG}: warning: {warning.message}\n")
    backend = args.backend or config.get("npu_adapter_backend") or "cpu"
    if args.to == "om":  # atc, the SoC and --out before the model is read
        check_om_target(args.out, config, args.soc_version)
    else:
        check_savedmodel_target(args.out, backend)
    work_dir = _work_directory(args.out, "atc" if args.to == "om" else "staging")
    try:
        tags = args.tags.split(",") if args.tags else None
        model = freeze_model(args.model, signature=args.signature, tags=tags,
                             fetches=args.fetch, feeds=args.feed)
        if args.to == "om":
            path = convert_to_om(model, args.out, config, soc_version=args.soc_version,
                                 input_shape=args.input_shape, work_dir=work_dir)
            sys.stdout.write(f"{path}\n  signature {model.signature}: "
                             f"{len(model.inputs)} input(s), {len(model.outputs)} output(s)\n")
            return EXIT_OK
        result = convert_to_savedmodel(model, args.out, config, backend=backend,
                                       work_dir=work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    sys.stdout.write(f"{args.out}\n  signature {model.signature}; {len(result.clusters)} "
                     "cluster(s): " + ", ".join(f"{c.name} ({c.size} nodes)"
                                                for c in result.clusters) + "\n")
    return EXIT_OK
