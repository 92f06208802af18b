"""The option table and NpuConfig: defaults, typing, round trips, warnings, node attributes."""

import copy
import pickle
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorflow.core.framework.attr_value_pb2 import AttrValue
from tensorflow.core.protobuf import config_pb2

from npu_adapter.config import (
    OPTION_SPECS,
    OPTIONS_BY_NAME,
    NpuAdapterWarning,
    NpuConfig,
    OptionSpec,
    reset_warn_once,
)
from npu_adapter.errors import NpuConfigError

# Transcribed from the TF Adapter's session options documentation (the defaults it lists), not
# from options.py, so a wrong default in the table fails here. None = unset without a default.
DOCUMENTED_DEFAULTS = {
    "use_off_line": True, "mix_compile_mode": False, "iterations_per_loop": 1,
    "enable_data_pre_proc": False, "job": "localhost", "task_index": 0,
    "lower_functional_ops": False, "in_out_pair": "", "in_out_pair_flag": True,
    "variable_placement": "Device", "frozen_variable": False, "const_input": "",
    "local_rank_id": -1, "local_device_list": "", "graph_max_parallel_model_num": 1,
    "dynamic_input": False, "dynamic_graph_execute_mode": "dynamic_execute",
    "dynamic_inputs_shape_range": "", "input_shape": "", "dynamic_dims": "",
    "dynamic_node_type": -1, "compile_hybrid_mode": None, "compile_dynamic_mode": False,
    "shape_generalization_mode": "STRICT", "jit_compile": "auto", "ac_parallel_enable": "",
    "all_tensor_not_empty": False,
    "precision_mode": None, "precision_mode_v2": None, "modify_mixlist": "",
    "op_precision_mode": "", "op_select_implmode": "", "optypelist_for_implmode": "",
    "customize_dtypes": "", "enable_reduce_precision": None, "fusion_switch_file": "",
    "enable_scope_fusion_passes": "", "buffer_optimize": "l2_optimize",
    "enable_small_channel": 0, "enable_compress_weight": False, "compress_weight_conf": "",
    "deterministic": 0, "oo_level": "O3", "oo_constant_folding": True,
    "optimization_switch": "", "topo_sorting_mode": None, "insert_op_file": "",
    "auto_multistream_parallel_mode": "", "aicore_num": "", "auto_tune_mode": "",
    "graph_run_mode": 1, "hcom_parallel": True, "hcom_multi_mode": False,
    "graph_memory_max_size": None, "variable_memory_max_size": None,
    "variable_format_optimize": None, "stream_max_parallel_num": "",
    "is_tailing_optimization": False, "atomic_clean_policy": 0, "static_memory_policy": 0,
    "memory_optimization_policy": "", "variable_use_1g_huge_page": 0, "external_weight": False,
    "input_fusion_size": 131072, "input_batch_cpy": False, "session_device_id": -1,
    "hccl_timeout": None, "op_wait_timeout": None, "op_execute_timeout": None,
    "HCCL_algorithm": "", "graph_exec_timeout": 600000, "stream_sync_timeout": -1,
    "event_sync_timeout": -1, "device_type": "default_device_type", "soc_config": "",
    "resource_config_path": "", "graph_parallel_option_path": "", "enable_graph_parallel": False,
    "graph_compiler_cache_dir": None, "graph_slice": "", "export_compile_stat": 1,
    "experimental_logical_device_cluster_deploy_mode": "LB",
    "experimental_logical_device_id": "", "experimental_model_deploy_mode": "",
    "experimental_model_deploy_devicelist": "", "experimental_accelerate_train_mode": "",
    "enable_dump": False, "enable_dump_debug": False, "dump_path": "", "dump_step": "",
    "dump_mode": "output", "dump_debug_mode": "all", "dump_data": "tensor", "dump_layer": "",
    "enable_exception_dump": 2, "op_debug_level": None, "op_debug_config": "", "debug_dir": "",
    "op_compiler_cache_mode": "", "op_compiler_cache_dir": "", "profiling_mode": False,
    "profiling_options": "", "aoe_mode": None, "work_path": "./", "distribute_config": "",
    "aoe_config_file": "", "quant_dumpable": None,
    # NPUEstimator writes it, the original never reads it
    "min_group_size": None,
    # ours
    "npu_adapter_min_cluster_size": 1, "npu_adapter_max_clusters": 0,
    "npu_adapter_gear_policy": "exact", "npu_adapter_gear_pad_values": "",
    "npu_adapter_gear_unpad": "", "npu_adapter_dump_dir": "", "npu_adapter_cache_dir": "",
    "npu_adapter_backend": "cpu",
    "npu_adapter_isolate_clusters": False, "npu_adapter_reuse_sessions": True,
    "npu_adapter_emulate_precision": "off",
    "npu_adapter_compile_cache_max_mb": 10240, "npu_adapter_strict_options": False,
}

