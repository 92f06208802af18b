"""An option key that is not an option: the Python API warns naming the near miss as the
command line does, and strict mode (``npu_adapter_strict_options=true`` in the parameter_map,
or ``NPU_ADAPTER_STRICT_OPTIONS=1``) makes it the error the command line gives, so a typo cannot
silently change the mode a script runs in (``mix_compile_mod``: full offload instead of mixed)."""

import warnings

import pytest
import tensorflow as tf

from npu_adapter.cli import main
from npu_adapter.config import NpuConfig, reset_warn_once
from npu_adapter.errors import NpuConfigError, UnknownOptionError

tf1 = tf.compat.v1
HINT = "unknown option 'mix_compile_mod' (did you mean 'mix_compile_mode'?)"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("NPU_ADAPTER_STRICT_OPTIONS", raising=False)
    reset_warn_once()
    yield
    reset_warn_once()


def _proto(**options):
    config = tf1.ConfigProto()
    custom = config.graph_options.rewrite_options.custom_optimizers.add()
    custom.name = "NpuOptimizer"
    for key, value in options.items():
        custom.parameter_map[key].b = value
    return config


def _session(graph, config):
    from npu_adapter.session import NpuSession

    return NpuSession(graph=graph, config=config)


def test_the_warning_names_the_near_miss_as_the_command_line_does(capsys):
    assert main(["options", "--check", "mix_compile_mod=true"]) == 2
    cli_error = capsys.readouterr().err
    assert cli_error == f"npu-adapter: error: {HINT}, given with --check\n"
    with pytest.warns(Warning) as caught:
        config = NpuConfig.from_config_proto(_proto(mix_compile_mod=True))
    (message,) = [str(w.message) for w in caught]
    assert message.startswith(f"{HINT} is not an option of the NpuOptimizer and is ignored; ")
    assert "npu_adapter_strict_options=true or NPU_ADAPTER_STRICT_OPTIONS=1" in message
    assert config.mix_compile_mode is False  # the typo leaves the script in full offload


def test_strict_mode_from_the_parameter_map():
    proto = _proto(mix_compile_mod=True, npu_adapter_strict_options=True)
    with pytest.raises(UnknownOptionError) as info:
        NpuConfig.from_config_proto(proto)
    assert str(info.value) == f"{HINT}, an error because npu_adapter_strict_options=true"
    graph = tf.Graph()
    with graph.as_default():
        tf.constant(1.0, name="c")
    with pytest.raises(NpuConfigError, match="did you mean 'mix_compile_mode'"):
        _session(graph, proto)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # known keys only: no warning, no error
        config = NpuConfig.from_config_proto(_proto(mix_compile_mode=True,
                                                    npu_adapter_strict_options=True))
    assert config.mix_compile_mode is True


def test_strict_mode_from_the_environment(monkeypatch):
    monkeypatch.setenv("NPU_ADAPTER_STRICT_OPTIONS", "1")
    with pytest.raises(UnknownOptionError) as info:
        NpuConfig.from_dict({"mix_compile_mod": True})
    assert str(info.value) == f"{HINT}, an error because NPU_ADAPTER_STRICT_OPTIONS=1"
    # the option set to false wins over the environment
    with pytest.warns(Warning, match="did you mean 'mix_compile_mode'"):
        NpuConfig.from_dict({"mix_compile_mod": True, "npu_adapter_strict_options": False})
    monkeypatch.setenv("NPU_ADAPTER_STRICT_OPTIONS", "0")
    reset_warn_once()
    with pytest.warns(Warning, match="did you mean 'mix_compile_mode'"):
        NpuConfig.from_dict({"mix_compile_mod": True})
    monkeypatch.setenv("NPU_ADAPTER_STRICT_OPTIONS", "maybe")
    with pytest.raises(NpuConfigError) as info:
        NpuConfig.from_dict({"mix_compile_mod": True})
    assert str(info.value) == ("invalid value 'maybe' for option 'NPU_ADAPTER_STRICT_OPTIONS': "
                               "1 (unknown option keys are errors) or 0")
