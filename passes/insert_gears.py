"""``insert_gears``: compile each cluster with dynamic inputs into one static-shape copy per gear.

The original adapter only forwards ``input_shape``/``dynamic_dims``/``dynamic_node_type`` (and the
subgraph-scope attrs of ``set_op_input_tensor_multi_dims``) to GE, which builds the gears. We have
no GE, so this pass does that job in TensorFlow terms, after ``encapsulate``:

* Dynamic inputs of a cluster. Whole-graph gears: with ``dynamic_node_type=1`` the placeholders
  named in ``input_shape`` (matched by name; the original assigns entries positionally to the
  name-sorted inputs, which is the same when the names are in alphabetical order, as the docs
  require); with ``dynamic_node_type=0`` the outputs of the graph's single ``IteratorGetNext``,
  positionally. Subgraph gears: the inputs, at the given indexes, of the node carrying
  ``_subgraph_multi_dims_input_shape``. Whole-graph gears win when both are configured.
* For each gear ``g`` the cluster function ``F`` is copied as ``F_gear_<g>`` with the gear's static
  shapes on the dynamic arguments (``_output_shapes`` arg attrs and an ``EnsureShape`` each).
* ``F`` itself becomes a dispatcher: it computes the runtime shapes, picks the gear (policy
  ``exact``, the original's, or our opt-in ``pad_up``), fails with ``InvalidArgumentError``
  naming every input, its shape and the allowed gears when none fits, and calls the gear through
  a ``Case``. With ``pad_up`` it pads the inputs to the chosen gear (zeros, or the values of
  ``npu_adapter_gear_pad_values``) and slices the outputs named in ``npu_adapter_gear_unpad``
  back (an unpadded axis is matched to the first dynamic input dim whose gear length equals the
  axis length — declare gears so that different dynamic dims do not share lengths when their
  outputs must be unpadded).

The cluster node keeps its name and function; it gains ``_npu_adapter_gears`` (one text entry
per gear, see :meth:`npu_adapter.pipeline.gears.GearTable.describe`), ``_npu_adapter_gear_patterns``
(each dynamic input with ``-1`` for its dynamic dims) and ``_npu_adapter_gear_policy``.
"""

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2

from npu_adapter.errors import RewriteError
from npu_adapter.graph.extract import FED_TENSOR_ATTR
from npu_adapter.graph.functions import graph_to_function_def, pin_arg_shapes, rename_function
from npu_adapter.graph.names import parse_input
from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.pipeline.gears import (
    GRAPH_INPUT_OPS,
    GearTable,
    gear_table_from_trio,
    not_a_graph_input,
    parse_subgraph_gears,
    wrong_getnext_count,
)
from npu_adapter.pipeline.registry import register_pass
from npu_adapter.vocabulary import (
    CLUSTER_GEAR_PATTERNS_ATTR,
    CLUSTER_GEARS_ATTR,
    CLUSTER_INPUTS_ATTR,
    CLUSTER_OUTPUTS_ATTR,
    GEAR_POLICY_ATTR,
    GEOP_OP,
    SUBGRAPH_MULTI_DIMS_DIMS_ATTR,
    SUBGRAPH_MULTI_DIMS_SHAPE_ATTR,
)

from ._common import copy_graph

__all__ = ["InsertGearsPass"]

_tf1 = tf.compat.v1


def _assert(condition, data, summarize, name=None):
    """A plain ``Assert`` op (``tf.debugging.Assert`` wraps one in a cond with generated
    function names, which would make the rewrite depend on process-global counters)."""
    return tf.raw_ops.Assert(condition=condition, data=data, summarize=summarize, name=name)


class _Plan:
    """What to do for one cluster: its table and which function args it covers."""

    def __init__(self, node_index, table, arg_indexes):
        self.node_index = node_index
        self.table = table
        self.arg_indexes = arg_indexes  # function arg index per table input


