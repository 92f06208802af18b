"""A cluster as ATC takes it: a frozen GraphDef whose inputs are Placeholders.

:func:`freeze_cluster` turns one cluster node (its FunctionDef and the library) into a
:class:`ClusterProgram`:

* each function argument becomes a ``Placeholder`` named after the tensor that enters the
  cluster (``input`` for ``input:0``, ``split_1`` for ``split:1``), so ``--input_shape`` and
  ATC's messages use names the user knows; the body keeps its node names (``--keep_dtype``
  and dump layers name them);
* each result becomes an ``Identity`` named after the function's output (``--out_nodes``
  fixes the output order); nodes the function must run for their effect become control inputs
  of every output;
* the library functions the body calls (``If``/``While`` branches, nested calls) are copied.

A cluster with gears is frozen from its gear copy with the shape pins removed, so one frozen
graph serves every gear; the gear table, the policy, pad values and the outputs to slice back
travel with the program.

ATC needs a frozen graph. A cluster that holds state (variables, ref or resource tensors) or TF
v1 control flow (``Switch``/``Merge``/``Enter``/...) cannot be one, and a boundary tensor must
have a dtype ATC accepts for inputs (and pyACL can carry for outputs);
:class:`~npu_adapter.backends.cann.errors.CannLoweringError` names the cluster and the reason.
The ``cann`` backend keeps state and v1 control flow on the host when partitioning, so this only
fires for graphs partitioned by other rules.
"""

import dataclasses
import hashlib
import json

from tensorflow.core.framework import graph_pb2, tensor_shape_pb2, types_pb2

from npu_adapter.backends.cann.errors import CannLoweringError
from npu_adapter.backends.cpu import is_state_owner
from npu_adapter.graph.functions import unpin_arg_shapes
from npu_adapter.graph.names import format_input, parse_input, unique_name
from npu_adapter.graph.serialize import to_bytes
from npu_adapter.graph.types import (
    base_type,
    dtype_name,
    is_ref_type,
    node_input_types,
    node_output_types,
    op_def_for,
    output_port_names,
)
from npu_adapter.pipeline.dump_content import functions_called
from npu_adapter.vocabulary import (
    CLUSTER_INPUTS_ATTR,
    CLUSTER_OUTPUTS_ATTR,
    GEAR_FUNCTION_SUFFIX,
    KEEP_DTYPE_ATTR,
)

__all__ = [
    "ATC_INPUT_DTYPES",
    "ClusterProgram",
    "GearSpec",
    "OUTPUT_DTYPES",
    "TensorSpec",
    "V1_CONTROL_FLOW_OPS",
    "freeze_cluster",
]

V1_CONTROL_FLOW_OPS = frozenset({
    "Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter", "Exit", "RefExit",
    "NextIteration", "RefNextIteration", "LoopCond", "ControlTrigger",
})
"""TF v1 control-flow ops: ATC converts only functional control flow (If/While/Case)."""

_T = types_pb2
ATC_INPUT_DTYPES = frozenset({_T.DT_HALF, _T.DT_FLOAT, _T.DT_UINT8, _T.DT_INT32, _T.DT_INT64,
                              _T.DT_BOOL})
"""Input dtypes ATC accepts for TensorFlow models."""

OUTPUT_DTYPES = frozenset({_T.DT_FLOAT, _T.DT_HALF, _T.DT_INT8, _T.DT_INT16, _T.DT_INT32,
                           _T.DT_INT64, _T.DT_UINT8, _T.DT_UINT16, _T.DT_UINT32, _T.DT_UINT64,
                           _T.DT_DOUBLE, _T.DT_BOOL})
