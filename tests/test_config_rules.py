"""Cross-option rules (npu_adapter.config.rules) and the original's option validation cases
(docs/options.md)."""

import json
import os

import pytest

from npu_adapter.config import NpuConfig, reset_warn_once, rules
from npu_adapter.config.options import PROFILING_DEFAULT_OPTIONS
from npu_adapter.config.warnings import NpuAdapterWarning
from npu_adapter.errors import NpuConfigError

pytestmark = pytest.mark.filterwarnings("ignore::npu_adapter.config.warnings.NpuAdapterWarning")

TRIO = {"input_shape": "data:-1,3;label:-1", "dynamic_dims": "1,1;2,2", "dynamic_node_type": 0}


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    monkeypatch.delenv("AOE_MODE", raising=False)
    reset_warn_once()
    yield
    reset_warn_once()


def _error(options, *names):
    """Build a config that must fail; every name in ``names`` must appear in the message."""
    with pytest.raises(NpuConfigError) as info:
        NpuConfig.from_dict(options)
    message = str(info.value)
    for name in names:
        assert name in message, (name, message)
    return info.value


# ---- one test per rule: valid and invalid --------------------------------------------------


@pytest.mark.parametrize("options", [
    {"precision_mode": "force_fp16"},
    {"precision_mode_v2": "origin"},
    {},
])
def test_precision_modes_valid(options):
    assert NpuConfig.from_dict(options).explicit_keys() == tuple(sorted(options))


def test_precision_modes_are_exclusive():
    error = _error({"precision_mode": "force_fp16", "precision_mode_v2": "fp16"},
                   "precision_mode", "precision_mode_v2", "precision_mode=force_fp16",
                   "precision_mode_v2=fp16")
    assert error.option == "precision_mode + precision_mode_v2"


@pytest.mark.parametrize("options", [
    {"precision_mode": "allow_mix_precision"},
    {"precision_mode": "allow_mix_precision_fp16"},
    {"precision_mode": "allow_mix_precision_bf16"},
    {"precision_mode_v2": "mixed_float16"},
    {"precision_mode_v2": "mixed_bfloat16"},
    {"precision_mode_v2": "mixed_hif8"},
])
def test_modify_mixlist_with_mixed_mode(options, tmp_path):
    path = tmp_path / "ops_info.json"
    path.write_text('{"white-list": {"to-remove": ["Conv2D"]}}')
    config = NpuConfig.from_dict({"modify_mixlist": str(path), **options})
    assert config.modify_mixlist == str(path)


def test_modify_mixlist_three_distinct_messages():
    path = {"modify_mixlist": "/x.json"}
    first = _error({**path, "precision_mode": "force_fp16"},
                   "modify_mixlist", "precision_mode", "precision_mode=force_fp16",
                   "allow_mix_precision")
    second = _error({**path, "precision_mode_v2": "origin"},
                    "modify_mixlist", "precision_mode_v2", "precision_mode_v2=origin",
                    "mixed_float16")
    third = _error(path, "modify_mixlist", "no mixed precision mode")
    assert len({first.allowed, second.allowed, third.allowed}) == 3
    assert first.option == "modify_mixlist + precision_mode"
    assert second.option == "modify_mixlist + precision_mode_v2"


def test_optypelist_needs_implmode():
    config = NpuConfig.from_dict({"op_select_implmode": "high_precision",
                                  "optypelist_for_implmode": "Pooling,SoftmaxV2"})
    assert config.optypelist_for_implmode == "Pooling,SoftmaxV2"
    _error({"optypelist_for_implmode": "Pooling"}, "optypelist_for_implmode",
           "op_select_implmode must be set", "optypelist_for_implmode=Pooling")


@pytest.mark.parametrize("options", [
    {"enable_compress_weight": True},
    {"compress_weight_conf": "/x.cfg"},
])
def test_compress_weight_alone(options):
    NpuConfig.from_dict(options)


@pytest.mark.parametrize("enabled", [True, False])
def test_compress_weight_conflict_counts_presence(enabled):
    _error({"enable_compress_weight": enabled, "compress_weight_conf": "/x.cfg"},
           "enable_compress_weight", "compress_weight_conf", "compress_weight_conf=/x.cfg")


