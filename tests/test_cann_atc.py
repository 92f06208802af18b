"""The cann backend's ATC side: every option → flag row, every ATC failure form.

The flag rows are written out here independently of ``npu_adapter.backends.cann.atc``; the
failure forms run the fake ``atc`` (``tests/fakes/fake_atc.py``), which prints what ATC prints.
"""

import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.backends.cann.atc import (
    OPTION_FLAGS,
    AtcOptions,
    atc_options_from_config,
    build_atc_command,
    format_input_shape,
    parse_atc_failure,
    run_atc,
)
from npu_adapter.backends.cann.errors import AtcError, CannConfigError, CannNotAvailableError
from npu_adapter.backends.cann.toolkit import detect
from npu_adapter.config import NpuConfig
from npu_adapter.config.effects import EFFECTS

FILE_OPTIONS = ("modify_mixlist", "customize_dtypes", "op_precision_mode", "fusion_switch_file",
                "insert_op_file", "op_debug_config")


@pytest.fixture
def option_files(tmp_path):
    files = {}
    for name in FILE_OPTIONS:
        path = tmp_path / f"{name}.cfg"
        # the two precision files are parsed when the options are read: valid content
        path.write_text({"modify_mixlist": "{}\n",
                         "customize_dtypes": "OpType::Relu:InputDtype:float16\n"}.get(name, "x\n"))
        files[name] = str(path)
    (tmp_path / "debug").mkdir()
    (tmp_path / "opcache").mkdir()
    files["debug_dir"] = str(tmp_path / "debug")
    files["op_compiler_cache_dir"] = str(tmp_path / "opcache")
    return files


def flag_rows(files):
    """(options, expected flags): every option the backend passes to ATC, in two configs
    (precision_mode and precision_mode_v2 exclude each other)."""
    common = {
        "op_select_implmode": ("high_precision", "--op_select_implmode=high_precision"),
        "optypelist_for_implmode": ("Pooling,SoftmaxV2",
                                    "--optypelist_for_implmode=Pooling,SoftmaxV2"),
        "customize_dtypes": (files["customize_dtypes"],
                             f"--customize_dtypes={files['customize_dtypes']}"),
        "op_precision_mode": (files["op_precision_mode"],
                              f"--op_precision_mode={files['op_precision_mode']}"),
        "fusion_switch_file": (files["fusion_switch_file"],
                               f"--fusion_switch_file={files['fusion_switch_file']}"),
        "enable_scope_fusion_passes": ("ScopePass1", "--enable_scope_fusion_passes=ScopePass1"),
        "buffer_optimize": ("off_optimize", "--buffer_optimize=off_optimize"),
        "enable_small_channel": (1, "--enable_small_channel=1"),
        "deterministic": (1, "--deterministic=1"),
        "oo_level": ("O1", "--oo_level=O1"),
        "insert_op_file": (files["insert_op_file"], f"--insert_op_conf={files['insert_op_file']}"),
        "aicore_num": ("2", "--aicore_num=2"),
        "atomic_clean_policy": (1, "--atomic_clean_policy=1"),
        "external_weight": (True, "--external_weight=1"),
        "export_compile_stat": (0, "--export_compile_stat=0"),
        "op_debug_level": (1, "--op_debug_level=1"),
        "op_debug_config": (files["op_debug_config"],
                            f"--op_debug_config={files['op_debug_config']}"),
        "debug_dir": (files["debug_dir"], f"--debug_dir={files['debug_dir']}"),
        "op_compiler_cache_mode": ("enable", "--op_compiler_cache_mode=enable"),
        "op_compiler_cache_dir": (files["op_compiler_cache_dir"],
                                  f"--op_compiler_cache_dir={files['op_compiler_cache_dir']}"),
        "soc_config": ("Ascend910B1", "--soc_version=Ascend910B1"),
    }
    first = dict(common, precision_mode=("allow_mix_precision",
                                         "--precision_mode=allow_mix_precision"),
                 modify_mixlist=(files["modify_mixlist"],
                                 f"--modify_mixlist={files['modify_mixlist']}"))
    second = {"precision_mode_v2": ("mixed_float16", "--precision_mode_v2=mixed_float16"),
              "soc_config": ("Ascend310P3", "--soc_version=Ascend310P3")}
    return [first, second]


