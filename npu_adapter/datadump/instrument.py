"""``instrument_for_dump``: make the cluster functions report every dumped op's tensors.

The rewritten graph is plain TensorFlow: each cluster is a call of a FunctionDef ``GeOp<N>_<k>``
(with gears, a dispatcher calling the gear copies ``GeOp<N>_<k>_gear_<g>`` through a ``Case``; on
the CPU reference that ``Case`` has one branch, ``GeOp<N>_<k>_gear_0`` with its shapes unpinned,
the body every gear runs). This pass adds, to each cluster body (to each gear copy the
dispatcher calls when there are gears):

* one ``PyFunc`` that counts the executions of the cluster and returns the iteration number;
* per dumped op, one stateful ``PyFunc`` taking that number and the op's inputs and/or outputs,
  registered with the :class:`~npu_adapter.datadump.session.DumpSession` that writes the files.

The reporting ops are control outputs of the function (``control_ret``), so they run whenever
the function runs: when TensorFlow calls it, when Grappler inlines the call, and once per
iteration when the cluster runs inside a while loop (loop sinking), which is what makes
``dump_step`` count training steps. With every dump option off the graph is returned as it is.

Which ops: every op of the body except ``Const`` and ``NoOp`` (no task on a device) and the
gears' shape checks, or only those named in ``dump_layer`` — with, for those, the graph inputs
they read as ``Data`` ops, as the device dumps them. Tensors of types without a raw layout
(strings, resources, variants) are left out; an op without any dumpable tensor is not dumped.
Ops inside functions that a cluster op calls (the branches of an ``If``, say) are reported as
the calling op. Only clusters TensorFlow runs as function calls are instrumented: a cluster that
XLA compiles (``_XlaMustCompile``) or that is still a ``GeOp`` (run by a device) is left alone,
with a warning.
"""

import heapq

from tensorflow.core.framework import graph_pb2, types_pb2

from npu_adapter.config.warnings import warn_once
from npu_adapter.datadump.dtypes import DUMPABLE_TF_TYPES, FLOAT_DTYPE_NAMES
from npu_adapter.datadump.overflow import checks_op
from npu_adapter.graph.types import node_output_types, output_port_names
from npu_adapter.pipeline.result import clusters_from_graph
from npu_adapter.vocabulary import (
    CLUSTER_FUNCTION_ATTRS,
    CLUSTER_HOISTED_ATTR,
    CLUSTER_INPUTS_ATTR,
    GEAR_FUNCTION_SUFFIX,
)

__all__ = ["DUMP_NODE_PREFIX", "OpInfo", "TensorSlot", "instrument_for_dump"]

# A node name cannot start with "_" (TensorFlow refuses to optimise such a function).
DUMP_NODE_PREFIX = "npu_adapter_dump"
_MARKER_ATTR = "_npu_adapter_dump_instrumented"
_SKIPPED_OPS = frozenset({"Const", "NoOp", "PyFunc", "PyFuncStateless", "EagerPyFunc"})
_PINNED_SUFFIX = "_pinned_shape"
_CALL_OPS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})


class TensorSlot:
    """One dumped tensor of an op: ``direction`` (``input``/``output``), its index among the op's
    inputs or outputs, and its dump data type (``DT_FLOAT``)."""

    __slots__ = ("direction", "index", "dtype_name")

    def __init__(self, direction, index, dtype_name):
        self.direction, self.index, self.dtype_name = direction, index, dtype_name

    def __repr__(self):
        return f"TensorSlot({self.direction!r}, {self.index}, {self.dtype_name!r})"


class OpInfo:
    """A dumped op: its original name and type, task id (its position in the cluster's
    topological order), dumped tensors (inputs first) and whether overflow detection checks it."""

    __slots__ = ("name", "op_type", "task_id", "slots", "checked")

    def __init__(self, name, op_type, task_id, slots, checked=True):
        self.name, self.op_type, self.task_id = name, op_type, task_id
        self.slots, self.checked = tuple(slots), checked

    def __repr__(self):
        return f"OpInfo({self.name!r}, {self.op_type!r}, task {self.task_id}, {list(self.slots)})"


def _function_of(node):
    for key in CLUSTER_FUNCTION_ATTRS:
        if key in node.attr:
            return node.attr[key].func.name
    return None


