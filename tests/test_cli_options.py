"""`npu-adapter options`: listing, JSON, --check, exit codes."""

import json
import subprocess
import sys

import pytest

from npu_adapter import cli
from npu_adapter.config import OPTION_SPECS, OPTIONS_BY_NAME, NpuConfig, reset_warn_once
from npu_adapter.config.effects import effect_of
from npu_adapter.errors import NpuConfigError


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    monkeypatch.delenv("AOE_MODE", raising=False)
    reset_warn_once()
    yield
    reset_warn_once()


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _table_rows(out):
    """name -> the cells of its row (NAME TYPE DEFAULT EFFECT), from the table's text."""
    rows = {}
    pending = None
    for line in out.splitlines()[1:]:
        cells = line.split()
        if pending is not None:  # the row of a long name follows its name's line
            rows[pending] = [pending] + cells
            pending = None
            continue
        if not line or line.startswith((" ", "EFFECT:")) or line.endswith(")") and \
                line.split()[-1].startswith("("):
            continue
        if len(cells) == 1 and cells[0] in OPTIONS_BY_NAME:  # a long name on its own line
            pending = cells[0]
            continue
        rows[cells[0]] = cells
    return rows


def test_options_table_lists_every_option_with_its_effect(capsys):
    code, out, err = run(capsys, "options", "--width", "100")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "DEFAULT", "EFFECT", "DESCRIPTION"]
    rows = _table_rows(out)
    assert set(rows) == set(OPTIONS_BY_NAME)
    assert rows["iterations_per_loop"][:4] == ["iterations_per_loop", "int", "1", "runs"]
    assert rows["precision_mode"][2:4] == ["(unset)", "emulated"]
    assert rows["min_group_size"][3] == "compat"
    assert rows["soc_config"][3] == "cann"
    assert "'lazy_recompile', 'dynamic_execute'" in " ".join(out.split())
    assert "Memory, devices and runtime (memory_runtime)" in out
    assert "deprecated: use set_graph_exec_config" in out
    assert max(len(line) for line in lines) <= 100


@pytest.mark.parametrize("width", [60, 80, 132])
def test_options_table_wraps_to_the_width(capsys, width):
    code, out, _ = run(capsys, "options", "--width", str(width))
    assert code == 0
    long_names = [n for n in OPTIONS_BY_NAME if len(n) > width - 8]
    for line in out.splitlines():
        assert len(line) <= max(width, 70) or line.strip() in long_names, line
    assert set(_table_rows(out)) == set(OPTIONS_BY_NAME)


def test_options_table_follows_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "72")
    _, out, _ = run(capsys, "options")
    assert max(len(line) for line in out.splitlines()) <= 72


def test_options_category_and_effect_filters(capsys):
    code, out, _ = run(capsys, "options", "--category", "npu_adapter")
    assert code == 0
    assert sorted(_table_rows(out)) == sorted(n for n in OPTIONS_BY_NAME
                                              if n.startswith("npu_adapter_"))
    code, out, _ = run(capsys, "options", "--effect", "compat", "--json")
    assert code == 0
    names = {d["name"] for d in json.loads(out)}
    assert names == {n for n in OPTIONS_BY_NAME if effect_of(n)[0] == "compat"}
    assert {"task_index", "min_group_size", "hcom_parallel"} <= names


def test_options_json(capsys):
    code, out, _ = run(capsys, "options", "--json")
    assert code == 0
    described = json.loads(out)
    assert [d["name"] for d in described] == [s.name for s in OPTION_SPECS]
    by_name = {d["name"]: d for d in described}
    assert by_name["jit_compile"]["effect"] == "compat"
    assert by_name["precision_mode"]["effect_note"].startswith("dtype of each device op")
    assert by_name["jit_compile"]["default"] == "auto"
    assert by_name["jit_compile"]["field"] == ".s"
    assert by_name["op_debug_level"]["deprecated"] is True
    assert by_name["npu_adapter_gear_policy"]["ours"] is True
    assert by_name["compile_hybrid_mode"]["default"] is None


def test_check_ok(capsys, tmp_path):
    mixlist = tmp_path / "m.json"
    mixlist.write_text("{}")
    code, out, err = run(capsys, "options", "--check", "mix_compile_mode=true",
                         "iterations_per_loop=1", "precision_mode=allow_mix_precision",
                         f"modify_mixlist={mixlist}")
    assert (code, out, err) == (0, "ok\n", "")


def test_check_json(capsys):
    code, out, _ = run(capsys, "options", "--json", "--check", "use_off_line=0",
                       "iterations_per_loop=4")
    assert code == 0
    assert json.loads(out) == {"ok": True,
                               "options": {"iterations_per_loop": 4, "use_off_line": False}}


@pytest.mark.parametrize("text, expected", [
    ("true", True), ("TRUE", True), ("1", True), ("false", False), ("False", False), ("0", False),
])
def test_bool_literals(text, expected):
    assert cli.parse_option_value(OPTIONS_BY_NAME["mix_compile_mode"], text) is expected


