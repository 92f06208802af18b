"""Large synthetic GraphDefs for benchmarks: valid TensorFlow, deterministic, fast to generate.

:func:`synthetic_graph` writes NodeDefs directly as protobufs (no TensorFlow graph building), so a
100k-node graph takes a few seconds. The graph imports with ``tf.import_graph_def`` and runs: every
float tensor is ``float32[4, 4]`` and every value stays finite (a bound is tracked per tensor and a
``Tanh``/``Sigmoid`` is inserted before it could grow large). It is made of blocks:

- ``chain``: long chains of float ops (Add, AddV2, Sub, Mul, Maximum, MatMul, BiasAdd, Relu,
  Identity, Tanh, Sigmoid, Neg), whose second operands are new ``Const`` nodes or recent tensors
  of other blocks; the first chain is a long spine (``num_nodes // 20`` ops, at most 5000);
- ``fan``: one tensor fanned out to many short branches, fanned in by ``AddN``;
- ``while``: TF1 while loops built as TF 1.x builds them (Enter/Merge/Less/LoopCond/Switch/
  Identity/NextIteration/Exit, loop constants Enter-ed with ``is_constant`` or pinned to the loop
  by a control edge from the pivot);
- ``string``: AsString, StringJoin, StringLength, Cast and StringToNumber back to float;
- ``resource``: VarHandleOp, AssignVariableOp, AssignAddVariableOp and ReadVariableOp ordered by
  control edges.

A fraction of the nodes outside loops also get a control input from an earlier node. Default
valued attrs are omitted (as in a GraphDef written with ``strip_default_attrs``); the importer fills
them in. The open ends are summed into a few ``fetch_<k>`` Identity nodes, which the result lists
as fetches; ``input_<k>`` placeholders are fed with seeded values.
"""

import dataclasses
import math
import random
from typing import Dict, List, Mapping, Optional

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2, types_pb2

from npu_adapter.errors import NpuConfigError

__all__ = ["DEFAULT_MIX", "MIN_NODES", "SyntheticGraph", "synthetic_graph"]

DEFAULT_MIX = {"chain": 0.55, "fan": 0.22, "while": 0.09, "string": 0.07, "resource": 0.07}
"""Default share of nodes per block kind (weights; a kind missing from ``mix`` gets none)."""

MIN_NODES = 100
"""Smallest ``num_nodes`` accepted."""

_NUM_INPUTS = 4
_MAX_FETCHES = 8
_RECENT = 256  # how far back second operands and control inputs may reach
_SQUASH_ABOVE = 100.0  # a tensor whose bound exceeds this is squashed before further use
_PRODUCT_LIMIT = 1e6  # Mul/MatMul only when the bound of the result stays below this

_UNARY = ("Relu", "Identity", "Tanh", "Sigmoid", "Neg")
_BINARY = ("Add", "AddV2", "Sub", "Mul", "Maximum", "MatMul", "BiasAdd")


@dataclasses.dataclass
class SyntheticGraph:
    """A generated graph: ``graph_def``, tensor names to ``fetches`` and ``feeds`` to give."""

    graph_def: graph_pb2.GraphDef
    fetches: List[str]
    feeds: Dict[str, np.ndarray]


