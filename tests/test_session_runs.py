"""What a run of an NPU session does, seen through public names: it executes the rewritten graph
(a traced run names the GeOp clusters it ran), with plain TensorFlow's values, structures and
errors, also for fed inner tensors, TF1 loops, and runs racing a close."""

import threading

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.config import NpuConfig
from npu_adapter.session import NpuSession, plain_session_class, runner_of

tf1 = tf.compat.v1
PlainSession = plain_session_class()
TRACE = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)


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


def traced_nodes(metadata):
    return [n.node_name for d in metadata.step_stats.dev_stats for n in d.node_stats]


@pytest.mark.parametrize("options", [{}, {"mix_compile_mode": True}], ids=["full", "mix"])
def test_a_traced_run_names_the_clusters_it_executed(options):
    graph, x, _, y = frozen_graph()
    feed = {x: feed_value()}
    metadata = tf1.RunMetadata()
    with NpuSession(graph=graph, config=npu_config(**options)) as sess:
        got = sess.run(y, feed, options=TRACE, run_metadata=metadata)
        clusters = [c.name for c in runner_of(sess).rewrite_result(y, feed).clusters]
    with PlainSession(graph=graph) as plain:
        assert got.tobytes() == plain.run(y, feed).tobytes()
    names = traced_nodes(metadata)
    assert clusters and set(clusters) <= set(names)
    assert "h0" in names  # the cluster's members run under the user's names
    assert not any(name.startswith("npu_rewrite") for name in names)


def test_fed_inner_tensors_and_fetch_structures_are_the_users():
    graph, x, h0, y = frozen_graph()
    inner = {h0: np.abs(feed_value(2, seed=3))}
    fetches = {"y": y, "h": h0, "both": [y, x], "names": ("y:0", "h0")}
    with PlainSession(graph=graph) as plain:
        want = plain.run(fetches, {x: feed_value(2), **inner})
        want_cut = plain.run(y, inner)
    with NpuSession(graph=graph, config=npu_config()) as sess:
        got = sess.run(fetches, {x: feed_value(2), **inner})
        got_cut = sess.run(y, inner)  # the feed cuts the graph at h0
    assert type(got["names"]) is tuple and got["names"][1] is None  # an op fetches None
    for key in ("y", "h"):
        np.testing.assert_array_equal(got[key], want[key])
    np.testing.assert_array_equal(got["both"][0], want["both"][0])
    np.testing.assert_array_equal(got["names"][0], want["names"][0])
    np.testing.assert_array_equal(got_cut, want_cut)


def test_errors_are_tensorflows_and_name_the_users_node():
    graph, x, _, y = frozen_graph(batch=3)
    with graph.as_default():
        shape = tf1.placeholder(tf.int32, [2], name="shape")
        reshaped = tf.reshape(y, shape, name="reshaped")
    other = tf.Graph()
    with other.as_default():
        foreign = tf.constant(1.0, name="foreign")
    with NpuSession(graph=graph, config=npu_config()) as sess, PlainSession(graph=graph) as plain:
        for session in (plain, sess):
            with pytest.raises(ValueError, match="shape"):
                session.run(y, {x: feed_value(rows=5)})
            with pytest.raises(tf.errors.InvalidArgumentError, match="'x'"):
                session.run(y)  # not fed
            with pytest.raises(ValueError, match="not an element of this graph"):
                session.run(foreign)
            with pytest.raises(TypeError, match="Cannot interpret feed_dict key"):
                session.run(y, {foreign: 1.0})
            with pytest.raises(tf.errors.InvalidArgumentError, match="reshape") as error:
                session.run(reshaped, {x: feed_value(), shape: np.array([5, 5], np.int32)})
            assert error.value.op.name == "reshaped"


@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_a_value_read_before_a_step_keeps_its_value(use_resource):
    # A fetched value may alias a TF1 ref variable's buffer, which the step updates in place:
    # the value fetched before the step must not change with it (Session.run copies).
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        w = tf1.get_variable("w", [4, 3], initializer=tf1.ones_initializer(),
                             use_resource=use_resource)
        read = tf.identity(w, name="read")
        loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
        train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf1.global_variables_initializer()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        before = sess.run(read)
        sess.run(train, {x: np.ones((2, 4), np.float32)})
        after = sess.run(read)
    np.testing.assert_array_equal(before, np.ones((4, 3), np.float32))
    assert not np.array_equal(before, after)


