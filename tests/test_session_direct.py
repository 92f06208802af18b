"""Signatures whose installed form is the user's own graph run on a TensorFlow session of the
user's graph (npu_adapter/session/direct.py): plain TensorFlow's values, nothing imported into
the shadow graph; every signature the rewrite changes otherwise still takes the shadow."""

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.graph.inline import inline_calls
from npu_adapter.graph.serialized import serialized_graph_def
from npu_adapter.profiling.trace import CLUSTER_OP, ClusterIndex, events_from_step_stats
from npu_adapter.session import NpuSession, plain_session_class
from npu_adapter.session.direct import keeps_no_state, resolves_to_user_graph
from npu_adapter.session.shadow import ShadowGraph
from npu_bridge.estimator.npu.npu_scope import without_npu_compile_scope

tf1 = tf.compat.v1
PlainSession = plain_session_class()


def npu_config(**options):
    return NpuConfig.from_dict(options).to_config_proto()


def frozen_graph(batch=None):
    """x ─► relu(x·w0) = h0 ─► softmax(h0·w1) = y: weights are Consts, nothing keeps state."""
    rs = np.random.RandomState(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [batch, 8], name="x")
        w0 = tf.constant(rs.randn(8, 8).astype(np.float32), name="w0")
        w1 = tf.constant(rs.randn(8, 4).astype(np.float32), name="w1")
        h0 = tf.nn.relu(tf.matmul(x, w0), name="h0")
        y = tf.nn.softmax(tf.matmul(h0, w1), name="y")
    return graph, x, h0, y


def feed_value(rows=3, seed=0):
    return np.random.RandomState(seed).randn(rows, 8).astype(np.float32)


def shadow_ops(graph):
    return ShadowGraph.for_graph(graph).graph.get_operations()


def ran_direct(sess, fetches, feed_dict):
    mapper_elements = [fetches] if not isinstance(fetches, (list, tuple)) else fetches
    names = sess._npu_names(mapper_elements, list(feed_dict))
    return any(sig.direct for (key, _), sig in sess._npu_signatures.items() if key == names)


@pytest.mark.parametrize("options", [{}, {"mix_compile_mode": True}], ids=["full", "mix"])
def test_a_frozen_graph_runs_on_the_users_graph_with_plain_values(options):
    graph, x, h0, y = frozen_graph()
    feeds = [{x: feed_value(seed=k)} for k in range(2)]
    with PlainSession(graph=graph) as plain:
        want = [plain.run(y, feed) for feed in feeds]
    with NpuSession(graph=graph, config=npu_config(**options)) as sess:
        got = [sess.run(y, feed) for feed in feeds]
        assert sess.npu_rewrite_result(y, feeds[0]).clusters  # rewritten all the same
        assert ran_direct(sess, y, feeds[0])
        assert sess._npu_direct.graph is graph
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()
    assert shadow_ops(graph) == []  # nothing was imported


def test_fed_inner_tensors_and_fetch_structures_stay_the_users():
    graph, x, h0, y = frozen_graph()
    inner = {h0: np.abs(feed_value(2, seed=3))}
    with PlainSession(graph=graph) as plain:
        want = plain.run({"y": y, "h": h0, "both": [y, x]}, {x: feed_value(2), **inner})
        want_cut = plain.run(y, inner)
    with NpuSession(graph=graph, config=npu_config()) as sess:
        got = sess.run({"y": y, "h": h0, "both": [y, x]}, {x: feed_value(2), **inner})
        got_cut = sess.run(y, inner)  # the feed cuts the graph at h0
        assert ran_direct(sess, y, inner)
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["h"], want["h"])
    np.testing.assert_array_equal(got["both"][0], want["both"][0])
    np.testing.assert_array_equal(got_cut, want_cut)
    assert shadow_ops(graph) == []


def test_errors_name_the_users_node():
    graph, x, _, y = frozen_graph(batch=3)
    with NpuSession(graph=graph, config=npu_config()) as sess:
        with pytest.raises(ValueError, match="shape"):
            sess.run(y, {x: feed_value(rows=5)})
        with pytest.raises(tf.errors.InvalidArgumentError, match="'x'"):
            sess.run(y)  # not fed


def _with_variable():
    graph, x, h0, y = frozen_graph()
    with graph.as_default():
        v = tf1.get_variable("v", initializer=np.ones((4,), np.float32), use_resource=True)
        z = tf.multiply(y, v, name="z")
        init = tf1.global_variables_initializer()
    return graph, x, z, init


def _with_gated_cluster():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 8], name="x")
        with without_npu_compile_scope():
            gate = tf.no_op(name="host_gate")
        with tf1.control_dependencies([gate]):
            y = tf.nn.relu(tf.matmul(x, tf.ones([8, 2])), name="y")
    return graph, x, y


