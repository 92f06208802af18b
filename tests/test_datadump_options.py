"""Every dump and profiling option value and its validation; DumpConfig / ProfilingConfig;
options that initialize_system makes process-wide."""

import json
import os
import warnings

import pytest

from npu_adapter.config import NpuConfig
from npu_adapter.config.effects import effect_of
from npu_adapter.datadump.settings import DumpSettings
from npu_adapter.errors import NpuConfigError
from npu_adapter.system_options import (
    on_initialize_system,
    on_shutdown_system,
    system_options,
    with_system_options,
)
from npu_bridge.estimator.npu.npu_config import (
    DumpConfig,
    NPURunConfig,
    ProfilingConfig,
    npu_run_config_options,
)


def dump_config(tmp_path, **options):
    return NpuConfig(enable_dump=True, dump_path=str(tmp_path), **options)


def test_enable_dump_needs_an_existing_dump_path(tmp_path):
    for switch in ("enable_dump", "enable_dump_debug"):
        with pytest.raises(NpuConfigError, match="dump_path must be set"):
            NpuConfig(**{switch: True})
        with pytest.raises(NpuConfigError, match="not a directory"):
            NpuConfig(**{switch: True, "dump_path": str(tmp_path / "missing")})
        (tmp_path / "file").write_text("x")
        with pytest.raises(NpuConfigError, match="not a directory"):
            NpuConfig(**{switch: True, "dump_path": str(tmp_path / "file")})
    os.symlink(tmp_path, tmp_path.parent / f"{tmp_path.name}_link")
    config = dump_config(str(tmp_path.parent / f"{tmp_path.name}_link"))
    assert DumpSettings.from_config(config).dump_path == os.path.realpath(tmp_path)


def test_dump_and_overflow_detection_are_exclusive(tmp_path):
    with pytest.raises(NpuConfigError, match="at most one of enable_dump"):
        NpuConfig(enable_dump=True, enable_dump_debug=True, dump_path=str(tmp_path))


@pytest.mark.parametrize("text, ranges", [
    ("0", ((0, 0),)),
    ("0|5|10-20", ((0, 0), (5, 5), (10, 20))),
    (" 3 | 7-9 ", ((3, 3), (7, 9))),
    ("|".join(str(k) for k in range(100)), tuple((k, k) for k in range(100))),
])
def test_dump_step_valid(tmp_path, text, ranges):
    settings = DumpSettings.from_config(dump_config(tmp_path, dump_step=text))
    assert settings.steps == ranges
    for first, last in ranges:
        assert settings.step_selected(first) and settings.step_selected(last)
    assert not settings.step_selected(10**6)


@pytest.mark.parametrize("text, message", [
    ("a", "'N' or 'N-M'"), ("5-3", "N < M"), ("3-3", "N < M"), ("1||2", "'N' or 'N-M'"),
    ("-1", "'N' or 'N-M'"), ("1 5", "'N' or 'N-M'"), ("1-", "'N' or 'N-M'"),
    ("|".join("1" for _ in range(101)), "at most 100"),
])
def test_dump_step_invalid(tmp_path, text, message):
    with pytest.raises(NpuConfigError, match=message) as info:
        dump_config(tmp_path, dump_step=text)
    assert info.value.option == "dump_step"


def test_no_dump_step_dumps_every_step(tmp_path):
    settings = DumpSettings.from_config(dump_config(tmp_path))
    assert settings.steps == () and all(settings.step_selected(k) for k in (0, 1, 10**9))


@pytest.mark.parametrize("option, valid, invalid", [
    ("dump_mode", ["input", "output", "all"], ["both", "", "ALL"]),
    ("dump_data", ["tensor", "stats"], ["values", "Stats"]),
    ("dump_debug_mode", ["aicore_overflow", "atomic_overflow", "all"], ["overflow", "none"]),
])
def test_choice_options(tmp_path, option, valid, invalid):
    for value in valid:
        settings = DumpSettings.from_config(dump_config(tmp_path, **{option: value}))
        field = {"dump_mode": "mode", "dump_data": "data", "dump_debug_mode": "debug_mode"}
        assert getattr(settings, field[option]) == value
    for value in invalid:
        with pytest.raises(NpuConfigError) as info:
            dump_config(tmp_path, **{option: value})
        assert info.value.option == option and value in repr(info.value.value)


def test_defaults_and_kinds(tmp_path):
    settings = DumpSettings.from_config(dump_config(tmp_path))
    assert (settings.kind, settings.mode, settings.data, settings.debug_mode,
            settings.layer, settings.device_id) == ("dump", "output", "tensor", "all",
                                                    frozenset(), 0)
    assert settings.wants_outputs and not settings.wants_inputs
    overflow = DumpSettings.from_config(NpuConfig(enable_dump_debug=True,
                                                  dump_path=str(tmp_path)))
    assert overflow.kind == "overflow" and overflow.wants_inputs and overflow.wants_outputs
    assert DumpSettings.from_config(NpuConfig(dump_path=str(tmp_path))) is None
    assert DumpSettings.from_config(NpuConfig.from_config_proto(None)) is None


def test_dump_layer_is_a_whitespace_separated_list(tmp_path):
    settings = DumpSettings.from_config(dump_config(tmp_path, dump_layer=" a/b  c\td "))
    assert settings.layer == frozenset({"a/b", "c", "d"})


