"""NpuSession: same numbers as TensorFlow's session, one state, rewrites cached per signature."""

import os
import threading

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.errors import NpuConfigError
from npu_adapter.session import NpuSession, plain_session_class, runner_of

tf1 = tf.compat.v1
# TensorFlow's session even if another test module imported npu_bridge (which installs ours).
PlainSession = plain_session_class()


def npu_config(**options):
    return NpuConfig.from_dict(options).to_config_proto()


def sgd_graph(use_resource=False):
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(3)
        x = tf1.placeholder(tf.float32, [None, 5], name="x")
        y = tf1.placeholder(tf.float32, [None, 2], name="y")
        w = tf1.get_variable("w", [5, 2], use_resource=use_resource)
        b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer(),
                             use_resource=use_resource)
        pred = tf.nn.relu(tf.matmul(x, w) + b, name="pred")
        loss = tf.reduce_mean(tf.square(pred - y), name="loss")
        train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    return graph, x, y, loss, train, init


def batch(seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(16, 5).astype(np.float32), rs.randn(16, 2).astype(np.float32)


@pytest.mark.parametrize("use_resource", [False, True])
@pytest.mark.parametrize("mix", [False, True])
def test_twenty_sgd_steps_give_identical_losses(use_resource, mix):
    xs, ys = batch()
    losses = {}
    for cls in (PlainSession, NpuSession):
        graph, x, y, loss, train, init = sgd_graph(use_resource)
        with cls(graph=graph, config=npu_config(mix_compile_mode=mix)) as sess:
            sess.run(init)
            losses[cls] = [sess.run([loss, train], {x: xs, y: ys})[0] for _ in range(20)]
            if cls is NpuSession:
                assert runner_of(sess).rewrite_count == 2  # init, and [loss, train]
                result = runner_of(sess).rewrite_result([loss, train], {x: xs, y: ys})
                assert result.clusters
    plain, npu = losses[PlainSession], losses[NpuSession]
    assert [a.tobytes() for a in plain] == [b.tobytes() for b in npu]
    assert plain[-1] < plain[0]


def test_state_is_shared_between_rewritten_and_plain_runs():
    graph, x, y, loss, train, init = sgd_graph()
    xs, ys = batch()
    with graph.as_default():
        w = [v for v in tf1.global_variables() if v.op.name == "w"][0]
        w_read = tf.identity(w, name="w_value")
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        before = sess.run(w_read)
        sess.run(train, {x: xs, y: ys})  # rewritten: the update must land on the session's w
        after = sess.run(w_read)
        assert not np.array_equal(before, after)
        # A plain assignment is seen by the rewritten graph.
        sess.run(w.assign(np.zeros([5, 2], np.float32)))
        np.testing.assert_array_equal(sess.run(w_read), 0)


def test_no_npu_optimizer_means_plain_tensorflow():
    graph, x, y, loss, train, init = sgd_graph()
    count = len(graph.get_operations())
    with NpuSession(graph=graph, config=tf1.ConfigProto()) as sess:
        sess.run(init)
        sess.run(loss, dict(zip((x, y), batch())))
        assert runner_of(sess) is None and not npu_adapter.session.is_npu_session(sess)
    assert len(graph.get_operations()) == count  # no extra nodes


def test_use_off_line_false_means_plain_tensorflow():
    graph, x, y, loss, train, init = sgd_graph()
    count = len(graph.get_operations())
    with NpuSession(graph=graph, config=npu_config(use_off_line=False)) as sess:
        sess.run(init)
        sess.run(loss, dict(zip((x, y), batch())))
        assert runner_of(sess) is None
    assert len(graph.get_operations()) == count


def test_invalid_options_fail_before_a_session_exists():
    with pytest.raises(NpuConfigError, match="precision_mode"):
        NpuSession(config=npu_config(precision_mode="fp64"))


def test_fetch_structures_and_make_callable():
    graph, x, y, loss, train, init = sgd_graph()
    xs, ys = batch()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        out = sess.run({"loss": loss, "both": (loss, graph.get_tensor_by_name("pred:0"))},
                       {x: xs, y: ys})
        assert set(out) == {"loss", "both"} and isinstance(out["both"], tuple)
        assert out["both"][1].shape == (16, 2)
        by_name = sess.run("loss:0", {"x:0": xs, "y:0": ys})
        assert by_name.tobytes() == out["loss"].tobytes()
        step = sess.make_callable([loss, train], [x, y])
        first, _ = step(xs, ys)
        assert first.tobytes() == out["loss"].tobytes()
        assert step(xs, ys)[0] < first


def test_graph_may_grow_after_the_first_run():
    graph, x, y, loss, train, init = sgd_graph()
    xs, ys = batch()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        first = sess.run(loss, {x: xs, y: ys})
        with graph.as_default():
            doubled = tf.multiply(loss, 2.0, name="doubled")
        np.testing.assert_array_equal(sess.run(doubled, {x: xs, y: ys}), first * 2)


def test_wrong_feeds_give_tensorflows_own_errors_naming_the_users_tensor():
    graph, x, y, loss, train, init = sgd_graph()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        with pytest.raises(ValueError, match="x:0"):
            sess.run(loss, {x: np.zeros([4, 3], np.float32), y: np.zeros([4, 2], np.float32)})
        with pytest.raises(tf.errors.InvalidArgumentError, match="x"):
            sess.run(loss, {y: np.zeros([4, 2], np.float32)})


def test_concurrent_runs_rewrite_each_signature_once():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 8], name="x")
        w = tf.constant(np.random.RandomState(1).randn(8, 8).astype(np.float32))
        out = tf.nn.tanh(tf.matmul(x, w), name="out")
        other = tf.reduce_sum(out, name="other")
    data = np.random.RandomState(2).randn(4, 8).astype(np.float32)
    with PlainSession(graph=graph) as plain:
        expected = plain.run([out, other], {x: data})
    results = []
    errors = []
    with NpuSession(graph=graph, config=npu_config()) as sess:
        def worker():
            try:
                for k in range(200):
                    fetch = [out, other] if k % 2 else [other, out]
                    got = sess.run(fetch, {x: data})
                    results.append(got if k % 2 else got[::-1])
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert runner_of(sess).rewrite_count == 1  # one signature (fetch order does not matter)
    assert len(results) == 1600
    for got in results:
        assert got[0].tobytes() == expected[0].tobytes()
        assert got[1].tobytes() == expected[1].tobytes()


