"""`npu-adapter inspect`: outputs, options sources, exit codes and one-line errors."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from google.protobuf import text_format
from graph_cases import mix_cnn_graph

from npu_adapter import cli
from npu_adapter.config import NpuConfig, reset_warn_once

tf1 = tf.compat.v1


@pytest.fixture(autouse=True)
def _clean_state(monkeypatch):
    for name in ("PRINT_MODEL", "DUMP_GE_GRAPH", "DUMP_GRAPH_LEVEL", "AOE_MODE"):
        monkeypatch.delenv(name, raising=False)
    reset_warn_once()
    yield
    reset_warn_once()


def cnn_graph_def():
    return mix_cnn_graph().as_graph_def()


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "cnn.pb"
    path.write_bytes(cnn_graph_def().SerializeToString())
    return str(path)


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def report(out_dir):
    with open(os.path.join(out_dir, "placement.json"), encoding="utf-8") as f:
        return json.load(f)


def test_inspect_writes_the_report(capsys, tmp_path, model):
    out = tmp_path / "out"
    code, stdout, stderr = run(capsys, "inspect", model, "--option", "mix_compile_mode=true",
                               "--out", out)
    assert (code, stderr) == (0, "")
    lines = stdout.splitlines()
    assert lines[0] == str(out / "report.html")
    assert lines[1] == "  nodes: 15 (9 on the device in 2 cluster(s), 6 on the host)"
    assert lines[2] == "  top host reasons: without_npu_compile_scope 5, graph_input 1"
    assert lines[3].endswith(f"files in {out}")
    data = report(out)
    assert data["model"] == "cnn.pb" and data["options"] == {"mix_compile_mode": True}
    assert data["summary"]["clusters"] == 2
    for name in ("report.html", "final.pbtxt", "graph/partition.svg",
                 "tensorboard/after/events.out.tfevents.0.npu-adapter"):
        assert (out / name).is_file(), name


def test_config_json_and_option_override(capsys, tmp_path, model):
    config = tmp_path / "opts.json"
    config.write_text(json.dumps({"mix_compile_mode": True, "iterations_per_loop": 1}))
    code, _, _ = run(capsys, "inspect", model, "--config", config, "--out", tmp_path / "a")
    assert code == 0 and report(tmp_path / "a")["summary"]["clusters"] == 2
    code, _, _ = run(capsys, "inspect", model, "--config", config, "--option",
                     "mix_compile_mode=false", "--out", tmp_path / "b")
    assert code == 0
    data = report(tmp_path / "b")
    assert data["options"]["mix_compile_mode"] is False and data["summary"]["clusters"] == 1


def test_config_proto(capsys, tmp_path, model):
    proto = NpuConfig.from_dict({"mix_compile_mode": True}).to_config_proto()
    path = tmp_path / "session.pbtxt"
    path.write_text(text_format.MessageToString(proto))
    code, _, stderr = run(capsys, "inspect", model, "--config-proto", path, "--out",
                          tmp_path / "o")
    assert (code, stderr) == (0, "")
    assert report(tmp_path / "o")["summary"]["clusters"] == 2


def test_config_proto_without_npu_optimizer_warns(capsys, tmp_path, model):
    path = tmp_path / "plain.pbtxt"
    path.write_text("allow_soft_placement: true\n")
    code, stdout, stderr = run(capsys, "inspect", model, "--config-proto", path, "--out",
                               tmp_path / "o")
    assert code == 0
    assert stderr == (f"npu-adapter: warning: {path} has no custom optimizer named "
                      "'NpuOptimizer': the graph is left as it is, as the original adapter "
                      "does\n")
    assert "  not rewritten: " in stdout
    assert report(tmp_path / "o")["rewritten"] is False


def test_fetch_feed_and_progress(capsys, tmp_path, model):
    code, _, stderr = run(capsys, "inspect", model, "--option", "mix_compile_mode=true",
                          "--fetch", "conv1/relu:0", "--feed", "images:0", "--out",
                          tmp_path / "o", "--progress", "--renderer", "builtin",
                          "--no-tensorboard", "--run-name", "sig")
    assert code == 0
    lines = stderr.splitlines()
    assert all(line.startswith("npu-adapter: [") for line in lines)
    assert "] loading " in lines[0] and lines[-1].endswith("s") and "done in" in lines[-1]
    data = report(tmp_path / "o")
    assert data["fetches"] == ["conv1/relu:0"] and data["feeds"] == ["images:0"]
    assert len(data["nodes"]) == 4
    assert (tmp_path / "o" / "sig").is_dir() and not (tmp_path / "o" / "tensorboard").exists()


def test_no_html_no_drawings_and_timings(capsys, tmp_path, model):
    code, stdout, _ = run(capsys, "inspect", model, "--out", tmp_path / "o", "--no-html",
                          "--no-drawings", "--no-tensorboard", "--timings", "-q")
    assert code == 0 and stdout.splitlines()[0] == str(tmp_path / "o" / "placement.json")
    assert sorted(p for p in os.listdir(tmp_path / "o")) == [
        "final.pbtxt", "graph_1", "placement.json", "timings.json"]
    stages = [entry["stage"] for entry in json.loads((tmp_path / "o" / "timings.json")
                                                     .read_text())]
    assert stages[-1] == "total" and "rewrite" in stages


def test_saved_model_directory(capsys, tmp_path):
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(cnn_graph_def(), name="")
    with tf1.Session(graph=g) as sess:
        builder = tf1.saved_model.Builder(str(tmp_path / "sm"))
        sig = tf1.saved_model.predict_signature_def(
            {"x": g.get_tensor_by_name("images:0")}, {"y": g.get_tensor_by_name("pool:0")})
        builder.add_meta_graph_and_variables(sess, ["serve"],
                                             signature_def_map={"serving_default": sig})
        builder.save()
    code, _, _ = run(capsys, "inspect", tmp_path / "sm", "--out", tmp_path / "o", "-q")
    assert code == 0
    data = report(tmp_path / "o")
    assert data["fetches"] == ["pool:0"] and "probs" not in data["nodes"]


# ------------------------------------------------------------------------------- error paths


def one_line_error(code, stdout, stderr, expected_code=2):
    assert code == expected_code
    assert stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("npu-adapter: error: ")
    assert "Traceback" not in stderr
    return stderr.strip()


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "no such file or directory"),
    (lambda p: p.write_bytes(b"\x0a\xff\xff\xff\xff\x0f junk"), "is not a binary GraphDef"),
    (lambda p: p.write_bytes(b""), "is empty"),
])
def test_bad_model_files(capsys, tmp_path, make, message):
    path = tmp_path / "model.pb"
    make(path)
    error = one_line_error(*run(capsys, "inspect", path, "--out", tmp_path / "o"))
    assert error.startswith(f"npu-adapter: error: {path}: {message}")
    assert not (tmp_path / "o").exists()


def test_corrupt_text_model(capsys, tmp_path):
    path = tmp_path / "model.pbtxt"
    path.write_text('node { name: "a" op: "Const" }\nnode { nme: "b" }\n')
    error = one_line_error(*run(capsys, "inspect", path, "--out", tmp_path / "o"))
    assert f"{path}: is not a text GraphDef" in error and "nme" in error


def test_directory_that_is_not_a_saved_model(capsys, tmp_path):
    error = one_line_error(*run(capsys, "inspect", tmp_path, "--out", tmp_path / "o"))
    assert error.endswith("is a directory but not a SavedModel (no saved_model.pb or "
                          "saved_model.pbtxt inside)")


def test_unknown_option(capsys, tmp_path, model):
    error = one_line_error(*run(capsys, "inspect", model, "--option", "mix_compile_mod=1",
                                "--out", tmp_path / "o"))
    assert "'mix_compile_mod'" in error and "did you mean 'mix_compile_mode'?" in error


def test_bad_option_value_and_syntax(capsys, tmp_path, model):
    error = one_line_error(*run(capsys, "inspect", model, "--option", "mix_compile_mode=maybe",
                                "--out", tmp_path / "o"))
    assert "'mix_compile_mode'" in error and "true, false, 1 or 0" in error
    error = one_line_error(*run(capsys, "inspect", model, "--option", "mix_compile_mode",
                                "--out", tmp_path / "o"))
    assert "--option 'mix_compile_mode': expected KEY=VALUE (no '=' found)" in error
    error = one_line_error(*run(capsys, "inspect", model, "--option", "precision_mode=fast",
                                "--out", tmp_path / "o"))
    assert "'precision_mode'" in error


def test_unknown_option_in_config_files(capsys, tmp_path, model):
    config = tmp_path / "c.json"
    config.write_text('{"mix_compile_mode": true, "iteration_per_loop": 2}')
    error = one_line_error(*run(capsys, "inspect", model, "--config", config, "--out",
                                tmp_path / "o"))
    assert "'iteration_per_loop'" in error and f"in {config}" in error
    assert "did you mean 'iterations_per_loop'?" in error
    proto = tmp_path / "c.pbtxt"
    proto.write_text('graph_options { rewrite_options { custom_optimizers { name: "NpuOptimizer"'
                     ' parameter_map { key: "mix_compile_modes" value { b: true } } } } }')
    error = one_line_error(*run(capsys, "inspect", model, "--config-proto", proto, "--out",
                                tmp_path / "o"))
    assert "'mix_compile_modes'" in error and f"in {proto}" in error


@pytest.mark.parametrize("text, detail", [
    ("{not json", "line 1 column 2"),
    ("[1, 2]", "the file holds a JSON list"),
])
def test_bad_config_json(capsys, tmp_path, model, text, detail):
    config = tmp_path / "c.json"
    config.write_text(text)
    error = one_line_error(*run(capsys, "inspect", model, "--config", config, "--out",
                                tmp_path / "o"))
    assert "'--config'" in error and detail in error


def test_missing_config_files(capsys, tmp_path, model):
    for flag in ("--config", "--config-proto"):
        error = one_line_error(*run(capsys, "inspect", model, flag, tmp_path / "none",
                                    "--out", tmp_path / "o"))
        assert f"'{flag}'" in error and "a readable UTF-8 file" in error


def test_bad_config_proto_text(capsys, tmp_path, model):
    proto = tmp_path / "c.pbtxt"
    proto.write_text("graph_options { bogus: 1 }")
    error = one_line_error(*run(capsys, "inspect", model, "--config-proto", proto, "--out",
                                tmp_path / "o"))
    assert "'--config-proto'" in error and "bogus" in error


def test_unknown_fetch_and_feed(capsys, tmp_path, model):
    error = one_line_error(*run(capsys, "inspect", model, "--fetch", "logits:0", "--out",
                                tmp_path / "o"))
    assert error == "npu-adapter: error: fetch 'logits:0': the graph has no node named 'logits'"
    error = one_line_error(*run(capsys, "inspect", model, "--fetch", "probs:3", "--out",
                                tmp_path / "o"))
    assert "valid ports are 0..0" in error
    error = one_line_error(*run(capsys, "inspect", model, "--fetch", "probs:0", "--feed", "x:0",
                                "--out", tmp_path / "o"))
    assert "feed 'x:0'" in error


def test_unknown_backend(capsys, tmp_path, model):
    error = one_line_error(*run(capsys, "inspect", model, "--backend", "tpu", "--out",
                                tmp_path / "o"))
    assert "'tpu'" in error


def test_out_is_a_file(capsys, tmp_path, model):
    target = tmp_path / "file.txt"
    target.write_text("x")
    error = one_line_error(*run(capsys, "inspect", model, "--out", target))
    assert "'--out'" in error and "a file of that name exists" in error


def test_usage_errors(capsys, tmp_path, model):
    code, _, stderr = run(capsys, "inspect", model)
    assert code == 2 and "the following arguments are required: --out" in stderr
    code, _, stderr = run(capsys, "inspect", model, "--out", tmp_path, "--config", "a.json",
                          "--config-proto", "b.pbtxt")
    assert code == 2 and "not allowed with argument" in stderr


def test_verbose_shows_the_traceback(capsys, tmp_path):
    code, _, stderr = run(capsys, "inspect", tmp_path / "none.pb", "--out", tmp_path / "o",
                          "--verbose")
    assert code == 2 and "Traceback" in stderr and "ModelFileError" in stderr
    assert stderr.strip().splitlines()[-1].startswith("npu-adapter: error: ")


def test_internal_error_exit_1(capsys, tmp_path, model, monkeypatch):
    import npu_adapter.report

    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(npu_adapter.report, "dump_graphs", broken)
    code, _, stderr = run(capsys, "inspect", model, "--out", tmp_path / "o")
    assert code == 1 and stderr.startswith("npu-adapter: internal error: KeyError")
    assert "Traceback" not in stderr


def test_console_entry_point(tmp_path, model):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-m", "npu_adapter.cli", "inspect", model + "x",
                           "--out", str(tmp_path / "o")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"npu-adapter: error: {model}x: no such file or directory")
    assert "Traceback" not in done.stderr
