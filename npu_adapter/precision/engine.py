"""Rewrite a body of ops the way the device runs it under a precision policy.

A *body* is the node list of a cluster's FunctionDef (inputs written ``node:out_arg:index``) or
of a GraphDef (``node:port``). For every op, in topological order, :func:`decide` picks the dtype
it computes in (the rules are in ``docs/precision.md``); then the op's float type attributes are
set to that dtype and ``Cast`` nodes are inserted where a tensor arrives in another dtype than its
consumer computes in. A tensor keeps the dtype its producer computed it in until a consumer needs
another one, as on the device, where GE inserts a cast between two ops of different precision:
two float16 ops in a row exchange a float16 tensor, never a float32 round trip.

What is never touched: resource, variant, string and integer tensors (casts are inserted only
between float16, bfloat16 and float32), stateful ops and ops with resource or ref inputs
(variable reads and updates keep the variable's dtype), control-flow ops, function calls and
``Cast`` itself. The body's outputs keep the dtypes of the function signature.

When TensorFlow has no CPU kernel of an op in the chosen dtype, the op is emulated by rounding:
its inputs and outputs are rounded to that dtype and the op computes in its original dtype
(``Decision.approximated``).
"""

import dataclasses
import functools
import heapq

import tensorflow as tf
from tensorflow.core.framework import node_def_pb2, types_pb2

from npu_adapter import tf_compat
from npu_adapter.graph.names import parse_input, unique_name
from npu_adapter.graph.types import dtype_name, node_input_types, node_output_types, op_def_for
from npu_adapter.precision import policy as P
from npu_adapter.vocabulary import KEEP_DTYPE_ATTR, PRECISION_CAST_MARK

__all__ = ["Decision", "BodyResult", "emulate_function", "emulate_graph", "FLOAT_TYPES",
           "CAST_NAME_MARK"]

FLOAT_TYPES = frozenset({types_pb2.DT_FLOAT, types_pb2.DT_HALF, types_pb2.DT_BFLOAT16})
_LOW_TYPES = frozenset({types_pb2.DT_HALF, types_pb2.DT_BFLOAT16})
_NEVER_TYPES = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT, types_pb2.DT_STRING})
_CONTROL_FLOW = frozenset({"Enter", "RefEnter", "Exit", "RefExit", "Merge", "RefMerge", "Switch",
                           "RefSwitch", "NextIteration", "RefNextIteration", "LoopCond",
                           "ControlTrigger"})
_BACK_EDGE_OPS = frozenset({"NextIteration", "RefNextIteration"})
_CONSTANT_OPS = frozenset({"Const", "HostConst", "Placeholder", "PlaceholderWithDefault"})
# Ops that only move or select values: they compute in whatever dtype their input arrives in
# (GE inserts no cast for them), in every mode.
FOLLOW_OPS = frozenset({
    "Identity", "Snapshot", "StopGradient", "PreventGradient", "EnsureShape", "Reshape",
    "Squeeze", "ExpandDims", "Transpose", "ConjugateTranspose", "Concat", "ConcatV2", "Pack",
    "Unpack", "Split", "SplitV", "Slice", "StridedSlice", "Gather", "GatherV2", "GatherNd",
    "Tile", "Pad", "PadV2", "MirrorPad", "Reverse", "ReverseV2", "BroadcastTo",
    "SpaceToBatchND", "BatchToSpaceND", "SpaceToDepth", "DepthToSpace", "ZerosLike",
    "OnesLike", "Fill", "Select", "SelectV2"})
CAST_NAME_MARK = PRECISION_CAST_MARK
# Element-wise ops: their output is a scalar when every data input is one.
_ELEMENTWISE = frozenset({
    "Mul", "Add", "AddV2", "Sub", "RealDiv", "Div", "DivNoNan", "Maximum", "Minimum", "Select",
    "SelectV2", "Identity", "Snapshot", "Cast", "Neg", "Reciprocal", "Inv", "Less", "Greater",
    "LessEqual", "GreaterEqual", "Equal", "NotEqual", "LogicalAnd", "LogicalOr", "LogicalNot",
    "IsFinite", "IsInf", "IsNan", "Sqrt", "Rsqrt", "Square", "Pow", "Exp", "Log", "Abs",
    "Floor", "Ceil", "Round", "Sign", "StopGradient", "FloorDiv", "FloorMod"})
