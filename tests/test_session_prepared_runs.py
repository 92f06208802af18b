"""Direct signatures prepared as TensorFlow callables while their rewrite runs
(npu_adapter/session/prepared_runs.py): their runs go through the callable with Session.run's
own checks and plain TensorFlow's values; traced runs and failed preparations take Session.run;
an idle direct session carries its callables to the next session on the graph."""

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.config import NpuConfig
from npu_adapter.session import NpuSession, plain_session_class, prepared_runs
from npu_adapter.session.prepared_runs import PreparedRuns, run_key

tf1 = tf.compat.v1
PlainSession = plain_session_class()


def npu_config(**options):
    return NpuConfig.from_dict(options).to_config_proto()


def training_graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        w = tf1.get_variable("w", [4, 3], initializer=tf1.ones_initializer(),
                             use_resource=True)
        y = tf.matmul(x, w, name="y")
        loss = tf.reduce_sum(tf.square(y), name="loss")
        train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf1.global_variables_initializer()
    return graph, x, y, loss, train, init


def frozen_graph():
    rs = np.random.RandomState(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.constant(rs.randn(4, 3).astype(np.float32), name="w")
        h = tf.nn.relu(tf.matmul(x, w), name="h")
        y = tf.multiply(h, 2.0, name="y")
    return graph, x, h, y


def feed(rows=2, seed=0):
    return np.random.RandomState(seed).randn(rows, 4).astype(np.float32)


@pytest.fixture
def calls(monkeypatch):
    """Counts of TensorFlow's C calls: callables made, callable runs, Session.run calls,
    callables released."""
    counts = {"make": 0, "run_callable": 0, "session_run": 0, "release": 0}
    tf_session = prepared_runs.tf_session

    def counting(name, original):
        def wrapper(*args):
            counts[name] += 1
            return original(*args)
        return wrapper

    for name, attr in (("make", "TF_SessionMakeCallable"),
                       ("run_callable", "TF_SessionRunCallable"),
                       ("session_run", "TF_SessionRun_wrapper"),
                       ("release", "TF_SessionReleaseCallable")):
        monkeypatch.setattr(tf_session, attr, counting(name, getattr(tf_session, attr)))
    return counts


def test_training_runs_through_prepared_callables_with_plain_values(calls):
    graph, x, _, loss, train, init = training_graph()
    feeds = [{x: feed(seed=k)} for k in range(3)]
    with PlainSession(graph=graph) as plain:
        plain.run(init)
        want = [plain.run([loss, train], f)[0] for f in feeds]
    before = dict(calls)
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        got = [sess.run([loss, train], f)[0] for f in feeds]
        direct = sess._npu_direct
        assert direct._npu_prepared.prepared_count() == 2  # the initialiser and the step
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert calls["make"] - before["make"] == 2
    # Every run went through its callable; Session.run was only plain TensorFlow's.
    assert calls["run_callable"] - before["run_callable"] == 4
    assert calls["session_run"] - before["session_run"] == 0


def test_session_run_checks_and_fetch_structure_are_kept(calls):
    graph, x, h, y = frozen_graph()
    value = feed()
    with PlainSession(graph=graph) as plain:
        want = plain.run({"y": y, "h": [h, y]}, {x: value})
        want_list = plain.run([y, h], {x: value.tolist()})  # a list converts as TensorFlow does
    calls.update(dict.fromkeys(calls, 0))
    with NpuSession(graph=graph, config=npu_config()) as sess:
        got = sess.run({"y": y, "h": [h, y]}, {x: value})
        got_list = sess.run([y, h], {x: value.tolist()})
        # A wrong shape is refused in Python before anything runs, with TensorFlow's message.
        with pytest.raises(ValueError, match=r"Cannot feed value of shape \(2, 5\)"):
            sess.run(y, {x: np.zeros((2, 5), np.float32)})
        assert calls["run_callable"] == 2 and calls["session_run"] == 0
        # A fed tensor that is also fetched comes back as fed (a fed inner tensor takes the
        # shadow: the rewrite stands a Placeholder for it).
        fed_h = np.full((2, 3), 7.0, np.float32)
        both = sess.run([h, y], {x: value, h: fed_h})
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)
    np.testing.assert_allclose(got["h"][0], want["h"][0], rtol=1e-6)
    np.testing.assert_allclose(got["h"][1], want["h"][1], rtol=1e-6)
    np.testing.assert_allclose(got_list[0], want_list[0], rtol=1e-6)
    np.testing.assert_allclose(got_list[1], want_list[1], rtol=1e-6)
    np.testing.assert_array_equal(both[0], fed_h)
    np.testing.assert_allclose(both[1], fed_h * 2.0, rtol=1e-6)