def test_an_rnn_training_step_of_tf1_loops_runs_with_plain_values():
    # A TF1 RNN: a while loop over TensorArrays, as dynamic_rnn builds it under
    # disable_v2_behavior (TF1 control flow), trained with a ref variable.
    graph = tf.Graph()
    tf1.disable_control_flow_v2()
    try:
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
            train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
            init = tf1.global_variables_initializer()
    finally:
        tf1.enable_control_flow_v2()
    feed = {x: np.random.RandomState(0).randn(4, 2, 3).astype(np.float32)}
    losses = {}
    for cls in (PlainSession, NpuSession):
        with cls(graph=graph, config=npu_config()) as sess:
            sess.run(init)
            losses[cls] = [sess.run([loss, train], feed)[0] for _ in range(3)]
    np.testing.assert_array_equal(losses[NpuSession], losses[PlainSession])


def test_runs_racing_a_close_get_tensorflows_error_not_a_crash():
    """TensorFlow's own ``testUseAfterCloseConcurrent``: threads keep running while the session
    closes; each ends with the closed-session RuntimeError, the process lives on."""
    graph, x, _, y = frozen_graph()
    feed = {x: feed_value()}
    for _ in range(5):
        sess = NpuSession(graph=graph, config=npu_config())
        sess.run(y, feed)
        errors = []

        def keep_running(session=sess, errors=errors):
            while True:
                try:
                    session.run(y, feed)
                except RuntimeError as exc:
                    errors.append(exc)
                    return

        threads = [threading.Thread(target=keep_running) for _ in range(4)]
        for thread in threads:
            thread.start()
        sess.close()
        for thread in threads:
            thread.join(timeout=60)
        assert len(errors) == 4 and all("closed Session" in str(e) for e in errors)


def test_partial_run_misuse_gets_tensorflows_errors():
    graph = tf.Graph()
    with graph.as_default():
        a = tf1.placeholder(tf.float32, [], name="a")
        b = tf1.placeholder(tf.float32, [], name="b")
        c = tf.multiply(a, 2.0, name="c")
        d = tf.add(c, b, name="d")
        e = tf.identity(d, name="e")
    for cls in (PlainSession, NpuSession):
        with cls(graph=graph, config=npu_config()) as sess:
            handle = sess.partial_run_setup([c, d], [a, b])
            misuses = [("not specified in partial_run_setup", handle, e, {a: 1.0}),
                       ("feed", handle, c, {"e:0": 1.0}),
                       ("Must run 'setup' before performing partial runs", "no such handle",
                        c, {a: 1.0})]
            for message, run_handle, fetch, feeds in misuses:
                with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                    sess.partial_run(run_handle, fetch, feeds)


def test_a_placeholder_with_default_fed_in_one_run_and_not_in_the_next():
    """A MonitoredTrainingSession's training step feeds it, an evaluation does not: each run
    gets what plain TensorFlow gives."""
    import npu_adapter

    def losses(config):
        graph = tf.Graph()
        with graph.as_default():
            x = tf1.placeholder_with_default(tf.ones([4, 3]), [None, 3])
            w = tf1.get_variable("w", [3, 1], initializer=tf1.ones_initializer())
            loss = tf.reduce_mean(tf.matmul(x, w))
            step = tf1.train.get_or_create_global_step()
            train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
            with tf1.train.MonitoredTrainingSession(config=config) as sess:
                return [sess.run([loss, train], {x: np.full((2, 3), 2.0, np.float32)})[0],
                        sess.run(loss),
                        sess.run(loss, {x: np.full((2, 3), 3.0, np.float32)})]

    was = npu_adapter.session.is_installed()
    npu_adapter.install()
    try:
        assert losses(npu_config()) == losses(tf1.ConfigProto())
    finally:
        if not was:
            npu_adapter.uninstall()


def test_a_random_op_keeps_one_sequence_across_signatures():
    """Plain TensorFlow keeps one state per random kernel in a session, whatever the fetches:
    a run of ``upd`` continues the sequence a run of ``r`` started."""
    def build():
        graph = tf.Graph()
        with graph.as_default():
            v = tf1.get_variable("v", initializer=0.0, use_resource=True)
            r = tf.multiply(2.0, tf.random.normal([4], seed=5), name="r")
            upd = tf1.assign_add(v, tf.reduce_mean(r), name="upd")
            init = tf1.global_variables_initializer()
        return graph, r, upd, init, v

    seen = {}
    for cls in (PlainSession, NpuSession):
        graph, r, upd, init, v = build()
        with cls(graph=graph, config=npu_config()) as sess:
            sess.run(init)
            first = sess.run(r)
            sess.run(upd)
            seen[cls] = (first, sess.run(v), sess.run(r))
    for plain, npu in zip(seen[PlainSession], seen[NpuSession]):
        assert np.asarray(plain).tobytes() == np.asarray(npu).tobytes()