SPEC_KINDS = {
    "b": {"npu_adapter_isolate_clusters", "npu_adapter_reuse_sessions",
          "npu_adapter_strict_options", "use_off_line",
          "mix_compile_mode",
          "enable_data_pre_proc", "lower_functional_ops",
          "in_out_pair_flag", "frozen_variable", "dynamic_input", "compile_dynamic_mode",
          "all_tensor_not_empty", "enable_reduce_precision", "enable_compress_weight",
          "oo_constant_folding", "hcom_parallel", "hcom_multi_mode", "variable_format_optimize",
          "is_tailing_optimization", "external_weight", "input_batch_cpy",
          "enable_graph_parallel", "enable_dump", "enable_dump_debug", "profiling_mode",
          "min_group_size"},
    "i": {"iterations_per_loop", "task_index", "local_rank_id", "graph_max_parallel_model_num",
          "dynamic_node_type", "compile_hybrid_mode", "enable_small_channel", "deterministic",
          "topo_sorting_mode", "graph_run_mode", "atomic_clean_policy", "static_memory_policy",
          "variable_use_1g_huge_page", "input_fusion_size", "session_device_id", "hccl_timeout",
          "op_wait_timeout", "op_execute_timeout", "graph_exec_timeout", "stream_sync_timeout",
          "event_sync_timeout", "export_compile_stat", "enable_exception_dump", "op_debug_level",
          "npu_adapter_min_cluster_size", "npu_adapter_max_clusters",
          "npu_adapter_compile_cache_max_mb"},
}

DEPRECATED = {"dynamic_input", "dynamic_graph_execute_mode",
              "dynamic_inputs_shape_range", "op_select_implmode", "optypelist_for_implmode",
              "variable_format_optimize", "op_debug_level", "graph_memory_max_size",
              "variable_memory_max_size"}


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    monkeypatch.delenv("AOE_MODE", raising=False)
    reset_warn_once()
    yield
    reset_warn_once()


def _quiet(func, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NpuAdapterWarning)
        return func(*args, **kwargs)


# ---- the table ---------------------------------------------------------------------------


def test_every_spec_option_is_modelled_with_its_default():
    assert set(OPTIONS_BY_NAME) == set(DOCUMENTED_DEFAULTS)
    config = NpuConfig.from_dict({})
    for name, default in DOCUMENTED_DEFAULTS.items():
        assert getattr(config, name) == default, name
        assert type(getattr(config, name)) is type(default), name
        assert OPTIONS_BY_NAME[name].default == default, name


def test_option_kinds_follow_the_attr_fields_the_original_reads():
    for spec in OPTION_SPECS:
        expected = next((kind for kind, names in SPEC_KINDS.items() if spec.name in names), "s")
        assert spec.kind == expected, spec.name


def test_flags_of_the_table():
    assert {s.name for s in OPTION_SPECS if s.deprecated} == DEPRECATED
    assert {s.name for s in OPTION_SPECS if s.ours} == {
        n for n in DOCUMENTED_DEFAULTS if n.startswith("npu_adapter_")}
    assert {s.name for s in OPTION_SPECS if s.compat_only} == {
        "enable_reduce_precision", "min_group_size"}
    assert OPTIONS_BY_NAME["variable_placement"].node_attr_name == "_variable_location"
    assert OPTIONS_BY_NAME["iterations_per_loop"].severity == "F"
    assert OPTIONS_BY_NAME["aoe_mode"].severity == "E"
    assert OPTIONS_BY_NAME["input_fusion_size"].severity == "W"
    assert [s.name for s in NpuConfig.option_specs()] == sorted(OPTIONS_BY_NAME)