def test_value_literals():
    assert cli.parse_option_value(OPTIONS_BY_NAME["iterations_per_loop"], " 12 ") == 12
    assert cli.parse_option_value(OPTIONS_BY_NAME["soc_config"], " x ") == " x "
    for name, text in (("mix_compile_mode", "yes"), ("iterations_per_loop", "1.5")):
        with pytest.raises(NpuConfigError, match=repr(name)):
            cli.parse_option_value(OPTIONS_BY_NAME[name], text)


@pytest.mark.parametrize("argv, expected", [
    (["mix_compile_mode=1", "iterations_per_loop=2"],
     ["mix_compile_mode", "iterations_per_loop", "must be 1"]),
    (["aoe_mode=3"], ["'aoe_mode'", "'3'"]),
    (["mix_compile_mode=yes"], ["'mix_compile_mode'", "'yes'", "true, false, 1 or 0"]),
    (["iterations_per_loop=abc"], ["'iterations_per_loop'", "'abc'", "an integer"]),
    (["mix_compile=1"], ["'mix_compile'", "did you mean 'mix_compile_mode'"]),
    (["iterations_per_loop"], ["--check 'iterations_per_loop'", "expected KEY=VALUE",
                               "no '=' found"]),
    (["task_index=1", "task_index=2"], ["'task_index'", "once"]),
    (["in_out_pair=[['a'],['b']]", "mix_compile_mode=1"], ["'in_out_pair'", "two bracket"]),
    (["input_shape=data:-1"], ["input_shape", "should use together"]),
])
def test_check_errors_are_one_line_with_exit_2(capsys, argv, expected):
    code, out, err = run(capsys, "options", "--check", *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("npu-adapter: error: ")
    assert "Traceback" not in err
    for text in expected:
        assert text in err, (text, err)


def test_check_reports_warnings(capsys):
    code, out, err = run(capsys, "options", "--check", "dynamic_input=true")
    assert (code, out) == (0, "ok\n")
    assert "npu-adapter: warning: option 'dynamic_input' is deprecated" in err


@pytest.mark.parametrize("argv", [
    ["--verbose", "options", "--check", "aoe_mode=3"],
    ["options", "--check", "aoe_mode=3", "--verbose"],
    ["options", "-v", "--check", "aoe_mode=3"],
])
def test_verbose_prints_traceback(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback" in err and "NpuConfigError" in err
    assert err.rstrip().endswith("'1', '2' or '4'")


def test_unexpected_errors_exit_1_without_traceback(capsys, monkeypatch):
    def boom(options):
        raise RuntimeError("bug")

    monkeypatch.setattr(NpuConfig, "from_dict", boom)
    code, _, err = run(capsys, "options", "--check", "task_index=1")
    assert code == 1
    assert "internal error: RuntimeError: bug" in err and "Traceback" not in err


def test_usage_errors(capsys):
    code, _, err = run(capsys)
    assert code == 2 and "usage: npu-adapter" in err
    code, _, err = run(capsys, "nonsense")
    assert code == 2 and "'nonsense' is not one of options, inspect," in err
    code, _, err = run(capsys, "options", "--category", "nope")
    assert code == 2
    code, _, err = run(capsys, "options", "--check")
    assert code == 2


def test_help_and_version(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "options" in out
    code, out, _ = run(capsys, "options", "--help")
    assert code == 0 and "--check" in out
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("npu-adapter ")


def test_subcommands_are_pluggable(capsys, monkeypatch):
    def add_hello(subparsers):
        parser = subparsers.add_parser("hello")
        parser.set_defaults(handler=lambda args: 7)

    monkeypatch.setattr(cli, "COMMANDS", [*cli.COMMANDS, add_hello])
    assert cli.main(["hello"]) == 7
    assert cli.main(["options", "--check", "task_index=0"]) == 0


def test_module_entry_point_exit_code():
    ok = subprocess.run([sys.executable, "-m", "npu_adapter.cli", "options", "--check",
                         "jit_compile=auto"], capture_output=True, text=True, check=False)
    assert (ok.returncode, ok.stdout) == (0, "ok\n")
    bad = subprocess.run([sys.executable, "-m", "npu_adapter.cli", "options", "--check",
                          "jit_compile=yes"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "'jit_compile'" in bad.stderr


def test_cli_prints_no_tensorflow_start_up_lines(tmp_path):
    """A real process: TensorFlow's C++ start-up lines (CUDA probing, CPU features) are not
    shown, and a successful command prints nothing on stderr."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        tf.nn.relu(x, name="y")
    model = tmp_path / "m.pb"
    model.write_bytes(graph.as_graph_def().SerializeToString())
    env = {k: v for k, v in __import__("os").environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-m", "npu_adapter.cli", "convert", str(model),
                           "--out", str(tmp_path / "o.pb"), "--fetch", "y:0"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