@pytest.mark.parametrize("options", [{}, {"mix_compile_mode": True}], ids=["full", "mix"])
def test_a_step_with_tf1_conditionals_and_moving_averages_runs_with_plain_values(options):
    """PointNet-style batch norm: ``tf.cond(is_training, ...)`` around the moving averages of
    ``ExponentialMovingAverage``, whose slots start from a TF1 conditional ("is the variable
    initialised?"), TF1 ref variables and Adam, as under ``disable_v2_behavior``: no dead
    branch's tensor becomes a value."""
    def build():
        graph = tf.Graph()
        with graph.as_default():
            tf1.set_random_seed(1)
            x = tf1.placeholder(tf.float32, [8, 16], name="x")
            training = tf1.placeholder(tf.bool, [], name="training")
            h = tf.matmul(x, tf1.get_variable("w", [16, 32]))
            mean, var = tf.nn.moments(h, [0], name="moments")
            ema = tf1.train.ExponentialMovingAverage(decay=0.9)

            def update():
                with tf.control_dependencies([ema.apply([mean, var])]):
                    return tf.identity(mean), tf.identity(var)

            m, v = tf1.cond(training, update, lambda: (ema.average(mean), ema.average(var)))
            beta = tf1.get_variable("beta", [32], initializer=tf1.zeros_initializer())
            gamma = tf1.get_variable("gamma", [32], initializer=tf1.ones_initializer())
            h = tf.nn.batch_normalization(h, m, v, beta, gamma, 1e-3)
            loss = tf.reduce_mean(tf.square(tf.nn.relu(h)), name="loss")
            train = tf1.train.AdamOptimizer(0.01).minimize(loss)
            init = tf1.global_variables_initializer()
        return graph, x, training, loss, train, init

    was_v2, was_resource = tf1.control_flow_v2_enabled(), tf1.resource_variables_enabled()
    tf1.disable_control_flow_v2()
    tf1.disable_resource_variables()
    try:
        xs = np.random.RandomState(0).randn(8, 16).astype(np.float32)
        losses = {}
        for cls in (PlainSession, NpuSession):
            graph, x, training, loss, train, init = build()
            with cls(graph=graph, config=npu_config(**options)) as sess:
                sess.run(init)
                losses[cls] = [sess.run([loss, train], {x: xs, training: True})[0]
                               for _ in range(3)] + [sess.run(loss, {x: xs, training: False})]
    finally:
        if was_v2:
            tf1.enable_control_flow_v2()
        if was_resource:
            tf1.enable_resource_variables()
    assert [a.tobytes() for a in losses[PlainSession]] == \
        [b.tobytes() for b in losses[NpuSession]]


def test_fetch_and_feed_forms_tensorflow_takes():
    """IndexedSlices fetched by their parts (no shape check), a tuple of tensors as one feed key,
    a registered fetch conversion (get_variable's lazy regularization losses), a graph that is
    no tf.Graph: each as TensorFlow's session does it."""
    def runs(cls):
        graph = tf.Graph()
        with graph.as_default():
            slices = tf.IndexedSlices(tf.constant([1.0, 2.0]),
                                      tf.constant([[3, 2, 0], [4, 5, 1]], tf.int64))
            z = (tf.zeros([2]), (tf.zeros([2]),))
            doubled = z[1][0] * 2
            tf1.get_variable("w", [2], initializer=tf1.ones_initializer(),
                             regularizer=lambda w: tf.reduce_sum(w) * 0.5)
            losses = tf1.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)
            init = tf1.global_variables_initializer()
        with cls(graph=graph, config=npu_config()) as sess:
            sess.run(init)
            return (sess.run(slices).values.tolist(),
                    sess.run(doubled, {z: (np.ones(2), (np.full(2, 3.0),))}).tolist(),
                    [float(v) for v in sess.run(losses)])

    assert runs(NpuSession) == runs(PlainSession) == ([1.0, 2.0], [6.0, 6.0], [1.0])
    for cls in (PlainSession, NpuSession):
        with pytest.raises(TypeError, match="must be a tf.Graph"):
            cls(graph=37, config=npu_config())


def test_an_op_error_keeps_tensorflows_traceback():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None], name="x")
        tf.debugging.check_numerics(x, "bad value", name="checked")
    with NpuSession(graph=graph, config=npu_config()) as sess, \
            pytest.raises(tf.errors.InvalidArgumentError, match="bad value") as error:
        sess.run("checked:0", {x: [np.nan]})
    frames = [frame.name for frame in error.traceback]
    assert "_do_call" in frames  # TensorFlow's own frames, where the error was raised