def test_an_op_error_in_a_callable_run_is_tensorflows_error():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        shape = tf1.placeholder(tf.int32, [2], name="shape")
        y = tf.reshape(tf.nn.relu(x), shape, name="y")
    bad = {x: feed(), shape: np.array([3, 3], np.int32)}
    with PlainSession(graph=graph) as plain, \
            pytest.raises(tf.errors.InvalidArgumentError, match="reshape") as want:
        plain.run(y, bad)
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(y, {x: feed(), shape: np.array([4, 2], np.int32)})
        assert sess._npu_direct._npu_prepared.prepared_count() == 1
        with pytest.raises(tf.errors.InvalidArgumentError, match="reshape") as got:
            sess.run(y, bad)
    assert got.value.op.name == want.value.op.name == "y"


def test_traced_runs_and_failed_preparations_take_session_run(calls, monkeypatch):
    graph, x, _, y = frozen_graph()
    value = feed()
    with PlainSession(graph=graph) as plain:
        want = plain.run(y, {x: value})
    calls.update(dict.fromkeys(calls, 0))
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(y, {x: value})
        metadata = tf1.RunMetadata()
        options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        got = sess.run(y, {x: value}, options=options, run_metadata=metadata)
        assert metadata.step_stats.dev_stats  # TensorFlow traced the run
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert calls["run_callable"] == 1 and calls["session_run"] == 1

    def refuse(*args):
        raise tf.errors.InvalidArgumentError(None, None, "refused")

    monkeypatch.setattr(prepared_runs.tf_session, "TF_SessionMakeCallable", refuse)
    graph, x, _, y = frozen_graph()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        got = sess.run(y, {x: value})
        assert sess._npu_direct._npu_prepared.prepared_count() == 0
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert calls["session_run"] == 2


def test_an_idle_direct_session_carries_its_callables_to_the_next_session(calls):
    graph, x, _, y = frozen_graph()
    values = [feed(seed=k) for k in range(3)]
    with PlainSession(graph=graph) as plain:
        want = [plain.run(y, {x: v}) for v in values]
    calls.update(dict.fromkeys(calls, 0))
    got = []
    for v in values:  # a session per request
        with NpuSession(graph=graph, config=npu_config()) as sess:
            got.append(sess.run(y, {x: v}))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert calls["make"] == 1  # made once, by the first session
    assert calls["run_callable"] == 3 and calls["session_run"] == 0


def test_prepared_runs_release_and_keys():
    graph, x, h, y = frozen_graph()
    assert run_key(["y:0", "h:0", "y:0"], ["init"], ["x:0", "h:0"]) == \
        (("y:0",), ("init",), ("h:0", "x:0"))
    with PlainSession(graph=graph) as sess:
        prepared = PreparedRuns()
        key = run_key([y.name], [], [x.name])
        assert prepared.claim(key) and not prepared.claim(key)
        prepared.prepare(sess, key)
        assert key in prepared and prepared.prepared_count() == 1
        feeds = {x.ref(): feed()}
        run = prepared.find([y], [], feeds)
        assert run is not None
        np.testing.assert_allclose(run(sess)[0], sess.run(y, {x: feeds[x.ref()]}), rtol=1e-6)
        assert prepared.find([h], [], feeds) is None  # another signature: not prepared
        prepared.release(sess, key)
        assert prepared.prepared_count() == 0
        assert prepared.find([y], [], feeds) is None


def test_a_preparation_that_fails_early_never_blocks_the_run(monkeypatch):
    graph, x, _, y = frozen_graph()
    with PlainSession(graph=graph) as sess:
        prepared = PreparedRuns()
        key = run_key([y.name], [], [x.name])
        assert prepared.claim(key)

        def broken():
            raise RuntimeError("the graph could not be extended")

        monkeypatch.setattr(sess, "_extend_graph", broken)
        prepared.prepare(sess, key)  # quiet: the run reports what is wrong
        assert prepared.prepared_count() == 0
        assert prepared.find([y], [], {x.ref(): feed()}) is None  # ready, not prepared
        prepared.release(sess, key)  # nothing to free, and no wait


@pytest.mark.parametrize("use_resource", [False, True], ids=["ref", "resource"])
def test_a_value_read_before_a_step_keeps_its_value(use_resource):
    # A callable's result may alias a TF1 ref variable's buffer, which the step updates in
    # place: the value fetched before the step must not change with it (Session.run copies).
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
        sess.run(train, {x: feed()})
        after = sess.run(read)
        assert sess._npu_direct._npu_prepared.prepared_count() == 3
    np.testing.assert_array_equal(before, np.ones((4, 3), np.float32))
    assert not np.array_equal(before, after)


def test_a_signature_that_takes_the_shadow_frees_its_callable(calls):
    graph, x, _, y = frozen_graph()
    w = graph.get_tensor_by_name("w:0")
    value = feed(rows=3)
    # Gears that pad the batch up keep an in-graph dispatcher: the signature that feeds x runs
    # in the shadow; one that reads the weights alone runs on the user's graph.
    gears = {"input_shape": "x:-1,4", "dynamic_dims": "3;4", "dynamic_node_type": 1,
             "npu_adapter_gear_policy": "pad_up"}
    with PlainSession(graph=graph) as plain:
        want_w, want_y = plain.run(w), plain.run(y, {x: value})
    calls.update(dict.fromkeys(calls, 0))
    with NpuSession(graph=graph, config=npu_config(**gears)) as sess:
        got_w = sess.run(w)
        got_y = sess.run(y, {x: value})
        direct = sess._npu_direct
        assert direct._npu_prepared.prepared_count() == 1  # the weights' signature only
        again = sess.run(w)
    assert calls["make"] == 2 and calls["release"] == 1
    np.testing.assert_array_equal(got_w, want_w)
    np.testing.assert_array_equal(again, want_w)
    np.testing.assert_allclose(got_y, want_y, rtol=1e-6)