@pytest.mark.parametrize("value", [0, 1, 2, 3, 4])
def test_op_debug_level_valid(value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # deprecated: use op_debug_config
        assert NpuConfig(op_debug_level=value).op_debug_level == value


@pytest.mark.parametrize("value", [-1, 5, 100])
def test_op_debug_level_invalid(value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NpuConfigError, match=r"an integer in \[0, 4\]"):
            NpuConfig(op_debug_level=value)


@pytest.mark.parametrize("variable, value, message", [
    ("ASCEND_DEVICE_ID", "x", "an integer >= 0"), ("DEVICE_ID", "-1", "an integer >= 0"),
    ("SOURCE_DATE_EPOCH", "yesterday", "seconds since the epoch")])
def test_bad_environment_variables(tmp_path, variable, value, message):
    with pytest.raises(NpuConfigError, match=message):
        DumpSettings.from_config(dump_config(tmp_path), environ={variable: value})


def test_device_id_sources(tmp_path):
    config = dump_config(tmp_path)
    assert DumpSettings.from_config(config, environ={}).device_id == 0
    assert DumpSettings.from_config(config, environ={"DEVICE_ID": "3"}).device_id == 3
    assert DumpSettings.from_config(config, environ={"DEVICE_ID": "3",
                                                     "ASCEND_DEVICE_ID": "1"}).device_id == 1
    with_option = dump_config(tmp_path, session_device_id=6)
    assert DumpSettings.from_config(with_option, environ={"DEVICE_ID": "3"}).device_id == 6


def test_effects_say_the_options_run():
    for name in ("enable_dump", "enable_dump_debug", "dump_path", "dump_step", "dump_mode",
                 "dump_debug_mode", "dump_data", "dump_layer", "profiling_mode",
                 "profiling_options"):
        assert effect_of(name)[0] == "runs", name
    assert effect_of("op_debug_level")[0] == "cann"


# ---------------------------------------------------------------------------- NPURunConfig


@pytest.mark.filterwarnings("ignore:option .* is deprecated")   # NPUEstimator writes them
def test_dump_config_maps_to_the_options(tmp_path):
    run_config = NPURunConfig(dump_config=DumpConfig(
        enable_dump=True, dump_path=str(tmp_path), dump_step="0|2-4", dump_mode="all",
        dump_data="stats", dump_layer="a b"))
    config = NpuConfig.from_dict(npu_run_config_options(run_config))
    settings = DumpSettings.from_config(config)
    assert (settings.kind, settings.steps, settings.mode, settings.data, settings.layer) == (
        "dump", ((0, 0), (2, 4)), "all", "stats", frozenset({"a", "b"}))
    overflow = NpuConfig.from_dict(npu_run_config_options(NPURunConfig(dump_config=DumpConfig(
        enable_dump_debug=True, dump_path=str(tmp_path), dump_debug_mode="atomic_overflow"))))
    assert DumpSettings.from_config(overflow).debug_mode == "atomic_overflow"
    assert DumpSettings.from_config(NpuConfig.from_dict(
        npu_run_config_options(NPURunConfig()))) is None


def test_dump_config_checks_its_values(tmp_path):
    with pytest.raises(ValueError):
        DumpConfig(enable_dump=True, dump_path=str(tmp_path), dump_mode="both")
    with pytest.raises(ValueError):
        DumpConfig(dump_step="3-1")
    both = NPURunConfig(dump_config=DumpConfig(enable_dump=True, enable_dump_debug=True,
                                               dump_path=str(tmp_path)))
    with pytest.raises(NpuConfigError, match="at most one of enable_dump"):
        NpuConfig.from_dict(npu_run_config_options(both))


def test_profiling_config_maps_to_the_options(tmp_path):
    from npu_adapter.profiling.settings import static_profiling_settings

    options = json.dumps({"output": str(tmp_path), "training_trace": "on", "fp_point": "a"})
    config = NpuConfig.from_dict(npu_run_config_options(
        NPURunConfig(profiling_config=ProfilingConfig(True, options))))
    settings = static_profiling_settings(config, environ={})
    assert settings.output == str(tmp_path) and settings.options.fp_point == "a"
    bad = NPURunConfig(profiling_config=ProfilingConfig(True, '{"training_trace": "yes"}'))
    with pytest.raises(NpuConfigError, match="training_trace must be one of on, off"):
        NpuConfig.from_dict(npu_run_config_options(bad))


# ---------------------------------------------------------------------------- initialize_system


def test_initialize_system_options_hold_for_later_sessions(tmp_path):
    init = NpuConfig(enable_dump=True, dump_path=str(tmp_path), dump_step="1",
                     profiling_mode=True, mix_compile_mode=True)
    try:
        on_initialize_system(init)
        assert system_options() == {"enable_dump": True, "dump_path": os.path.realpath(tmp_path),
                                    "dump_step": "1", "profiling_mode": True}
        later = with_system_options(NpuConfig(dump_mode="all"))
        settings = DumpSettings.from_config(later)
        assert settings.steps == ((1, 1),) and settings.mode == "all"
        assert later.profiling_mode is True and not later.mix_compile_mode
        own = with_system_options(NpuConfig(enable_dump=False))
        assert DumpSettings.from_config(own) is None   # its own explicit option wins
    finally:
        on_shutdown_system()
    plain = NpuConfig(dump_mode="all")
    assert with_system_options(plain) is plain