def test_dims_trio_all_three():
    config = NpuConfig.from_dict(TRIO)
    trio = config.dims_trio()
    assert trio.inputs == (("data", (-1, 3)), ("label", (-1,)))
    assert trio.gears == ((1, 1), (2, 2))
    assert NpuConfig.from_dict({}).dims_trio() is None


@pytest.mark.parametrize("missing", [
    ("input_shape",), ("dynamic_dims",), ("dynamic_node_type",),
    ("input_shape", "dynamic_dims"), ("dynamic_dims", "dynamic_node_type"),
    ("input_shape", "dynamic_node_type"),
])
def test_dims_trio_all_or_none(missing):
    options = {k: v for k, v in TRIO.items() if k not in missing}
    error = _error(options, "input_shape", "dynamic_dims", "dynamic_node_type",
                   "should use together", "missing " + ", ".join(missing))
    assert error.option == "input_shape + dynamic_dims + dynamic_node_type"


def test_dims_trio_cross_checks_run_in_the_config():
    _error({**TRIO, "input_shape": "label:-1;data:-1,3"}, "input_shape", "alphabetical")
    _error({**TRIO, "dynamic_dims": "1;2"}, "dynamic_dims", "2 value(s) per gear")


@pytest.mark.parametrize("options", [
    {**TRIO, "dynamic_node_type": 1, "compile_hybrid_mode": 1},
    {**TRIO, "compile_hybrid_mode": 0},
    {"compile_hybrid_mode": 0},
])
def test_compile_hybrid_mode_valid(options):
    assert NpuConfig.from_dict(options).compile_hybrid_mode == options["compile_hybrid_mode"]


@pytest.mark.parametrize("options, names", [
    ({**TRIO, "compile_hybrid_mode": 1}, ("compile_hybrid_mode", "dynamic_node_type")),
    ({**TRIO, "compile_hybrid_mode": 2}, ("compile_hybrid_mode", "0 or 1", "2")),
    ({"compile_hybrid_mode": 1}, ("compile_hybrid_mode", "input_shape", "dynamic_dims")),
])
def test_compile_hybrid_mode_invalid(options, names):
    _error(options, *names)


def test_compile_dynamic_mode_with_dims_trio():
    assert NpuConfig.from_dict({"compile_dynamic_mode": True}).compile_dynamic_mode is True
    assert NpuConfig.from_dict({**TRIO, "compile_dynamic_mode": False}).is_set(
        "compile_dynamic_mode")
    _error({**TRIO, "compile_dynamic_mode": True}, "compile_dynamic_mode", "input_shape")


def test_dims_trio_with_mix_compile():
    # a case of the original's tests
    _error({**TRIO, "mix_compile_mode": True}, "input_shape", "mix_compile_mode",
           "dynamic config can not use with mix compile.")
    assert NpuConfig.from_dict({**TRIO, "mix_compile_mode": False}).dims_trio() is not None


@pytest.mark.parametrize("options", [
    {"mix_compile_mode": True, "iterations_per_loop": 1},
    {"mix_compile_mode": True},
    {"mix_compile_mode": False, "iterations_per_loop": 5},
])
def test_mix_compile_single_iteration_valid(options):
    NpuConfig.from_dict(options)


def test_mix_compile_requires_single_iteration():
    error = _error({"mix_compile_mode": True, "iterations_per_loop": 2},
                   "mix_compile_mode", "iterations_per_loop", "2")
    assert error.value == {"mix_compile_mode": True, "iterations_per_loop": 2}


def test_in_out_pair_requires_mix():
    pair = "[[['Variable', 'Const_1'],['Add']]]"
    config = NpuConfig.from_dict({"in_out_pair": pair, "mix_compile_mode": True})
    assert config.in_out_pairs() == [("Variable", ("Add",)), ("Const_1", ("Add",))]
    # a case of the original's tests
    _error({"in_out_pair": pair}, "in_out_pair", "mix_compile_mode",
           "mix_compile_mode must be true when use in_out_pair.")
    _error({"in_out_pair": pair, "mix_compile_mode": False},
           "mix_compile_mode must be true when use in_out_pair.")
    assert NpuConfig.from_dict({"in_out_pair": ""}).in_out_pairs() is None


