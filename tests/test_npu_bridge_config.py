"""npu_bridge.estimator.npu.npu_config: NPURunConfig and its parts, the NPURunConfig ->
NpuOptimizer mapping (round trip through NpuConfig), NPUEstimator."""

import json
import os
import warnings

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from npu_adapter.config import NpuAdapterWarning, NpuConfig, reset_warn_once
from npu_adapter.errors import NpuConfigError
from npu_bridge import _env
from npu_bridge.estimator.npu import npu_config
from npu_bridge.estimator.npu.npu_config import (
    GRAPPLER_OPTIMIZERS,
    HAS_TF_ESTIMATOR,
    DumpConfig,
    DynamicInputConfig,
    ExperimentalConfig,
    GraphMemoryOptimizeConfig,
    MemoryConfig,
    NpuExecutePlacement,
    NPURunConfig,
    PlainRunConfig,
    ProfilingConfig,
    npu_run_config_options,
    npu_run_config_to_config_proto,
)
from npu_bridge.estimator.npu.npu_estimator import NPUEstimator, NPUEstimatorSpec
from npu_bridge.estimator.npu.npu_hook import NPUCheckpointSaverHook, SetIterationsVarHook


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in _env.RANK_ENV_VARS + ("TF_CONFIG", "AOE_MODE"):
        monkeypatch.delenv(name, raising=False)


def _quiet(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NpuAdapterWarning)
        return function(*args, **kwargs)


# ---- NPURunConfig ----------------------------------------------------------------------------


def test_npu_run_config_defaults_and_base_class():
    config = NPURunConfig()
    base = tf.estimator.RunConfig if HAS_TF_ESTIMATOR else PlainRunConfig
    assert isinstance(config, base)
    assert tf.__version__.startswith("2.15") == HAS_TF_ESTIMATOR
    assert config.iterations_per_loop == 1
    assert config.save_checkpoints_steps == 100 and config.save_checkpoints_secs is None
    assert config.save_summary_steps == 0
    assert config.keep_checkpoint_max == 5
    assert config.enable_exception_dump == 2
    assert config.graph_run_mode == 1
    assert config.mix_compile_mode is False and config.horovod_mode is False
    assert config._precision_mode is None and config._jit_compile == "auto"
    assert config.session_config is None


def test_npu_run_config_keeps_given_values():
    session = config_pb2.ConfigProto(allow_soft_placement=True)
    config = NPURunConfig(iterations_per_loop=10, model_dir="/tmp/m", save_checkpoints_secs=60,
                          session_config=session, precision_mode="allow_mix_precision",
                          HCCL_algorithm="ring", enable_data_pre_proc=False)
    assert config.save_checkpoints_steps is None and config.save_checkpoints_secs == 60
    assert config.model_dir == "/tmp/m" and config.session_config is session
    assert config._precision_mode == "allow_mix_precision"
    assert config._HCCL_algorithm == "ring" and config.enable_data_pre_proc is False


@pytest.mark.parametrize("kwargs,error,match", [
    ({"iterations_per_loop": 0}, ValueError, "iterations_per_loop must be positive"),
    ({"iterations_per_loop": "2"}, TypeError, "iterations_per_loop must be int"),
    ({"mix_compile_mode": 1}, TypeError, "mix_compile_mode"),
    ({"mix_compile_mode": True, "iterations_per_loop": 2}, ValueError,
     "must be 1 with \"mix_compile_mode\""),
    ({"jit_compile": True}, TypeError, "jit_compile: expected str"),
    ({"horovod_mode": "no"}, ValueError, "horovod_mode"),
    ({"graph_run_mode": 2}, ValueError, "graph_run_mode\" value must be 0 or 1"),
    ({"graph_run_mode": -1}, ValueError, "graph_run_mode must be nonnegative"),
    ({"enable_exception_dump": -1}, ValueError, "enable_exception_dump must be nonnegative"),
    ({"dump_config": {"enable_dump": True}}, ValueError, "`dump_config` must be provided"),
    ({"experimental_config": GraphMemoryOptimizeConfig()}, ValueError,
     "`experimental_config` must be provided with type `ExperimentalConfig`"),
    ({"dynamic_input_config": "x"}, ValueError, "`dynamic_input_config`"),
    ({"profiling_config": True}, ValueError, "`profiling_config`"),
    ({"memory_config": 0}, ValueError, "`memory_config`"),
])
def test_npu_run_config_checks(kwargs, error, match):
    with pytest.raises(error, match=match):
        NPURunConfig(**kwargs)


