"""The execution graph: the user's graph is never modified; sessions on one graph share one
rewrite; round trips; state stays one per session."""

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.config import NpuConfig
from npu_adapter.session import (
    NpuSession,
    graph_rewrites,
    is_npu_session,
    plain_session_class,
    runner_of,
)

tf1 = tf.compat.v1
PlainSession = plain_session_class()


def npu_config(**options):
    return NpuConfig.from_dict(options).to_config_proto()


def train_graph():
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(1)
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        y = tf1.placeholder(tf.float32, [None, 1], name="y")
        w = tf1.get_variable("w", [4, 1])
        pred = tf.matmul(tf.nn.relu(x), w, name="pred")
        loss = tf.reduce_mean(tf.square(pred - y), name="loss")
        step = tf1.train.get_or_create_global_step()
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step,
                                                                 name="train")
        init = tf1.global_variables_initializer()
        tf1.train.Saver()
    return graph, x, y, loss, train, init


def data(seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(8, 4).astype(np.float32), rs.randn(8, 1).astype(np.float32)


def snapshot(graph):
    return (graph.as_graph_def().SerializeToString(deterministic=True),
            sorted(graph.get_all_collection_keys()),
            {k: len(graph.get_collection(k)) for k in graph.get_all_collection_keys()})


def test_the_users_graph_is_left_as_it_was():
    graph, x, y, loss, train, init = train_graph()
    before = snapshot(graph)
    xs, ys = data()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        for _ in range(3):
            sess.run([loss, train], {x: xs, y: ys})
        assert sess.graph is graph
        assert sess.graph_def.SerializeToString(deterministic=True) == before[0]
        assert runner_of(sess).rewrite_result([loss, train], {x: xs, y: ys}).clusters
    assert snapshot(graph) == before
    with graph.as_default():
        exported = tf1.train.export_meta_graph(graph=graph)
    assert not any(n.name.startswith("npu_rewrite") or n.op == "GeOp" for n in
                   exported.graph_def.node)
    assert not exported.graph_def.library.function


def test_meta_graph_and_checkpoint_equal_plain_tensorflows(tmp_path):
    xs, ys = data()
    saved = {}
    for cls in (PlainSession, NpuSession):
        graph, x, y, loss, train, init = train_graph()
        with graph.as_default():
            saver = tf1.train.Saver()
        with cls(graph=graph, config=npu_config()) as sess:
            sess.run(init)
            sess.run(train, {x: xs, y: ys})
            prefix = saver.save(sess, str(tmp_path / cls.__name__ / "model"))
        reader = tf1.train.NewCheckpointReader(prefix)
        with tf.Graph().as_default() as loaded:
            tf1.train.import_meta_graph(prefix + ".meta")
        saved[cls] = ({k: reader.get_tensor(k).tobytes() for k in
                       reader.get_variable_to_shape_map()},
                      sorted(n.name for n in loaded.as_graph_def().node))
    assert saved[PlainSession] == saved[NpuSession]


def test_sessions_on_one_graph_share_the_rewrite_and_add_nothing(monkeypatch):
    import npu_adapter.api

    calls = []
    real_rewrite = npu_adapter.api.rewrite

    def counting_rewrite(*args, **kwargs):
        calls.append(kwargs.get("fetches"))
        return real_rewrite(*args, **kwargs)

    monkeypatch.setattr(npu_adapter.api, "rewrite", counting_rewrite)
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        w = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
        probs = tf.nn.softmax(tf.matmul(x, w), name="probs")
    feed = {x: np.ones((2, 3), np.float32)}
    want = PlainSession(graph=graph).run(probs, feed)
    for _ in range(20):
        with NpuSession(graph=graph, config=npu_config()) as sess:
            assert sess.run(probs, feed).tobytes() == want.tobytes()
    assert len(calls) == 1
    assert len(graph_rewrites(graph)) == 1  # the 20th session adds what the 2nd does: nothing
    assert len(graph.get_operations()) == 4
    # Other options are another rewrite, installed once too.
    with NpuSession(graph=graph, config=npu_config(mix_compile_mode=True)) as sess:
        sess.run(probs, feed)
    assert len(calls) == 2


def test_a_graph_taken_from_a_session_loads_into_another_session(tmp_path):
    graph, x, y, loss, train, init = train_graph()
    xs, ys = data()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        sess.run(train, {x: xs, y: ys})
        graph_def = sess.graph_def
        with sess.graph.as_default():
            meta = tf1.train.export_meta_graph(graph=sess.graph)
    for source in (graph_def, meta.graph_def):
        fresh = tf.Graph()
        with fresh.as_default():
            tf.graph_util.import_graph_def(source, name="")
        with NpuSession(graph=fresh, config=npu_config()) as sess:
            sess.run(fresh.get_operation_by_name("init"))
            value = sess.run("loss:0", {"x:0": xs, "y:0": ys})
            assert np.isfinite(value)
            assert runner_of(sess).rewrite_result("loss:0", {"x:0": xs, "y:0": ys}).clusters


def test_a_fed_intermediate_tensor_and_a_fetched_feed():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [3], name="x")
        h = tf.abs(x, name="h")
        out = tf.square(h, name="out")
    feeds = {h: np.array([1.0, 2.0, 3.0], np.float32)}
    with NpuSession(graph=graph, config=npu_config()) as sess, PlainSession(graph=graph) as ref:
        assert sess.run(out, feeds).tobytes() == ref.run(out, feeds).tobytes()
        got = sess.run([h, out], feeds)
        want = ref.run([h, out], feeds)
        assert [a.tobytes() for a in got] == [b.tobytes() for b in want]


