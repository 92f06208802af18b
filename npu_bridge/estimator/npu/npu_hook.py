"""Session hooks of the NPU estimator API (``npu_bridge.estimator.npu.npu_hook``).

Pure-Python hooks: :class:`SetIterationsVarHook`, :class:`NPUOutputTensorHook`,
:class:`TellMeStepOrLossHook`, :class:`NPUCheckpointSaverHook`, :class:`NPUShutDownHook` (runs
the ``NPUShutdown`` marker op at the end).

:class:`NPUBroadcastGlobalVariablesHook` broadcasts the global variables from the root rank once
the session exists, so every rank starts from the root's initial values (with one rank it does
nothing).

The outfeed hooks (``NPULogOutfeedSessionHook``, ``NPUInfeedOutfeedSessionHook``) read a device
channel and raise ``NotImplementedError`` when constructed.
"""

import numbers
import os

import tensorflow as tf
from absl import logging

from npu_adapter.distributed import collectives, groups
from npu_bridge.estimator import npu_ops
from npu_bridge.estimator.npu import util

__all__ = [
    "NPUBroadcastGlobalVariablesHook",
    "NPUCheckpointSaverHook",
    "NPUInfeedOutfeedSessionHook",
    "NPULogOutfeedSessionHook",
    "NPUOutputTensorHook",
    "NPUShutDownHook",
    "SetIterationsVarHook",
    "TellMeStepOrLossHook",
    "broadcast_global_variables",
]

_SessionRunHook = tf.compat.v1.train.SessionRunHook

_ITERATIONS_PER_LOOP_VAR = "iterations_per_loop"
_LOOP_COND_VAR = "loop_cond"
_CONST_ZERO = "zero"
_CONST_ONE = "one"

for _name in (_ITERATIONS_PER_LOOP_VAR, _LOOP_COND_VAR, _CONST_ZERO, _CONST_ONE):
    util.register_func(_name)


class NPUShutDownHook(_SessionRunHook):
    """Runs the ``NPUShutdown`` op (:func:`npu_ops.shutdown_system`) when the session ends."""

    def __init__(self, scaffold=None):
        super().__init__()
        self._scaffold = scaffold
        self._shutdown_npu_op = None

    def begin(self):
        """Build the shutdown op in the session's graph."""
        graph = tf.compat.v1.get_default_graph()
        if self._shutdown_npu_op is None or self._shutdown_npu_op.graph is not graph:
            self._shutdown_npu_op = npu_ops.NPUShutdown()

    def end(self, session):
        """Run the shutdown op."""
        session.run(self._shutdown_npu_op)


def _check_root(root_rank, entry):
    """The root's world rank: ``root_rank`` (None means 0), validated against the rank size."""
    world = groups.get_group(groups.WORLD_GROUP, entry)
    root = 0 if root_rank is None else root_rank
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < world.size:
        raise ValueError(f"{entry}: root_rank={root_rank!r} is not a rank; expected 0 to "
                         f"{world.size - 1}")
    return world, root


def broadcast_variables(variables, root_rank, entry="broadcast_global_variables"):
    """An op giving every variable of ``variables`` the value it has on ``root_rank`` (a no-op
    with one rank). Variables of a dtype the collectives cannot move (strings, resources) are
    left alone."""
    world, root = _check_root(root_rank, entry)
    if world.size == 1:
        return tf.no_op(name="broadcast_global_variables")
    assigns = []
    with tf.name_scope("broadcast_global_variables"):
        for var in variables:
            dtype = var.dtype.base_dtype
            if dtype in (tf.string, tf.resource, tf.variant) or dtype.is_complex:
                continue
            value = collectives.broadcast(tf.convert_to_tensor(var), world, root)
            assigns.append(tf.compat.v1.assign(var, value) if not hasattr(var, "assign")
                           else var.assign(value))
    return tf.group(*assigns, name="broadcast_global_variables")


def broadcast_global_variables(root_rank):
    """An op broadcasting every global variable from ``root_rank``; a no-op with one rank."""
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class NPUBroadcastGlobalVariablesHook(_SessionRunHook):
    """Broadcast the initial global variables from ``root_rank`` (None means 0) to all ranks
    right after the session is created (after the initializers ran or the checkpoint was
    restored). With one rank the hook does nothing.
    """

    def __init__(self, root_rank=None, index=None):
        self._world, self._root_rank = _check_root(root_rank, "NPUBroadcastGlobalVariablesHook")
        self._index = index
        self._bcast_op = None

    def begin(self):
        """Build the broadcast op in the session's graph."""
        graph = tf.compat.v1.get_default_graph()
        if self._world.size > 1 and (self._bcast_op is None or self._bcast_op.graph is not graph):
            self._bcast_op = broadcast_global_variables(self._root_rank)

    def after_create_session(self, session, coord):
        """Run the broadcast."""
        if self._bcast_op is not None:
            session.run(self._bcast_op)


class NPUCheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """``CheckpointSaverHook`` under the original's name. (The original also fetches and logs
    the global step after every step, at the cost of an extra ``Session.run``; this one does
    not.) Being a ``CheckpointSaverHook``, it replaces the estimator's default saver hook."""

    def end(self, session):
        """Save the final checkpoint."""
        logging.info("NPUCheckpointSaverHook end...")
        super().end(session)


class SetIterationsVarHook(_SessionRunHook):
    """Load the loop-sinking variables (``util.create_or_get_var``) for ``iterations_per_loop``
    steps per ``Session.run`` once the session exists."""

    def __init__(self, iterations_per_loop=None):
        util.check_positive_integer(iterations_per_loop, "iterations_per_loop")
        self._iterations_per_loop = iterations_per_loop
        self._variables = None

    def begin(self):
        """Create (or find) the loop variables in the session's graph."""
        self._variables = tuple(util.create_or_get_var(name) for name in (
            _ITERATIONS_PER_LOOP_VAR, _LOOP_COND_VAR, _CONST_ZERO, _CONST_ONE))

    def after_create_session(self, session, coord):
        """Load ``iterations_per_loop - 1``, 0, 0 and 1 into the loop variables."""
        util._load_loop_vars(session, self._variables, self._iterations_per_loop)
        logging.info("load iterations_per_loop value: %d", self._iterations_per_loop)


def _graph_tensor(item):
    """``item`` as a tensor of the default graph, as ``LoggingTensorHook`` resolves it: a tensor
    of that graph, or a tensor name (``"x"`` meaning ``"x:0"`` of a single-output op)."""
    graph = tf.compat.v1.get_default_graph()
    if not isinstance(item, str):
        if getattr(item, "graph", None) is not graph:
            what = getattr(item, "name", type(item).__name__)
            raise ValueError(f"NPUOutputTensorHook: {what} is not a tensor of the session's "
                             "graph")
        return item
    if ":" in item:
        return graph.as_graph_element(item)
    op = graph.get_operation_by_name(item)
    if len(op.outputs) != 1:
        raise ValueError(f"NPUOutputTensorHook: name {item!r} is ambiguous, as op {item!r} has "
                         f"{len(op.outputs)} outputs; name one, e.g. {item + ':0'!r}")
    return op.outputs[0]


class NPUOutputTensorHook(tf.compat.v1.train.LoggingTensorHook):
    """Collect ``tensors`` after every step and pass the collected values to ``output_fn``
    every ``output_every_n_steps`` steps (never, when 0) and at the end.

    ``tensors`` is a dict of tag -> tensor (or name) or a list of tensors/names;
    ``dependencies`` are ops the fetched values must wait for. ``output_fn`` is called with a
    list of ``{tag: value}`` dicts, one per step since the last call.
    """

    def __init__(self, tensors, dependencies=None, output_fn=None, output_every_n_steps=0):
        if output_fn is not None and not callable(output_fn):
            raise TypeError(f"output_fn must be callable, got {type(output_fn).__name__}")
        if tensors is not None and output_fn is None:
            raise ValueError("NPUOutputTensorHook needs an output_fn to pass the tensors to")
        util.check_nonnegative_integer(output_every_n_steps, "output_every_n_steps")
        self._output_fn = output_fn
        self._output_every_n_steps = output_every_n_steps
        self._output_list = []
        self._steps = 0
        self._has_tensors = tensors is not None
        self._fetches = None
        if tensors is None:
            return
        if not isinstance(tensors, dict):
            tensors = {getattr(item, "name", item): item for item in tensors}
        if dependencies is not None:
            if not isinstance(dependencies, (tuple, list)):
                dependencies = [dependencies]
            with tf.control_dependencies(dependencies):
                tensors = {tag: tf.identity(value) for tag, value in tensors.items()}
        super().__init__(tensors, every_n_iter=1 << 31)
        self._tensors_by_tag = dict(sorted(tensors.items()))

    def begin(self):
        """Resolve the tensors in the session's graph."""
        if self._has_tensors:
            self._fetches = {tag: _graph_tensor(value)
                             for tag, value in self._tensors_by_tag.items()}

    def before_run(self, run_context):
        """Request the tensors."""
        if self._has_tensors:
            return tf.compat.v1.train.SessionRunArgs(self._fetches)
        return None

    def after_run(self, run_context, run_values):
        """Stash this step's values; call ``output_fn`` every ``output_every_n_steps`` steps."""
        if self._has_tensors:
            results = run_values.results
            self._output_list.append({tag: results[tag] for tag in self._fetches})
        self._steps += 1
        if self._output_every_n_steps and self._steps % self._output_every_n_steps == 0:
            self._call_output_fn()

    def end(self, session):
        """Pass what is left to ``output_fn``."""
        if self._output_list:
            self._call_output_fn()

    def _call_output_fn(self):
        if self._output_fn is not None:
            self._output_fn(list(self._output_list))
        del self._output_list[:]