def test_npu_run_config_tf_config_cluster_needs_ps_strategy(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["localhost:1"]},
                                                "task": {"type": "worker", "index": 0}}))
    with pytest.raises(ValueError, match="\"cluster\" and \"distribute\" must all be set"):
        NPURunConfig(mix_compile_mode=True)
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        NPURunConfig()


def test_plain_run_config_replace():
    config = PlainRunConfig(model_dir="/a", save_checkpoints_steps=5)
    other = config.replace(session_config=config_pb2.ConfigProto(), model_dir="/b")
    assert other.model_dir == "/b" and config.model_dir == "/a"
    assert other.save_checkpoints_steps == 5
    with pytest.raises(ValueError, match="'iterations' is not a RunConfig property"):
        config.replace(iterations=3)
    with pytest.raises(ValueError, match="Can not provide both"):
        PlainRunConfig(save_checkpoints_steps=1, save_checkpoints_secs=1)
    with pytest.raises(ValueError, match="session_config must be a ConfigProto"):
        PlainRunConfig(session_config={"a": 1})


# ---- sub-configurations ----------------------------------------------------------------------


def test_sub_config_values_are_kept():
    profiling = ProfilingConfig(True, '{"output":"/tmp"}')
    assert profiling._enable_profiling is True
    assert profiling._profiling_options == '{"output":"/tmp"}'
    memory = MemoryConfig(1, 2, "GE", 1)
    assert (memory._atomic_clean_policy, memory._static_memory_policy,
            memory._memory_optimization_policy, memory._variable_use_1g_huge_page) == \
        (1, 2, "GE", 1)
    dump = DumpConfig(enable_dump=True, dump_path="/tmp", dump_step="0|5|10-20", dump_mode="all")
    assert dump._dump_step == "0|5|10-20" and dump._dump_mode == "all"
    assert dump.dump_data == "tensor" and dump.dump_layer is None
    memory_optimize = GraphMemoryOptimizeConfig(recompute="auto", graph_slice="manual")
    assert (memory_optimize._recompute, memory_optimize._graph_slice) == ("auto", "manual")
    experimental = ExperimentalConfig(graph_memory_optimize_config=memory_optimize,
                                      accelerate_train_mode="fast|step|0.9")
    assert experimental._logical_device_cluster_deploy_mode == "LB"
    assert experimental._graph_memory_optimize_config is memory_optimize
    dynamic = DynamicInputConfig("data:1,-1", "10;20", 1)
    assert (dynamic._input_shape, dynamic._dynamic_dims, dynamic._dynamic_node_type,
            dynamic._compile_hybrid_mode) == ("data:1,-1", "10;20", 1, None)
    assert [member.value for member in NpuExecutePlacement] == \
        ["all", "cube", "vector", "taishan", "dvpp", "host"]