def test_string_names_sparse_feeds_and_partial_runs():
    graph = tf.Graph()
    with graph.as_default():
        sp = tf1.sparse_placeholder(tf.float32, name="sp")
        total = tf.sparse.reduce_sum(sp, name="total")
        a = tf1.placeholder(tf.float32, [], name="a")
        b = tf1.placeholder(tf.float32, [], name="b")
        c = tf.multiply(a, 2.0, name="c")
        d = tf.add(c, b, name="d")
    value = tf1.SparseTensorValue([[0, 0], [1, 2]], [1.5, 2.0], [2, 3])
    with NpuSession(graph=graph, config=npu_config()) as sess:
        assert is_npu_session(sess)
        assert sess.run(total, {sp: value}) == pytest.approx(3.5)
        assert sess.run("total:0", {sp: value}) == pytest.approx(3.5)
        handle = sess.partial_run_setup([c, d], [a, b])
        assert sess.partial_run(handle, c, {a: 3.0}) == pytest.approx(6.0)
        assert sess.partial_run(handle, d, {b: 1.0}) == pytest.approx(7.0)


def test_callable_from_options_maps_user_names():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [2], name="x")
        tf.nn.relu(x * 3.0, name="y")
    with NpuSession(graph=graph, config=npu_config()) as sess:
        from tensorflow.core.protobuf import config_pb2

        options = config_pb2.CallableOptions(feed=["x:0"], fetch=["y:0"])
        call = sess._make_callable_from_options(options)
        np.testing.assert_array_equal(call(np.array([1.0, -1.0], np.float32))[0], [3.0, 0.0])


def test_a_fresh_graph_with_the_same_content_reuses_the_rewrite(counted_passes):
    from npu_adapter.session import rewrite_cache

    runs = counted_passes
    rs = np.random.RandomState(0)
    feed = rs.randn(2, 1024).astype(np.float32)
    outputs = []
    # 4 MB of weights: the rewrite runs without them (graph/payload.py), so graphs that differ
    # in their weight values only share one rewrite.
    for weights in (rs.randn(1024, 1024), rs.randn(1024, 1024)):
        graph = tf.Graph()
        with graph.as_default():
            x = tf1.placeholder(tf.float32, [None, 1024], name="x")
            w = tf.constant(weights.astype(np.float32), name="w")
            probs = tf.nn.softmax(tf.matmul(x, w), name="probs")
        with NpuSession(graph=graph, config=npu_config()) as sess:
            outputs.append(sess.run(probs, {x: feed}))
        with PlainSession(graph=graph) as sess:
            assert outputs[-1].tobytes() == sess.run(probs, {x: feed}).tobytes()
    assert len(runs) == 1  # the second graph differs in its weights only: no pass runs
    assert rewrite_cache.MEMORY.hits == 1
    assert not np.array_equal(outputs[0], outputs[1])


def test_a_users_function_call_runs_with_plain_values():
    graph = tf.Graph()
    with graph.as_default():
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)], autograph=False)
        def add(v):
            return v * 2.0 + 1.0

        x = tf1.placeholder(tf.float32, [None], name="x")
        y = tf.identity(add(x), name="y")
    feed = {x: np.array([1.0, -3.0], np.float32)}
    with NpuSession(graph=graph, config=npu_config()) as sess, PlainSession(graph=graph) as ref:
        for _ in range(2):
            assert sess.run(y, feed).tobytes() == ref.run(y, feed).tobytes()