# Graph inputs a dynamic_node_type=1 gear may name (a fed placeholder_with_default is one too).
def _whole_graph_plans(view, config, geops):
    trio = config.dims_trio()
    if trio.node_type == 1:
        tensors = []
        # A fed tensor that is not a Placeholder's output stands as a new placeholder in the
        # client graph (see npu_adapter.graph.extract): find it by the tensor it stands for.
        stand_ins = {}
        for node in view.graph_def.node:
            fed = node.attr.get(FED_TENSOR_ATTR)
            if fed is not None:
                stand_ins[fed.s.decode()] = node.name
        clustered = {n.name: n.op for i in geops
                     for n in view.functions[view.node_at(i).attr["function"].func.name].node_def}
        for name, _ in trio.inputs:
            name = stand_ins.get(f"{name}:0", name)
            i = view.index.get(name)
            if i is None and (clustered.get(name) == "PlaceholderWithDefault" or
                              name not in clustered):
                # Not fed in this run: a placeholder_with_default computes its default inside
                # the cluster, whose shape is static; like the original (gears are the GeOp's
                # arguments), no gear. A run that does not read the input at all (a
                # variable's initialiser) has none either. (rewrite() checks that the name is
                # a graph input of the user's graph.)
                tensors.append(None)
                continue
            if i is None or view.ops[i] not in GRAPH_INPUT_OPS:
                raise not_a_graph_input(view, name)
            tensors.append(f"{name}:0")
    else:
        getnext = [i for i, op in enumerate(view.ops) if op == "IteratorGetNext"]
        if not getnext:
            return []  # a run that reads no dataset (rewrite() checks the user's graph has one)
        if len(getnext) != 1:
            raise wrong_getnext_count(len(getnext))
        node = view.node_at(getnext[0])
        outputs = len(node.attr["output_types"].list.type)
        if outputs != len(trio.inputs):
            raise RewriteError(
                f"input_shape is not match inputs num in graph: input_shape has "
                f"{len(trio.inputs)} entries, {node.name!r} has {outputs} outputs",
                code="InvalidArgument", node=node.name)
        tensors = [f"{node.name}:{k}" for k in range(outputs)]
    full = gear_table_from_trio(trio, tensors)
    _check_static_shapes(view, full, trio.node_type)
    plans = []
    for i in geops:
        inputs = [s.decode() for s in view.node_at(i).attr[CLUSTER_INPUTS_ATTR].list.s]
        picked = [(t, inputs.index(tensor)) for t, tensor in enumerate(tensors) if tensor in inputs]
        if not picked:
            continue
        rows = [t for t, _ in picked]
        table = GearTable(tuple(full.names[t] for t in rows),
                          tuple(full.patterns[t] for t in rows),
                          tuple(tuple(gear[t] for t in rows) for gear in full.gears))
        plans.append(_Plan(i, table, [arg for _, arg in picked]))
    return plans


def _static_dims(view, tensor, node_type):
    """Known dims of a whole-graph gear input (-1 for unknown), or None if its rank is unknown."""
    node_name, _, port = tensor.rpartition(":")
    node = view.node(node_name)
    if node_type == 1:
        shape = node.attr["shape"].shape if "shape" in node.attr else None
    else:
        shapes = node.attr["output_shapes"].list.shape if "output_shapes" in node.attr else ()
        shape = shapes[int(port)] if int(port) < len(shapes) else None
    if shape is None or shape.unknown_rank:
        return None
    return [d.size for d in shape.dim]


def _check_static_shapes(view, table, node_type):
    """Every ``input_shape`` entry must fit the input it names: the same rank, the same value
    for each dim the graph fixes, and gears that keep those dims; otherwise no gear could ever
    match at run time (the original leaves this to GE, which fails when the graph is built)."""
    for t, (tensor, pattern) in enumerate(zip(table.names, table.patterns)):
        if tensor is None:
            continue  # an unfed placeholder_with_default: no gear (see _whole_graph_plans)
        dims = _static_dims(view, tensor, node_type)
        if dims is None:
            continue
        what = "placeholder" if node_type == 1 else "dataset output"
        given = ",".join(str(d) for d in pattern) if pattern else "0 (a scalar)"
        shape = "[" + ", ".join("?" if d < 0 else str(d) for d in dims) + "]"
        head = f"input_shape entry {tensor.rpartition(':')[0]!r}: {given}"
        if len(pattern) != len(dims):
            raise RewriteError(
                f"{head} has {len(pattern)} dim(s), but {what} {tensor!r} has shape {shape} "
                f"(rank {len(dims)}), so no gear could ever match; give one dim per "
                "dimension, -1 for the dynamic ones", code="InvalidArgument", node=tensor)
        for axis, (want, have) in enumerate(zip(pattern, dims)):
            if have < 0:
                continue
            if want != -1 and want != have:
                raise RewriteError(
                    f"{head} sets dim {axis} to {want}, but {what} {tensor!r} has shape {shape} "
                    f"(dim {axis} is fixed to {have}), so no gear could ever match",
                    code="InvalidArgument", node=tensor)
            if want == -1:
                for g, gear in enumerate(table.gears):
                    if gear[t][axis] != have:
                        raise RewriteError(
                            f"{head}: gear {g} ({table.describe(g)}) gives dim {axis} the "
                            f"value {gear[t][axis]}, but {what} {tensor!r} has shape {shape} "
                            f"(dim {axis} is fixed to {have}), so that gear could never match",
                            code="InvalidArgument", node=tensor)