"""Output dtypes pyACL can hand back (the TF ↔ ACL dtype map, strings excluded)."""


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One model input or output: its node in the frozen graph, dtype enum, and the tensor of
    the original graph it stands for."""

    name: str
    dtype: int
    tensor: str


@dataclasses.dataclass(frozen=True)
class GearSpec:
    """The gears of a multi-gear cluster.

    Attributes:
        inputs: program input index of each gear input, in table order.
        table: the :class:`~npu_adapter.pipeline.gears.GearTable`.
        policy: ``exact`` or ``pad_up``.
        pad_values: pad value per gear input (``pad_up``).
        unpad: ``((output index, axes), ...)`` sliced back after padding.
    """

    inputs: tuple
    table: object
    policy: str = "exact"
    pad_values: tuple = ()
    unpad: tuple = ()

    def to_json(self):
        return {"inputs": list(self.inputs), "names": list(self.table.names),
                "patterns": [list(p) for p in self.table.patterns],
                "gears": [[list(s) for s in gear] for gear in self.table.gears],
                "policy": self.policy, "pad_values": [float(v) for v in self.pad_values],
                "unpad": [[j, list(axes)] for j, axes in self.unpad]}


@dataclasses.dataclass(frozen=True, eq=False)
class ClusterProgram:
    """A cluster ready for ATC: the frozen graph (Placeholders of unknown shape), its inputs and
    outputs, its gears, the ``_keep_dtype`` node names, and a content fingerprint."""

    name: str
    graph_def: object
    inputs: tuple
    outputs: tuple
    gear: object = None
    keep_dtype: tuple = ()
    fingerprint: str = ""

    def graph_for(self, shapes):
        """A copy of the frozen graph whose Placeholders have ``shapes`` (one tuple per input,
        ``-1`` for a gear axis)."""
        out = graph_pb2.GraphDef()
        out.CopyFrom(self.graph_def)
        by_name = {spec.name: shape for spec, shape in zip(self.inputs, shapes)}
        for node in out.node:
            shape = by_name.get(node.name)
            if shape is None or node.op != "Placeholder":
                continue
            proto = tensor_shape_pb2.TensorShapeProto()
            for d in shape:
                proto.dim.add().size = int(d)
            node.attr["shape"].shape.CopyFrom(proto)
        return out


def _check_dtypes(cluster, fdef, inputs, outputs):
    for arg, tensor in zip(fdef.signature.input_arg, inputs):
        t = arg.type
        if base_type(t) == _T.DT_RESOURCE or is_ref_type(t):
            raise CannLoweringError(cluster, (
                f"input {tensor!r} is a variable handle ({dtype_name(t)}): a frozen model "
                "cannot own variables; keep variables on the host (variable_placement=Host, or "
                "the cann backend's default partitioning)"))
        if t not in ATC_INPUT_DTYPES:
            allowed = ", ".join(sorted(dtype_name(d) for d in ATC_INPUT_DTYPES))
            raise CannLoweringError(cluster, (
                f"input {tensor!r} has dtype {dtype_name(t)}, which ATC does not accept for a "
                f"model input (allowed: {allowed}); cast it on the host, or keep its consumer "
                "out of the device with without_npu_compile_scope"))
    for arg, tensor in zip(fdef.signature.output_arg, outputs):
        if arg.type not in OUTPUT_DTYPES:
            allowed = ", ".join(sorted(dtype_name(d) for d in OUTPUT_DTYPES))
            raise CannLoweringError(cluster, (
                f"output {tensor!r} has dtype {dtype_name(arg.type)}, which pyACL cannot return "
                f"(allowed: {allowed})"))


def _check_body(cluster, fdef, functions, seen):
    """State and v1 control flow anywhere in the body or the functions it calls."""
    for node in fdef.node_def:
        where = f"{node.name!r}" if fdef.signature.name == seen[0] else \
            f"{node.name!r} (in function {fdef.signature.name!r})"
        if node.op in V1_CONTROL_FLOW_OPS:
            raise CannLoweringError(cluster, (
                f"it contains TF v1 control flow ({node.op} node {where}); ATC converts only "
                "functional control flow (If/While/Case). Build the graph with control flow "
                "v2 (tf.compat.v1.enable_control_flow_v2()), or keep the loop or cond on the "
                "host (the cann backend's partitioning does)"))
        op_def = op_def_for(node.op)
        if op_def is not None and is_state_owner(op_def):
            raise CannLoweringError(cluster, (
                f"it holds state ({node.op} node {where}); a frozen model has no variables, "
                "queues or tables: keep them on the host"))
        types = (node_input_types(node, functions) or []) + \
            (node_output_types(node, functions) or [])
        if any(is_ref_type(t) or base_type(t) == _T.DT_RESOURCE for t in types):
            raise CannLoweringError(cluster, (
                f"it reads or updates variables ({node.op} node {where} has ref or resource "
                "tensors); a frozen model has no variables: keep variable reads and updates "
                "on the host"))


def _body_function(node, functions):
    """The cluster's own body: for gears, the first gear copy without its shape pins."""
    fname = node.attr["f"].func.name if "f" in node.attr else node.attr["function"].func.name
    gear_copy = functions.get(f"{fname}{GEAR_FUNCTION_SUFFIX}0")
    if gear_copy is not None:
        body = unpin_arg_shapes(gear_copy)
        body.signature.name = fname
        return body
    return functions[fname]


def _placeholder_name(tensor, taken):
    node, port, _ = parse_input(tensor)
    return unique_name(node if port == 0 else f"{node}_{port}", taken)