@pytest.mark.parametrize("case", ["variable", "gated_call"])
def test_state_and_ordering_the_user_asked_for_run_on_the_users_graph(case):
    # A cluster call waiting for a host op (its order is the user's control edge again) and a
    # signature with state (its variable's state lives on the user graph's session).
    init = None
    if case == "variable":
        graph, x, y, init = _with_variable()
    else:
        graph, x, y = _with_gated_cluster()
    feed = {x: feed_value(rows=3)}
    with PlainSession(graph=graph) as plain:
        if init is not None:
            plain.run(init)
        want = plain.run(y, feed)
    with NpuSession(graph=graph, config=npu_config()) as sess:
        if init is not None:
            sess.run(init)
        got = sess.run(y, feed)
        assert sess.npu_rewrite_result(y, feed).clusters
        assert ran_direct(sess, y, feed)
    assert shadow_ops(graph) == []
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["precision", "gears", "option_off", "xla", "dump"])
def test_signatures_the_rewrite_changes_run_in_the_shadow(case, tmp_path):
    graph, x, _, y = frozen_graph()
    options = {
        "precision": {"npu_adapter_emulate_precision": "on",
                      "precision_mode": "allow_fp32_to_fp16"},
        # (Under the exact policy the chosen gear's copy runs on the user's graph:
        # tests/test_gears.py; pad_up keeps the in-graph dispatcher.)
        "gears": {"input_shape": "x:-1,8", "dynamic_dims": "3;4",
                  "dynamic_node_type": 1, "npu_adapter_gear_policy": "pad_up"},
        "option_off": {"npu_adapter_run_on_user_graph": False},
        "xla": {"npu_adapter_backend": "xla"},
        "dump": {"enable_dump": True, "dump_path": str(tmp_path), "dump_step": "0"},
    }[case]
    feed = {x: feed_value(rows=3)}
    with PlainSession(graph=graph) as plain:
        want = plain.run(y, feed)
    with NpuSession(graph=graph, config=npu_config(**options)) as sess:
        got = sess.run(y, feed)
        assert sess.npu_rewrite_result(y, feed).clusters
        assert not ran_direct(sess, y, feed)
        assert "_npu_direct" not in sess.__dict__
    assert shadow_ops(graph)
    if case == "precision":
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3)  # float16 inside
    elif case == "xla":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)  # XLA's own kernels
    else:
        np.testing.assert_array_equal(got, want)


def test_a_callable_without_feeds_installs_a_direct_signature_in_the_shadow():
    graph, x, _, y = frozen_graph()
    with graph.as_default():
        total = tf.reduce_sum(tf.matmul(tf.ones([2, 8]), graph.get_tensor_by_name("w0:0")),
                              name="total")
    with PlainSession(graph=graph) as plain:
        want = plain.run(total)
    with NpuSession(graph=graph, config=npu_config()) as sess:
        assert sess.run(total) == want
        assert shadow_ops(graph) == []
        assert sess.make_callable(total)() == want  # a TensorFlow callable of the shadow
        assert shadow_ops(graph)
        assert sess.run(total) == want


def test_a_closed_session_raises_as_tensorflows_does():
    graph, x, _, y = frozen_graph()
    sess = NpuSession(graph=graph, config=npu_config())
    sess.run(y, {x: feed_value()})
    sess.close()
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(y, {x: feed_value()})


def test_a_traced_direct_run_attributes_the_users_nodes_to_their_cluster():
    graph, x, _, y = frozen_graph()
    metadata = tf1.RunMetadata()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(y, {x: feed_value()},
                 options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                 run_metadata=metadata)
        result = sess.npu_rewrite_result(y, {x: feed_value()})
    index = ClusterIndex().add_graph(result.graph_def)
    events = {e.node: e for e in events_from_step_stats(metadata.step_stats, index)}
    cluster = result.clusters[0].name
    assert (events["h0"].kind, events["h0"].cluster) == (CLUSTER_OP, cluster)


# ---------------------------------------------------------------------- the proof itself
def _installed(graph, fetches, feeds, **options):
    """(Inlined, user nodes, maps) as a CPU-reference session would install the signature."""
    graph_def, _ = serialized_graph_def(graph)
    result = npu_adapter.rewrite(graph_def, NpuConfig.from_dict(options), fetches=fetches,
                                 feeds=feeds, lazy_weights=True)
    light, _ = result.light_parts()
    clusters = {c.name for c in result.clusters}
    inlined = inline_calls(light, lambda call, fdef: fdef.signature.name in clusters,
                           body_names=True)
    maps = {"fetches": {t: result.tensor_map.get(t, t) for t in fetches},
            "targets": {}, "feeds": {f: result.feed_map.get(f, f) for f in feeds}}
    return inlined, {n.name: n for n in graph_def.node}, maps