def test_option_spec_json_is_complete():
    described = OPTIONS_BY_NAME["iterations_per_loop"].to_json()
    assert described == {
        "name": "iterations_per_loop", "type": "int", "field": ".i", "default": 1,
        "allowed": "an integer >= 1", "category": "partition", "deprecated": False,
        "ours": False, "compat_only": False, "severity": "F",
        "doc": OPTIONS_BY_NAME["iterations_per_loop"].doc}
    for spec in OPTION_SPECS:
        assert isinstance(spec, OptionSpec)
        assert spec.doc and spec.allowed and spec.category, spec.name


# ---- typed access and construction -------------------------------------------------------


def test_typed_attributes_and_is_set():
    config = NpuConfig.from_dict({"mix_compile_mode": True, "iterations_per_loop": 1,
                                  "precision_mode": "allow_mix_precision",
                                  "HCCL_algorithm": "level0:NA"})
    assert config.mix_compile_mode is True
    assert config.iterations_per_loop == 1
    assert config.precision_mode == "allow_mix_precision"
    assert config.HCCL_algorithm == "level0:NA"
    assert config.is_set("iterations_per_loop")
    assert not config.is_set("use_off_line")
    assert config.explicit_keys() == ("HCCL_algorithm", "iterations_per_loop",
                                      "mix_compile_mode", "precision_mode")
    with pytest.raises(KeyError, match="not an NpuOptimizer option"):
        config.is_set("mix_compile")
    with pytest.raises(AttributeError, match="did you mean 'mix_compile_mode'"):
        _ = config.mix_compile


def test_keyword_constructor_equals_from_dict():
    assert NpuConfig(iterations_per_loop=3) == NpuConfig.from_dict({"iterations_per_loop": 3})
    assert NpuConfig().present


def test_config_is_immutable():
    config = NpuConfig.from_dict({})
    with pytest.raises(AttributeError, match="immutable"):
        config.iterations_per_loop = 2
    with pytest.raises(AttributeError, match="immutable"):
        del config.iterations_per_loop
    assert copy.copy(config) is config and copy.deepcopy(config) is config


def test_python_values_are_type_checked():
    with pytest.raises(NpuConfigError, match=r"'mix_compile_mode'.*a bool \(got int\)"):
        NpuConfig.from_dict({"mix_compile_mode": 1})
    with pytest.raises(NpuConfigError, match=r"'iterations_per_loop'.*an int \(got bool\)"):
        NpuConfig.from_dict({"iterations_per_loop": True})
    with pytest.raises(NpuConfigError, match=r"'precision_mode'.*a str \(got int\)"):
        NpuConfig.from_dict({"precision_mode": 1})
    with pytest.raises(NpuConfigError, match="UTF-8"):
        NpuConfig.from_dict({"soc_config": b"\xff"})
    # None means "not given", bytes are decoded, index-like ints are accepted
    assert not NpuConfig.from_dict({"precision_mode": None}).is_set("precision_mode")
    assert NpuConfig.from_dict({"soc_config": b"Ascend910"}).soc_config == "Ascend910"

    class Index:
        def __index__(self):
            return 4

    assert NpuConfig.from_dict({"iterations_per_loop": Index()}).iterations_per_loop == 4


@pytest.mark.parametrize("key, attr, field", [
    ("mix_compile_mode", AttrValue(i=1), ".b"),
    ("iterations_per_loop", AttrValue(b=True), ".i"),
    ("precision_mode", AttrValue(i=3), ".s"),
    ("jit_compile", AttrValue(b=True), ".s"),
    ("use_off_line", AttrValue(list=AttrValue.ListValue(i=[1])), ".b"),
])
def test_wrong_attr_field_is_an_error_naming_the_expected_field(key, attr, field):
    with pytest.raises(NpuConfigError) as info:
        NpuConfig.from_parameter_map({key: attr})
    message = str(info.value)
    assert repr(key) in message and f"{field} field" in message and "got the ." in message


def test_empty_attr_value_reads_as_zero_value():
    config = NpuConfig.from_parameter_map({"use_off_line": AttrValue(),
                                           "iterations_per_loop": AttrValue(i=4)})
    assert config.use_off_line is False
    assert config.is_set("use_off_line")
    assert config.iterations_per_loop == 4