def _subgraph_plans(view, geops):
    plans = []
    for i in geops:
        node = view.node_at(i)
        fdef = view.functions[node.attr["function"].func.name]
        arg_index = {a.name: k for k, a in enumerate(fdef.signature.input_arg)}
        inputs = [s.decode() for s in node.attr[CLUSTER_INPUTS_ATTR].list.s]
        names, patterns, arg_indexes, gear_sets = [], [], [], []
        for body in fdef.node_def:
            if SUBGRAPH_MULTI_DIMS_SHAPE_ATTR not in body.attr:
                continue
            indexes, pats, gears = parse_subgraph_gears(
                body.attr[SUBGRAPH_MULTI_DIMS_SHAPE_ATTR].s.decode(),
                body.attr[SUBGRAPH_MULTI_DIMS_DIMS_ATTR].s.decode()
                if SUBGRAPH_MULTI_DIMS_DIMS_ATTR in body.attr else "", body.name)
            data_inputs = [t for t in body.input if not t.startswith("^")]
            for index, pattern in zip(indexes, pats):
                if index >= len(data_inputs) or data_inputs[index] not in arg_index:
                    raise RewriteError(
                        f"set_op_input_tensor_multi_dims on {body.name!r}: input {index} must "
                        "come from outside the subgraph scope (the scope's input node)",
                        code="InvalidArgument", node=body.name)
                k = arg_index[data_inputs[index]]
                arg_indexes.append(k)
                names.append(inputs[k])
                patterns.append(pattern)
            gear_sets.append((body.name, gears))
        if not gear_sets:
            continue
        counts = {len(g) for _, g in gear_sets}
        if len(counts) > 1:
            raise RewriteError(
                "every node of a subgraph_multi_dims_scope needs the same number of gears; "
                + ", ".join(f"{n!r} has {len(g)}" for n, g in gear_sets),
                code="InvalidArgument")
        gears = tuple(tuple(shape for _, g in gear_sets for shape in g[k])
                      for k in range(counts.pop()))
        plans.append(_Plan(i, GearTable(tuple(names), tuple(patterns), gears), arg_indexes))
    return plans


def _branch(fdef, name, plan, g):
    """Copy of the cluster function with gear ``g``'s static shapes on the dynamic args."""
    shapes = {k: plan.table.gears[g][t] for t, k in enumerate(plan.arg_indexes)}
    return rename_function(pin_arg_shapes(fdef, shapes), name)