def _tiny_step_nodes(min_graph_nodes=None, isolate=False):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [2, 2], name="x")
        y = tf.tanh(tf.matmul(x, tf.constant(np.eye(2, dtype=np.float32))) + 1.0, name="y")
    config = npu_config(npu_adapter_isolate_clusters=isolate)
    if min_graph_nodes is not None:
        config.graph_options.rewrite_options.min_graph_nodes = min_graph_nodes
    feed = {x: np.ones((2, 2), np.float32)}
    with NpuSession(graph=graph, config=config) as sess:
        sess.run(y, feed)
        metadata = tf1.RunMetadata()
        value = sess.run(y, feed, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                         run_metadata=metadata)
    with PlainSession(graph=graph) as sess:
        assert value.tobytes() == sess.run(y, feed).tobytes()
    return [n.node_name for d in metadata.step_stats.dev_stats for n in d.node_stats]


def test_a_tiny_cluster_runs_inlined_whatever_grapplers_minimum():
    # The session installs the cluster inlined (graph/inline.py): no function _Arg/_Retval
    # nodes run, also under a Grappler minimum the user set, which leaves calls as they are;
    # the body is the user's nodes again, under their own names.
    for minimum in (None, 100):
        names = _tiny_step_nodes(min_graph_nodes=minimum)
        assert not any(n.endswith(("_RetVal", "_arg")) for n in names), names
        assert "MatMul" in names, names
    # Isolated clusters stay calls and run as functions of their own.
    names = _tiny_step_nodes(isolate=True)
    assert any(n.endswith("_RetVal") for n in names), names


def test_a_tiny_call_left_a_call_is_inlined_by_grappler_unless_the_user_chose_its_minimum(
        monkeypatch):
    # A call the install leaves a call (as the xla backend's are): the rewritten signature has
    # fewer nodes than Grappler's default minimum, so the session lowers that minimum and
    # Grappler inlines the call; a minimum the user set is theirs.
    from npu_adapter.backends.cpu import CpuReferenceBackend

    monkeypatch.setattr(CpuReferenceBackend, "inlines_calls_at_install", False)
    names = _tiny_step_nodes()
    assert not any(n.endswith(("_RetVal", "_arg")) for n in names), names
    names = _tiny_step_nodes(min_graph_nodes=100)
    assert any(n.endswith("_RetVal") for n in names), names


@pytest.mark.parametrize("make_state", ["variable_v2", "queue"])
def test_a_state_owner_the_rewrite_changed_keeps_one_state(make_state):
    # A state owner created under a control dependency on an op that goes into a cluster: the
    # rewrite rewires that control input to the cluster, so every signature imports its own
    # copy of the node under a rewrite scope. They must share the user's node's state.
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        out = tf.matmul(x, tf.ones([4, 2]), name="out")
        with tf1.control_dependencies([out.op]):
            if make_state == "variable_v2":
                state = tf.raw_ops.VariableV2(shape=[2], dtype=tf.float32, name="state")
            else:
                state = tf.raw_ops.FIFOQueueV2(component_types=[tf.float32], name="state")
        if make_state == "variable_v2":
            write = tf1.assign(state, [1.0, 2.0], name="write").op
            read = tf.multiply(state, 2.0, name="read")
        else:
            write = tf.raw_ops.QueueEnqueueV2(handle=state, components=[tf.constant(3.0)],
                                              name="write")
            read = tf.raw_ops.QueueDequeueV2(handle=state, component_types=[tf.float32],
                                             name="read")[0]
    feed = {x: np.ones((1, 4), np.float32)}
    results = []
    for session_cls, config in ((PlainSession, None), (NpuSession, npu_config())):
        with session_cls(graph=graph, config=config) as sess:
            sess.run([out, write], feed)
            results.append(sess.run(read, feed,
                                    options=tf1.RunOptions(timeout_in_ms=5000)))
    np.testing.assert_array_equal(results[1], results[0])


def test_a_node_named_like_the_scope_of_another_keeps_its_values():
    # ``a`` and ``a/b`` are both user nodes: each keeps its name in the execution graph.
    graph_def = tf1.GraphDef()
    x = graph_def.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = tf.float32.as_datatype_enum
    for name, value in (("a/two", 2.0), ("one", 1.0)):
        const = graph_def.node.add(name=name, op="Const")
        const.attr["dtype"].type = tf.float32.as_datatype_enum
        const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, tf.float32))
    for name, op, inputs in (("a/b", "Mul", ["x", "a/two"]), ("a", "AddV2", ["x", "one"]),
                             ("y1", "Neg", ["a/b"]), ("y2", "Neg", ["a"])):
        node = graph_def.node.add(name=name, op=op, input=inputs)
        node.attr["T"].type = tf.float32.as_datatype_enum
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    feed = {"x:0": np.array([1.5, -2.0], np.float32)}
    with NpuSession(graph=graph, config=npu_config()) as sess, \
            PlainSession(graph=graph) as plain:
        for fetch in ("y1:0", "y2:0", ["y2:0", "y1:0"]):
            got, want = sess.run(fetch, feed), plain.run(fetch, feed)
            np.testing.assert_array_equal(got, want)
