"""The ``cann`` backend: partition as for an Ascend device, run each cluster as an ATC model.

Partitioning: the CANN op list (``$ASCEND_OPP_PATH`` or the bundled list). Graph inputs
(``Placeholder``) stay on the host and feed the clusters, as on the CPU reference. State —
variables, queues, tables, and the ref/resource edges to them — stays on the host too: a
frozen ``.pb`` cannot own variables (the original's GE keeps them on the device), so the
cluster reads their current values as inputs at every run, and updates run on the host; the
placement report shows ``state_owner`` / ``ref_edge`` / ``resource_edge``. TF v1 control flow
(``Switch``, ``Merge``, ``Enter``, ``Exit``, ``NextIteration``, ``LoopCond``) is not
functionalised: ATC cannot convert it, so those ops stay on the host (reason
``v1_control_flow``) and with them their whole loop or cond; functional control flow
(``If``/``While``/``Case``, control flow v2) is compiled.

Lowering: every ``GeOp`` becomes a ``StatefulPartitionedCall`` (same name, inputs, attrs) of a
small wrapper function ``<cluster>_cann`` whose body is one stateful ``PyFunc``: at run time it
calls the process's :mod:`~npu_adapter.backends.cann.runtime` through a token derived from the
cluster's content and the compile options, so the rewritten GraphDef stays a deterministic,
pure function of its input. The cluster's own FunctionDef stays in the library (the node's
``_npu_adapter_cluster_function`` names it: reports list its members; gear copies keep the
session's gear routing working). Output dtypes are the node's ``Tout``.
"""

from tensorflow.core.framework import function_pb2, types_pb2

from npu_adapter.backends.base import Backend
from npu_adapter.backends.cann.freeze import V1_CONTROL_FLOW_OPS, freeze_cluster
from npu_adapter.backends.cann.runtime import (
    register_program,
    runtime_for,
    runtime_options_from_config,
)
from npu_adapter.backends.cpu import is_state_owner, lower_to_function_calls
from npu_adapter.graph.types import op_def_for
from npu_adapter.vocabulary import (
    CLUSTER_BODY_ATTR,
    GEAR_FUNCTION_SUFFIX,
    GEAR_POLICY_ATTR,
    GEOP_OP,
    REASON_GRAPH_INPUT,
    REASON_STATE_OWNER,
    REASON_STRING_TENSOR,
    REASON_SUPPORTED,
    REASON_V1_CONTROL_FLOW,
)

__all__ = ["CannBackend", "WRAPPER_SUFFIX", "lower_for_cann"]

WRAPPER_SUFFIX = "_cann"
"""The wrapper function of cluster ``F`` is ``F_cann`` (its gear copies ``F_cann_gear_<g>``)."""


def _wrapper(name, fdef, token):
    """``name``: same signature as the cluster function ``fdef``; one PyFunc calling the
    runtime with ``token``."""
    wrapper = function_pb2.FunctionDef()
    wrapper.signature.name = name
    wrapper.signature.is_stateful = True
    for arg in fdef.signature.input_arg:
        wrapper.signature.input_arg.add(name=arg.name, type=arg.type)
    for arg in fdef.signature.output_arg:
        wrapper.signature.output_arg.add(name=arg.name, type=arg.type)
    if not fdef.signature.output_arg:
        return wrapper  # nothing leaves the cluster: nothing to compute on the device
    call = wrapper.node_def.add(name="cann_model", op="PyFunc")
    call.input.extend(arg.name for arg in fdef.signature.input_arg)
    call.attr["token"].s = token.encode()
    call.attr["Tin"].list.type.extend(arg.type for arg in fdef.signature.input_arg)
    call.attr["Tout"].list.type.extend(arg.type for arg in fdef.signature.output_arg)
    for j, arg in enumerate(fdef.signature.output_arg):
        wrapper.ret[arg.name] = f"cann_model:output:{j}"
    return wrapper