@pytest.mark.parametrize("key, attr, default", [
    ("export_compile_stat", AttrValue(s=b"3"), 1),
    ("oo_constant_folding", AttrValue(i=0), True),
])
def test_options_read_only_when_type_matches(key, attr, default):
    # As the original: export_compile_stat is read only when int-typed, oo_constant_folding only
    # when bool-typed; another field is ignored (with a warning) and kept for round trips.
    with pytest.warns(NpuAdapterWarning, match=key):
        config = NpuConfig.from_parameter_map({key: attr})
    assert getattr(config, key) == default
    assert not config.is_set(key)
    assert config.to_parameter_map()[key] == attr
    assert NpuConfig.from_parameter_map(config.to_parameter_map()) == config


def test_compat_only_options_are_accepted_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = NpuConfig.from_parameter_map({"enable_reduce_precision": AttrValue(b=False),
                                               "min_group_size": AttrValue(i=1)})
    assert config.enable_reduce_precision is False
    assert config.min_group_size is None  # NPUEstimator has written it as .b = 1 and as ints
    assert set(config.to_parameter_map()) == {"enable_reduce_precision", "min_group_size"}
    attrs = config.to_node_attrs()
    assert "_enable_reduce_precision" not in attrs and "_min_group_size" not in attrs


@pytest.mark.parametrize("options", [
    {"iterations_per_loop": 0}, {"task_index": -1}, {"local_rank_id": -1},
    {"npu_adapter_min_cluster_size": 0}, {"npu_adapter_max_clusters": -1},
    {"npu_adapter_gear_policy": "pad"}, {"npu_adapter_gear_pad_values": "x:y"},
    {"npu_adapter_gear_unpad": "x"}, {"npu_adapter_backend": " "},
    {"experimental_accelerate_train_mode": "fast"},
    {"dynamic_inputs_shape_range": "getnext:[1~"}, {"dynamic_inputs_shape_range": "foo:[1]"},
    {"enable_exception_dump": -1}, {"aoe_mode": "0"},
])
def test_single_option_errors_name_option_and_value(options):
    ((key, value),) = options.items()
    with pytest.raises(NpuConfigError) as info:
        _quiet(NpuConfig.from_dict, options)
    assert repr(key) in str(info.value)
    assert info.value.option == key


@pytest.mark.parametrize("options", [
    {"iterations_per_loop": 1000}, {"task_index": 3}, {"local_rank_id": 7},
    {"local_device_list": "0,1"}, {"graph_max_parallel_model_num": 8},
    {"dynamic_graph_execute_mode": "lazy_recompile"},
    {"dynamic_inputs_shape_range": "getnext:[1~50, 1~50];data:[3,-1],[]"},
    {"shape_generalization_mode": "ADAPTIVE"}, {"jit_compile": "false"},
    {"precision_mode": "must_keep_origin_dtype"}, {"precision_mode_v2": "cube_hif8"},
    {"op_select_implmode": "high_performance_for_all"}, {"buffer_optimize": "off_optimize"},
    {"graph_run_mode": 0}, {"variable_use_1g_huge_page": 2}, {"session_device_id": 0},
    {"graph_slice": "manual"}, {"graph_slice": ""}, {"export_compile_stat": 0},
    {"experimental_accelerate_train_mode": "fast1|loss|1.2"}, {"dump_step": "0|5|10-20"},
    {"dump_mode": "all"}, {"dump_debug_mode": "atomic_overflow"}, {"dump_data": "stats"},
    {"enable_exception_dump": 0}, {"aoe_mode": ""}, {"variable_placement": "Device"},
    {"npu_adapter_min_cluster_size": 3}, {"npu_adapter_max_clusters": 2},
    {"npu_adapter_gear_policy": "pad_up"}, {"npu_adapter_gear_pad_values": "ids:0;mask:-1.5"},
    {"npu_adapter_gear_unpad": "logits:0:0,1"}, {"npu_adapter_backend": "xla"},
    {"npu_adapter_dump_dir": "/tmp/dumps"},
])
def test_single_option_valid_values(options):
    ((key, value),) = options.items()
    config = _quiet(NpuConfig.from_dict, options)
    assert getattr(config, key) == value
    assert config.is_set(key)


def test_parsed_views():
    config = NpuConfig.from_dict({
        "npu_adapter_gear_pad_values": "ids:0;mask:-1", "npu_adapter_gear_unpad": "out:0:1",
    })
    assert config.gear_pad_values() == {"ids": 0, "mask": -1}
    assert config.gear_unpad() == {"out:0": (1,)}
    ranged = _quiet(NpuConfig.from_dict,
                    {"dynamic_inputs_shape_range": "getnext:[2~3,4~5];data:[2,3]"})
    assert ranged.shape_ranges(enable_dp=True) == ("[2,3]", "[2~3,4~5]")
    assert ranged.shape_ranges(enable_dp=False) == ("[2~3,4~5],[2,3]", "")
    assert NpuConfig().shape_ranges(True) == ("", "")


