"""Signatures with state on the user's graph (npu_adapter/session/direct.py): a TF1 training
script whose rewrite is the user's own nodes runs its initialiser and steps where plain
TensorFlow would, with plain TensorFlow's values; when a later signature with state must run
rewritten on the shadow, the variables' values move there first
(npu_adapter/session/state_move.py)."""

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import mlp_feeds, mlp_graph

from npu_adapter.config import NpuConfig
from npu_adapter.session import NpuSession, plain_session_class
from npu_adapter.session.direct import movable_variables
from npu_adapter.session.shadow import ShadowGraph

tf1 = tf.compat.v1
PlainSession = plain_session_class()
UNINITIALISED = (tf.errors.FailedPreconditionError, tf.errors.NotFoundError)
# A rewrite that changes what the matmuls compute (float16 inside): signatures with one run
# on the shadow; the initialiser, without one, is still the user's nodes.
PRECISION = {"npu_adapter_emulate_precision": "on", "precision_mode": "allow_fp32_to_fp16"}


def npu_config(**options):
    return NpuConfig.from_dict(options).to_config_proto()


def training_graph(use_resource, optimizer="momentum"):
    """x → dense(relu) → dense → mean squared error, a global step, a TF1 optimizer."""
    return mlp_graph(use_resource, optimizer)


def feeds(graph, seed):
    return {graph.get_tensor_by_name(name): value for name, value in mlp_feeds(seed).items()}


def train(sess, graph, steps, first_seed=0):
    loss = graph.get_tensor_by_name("loss:0")
    op = graph.get_operation_by_name("train")
    return [sess.run([loss, op], feeds(graph, first_seed + k))[0] for k in range(steps)]


def weights(sess, graph):
    return sess.run(list(graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)))


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_a_training_script_runs_on_the_users_graph_bit_for_bit(use_resource, optimizer):
    graph = training_graph(use_resource, optimizer)
    init = graph.get_operation_by_name("init")
    with PlainSession(graph=graph) as plain:
        plain.run(init)
        want_losses = train(plain, graph, 5)
        want = weights(plain, graph)
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        losses = train(sess, graph, 5)
        got = weights(sess, graph)
        assert sess.npu_rewrite_result(graph.get_tensor_by_name("loss:0"),
                                       feeds(graph, 0)).clusters
        assert sess._npu_state_home == "user"
    assert [a.tobytes() for a in losses] == [b.tobytes() for b in want_losses]
    for a, b in zip(got, want):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert ShadowGraph.for_graph(graph).graph.get_operations() == []


@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_state_moves_to_the_shadow_when_a_later_signature_must_run_there(use_resource):
    graph = training_graph(use_resource)
    init = graph.get_operation_by_name("init")
    loss = graph.get_tensor_by_name("loss:0")
    # The reference: every signature installed in the shadow, the same options.
    with NpuSession(graph=graph, config=npu_config(npu_adapter_run_on_user_graph=False,
                                                   **PRECISION)) as reference:
        reference.run(init)
        want_start = weights(reference, graph)
        want_losses = train(reference, graph, 3)
        want = weights(reference, graph)
    with NpuSession(graph=graph, config=npu_config(**PRECISION)) as sess:
        sess.run(init)
        assert sess._npu_state_home == "user"  # the initialiser is the user's nodes
        start = weights(sess, graph)
        losses = train(sess, graph, 3)  # float16 matmuls: runs rewritten, on the shadow
        assert sess._npu_state_home == "shadow"
        assert sess.npu_rewrite_result(loss, feeds(graph, 0)).clusters
        got = weights(sess, graph)
        assert sess._npu_direct is not None
    for a, b in zip(start, want_start):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(losses, want_losses)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_a_variable_never_initialised_stays_so_when_state_moves(use_resource):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [2, 3], name="x")
        with tf1.variable_scope("v", use_resource=use_resource):
            w = tf1.get_variable("w", initializer=np.ones((3, 3), np.float32))
            later = tf1.get_variable("later", initializer=np.full((3,), 2.0, np.float32))
        product = tf.matmul(x, w, name="product")  # rewritten under PRECISION
        bump = tf1.assign_add(w, tf.ones([3, 3]), name="bump")
    with NpuSession(graph=graph, config=npu_config(**PRECISION)) as sess:
        sess.run(w.initializer)
        sess.run(bump)  # state on the user's graph: w = 2
        assert sess._npu_state_home == "user"
        got = sess.run(product, {x: np.ones((2, 3), np.float32)})  # moves the state
        assert sess._npu_state_home == "shadow"
        np.testing.assert_array_equal(got, np.full((2, 3), 6.0, np.float32))
        np.testing.assert_array_equal(sess.run(w), np.full((3, 3), 2.0, np.float32))
        with pytest.raises(UNINITIALISED):
            sess.run(later.read_value() if use_resource else later)