def _dispatcher(fdef, plan, policy, pad_values, unpad, cluster, branch_names):
    """The cluster function rewritten as shape check → gear choice → (pad) → Case → (unpad)."""
    table = plan.table
    sig = fdef.signature
    graph = tf.Graph()
    with graph.as_default():
        args = [_tf1.placeholder(tf.as_dtype(a.type), name=f"arg_{k}")
                for k, a in enumerate(sig.input_arg)]
        shapes, checks = [], []
        for t, k in enumerate(plan.arg_indexes):
            shape = tf.shape(args[k], out_type=tf.int64, name=f"shape_{t}")
            rank = len(table.patterns[t])
            checks.append(_assert(
                tf.equal(tf.size(shape, out_type=tf.int64), rank),
                [f"{cluster}: input '{table.names[t]}' must have rank {rank} "
                 f"(gears: {table.describe_all()}); its shape is", shape],
                summarize=64, name=f"rank_check_{t}"))
            shapes.append(shape)
        with tf.control_dependencies(checks):
            actual = tf.concat(shapes, 0, name="actual_dims")
        gear_table = tf.constant(np.array([table.flat_gear(g) for g in range(len(table.gears))],
                                          np.int64), name="gear_table")
        if policy == "exact":
            match = tf.reduce_all(tf.equal(gear_table, actual[None, :]), axis=1)
            found = tf.reduce_any(match)
            index = tf.argmax(tf.cast(match, tf.int32), output_type=tf.int32)
        else:
            static = tf.constant([d != -1 for d in table.flat_patterns])
            fits = tf.where(static[None, :], tf.equal(gear_table, actual[None, :]),
                            tf.greater_equal(gear_table, actual[None, :]))
            cover = tf.reduce_all(fits, axis=1)
            cost = tf.constant([table.elements(g) for g in range(len(table.gears))], tf.int64)
            masked = tf.where(cover, cost, tf.fill(tf.shape(cost), np.int64(2 ** 62)))
            found = tf.reduce_any(cover)
            index = tf.argmin(masked, output_type=tf.int32)
        data = [f"{cluster}: the input shapes match no gear (policy {policy}); inputs:"]
        for t in range(len(table.names)):
            data += [f"input {table.names[t]} has shape", shapes[t]]
        data.append(f"allowed gears: {table.describe_all()}")
        check = _assert(found, data, summarize=4096, name="gear_check")
        with tf.control_dependencies([check]):
            index = tf.identity(index, name="gear_index")
        case_inputs = list(args)
        if policy == "pad_up":
            row = tf.gather(gear_table, index, name="gear_row")
            offset = 0
            for t, k in enumerate(plan.arg_indexes):
                rank = len(table.patterns[t])
                amount = row[offset:offset + rank] - shapes[t]
                offset += rank
                paddings = tf.stack([tf.zeros_like(amount), amount], axis=1)
                value = pad_values.get(table.names[t], 0)
                case_inputs[k] = tf.pad(args[k], paddings,
                                        constant_values=tf.cast(value, args[k].dtype),
                                        name=f"pad_{t}")
        outs = [_tf1.placeholder(tf.as_dtype(o.type), name=f"case_out_{j}")
                for j, o in enumerate(sig.output_arg)]
        results = list(outs)
        if policy == "pad_up" and unpad:
            dynamic = [p for p, d in enumerate(table.flat_patterns) if d == -1]
            padded = tf.gather(row, dynamic, name="gear_dynamic")
            real = tf.gather(actual, dynamic, name="actual_dynamic")
            for j, axes in sorted(unpad.items()):
                for axis in axes:
                    size = tf.shape(results[j], out_type=tf.int64)
                    length = size[axis]
                    hits = tf.equal(padded, length)
                    with tf.control_dependencies([_assert(
                            tf.reduce_any(hits),
                            [f"{cluster}: output {j} axis {axis} (npu_adapter_gear_unpad) has "
                             "length", length, "which is no padded input dim of the chosen gear",
                             padded], summarize=64)]):
                        keep = tf.gather(real, tf.argmax(tf.cast(hits, tf.int32)))
                    begin = tf.zeros_like(size)
                    sizes = tf.tensor_scatter_nd_update(-tf.ones_like(size), [[axis]], [keep])
                    results[j] = tf.slice(results[j], begin, sizes, name=f"unpad_{j}_{axis}")
        for j, r in enumerate(results):
            tf.identity(r, name=f"result_{j}")
    body = graph.as_graph_def()
    case = body.node.add()
    case.name = "gear_case"
    case.op = "Case"
    case.input.append(index.name.rsplit(":", 1)[0])
    for tensor in case_inputs:
        node, port = tensor.name.rsplit(":", 1)
        case.input.append(node if port == "0" else tensor.name)
    case.attr["Tin"].list.type.extend(a.type for a in sig.input_arg)
    case.attr["Tout"].list.type.extend(o.type for o in sig.output_arg)
    case.attr["branches"].list.func.extend(attr_value_pb2.NameAttrList(name=b)
                                           for b in branch_names)
    case.attr["output_shapes"].list.SetInParent()
    placeholders = {f"case_out_{j}": j for j in range(len(outs))}
    kept = graph_pb2.GraphDef()
    kept.versions.CopyFrom(body.versions)
    for node in body.node:
        if node.name in placeholders:
            continue
        copy = kept.node.add()
        copy.CopyFrom(node)
        for pos, text in enumerate(copy.input):
            src, port, is_control = parse_input(text)
            if src in placeholders and not is_control:
                j = placeholders[src]
                copy.input[pos] = "gear_case" if j == 0 else f"gear_case:{j}"
    out = graph_to_function_def(
        kept, sig.name,
        [(f"arg_{k}", a.name, a.type) for k, a in enumerate(sig.input_arg)],
        [(f"result_{j}:0", o.name, o.type) for j, o in enumerate(sig.output_arg)],
        is_stateful=True)
    # The original function's control outputs live on in every branch; the Case runs one.
    return out