@pytest.mark.parametrize("text", ["[['Variable'],['Add']]", "[]"])
def test_in_out_pair_malformed(text):
    # a case of the original's tests
    _error({"in_out_pair": text, "mix_compile_mode": True}, "in_out_pair", repr(text))


@pytest.mark.parametrize("options", [
    {"dynamic_input": True, "dynamic_graph_execute_mode": "lazy_recompile"},
    {"dynamic_input": False, "dynamic_graph_execute_mode": "lazy_recompile",
     "iterations_per_loop": 2},
    {"dynamic_input": True, "dynamic_graph_execute_mode": "dynamic_execute",
     "iterations_per_loop": 2},
])
def test_lazy_recompile_iterations_valid(options):
    NpuConfig.from_dict(options)


def test_lazy_recompile_with_loop_sinking():
    # a case of the original's tests
    _error({"dynamic_input": True, "dynamic_graph_execute_mode": "lazy_recompile",
            "iterations_per_loop": 2},
           "dynamic_input", "dynamic_graph_execute_mode", "iterations_per_loop",
           "iterations_per_loop only support 1 in lazy_recompile mode. Current is:2")


def test_variable_placement_host_requires_mix():
    assert NpuConfig.from_dict({"variable_placement": "Host", "mix_compile_mode": True}) \
        .variable_placement == "Host"
    error = _error({"variable_placement": "Host"}, "variable_placement", "mix_compile_mode",
                   "'Host'")
    assert error.option == "variable_placement + mix_compile_mode"


# ---- dump path ---------------------------------------------------------------------------


@pytest.mark.parametrize("switch", ["enable_dump", "enable_dump_debug"])
def test_dump_requires_dump_path(switch):
    _error({switch: True}, switch, "dump_path", "if use dump function, dump_path must be set.")


@pytest.mark.parametrize("switch", ["enable_dump", "enable_dump_debug"])
def test_dump_path_is_stored_as_realpath(tmp_path, switch):
    real = tmp_path / "dumps"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    config = NpuConfig.from_dict({switch: True, "dump_path": str(link)})
    assert config.dump_path == os.path.realpath(real)
    assert config.to_parameter_map()["dump_path"].s == os.path.realpath(real).encode()
    assert NpuConfig.from_parameter_map(config.to_parameter_map()) == config


