"""The cann backend's pyACL side, against the fake ``acl`` (``tests/fakes/acl``).

* the call sequence of a static and of a multi-gear model, call by call, as pyACL documents it
  (init → device → context → load → description → datasets → [dynamic dims] → execute →
  output dims → copies → release → unload → destroy description → destroy context → reset
  device → finalize);
* teardown on error: a failing call at every step leaves no model, description, dataset,
  buffer or memory behind; once the last session is closed (also after a failed execute) no
  context or device is held either, and ``acl.finalize`` runs at exit;
* the fake returns what pyACL returns for misuse (so it would catch ours).
"""

import threading

import numpy as np
import pytest
import tensorflow as tf
from cann_fakes import compile_om

from npu_adapter.backends.cann import AclError, shutdown
from npu_adapter.session import NpuSession, plain_session_class

GEAR_NAME = "ascend_mbatch_shape_data"


def _graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 7, name="w")
        tf.nn.relu(tf.matmul(x, w) - 1.0, name="y")
    return graph


def _config(gears=False):
    config = tf.compat.v1.ConfigProto()
    opt = config.graph_options.rewrite_options.custom_optimizers.add()
    opt.name = "NpuOptimizer"
    opt.parameter_map["npu_adapter_backend"].s = b"cann"
    if gears:
        opt.parameter_map["input_shape"].s = b"x:-1,4"
        opt.parameter_map["dynamic_dims"].s = b"1;2;4"
        opt.parameter_map["dynamic_node_type"].i = 1
    return config


def _run(graph, config, batch=2):
    value = np.random.RandomState(batch).rand(batch, 4).astype(np.float32)
    with NpuSession(graph=graph, config=config) as sess:
        out = sess.run("y:0", {"x:0": value})
    with plain_session_class()(graph=graph) as sess:
        expected = sess.run("y:0", {"x:0": value})
    np.testing.assert_array_equal(out, expected)
    return out


INIT = ["acl.init", "acl.rt.set_device", "acl.rt.create_context", "acl.rt.get_run_mode",
        "acl.rt.set_context"]
DESCRIBE = ["acl.mdl.load_from_file", "acl.mdl.create_desc", "acl.mdl.get_desc",
            "acl.mdl.get_num_inputs", "acl.mdl.get_num_outputs",
            "acl.mdl.get_input_index_by_name"]
USER_INPUT = ["acl.mdl.get_input_size_by_index", "acl.mdl.get_input_data_type", "acl.rt.malloc",
              "acl.create_data_buffer", "acl.mdl.add_dataset_buffer"]
GEAR_INPUT = ["acl.mdl.get_input_size_by_index", "acl.rt.malloc", "acl.create_data_buffer",
              "acl.mdl.add_dataset_buffer"]
OUTPUT = ["acl.mdl.get_output_size_by_index", "acl.mdl.get_output_data_type", "acl.rt.malloc",
          "acl.create_data_buffer", "acl.mdl.add_dataset_buffer", "acl.rt.malloc_host"]
COPY_IN = ["acl.rt.set_context", "acl.util.bytes_to_ptr", "acl.rt.memcpy"]
EXECUTE = ["acl.mdl.execute", "acl.mdl.get_cur_output_dims", "acl.rt.memcpy",
           "acl.util.ptr_to_bytes"]
RELEASE_OUTPUT = ["acl.rt.free_host", "acl.destroy_data_buffer", "acl.rt.free",
                  "acl.mdl.destroy_dataset"]
RELEASE_INPUT = ["acl.destroy_data_buffer", "acl.rt.free"]
END = ["acl.mdl.destroy_dataset", "acl.mdl.unload", "acl.mdl.destroy_desc",
       "acl.rt.destroy_context", "acl.rt.reset_device", "acl.finalize"]


def _calls(acl, name):
    return [args for call, args in acl.fake.calls if call == name]


def test_static_model_call_sequence(cann_fakes):
    acl = cann_fakes.acl
    _run(_graph(), _config())
    shutdown()
    expected = (INIT + DESCRIBE + ["acl.mdl.create_dataset"] + USER_INPUT
                + ["acl.mdl.create_dataset"] + OUTPUT + COPY_IN + EXECUTE
                + ["acl.rt.set_context"] + RELEASE_OUTPUT + RELEASE_INPUT + END)
    assert acl.fake.call_names() == expected
    assert acl.fake.leaks() == {}
    (path,) = _calls(acl, "acl.mdl.load_from_file")[0]
    assert path.endswith(".om")
    assert _calls(acl, "acl.mdl.get_input_index_by_name")[0][1] == GEAR_NAME
    assert all(args[1] == 2 for args in _calls(acl, "acl.rt.malloc"))  # NORMAL_ONLY
    to_device, to_host = _calls(acl, "acl.rt.memcpy")
    assert to_device[4] == 1 and to_device[3] == 2 * 4 * 4 and to_device[1] == 32  # H2D
    assert to_host[4] == 2 and to_host[3] == 2 * 3 * 4  # D2H, the real output size
    assert _calls(acl, "acl.rt.set_device")[0] == (0,)