def _command(options, tmp_path, **kwargs):
    kwargs.setdefault("inputs", [("x", (2, 3))])
    return build_atc_command("atc", str(tmp_path / "m.pb"), str(tmp_path / "m"), options,
                             **kwargs)


def test_every_option_flag_row(option_files, tmp_path):
    covered = set()
    for rows in flag_rows(option_files):
        with warnings.catch_warnings():  # op_select_implmode & co. are deprecated
            warnings.simplefilter("ignore")
            config = NpuConfig.from_dict({k: v for k, (v, _) in rows.items()})
        command = _command(atc_options_from_config(config, environ={}), tmp_path)
        for option, (_, flag) in rows.items():
            assert flag in command, (option, command)
            covered.add(option)
    # The table in the package has no row the test does not know.
    assert {rule.option for rule in OPTION_FLAGS} | {"soc_config"} == covered


def test_unset_options_pass_no_flag(tmp_path):
    command = _command(atc_options_from_config(NpuConfig.from_dict({}), environ={},
                                               soc_version="Ascend310"), tmp_path)
    assert command == ["atc", "--mode=0", "--framework=3", f"--model={tmp_path / 'm.pb'}",
                       f"--output={tmp_path / 'm'}", "--soc_version=Ascend310",
                       "--input_shape=x:2,3"]


def test_environment_flags_and_soc(tmp_path):
    env = {"ENABLE_HF32_EXECUTION": "1", "ASCEND_GLOBAL_LOG_LEVEL": "3",
           "SOC_VERSION": "Ascend910B2"}
    options = atc_options_from_config(NpuConfig.from_dict({}), environ=env)
    command = _command(options, tmp_path)
    assert "--allow_hf32=true" in command and "--log=error" in command
    assert "--soc_version=Ascend910B2" in command
    env["ENABLE_HF32_EXECUTION"] = "0"
    assert "--allow_hf32=false" in _command(atc_options_from_config(
        NpuConfig.from_dict({"soc_config": "Ascend310"}), environ=env), tmp_path)


def test_cluster_flags_gears_out_nodes_keep_dtype(tmp_path):
    options = AtcOptions("Ascend310P3", (("precision_mode", "force_fp16"),))
    command = _command(options, tmp_path, inputs=[("data", (1, 1, 40, -1)), ("label", (1, -1)),
                                                  ("mask", (-1, -1)), ("scalar", ())],
                       gears=[(20, 20, 1, 1), (40, 40, 2, 2)], out_nodes=["out_0:0", "b:1"],
                       keep_dtype_file="/k.cfg")
    assert command[6:] == [
        "--input_shape=data:1,1,40,-1;label:1,-1;mask:-1,-1;scalar:",
        "--input_format=ND", "--dynamic_dims=20,20,1,1;40,40,2,2", "--out_nodes=out_0:0;b:1",
        "--precision_mode=force_fp16", "--keep_dtype=/k.cfg"]
    assert format_input_shape([("a/b", (3,)), ("c", ())]) == "a/b:3;c:"


def test_missing_soc_and_missing_files_are_named(tmp_path):
    options = atc_options_from_config(NpuConfig.from_dict({}), environ={})
    with pytest.raises(CannConfigError, match="soc_config.*SOC_VERSION"):
        _command(options, tmp_path)
    missing = str(tmp_path / "nope.json")
    with pytest.raises(CannConfigError, match="fusion_switch_file.*not a file"):
        atc_options_from_config(NpuConfig.from_dict({"fusion_switch_file": missing}), environ={})


def test_option_effects_match_the_flag_table():
    mapped = {rule.option for rule in OPTION_FLAGS}
    for option, (effect, _) in EFFECTS.items():
        if effect == "cann" and option not in ("soc_config", "session_device_id"):
            assert option in mapped, option
    for option in mapped:
        assert EFFECTS[option][0] in ("cann", "emulated"), option


def test_file_contents_are_part_of_the_key(option_files):
    config = NpuConfig.from_dict({"fusion_switch_file": option_files["fusion_switch_file"]})
    before = atc_options_from_config(config, environ={}).cache_key_parts()
    with open(option_files["fusion_switch_file"], "w") as f:
        f.write("GraphFusionPass:off\n")
    after = atc_options_from_config(config, environ={}).cache_key_parts()
    assert before != after