def lower_for_cann(graph_def, clusters, config):
    """Lower every ``GeOp`` of ``graph_def`` to a call into the CANN runtime (see the module
    docstring); registers each cluster's program. Returns the new GraphDef.

    Raises:
        CannLoweringError: a cluster cannot be an ATC model.
        CannConfigError, CompileCacheDirError: options the backend needs are missing or wrong.
    """
    options = runtime_options_from_config(config)
    functions = {f.signature.name: f for f in graph_def.library.function}
    info = {c.name: c for c in clusters}
    pad_values = config.gear_pad_values()
    unpad = config.gear_unpad()
    lowered = {}
    for node in graph_def.node:
        if node.op != GEOP_OP:
            continue
        cluster = info.get(node.name)
        table = cluster.gear_table() if cluster is not None else None
        policy = node.attr[GEAR_POLICY_ATTR].s.decode() if GEAR_POLICY_ATTR in node.attr \
            else "exact"
        program = freeze_cluster(node, functions, graph_def.versions, gear_table=table,
                                 policy=policy, pad_values=pad_values, unpad=unpad)
        lowered[node.name] = (node.attr["function"].func.name,
                              register_program(program, options))
    out = lower_to_function_calls(graph_def)
    for node in out.node:
        entry = lowered.get(node.name)
        if entry is None or node.op != "StatefulPartitionedCall":
            continue
        fname, token = entry
        fdef = functions[fname]
        wrapper = _wrapper(fname + WRAPPER_SUFFIX, fdef, token)
        out.library.function.add().CopyFrom(wrapper)
        gear = 0
        while f"{fname}{GEAR_FUNCTION_SUFFIX}{gear}" in functions:
            # The session may call gear <g> directly (`<f>_gear_<g>`); all gears are one
            # multi-gear model, and the runtime picks the gear from the shapes.
            copy = _wrapper(f"{wrapper.signature.name}{GEAR_FUNCTION_SUFFIX}{gear}", fdef, token)
            out.library.function.add().CopyFrom(copy)
            gear += 1
        node.attr["f"].func.name = wrapper.signature.name
        node.attr[CLUSTER_BODY_ATTR].s = fname.encode()
    return out


def _touches_strings(node_def, op_def):
    """Whether the node reads or produces a DT_STRING tensor (from its OpDef and type attrs)."""
    if op_def is None:
        return False
    defaults = {a.name: a.default_value for a in op_def.attr if a.HasField("default_value")}
    for arg in list(op_def.input_arg) + list(op_def.output_arg):
        if arg.type == types_pb2.DT_STRING:
            return True
        if arg.type_attr:
            value = node_def.attr.get(arg.type_attr) or defaults.get(arg.type_attr)
            if value is not None and value.type == types_pb2.DT_STRING:
                return True
        elif arg.type_list_attr:
            value = node_def.attr.get(arg.type_list_attr) or defaults.get(arg.type_list_attr)
            if value is not None and types_pb2.DT_STRING in value.list.type:
                return True
    return False


class CannBackend(Backend):
    """Clusters compiled by ATC into ``.om`` models and run with pyACL."""

    name = "cann"
    # The per-session runtime on the common interface (npu_adapter.backends.runtime).
    runtime_class = "npu_adapter.backends.cann.session_runtime:CannBackendRuntime"
    keeps_state_on_host = True
    per_op_node_support = False  # string tensors depend on the node's type attrs
    hoist_constants_bytes = None  # weights go into the model, as in a frozen .pb
    needs_constant_data = True  # lower() freezes them into the model

    def supports_node(self, node_def, op_def):
        if node_def.op in ("Placeholder", "PlaceholderWithDefault"):
            return False, REASON_GRAPH_INPUT  # fed by the session (a default is used unfed)
        if node_def.op in V1_CONTROL_FLOW_OPS:
            return False, REASON_V1_CONTROL_FLOW
        op_def = op_def if op_def is not None else op_def_for(node_def.op)
        if is_state_owner(op_def):
            return False, REASON_STATE_OWNER
        if _touches_strings(node_def, op_def):
            return False, REASON_STRING_TENSOR
        return True, REASON_SUPPORTED

    def lower(self, graph_def, clusters, ctx):
        return lower_for_cann(graph_def, clusters, ctx.config)

    def runtime(self, config):
        """The :class:`~npu_adapter.backends.cann.runtime.CannRuntime` serving clusters
        lowered under ``config`` (for its :meth:`stats` and :meth:`close`)."""
        return runtime_for(runtime_options_from_config(config))

    def available(self):
        from npu_adapter.backends.cann.toolkit import detect

        toolkit = detect()
        missing = []
        if not toolkit.atc:
            missing.append("the ATC compiler `atc`")
        if not toolkit.acl:
            missing.append("pyACL (`import acl`)")
        if missing:
            return False, (" and ".join(missing) + " not found: install the CANN toolkit and "
                           "source its set_env.sh (see `npu-adapter doctor`)")
        return True, f"atc: {toolkit.atc}; acl: {toolkit.acl}"