@pytest.mark.parametrize("factory,error,match", [
    (lambda: ProfilingConfig(enable_profiling=1), TypeError, "enable_profiling"),
    (lambda: ProfilingConfig(True, ["training_trace"]), TypeError, "profiling_options"),
    (lambda: MemoryConfig(atomic_clean_policy=-1), ValueError, "atomic_clean_policy"),
    (lambda: MemoryConfig(variable_use_1g_huge_page=3), NpuConfigError,
     "variable_use_1g_huge_page"),
    (lambda: MemoryConfig(memory_optimization_policy=1), TypeError,
     "memory_optimization_policy"),
    (lambda: DumpConfig(enable_dump="yes"), TypeError, "enable_dump"),
    (lambda: DumpConfig(dump_mode="both"), NpuConfigError, "dump_mode"),
    (lambda: DumpConfig(dump_debug_mode="overflow"), NpuConfigError, "dump_debug_mode"),
    (lambda: DumpConfig(dump_data="all"), NpuConfigError, "dump_data"),
    (lambda: DumpConfig(dump_step="5-1"), NpuConfigError, "dump_step"),
    (lambda: DumpConfig(dump_path=3), TypeError, "dump_path"),
    (lambda: GraphMemoryOptimizeConfig(recompute="on"), ValueError,
     r"recompute should be in \['auto', 'manual'\]"),
    (lambda: GraphMemoryOptimizeConfig(graph_slice=""), ValueError, "graph_slice should be"),
    (lambda: ExperimentalConfig(graph_memory_optimize_config="auto"), ValueError,
     "graph_memory_optimize_config type must be GraphMemoryOptimizeConfig"),
    (lambda: ExperimentalConfig(accelerate_train_mode="fast|step|2"), NpuConfigError,
     "experimental_accelerate_train_mode"),
    (lambda: ExperimentalConfig(enable_graph_parallel="1"), TypeError,
     "enable_graph_parallel"),
    (lambda: ExperimentalConfig(logical_device_id=0), TypeError, "logical_device_id"),
    (lambda: DynamicInputConfig("data:1,-1", None, 1), ValueError,
     "should use together; missing dynamic_dims"),
    (lambda: DynamicInputConfig("data:1,-1", "10,20;30,40", 1), NpuConfigError,
     "dynamic_dims"),
    (lambda: DynamicInputConfig("label:-1;data:-1", "1,1;2,2", 0), NpuConfigError,
     "alphabetical"),
    (lambda: DynamicInputConfig("data:1,-1", "10;20", 2), NpuConfigError,
     "dynamic_node_type"),
    (lambda: DynamicInputConfig("data:1,-1", "10;20", 1, 2), ValueError,
     "compile_hybrid_mode must be 0 or 1"),
])
def test_sub_config_validation(factory, error, match):
    with pytest.raises(error, match=match):
        factory()


# ---- NPURunConfig -> NpuOptimizer options ----------------------------------------------------

DEFAULT_OPTIONS = {
    "all_tensor_not_empty": False, "buffer_optimize": "l2_optimize", "deterministic": 0,
    "device_type": "default_device_type",
    "enable_data_pre_proc": True, "enable_dump": False, "enable_dump_debug": False,
    "enable_exception_dump": 2, "enable_reduce_precision": False, "enable_small_channel": 0,
    "event_sync_timeout": -1, "experimental_logical_device_cluster_deploy_mode": "LB",
    "export_compile_stat": 1, "external_weight": False, "frozen_variable": False,
    "graph_max_parallel_model_num": 1, "graph_run_mode": 1, "hcom_multi_mode": False,
    "hcom_parallel": True, "input_batch_cpy": False, "input_fusion_size": 131072,
    "is_tailing_optimization": False, "iterations_per_loop": 1, "jit_compile": "auto",
    "job": "localhost", "min_group_size": True, "mix_compile_mode": False,
    "oo_constant_folding": True, "oo_level": "O3", "precision_mode": "allow_fp32_to_fp16",
    "shape_generalization_mode": "STRICT", "stream_sync_timeout": -1, "task_index": 0,
    "use_off_line": True, "variable_placement": "Device",
}


def _round_trip(config):
    proto = _quiet(npu_run_config_to_config_proto, config)
    return proto, NpuConfig.from_config_proto(proto)


def test_default_mapping_and_round_trip():
    config = NPURunConfig()
    options = npu_run_config_options(config)
    assert options == DEFAULT_OPTIONS
    proto, parsed = _round_trip(config)
    assert parsed.present and parsed.to_dict() == DEFAULT_OPTIONS
    assert list(proto.graph_options.rewrite_options.optimizers) == list(GRAPPLER_OPTIMIZERS)
    entries = [opt for opt in proto.graph_options.rewrite_options.custom_optimizers
               if opt.name == "NpuOptimizer"]
    assert len(entries) == 1
    assert entries[0].parameter_map["use_off_line"].b is True
    assert entries[0].parameter_map["iterations_per_loop"].i == 1
    assert entries[0].parameter_map["precision_mode"].s == b"allow_fp32_to_fp16"


