"""Moving a session's variables from the direct session to the shadow's session.

An NpuSession runs a signature whose installed form is the user's own nodes on a TensorFlow
session of the user's graph (:mod:`npu_adapter.session.direct`); a signature with state runs
there while the session's state lives there. When a later signature with state can only run on
the shadow graph (its rewrite changes what it computes), the state moves: each variable the
direct session holds a value for is assigned that value in the shadow's session, and every later
signature with state runs on the shadow. Only graphs whose state is all variables (and random
ops and checkpoint files, which need no copy) ever run with state on the direct session, so the
variables' values are the whole state to move.
"""

import tensorflow as tf
from tensorflow.core.framework import graph_pb2, tensor_shape_pb2

__all__ = ["move_variables"]

_SCOPE = "npu_adapter_moved_state"
# What reading a variable no run assigned raises (a resource variable's may not exist yet).
_UNINITIALISED = (tf.errors.FailedPreconditionError, tf.errors.NotFoundError)


def _initialised_values(source, variables):
    """``{variable name: value}`` of the ``variables`` that ``source`` (a TensorFlow session
    of the user's graph) holds a value for; an uninitialised one is left out."""
    if not variables:
        return {}
    try:
        values = source.run([v.value for v in variables])
        return {v.name: value for v, value in zip(variables, values)}
    except _UNINITIALISED:
        pass  # some are uninitialised: read them one by one
    found = {}
    for variable in variables:
        try:
            found[variable.name] = source.run(variable.value)
        except _UNINITIALISED:
            continue
    return found


def _assign_graph(variables, user_nodes):
    """A GraphDef assigning a fed value to each of ``variables`` (their own nodes copied from
    ``user_nodes``), and the names of its assign ops and value placeholders by variable."""
    graph_def = graph_pb2.GraphDef()
    unknown = tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
    assigns, placeholders = {}, {}
    for variable in variables:
        graph_def.node.add().CopyFrom(user_nodes[variable.name])
        value = graph_def.node.add(name=f"{_SCOPE}/{variable.name}/value", op="Placeholder")
        value.attr["dtype"].type = variable.dtype
        value.attr["shape"].shape.CopyFrom(unknown)
        assign = graph_def.node.add(name=f"{_SCOPE}/{variable.name}/assign",
                                    input=[variable.name, value.name])
        if variable.resource:
            assign.op = "AssignVariableOp"
            assign.attr["dtype"].type = variable.dtype
        else:
            assign.op = "Assign"
            assign.attr["T"].type = variable.dtype
            assign.attr["validate_shape"].b = False
            assign.attr["use_locking"].b = True
        assigns[variable.name] = assign.name
        placeholders[variable.name] = value.name + ":0"
    return graph_def, assigns, placeholders


def move_variables(source, shadow, variables, run):
    """Assign in the shadow's TensorFlow session the value each of ``variables`` (see
    :func:`~npu_adapter.session.direct.movable_variables`) has in ``source``.

    Args:
        source: the TensorFlow session of the user's graph holding the state.
        shadow: the :class:`~npu_adapter.session.shadow.ShadowGraph` to install into.
        variables: the user graph's variables, or None when some state of the graph cannot be
            moved (then nothing is moved and ``RuntimeError`` names why).
        run: ``run(fetches, feeds)`` on the shadow's TensorFlow session.
    """
    if variables is None:
        raise RuntimeError(
            "npu-adapter: this session ran signatures with state on the user's graph, and a "
            "later one must run rewritten, but the graph's state can no longer be moved "
            "(the graph gained state other than variables, or a resource variable it never "
            "reads). Set the session option npu_adapter_run_on_user_graph to false to run "
            "every signature on the rewritten graph.")
    values = _initialised_values(source, variables)
    moving = [v for v in variables if v.name in values]
    if not moving:
        return
    _, user_nodes = shadow.user_graph_def()
    graph_def, assigns, placeholders = _assign_graph(moving, user_nodes)
    installed = shadow.install(graph_def, user_nodes, targets={a: a for a in assigns.values()},
                               feeds={p: p for p in placeholders.values()})
    run([installed.ops[assigns[v.name]] for v in moving],
        {installed.feeds[placeholders[v.name]]: values[v.name] for v in moving})