# ---- ConfigProto -------------------------------------------------------------------------


def _proto_with(parameters, name="NpuOptimizer"):
    proto = config_pb2.ConfigProto()
    optimizer = proto.graph_options.rewrite_options.custom_optimizers.add()
    optimizer.name = name
    for key, attr in parameters.items():
        optimizer.parameter_map[key].CopyFrom(attr)
    return proto


def test_from_config_proto_without_npu_optimizer_is_inert():
    for proto in (None, config_pb2.ConfigProto(),
                  _proto_with({"mix_compile_mode": AttrValue(b=True)}, name="npuoptimizer")):
        config = NpuConfig.from_config_proto(proto)
        assert not config.present
        assert config.job == "default"
        assert config.mix_compile_mode is False
        assert config.explicit_keys() == ()
        assert config.to_node_attrs() == {}
        assert repr(config) == "NpuConfig(present=False)"


def test_from_config_proto_rejects_other_objects():
    with pytest.raises(TypeError, match="ConfigProto"):
        NpuConfig.from_config_proto({"iterations_per_loop": 2})


def test_from_config_proto_with_npu_optimizer():
    config = NpuConfig.from_config_proto(_proto_with({"mix_compile_mode": AttrValue(b=True)}))
    assert config.present
    assert config.job == "localhost"
    assert config.mix_compile_mode is True
    assert NpuConfig.from_config_proto(_proto_with({})).present


def test_several_npu_optimizer_entries_are_merged_later_winning():
    proto = _proto_with({"iterations_per_loop": AttrValue(i=2), "use_off_line": AttrValue(b=1)})
    second = proto.graph_options.rewrite_options.custom_optimizers.add()
    second.name = "NpuOptimizer"
    second.parameter_map["iterations_per_loop"].i = 5
    with pytest.warns(NpuAdapterWarning, match="merged"):
        config = NpuConfig.from_config_proto(proto)
    assert config.iterations_per_loop == 5 and config.use_off_line is True
    rebuilt = config.to_config_proto(base=proto)
    names = [o.name for o in rebuilt.graph_options.rewrite_options.custom_optimizers]
    assert names == ["NpuOptimizer"]


def test_to_config_proto_keeps_the_base_and_replaces_the_entry():
    base = config_pb2.ConfigProto(allow_soft_placement=True)
    other = base.graph_options.rewrite_options.custom_optimizers.add()
    other.name = "SomethingElse"
    npu = base.graph_options.rewrite_options.custom_optimizers.add()
    npu.name = "NpuOptimizer"
    npu.parameter_map["stale"].i = 1
    config = NpuConfig.from_dict({"iterations_per_loop": 7})
    proto = config.to_config_proto(base)
    assert proto.allow_soft_placement
    optimizers = proto.graph_options.rewrite_options.custom_optimizers
    assert [o.name for o in optimizers] == ["SomethingElse", "NpuOptimizer"]
    assert dict(optimizers[1].parameter_map) == {"iterations_per_loop": AttrValue(i=7)}
    assert "stale" in base.graph_options.rewrite_options.custom_optimizers[1].parameter_map
    absent = NpuConfig.from_config_proto(None).to_config_proto(base)
    assert [o.name for o in absent.graph_options.rewrite_options.custom_optimizers] == [
        "SomethingElse"]


# ---- round trips -------------------------------------------------------------------------


EXAMPLE = {
    "mix_compile_mode": True, "iterations_per_loop": 1, "precision_mode": "allow_mix_precision",
    "modify_mixlist": "/m.json", "in_out_pair": "[[['a'],['b']]]", "jit_compile": "false",
    "HCCL_algorithm": "x", "npu_adapter_gear_policy": "pad_up", "some_unknown_key": "v",
    "unknown_int": 3, "unknown_bool": False, "unknown_float": 0.5,
}


def _round_trips(config):
    assert NpuConfig.from_dict(config.to_dict()) == config
    assert NpuConfig.from_parameter_map(config.to_parameter_map()) == config
    assert NpuConfig.from_config_proto(config.to_config_proto()) == config
    assert hash(NpuConfig.from_dict(config.to_dict())) == hash(config)
    assert pickle.loads(pickle.dumps(config)) == config