# ---------------------------------------------------------------------------- failure forms
def test_parse_failure_text():
    output = ("ATC start working now, please wait for a moment.\n"
              "ATC run failed, Please check the detail log, Try 'atc --help' for more "
              "information\n"
              "E10001: Value [x] for parameter [--precision_mode] is invalid.\n"
              "        Solution: Try again with a valid value.\n"
              "E10016: Input parameter [--input_shape]'s opname [y] is not found in model.\n")
    codes, text = parse_atc_failure(output)
    assert codes == ["E10001", "E10016"]
    assert text.startswith("E10001: Value [x]") and "Solution" in text
    assert parse_atc_failure("ATC run success, welcome to the next use.\n") == ([], "")


def _frozen_pb(path, op=None):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        y = tf.nn.relu(x * 2.0, name="y")
        if op == "v1_cond":
            with graph.as_default():
                tf.raw_ops.Switch(data=y, pred=tf.constant(True), name="sw")
        if op == "unknown":
            tf.math.lgamma(y, name="lgamma")  # no ATC plugin in the op list
    with open(path, "wb") as f:
        f.write(graph.as_graph_def().SerializeToString())
    return path


def _run(tmp_path, options=None, **kwargs):
    pb = _frozen_pb(str(tmp_path / "model.pb"), kwargs.pop("op", None))
    extra = kwargs.pop("extra", None)
    toolkit = detect()
    options = options or AtcOptions("Ascend310P3")
    kwargs.setdefault("inputs", [("x", (2, 3))])
    kwargs.setdefault("out_nodes", ["y:0"])
    command = build_atc_command(toolkit.require_atc(), pb, str(tmp_path / "out"), options,
                                **kwargs)
    if extra:
        command += extra
    return run_atc(command, cwd=str(tmp_path), env=toolkit.environment(),
                   om_path=str(tmp_path / "out.om"), what="model 'test'")


FAILURES = [
    ("bad precision value", {"options": AtcOptions("Ascend310P3",
                                                    (("precision_mode", "fp64"),))}, "E10001"),
    ("both precision modes", {"options": AtcOptions("Ascend310P3", (
        ("precision_mode", "force_fp16"), ("precision_mode_v2", "fp16")))}, "E10056"),
    ("mixlist without mixed precision", {"options": AtcOptions("Ascend310P3", (
        ("modify_mixlist", __file__),))}, "E10001"),
    ("optypelist without implmode", {"options": AtcOptions("Ascend310P3", (
        ("optypelist_for_implmode", "Pooling"),))}, "E10001"),
    ("bad log level", {"options": AtcOptions("Ascend310P3", (("log", "loud"),))}, "E10010"),
    ("unknown input", {"inputs": [("nope", (2, 3))]}, "E10016"),
    ("unknown output", {"out_nodes": ["nope:0"]}, "E10016"),
    ("bad input_shape", {"inputs": [], "extra": ["--input_shape=x;2,3"]}, "E10002"),
    ("gear count", {"inputs": [("x", (-1, 3))], "gears": [(1, 2), (3, 4)]}, "E10003"),
    ("one gear", {"inputs": [("x", (-1, 3))], "gears": [(1,)]}, "E10035"),
    ("duplicate gears", {"inputs": [("x", (-1, 3))], "gears": [(1,), (1,)]}, "E10039"),
    ("negative gear", {"inputs": [("x", (-1, 3))], "gears": [(1,), (-2,)]}, "E10038"),
    ("no -1 with gears", {"gears": [(1,), (2,)]}, "E10001"),
    ("too many gears", {"inputs": [("x", (-1, 3))], "gears": [(g,) for g in range(1, 102)]},
     "E10036"),
    ("two dynamic modes", {"inputs": [("x", (-1, 3))], "gears": [(1,), (2,)],
                               "extra": ["--dynamic_batch_size=1,2"]}, "E10009"),
    ("op without plugin", {"op": "unknown"}, "E13010"),
    ("v1 control flow", {"op": "v1_cond"}, "E19999"),
    ("missing keep_dtype file", {"keep_dtype_file": "/no/such/keep.cfg"}, "E10001"),
]