def _topological(fdef):
    """Indexes of ``fdef.node_def`` in a topological order (ties broken by position)."""
    index = {node.name: i for i, node in enumerate(fdef.node_def)}
    pending = [0] * len(fdef.node_def)
    users = [[] for _ in fdef.node_def]
    for i, node in enumerate(fdef.node_def):
        for text in node.input:
            producer = index.get(text.lstrip("^").split(":")[0])
            if producer is not None and producer != i:
                pending[i] += 1
                users[producer].append(i)
    ready = [i for i, count in enumerate(pending) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for user in users[i]:
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(fdef.node_def):  # a cycle would be a broken function; keep the rest
        order += [i for i in range(len(fdef.node_def)) if i not in set(order)]
    return order


class _Body:
    """Type and naming lookups over one function body."""

    def __init__(self, fdef, functions):
        self.fdef = fdef
        self.functions = functions
        self.nodes = {node.name: node for node in fdef.node_def}
        self.arg_types = {arg.name: arg.type for arg in fdef.signature.input_arg}
        self.arg_index = {arg.name: i for i, arg in enumerate(fdef.signature.input_arg)}
        self._ports = {}

    def ports(self, node):
        """``[("out:0", dtype enum), ...]`` for ``node``'s outputs, or [] when unknown."""
        cached = self._ports.get(node.name)
        if cached is None:
            names = output_port_names(node, self.functions)
            types = node_output_types(node, self.functions)
            cached = list(zip(names, types)) if names and types and len(names) == len(
                types) else []
            self._ports[node.name] = cached
        return cached

    def resolve(self, text):
        """``(reference, dtype enum, arg name or None)`` of a data input, or None."""
        if text.startswith("^"):
            return None
        name, _, port = text.partition(":")
        if name in self.arg_types and not port:
            return text, self.arg_types[name], name
        node = self.nodes.get(name)
        if node is None:
            return None
        if node.op == "EnsureShape" and name.endswith(_PINNED_SUFFIX):
            arg = name[: -len(_PINNED_SUFFIX)]
            if arg in self.arg_types:
                return text, self.arg_types[arg], arg
        for port_name, dtype in self.ports(node):
            if port_name == port:
                return text, dtype, None
        return None


def _unique(base, taken):
    name, k = base, 1
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


def _add_py_func(fdef, name, token, inputs, in_types, out_types):
    node = fdef.node_def.add()
    node.name = name
    node.op = "PyFunc"
    node.input.extend(inputs)
    node.attr["token"].s = token.encode("utf-8")
    node.attr["Tin"].list.type.extend(in_types)
    node.attr["Tout"].list.type.extend(out_types)
    node.attr["Tin"].list.SetInParent()
    node.attr["Tout"].list.SetInParent()
    return node


def _plan_ops(body, settings, arg_names, hoisted):
    """The dumped ops of one body: ``[(OpInfo, [tensor references])]`` in topological order."""
    fdef = body.fdef
    plans = []
    data_args = {}
    layer = settings.layer
    for task_id, i in enumerate(_topological(fdef)):
        node = fdef.node_def[i]
        if node.op in _SKIPPED_OPS or node.name.startswith(DUMP_NODE_PREFIX):
            continue
        if node.op == "EnsureShape" and node.name.endswith(_PINNED_SUFFIX):
            continue
        if layer and node.name not in layer:
            continue
        slots, refs = [], []
        inputs = [body.resolve(t) for t in node.input if not t.startswith("^")]
        if settings.wants_inputs:
            for index, resolved in enumerate(inputs):
                if resolved and resolved[1] in DUMPABLE_TF_TYPES:
                    slots.append(TensorSlot("input", index, DUMPABLE_TF_TYPES[resolved[1]]))
                    refs.append(resolved[0])
        outputs = []
        for index, (port, dtype) in enumerate(body.ports(node)):
            if dtype in DUMPABLE_TF_TYPES:
                outputs.append((TensorSlot("output", index, DUMPABLE_TF_TYPES[dtype]),
                                f"{node.name}:{port}"))
        if settings.wants_outputs:
            for slot, ref in outputs:
                slots.append(slot)
                refs.append(ref)
        checked = True
        if settings.kind == "overflow":
            checked = checks_op(node.op, settings.debug_mode) and any(
                slot.dtype_name in FLOAT_DTYPE_NAMES for slot, _ in outputs)
            if not checked:
                continue
        if not slots:
            continue
        if layer:
            for resolved in inputs:
                if resolved and resolved[2] is not None and resolved[1] in DUMPABLE_TF_TYPES:
                    data_args.setdefault(resolved[2], resolved[1])
        plans.append((OpInfo(node.name, node.op, task_id + 1, slots, checked), refs))
    # dump_layer: the graph inputs the named ops read are dumped as Data ops, before them.
    data_plans = []
    for arg, dtype in sorted(data_args.items(), key=lambda kv: body.arg_index[kv[0]]):
        original = arg_names.get(body.arg_index[arg])
        if original is None or original in hoisted:
            continue
        slot = TensorSlot("output", 0, DUMPABLE_TF_TYPES[dtype])
        data_plans.append((OpInfo(original, "Data", 0, [slot]), [arg]))
    return data_plans + plans


def _instrument_body(fdef, model, session, functions, arg_names, hoisted):
    body = _Body(fdef, functions)
    plans = _plan_ops(body, session.settings, arg_names, hoisted)
    if not plans:
        return 0
    taken = set(body.nodes)
    step_name = _unique(f"{DUMP_NODE_PREFIX}/step", taken)
    _add_py_func(fdef, step_name, session.step_token(model), [], [], [types_pb2.DT_INT64])
    step_ref = f"{step_name}:output:0"
    for info, refs in plans:
        name = _unique(f"{DUMP_NODE_PREFIX}/{info.name}", taken)
        in_types = [types_pb2.DT_INT64] + [_tf_type(slot.dtype_name) for slot in info.slots]
        _add_py_func(fdef, name, session.op_token(model, info), [step_ref, *refs], in_types, [])
        key = _unique(name.replace("/", "_").lower(), set(fdef.control_ret))
        fdef.control_ret[key] = name
        fdef.signature.control_output.append(key)
    fdef.signature.is_stateful = True
    fdef.attr[_MARKER_ATTR].b = True
    return len(plans)


_TF_TYPE_OF_NAME = {name: enum for enum, name in DUMPABLE_TF_TYPES.items()}


def _tf_type(dtype_name):
    return _TF_TYPE_OF_NAME[dtype_name]


def instrument_for_dump(graph_def, session):
    """A copy of ``graph_def`` whose cluster functions report to ``session``; or ``graph_def``
    itself (the same object, untouched) when ``session`` is None or the graph has no cluster.

    Args:
        graph_def: a rewritten graph (``npu_adapter.rewrite(...).graph_def``).
        session: the :class:`~npu_adapter.datadump.session.DumpSession` of the TensorFlow session
            the graph will run in (it numbers the models and writes the files), or None.

    Raises:
        ValueError: the graph was already instrumented.
    """
    if session is None:
        return graph_def
    clusters = clusters_from_graph(graph_def)
    if not clusters:
        return graph_def
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    functions = {f.signature.name: f for f in out.library.function}
    nodes = {node.name: node for node in out.node}
    for cluster in clusters:
        node = nodes[cluster.name]
        function_name = _function_of(node)
        if function_name not in functions:
            continue
        xla = "_XlaMustCompile" in node.attr and node.attr["_XlaMustCompile"].b
        if node.op not in _CALL_OPS or xla:
            how = "compiled by XLA" if node.op in _CALL_OPS else f"a {node.op} node"
            warn_once(("dump-skipped", how),
                      f"data dump: cluster {cluster.name} is {how}; its ops are not dumped "
                      "(only clusters run by the CPU reference are)")
            continue
        marker = functions[function_name].attr
        if _MARKER_ATTR in marker and marker[_MARKER_ATTR].b:
            raise ValueError(f"cluster function {function_name!r} is already instrumented")
        prefix = function_name + GEAR_FUNCTION_SUFFIX
        gears = [f for name, f in sorted(functions.items())
                 if name.startswith(prefix) and name[len(prefix):].isdigit()]
        arg_names = {}
        if CLUSTER_INPUTS_ATTR in node.attr:
            for i, text in enumerate(node.attr[CLUSTER_INPUTS_ATTR].list.s):
                arg_names[i] = text.decode().split(":")[0]
        hoisted = {s.decode() for s in node.attr[CLUSTER_HOISTED_ATTR].list.s} if (
            CLUSTER_HOISTED_ATTR in node.attr) else set()
        model = session.register_model(function_name)
        dumped = 0
        for fdef in gears or [functions[function_name]]:
            dumped += _instrument_body(fdef, model, session, functions, arg_names, hoisted)
        if dumped:
            if node.op == "PartitionedCall":
                node.op = "StatefulPartitionedCall"  # the body has side effects now
            if gears:
                _make_dispatch_stateful(functions[function_name])
    _warn_host_layer_ops(graph_def, session.settings.layer)
    return out


def _warn_host_layer_ops(graph_def, layer):
    """``dump_layer`` naming an op that runs on the host: say why it is never dumped."""
    for node in graph_def.node:
        if node.name in layer:
            warn_once(("dump-layer-host", node.name),
                      f"dump_layer names {node.name!r}, which runs on the host, not in a cluster: "
                      "only cluster ops are dumped (as on the device)")


def _make_dispatch_stateful(dispatcher):
    """The gear dispatcher calls the gear copies (on the CPU reference, the one body) through a
    Case; with reporting ops inside the copies the calls have side effects, so they must be the
    stateful variants."""
    dispatcher.signature.is_stateful = True
    for node in dispatcher.node_def:
        if node.op == "StatelessCase":
            node.op = "Case"
        elif node.op == "PartitionedCall":
            node.op = "StatefulPartitionedCall"