def test_gear_model_call_sequence(cann_fakes):
    acl = cann_fakes.acl
    graph, config = _graph(), _config(gears=True)
    _run(graph, config, batch=2)
    shutdown()
    expected = (INIT + DESCRIBE + ["acl.mdl.create_dataset"] + USER_INPUT + GEAR_INPUT
                + ["acl.mdl.create_dataset"] + OUTPUT + COPY_IN
                + ["acl.mdl.set_input_dynamic_dims"] + EXECUTE
                + ["acl.rt.set_context"] + RELEASE_OUTPUT + RELEASE_INPUT + RELEASE_INPUT + END)
    assert acl.fake.call_names() == expected
    assert acl.fake.leaks() == {}
    (model_id, _, index, dims), = _calls(acl, "acl.mdl.set_input_dynamic_dims")
    assert index == 1  # after the one user input
    assert dims == {"dimCount": 2, "name": "", "dims": [2, 4]}
    # The user input buffer holds the largest gear (4 rows); 2 rows are copied in.
    to_device = _calls(acl, "acl.rt.memcpy")[0]
    assert to_device[1] == 4 * 4 * 4 and to_device[3] == 2 * 4 * 4
    # The gear buffer is never written by us: ACL fills it.
    assert len(_calls(acl, "acl.rt.memcpy")) == 2


def test_every_gear_and_a_shape_in_no_gear(cann_fakes):
    graph, config = _graph(), _config(gears=True)
    with NpuSession(graph=graph, config=config) as sess:
        for batch in (1, 4, 2, 1):
            value = np.random.RandomState(batch).rand(batch, 4).astype(np.float32)
            out = sess.run("y:0", {"x:0": value})
            w = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
            np.testing.assert_allclose(out, np.maximum(value @ w - 1, 0), rtol=1e-6)
        with pytest.raises(tf.errors.InvalidArgumentError, match="match no gear.*x:0.*3, 4"):
            sess.run("y:0", {"x:0": np.zeros((3, 4), np.float32)})
    assert len(cann_fakes.atc_calls()) == 1  # one multi-gear model for every gear
    dims = [args[3]["dims"] for args in _calls(cann_fakes.acl,
                                               "acl.mdl.set_input_dynamic_dims")]
    assert dims == [[1, 4], [4, 4], [2, 4], [1, 4]]


LOAD_FAILURES = [("acl.mdl.load_from_file", 145002), ("acl.mdl.get_desc", 100011),
                 ("acl.rt.malloc", 207001), ("acl.mdl.add_dataset_buffer", 100000),
                 ("acl.rt.malloc_host", 207001)]
RUN_FAILURES = [("acl.rt.memcpy", 107000), ("acl.mdl.execute", 507011),
                ("acl.mdl.get_cur_output_dims", 100000),
                ("acl.mdl.set_input_dynamic_dims", 145013)]
NAMES = {145002: "ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID", 100011: "ACL_ERROR_INVALID_MODEL_ID",
         207001: "ACL_ERROR_RT_MEMORY_ALLOCATION", 100000: "ACL_ERROR_INVALID_PARAM",
         107000: "ACL_ERROR_RT_PARAM_INVALID", 507011: "ACL_ERROR_RT_MODEL_EXECUTE",
         145013: "ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID"}
PROCESS_WIDE = {"initialized", "contexts", "devices"}