@pytest.mark.parametrize("case", FAILURES, ids=[c[0] for c in FAILURES])
def test_atc_failure_forms(cann_fakes, tmp_path, case):
    _, kwargs, code = case
    with pytest.raises(AtcError) as info:
        _run(tmp_path, **kwargs)
    error = info.value
    assert error.code == code and error.codes[0] == code
    assert error.exit_status == 255
    assert str(error).startswith("atc failed with exit status 255 for model 'test'")
    assert code in str(error) and error.text.startswith(code)
    assert not os.path.exists(tmp_path / "out.om")


def test_atc_success_writes_model_and_scratch_files(cann_fakes, tmp_path):
    output = _run(tmp_path)
    assert "ATC run success, welcome to the next use." in output
    assert (tmp_path / "out.om").is_file()
    assert (tmp_path / "fusion_result.json").is_file()  # ATC writes into its cwd


@pytest.mark.parametrize("mode, status, expect", [
    ("internal", 255, "E19999"),
    ("silent", 255, "no error code printed"),
    ("no_om", 0, "wrote no model"),
    ("crash", -11, "killed by signal 11"),
])
def test_atc_abnormal_endings(cann_fakes, tmp_path, monkeypatch, mode, status, expect):
    monkeypatch.setenv("FAKE_ATC_FAIL", mode)
    with pytest.raises(AtcError, match=expect) as info:
        _run(tmp_path)
    assert info.value.exit_status == status
    assert info.value.code == ("E19999" if mode == "internal" else None)


def test_unknown_flag_fails_as_gflags_does(cann_fakes, tmp_path):
    with pytest.raises(AtcError, match="exit status 1.*unknown command line flag") as info:
        _run(tmp_path, extra=["--no_such_flag=1"])
    assert info.value.code is None


def test_no_atc_is_a_named_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    for key in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        monkeypatch.delenv(key, raising=False)
    toolkit = detect(environ={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    if toolkit.home:  # a default install exists on this machine: nothing to check
        pytest.skip("a CANN toolkit is installed here")
    with pytest.raises(CannNotAvailableError, match="atc.*set_env.sh.*npu-adapter doctor"):
        toolkit.require_atc()


def test_toolkit_home_environment_like_set_env(tmp_path):
    home = tmp_path / "ascend" / "latest"
    (home / "compiler" / "bin").mkdir(parents=True)
    atc = home / "compiler" / "bin" / "atc"
    atc.write_text("#!/bin/sh\n")
    atc.chmod(0o755)
    toolkit = detect(environ={"ASCEND_TOOLKIT_HOME": str(home), "PATH": str(tmp_path),
                              "LD_LIBRARY_PATH": "/x"})
    assert toolkit.atc == str(atc) and toolkit.atc_source.startswith("toolkit home")
    env = toolkit.environment()
    assert env["ASCEND_OPP_PATH"] == str(home / "opp")
    assert env["ASCEND_HOME_PATH"] == str(home) and env["TOOLCHAIN_HOME"] == str(home / "toolkit")
    assert env["PATH"].split(os.pathsep)[:2] == [str(home / "bin"), str(home / "compiler" / "bin")]
    assert env["LD_LIBRARY_PATH"].startswith(str(home / "lib64") + os.pathsep)
    assert env["LD_LIBRARY_PATH"].endswith(os.pathsep + "/x")
    assert env["PYTHONPATH"].startswith(str(home / "python" / "site-packages"))
    # A value the user set is kept.
    toolkit = detect(environ={"ASCEND_TOOLKIT_HOME": str(home), "ASCEND_OPP_PATH": "/my/opp"})
    assert toolkit.environment()["ASCEND_OPP_PATH"] == "/my/opp"


def test_numbers_unaffected_by_flags(cann_fakes, tmp_path):
    """The fake .om runs the .pb it was given: the compiled model computes TensorFlow's
    numbers whatever the flags (the fake does not emulate reduced precision)."""
    _run(tmp_path)
    from fake_om import read_om

    header, graph_bytes = read_om(str(tmp_path / "out.om"))
    assert header["inputs"] == [{"name": "x", "dtype": 1, "shape": [2, 3]}]
    assert header["outputs"] == [{"name": "y", "port": 0}]
    graph_def = tf.compat.v1.GraphDef.FromString(graph_bytes)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    value = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
    from npu_adapter.session import plain_session_class

    with plain_session_class()(graph=graph) as sess:
        out = sess.run("y:0", {"x:0": value})
    np.testing.assert_array_equal(out, np.maximum(value * 2, 0))