_SHORT = {types_pb2.DT_FLOAT: "float32", types_pb2.DT_HALF: "float16",
          types_pb2.DT_BFLOAT16: "bfloat16"}


@dataclasses.dataclass
class Decision:
    """The dtype decision for one op (see ``docs/precision.md`` for the reason codes)."""

    node: str
    op: str
    original: int
    dtype: int
    reason: str
    detail: str = ""
    list: str = ""
    source: str = ""
    approximated: bool = False

    def to_json(self):
        """A JSON-serialisable record."""
        record = {"op": self.op, "dtype": dtype_name(self.dtype),
                  "original": dtype_name(self.original), "reason": self.reason,
                  "detail": self.detail}
        if self.list:
            record["list"] = self.list
            record["list_source"] = self.source
        if self.approximated:
            record["approximated"] = True
        return record


@dataclasses.dataclass
class BodyResult:
    """What :func:`emulate_function` / :func:`emulate_graph` did to one body."""

    decisions: dict
    casts: int


# --------------------------------------------------------------------------- op introspection

def _type_attrs(op_def):
    return {a.name: a for a in op_def.attr if a.type == "type"}


def _arg_attr_positions(op_def, node, args):
    """The type attr behind each flat position of ``args`` (None: fixed or list-typed)."""
    positions = []
    for arg in args:
        count = 1
        if arg.number_attr:
            value = node.attr.get(arg.number_attr)
            if value is None:
                for a in op_def.attr:
                    if a.name == arg.number_attr and a.HasField("default_value"):
                        value = a.default_value
            if value is None:
                return None
            count = value.i
        elif arg.type_list_attr:
            value = node.attr.get(arg.type_list_attr)
            if value is None:
                return None
            positions.extend([None] * len(value.list.type))
            continue
        positions.extend([arg.type_attr or None] * count)
    return positions


def _attr_type(node, op_def, name):
    if name in node.attr:
        return node.attr[name].type
    for a in op_def.attr:
        if a.name == name and a.HasField("default_value"):
            return a.default_value.type
    return None


@functools.cache
def _cpu_kernel_allows(op_type, assignments):
    """Whether a CPU kernel of ``op_type`` accepts every ``(attr, dtype)`` of ``assignments``."""
    for kernel in tf_compat.registered_kernels(op_type).kernel:
        if kernel.device_type != "CPU":
            continue
        constraints = {c.name: set(c.allowed_values.list.type) for c in kernel.constraint}
        if all(attr not in constraints or dtype in constraints[attr]
               for attr, dtype in assignments):
            return True
    return False


@dataclasses.dataclass
class _OpInfo:
    op_def: object
    float_attrs: tuple       # type attrs holding a float dtype that bind an input or output
    in_attrs: list           # type attr per data input position
    out_attrs: list
    original: int
    blocker: str             # why the op is never retyped ("" when it may be)


def _op_info(node, in_types, out_types):
    op_def = op_def_for(node.op)
    if op_def is None or in_types is None or out_types is None:
        return None
    in_attrs = _arg_attr_positions(op_def, node, op_def.input_arg)
    out_attrs = _arg_attr_positions(op_def, node, op_def.output_arg)
    if in_attrs is None or out_attrs is None:
        return None
    bound = {a for a in in_attrs + out_attrs if a}
    float_attrs = []
    for name in _type_attrs(op_def):
        if name in bound and _attr_type(node, op_def, name) in FLOAT_TYPES:
            float_attrs.append(name)
    if not float_attrs:
        return None
    original = _attr_type(node, op_def, "T" if "T" in float_attrs else float_attrs[0])
    blocker = ""
    if node.op == "Cast":
        blocker = "Cast keeps the dtypes it declares"
    elif node.op in _CONTROL_FLOW:
        blocker = "control-flow op: carries its input's dtype"
    elif node.op in _CONSTANT_OPS:
        blocker = "constant: converted where a consumer needs another dtype"
    elif op_def.is_stateful:
        blocker = "stateful op (variables and their updates keep the variable's dtype)"
    elif any(t >= 100 or t in _NEVER_TYPES for t in list(in_types) + list(out_types)):
        blocker = "has resource, variant, string or ref tensors"
    elif any(a.type in ("func", "list(func)") for a in op_def.attr):
        blocker = "calls a function"
    return _OpInfo(op_def, tuple(float_attrs), in_attrs, out_attrs, original, blocker)