@pytest.mark.parametrize("call, code", LOAD_FAILURES + RUN_FAILURES)
def test_teardown_on_error(cann_fakes, call, code):
    acl = cann_fakes.acl
    acl.fake.fail[call] = code
    graph, config = _graph(), _config(gears=call == "acl.mdl.set_input_dynamic_dims")
    with NpuSession(graph=graph, config=config) as sess:
        with pytest.raises(tf.errors.OpError, match=f"{call} returned {code} {NAMES[code]}"):
            sess.run("y:0", {"x:0": np.ones((2, 4), np.float32)})
        leaks = acl.fake.leaks()
        if (call, code) in LOAD_FAILURES:
            # A model that failed to load leaves nothing behind but the process's context.
            assert set(leaks) <= PROCESS_WIDE, leaks
        else:
            assert len(leaks["models"]) == 1  # loaded, reusable by the next run
    # Closing the last session unloads its models and releases the device; ACL stays
    # initialised (acl.init is once per process) until exit.
    assert acl.fake.leaks() == {"initialized": [True]}
    assert acl.fake.call_names()[-2:] == ["acl.rt.destroy_context", "acl.rt.reset_device"]
    del acl.fake.fail[call]
    _run(_graph(), _config())  # the next session opens the device again
    shutdown()
    assert acl.fake.leaks() == {}


SESSION_END = ["acl.mdl.destroy_dataset", "acl.mdl.unload", "acl.mdl.destroy_desc",
               "acl.rt.destroy_context", "acl.rt.reset_device"]


def test_the_last_session_to_close_releases_the_device(cann_fakes):
    acl = cann_fakes.acl
    graph, value = _graph(), np.ones((2, 4), np.float32)
    first = NpuSession(graph=graph, config=_config())
    second = NpuSession(graph=graph, config=_config())
    first.run("y:0", {"x:0": value})
    second.run("y:0", {"x:0": value})
    first.close()
    assert acl.fake.leaks()["devices"] == [0]  # the second session still runs on it
    second.close()
    assert acl.fake.leaks() == {"initialized": [True]}
    assert acl.fake.call_names()[-len(SESSION_END):] == SESSION_END
    assert _calls(acl, "acl.rt.reset_device") == [(0,)]
    shutdown()
    assert acl.fake.call_names()[-1] == "acl.finalize" and acl.fake.leaks() == {}


def test_a_failed_execute_then_close_releases_everything(cann_fakes):
    acl = cann_fakes.acl
    acl.fake.fail["acl.mdl.execute"] = 507011
    with NpuSession(graph=_graph(), config=_config()) as sess:
        for _ in range(2):  # the model stays loaded between runs; each run fails
            with pytest.raises(tf.errors.OpError, match="acl.mdl.execute returned 507011"):
                sess.run("y:0", {"x:0": np.ones((2, 4), np.float32)})
        assert acl.fake.leaks()["contexts"] and len(acl.fake.leaks()["models"]) == 1
    assert acl.fake.leaks() == {"initialized": [True]}
    del acl.fake.fail["acl.mdl.execute"]
    _run(_graph(), _config())
    assert acl.fake.leaks() == {"initialized": [True]}


_EXIT_SCRIPT = """
import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, {tests!r})
import cann_fakes  # noqa: E402

cann_fakes.install({root!r})
from npu_adapter.session import NpuSession  # noqa: E402

graph = tf.Graph()
with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    tf.nn.relu(x - 0.5, name="y")
config = tf.compat.v1.ConfigProto()
opt = config.graph_options.rewrite_options.custom_optimizers.add()
opt.name = "NpuOptimizer"
opt.parameter_map["npu_adapter_backend"].s = b"cann"
sess = NpuSession(graph=graph, config=config)
print(sess.run("y:0", {{"x:0": np.ones((2, 4), np.float32)}}).tolist())
{close}
"""


_CLOSE = """
sess.close()
with open(os.environ["FAKE_ACL_LOG"], "a") as f:
    f.write("--session-closed--\\n")
"""


@pytest.mark.parametrize("close", [True, False])
def test_acl_is_finalized_at_exit(tmp_path, close):
    """A script that closes its session leaves ACL initialised only until it exits; one that
    does not close it gets the whole teardown at exit."""
    import os
    import subprocess
    import sys

    log = tmp_path / "acl_calls.txt"
    script = tmp_path / "script.py"
    tests = os.path.dirname(os.path.abspath(__file__))
    script.write_text(_EXIT_SCRIPT.format(tests=tests, root=str(tmp_path / "fakes"),
                                          close=_CLOSE if close else ""))
    env = dict(os.environ, FAKE_ACL_LOG=str(log))
    completed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                               env=env, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip().endswith("[[0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5]]")
    calls = log.read_text().split()
    assert calls[0] == "acl.init" and calls.count("acl.finalize") == 1
    if close:  # released at close; only acl.finalize is left for the exit
        closed = calls.index("--session-closed--")
        assert calls[closed - len(SESSION_END):] == SESSION_END + ["--session-closed--",
                                                                  "acl.finalize"]
    else:  # the whole teardown at exit
        assert calls[-3:] == ["acl.rt.destroy_context", "acl.rt.reset_device", "acl.finalize"]


