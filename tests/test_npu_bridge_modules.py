"""The non-op modules of the npu_bridge API: plugin, profiler, scoped graph manager, job info,
saver, strategy, Keras conversion, experimental modules, image ops, the op handle and the package
exports."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import npu_bridge
from npu_bridge._device_only import DeviceOnlyError
from npu_bridge.estimator.npu import keras_to_npu, npu_common, npu_plugin, npu_saver, npu_strategy
from npu_bridge.estimator.npu.npu_config import HAS_TF_ESTIMATOR
from npu_bridge.experimental import file_constant, get_shape
from npu_bridge.experimental import hccl as exp_hccl
from npu_bridge.experimental import image as exp_image
from npu_bridge.image import image_ops
from npu_bridge.profiler import profiler
from npu_bridge.scoped_graph_manager import scoped_graph_manager as sgm
from tests.npu_cpu_helpers import keras2, run


@pytest.fixture
def clean_plugin():
    npu_plugin.npu_resource_shutdown()
    npu_plugin.set_device_sat_mode(1)
    yield
    npu_plugin.npu_resource_shutdown()
    npu_plugin.set_device_sat_mode(1)


def test_npu_resource_init_builds_the_option_map(clean_plugin, monkeypatch, tmp_path):
    monkeypatch.setenv("JOB_ID", "job7")
    monkeypatch.setenv("DEVICE_ID", "0")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    npu_plugin.npu_resource_init(graph_run_mode=0, op_debug_level=1, enable_profiling=True,
                                 profiling_options='{"output":"/tmp"}', precision_mode="fp16",
                                 aoe_mode="2", work_path=str(tmp_path), debug_dir="dbg",
                                 oo_constant_folding=False)
    state = npu_plugin.plugin_state()
    assert state.initialized and not state.closed
    opts = state.init_options
    assert opts["ge.graphRunMode"] == "0" and opts["ge.opDebugLevel"] == "1"
    assert opts["ge.exec.profilingMode"] == "1"
    assert opts["ge.exec.profilingOptions"] == '{"output":"/tmp"}'
    assert opts["ge.exec.precision_mode"] == "fp16"
    assert opts["ge.jobType"] == "2" and opts["ge.tuningPath"] == os.path.realpath(tmp_path)
    assert opts["ge.debugDir"] == "dbg" and opts["ge.oo.constantFolding"] == "false"
    assert opts["ge.exec.jobId"] == "job7" and opts["ge.exec.hcclFlag"] == "1"
    assert opts["ge.hcomMultiMode"] == "0" and opts["ge.aoe_config_file"] == "None"
    # A second init is ignored until shutdown, as in the original.
    npu_plugin.npu_resource_init(graph_run_mode=1)
    assert npu_plugin.plugin_state().init_options["ge.graphRunMode"] == "0"
    npu_plugin.npu_resource_shutdown()
    assert not npu_plugin.plugin_state().initialized
    npu_plugin.npu_close()
    assert npu_plugin.plugin_state().closed


@pytest.mark.parametrize("kwargs,error,match", [
    ({"graph_run_mode": 2}, ValueError, "must be 0 or 1"),
    ({"graph_run_mode": -1}, ValueError, "nonnegative"),
    ({"graph_run_mode": "1"}, TypeError, "graph_run_mode must be int"),
    ({"op_debug_level": 1.5}, TypeError, "op_debug_level"),
    ({"enable_profiling": 1}, TypeError, "enable_profiling"),
    ({"enable_profiling": True}, ValueError, "profiling_options must be set"),
    ({"aoe_mode": "3"}, ValueError, "aoe_mode"),
    ({"aoe_mode": "1", "work_path": "/no/such/dir"}, ValueError, "not exists"),
    ({"hcom_multi_mode": "no"}, TypeError, "hcom_multi_mode"),
    ({"input_batch_cpy": 0}, TypeError, "input_batch_cpy"),
])
def test_npu_resource_init_checks(clean_plugin, kwargs, error, match):
    with pytest.raises(error, match=match):
        npu_plugin.npu_resource_init(**kwargs)
    assert not npu_plugin.plugin_state().initialized


def test_parameter_server_and_evaluator(clean_plugin, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"task": {"type": "ps", "index": 0}}))
    npu_plugin.npu_resource_init()
    assert not npu_plugin.plugin_state().initialized
    monkeypatch.setenv("TF_CONFIG", json.dumps({"task": {"type": "evaluator", "index": 0}}))
    npu_plugin.npu_resource_init()
    assert npu_plugin.plugin_state().init_options["ge.exec.hcclFlag"] == "0"


def test_init_helpers_and_graph_run_mode():
    init = {}
    npu_plugin.init_op_compiler_cache_mode(init, "enable")
    npu_plugin.init_op_compiler_cache_dir(init, None)
    npu_plugin.init_debug_dir(init, "/d")
    assert init == {"ge.op_compiler_cache_mode": "enable", "ge.debugDir": "/d"}
    npu_plugin.check_graph_run_mode(1)
    with pytest.raises(ValueError):
        npu_plugin.check_graph_run_mode(2)


def test_sat_mode(clean_plugin):
    assert npu_plugin.is_inf_nan_enabled()
    npu_plugin.set_device_sat_mode(0)
    assert not npu_plugin.is_inf_nan_enabled() and npu_plugin.plugin_state().sat_mode == 0
    with pytest.raises(ValueError, match="0 \\(saturation\\) or 1"):
        npu_plugin.set_device_sat_mode(2)


@pytest.mark.parametrize("call,error", [
    (lambda: npu_plugin.init_rdma_pool(1024), DeviceOnlyError),
    (lambda: npu_plugin.init_rdma_pool("1k"), ValueError),
    (lambda: npu_plugin.rdma_remote_register([[(0, 4096, 64)]]), DeviceOnlyError),
    (lambda: npu_plugin.rdma_remote_register("x"), ValueError),
    (lambda: npu_plugin.rdma_remote_register([[(0, "a", 64)]]), ValueError),
    (lambda: npu_plugin.rdma_remote_init([[(0, 4096, 64)]], 1024), DeviceOnlyError),
    (lambda: npu_plugin.rdma_remote_init([[(0, 4096, 64)]], 1.5), ValueError),
    (lambda: npu_plugin.get_var_addr_and_size("w"), DeviceOnlyError),
    (lambda: npu_plugin.get_var_addr_and_size(3), ValueError),
    (lambda: npu_plugin.malloc_shared_memory("w", [2, 3], 0), DeviceOnlyError),
    (lambda: npu_plugin.malloc_shared_memory("w", [2.5], 0), ValueError),
])
def test_device_only_functions(call, error):
    with pytest.raises(error) as info:
        call()
    if error is DeviceOnlyError:
        assert "needs the Ascend device" in str(info.value)


def test_get_rdma_cache_is_a_zero_variable():
    with tf.Graph().as_default():
        var = npu_plugin.get_rdma_cache(tf.float32, [2, 3], name="rdma_w")
        assert var.op.get_attr("_output_memory_type") == 1
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            np.testing.assert_array_equal(sess.run(var), np.zeros([2, 3]))


def test_npu_close_is_registered_at_exit():
    import atexit
    assert npu_bridge.npu_close is npu_plugin.npu_close
    assert npu_bridge.atexit is atexit
    assert npu_bridge.helper.get_gen_ops() is npu_bridge.npu_bridge_handle
    assert npu_bridge.helper.version == "v1.15.0"


@pytest.fixture
def no_profile():
    yield
    request = profiler.current_request()
    assert request is None, "a test left a profiler active"


def test_profiler_scope(tmp_path, monkeypatch, no_profile):
    monkeypatch.delenv("PROFILING_MODE", raising=False)
    monkeypatch.delenv("PROFILING_OPTIONS", raising=False)
    with profiler.Profiler(level="L1", output_path=str(tmp_path)) as prof:
        request = profiler.current_request()
        assert (request.level, request.aic_metrics) == ("L1", "PipeUtilization")
        assert request.output_path == os.path.realpath(tmp_path)
        with pytest.raises(RuntimeError, match="nested"):
            profiler.Profiler().start()
    assert profiler.current_request() is None
    prof.stop()  # stopping twice is harmless
    with profiler.Profiler(level="L2", aic_metrics="Memory", output_path=str(tmp_path)):
        assert profiler.current_request().generation == request.generation + 1
        assert profiler.current_request().aic_metrics == "Memory"


@pytest.mark.parametrize("kwargs,match", [
    ({"level": "L3"}, "level cannot set to: L3"),
    ({"level": "L0", "aic_metrics": "Memory"}, "Please use L1 or L2"),
    ({"level": "L1", "aic_metrics": "Speed"}, "aic_metrics cannot set to: Speed"),
    ({"output_path": "/no/such/dir"}, "not an existing directory"),
    ({"output_path": "a\tb"}, "forbidden character"),
])
def test_profiler_start_checks(kwargs, match, no_profile):
    with pytest.raises(RuntimeError, match=match):
        profiler.Profiler(**kwargs).start()


def test_profiler_types_and_environment(tmp_path, monkeypatch, no_profile):
    with pytest.raises(ValueError, match="Option level should be str"):
        profiler.Profiler(level=1)
    with pytest.raises(TypeError):
        profiler.Profiler("L0")  # keyword-only, as the original
    monkeypatch.setenv("PROFILING_MODE", "true")
    with pytest.raises(RuntimeError, match="PROFILING_MODE"):
        profiler.Profiler(output_path=str(tmp_path)).start()


def test_scoped_graph_manager():
    unloaded = []
    assert not sgm.control_enabled()
    with sgm.ScopedGraphManager():
        assert sgm.control_enabled()
        assert sgm.register_graph("sess", 3, lambda: unloaded.append(3))
        assert not sgm.register_graph("sess", 4)
        assert sgm.registered_graph() == ("sess", 3)
    assert unloaded == [3] and not sgm.control_enabled() and sgm.registered_graph() is None
    with pytest.raises(ZeroDivisionError), sgm.ScopedGraphManager():
        sgm.register_graph("s", 1, lambda: unloaded.append(1))
        1 / 0  # noqa: B018
    assert unloaded == [3, 1] and not sgm.control_enabled()
    with sgm.ScopedGraphManager():
        sgm.register_graph("s", 2, lambda: 1 / 0)
    assert sgm.registered_graph() is None  # a failing unload is logged, not raised


@pytest.fixture
def fresh_basics():
    npu_common.NPUBasics._reset_for_tests()
    yield
    npu_common.NPUBasics._reset_for_tests()


def test_npu_basics_reads_the_job_file(tmp_path, fresh_basics):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"device_info": {"Index": 0}, "rank_table_file": "rt.json",
                                "rank_size": 1, "local_checkpoint_dir": "ckpt"}))
    basics = npu_common.NPUBasics(str(path))
    assert basics is npu_common.NPUBasics("other")  # one instance per process
    assert basics.size() == 1
    info = basics.jobinfo
    assert info._rank_table_file == "rt.json" and info._local_checkpoint_dir == "ckpt"
    assert info._device_info.is_master_node()


@pytest.mark.parametrize("content,error,match", [
    ({"rank_table_file": "r", "rank_size": 1}, ValueError, "device_info"),
    ({"device_info": {"Index": -1}, "rank_table_file": "r", "rank_size": 1}, ValueError,
     "Index"),
    ({"device_info": {"Index": 0}, "rank_size": 1}, ValueError, "rank_table_file"),
    ({"device_info": {"Index": 0}, "rank_table_file": "r", "rank_size": 0}, ValueError,
     "rank_size"),
])
def test_npu_basics_job_file_checks(tmp_path, fresh_basics, content, error, match):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(content))
    with pytest.raises(error, match=match):
        npu_common.NPUBasics(str(path))


def test_npu_basics_reads_the_environment(tmp_path, fresh_basics, monkeypatch):
    monkeypatch.delenv("JOB_ID", raising=False)
    assert npu_common.NPUBasics(str(tmp_path / "none.json")).jobinfo is None
    npu_common.NPUBasics._reset_for_tests()
    for key, value in (("JOB_ID", "10086"), ("RANK_ID", "0"), ("RANK_TABLE_FILE", "t.json"),
                       ("HEARTBEAT", "5"), ("LOCAL_CHECKPOINT_DIR", "/c")):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.delenv("RANK_SIZE", raising=False)
    monkeypatch.delenv("CM_WORKER_SIZE", raising=False)
    info = npu_common.NPUBasics(str(tmp_path / "none.json")).jobinfo
    assert (info._job_id, info._rank_size, info._rank_table_file) == ("10086", 1, "t.json")
    assert info._device_info._index == "0" and info._heartbeat_time == "5"
    assert npu_common.JobConfig(0.1, 32)._batch_size == 32
    assert not npu_common.DeviceInfo(index="3").is_master_node()


def _checkpoint(saver_cls, directory):
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(1)
        tf.compat.v1.get_variable("w", [3, 2], initializer=tf.compat.v1.ones_initializer())
        tf.compat.v1.get_variable("b", [2], initializer=tf.compat.v1.zeros_initializer(),
                                  use_resource=True)
        saver = saver_cls(max_to_keep=2)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(sess, os.path.join(directory, "model"), global_step=3)
        return prefix, saver.saver_def


def test_npu_saver_writes_the_same_checkpoint_as_saver(tmp_path):
    a, b = tmp_path / "npu", tmp_path / "tf"
    a.mkdir()
    b.mkdir()
    prefix_a, def_a = _checkpoint(npu_saver.NPUSaver, str(a))
    prefix_b, def_b = _checkpoint(tf.compat.v1.train.Saver, str(b))
    assert os.path.basename(prefix_a) == os.path.basename(prefix_b) == "model-3"
    for suffix in (".index", ".data-00000-of-00001"):
        assert (a / f"model-3{suffix}").read_bytes() == (b / f"model-3{suffix}").read_bytes()
    assert def_a == def_b
    reader = tf.train.load_checkpoint(prefix_a)
    np.testing.assert_array_equal(reader.get_tensor("w"), np.ones([3, 2]))


def test_npu_strategy():
    strategy = npu_strategy.NPUStrategy()
    assert isinstance(strategy.extended, npu_strategy.NPUExtended)
    assert strategy.num_replicas_in_sync == 1

    def build():
        shard = strategy.experimental_distribute_dataset(tf.data.Dataset.range(5))
        return tf.data.experimental.get_single_element(shard.batch(10))

    assert run(build).tolist() == list(range(5))  # one rank: the shard is the whole dataset
    with pytest.raises(ValueError, match='only support "/cpu:0"'):
        npu_strategy.NPUStrategy(device="/gpu:0")


@pytest.mark.skipif(HAS_TF_ESTIMATOR, reason="TensorFlow 2.15 has tf.estimator")
def test_model_to_npu_estimator_without_tf_estimator():
    with pytest.raises(keras_to_npu.EstimatorUnavailableError, match="removed"):
        keras_to_npu.model_to_npu_estimator(keras_model=object())
    assert issubclass(keras_to_npu.EstimatorUnavailableError, ImportError)


@pytest.mark.skipif(not HAS_TF_ESTIMATOR, reason="needs tf.estimator (TensorFlow 2.15)")
def test_model_to_npu_estimator_trains(tmp_path):
    keras = keras2()

    from npu_bridge.estimator.npu.npu_config import NPURunConfig
    from npu_bridge.estimator.npu.npu_estimator import NPUEstimator

    inputs = keras.Input(shape=(2,), name="x")
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    config = NPURunConfig(model_dir=str(tmp_path), save_checkpoints_steps=2)
    estimator = keras_to_npu.model_to_npu_estimator(keras_model=model, config=config,
                                                    model_dir=str(tmp_path))
    assert isinstance(estimator, NPUEstimator)

    def input_fn():
        x = np.random.RandomState(0).rand(8, 2).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices(({"x": x}, x.sum(1, keepdims=True))).batch(4)

    estimator.train(input_fn, steps=2)
    assert tf.train.latest_checkpoint(str(tmp_path)) is not None
    with pytest.raises(ValueError, match="checkpoint_format"):
        keras_to_npu.model_to_npu_estimator(keras_model=model, config=config,
                                            checkpoint_format="h5")


def test_file_constant(tmp_path):
    data = np.arange(6, dtype=np.int16).reshape(2, 3)
    path = tmp_path / "w.bin"
    path.write_bytes(data.astype("<i2").tobytes())
    got = run(lambda: file_constant.file_constant([2, 3], tf.int16, file_path=str(path)))
    np.testing.assert_array_equal(got, data)
    file_constant.set_file_id_paths({"w0": str(path)})
    got = run(lambda: file_constant.file_constant([3, 2], tf.int16, file_id="w0"))
    np.testing.assert_array_equal(got, data.reshape(3, 2))
    with pytest.raises(tf.errors.InvalidArgumentError, match="does not hold 8"):
        run(lambda: file_constant.file_constant([8], tf.int16, file_path=str(path)))
    from npu_adapter.errors import NpuAdapterError
    with pytest.raises(NpuAdapterError, match="file_id 'nope' is not registered"):
        file_constant.file_constant([1], tf.int16, file_id="nope")
    with pytest.raises(ValueError, match="dtype string"):
        file_constant.file_constant([1], tf.string, file_path=str(path))


def test_getshape():
    got = run(lambda: get_shape.getshape(tf.zeros([2, 5, 1])))
    assert got.dtype == np.int32 and got.tolist() == [2, 5, 1]
    got = run(lambda: get_shape.getshape([tf.zeros([2]), tf.zeros([3, 4], tf.uint8)]))
    assert got.tolist() == [2, 3, 4]
    with pytest.raises(TypeError, match="float16, float32 or uint8"):
        get_shape.getshape(tf.zeros([2], tf.int32))


def test_experimental_hccl(monkeypatch):
    assert exp_hccl.c_str("grp").value == b"grp"
    monkeypatch.delenv("RANK_SIZE", raising=False)
    monkeypatch.delenv("CM_WORKER_SIZE", raising=False)
    assert exp_hccl.get_user_rank_size() == 1
    assert exp_hccl.get_actual_rank_size() == 1
    monkeypatch.setenv("RANK_ID", "0")
    assert exp_hccl.get_user_rank_id() == 0
    monkeypatch.delenv("RANK_ID")
    with pytest.raises(ValueError, match="RANK_ID"):
        exp_hccl.get_user_rank_id()
    with pytest.raises(DeviceOnlyError, match="libhcom_graph_adaptor.so"):
        exp_hccl.hccl_graph_adp_ctypes.HcomGetActualRankSize  # noqa: B018


def _png(image):
    return tf.io.encode_png(tf.constant(image)).numpy() if tf.executing_eagerly() else \
        run(lambda: tf.io.encode_png(tf.constant(image)))


def test_decode_image():
    image = np.random.RandomState(5).randint(0, 255, (4, 3, 3)).astype(np.uint8)
    png = _png(image)
    got = run(lambda: exp_image.decode_image(tf.constant(png)))
    np.testing.assert_array_equal(got, image)
    gray = run(lambda: exp_image.decode_image(tf.constant(png), channels=1,
                                              dtype=tf.float32))
    assert gray.shape == (4, 3, 1) and gray.dtype == np.float32 and gray.max() <= 1.0
    with pytest.raises(ValueError, match="channels must be non-negative"):
        exp_image.decode_image(tf.constant(png), channels=-1)


def test_decode_and_resize_jpeg():
    image = np.full((8, 6, 3), 100, np.uint8)
    image[:, 3:] = 200
    jpeg = run(lambda: tf.io.encode_jpeg(tf.constant(image), quality=100))
    decoded = run(lambda: tf.io.decode_jpeg(tf.constant(jpeg), channels=3))
    got = run(lambda: image_ops.decode_and_resize_jpeg(tf.constant(jpeg), [4, 3]))
    assert got.shape == (4, 3, 3) and got.dtype == np.uint8
    # 2x downscale with half-pixel centres averages 2x2 blocks.
    want = decoded.reshape(4, 2, 3, 2, 3).astype(float).mean(axis=(1, 3))
    np.testing.assert_allclose(got, np.round(want), atol=1)
    crop = run(lambda: image_ops.decode_and_crop_and_resize_jpeg(tf.constant(jpeg),
                                                                 [0, 3, 8, 3], [8, 3]))
    np.testing.assert_array_equal(crop, decoded[:, 3:])


def test_npu_init_exports_the_api_modules():
    # In a fresh process: importing npu_init disables eager execution, as the original does,
    # which would change every later test of this process.
    import subprocess
    import sys

    script = """
from npu_bridge import npu_init
from npu_bridge.estimator.npu import npu_plugin, npu_strategy
from npu_bridge.estimator.npu import keras_to_npu
from npu_bridge.npu_cpu import npu_cpu_ops
from npu_bridge.profiler import profiler
from npu_bridge.scoped_graph_manager import scoped_graph_manager as sgm

assert npu_init.npu_cpu_ops is npu_cpu_ops
assert npu_init.profiler.Profiler is profiler.Profiler
assert npu_init.scoped_graph_manager.ScopedGraphManager is sgm.ScopedGraphManager
assert npu_init.npu_plugin is npu_plugin and npu_init.npu_strategy is npu_strategy
assert npu_init.keras_to_npu is keras_to_npu
for name in ("npu_cpu_ops", "profiler", "scoped_graph_manager", "npu_plugin"):
    assert name in npu_init.__all__, name
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