def test_monitored_session_with_a_finalized_graph(tmp_path):
    graph, x, y, loss, train, init = sgd_graph()
    xs, ys = batch()
    with graph.as_default():
        tf1.train.get_or_create_global_step()
    was_installed = npu_adapter.session.is_installed()
    npu_adapter.install()
    try:
        with graph.as_default(), tf1.train.MonitoredTrainingSession(
                checkpoint_dir=str(tmp_path), config=npu_config(),
                save_checkpoint_secs=None, save_summaries_steps=None) as mon:
            assert graph.finalized
            losses = [mon.run([loss, train], {x: xs, y: ys})[0] for _ in range(3)]
    finally:
        if not was_installed:  # leave the process as the test found it
            npu_adapter.uninstall()
    assert losses[2] < losses[0]


def test_saver_restores_into_the_state_rewritten_runs_use(tmp_path):
    graph, x, y, loss, train, init = sgd_graph()
    xs, ys = batch()
    with graph.as_default():
        saver = tf1.train.Saver()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        for _ in range(3):
            sess.run(train, {x: xs, y: ys})
        saved_loss = sess.run(loss, {x: xs, y: ys})
        path = saver.save(sess, str(tmp_path / "model"))
        for _ in range(3):
            sess.run(train, {x: xs, y: ys})
        assert sess.run(loss, {x: xs, y: ys}) != saved_loss
        saver.restore(sess, path)
        assert sess.run(loss, {x: xs, y: ys}).tobytes() == saved_loss.tobytes()