def test_a_gear_that_runs_on_the_user_graph_runs_through_a_callable(calls):
    """With the exact policy the session calls the gear the fed shape selects; that gear's copy
    of the cluster is the user's nodes again, so it runs on the direct session, through a
    callable made at its first run (``Session.run`` would cost more per step)."""
    graph, x, _, y = frozen_graph()
    gears = {"input_shape": "x:-1,4", "dynamic_dims": "2;3", "dynamic_node_type": 1}
    values = [feed(rows=rows, seed=k) for k, rows in enumerate((2, 3, 2, 2, 3))]
    with PlainSession(graph=graph) as plain:
        want = [plain.run(y, {x: v}) for v in values]
    calls.update(dict.fromkeys(calls, 0))
    with NpuSession(graph=graph, config=npu_config(**gears)) as sess:
        got = [sess.run(y, {x: v}) for v in values]
        assert sess._npu_direct._npu_prepared.prepared_count() == 1
        with pytest.raises(tf.errors.InvalidArgumentError, match="match no gear"):
            sess.run(y, {x: feed(rows=4)})  # the dispatcher, on the shadow
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert calls["make"] == 1 and calls["run_callable"] == len(values)
    assert calls["session_run"] == 1  # the failed run only


def test_with_a_warm_disk_cache_large_weights_are_prepared_on_the_calling_thread(
        calls, monkeypatch, tmp_path):
    """A process started on a disk cache that holds entries rewrites from it: little rewrite
    work is left to overlap, and the preparing thread's first copy of large weights costs more
    than it saves, so the signature is prepared on the calling thread, before the rewrite
    (graphs with small weights keep the overlap)."""
    from npu_adapter.pipeline import rewrite_cache
    from npu_adapter.session import core

    handed = []
    original = core.in_background
    monkeypatch.setattr(core, "in_background", lambda work: handed.append(work) or
                        original(work))
    monkeypatch.setattr(core, "PREPARE_HERE_MIN_CONSTANT_BYTES", 4 * 3 * 4)  # this graph's w
    options = {"npu_adapter_cache_dir": str(tmp_path)}
    values = [feed(seed=k) for k in range(2)]
    graph, x, _, y = frozen_graph()
    assert core._constant_bytes(graph) == 4 * 3 * 4 + 4
    with PlainSession(graph=graph) as plain:
        want = [plain.run(y, {x: value}) for value in values]
    calls.update(dict.fromkeys(calls, 0))
    for value, expected in zip(values, want):
        # The first session fills the cache; the next starts as a new process would.
        rewrite_cache.MEMORY.clear()
        graph, x, _, y = frozen_graph()
        with NpuSession(graph=graph, config=npu_config(**options)) as sess:
            np.testing.assert_allclose(sess.run(y, {x: value}), expected, rtol=1e-6)
    assert len(handed) == 1  # the first session only: the cache was empty
    assert calls["make"] == 2 and calls["run_callable"] == 2 and calls["session_run"] == 0
    monkeypatch.setattr(core, "PREPARE_HERE_MIN_CONSTANT_BYTES", 4 * 3 * 4 + 5)
    rewrite_cache.MEMORY.clear()
    graph, x, _, y = frozen_graph()
    with NpuSession(graph=graph, config=npu_config(**options)) as sess:
        sess.run(y, {x: values[0]})
    assert len(handed) == 2  # weights under the bound: prepared beside the rewrite again


def test_large_graphs_are_not_prepared(calls, monkeypatch):
    from npu_adapter.session import core

    graph, x, _, y = frozen_graph()
    assert core._constant_bytes(graph) == 4 * 3 * 4 + 4  # w and the 2.0: elements times size
    monkeypatch.setattr(core, "PREPARE_MAX_CONSTANT_BYTES", 4 * 3 * 4 + 3)
    with PlainSession(graph=graph) as plain:
        want = plain.run(y, {x: feed()})
    calls.update(dict.fromkeys(calls, 0))
    with NpuSession(graph=graph, config=npu_config()) as sess:
        got = sess.run(y, {x: feed()})
        assert sess._npu_direct._npu_prepared.prepared_count() == 0
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert calls["make"] == 0 and calls["session_run"] == 1


def test_a_forked_child_prepares_on_its_own_thread():
    import multiprocessing

    prepared_runs.in_background(lambda: None).result()  # the parent's thread exists

    def child(queue):
        done = prepared_runs.in_background(lambda: "prepared in the child")
        queue.put(done.result(timeout=30))

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    try:
        assert queue.get(timeout=60) == "prepared in the child"
    finally:
        process.join(60)
    assert process.exitcode == 0
