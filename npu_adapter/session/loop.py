"""Loop sinking: one ``Session.run`` of the loop target runs ``iterations_per_loop`` steps.

The original sinks the training loop into the device: with the session option
``iterations_per_loop`` = N and a target op named ``IterationOp`` (what
``util.set_iteration_per_loop``, ``IterationPerLoop`` and ``NPUEstimator`` make:
``tf.group(train_op, name="IterationOp")``), the GeOp runs its graph N times per run, taking the
next N batches from the dataset; fetched values are the last step's. We do the same with one
TensorFlow while loop around the rewritten signature, so the N steps cost one ``Session.run``:

* what must exist once per run stays outside the loop: state owners (variables, iterators,
  queues, tables), graph inputs (placeholders: a ``feed_dict`` script gets the same feed in each
  step, as on the device) and constants that depend on nothing else;
* everything else of the signature (the cluster calls, ``IteratorGetNext``, the updates) is
  imported into the body of a TF1 while loop (``Enter``/``Exit`` frames, so reference variables
  of ``VariableV2`` work as loop invariants), with ``parallel_iterations=1`` so that each step
  sees the previous step's updates;
* the fetched values leave the loop as loop variables (the last iteration's values).
"""

import re

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from npu_adapter.errors import NpuAdapterError
from npu_adapter.graph.extract import FED_TENSOR_ATTR
from npu_adapter.graph.names import parse_input
from npu_adapter.graph.types import op_def_for

__all__ = ["LoopSinkingError", "loop_target", "install_loop"]

# ``tf.group(..., name="IterationOp")`` in any name scope, uniquified or not.
_LOOP_TARGET_RE = re.compile(r"(?:^|/)IterationOp(?:_\d+)?\Z")
_INPUT_OPS = frozenset({"Placeholder", "Const", "HostConst"})


class LoopSinkingError(NpuAdapterError):
    """A run signature cannot be sunk into a loop (the message says which tensor and why)."""


def loop_target(op_names, config):
    """The ``IterationOp`` among ``op_names`` when this run sinks ``iterations_per_loop`` > 1
    steps into one run, else None."""
    if int(getattr(config, "iterations_per_loop", 1)) <= 1:
        return None
    for name in op_names:
        if _LOOP_TARGET_RE.search(name):
            return name
    return None


def _stays_outside(node):
    if node.op in _INPUT_OPS or FED_TENSOR_ATTR in node.attr:
        return True
    from npu_adapter.graph.state import is_state_owner

    return is_state_owner(op_def_for(node.op))


def split_outside(graph_def):
    """Names of the nodes that run once per ``Session.run``: state owners, graph inputs and
    constants, provided every input (data or control) they have is outside too — a Const
    with a control input from a step node (TF's gradients make such) must run in each step."""
    outside = set()
    for node in graph_def.node:  # GraphDefs of a rewrite are in topological order
        if _stays_outside(node) and all(parse_input(t)[0] in outside for t in node.input):
            outside.add(node.name)
    return outside


def _initial_value(dtype):
    base = dtype.base_dtype
    if base == tf.string:
        return tf.constant("")
    if base in (tf.resource, tf.variant):
        return None
    return tf.zeros([], base)