def synthetic_graph(
    num_nodes: int,
    *,
    seed: int = 0,
    mix: Optional[Mapping[str, float]] = None,
    control_edge_rate: float = 0.02,
) -> SyntheticGraph:
    """Generate a valid TF1 GraphDef of about ``num_nodes`` nodes (within a few nodes).

    ``mix`` weights the block kinds of :data:`DEFAULT_MIX` by their share of nodes;
    ``control_edge_rate`` is the probability that a node outside loops gets an extra control
    input. The same arguments give a byte-identical ``SerializeToString(deterministic=True)``
    on the same TensorFlow version.
    """
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < MIN_NODES:
        raise NpuConfigError("num_nodes", num_nodes, f"an integer >= {MIN_NODES}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise NpuConfigError("seed", seed, "an integer")
    weights = _check_mix(DEFAULT_MIX if mix is None else mix)
    rate = control_edge_rate
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0.0 <= rate <= 1.0:
        raise NpuConfigError("control_edge_rate", rate, "a number in [0, 1]")
    return _Builder(num_nodes, seed, weights, float(rate)).build()


def _check_mix(mix):
    if not isinstance(mix, Mapping):
        raise NpuConfigError("mix", mix, f"a mapping from {sorted(DEFAULT_MIX)} to weights")
    for key, value in mix.items():
        if key not in DEFAULT_MIX:
            raise NpuConfigError("mix", key, f"block kinds {sorted(DEFAULT_MIX)}")
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0:
            raise NpuConfigError(f"mix[{key!r}]", value, "a finite number >= 0")
    total = float(sum(mix.values()))
    if total <= 0:
        raise NpuConfigError("mix", dict(mix), "at least one block kind with a weight > 0")
    # Fixed kind order, so the choice sequence does not depend on the mapping's order.
    return [(kind, float(mix.get(kind, 0.0)) / total) for kind in DEFAULT_MIX]


# --------------------------------------------------------------------------------------------
# Node templates: one NodeDef per (op, attrs); each node is a copy with its name and inputs.
# --------------------------------------------------------------------------------------------


def _attr_type(dtype):
    return attr_value_pb2.AttrValue(type=dtype)


def _attr_shape(dims):
    value = attr_value_pb2.AttrValue()
    value.shape.SetInParent()
    for d in dims:
        value.shape.dim.add(size=d)
    return value


def _template(op, **attrs):
    node = node_def_pb2.NodeDef(op=op)
    for key in sorted(attrs):
        node.attr[key].CopyFrom(attrs[key])
    return node


def _tensor_attr(array):
    return attr_value_pb2.AttrValue(tensor=tf.make_tensor_proto(array))


_F, _I, _S = types_pb2.DT_FLOAT, types_pb2.DT_INT32, types_pb2.DT_STRING
_T_FLOAT, _T_INT, _T_STRING = _attr_type(_F), _attr_type(_I), _attr_type(_S)


def _make_templates():
    t = {op: _template(op, T=_T_FLOAT) for op in _UNARY + _BINARY}
    t["AddN"] = None  # N varies: built per node
    t["Placeholder"] = _template("Placeholder", dtype=_attr_type(_F), shape=_attr_shape([4, 4]))
    t["AsString"] = _template("AsString", T=_T_FLOAT)
    t["StringLength"] = _template("StringLength")
    t["StringToNumber"] = _template("StringToNumber", out_type=_attr_type(_F))
    t["IdentityString"] = _template("Identity", T=_T_STRING)
    t["Cast"] = _template("Cast", SrcT=_T_INT, DstT=_T_FLOAT)
    for op in ("AssignVariableOp", "AssignAddVariableOp", "ReadVariableOp"):
        t[op] = _template(op, dtype=_attr_type(_F))
    for op in ("Merge", "Switch", "NextIteration", "Exit"):
        for dtype_name, attr in (("float", _T_FLOAT), ("int", _T_INT)):
            extra = {"N": attr_value_pb2.AttrValue(i=2)} if op == "Merge" else {}
            t[f"{op}:{dtype_name}"] = _template(op, T=attr, **extra)
    t["Less"] = _template("Less", T=_T_INT)
    t["AddV2:int"] = _template("AddV2", T=_T_INT)
    t["IdentityInt"] = _template("Identity", T=_T_INT)
    t["LoopCond"] = _template("LoopCond")
    return t


_TEMPLATES = _make_templates()


def _const_template(array):
    dtype = tf.as_dtype(array.dtype).as_datatype_enum
    return _template("Const", dtype=_attr_type(dtype), value=_tensor_attr(array))


class _Frame:
    """The loop being built: its pivot (for control edges of loop constants) and its weights."""

    def __init__(self, pivot, weight):
        self.pivot = pivot
        self.weight = weight


class _Builder:
    def __init__(self, num_nodes, seed, weights, control_edge_rate):
        self.target = num_nodes
        self.rng = random.Random(seed)
        values = np.random.RandomState(seed)
        # A pool of constant values: enough variety for realistic graphs, cheap to copy.
        self.float_consts = [
            _const_template(values.uniform(-1, 1, [4, 4]).astype(np.float32)) for _ in range(64)
        ]
        self.bias_consts = [
            _const_template(values.uniform(-1, 1, [4]).astype(np.float32)) for _ in range(16)
        ]
        self.feeds = {
            f"input_{k}:0": values.uniform(-1, 1, [4, 4]).astype(np.float32)
            for k in range(_NUM_INPUTS)
        }
        self.shares = {kind: w for kind, w in weights if w > 0}
        self.made = dict.fromkeys(self.shares, 0)  # nodes made per block kind
        self.control_edge_rate = control_edge_rate
        self.graph_def = graph_pb2.GraphDef()
        self.graph_def.versions.producer = tf.version.GRAPH_DEF_VERSION
        self.nodes = self.graph_def.node
        self.bound = {}  # float tensor name -> bound of its absolute values
        self.open = {}  # float tensors not consumed yet (insertion ordered)
        self.recent = []  # ring buffer of recent root-frame float tensors
        self.recent_pos = 0
        self.block = 0

    # -- emission --------------------------------------------------------------------------

    def emit(self, name, template, inputs=(), control=()):
        node = self.nodes.add()
        node.CopyFrom(template)
        node.name = name
        if inputs:
            node.input.extend(inputs)
        if control:
            node.input.extend("^" + c for c in control)
        return name

    def produce(self, name, bound, *, root=True):
        self.bound[name] = bound
        if root:
            self.open[name] = None
            if len(self.recent) < _RECENT:
                self.recent.append(name)
            else:
                self.recent[self.recent_pos] = name
                self.recent_pos = (self.recent_pos + 1) % _RECENT
        return name

    def consume(self, name):
        self.open.pop(name, None)
        return name

    def take(self):
        """An input for a new block: mostly an open end (oldest first), else a recent tensor."""
        if self.open and self.rng.random() < 0.8:
            return self.consume(next(iter(self.open)))
        return self.consume(self.rng.choice(self.recent))

    # -- float ops ---------------------------------------------------------------------------

    def step(self, x, prefix, index, frame=None):
        """Apply one float op to ``x``; returns the new tensor (1 or 2 new nodes)."""
        rng = self.rng
        self.consume(x)
        bx = self.bound[x]
        name = f"{prefix}op_{index}"
        if bx > _SQUASH_ABOVE:
            op = "Tanh" if rng.random() < 0.5 else "Sigmoid"
            self.emit(name, _TEMPLATES[op], [x], self.control_for(frame, x))
            return self.produce(name, 1.0, root=frame is None)
        if rng.random() < 0.35:
            op = _UNARY[rng.randrange(len(_UNARY))]
            self.emit(name, _TEMPLATES[op], [x], self.control_for(frame, x))
            bound = 1.0 if op in ("Tanh", "Sigmoid") else bx
            return self.produce(name, bound, root=frame is None)
        op = _BINARY[rng.randrange(len(_BINARY))]
        if op == "BiasAdd":
            y, by = self.const(f"{prefix}bias_{index}", self.bias_consts, frame), 1.0
        elif frame is not None:
            if rng.random() < 0.5:
                y = frame.weight
            else:
                y = self.const(f"{prefix}const_{index}", self.float_consts, frame)
            by = 1.0
        else:
            y = rng.choice(self.recent) if rng.random() < 0.5 else None
            if y is None or self.bound[y] > _SQUASH_ABOVE:
                # Only small tensors as second operands: bounds then never compound (an AddN of
                # a fan-in stays below 48 * 1e6), so every value is finite, always.
                y, by = self.const(f"{prefix}const_{index}", self.float_consts, None), 1.0
            else:
                by = self.bound[self.consume(y)]
        if op in ("Mul", "MatMul"):
            bound = bx * by * (4.0 if op == "MatMul" else 1.0)
            if bound > _PRODUCT_LIMIT:
                op, bound = "AddV2", bx + by
        elif op == "Maximum":
            bound = max(bx, by)
        else:
            bound = bx + by
        self.emit(name, _TEMPLATES[op], [x, y], self.control_for(frame, x, y))
        return self.produce(name, bound, root=frame is None)

    def control_for(self, frame, *data_inputs):
        """Now and then a control input from a recent node (never inside a loop frame)."""
        if frame is not None or self.rng.random() >= self.control_edge_rate:
            return ()
        dep = self.rng.choice(self.recent).partition(":")[0]
        if any(dep == t.partition(":")[0] for t in data_inputs):
            return ()
        return (dep,)

    def const(self, name, pool, frame):
        template = pool[self.rng.randrange(len(pool))]
        # A constant used inside a loop must live in the loop's frame: TF pins it with a
        # control edge from the loop's pivot, and so do we.
        control = (frame.pivot,) if frame is not None else ()
        return self.emit(name, template, (), control)

    # -- blocks --------------------------------------------------------------------------------

    def chain(self, budget, length=None):
        prefix = f"chain_{self.block}/"
        start = len(self.nodes)
        x = self.take()
        i = 0
        while (length is None and len(self.nodes) - start < budget) or (
            length is not None and i < length
        ):
            x = self.step(x, prefix, i)
            i += 1

    def fan(self, budget):
        prefix = f"fan_{self.block}/"
        width = max(2, min(self.rng.randint(4, 48), budget // 5))
        source = self.take()
        ends = []
        for b in range(width):
            y = source
            for d in range(self.rng.randint(1, 2)):
                y = self.step(y, f"{prefix}branch_{b}/", d)
            ends.append(y)
        # Leave a branch or two open: the graph keeps several independent paths.
        keep = self.rng.randint(0, min(2, width - 2))
        for y in ends[keep:]:
            self.consume(y)
        summed = ends[keep:]
        name = self.emit(f"{prefix}AddN", _addn_template(len(summed)), summed)
        self.produce(name, sum(self.bound[y] for y in summed))

    def while_loop(self):
        p = f"while_{self.block}/"
        rng = self.rng
        frame_name = attr_value_pb2.AttrValue(s=f"{p}while_context".encode())

        def enter(name, source, dtype_attr, is_constant):
            tpl = _template(
                "Enter",
                T=dtype_attr,
                frame_name=frame_name,
                is_constant=attr_value_pb2.AttrValue(b=is_constant),
                parallel_iterations=attr_value_pb2.AttrValue(i=10),
            )
            return self.emit(name, tpl, [source])

        x0 = self.take()
        bx0 = self.bound[x0]
        i0 = self.emit(f"{p}Const", _const_template(np.array(0, np.int32)))
        w = self.emit(f"{p}weight", self.float_consts[rng.randrange(64)])
        enter_i = enter(f"{p}Enter", i0, _T_INT, False)
        enter_x = enter(f"{p}Enter_1", x0, _T_FLOAT, False)
        enter_w = enter(f"{p}Enter_2", w, _T_FLOAT, True)
        merge_i = self.emit(f"{p}Merge", _TEMPLATES["Merge:int"], [enter_i, f"{p}NextIteration"])
        merge_x = self.emit(
            f"{p}Merge_1", _TEMPLATES["Merge:float"], [enter_x, f"{p}NextIteration_1"]
        )
        limit = np.array(rng.randint(1, 4), np.int32)
        limit = self.emit(f"{p}Less/y", _const_template(limit), (), [merge_i])
        less = self.emit(f"{p}Less", _TEMPLATES["Less"], [merge_i, limit])
        cond = self.emit(f"{p}LoopCond", _TEMPLATES["LoopCond"], [less])
        switch_i = self.emit(f"{p}Switch", _TEMPLATES["Switch:int"], [merge_i, cond])
        switch_x = self.emit(f"{p}Switch_1", _TEMPLATES["Switch:float"], [merge_x, cond])
        ident_i = self.emit(f"{p}Identity", _TEMPLATES["IdentityInt"], [f"{switch_i}:1"])
        ident_x = self.emit(f"{p}Identity_1", _TEMPLATES["Identity"], [f"{switch_x}:1"])
        one = self.emit(f"{p}add/y", _const_template(np.array(1, np.int32)), (), [ident_i])
        next_i = self.emit(f"{p}add", _TEMPLATES["AddV2:int"], [ident_i, one])
        frame = _Frame(pivot=ident_i, weight=enter_w)
        # In the loop the value is squashed every iteration, so the bound does not compound.
        self.bound[ident_x] = max(bx0, 1.0)
        y = ident_x
        for k in range(rng.randint(1, 6)):
            y = self.step(y, f"{p}body/", k, frame)
        y = self.emit(f"{p}body/squash", _TEMPLATES["Tanh"], [y])
        self.emit(f"{p}NextIteration", _TEMPLATES["NextIteration:int"], [next_i])
        self.emit(f"{p}NextIteration_1", _TEMPLATES["NextIteration:float"], [y])
        self.emit(f"{p}Exit", _TEMPLATES["Exit:int"], [switch_i])
        out = self.emit(f"{p}Exit_1", _TEMPLATES["Exit:float"], [switch_x])
        self.produce(out, max(bx0, 1.0))

    def strings(self):
        p = f"string_{self.block}/"
        x = self.take()
        text = self.emit(f"{p}AsString", _TEMPLATES["AsString"], [x])
        # AsString writes "%f" (always a decimal point), so a trailing "0" keeps the value.
        zero = self.emit(f"{p}zero", _const_template(np.array(b"0", object)))
        joined = self.emit(f"{p}StringJoin", _string_join_template(2), [text, zero])
        joined = self.emit(f"{p}Identity", _TEMPLATES["IdentityString"], [joined])
        number = self.emit(f"{p}StringToNumber", _TEMPLATES["StringToNumber"], [joined])
        bound = self.bound[x]
        if self.rng.random() < 0.5:
            length = self.emit(f"{p}StringLength", _TEMPLATES["StringLength"], [joined])
            length = self.emit(f"{p}Cast", _TEMPLATES["Cast"], [length])
            number = self.emit(f"{p}add", _TEMPLATES["AddV2"], [number, length])
            bound += 64.0  # a "%f" string of a value below 1e9 is far shorter than that
        self.produce(number, bound)

    def resource(self):
        p = f"resource_{self.block}/"
        x = self.take()
        handle = self.emit(
            f"{p}var",
            _template(
                "VarHandleOp",
                dtype=_attr_type(_F),
                shape=_attr_shape([4, 4]),
                shared_name=attr_value_pb2.AttrValue(s=f"{p}var".encode()),
            ),
        )
        last = self.emit(f"{p}Assign", _TEMPLATES["AssignVariableOp"], [handle, x])
        bound = self.bound[x]
        if self.rng.random() < 0.5:
            delta = self.emit(f"{p}delta", self.float_consts[self.rng.randrange(64)])
            last = self.emit(
                f"{p}AssignAdd", _TEMPLATES["AssignAddVariableOp"], [handle, delta], [last]
            )
            bound += 1.0
        value = self.emit(f"{p}Read", _TEMPLATES["ReadVariableOp"], [handle], [last])
        self.produce(value, bound)

    # -- whole graph ---------------------------------------------------------------------------

    def tail_cost(self):
        n = len(self.open)
        groups = min(_MAX_FETCHES, n)
        multi = max(0, min(groups, n - groups))  # groups with two or more members need an AddN
        return multi + 2 * groups

    def pick_kind(self):
        """The kind furthest below its share of the nodes so far (ties: the fixed kind order)."""
        total = len(self.nodes) + 1
        return max(self.shares, key=lambda kind: self.shares[kind] * total - self.made[kind])

    def build(self):
        for k in range(_NUM_INPUTS):
            self.produce(self.emit(f"input_{k}", _TEMPLATES["Placeholder"]), 1.0)
        spine = min(5000, max(20, self.target // 20))
        if "chain" in self.shares:
            before = len(self.nodes)
            self.chain(0, length=spine)
            self.made["chain"] += len(self.nodes) - before
            self.block += 1
        while True:
            remaining = self.target - len(self.nodes) - self.tail_cost()
            if remaining < 2:
                break
            kind = self.pick_kind()
            if remaining < 16 and kind != "chain":  # only a chain is sure to fit the last nodes
                if "chain" not in self.shares:
                    break
                kind = "chain"
            if kind == "while" and remaining < 48:  # a loop does not fit: fill with another kind
                fillers = [k for k in self.shares if k != "while"]
                if not fillers:
                    break
                kind = fillers[0]
            before = len(self.nodes)
            if kind == "chain":
                self.chain(min(remaining - 1, self.rng.randint(10, 200)))
            elif kind == "fan":
                self.fan(min(remaining - 2, 150))
            elif kind == "while":
                self.while_loop()
            elif kind == "string":
                self.strings()
            else:
                self.resource()
            self.made[kind] += len(self.nodes) - before
            self.block += 1
        fetches = self.finish()
        return SyntheticGraph(self.graph_def, fetches, self.feeds)

    def finish(self):
        ends = list(self.open)
        count = min(_MAX_FETCHES, len(ends))
        groups = [ends[g::count] for g in range(count)]
        fetches = []
        for k, members in enumerate(groups):
            if len(members) > 1:
                total = self.emit(f"fetch_{k}/AddN", _addn_template(len(members)), members)
            else:
                total = members[0]
            squashed = self.emit(f"fetch_{k}/Tanh", _TEMPLATES["Tanh"], [total])
            fetches.append(self.emit(f"fetch_{k}", _TEMPLATES["Identity"], [squashed]) + ":0")
        return fetches


def _addn_template(n):
    return _template("AddN", T=_T_FLOAT, N=attr_value_pb2.AttrValue(i=n))


def _string_join_template(n):
    return _template("StringJoin", N=attr_value_pb2.AttrValue(i=n))