def test_queues_and_iterators_keep_one_state():
    graph = tf.Graph()
    with graph.as_default():
        queue = tf1.FIFOQueue(10, tf.float32, shapes=[[2]])
        enqueue = queue.enqueue(tf1.placeholder(tf.float32, [2], name="item"))
        value = queue.dequeue()
        doubled = tf.multiply(value, 2.0, name="doubled")
        dataset = tf.data.Dataset.from_tensor_slices(np.arange(6, dtype=np.float32)).batch(2)
        iterator = tf1.data.make_initializable_iterator(dataset)
        nxt = iterator.get_next()
        squared = tf.square(nxt, name="squared")
    with NpuSession(graph=graph, config=npu_config()) as sess:
        for k in range(3):
            sess.run(enqueue, {"item:0": np.full([2], k, np.float32)})
        assert [sess.run(doubled).tolist() for _ in range(3)] == [[0, 0], [2, 2], [4, 4]]
        sess.run(iterator.initializer)
        got = [sess.run(squared).tolist() for _ in range(3)]
        assert got == [[0, 1], [4, 9], [16, 25]]
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(squared)


def test_lookup_tables_keep_one_state():
    graph = tf.Graph()
    with graph.as_default():
        keys = tf.constant(["a", "b"])
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, tf.constant([1.0, 2.0])), -1.0)
        query = tf1.placeholder(tf.string, [None], name="query")
        scaled = tf.multiply(table.lookup(query), 10.0, name="scaled")
        init = tf1.tables_initializer()
    with NpuSession(graph=graph, config=npu_config()) as sess:
        sess.run(init)
        np.testing.assert_array_equal(sess.run(scaled, {query: ["b", "a", "z"]}), [20, 10, -10])


def test_install_patches_and_uninstall_restores():
    from npu_adapter.session import is_installed, is_npu_session

    was_installed = is_installed()
    original_run = tf1.Session.run
    try:
        npu_adapter.uninstall()
        with tf1.Session(graph=tf.Graph(), config=npu_config()) as sess:
            assert not is_npu_session(sess)
        npu_adapter.install()
        assert tf1.Session.run is not original_run or was_installed
        with tf1.Session(graph=tf.Graph(), config=npu_config()) as sess:
            assert is_npu_session(sess) and not isinstance(sess, NpuSession)
        sess = tf1.InteractiveSession(graph=tf.Graph(), config=npu_config())
        assert is_npu_session(sess)
        sess.close()
        # TensorFlow's own modules create their sessions from its session module, whose classes
        # all derive from the BaseSession install() changes.
        from npu_adapter import tf_compat

        class ModuleSession(tf_compat.base_session()):
            pass

        sess = ModuleSession(graph=tf.Graph(), config=npu_config())
        assert is_npu_session(sess)
        sess.close()
        with PlainSession(graph=tf.Graph(), config=npu_config()) as sess:
            assert not is_npu_session(sess)
        npu_adapter.uninstall()
        with tf1.Session(graph=tf.Graph(), config=npu_config()) as sess:
            assert not is_npu_session(sess)
        assert tf1.Session.run is original_run or was_installed
    finally:
        (npu_adapter.install if was_installed else npu_adapter.uninstall)()


def test_rewrite_errors_surface_as_tensorflow_errors():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [2], name="x")
        out = tf.abs(x, name="out")
        from tensorflow.core.framework import attr_value_pb2

        from npu_adapter import tf_compat

        tf_compat.set_op_attr(out.op, "_graph_dynamic_input", attr_value_pb2.AttrValue(b=True))
        tf_compat.set_op_attr(out.op, "_graph_dynamic_graph_execute_mode",
                              attr_value_pb2.AttrValue(s=b"lazy_recompile"))
    with NpuSession(graph=graph, config=npu_config(iterations_per_loop=2)) as sess, \
            pytest.raises(tf.errors.InvalidArgumentError, match="lazy_recompile"):
        sess.run(out, {x: [1.0, -2.0]})


def test_a_script_naming_npu_optimizer_without_npu_bridge_runs_unrewritten():
    """TensorFlow ignores the unknown custom optimizer: the script runs, plainly, until
    npu_bridge is imported (or npu_adapter.install() is called)."""
    import subprocess
    import sys

    script = """
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_eager_execution()
config = tf1.ConfigProto()
custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
custom_op.name = "NpuOptimizer"
custom_op.parameter_map["mix_compile_mode"].b = True
x = tf1.placeholder(tf.float32, [2])
y = tf.nn.relu(x * 2.0)
with tf1.Session(config=config) as sess:
    print(type(sess).__name__, sess.run(y, {x: [1.0, -1.0]}).tolist())
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "Session [2.0, 0.0]"