# --------------------------------------------------------------------------- decisions

@dataclasses.dataclass
class _Plan:
    compute: int
    in_round: int = 0      # round bound float inputs to this dtype first (0: no)
    out_round: int = 0     # round bound float outputs to this dtype after (0: no)
    attrs: tuple = None    # the type attrs set to ``compute`` (None: every one that can be)


def _mixed(policy, node, info, entry, arrivals_low):
    low = policy.low
    listed = entry.list
    src = "mixlist edit: " + entry.ref if entry.source == "modify_mixlist" else (
        f"{entry.source}: {entry.ref}" if entry.source != "none" else "in no list")
    if not entry.fp32:
        return low, "no_fp32_kernel", src
    if listed == "white":
        return low, "white_list", src
    if listed == "black":
        return P.DT_FLOAT, "black_list", src
    if arrivals_low:
        return low, "gray_follows_low", f"{src}; input {arrivals_low} arrives in " \
                                       f"{policy.low_name}"
    return P.DT_FLOAT, "gray_keeps", f"{src}; no input arrives in {policy.low_name}"


def decide(policy, node, info, arrivals_low, arrived=frozenset(), scalar=False):
    """``(plan or None, Decision)`` for ``node``; ``arrivals_low`` names a bound float input
    that arrives in the low dtype ("" when none); ``arrived``: the dtypes its bound float
    inputs arrive in."""
    lists = policy.lists
    entry = lists.entry(node.op) if lists is not None else None
    original = info.original

    def made(dtype, reason, detail, plan=None):
        decision = Decision(node.name, node.op, original, dtype, reason, detail)
        if entry is not None:
            decision.list, decision.source = entry.list, entry.source
        if plan is None and dtype != original:
            plan = _Plan(dtype)
        return plan, decision

    if info.blocker:
        return made(original, "not_reducible", info.blocker)
    if policy.mode == P.ORIGIN:
        return made(original, "mode_origin", policy.setting)
    rule = None
    if policy.customize is not None:
        rule = policy.customize.rule_for(node.name, node.op, entry.ir_name if entry else node.op)
    if rule is not None:
        return _customized(policy, node, info, rule, made)
    if KEEP_DTYPE_ATTR in node.attr:
        return made(original, "keep_dtype", "_keep_dtype (keep_dtype_scope / keep_tensors_dtypes)")
    if scalar and original == P.DT_FLOAT:
        return made(original, "scalar_kept", "every float input is a scalar")
    if node.op in FOLLOW_OPS:
        if arrivals_low:
            return made(policy.low, "follows_input", f"input {arrivals_low} arrives in "
                                                     f"{policy.low_name}")
        dtype = next(iter(arrived)) if len(arrived) == 1 else original
        return made(dtype, "follows_input", f"its input arrives in {dtype_name(dtype)}")
    cube = bool(entry and entry.cube)
    if policy.mode == P.FORCE_LOW:
        if original == P.DT_FLOAT:
            return made(policy.low, "mode_force_low", policy.setting)
        return made(original, "already_low", policy.setting)
    if policy.mode == P.FORCE_FP32:
        if cube:
            return made(P.DT_FLOAT, "cube_fp16in_fp32out", policy.setting,
                        _Plan(P.DT_FLOAT, in_round=P.DT_HALF))
        if original != P.DT_FLOAT and (entry is None or entry.fp32):
            return made(P.DT_FLOAT, "force_fp32", policy.setting)
        return made(original, "force_fp32", policy.setting + " (no float32 kernel)"
                    if original != P.DT_FLOAT else policy.setting)
    if original != P.DT_FLOAT:
        return made(original, "already_low", policy.setting)
    if policy.mode == P.FP32_TO_LOW:
        if cube:
            return made(policy.low, "cube_low", policy.setting)
        if entry is not None and not entry.fp32:
            return made(policy.low, "no_fp32_kernel", policy.setting)
        return made(original, "vector_keeps_fp32", policy.setting)
    dtype, reason, detail = _mixed(policy, node, info, entry, arrivals_low)
    return made(dtype, reason, detail)