def test_mapping_keeps_session_config_and_does_not_modify_it():
    session = config_pb2.ConfigProto(allow_soft_placement=True, inter_op_parallelism_threads=3)
    session.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    config = NPURunConfig(session_config=session, iterations_per_loop=4)
    proto, parsed = _round_trip(config)
    assert proto.inter_op_parallelism_threads == 3 and proto.allow_soft_placement
    assert proto.graph_options.rewrite_options.remapping == RewriterConfig.OFF
    assert parsed.iterations_per_loop == 4
    assert not session.graph_options.rewrite_options.custom_optimizers
    assert not session.graph_options.rewrite_options.optimizers


def test_mapping_with_every_sub_config(tmp_path):
    dump_dir = tmp_path / "dump"
    dump_dir.mkdir()
    config = NPURunConfig(
        iterations_per_loop=2, graph_run_mode=0, precision_mode_v2="origin",
        profiling_config=ProfilingConfig(True, '{"output":"/tmp/prof"}'),
        memory_config=MemoryConfig(atomic_clean_policy=1, memory_optimization_policy="GE"),
        dump_config=DumpConfig(enable_dump=True, dump_path=str(dump_dir), dump_step="0|5",
                               dump_layer="conv1 conv2"),
        experimental_config=ExperimentalConfig(
            logical_device_id="0:0", graph_compiler_cache_dir=str(tmp_path),
            accelerate_train_mode="fast|loss|1.05",
            graph_memory_optimize_config=GraphMemoryOptimizeConfig(graph_slice="auto")),
        dynamic_input_config=DynamicInputConfig("data:1,-1", "10;20", 1, 0),
        enable_compress_weight=True, hccl_timeout=30, op_precision_mode="ops.ini",
        stream_max_parallel_num="DNN_VM_AICPU:10", local_rank_id=3, jit_compile="false",
        oo_level="O1", aicore_num="2|2")
    options = npu_run_config_options(config)
    expected_changes = {
        "iterations_per_loop": 2, "graph_run_mode": 0, "precision_mode_v2": "origin",
        "profiling_mode": True, "profiling_options": '{"output":"/tmp/prof"}',
        "atomic_clean_policy": 1, "static_memory_policy": 0,
        "memory_optimization_policy": "GE", "variable_use_1g_huge_page": 0,
        "enable_dump": True, "dump_path": str(dump_dir), "dump_step": "0|5",
        "dump_mode": "output", "dump_debug_mode": "all", "dump_data": "tensor",
        "dump_layer": "conv1 conv2", "experimental_logical_device_id": "0:0",
        "graph_compiler_cache_dir": str(tmp_path),
        "experimental_accelerate_train_mode": "fast|loss|1.05", "graph_slice": "auto",
        "input_shape": "data:1,-1", "dynamic_dims": "10;20", "dynamic_node_type": 1,
        "compile_hybrid_mode": 0, "enable_compress_weight": True, "hccl_timeout": 30,
        "op_precision_mode": "ops.ini", "stream_max_parallel_num": "DNN_VM_AICPU:10",
        "local_rank_id": 3, "jit_compile": "false", "oo_level": "O1", "aicore_num": "2|2",
    }
    expected = dict(DEFAULT_OPTIONS)
    del expected["precision_mode"]  # precision_mode_v2 is given instead
    expected.update(expected_changes)
    assert options == dict(sorted(expected.items()))
    _, parsed = _round_trip(config)
    assert parsed.dump_path == os.path.realpath(str(dump_dir))
    assert parsed.precision_mode is None and parsed.precision_mode_v2 == "origin"
    assert parsed.dims_trio().gears == ((10,), (20,))
    assert parsed.enable_compress_weight is True and parsed.graph_slice == "auto"