def test_the_proof_follows_forwarders_to_the_users_nodes():
    graph, *_ = frozen_graph()
    inlined, user_nodes, maps = _installed(graph, ["y:0", "h0:0"], ["x:0"])
    assert inlined.calls and inlined.pass_through == frozenset(inlined.calls)
    assert resolves_to_user_graph(inlined, user_nodes, **maps)
    # The fetched node kept its name for the rewrite's alias; its body copy is renamed.
    assert {name: body for name, body in inlined.origins.items() if name != body} == {
        f"{inlined.calls[0]}/y": "y", f"{inlined.calls[0]}/h0": "h0"}


@pytest.mark.parametrize("spoil", ["attr", "waits_for_a_foreign_node", "stand_waits_for_one",
                                   "drops_a_user_order", "cycle"])
def test_the_proof_fails_when_anything_differs(spoil):
    graph, *_ = frozen_graph()
    inlined, user_nodes, maps = _installed(graph, ["y:0"], ["x:0"])
    graph_def = type(inlined.graph_def)()
    graph_def.CopyFrom(inlined.graph_def)
    nodes = {n.name: n for n in graph_def.node}
    if spoil == "attr":
        nodes["h0"].attr["_extra"].b = True
    elif spoil in ("waits_for_a_foreign_node", "stand_waits_for_one"):
        # A node of the rewrite's own (no user's node, no gate) would run before the fetch.
        foreign = graph_def.node.add(name="foreign", op="Const")
        foreign.attr["dtype"].type = tf.float32.as_datatype_enum
        foreign.attr["value"].tensor.dtype = tf.float32.as_datatype_enum
        waiting = f"{inlined.calls[0]}/y" if spoil == "waits_for_a_foreign_node" \
            else inlined.calls[0]
        nodes[waiting].input.append("^foreign")
    elif spoil == "drops_a_user_order":
        # The user's h0 waits for x; the installed one does not.
        user_nodes = dict(user_nodes)
        ordered = type(user_nodes["h0"])()
        ordered.CopyFrom(user_nodes["h0"])
        ordered.input.append("^x")
        user_nodes["h0"] = ordered
    else:
        nodes["h0"].input.append("^MatMul_1")  # MatMul_1 reads h0: a cycle
    spoilt = inlined._replace(graph_def=graph_def)
    assert not resolves_to_user_graph(spoilt, user_nodes, **maps)


def test_the_order_a_call_adds_is_not_the_users_to_keep():
    # The body's copy of the fetched node waits for x (as the call's control input would make
    # it): more order than the user's graph asks for, on the user's own nodes.
    graph, *_ = frozen_graph()
    inlined, user_nodes, maps = _installed(graph, ["y:0"], ["x:0"])
    graph_def = type(inlined.graph_def)()
    graph_def.CopyFrom(inlined.graph_def)
    for node in graph_def.node:
        if node.name == f"{inlined.calls[0]}/y":
            node.input.append("^x")
    assert resolves_to_user_graph(inlined._replace(graph_def=graph_def), user_nodes, **maps)


def test_state_is_read_from_every_node_and_function():
    graph, *_ = frozen_graph()
    graph_def = graph.as_graph_def()
    assert keeps_no_state(graph_def)
    stateful = type(graph_def)()
    stateful.CopyFrom(graph_def)
    fdef = stateful.library.function.add()
    fdef.signature.name = "F"
    fdef.node_def.add(name="r", op="RandomUniform")
    stateful.node.add(name="call", op="F")
    assert not keeps_no_state(stateful)
    variable = type(graph_def)()
    variable.CopyFrom(graph_def)
    variable.node.add(name="v", op="VarHandleOp")
    assert not keeps_no_state(variable)


def test_a_shape_check_passes_its_input_on_only_when_the_shapes_were_checked():
    # A gear's copy of a cluster pins the fed input's shape with an EnsureShape: the session
    # checked that shape when it chose the gear, so the check passes the input on.
    graph, *_ = frozen_graph()
    inlined, user_nodes, maps = _installed(graph, ["y:0"], ["x:0"])
    graph_def = type(inlined.graph_def)()
    graph_def.CopyFrom(inlined.graph_def)
    check = graph_def.node.add(name="x_0_arg_pinned_shape", op="EnsureShape", input=["x"])
    check.attr["T"].type = tf.float32.as_datatype_enum
    check.attr["shape"].shape.dim.add(size=3)
    check.attr["shape"].shape.dim.add(size=8)
    for node in graph_def.node:
        if node.name == "MatMul":
            node.input[0] = check.name
    pinned = inlined._replace(graph_def=graph_def)
    assert resolves_to_user_graph(pinned, user_nodes, shapes_checked=True, **maps)
    assert not resolves_to_user_graph(pinned, user_nodes, **maps)