class TellMeStepOrLossHook(_SessionRunHook):
    """Report the current step and total steps, or the current loss and target loss, through
    the environment (``STEP_NOW``/``TOTAL_STEP``, ``LOSS_NOW``/``TARGET_LOSS``), which the
    GeOp's accelerate-train logic reads (the TF Adapter documentation of the hook).

    ``step``/``loss`` are tensor names (or tensors; a resource variable's handle such as a TF2
    ``global_step:0`` is read as the variable's value). ``ValueError`` if both are None, if
    ``total_step`` is not a positive int with ``step``, or ``final_loss`` not a number with
    ``loss``. Construction writes ``STEP_NOW=0``/``TOTAL_STEP`` and ``LOSS_NOW=0.0``/
    ``TARGET_LOSS``; every run writes the fetched values, ``ValueError`` if none came back.
    """

    def __init__(self, step=None, total_step=None, loss=None, final_loss=None):
        if step is None and loss is None:
            raise ValueError("TellMeStepOrLossHook: step and loss cannot both be None")
        bad_total = isinstance(total_step, bool) or not isinstance(total_step, int) \
            or total_step <= 0
        if step is not None and bad_total:
            raise ValueError(f"TellMeStepOrLossHook: total_step must be a positive int with "
                             f"step, got {total_step!r}")
        bad_final = isinstance(final_loss, bool) or not isinstance(final_loss, numbers.Real)
        if loss is not None and bad_final:
            raise ValueError(f"TellMeStepOrLossHook: final_loss must be a number with loss, "
                             f"got {final_loss!r}")
        self._step = step
        self._loss = loss
        self._fetches = {}
        if step is not None:
            os.environ["STEP_NOW"] = "0"
            os.environ["TOTAL_STEP"] = str(total_step)
        if loss is not None:
            os.environ["LOSS_NOW"] = "0.0"
            os.environ["TARGET_LOSS"] = str(float(final_loss))

    def begin(self):
        """Resolve the step/loss names in the session's graph. A resource variable's handle
        (``global_step:0`` of a TF2 resource global step) is read as its value."""
        graph = tf.compat.v1.get_default_graph()
        self._fetches = {}
        for key, value in (("step", self._step), ("loss", self._loss)):
            if value is None:
                continue
            element = graph.as_graph_element(value, allow_tensor=True, allow_operation=False)
            if element.dtype == tf.resource and element.op.type == "VarHandleOp":
                element = tf.raw_ops.ReadVariableOp(resource=element,
                                                    dtype=element.op.get_attr("dtype"))
            self._fetches[key] = element

    def before_run(self, run_context):
        """Request the step and/or loss tensors."""
        return tf.compat.v1.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        """Write ``STEP_NOW`` / ``LOSS_NOW``."""
        results = run_values.results or {}
        found = False
        if results.get("step") is not None:
            os.environ["STEP_NOW"] = str(int(results["step"]))
            found = True
        if results.get("loss") is not None:
            os.environ["LOSS_NOW"] = str(float(results["loss"]))
            found = True
        if not found:
            raise ValueError("TellMeStepOrLossHook: neither the step nor the loss tensor was "
                             "fetched")


def _outfeed_hook(name):
    raise NotImplementedError(f"{name} dequeues a device outfeed channel of _tf_adapter.so, "
                              "which this pure-Python build does not provide; fetch the tensors "
                              "with Session.run or a LoggingTensorHook instead")


class NPULogOutfeedSessionHook(_SessionRunHook):
    """Device log outfeed: not provided (``NotImplementedError``)."""

    def __init__(self, output_stream=None):
        _outfeed_hook("NPULogOutfeedSessionHook")


class NPUInfeedOutfeedSessionHook(_SessionRunHook):
    """Device host-call outfeed: not provided (``NotImplementedError``)."""

    def __init__(self, dequeue_ops=None, channel_name=None):
        _outfeed_hook("NPUInfeedOutfeedSessionHook")