def install_loop(execution_graph, graph_def, iterations, *, fetches, targets, feeds):
    """Install ``graph_def`` (a rewritten signature) in ``execution_graph`` as a loop of
    ``iterations`` steps per run. Arguments as :meth:`ExecutionGraph.install`; returns its
    :class:`~npu_adapter.session.execution_graph.Installed`."""
    from npu_adapter.session.execution_graph import Installed

    outside = split_outside(graph_def)
    out_def = graph_pb2.GraphDef()
    out_def.versions.CopyFrom(graph_def.versions)
    out_def.library.CopyFrom(graph_def.library)
    out_def.node.extend(n for n in graph_def.node if n.name in outside)
    in_def = graph_pb2.GraphDef()  # its functions enter the execution graph with out_def
    in_def.versions.CopyFrom(graph_def.versions)
    inside = [n for n in graph_def.node if n.name not in outside]
    in_def.node.extend(inside)
    needed = set()
    for node in in_def.node:
        if "_class" in node.attr:
            del node.attr["_class"]  # colocation with nodes outside the loop frame: dropped
        for text in node.input:
            src, port, is_control = parse_input(text)
            if src in outside:
                needed.add(f"^{src}" if is_control else f"{src}:{port}")
    # Fetched tensors computed outside the loop are read there directly.
    for name in fetches.values():
        node, port, _ = parse_input(name)
        if node in outside:
            needed.add(f"{node}:{port}")

    with execution_graph.lock:
        graph = execution_graph.graph
        execution_graph.add_functions(graph_def.library)
        base = execution_graph.install(out_def,
                                       fetches={t: t for t in needed if not t.startswith("^")},
                                       targets={t[1:]: t[1:] for t in needed
                                                if t.startswith("^")},
                                       feeds=feeds)
        execution_graph.note_ops(in_def)
        input_map = {}
        for name in needed:
            if name.startswith("^"):
                op = base.ops[name[1:]]
                if op.outputs:
                    input_map[name] = op.outputs[0]
            else:
                input_map[name] = base.tensors[name]
        loop_fetches = sorted({v for v in fetches.values() if parse_input(v)[0] not in outside})
        loop_targets = sorted({v for v in targets.values() if v not in outside})
        scope = graph.unique_name("npu_loop")
        with graph.as_default(), tf.name_scope(scope + "/"):
            exits = _build_loop(graph, in_def, input_map, loop_fetches, loop_targets,
                                iterations, _fetch_dtypes(graph_def, loop_fetches))
        counter_exit, fetch_exits = exits[0], dict(zip(loop_fetches, exits[1:]))
    tensors = {}
    for user, name in fetches.items():
        tensors[user] = fetch_exits[name] if name in fetch_exits else base.tensors[name]
    ops = dict.fromkeys(targets, counter_exit.op)
    return Installed(tensors, ops, base.feeds)


def _build_loop(graph, in_def, input_map, fetch_names, target_names, iterations, dtypes):
    from npu_adapter.tf_compat import while_context

    # Loop variables: the step counter and one per fetched tensor. Their initial values are
    # never seen (at least one step runs); they only fix the dtype.
    initial = [tf.constant(0, name="iteration")]
    for name, dtype in zip(fetch_names, dtypes):
        value = _initial_value(dtype)
        if value is None:
            raise LoopSinkingError(
                f"iterations_per_loop: the fetched tensor {name!r} is a {dtype.name}, which "
                "cannot be carried out of the loop; fetch it in a separate run")
        initial.append(value)
    invariants = [tf.TensorShape([])] + [tf.TensorShape(None)] * len(fetch_names)

    def cond(i, *_):
        return i < iterations

    def body(i, *_):
        elements = tf.graph_util.import_graph_def(
            in_def, input_map=input_map or None,
            return_elements=list(fetch_names) + list(target_names), name="step")
        values = elements[:len(fetch_names)]
        ops = elements[len(fetch_names):]
        with tf.control_dependencies(ops + [v.op for v in values]):
            step = tf.add(i, 1)
            out = [tf.identity(v) for v in values]
        return [step] + out

    context = while_context()(parallel_iterations=1, back_prop=False, swap_memory=False)
    return context.BuildLoop(cond, body, initial, invariants, True)


def _fetch_dtypes(graph_def, fetch_names):
    """The dtypes of the tensors ``fetch_names`` of ``graph_def``."""
    from npu_adapter.graph.types import base_type
    from npu_adapter.graph.view import GraphView

    view = GraphView(graph_def)
    dtypes = []
    for name in fetch_names:
        node, port, _ = parse_input(name)
        types = view.output_types(view.index[node])
        if types is None:
            raise LoopSinkingError(
                f"iterations_per_loop: cannot tell the dtype of the fetched tensor {name!r}")
        dtypes.append(tf.as_dtype(base_type(types[port])))
    return dtypes