def test_a_session_refused_for_its_options_is_deleted_quietly(monkeypatch):
    """The user sees the options error, and nothing from the session's deletion after it."""
    import gc
    import sys

    import npu_adapter
    from npu_adapter.errors import NpuConfigError

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    config = tf1.ConfigProto()
    optimizer = config.graph_options.rewrite_options.custom_optimizers.add()
    optimizer.name = "NpuOptimizer"
    optimizer.parameter_map["iterations_per_loop"].i = 0
    was = npu_adapter.session.is_installed()
    try:
        for installed, session_class in ((False, NpuSession), (True, tf1.Session)):
            (npu_adapter.install if installed else npu_adapter.uninstall)()
            with pytest.raises(NpuConfigError, match="iterations_per_loop"):
                session_class(graph=tf.Graph(), config=config)
            gc.collect()
    finally:
        (npu_adapter.install if was else npu_adapter.uninstall)()
    assert unraisable == []


@pytest.mark.parametrize("options", [{}, {"mix_compile_mode": True}], ids=["full", "mix"])
def test_a_random_op_keeps_its_sequence_when_a_default_is_fed_on_some_runs(options):
    """Feeding a ``placeholder_with_default`` on some runs only makes two signatures; the random
    op after it continues one sequence through both, as in plain TensorFlow."""
    def arr(seed, rows):
        return np.random.RandomState(seed).randn(rows, 4).astype(np.float32)

    def build():
        tf1.set_random_seed(0)
        x = tf1.placeholder_with_default(arr(1, 2), [None, 4], name="x")
        return x, tf.math.tanh(x + tf.random.normal(tf.shape(x), seed=2), name="y")

    _assert_runs_match_plain(build, options, [None, arr(2, 3), None, arr(3, 2)])


def _assert_runs_match_plain(build, options, feeds):
    """Run ``y`` of a fresh graph (``build`` returns ``(x, y)``) once per entry of ``feeds``
    (a value for ``x``, or None to leave it unfed) in an NPU session with ``options`` and in a
    plain session: equal bit for bit, run by run."""
    def values(session_class):
        graph = tf.Graph()
        with graph.as_default():
            x, y = build()
        with session_class(graph=graph, config=NpuConfig.from_dict(options).to_config_proto()) \
                as sess:
            return [sess.run(y, None if feed is None else {x: feed}) for feed in feeds]

    for ours, plain in zip(values(NpuSession), values(plain_session_class())):
        np.testing.assert_array_equal(ours, plain)


@pytest.mark.parametrize("options", [{}, {"mix_compile_mode": True}], ids=["full", "mix"])
def test_a_random_op_keeps_its_sequence_when_a_cluster_member_waits_outside_its_cluster(options):
    """``t4`` waits for ``t2``, which is outside ``t4``'s cluster (``Lgamma`` is not in the op
    list: ``t2`` stays on the host under full offload, in another cluster in mix mode). Only
    ``t4`` waits for it, as in the user's graph, so the random op after ``t4`` is the user's
    kernel in both signatures (``x`` fed or not) and continues one sequence, as in plain
    TensorFlow."""
    def arr(seed, rows):
        return np.random.RandomState(seed).randn(rows, 3).astype(np.float32)

    def build():
        tf1.set_random_seed(66)
        x = tf1.placeholder_with_default(arr(1, 2), [None, 3], name="x")
        t3 = tf.math.lgamma(tf.math.abs(x) + 1.0, name="t3")
        t2 = tf.gather(x, [2, 0], axis=1, name="t2")
        with tf.control_dependencies([t2]):
            t4 = tf.math.square(t3, name="t4")
        return x, tf.nn.dropout(t4, rate=0.5, seed=5)

    _assert_runs_match_plain(build, options, [None, arr(2, 4), None])


def test_a_v1_loop_over_a_dataset_batch_with_a_control_dependency_on_the_batch():
    """A TF1 while loop over a value computed from a tf.data batch, and a fetch that waits for
    the batch: the inlined cluster's start gate never becomes an input of a node inside the
    loop's frame (TensorFlow: "has inputs from different frames")."""
    from graph_cases import control_flow_v1

    from npu_adapter.testing import assert_session_equivalent

    def build():
        with control_flow_v1():
            data = tf.data.Dataset.from_tensor_slices(
                np.arange(30, dtype=np.float32).reshape(10, 3) / 7).batch(4).repeat()
            iterator = tf1.data.make_initializable_iterator(data)
            tf.group(iterator.initializer, name="iterator_init")
            x = iterator.get_next(name="batch")
            with tf.control_dependencies([x]):
                waits = tf.nn.relu(x + 1.0, name="waits")
            looped = tf1.while_loop(lambda i, acc: i < 2,
                                    lambda i, acc: (i + 1, tf.nn.relu(acc * 0.5)),
                                    [tf.constant(0), tf.math.floor(x * 4.0)], name="loop")[1]
            return [waits, tf.math.abs(looped, name="out")]

    assert_session_equivalent(build, {"full": {}, "mix": {"mix_compile_mode": True}}, steps=2,
                              init=["iterator_init"])