def test_mapping_precision_defaults_and_aoe(tmp_path):
    assert npu_run_config_options(NPURunConfig(graph_run_mode=0))["precision_mode"] == \
        "force_fp16"
    options = npu_run_config_options(NPURunConfig(aoe_mode="2"))
    assert options["aoe_mode"] == "2" and options["work_path"] == "./"
    options = npu_run_config_options(NPURunConfig(aoe_mode="4", work_path=str(tmp_path),
                                                  distribute_config="d.json"))
    assert options["work_path"] == str(tmp_path) and options["distribute_config"] == "d.json"
    _, parsed = _round_trip(NPURunConfig(aoe_mode="4", work_path=str(tmp_path)))
    assert parsed.aoe_mode == "4" and parsed.work_path == os.path.realpath(str(tmp_path))


def test_mapping_job_from_tf_config(monkeypatch):
    # RunConfig (TF 2.15) insists on index 0 without a cluster.
    monkeypatch.setenv("TF_CONFIG", json.dumps({"task": {"type": "worker", "index": 0}}))
    options = npu_run_config_options(NPURunConfig())
    assert options["job"] == "worker" and options["task_index"] == 0


def test_mapping_enable_compress_weight_false_is_not_written():
    options = npu_run_config_options(NPURunConfig(compress_weight_conf="nodes.cfg"))
    assert "enable_compress_weight" not in options
    _, parsed = _round_trip(NPURunConfig(compress_weight_conf="nodes.cfg"))
    assert parsed.compress_weight_conf == "nodes.cfg"


@pytest.mark.parametrize("kwargs,match", [
    ({"dump_config": DumpConfig(enable_dump=True)}, "dump_path must be set"),
    ({"precision_mode": "allow_mix_precision", "precision_mode_v2": "origin"},
     "precision_mode_v2"),
    ({"precision_mode": "fp64"}, "precision_mode"),
    ({"jit_compile": "yes"}, "jit_compile"),
    ({"enable_compress_weight": True, "compress_weight_conf": "c.cfg"},
     "enable_compress_weight"),
    ({"variable_placement": "Host"}, "mix_compile_mode"),
    ({"dynamic_inputs_shape_range": "data:[1~x]"}, "dynamic_inputs_shape_range"),
])
def test_invalid_options_fail_in_npu_config(kwargs, match):
    with pytest.raises(NpuConfigError, match=match):
        _quiet(npu_run_config_to_config_proto, NPURunConfig(**kwargs))


def test_mapping_requires_npu_run_config():
    with pytest.raises(ValueError, match="config must be an NPURunConfig"):
        npu_run_config_options(PlainRunConfig())


def test_default_run_config_warns_about_nothing():
    reset_warn_once()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NpuAdapterWarning)
        proto = npu_run_config_to_config_proto(NPURunConfig())
    params = NpuConfig.from_config_proto(proto).to_parameter_map()
    assert "dynamic_graph_execute_mode" not in params
    assert params["enable_data_pre_proc"].b is True


def test_deprecated_keys_the_user_sets_warn_once():
    reset_warn_once()
    with pytest.warns(NpuAdapterWarning) as record:
        npu_run_config_to_config_proto(NPURunConfig(dynamic_input=True,
                                                    dynamic_graph_execute_mode="lazy_recompile"))
    messages = sorted(str(item.message) for item in record)
    assert any("'dynamic_graph_execute_mode' is deprecated" in m for m in messages)
    assert any("'dynamic_input' is deprecated" in m for m in messages)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NpuAdapterWarning)
        npu_run_config_to_config_proto(NPURunConfig(dynamic_input=True))


# ---- session decoration ----------------------------------------------------------------------


def test_set_npu_default_config_positional_and_keyword():
    def init(self, target="", graph=None, config=None):
        return config

    given = config_pb2.ConfigProto(log_device_placement=True)
    args, kwargs = npu_config.set_npu_default_config(init, ("", None, given), {})
    assert args == ("", None) and kwargs["config"] is given
    assert given.allow_soft_placement and not given.log_device_placement
    rewrite = given.graph_options.rewrite_options
    assert [opt.name for opt in rewrite.custom_optimizers] == ["NpuOptimizer"]
    assert rewrite.memory_optimization == RewriterConfig.OFF
    assert rewrite.remapping == RewriterConfig.OFF
    assert given.graph_options.optimizer_options.global_jit_level == \
        config_pb2.OptimizerOptions.OFF
    args, kwargs = npu_config.set_npu_default_config(init, (), {})
    assert [opt.name for opt in kwargs["config"].graph_options.rewrite_options
            .custom_optimizers] == ["NpuOptimizer"]
    wrapped = npu_config.decorator_tf_session(init)
    result = wrapped(None, config=config_pb2.ConfigProto())
    assert result.allow_soft_placement