def test_round_trips_of_an_example(tmp_path):
    mixlist = tmp_path / "m.json"
    mixlist.write_text('{"black-list": {"to-add": ["Cast"]}}')
    config = _quiet(NpuConfig.from_dict, dict(EXAMPLE, modify_mixlist=str(mixlist)))
    _quiet(_round_trips, config)
    params = config.to_parameter_map()
    assert params["mix_compile_mode"] == AttrValue(b=True)
    assert params["iterations_per_loop"] == AttrValue(i=1)
    assert params["precision_mode"] == AttrValue(s=b"allow_mix_precision")
    assert params["unknown_float"].f == 0.5
    assert list(params) == sorted(EXAMPLE)
    assert config.to_dict()["some_unknown_key"] == "v"


def test_unknown_list_values_survive_round_trips():
    attr = AttrValue(list=AttrValue.ListValue(s=[b"a", b"b"]))
    config = _quiet(NpuConfig.from_parameter_map, {"zz_list": attr})
    assert config.to_parameter_map()["zz_list"] == attr
    assert config.to_dict()["zz_list"] == attr
    _quiet(_round_trips, config)


def test_protobuf_map_is_accepted():
    proto = _proto_with({"iterations_per_loop": AttrValue(i=9)})
    parameter_map = proto.graph_options.rewrite_options.custom_optimizers[0].parameter_map
    assert NpuConfig.from_parameter_map(parameter_map).iterations_per_loop == 9


_TEXT = st.text(max_size=8)
_VALID_VALUES = {
    "use_off_line": st.booleans(), "iterations_per_loop": st.integers(1, 10 ** 6),
    "task_index": st.integers(0, 64), "lower_functional_ops": st.booleans(),
    "in_out_pair_flag": st.booleans(), "frozen_variable": st.booleans(),
    "const_input": _TEXT, "local_rank_id": st.integers(0, 7),
    "local_device_list": st.lists(st.integers(0, 15), min_size=1, max_size=4).map(
        lambda ids: ",".join(map(str, ids))),
    "graph_max_parallel_model_num": st.integers(1, 8),
    "dynamic_graph_execute_mode": st.sampled_from(["lazy_recompile", "dynamic_execute"]),
    "shape_generalization_mode": st.sampled_from(["STRICT", "FULL", "ADAPTIVE"]),
    "jit_compile": st.sampled_from(["true", "false", "auto"]),
    "precision_mode_v2": st.sampled_from(["fp16", "origin", "mixed_float16"]),
    "buffer_optimize": st.sampled_from(["l2_optimize", "off_optimize"]),
    "deterministic": st.integers(0, 1), "oo_constant_folding": st.booleans(),
    "graph_run_mode": st.sampled_from([0, 1]),
    "variable_use_1g_huge_page": st.sampled_from([0, 1, 2]),
    "input_fusion_size": st.integers(0, 32 * 1024 * 1024),
    "session_device_id": st.integers(0, 7), "HCCL_algorithm": _TEXT,
    "export_compile_stat": st.sampled_from([0, 1, 2]), "soc_config": _TEXT,
    "dump_mode": st.sampled_from(["input", "output", "all"]),
    "dump_data": st.sampled_from(["tensor", "stats"]),
    "dump_step": st.lists(st.integers(0, 99), min_size=1, max_size=5).map(
        lambda steps: "|".join(map(str, steps))),
    "enable_exception_dump": st.integers(0, 2),
    "experimental_accelerate_train_mode": st.sampled_from(["fast|step|0.5", "fast1|loss"]),
    "stream_sync_timeout": st.integers(-1, 10 ** 6), "hccl_timeout": st.integers(0, 10 ** 4),
    "npu_adapter_min_cluster_size": st.integers(1, 50),
    "npu_adapter_max_clusters": st.integers(0, 50),
    "npu_adapter_gear_policy": st.sampled_from(["exact", "pad_up"]),
    "npu_adapter_backend": st.sampled_from(["cpu", "xla", "cann"]),
    "zz_unknown_int": st.integers(-5, 5), "zz_unknown_text": _TEXT,
    "zz_unknown_bool": st.booleans(),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional=_VALID_VALUES))