def test_context_failure_resets_the_device(cann_fakes):
    acl = cann_fakes.acl
    acl.fake.fail["acl.rt.create_context"] = 107002
    with pytest.raises(tf.errors.OpError, match="create_context returned 107002 "
                                                "ACL_ERROR_RT_CONTEXT_NULL"):
        _run(_graph(), _config())
    assert acl.fake.leaks() == {"initialized": [True]}
    shutdown()
    assert acl.fake.leaks() == {}


def test_teardown_continues_after_a_failing_unload(cann_fakes):
    acl = cann_fakes.acl
    with NpuSession(graph=_graph(), config=_config()) as sess:
        sess.run("y:0", {"x:0": np.ones((2, 4), np.float32)})
        acl.fake.fail["acl.mdl.unload"] = 100011
        with pytest.raises(AclError, match="acl.mdl.unload returned 100011"):
            shutdown()
    leaks = acl.fake.leaks()
    assert set(leaks) == {"models"}  # everything else was still released, ACL finalized
    assert acl.fake.call_names()[-3:] == ["acl.rt.destroy_context", "acl.rt.reset_device",
                                          "acl.finalize"]


def test_other_threads_bind_the_context(cann_fakes):
    """TensorFlow calls in from its own threads; the runtime sets the context on each."""
    graph, config = _graph(), _config()
    value = np.ones((2, 4), np.float32)
    results = []
    with NpuSession(graph=graph, config=config) as sess:
        sess.run("y:0", {"x:0": value})

        def work():
            results.append(sess.run("y:0", {"x:0": value}))

        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == 3 and all(np.array_equal(r, results[0]) for r in results)


def test_soc_mismatch_is_named(cann_fakes, monkeypatch):
    monkeypatch.setenv("FAKE_ACL_SOC", "Ascend910B1")
    cann_fakes.acl.fake.reset()
    with pytest.raises(tf.errors.OpError, match="load_from_file returned 507008 "
                                                "ACL_ERROR_RT_SOC_VERSION"):
        _run(_graph(), _config())


# ---------------------------------------------------------------- the fake's own contract
def _loaded(acl, path):
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    ctx, ret = acl.rt.create_context(0)
    assert ret == 0
    model_id, ret = acl.mdl.load_from_file(path)
    assert ret == 0
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc(desc, model_id) == 0
    return ctx, model_id, desc


def _dataset(acl, sizes):
    ds = acl.mdl.create_dataset()
    for size in sizes:
        ptr, ret = acl.rt.malloc(size, 2)
        assert ret == 0
        _, ret = acl.mdl.add_dataset_buffer(ds, acl.create_data_buffer(ptr, size))
        assert ret == 0
    return ds


def test_fake_lifecycle_codes(cann_fakes):
    acl = cann_fakes.acl
    assert acl.rt.set_device(0) == 100001  # before init
    assert acl.init() == 0
    assert acl.init() == 100002
    assert acl.rt.set_device(7) == 107001
    ptr, ret = acl.rt.malloc(16, 2)
    assert ret == 107002  # no context on this thread
    assert acl.finalize() == 0
    assert acl.finalize() == 100037
    assert acl.rt.set_device(0) == 100001  # after finalize
    _, ret = acl.mdl.load_from_file("/x.om")
    assert ret == 100001