def test_existing_npu_optimizer_keeps_memory_optimization():
    proto = config_pb2.ConfigProto()
    entry = proto.graph_options.rewrite_options.custom_optimizers.add()
    entry.name = "NpuOptimizer"
    entry.parameter_map["iterations_per_loop"].i = 3
    npu_config.apply_npu_session_defaults(proto)
    rewrite = proto.graph_options.rewrite_options
    assert len(rewrite.custom_optimizers) == 1
    assert rewrite.custom_optimizers[0].parameter_map["iterations_per_loop"].i == 3
    assert rewrite.memory_optimization == RewriterConfig.DEFAULT_MEM_OPT
    with pytest.raises(TypeError, match="ConfigProto"):
        npu_config.apply_npu_session_defaults({"config": 1})


# ---- NPUEstimator ----------------------------------------------------------------------------


def _model_fn(features, labels, mode, params):
    weight = tf.compat.v1.get_variable("w", initializer=1.0)
    loss = tf.reduce_mean(tf.square(features * weight - labels))
    step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, step)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


@pytest.mark.skipif(not HAS_TF_ESTIMATOR, reason="tf.estimator exists only on TF 2.15")
def test_npu_estimator_config_and_hooks(tmp_path):
    config = NPURunConfig(iterations_per_loop=3, model_dir=str(tmp_path))
    estimator = _quiet(NPUEstimator, _model_fn, config=config)
    parsed = NpuConfig.from_config_proto(estimator.config.session_config)
    assert parsed.present and parsed.iterations_per_loop == 3
    assert list(estimator.config.session_config.graph_options.rewrite_options.optimizers) == \
        list(GRAPPLER_OPTIMIZERS)
    assert config.session_config is None
    with tf.Graph().as_default():
        spec = estimator.model_fn(tf.constant([1.0]), tf.constant([2.0]),
                                  tf.estimator.ModeKeys.TRAIN, estimator.config)
        kinds = [type(hook) for hook in spec.training_hooks]
        assert kinds == [NPUCheckpointSaverHook, SetIterationsVarHook]
        assert spec.train_op.name == "IterationOp"
    with tf.Graph().as_default():
        eval_spec = estimator.model_fn(tf.constant([1.0]), tf.constant([2.0]),
                                       tf.estimator.ModeKeys.EVAL, estimator.config)
        assert not eval_spec.training_hooks


@pytest.mark.skipif(not HAS_TF_ESTIMATOR, reason="tf.estimator exists only on TF 2.15")
def test_npu_estimator_errors(tmp_path):
    with pytest.raises(ValueError, match="config must be an instance of NPURunConfig"):
        NPUEstimator(_model_fn, config=tf.estimator.RunConfig())
    with pytest.raises(ValueError, match="model_dir are set both"):
        NPUEstimator(_model_fn, model_dir=str(tmp_path / "a"),
                     config=NPURunConfig(model_dir=str(tmp_path / "b")))
    with pytest.raises(NotImplementedError, match="host_call"):
        NPUEstimatorSpec(tf.estimator.ModeKeys.TRAIN, loss=tf.constant(1.0),
                         host_call=(lambda: None, []))


@pytest.mark.skipif(HAS_TF_ESTIMATOR, reason="tf.estimator exists on TF 2.15")
def test_npu_estimator_without_tf_estimator():
    with pytest.raises(ImportError, match="NPUEstimator needs tf.estimator, which TensorFlow "
                                          "2.16 removed"):
        NPUEstimator(_model_fn, config=NPURunConfig())
    with pytest.raises(ImportError, match="NPUEstimatorSpec needs tf.estimator"):
        NPUEstimatorSpec("train")