def _customized(policy, node, info, rule, made):
    def enum(name):
        return tf.as_dtype(name).as_datatype_enum

    floats_out = [enum(d) for d in rule.outputs if enum(d) in FLOAT_TYPES]
    floats_in = [enum(d) for d in rule.inputs if enum(d) in FLOAT_TYPES]
    compute = (floats_out or floats_in or [info.original])[0]
    rounding = 0
    for k, attr in enumerate(info.in_attrs):
        if attr in info.float_attrs and k < len(rule.inputs):
            wanted = enum(rule.inputs[k])
            if wanted in FLOAT_TYPES and wanted != compute:
                rounding = wanted
    detail = rule.describe(policy.customize.path)
    ignored = sorted({d for d in rule.inputs + rule.outputs
                      if enum(d) not in FLOAT_TYPES})
    if ignored:
        detail += f" (not emulated: {', '.join(ignored)})"
    plan = _Plan(compute, in_round=rounding) if (compute != info.original or rounding) else None
    return made(compute, "customize_dtypes", detail, plan)


def is_scalar_source(node, producers=None):
    """Whether ``node``'s first output is statically a scalar: a rank-0 Const or Placeholder, a
    variable read of a rank-0 variable, or a node whose ``_output_shapes`` says so."""
    if "_output_shapes" in node.attr:
        shapes = node.attr["_output_shapes"].list.shape
        return bool(shapes) and not shapes[0].unknown_rank and len(shapes[0].dim) == 0
    if node.op in ("Const", "HostConst"):
        shape = node.attr["value"].tensor.tensor_shape
        return not shape.unknown_rank and len(shape.dim) == 0
    if node.op in ("Placeholder", "PlaceholderWithDefault", "VarHandleOp", "VariableV2"):
        shape = node.attr["shape"].shape if "shape" in node.attr else None
        return shape is not None and not shape.unknown_rank and len(shape.dim) == 0
    if node.op == "ReadVariableOp" and producers is not None and node.input:
        handle = producers.get(parse_input(node.input[0])[0])
        return handle is not None and is_scalar_source(handle)
    if node.op == "Identity" and producers is not None and node.input:
        source = producers.get(parse_input(node.input[0])[0])
        return source is not None and source is not node and source.op in (
            "VariableV2", "Const") and is_scalar_source(source)
    return False


# --------------------------------------------------------------------------- the body

class _Body:
    """Uniform access to a FunctionDef body or a GraphDef's nodes."""

    def __init__(self, nodes, args, function_format, functions):
        self.nodes = nodes
        self.by_name = {n.name: n for n in nodes}
        self.args = dict(args)
        self.function_format = function_format
        self.functions = functions
        self._ports = {}
        self.taken = set(self.by_name) | set(self.args)

    def port_names(self, name):
        names = self._ports.get(name)
        if names is None:
            from npu_adapter.graph.types import output_port_names

            names = output_port_names(self.by_name[name], self.functions) or []
            self._ports[name] = names
        return names

    def parse(self, text):
        """``(source, port, is_control)``."""
        if text.startswith("^"):
            return text[1:], 0, True
        if not self.function_format:
            return parse_input(text)
        parts = text.split(":")
        if len(parts) == 1:
            return parts[0], 0, False
        if len(parts) == 3 and parts[0] in self.by_name:
            names = self.port_names(parts[0])
            key = f"{parts[1]}:{parts[2]}"
            if key in names:
                return parts[0], names.index(key), False
        return parts[0], int(parts[-1]) if parts[-1].isdigit() else 0, False

    def ref(self, source, port):
        if not self.function_format:
            return source if port == 0 else f"{source}:{port}"
        if source in self.args:
            return source
        return f"{source}:{self.port_names(source)[port]}"

    def add_cast(self, source, port, src_dtype, dst_dtype, device):
        base = f"{source}{CAST_NAME_MARK}{port}_{_SHORT[dst_dtype]}"
        name = unique_name(base, self.taken)
        self.taken.add(name)
        node = node_def_pb2.NodeDef(name=name, op="Cast")
        node.input.append(self.ref(source, port))
        node.attr["SrcT"].type = src_dtype
        node.attr["DstT"].type = dst_dtype
        node.attr["Truncate"].b = False
        if device:
            node.device = device
        self.nodes.append(node)
        self.by_name[name] = node
        self._ports[name] = ["y:0"]
        return name