def test_round_trips_of_random_valid_subsets(options):
    config = _quiet(NpuConfig.from_dict, options)
    assert config.explicit_keys() == tuple(sorted(k for k in options if k in OPTIONS_BY_NAME))
    for key, value in options.items():
        assert config.get(key) == value
    _quiet(_round_trips, config)
    assert config.to_node_attrs() == _quiet(NpuConfig.from_dict, options).to_node_attrs()


# ---- equality, replace, repr -------------------------------------------------------------


def test_equality_and_hash():
    a = NpuConfig.from_dict({"iterations_per_loop": 2, "use_off_line": True})
    b = NpuConfig.from_parameter_map({"use_off_line": AttrValue(b=True),
                                      "iterations_per_loop": AttrValue(i=2)})
    assert a == b and hash(a) == hash(b)
    assert a != NpuConfig.from_dict({"iterations_per_loop": 2})       # explicit default differs
    assert NpuConfig.from_dict({}) != NpuConfig.from_config_proto(None)  # present differs
    assert a != "not a config"
    assert len({a, b, NpuConfig()}) == 2


def test_replace_validates_and_unsets():
    base = NpuConfig.from_dict({"mix_compile_mode": True})
    changed = base.replace(precision_mode="force_fp16")
    assert changed.precision_mode == "force_fp16" and changed.mix_compile_mode is True
    assert base.precision_mode is None
    assert changed.replace(precision_mode=None) == base
    with pytest.raises(NpuConfigError, match="iterations_per_loop"):
        base.replace(iterations_per_loop=4)
    absent = NpuConfig.from_config_proto(None)
    assert absent.replace() == absent
    assert absent.replace(iterations_per_loop=3).present


def test_repr_is_readable():
    config = _quiet(NpuConfig.from_dict, {"iterations_per_loop": 2, "zz": "v"})
    assert repr(config) == "NpuConfig(iterations_per_loop=2, zz=<unread s: 'v'>)"
    assert repr(NpuConfig()) == "NpuConfig()"


def test_get_and_effective_values():
    config = _quiet(NpuConfig.from_dict, {"iterations_per_loop": 2, "zz": 1})
    assert config.get("iterations_per_loop") == 2
    assert config.get("precision_mode", "x") is None
    assert config.get("zz") == 1
    assert config.get("nope", "fallback") == "fallback"
    values = config.effective_values()
    assert list(values) == sorted(values) and values["iterations_per_loop"] == 2
    assert config.unknown_keys() == ("zz",)
    assert "iterations_per_loop" in dir(config)


# ---- warnings ----------------------------------------------------------------------------


def test_deprecated_options_warn_once_per_key():
    with pytest.warns(NpuAdapterWarning) as record:
        NpuConfig.from_dict({"dynamic_input": True})
        NpuConfig.from_dict({"dynamic_input": False})
        NpuConfig.from_dict({"op_debug_level": 0})
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert "'dynamic_input' is deprecated" in messages[0]
    assert "set_graph_exec_config" in messages[0]
    assert "'op_debug_level' is deprecated" in messages[1] and "op_debug_config" in messages[1]


def test_deprecation_warning_points_at_the_caller():
    with pytest.warns(NpuAdapterWarning) as record:
        NpuConfig.from_dict({"dynamic_input": True})
    assert record[0].filename == __file__


def test_unknown_keys_warn_once_and_stay_out_of_attributes():
    with pytest.warns(NpuAdapterWarning) as record:
        config = NpuConfig.from_dict({"mix_compile_mod": True})
        NpuConfig.from_parameter_map({"mix_compile_mod": AttrValue(b=False)})
        NpuConfig.from_dict({"npu_adapter_typo": 1})
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert "'mix_compile_mod'" in messages[0] and "did you mean 'mix_compile_mode'" in messages[0]
    assert "npu-adapter" in messages[1]
    assert config.unknown_keys() == ("mix_compile_mod",)
    assert config.explicit_keys() == ()
    with pytest.raises(AttributeError):
        _ = config.mix_compile_mod
    assert "mix_compile_mod" in config.to_parameter_map()


def test_unsupported_python_value_for_unknown_key():
    with pytest.raises(NpuConfigError, match="zz"):
        _quiet(NpuConfig.from_dict, {"zz": [1, 2]})
    with pytest.raises(NpuConfigError, match="an AttrValue"):
        NpuConfig.from_parameter_map({"iterations_per_loop": 3})