def _gear_spec(cluster, table, policy, inputs, outputs, pad_values, unpad_by_tensor):
    index = {t: k for k, t in enumerate(inputs)}
    positions = []
    for name in table.names:
        if name not in index:
            raise CannLoweringError(cluster, f"gear input {name!r} is not an input of the "
                                             "cluster")
        positions.append(index[name])
    pads = []
    for name in table.names:
        node = parse_input(name)[0]
        pads.append(float(pad_values.get(name, pad_values.get(node, 0))))
    unpad = tuple(sorted((outputs.index(t), tuple(axes)) for t, axes in unpad_by_tensor.items()
                         if t in outputs))
    return GearSpec(tuple(positions), table, policy, tuple(pads), unpad)


def freeze_cluster(node, functions, versions=None, *, gear_table=None, policy="exact",
                   pad_values=None, unpad=None):
    """The :class:`ClusterProgram` of cluster ``node``.

    Args:
        node: the cluster's NodeDef (``GeOp``, or its lowered call), with the boundary attrs.
        functions: the library, name → FunctionDef.
        versions: the ``VersionDef`` of the graph.
        gear_table: the cluster's :class:`~npu_adapter.pipeline.gears.GearTable` or None.
        policy: the gear policy.
        pad_values: ``{input name: value}`` for ``pad_up``.
        unpad: ``{output tensor: axes}`` for ``pad_up``.

    Raises:
        CannLoweringError: the cluster cannot be an ATC model (see the module docstring).
    """
    cluster = node.name
    fdef = _body_function(node, functions)
    inputs = [s.decode() for s in node.attr[CLUSTER_INPUTS_ATTR].list.s] \
        if CLUSTER_INPUTS_ATTR in node.attr else [a.name for a in fdef.signature.input_arg]
    outputs = [s.decode() for s in node.attr[CLUSTER_OUTPUTS_ATTR].list.s] \
        if CLUSTER_OUTPUTS_ATTR in node.attr else [a.name for a in fdef.signature.output_arg]
    _check_dtypes(cluster, fdef, inputs, outputs)
    _check_body(cluster, fdef, functions, [fdef.signature.name])
    called = functions_called(fdef, functions)
    for name in called:
        _check_body(cluster, functions[name], functions, [fdef.signature.name])

    out = graph_pb2.GraphDef()
    if versions is not None:
        out.versions.CopyFrom(versions)
    taken = {n.name for n in fdef.node_def}
    flat = {}
    input_specs = []
    for arg, tensor in zip(fdef.signature.input_arg, inputs):
        name = _placeholder_name(tensor, taken)
        ph = out.node.add(name=name, op="Placeholder")
        ph.attr["dtype"].type = arg.type
        ph.attr["shape"].shape.unknown_rank = True
        flat[arg.name] = name
        input_specs.append(TensorSpec(name, arg.type, tensor))
    for body in fdef.node_def:
        ports = output_port_names(body, functions)
        if ports is None:
            raise CannLoweringError(cluster, f"the outputs of {body.op} node {body.name!r} "
                                             "cannot be resolved (op not registered)")
        for k, suffix in enumerate(ports):
            flat[f"{body.name}:{suffix}"] = format_input(body.name, k)
    keep_dtype = []
    for body in fdef.node_def:
        copy = out.node.add()
        copy.CopyFrom(body)
        copy.device = ""
        if "_output_shapes" in copy.attr:
            del copy.attr["_output_shapes"]  # shapes change with the gear; ATC infers them
        del copy.input[:]
        for text in body.input:
            copy.input.append(text if text.startswith("^") else flat.get(text, text))
        if KEEP_DTYPE_ATTR in body.attr:
            keep_dtype.append(body.name)
    effects = ["^" + name for _, name in sorted(fdef.control_ret.items())]
    output_specs = []
    for arg, tensor in zip(fdef.signature.output_arg, outputs):
        name = unique_name(arg.name, taken)
        ident = out.node.add(name=name, op="Identity")
        source = fdef.ret[arg.name]
        ident.input.append(flat.get(source, source))
        ident.input.extend(effects)
        ident.attr["T"].type = arg.type
        output_specs.append(TensorSpec(name, arg.type, tensor))
    for name in called:
        out.library.function.add().CopyFrom(functions[name])
    gear = None
    if gear_table is not None:
        gear = _gear_spec(cluster, gear_table, policy, inputs, outputs, pad_values or {},
                          unpad or {})
    digest = hashlib.sha256(to_bytes(out))
    digest.update(json.dumps({
        "inputs": [dataclasses.astuple(s) for s in input_specs],
        "outputs": [dataclasses.astuple(s) for s in output_specs],
        "gear": gear.to_json() if gear else None,
        "keep_dtype": keep_dtype,
    }, sort_keys=True).encode())
    return ClusterProgram(name=cluster, graph_def=out, inputs=tuple(input_specs),
                          outputs=tuple(output_specs), gear=gear, keep_dtype=tuple(keep_dtype),
                          fingerprint=digest.hexdigest())