@register_pass
class InsertGearsPass(PassBase):
    """Turn clusters with configured dynamic inputs into gear dispatchers."""

    name = "insert_gears"

    def run(self, graph_def, ctx, view):
        config = ctx.config
        geops = [i for i, op in enumerate(view.ops) if op == GEOP_OP]
        if not geops:
            return PassResult(graph_def, False, {"clusters": 0})
        functions = view.functions
        has_scopes = any(SUBGRAPH_MULTI_DIMS_SHAPE_ATTR in body.attr for i in geops
                         for body in functions[view.node_at(i).attr["function"].func.name].node_def)
        if config.dims_trio() is None and not has_scopes:
            return PassResult(graph_def, False, {"clusters": 0})
        if config.dims_trio() is not None:
            if has_scopes:
                import warnings

                warnings.warn("both whole-graph gears (input_shape/dynamic_dims) and "
                              "subgraph_multi_dims_scope gears are configured; the whole-graph "
                              "gears win, as in the original", UserWarning, stacklevel=2)
            plans = _whole_graph_plans(view, config, geops)
            source = "dynamic_dims"
        else:
            plans = _subgraph_plans(view, geops)
            source = "subgraph_multi_dims_scope"
        if not plans:
            return PassResult(graph_def, False, {"clusters": 0, "source": source})
        policy = config.npu_adapter_gear_policy or "exact"
        pad_values = config.gear_pad_values()
        unpad_by_tensor = config.gear_unpad()
        out = copy_graph(graph_def)
        functions = {f.signature.name: k for k, f in enumerate(out.library.function)}
        info = {}
        for plan in plans:
            node = out.node[plan.node_index]
            fname = node.attr["function"].func.name
            fdef = out.library.function[functions[fname]]
            outputs = [s.decode() for s in node.attr[CLUSTER_OUTPUTS_ATTR].list.s]
            unpad = {outputs.index(t): axes for t, axes in unpad_by_tensor.items()
                     if t in outputs}
            pads = {}
            for name in plan.table.names:
                node_name = parse_input(name)[0]
                for key in (name, node_name):
                    if key in pad_values:
                        pads[name] = pad_values[key]
            branch_names = [f"{fname}_gear_{g}" for g in range(len(plan.table.gears))]
            original = type(fdef)()
            original.CopyFrom(fdef)
            for g, bname in enumerate(branch_names):
                out.library.function.add().CopyFrom(_branch(original, bname, plan, g))
            fdef.CopyFrom(_dispatcher(original, plan, policy, pads, unpad, node.name,
                                      branch_names))
            node.attr[CLUSTER_GEARS_ATTR].list.s.extend(
                plan.table.describe(g).encode() for g in range(len(plan.table.gears)))
            node.attr[CLUSTER_GEAR_PATTERNS_ATTR].list.s.extend(
                f"{name}:{','.join(str(d) for d in dims)}".encode()
                for name, dims in zip(plan.table.names, plan.table.patterns))
            node.attr[GEAR_POLICY_ATTR].s = policy.encode()
            info[node.name] = len(plan.table.gears)
        return PassResult(out, True, {"source": source, "gears": info, "policy": policy})