def test_dump_path_must_be_a_directory(tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    _error({"enable_dump": True, "dump_path": str(a_file)}, "dump_path", str(a_file),
           "not a directory")
    missing = str(tmp_path / "missing")
    _error({"enable_dump": True, "dump_path": missing}, "dump_path", missing)
    _error({"enable_dump": True, "dump_path": ""}, "dump_path", "not a directory")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root bypasses permission checks")
def test_dump_path_must_be_writable(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        _error({"enable_dump": True, "dump_path": str(locked)}, "dump_path", "read/write")
    finally:
        locked.chmod(0o700)


def test_dump_path_unchecked_without_dump():
    config = NpuConfig.from_dict({"dump_path": "/does/not/exist"})
    assert config.dump_path == "/does/not/exist"


# ---- AOE ---------------------------------------------------------------------------------


def test_aoe_mode_explicit(tmp_path):
    config = NpuConfig.from_dict({"aoe_mode": "2", "work_path": str(tmp_path)})
    assert config.aoe_mode == "2"
    assert config.work_path == os.path.realpath(tmp_path)
    _error({"aoe_mode": "3"}, "aoe_mode", "'3'", "'1', '2' or '4'")


def test_aoe_mode_from_environment(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AOE_MODE", "4")
    config = NpuConfig.from_dict({})
    assert config.aoe_mode == "4"
    assert not config.is_set("aoe_mode")
    assert config.work_path == os.path.realpath(tmp_path)
    assert "aoe_mode" not in config.to_parameter_map()
    assert config.to_node_attrs()["_aoe_mode"] == "4"
    # Without an NpuOptimizer entry the original never reads AOE_MODE.
    assert NpuConfig.from_config_proto(None).aoe_mode is None
    # An explicit empty aoe_mode switches the fallback off.
    assert NpuConfig.from_dict({"aoe_mode": ""}).aoe_mode == ""


def test_aoe_mode_invalid_environment(monkeypatch):
    monkeypatch.setenv("AOE_MODE", "7")
    error = _error({}, "aoe_mode", "'7'", "AOE_MODE")
    assert error.option == "aoe_mode"


def test_aoe_work_path_must_be_a_directory(tmp_path):
    missing = str(tmp_path / "nope")
    _error({"aoe_mode": "1", "work_path": missing}, "work_path", missing)
    # Without AOE the work path is not checked.
    assert NpuConfig.from_dict({"work_path": missing}).work_path == missing


# ---- profiling default -------------------------------------------------------------------


def test_profiling_default_options():
    config = NpuConfig.from_dict({"profiling_mode": True})
    assert json.loads(config.profiling_options) == {
        "output": "./", "training_trace": "on", "task_time": "on", "hccl": "on",
        "aicpu": "on", "aic_metrics": "PipeUtilization", "msproftx": "off"}
    assert config.profiling_options == PROFILING_DEFAULT_OPTIONS
    assert not config.is_set("profiling_options")
    assert "profiling_options" not in config.to_parameter_map()
    assert config.to_node_attrs()["_profiling_options"] == PROFILING_DEFAULT_OPTIONS
    given = NpuConfig.from_dict({"profiling_mode": True, "profiling_options": '{"output":"/p"}'})
    assert given.profiling_options == '{"output":"/p"}'
    assert NpuConfig.from_dict({"profiling_options": ""}).profiling_options == ""


# ---- every validation case of the original's option tests ------------------------------


def _a_file(tmp_path):
    path = tmp_path / "not_a_dir"
    path.write_text("x")
    return str(path)


CASES_35 = [
    # (id, options or callable(tmp_path) -> options, option named in the error, value shown)
    ("aoe_mode=3", {"aoe_mode": "3"}, "aoe_mode", "'3'"),
    ("enable_exception_dump=3", {"enable_exception_dump": 3}, "enable_exception_dump", "3"),
    ("dump_data=x", {"dump_data": "x"}, "dump_data", "'x'"),
    ("precision_mode=x", {"precision_mode": "x"}, "precision_mode", "'x'"),
    ("both precision modes", {"precision_mode": "force_fp16", "precision_mode_v2": "fp16"},
     "precision_mode_v2", "precision_mode_v2=fp16"),
    ("modify_mixlist+force_fp16", {"modify_mixlist": "/m.json", "precision_mode": "force_fp16"},
     "modify_mixlist", "precision_mode=force_fp16"),
    ("variable_use_1g_huge_page=3", {"variable_use_1g_huge_page": 3},
     "variable_use_1g_huge_page", "3"),
    ("jit_compile=yes", {"jit_compile": "yes"}, "jit_compile", "'yes'"),
    ("jit_compile non-string", {"jit_compile": True}, "jit_compile", "str"),
    ("shape_generalization_mode=LOOSE", {"shape_generalization_mode": "LOOSE"},
     "shape_generalization_mode", "'LOOSE'"),
    ("graph_slice=x", {"graph_slice": "x"}, "graph_slice", "'x'"),
    ("export_compile_stat=3", {"export_compile_stat": 3}, "export_compile_stat", "3"),
    ("graph_max_parallel_model_num=0", {"graph_max_parallel_model_num": 0},
     "graph_max_parallel_model_num", "0"),
    ("compile_hybrid_mode=1 node_type 0", {**TRIO, "compile_hybrid_mode": 1},
     "compile_hybrid_mode", "dynamic_node_type"),
    ("compile_hybrid_mode=1 alone", {"compile_hybrid_mode": 1}, "compile_hybrid_mode", "1"),
    ("enable_dump without dump_path", {"enable_dump": True}, "dump_path", "enable_dump"),
    ("dump_path non-dir", lambda tmp: {"enable_dump": True, "dump_path": _a_file(tmp)},
     "dump_path", "not_a_dir"),
    ("dump_step 5-3", {"dump_step": "5-3"}, "dump_step", "'5-3'"),
    ("dump_step a", {"dump_step": "a"}, "dump_step", "'a'"),
    ("dump_step >100 sets", {"dump_step": "|".join(str(i) for i in range(101))},
     "dump_step", "at most 100"),
    ("local_rank_id=8", {"local_rank_id": 8}, "local_rank_id", "8"),
    ("local_device_list=a,b", {"local_device_list": "a,b"}, "local_device_list", "'a'"),
    ("dynamic_graph_execute_mode=x", {"dynamic_graph_execute_mode": "x"},
     "dynamic_graph_execute_mode", "'x'"),
    ("dump_mode=x", {"dump_mode": "x"}, "dump_mode", "'x'"),
    ("graph_run_mode=2", {"graph_run_mode": 2}, "graph_run_mode", "2"),
    ("input_shape=data:1,a", {**TRIO, "input_shape": "data:1,a"}, "input_shape", "'a'"),
    ("dynamic_dims=1,a", {**TRIO, "dynamic_dims": "1,a"}, "dynamic_dims", "'a'"),
    ("dynamic_node_type=2", {**TRIO, "dynamic_node_type": 2}, "dynamic_node_type", "2"),
    ("two of the trio", {"input_shape": "data:-1", "dynamic_dims": "1;2"},
     "dynamic_node_type", "should use together"),
    ("buffer_optimize=x", {"buffer_optimize": "x"}, "buffer_optimize", "'x'"),
    ("compress weight conflict", {"enable_compress_weight": True, "compress_weight_conf": "c"},
     "compress_weight_conf", "compress_weight_conf=c"),
    ("session_device_id=-1", {"session_device_id": -1}, "session_device_id", "-1"),
    ("variable_placement=Cloud", {"variable_placement": "Cloud"}, "variable_placement",
     "'Cloud'"),
    ("op_select_implmode=x", {"op_select_implmode": "x"}, "op_select_implmode", "'x'"),
    ("optypelist alone", {"optypelist_for_implmode": "Pooling"}, "optypelist_for_implmode",
     "op_select_implmode"),
]


@pytest.mark.parametrize("options, option, shown", [c[1:] for c in CASES_35],
                         ids=[c[0] for c in CASES_35])
def test_original_validation_case_errors(tmp_path, options, option, shown):
    if callable(options):
        options = options(tmp_path)
    error = _error(options, option, shown)
    assert option in error.option.split(" + ") or option in str(error)


def test_original_validation_case_jit_compile_wrong_attr_field():
    from tensorflow.core.framework.attr_value_pb2 import AttrValue

    with pytest.raises(NpuConfigError, match=r"'jit_compile'.*\.s field"):
        NpuConfig.from_parameter_map({"jit_compile": AttrValue(b=True)})


def test_original_validation_case_input_fusion_size_clamped():
    with pytest.warns(NpuAdapterWarning, match="input_fusion_size"):
        config = NpuConfig.from_dict({"input_fusion_size": 64 * 1024 * 1024})
    assert config.input_fusion_size == 32 * 1024 * 1024
    with pytest.warns(NpuAdapterWarning, match="clamped to 0"):
        assert NpuConfig.from_dict({"input_fusion_size": -5}).input_fusion_size == 0


# ---- the rules module itself -------------------------------------------------------------


def test_every_rule_has_a_docstring_citing_its_source():
    for rule in rules.RULES:
        # the original's rules cite our page on its options or the original's public
        # documentation by name; rules of our own options name them
        assert rule.__doc__ and any(word in rule.__doc__ for word in (
            "docs/", "documentation", "npu_adapter_")), rule
    assert len(set(rules.RULES)) == len(rules.RULES)


def test_apply_rules_directly_uses_given_environment(tmp_path):
    updates = rules.apply_rules({"work_path": str(tmp_path)}, environ={"AOE_MODE": "1"})
    assert updates == {"aoe_mode": "1", "work_path": os.path.realpath(tmp_path)}
    assert rules.apply_rules({}, environ={}) == {}