def _topological(body, count):
    index = {n.name: k for k, n in enumerate(body.nodes[:count])}
    pending = [0] * count
    users = [[] for _ in range(count)]
    for k, node in enumerate(body.nodes[:count]):
        for text in node.input:
            src = body.parse(text)[0]
            j = index.get(src)
            if j is None or body.nodes[j].op in _BACK_EDGE_OPS:
                continue
            pending[k] += 1
            users[j].append(k)
    ready = [k for k in range(count) if pending[k] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < count:  # a cycle we do not understand: keep the rest in body order
        seen = set(order)
        order.extend(k for k in range(count) if k not in seen)
    return order


def _emulate(body, policy, candidates, outputs, scalar_args=()):
    """Rewrite ``body`` in place. ``candidates``: names that may be retyped (None: all).
    ``outputs``: list of ``(text, dtype)`` the body returns; returns the new texts.
    ``scalar_args``: arguments known to be scalars."""
    count = len(body.nodes)
    scalars = set(scalar_args)   # names of nodes / args whose (first) output is a scalar
    arrival = {(name, 0): (name, 0, dtype) for name, dtype in body.args.items()}
    casts = {}
    decisions = {}
    n_casts = 0

    def converted(source, port, have, want, device):
        nonlocal n_casts
        key = (source, port, want)
        name = casts.get(key)
        if name is None:
            name = casts[key] = body.add_cast(source, port, have, want, device)
            n_casts += 1
        return name, 0

    def bring(source, port, want, device):
        src, p, have = arrival.get((source, port), (source, port, None))
        if have is None:
            types = node_output_types(body.by_name[source], body.functions) \
                if source in body.by_name else None
            have = types[port] if types and port < len(types) else want
        if have != want and have in FLOAT_TYPES and want in FLOAT_TYPES:
            src, p = converted(src, p, have, want, device)
        return src, p

    for k in _topological(body, count):
        node = body.nodes[k]
        in_types = node_input_types(node, body.functions)
        out_types = node_output_types(node, body.functions)
        data = [(pos, *body.parse(t)[:2]) for pos, t in enumerate(node.input)
                if not t.startswith("^")]
        plan = decision = info = None
        if (candidates is None or node.name in candidates) and in_types is not None:
            info = _op_info(node, in_types, out_types)
        if info is not None:
            low_input = ""
            arrived = set()
            for j, (_, src, port) in enumerate(data):
                if j < len(info.in_attrs) and info.in_attrs[j] in info.float_attrs:
                    have = arrival.get((src, port), (None, None, None))[2]
                    if have in FLOAT_TYPES:
                        arrived.add(have)
                    if have in _LOW_TYPES and have == policy.low and not low_input:
                        low_input = src
            floats = [src for j, (_, src, _) in enumerate(data)
                      if j < len(info.in_attrs) and info.in_attrs[j] in info.float_attrs]
            scalar = bool(floats) and all(src in scalars for src in floats)
            plan, decision = decide(policy, node, info, low_input, frozenset(arrived), scalar)
            decisions[node.name] = decision
        if plan is not None:
            plan = _fit_plan(node, info, plan, decision)
        # A read of a scalar variable is a scalar too: with variables on the device its handle
        # arrives as a function argument (a resource), listed in scalar_args by the caller.
        if is_scalar_source(node, body.by_name) or (
                node.op in _ELEMENTWISE or node.op == "ReadVariableOp") and data and \
                all(src in scalars for _, src, _ in data):
            scalars.add(node.name)
        required = list(in_types or [])
        rounding = {}
        out_round = 0
        bound = set()
        if plan is not None:
            changed = list(plan.attrs) if plan.attrs is not None else _changeable(
                node, info, plan.compute)
            for attr in changed:
                node.attr[attr].type = plan.compute
            required = node_input_types(node, body.functions) or required
            out_types = node_output_types(node, body.functions) or out_types
            bound = set(changed)
            for j, attr in enumerate(info.in_attrs):
                if attr in bound and plan.in_round:
                    rounding[j] = plan.in_round
            out_round = plan.out_round
        for j, (pos, src, port) in enumerate(data):
            want = required[j] if j < len(required) else None
            if want is None:
                continue
            device = node.device
            if j in rounding and rounding[j] != want:
                s, p = bring(src, port, rounding[j], device)
                have = rounding[j]
                if have != want:
                    s, p = converted(s, p, have, want, device)
            else:
                s, p = bring(src, port, want, device)
            node.input[pos] = body.ref(s, p)
        for p, dtype in enumerate(out_types or []):
            arrival[(node.name, p)] = (node.name, p, dtype)
            if out_round and dtype in FLOAT_TYPES and info.out_attrs[p] in bound:
                c, cp = converted(node.name, p, dtype, out_round, node.device)
                arrival[(node.name, p)] = (c, cp, out_round)
    new_outputs = []
    for text, dtype in outputs:
        src, port, _ = body.parse(text)
        s, p = bring(src, port, dtype, "")
        new_outputs.append(body.ref(s, p))
    return BodyResult(decisions, n_casts), new_outputs


def _changeable(node, info, dtype):
    """The float type attrs of ``node`` holding its original dtype that accept ``dtype`` (an
    attr such as FusedBatchNormV3's ``U``, float32 only, keeps its value)."""
    specs = _type_attrs(info.op_def)
    found = []
    for attr in info.float_attrs:
        if _attr_type(node, info.op_def, attr) != info.original:
            continue
        allowed = set(specs[attr].allowed_values.list.type)
        if not allowed or dtype in allowed:
            found.append(attr)
    return found


def _fit_plan(node, info, plan, decision):
    """Make ``plan`` executable on the CPU: when no kernel computes in ``plan.compute``, keep the
    original dtype and round the inputs and outputs instead (marked as approximated)."""
    if plan.compute == info.original:
        return plan
    attrs = _changeable(node, info, plan.compute)
    assignments = tuple(sorted((a, plan.compute) for a in attrs))
    if attrs and _cpu_kernel_allows(node.op, assignments):
        return dataclasses.replace(plan, attrs=tuple(attrs))
    decision.approximated = True
    decision.detail += (f"; rounded to {dtype_name(plan.compute)} around a "
                        f"{dtype_name(info.original)} kernel (TensorFlow has no CPU kernel in "
                        f"{dtype_name(plan.compute)})")
    return _Plan(info.original, in_round=plan.in_round or plan.compute, out_round=plan.compute,
                 attrs=tuple(_changeable(node, info, info.original)))


# --------------------------------------------------------------------------- entry points

def _copies(nodes):
    result = []
    for node in nodes:
        copy = node_def_pb2.NodeDef()
        copy.CopyFrom(node)
        result.append(copy)
    return result


def emulate_function(fdef, policy, functions=None, scalar_args=()):
    """A copy of FunctionDef ``fdef`` rewritten under ``policy``, and its :class:`BodyResult`.

    ``scalar_args``: names of the arguments that are scalars (the caller knows the tensors
    that feed them)."""
    out = type(fdef)()
    out.CopyFrom(fdef)
    args = {a.name: a.type for a in out.signature.input_arg}
    body = _Body(_copies(out.node_def), args, True, functions)
    outputs = [(out.ret[a.name], a.type) for a in out.signature.output_arg]
    result, texts = _emulate(body, policy, None, outputs, scalar_args)
    del out.node_def[:]
    out.node_def.extend(body.nodes)
    for arg, text in zip(out.signature.output_arg, texts):
        out.ret[arg.name] = text
    return out, result


def emulate_graph(graph_def, policy, candidates):
    """A copy of GraphDef ``graph_def`` where the nodes named in ``candidates`` run as the device
    would run them under ``policy`` (every other node computes as written)."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    functions = {f.signature.name: f for f in out.library.function}
    body = _Body(_copies(out.node), {}, False, functions)
    result, _ = _emulate(body, policy, set(candidates), [])
    del out.node[:]
    out.node.extend(body.nodes)
    return out, result