def test_fake_buffer_sizes_and_counts(cann_fakes, tmp_path):
    acl = cann_fakes.acl
    _, model_id, desc = _loaded(acl, compile_om(tmp_path, batch=2))
    size_in = acl.mdl.get_input_size_by_index(desc, 0)
    size_out = acl.mdl.get_output_size_by_index(desc, 0)
    assert (size_in, size_out) == (32, 32)
    small = _dataset(acl, [size_in // 2])
    out = _dataset(acl, [size_out])
    assert acl.mdl.execute(model_id, small, out) == 145006  # input buffer too small
    assert acl.mdl.execute(model_id, _dataset(acl, []), out) == 100017
    good = _dataset(acl, [size_in])
    assert acl.mdl.execute(model_id, good, _dataset(acl, [])) == 100018
    assert acl.mdl.execute(model_id, good, _dataset(acl, [size_out // 2])) == 145006
    assert acl.mdl.execute(model_id + 5, good, out) == 100011
    dims = {"dimCount": 2, "name": "", "dims": [2, 4]}
    assert acl.mdl.set_input_dynamic_dims(model_id, good, 1, dims) == 100019  # static model
    assert acl.mdl.execute(model_id, good, out) == 0


def test_fake_dynamic_dims_codes(cann_fakes, tmp_path):
    acl = cann_fakes.acl
    _, model_id, desc = _loaded(acl, compile_om(tmp_path, gears=(1, 2, 4)))
    index, ret = acl.mdl.get_input_index_by_name(desc, GEAR_NAME)
    assert (index, ret) == (1, 0)
    assert acl.mdl.get_num_inputs(desc) == 2
    gears, ret = acl.mdl.get_input_dynamic_gear_count(desc, -1)
    assert (gears, ret) == (3, 0)
    listed, ret = acl.mdl.get_input_dynamic_dims(desc, -1, 3)
    assert ret == 0 and [d["dims"] for d in listed] == [[1, 4], [2, 4], [4, 4]]
    user = acl.mdl.get_input_size_by_index(desc, 0)
    assert user == 4 * 4 * 4  # the largest gear
    out = _dataset(acl, [acl.mdl.get_output_size_by_index(desc, 0)])
    without_gear_buffer = _dataset(acl, [user])

    def dims(values, count=None):
        return {"dimCount": len(values) if count is None else count, "name": "",
                "dims": values}

    assert acl.mdl.set_input_dynamic_dims(model_id, without_gear_buffer, 1,
                                          dims([2, 4])) == 100000
    assert acl.mdl.execute(model_id, without_gear_buffer, out) == 100017
    full = _dataset(acl, [user, acl.mdl.get_input_size_by_index(desc, 1)])
    assert acl.mdl.set_input_dynamic_dims(model_id, full, 1, dims([], 0)) == 100000
    assert acl.mdl.set_input_dynamic_dims(model_id, full, 1, dims([2, 4, 1])) == 145012
    assert acl.mdl.set_input_dynamic_dims(model_id, full, 1, dims([2, 5])) == 145012
    assert acl.mdl.set_input_dynamic_dims(model_id, full, 1, dims([3, 4])) == 145013
    assert acl.mdl.set_input_dynamic_dims(model_id, full, 1, dims([2, 4])) == 0
    # Copy two rows in and run: the outputs follow the gear.
    value = np.arange(8, dtype=np.float32).reshape(2, 4)
    data = value.tobytes()
    ptr = acl.get_data_buffer_addr(acl.mdl.get_dataset_buffer(full, 0))
    assert acl.rt.memcpy(ptr, user, acl.util.bytes_to_ptr(data), len(data), 1) == 0
    assert acl.mdl.execute(model_id, full, out) == 0
    got, ret = acl.mdl.get_cur_output_dims(desc, 0)
    assert ret == 0 and got["dims"] == [2, 4]
    host, ret = acl.rt.malloc_host(32)
    out_ptr = acl.get_data_buffer_addr(acl.mdl.get_dataset_buffer(out, 0))
    assert acl.rt.memcpy(host, 32, out_ptr, 32, 2) == 0
    result = np.frombuffer(acl.util.ptr_to_bytes(host, 32), np.float32).reshape(2, 4)
    np.testing.assert_array_equal(result, value * 2 + 1)
    assert acl.rt.memcpy(host, 32, out_ptr, 32, 1) == 100000  # wrong direction


def test_fake_checks_the_release_order(cann_fakes, tmp_path):
    acl = cann_fakes.acl
    ctx, model_id, desc = _loaded(acl, compile_om(tmp_path, batch=2))
    ptr, ret = acl.rt.malloc(32, 2)
    assert ret == 0
    with pytest.raises(acl.ContractViolation, match="memory allocated in it"):
        acl.rt.destroy_context(ctx)
    assert acl.rt.free(ptr) == 0
    assert acl.mdl.init_dump() == 0
    with pytest.raises(acl.ContractViolation, match="while contexts"):
        acl.finalize()
    with pytest.raises(acl.ContractViolation, match="while its contexts live"):
        acl.rt.reset_device(0)
    assert acl.mdl.unload(model_id) == 0 and acl.mdl.destroy_desc(desc) == 0
    assert acl.rt.destroy_context(ctx) == 0 and acl.rt.reset_device(0) == 0
    with pytest.raises(acl.ContractViolation, match="before acl.mdl.finalize_dump"):
        acl.finalize()
    assert acl.mdl.finalize_dump() == 0 and acl.finalize() == 0
    assert acl.fake.leaks() == {}