# ---- node attributes ---------------------------------------------------------------------


def test_to_node_attrs_formats_like_the_original():
    config = NpuConfig.from_dict({"mix_compile_mode": True, "jit_compile": "true",
                                  "variable_placement": "Host", "enable_small_channel": 1,
                                  "npu_adapter_backend": "xla", "const_input": "c"})
    attrs = config.to_node_attrs()
    assert list(attrs) == sorted(attrs)
    assert attrs["_NpuOptimizer"] == "NpuOptimizer"
    assert attrs["_mix_compile_mode"] == "1"
    assert attrs["_use_off_line"] == "1"
    assert attrs["_lower_functional_ops"] == "0"
    assert attrs["_iterations_per_loop"] == "1"
    assert attrs["_enable_small_channel"] == "1"
    assert attrs["_jit_compile"] == "1"
    assert attrs["_variable_location"] == "Host"
    assert "_variable_placement" not in attrs
    assert attrs["_dynamic_node_type"] == "-1"
    assert attrs["_job"] == "localhost"
    assert attrs["_input_shape"] == ""
    assert attrs["_enable_data_pre_proc"] == "0"
    for name in ("_precision_mode", "_compile_hybrid_mode", "_aoe_mode", "_const_input",
                 "_npu_adapter_backend", "_hccl_timeout"):
        assert name not in attrs
    assert all(isinstance(value, str) for value in attrs.values())


@pytest.mark.parametrize("value, stamped", [("true", "1"), ("false", "0"), ("auto", "2")])
def test_jit_compile_attr_mapping(value, stamped):
    assert NpuConfig.from_dict({"jit_compile": value}).to_node_attrs()["_jit_compile"] == stamped


def test_every_option_has_an_effect_class():
    from npu_adapter.config.effects import EFFECT_CLASSES, effect_of

    for spec in OPTION_SPECS:
        effect, note = effect_of(spec.name)
        assert effect in EFFECT_CLASSES, spec.name
        assert note, spec.name


def test_a_script_with_a_megabyte_op_type_list_gets_a_one_line_error():
    op_types = ",".join(["Pooling", "SoftmaxV2", "Relu"] * 47663)  # 1 MB of valid op types
    assert len(op_types) >= 1_000_000
    proto = _proto_with({"op_select_implmode": AttrValue(s=b"high_precision"),
                         "optypelist_for_implmode": AttrValue(s=op_types.encode())})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NpuAdapterWarning)  # both options are deprecated
        with pytest.raises(NpuConfigError) as info:
            NpuConfig.from_config_proto(proto)
    message = str(info.value)
    assert info.value.option == "optypelist_for_implmode" and "\n" not in message
    assert f"the value is {len(op_types)} bytes long" in message
    assert "at most 65536 bytes" in message and len(message) < 400


def test_every_text_option_is_bounded():
    paths = {spec.name for spec in OPTION_SPECS if spec.max_bytes == 4096}
    assert {"dump_path", "modify_mixlist", "npu_adapter_dump_dir", "work_path"} <= paths
    for spec in OPTION_SPECS:
        if spec.kind != "s":
            assert spec.max_bytes is None, spec.name
            continue
        assert spec.max_bytes == (4096 if spec.name in paths else 65536), spec.name
        too_long = "a" * (spec.max_bytes + 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NpuAdapterWarning)
            with pytest.raises(NpuConfigError) as info:
                NpuConfig.from_dict({spec.name: too_long})
        assert info.value.option == spec.name
        assert f"at most {spec.max_bytes} bytes" in str(info.value)
        assert f"{spec.max_bytes + 1} bytes long" in str(info.value)


def test_text_options_up_to_the_bound_are_accepted():
    op_types = ",".join(["Relu"] * 13107)  # 65534 bytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NpuAdapterWarning)  # both options are deprecated
        config = NpuConfig(op_select_implmode="high_precision", optypelist_for_implmode=op_types)
    assert config.optypelist_for_implmode == op_types
    layers = " ".join(f"layer_{k:05d}" for k in range(5461))  # 65531 bytes
    assert NpuConfig(dump_layer=layers).dump_layer == layers
    with pytest.raises(NpuConfigError, match="65537 bytes long"):
        NpuConfig(dump_layer="é" * 32768 + "a")  # 32769 characters, 65537 bytes
