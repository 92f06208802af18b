"""Numerical equivalence harness: run a graph and its rewrite on the same inputs and compare.

The rewritten client graph is spliced into a copy of the original graph exactly as ``NpuSession``
does (unchanged nodes, variables in particular, are shared), then two plain TensorFlow sessions run
the original fetches and the rewritten ones. Both sessions start from the same variable values:
after the initialisers run in the first session, every variable is snapshotted and loaded into
the second, so even randomly initialised variables agree. Training graphs can run several steps
(``targets`` such as a train op) and every step's fetches are compared.
"""

import numpy as np
import tensorflow as tf

from npu_adapter.graph.names import parse_input
from npu_adapter.graph.splice import plan_splice, splice_into_graph
from npu_adapter.testing.values import difference

__all__ = ["assert_rewrite_equivalent", "run_graph_def", "compare_values", "variable_reads"]

_tf1 = tf.compat.v1
_VARIABLE_OPS = ("VariableV2", "Variable")


def _plain_session(*args, **kwargs):
    """TensorFlow's own Session, even while ``npu_adapter.install()`` is in effect."""
    from npu_adapter.session import plain_session_class

    return plain_session_class()(*args, **kwargs)


def variable_reads(graph):
    """``[(variable op name, tensor reading its value)]`` for every variable of ``graph``: TF1
    ref variables (``VariableV2``) read through their own output, resource variables
    (``VarHandleOp``) through a new ``ReadVariableOp`` (made in the ``npu_testing_state`` scope)."""
    reads = []
    with graph.as_default(), tf.name_scope("npu_testing_state"):
        for op in graph.get_operations():
            if op.type in _VARIABLE_OPS:
                reads.append((op.name, op.outputs[0]))
            elif op.type == "VarHandleOp":
                dtype = tf.as_dtype(op.get_attr("dtype"))
                reads.append((op.name, tf.raw_ops.ReadVariableOp(resource=op.outputs[0],
                                                                  dtype=dtype)))
    return reads


def _state_ops(graph):
    """Build read/assign ops for every variable of ``graph``; returns a list of handles."""
    handles = []
    for name, read in variable_reads(graph):
        op = graph.get_operation_by_name(name)
        with graph.as_default(), tf.name_scope("npu_testing_state"):
            if op.type in _VARIABLE_OPS:
                ph = _tf1.placeholder(read.dtype.base_dtype, read.shape)
                assign = _tf1.assign(read, ph, validate_shape=False).op
            else:
                ph = _tf1.placeholder(read.dtype)
                assign = tf.raw_ops.AssignVariableOp(resource=op.outputs[0], value=ph)
        handles.append((name, read, ph, assign))
    return handles


def _snapshot(sess, handles):
    values = {}
    for name, read, _, _ in handles:
        try:
            values[name] = sess.run(read)
        except tf.errors.OpError:
            continue  # not initialised by the init ops: nothing to carry over
    return values


def _restore(sess, handles, values):
    for name, _, ph, assign in handles:
        if name in values:
            sess.run(assign, {ph: values[name]})


def compare_values(expected, actual, rtol=0.0, atol=0.0, what="value"):
    """Assert two fetched values are equal (bitwise when rtol == atol == 0; NaNs compare equal)."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        raise AssertionError(f"{what}: expected {expected.dtype}{list(expected.shape)}, got "
                             f"{actual.dtype}{list(actual.shape)}")
    if rtol == 0 and atol == 0 or expected.dtype.kind not in "fc":
        found = difference(expected, actual)
        if found is not None:
            diff = f" (max abs difference {found.max_abs_diff:.3g})" \
                if found.max_abs_diff is not None else ""
            raise AssertionError(f"{what} differs after the rewrite{diff}: {found.describe()}")
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def run_graph_def(graph_def, fetches, feeds=None, targets=(), init=(), session_config=None):
    """Import ``graph_def`` into a fresh graph and run ``fetches`` once (after ``init`` ops)."""
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with _plain_session(graph=graph, config=session_config) as sess:
        for op in init:
            sess.run(op)
        feed_dict = {k if ":" in k else k + ":0": v for k, v in (feeds or {}).items()}
        out = sess.run(list(fetches) + [graph.get_operation_by_name(t) for t in targets],
                       feed_dict)
    return out[:len(fetches)]


def assert_rewrite_equivalent(graph_def, config=None, feeds=None, fetches=None, *, targets=(),
                              init=(), steps=1, rtol=0.0, atol=0.0, backend="cpu",
                              session_config=None, **rewrite_kwargs):
    """Rewrite ``graph_def`` and assert the rewrite computes the same fetches.

    Args:
        graph_def: the original GraphDef.
        config: anything :func:`npu_adapter.rewrite` accepts as config.
        feeds: dict tensor name → numpy value (also the rewrite's feeds).
        fetches: tensor names to compare.
        targets: ops run with the fetches at every step (e.g. a train op).
        init: ops run once before the steps (e.g. ``"init"``).
        steps: number of runs; fetches are compared at every step.
        rtol, atol: tolerances; 0 (default) means bit-for-bit equality.
        backend: the backend to rewrite for.
        session_config: ConfigProto for both plain sessions.
        **rewrite_kwargs: passed to ``rewrite``.

    Returns:
        The :class:`~npu_adapter.pipeline.result.RewriteResult`.
    """
    from npu_adapter.api import rewrite

    feeds = dict(feeds or {})
    feed_names = [k if ":" in k else k + ":0" for k in feeds]
    fetches = [f if ":" in f else f + ":0" for f in (fetches or ())]
    result = rewrite(graph_def, config, fetches=fetches, feeds=feed_names, targets=list(targets),
                     backend=backend, **rewrite_kwargs)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    rename = splice_into_graph(graph, plan_splice(result.graph_def,
                                                  {n.name: n for n in graph_def.node}),
                               "npu_rewritten")
    handles = _state_ops(graph)

    def mapped_tensor(name):
        target = result.tensor_map.get(name, name)
        node, port, _ = parse_input(target)
        return graph.get_tensor_by_name(f"{rename(node)}:{port}")

    def mapped_op(name):
        return graph.get_operation_by_name(rename(result.op_map.get(name, name)))

    feed_dict = {graph.get_tensor_by_name(k): v for k, v in zip(feed_names, feeds.values())}
    plain = [graph.get_tensor_by_name(f) for f in fetches]
    plain_targets = [graph.get_operation_by_name(t) for t in targets]
    new = [mapped_tensor(f) for f in fetches]
    new_targets = [mapped_op(t) for t in targets]
    with _plain_session(graph=graph, config=session_config) as sess_a:
        for op in init:
            sess_a.run(op)
        state = _snapshot(sess_a, handles)
        expected = [sess_a.run(plain + plain_targets, feed_dict)[:len(plain)]
                    for _ in range(steps)]
    with _plain_session(graph=graph, config=session_config) as sess_b:
        for op in init:
            sess_b.run(op)
        _restore(sess_b, handles, state)
        actual = [sess_b.run(new + new_targets, feed_dict)[:len(new)] for _ in range(steps)]
    for step in range(steps):
        for name, e, a in zip(fetches, expected[step], actual[step]):
            compare_values(e, a, rtol, atol, what=f"fetch {name!r} at step {step}")
    return result