def test_a_graph_with_state_that_cannot_move_keeps_signatures_with_state_on_the_shadow():
    graph = tf.Graph()
    with graph.as_default():
        queue = tf1.FIFOQueue(4, [tf.float32], shapes=[[2]], name="queue")
        enqueue = queue.enqueue([tf.constant([1.0, 2.0])], name="enqueue")
        total = tf.reduce_sum(queue.dequeue() * 3.0, name="total")
    assert movable_variables(graph.as_graph_def()) is None
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(enqueue)
        sess.run(enqueue)
        assert sess.run(total) == 9.0
        assert sess.run(total) == 9.0
        assert sess._npu_state_home == "shadow"
        assert "_npu_direct" not in sess.__dict__


def test_movable_variables_lists_the_variables_and_refuses_other_state():
    graph = training_graph(use_resource=True)
    found = movable_variables(graph.as_graph_def())
    assert [v.name for v in found] == sorted(v.name for v in found)
    by_name = {v.name: v for v in found}
    assert by_name["mlp/w1"].resource
    assert by_name["mlp/w1"].value == "mlp/w1/Read/ReadVariableOp:0"
    assert by_name["mlp/w1"].dtype == tf.float32.as_datatype_enum
    ref = movable_variables(training_graph(use_resource=False).as_graph_def())
    assert {v.name: v.value for v in ref}["mlp/w1"] == "mlp/w1:0"
    # A resource variable the graph never reads plainly: its value cannot be copied.
    unread = graph.as_graph_def()
    for node in unread.node:
        if node.op == "ReadVariableOp":
            node.input.append("^x")
    assert movable_variables(unread) is None
    with_function = graph.as_graph_def()
    with_function.library.function.add().signature.name = "f"
    assert movable_variables(with_function) is None


def test_a_session_whose_state_lived_on_the_users_graph_hands_on_no_state():
    graph = training_graph(use_resource=False)
    init = graph.get_operation_by_name("init")
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        train(sess, graph, 2)
    with NpuSession(graph=graph, config=npu_config()) as sess, pytest.raises(UNINITIALISED):
        train(sess, graph, 1)  # uninitialised, as in a fresh TensorFlow session


def test_an_rnn_training_step_runs_with_plain_values():
    # A TF1 RNN: a while loop over TensorArrays (state that lives for one run), as
    # dynamic_rnn builds it under disable_v2_behavior (TF1 control flow).
    graph = tf.Graph()
    tf1.disable_control_flow_v2()
    try:
        _rnn_training(graph)
    finally:
        tf1.enable_control_flow_v2()
    x = graph.get_tensor_by_name("x:0")
    loss = graph.get_tensor_by_name("loss:0")
    init = graph.get_operation_by_name("init")
    assert movable_variables(graph.as_graph_def()) is not None
    feed = {x: np.random.RandomState(0).randn(4, 2, 3).astype(np.float32)}
    train_op = graph.get_operation_by_name("train")
    with PlainSession(graph=graph) as plain:
        plain.run(init)
        want = [plain.run([loss, train_op], feed)[0] for _ in range(3)]
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        got = [sess.run([loss, train_op], feed)[0] for _ in range(3)]
    np.testing.assert_array_equal(got, want)


def _rnn_training(graph):
    with graph.as_default():
        tf1.set_random_seed(11)
        x = tf1.placeholder(tf.float32, [4, 2, 3], name="x")  # time, batch, features
        w = tf1.get_variable("w", [3 + 5, 5], use_resource=False)
        inputs = tf.TensorArray(tf.float32, size=4).unstack(x)
        outputs = tf.TensorArray(tf.float32, size=4)

        def step(t, h, out):
            h = tf.tanh(tf.matmul(tf.concat([inputs.read(t), h], 1), w))
            return t + 1, h, out.write(t, h)

        _, _, outputs = tf1.while_loop(lambda t, *_: t < 4, step,
                                       [tf.constant(0), tf.zeros([2, 5]), outputs])
        loss = tf.reduce_mean(tf.square(outputs.stack()), name="loss")
        tf1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        tf1.global_variables_initializer()
