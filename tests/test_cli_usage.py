"""What the CLI says when there is nothing to show, a typo or a missing argument, and what its
progress and summary lines count (issue 33, CLI item 7)."""

import pathlib

import pytest
from cli_cases import dump_tree, image_model, reprs_in, run


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("dumps")
    return {"golden": dump_tree(root, "golden"), "other": dump_tree(root, "other", scale=1.5),
            "root": root}


def _one_error(result):
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert result.out == "" and not reprs_in(result.err)
    return result.err_lines[0].removeprefix("npu-adapter: error: ")


# ---------------------------------------------------------------------------- dump show / compare


def test_dump_show_without_dumps_names_what_is_there(dumps, tmp_path, capsys):
    golden = dumps["golden"]
    assert _one_error(run(capsys, "dump", "show", tmp_path)).startswith(
        f"{tmp_path} holds no dump files (enable_dump writes them under dump_path")
    assert _one_error(run(capsys, "dump", "show", golden, "--step", "7")) == (
        f"--step 7: {golden} has no iteration 7; iterations found: 0, 1")
    assert _one_error(run(capsys, "dump", "show", tmp_path / "missing")) == (
        f"{tmp_path / 'missing'} does not exist")
    result = run(capsys, "dump", "show", golden, "--step", "1")
    assert result.code == 0 and "1 iteration(s)" in result.out


def test_dump_compare_without_common_iterations(dumps, tmp_path, capsys):
    golden, other = dumps["golden"], dumps["other"]
    assert _one_error(run(capsys, "dump", "compare", golden, other, "--step", "7")) == (
        f"--step 7: {golden} has no iteration 7; iterations found: 0, 1")
    assert _one_error(run(capsys, "dump", "compare", golden, tmp_path)).startswith(
        f"{tmp_path} holds no dump files")
    assert _one_error(run(capsys, "dump", "compare", tmp_path / "missing", other)) == (
        f"{tmp_path / 'missing'} does not exist")


# ---------------------------------------------------------------------------- usage errors


@pytest.fixture
def model(tmp_path):
    return image_model(tmp_path)


USAGE = {
    ("inspect", "{model}", "--outt", "{out}"):
        "npu-adapter inspect: error: unrecognized option --outt: did you mean --out? "
        "(see npu-adapter inspect --help)",
    ("inspect", "{model}"):
        "npu-adapter inspect: error: the following arguments are required: --out "
        "(see npu-adapter inspect --help)",
    ("inspct", "{model}", "--out", "{out}"):
        "npu-adapter: error: argument COMMAND: 'inspct' is not one of options, inspect, "
        "convert, numerics, doctor, dump, launch: did you mean inspect? (see npu-adapter --help)",
    ("convert", "{model}", "--out", "{out}.pb", "--to", "omm"):
        "npu-adapter convert: error: argument --to: 'omm' is not one of pb, om, savedmodel: did "
        "you mean om? (see npu-adapter convert --help)",
    ("numerics", "{model}", "--fed", "input:0=x.npy", "--out", "{out}"):
        "npu-adapter numerics: error: unrecognized option --fed: did you mean --feed? "
        "(see npu-adapter numerics --help)",
    ("dump", "show", "{out}", "--stpe", "1"):
        "npu-adapter dump show: error: unrecognized option --stpe: did you mean --step? "
        "(see npu-adapter dump show --help)",
    ("launch", "train.py", "--lr", "0.1"):  # the script's own options are not looked at
        "npu-adapter launch: error: the following arguments are required: -n/--nprocs "
        "(see npu-adapter launch --help)",
    ("options", "--check", "mix_compile_mode=true", "--jsn"):
        "npu-adapter options: error: unrecognized option --jsn: did you mean --json? "
        "(see npu-adapter options --help)",
}


@pytest.mark.parametrize("argv", sorted(USAGE))
def test_usage_errors_are_one_line_with_the_near_miss(tmp_path, model, argv, capsys):
    result = run(capsys, *(a.format(model=model, out=tmp_path / "out") for a in argv))
    assert (result.code, result.err_lines, result.out) == (2, [USAGE[argv]], "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pb"]


def test_abbreviations_still_work(tmp_path, model, capsys):
    result = run(capsys, "inspect", model, "--ou", tmp_path / "out", "--quie")
    assert result.code == 0, result.err


# ---------------------------------------------------------------------------- progress lines


def test_progress_times_count_from_the_command_start(tmp_path):
    """In a real process: the first line comes before TensorFlow is imported, and the last
    says the whole command's time (it said 'done in 0.0 s' after seconds of import and load)."""
    import os
    import re
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-m", "npu_adapter.cli", "inspect",
                           image_model(tmp_path), "--out", tmp_path / "out", "--progress"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = [re.match(r"npu-adapter: \[ *([0-9.]+)s\] (.*)$", line).groups()
             for line in proc.stderr.splitlines()]
    assert lines[0] == ("0.0", "importing TensorFlow")
    assert lines[1][1] == f"loading {tmp_path / 'model.pb'}" and float(lines[1][0]) > 0
    at, last = lines[-1]
    assert last == f"done in {at} s" and [m for _, m in lines].count(last) == 1
    assert float(at) >= max(float(t) for t, _ in lines)


def _files_text(root):
    files = [p for p in root.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return f"{len(files):,} files ({size / 1024:.1f} KiB)" if size >= 1024 else \
        f"{len(files):,} files ({size} B)"


def _step_stats(label_size=0):
    from tensorflow.core.framework import step_stats_pb2

    stats = step_stats_pb2.StepStats()
    node = stats.dev_stats.add(device="/cpu:0").node_stats.add(
        node_name="a", all_start_micros=1, all_end_rel_micros=2, timeline_label="a = Abs(x)")
    node.timeline_label += " " * label_size
    return stats


def test_profiling_progress_counts_the_files_on_disk(tmp_path):
    """The progress line said '6 files (16.4 KiB)' with 14 files on disk: the aggregates and
    the report were not counted."""
    import io
    import json

    import tensorflow as tf

    from npu_adapter.config import NpuConfig
    from npu_adapter.profiling import SessionProfiler

    stream = io.StringIO()
    config = NpuConfig(profiling_mode=True, profiling_options=json.dumps({"output": str(
        tmp_path), "training_trace": "on"}))
    profiler = SessionProfiler(config, environ={}, stream=stream, progress_interval=1e-9)
    for _ in range(3):
        profiler.after_run(tf.compat.v1.RunMetadata(step_stats=_step_stats()))
    profiler.close()
    last = stream.getvalue().splitlines()[-1]
    assert last.startswith(f"npu-adapter: profiling: {_files_text(tmp_path)}, steps 0-2 -> ")


def test_profiling_progress_counts_aged_out_files(tmp_path):
    import io

    from npu_adapter.profiling.options import ProfilingOptions
    from npu_adapter.profiling.profiler import ProfileWriter
    from npu_adapter.profiling.settings import ProfilingSettings
    from npu_adapter.profiling.trace import events_from_step_stats
    from npu_adapter.progress import ProgressLog

    stream = io.StringIO()
    writer = ProfileWriter(ProfilingSettings(ProfilingOptions(output=str(tmp_path),
                                                              storage_limit_mb=0.02),
                                             "test", str(tmp_path)),
                           progress=ProgressLog("profiling", "", 1e-9, stream))
    stats = _step_stats(label_size=6000)
    for step in range(8):
        writer.add_step(step, events_from_step_stats(stats), stats, None)
    writer.flush()
    writer.progress.close()
    assert not (pathlib.Path(writer.raw_dir) / "step_0.step_stats.pb").exists()
    assert f"profiling: {_files_text(tmp_path)}, steps 0-7 (done)" in stream.getvalue()


# ---------------------------------------------------------------------------- doctor


def _doctor_lines(result):
    return {line.split()[0]: line for line in result.out.splitlines()[1:]}


def test_doctor_names_an_unknown_soc_and_the_known_ones(cann_fakes, capsys):
    result = run(capsys, "doctor", "--option", "soc_config=Ascend91OB1")
    assert result.code == 2 and result.err == ""
    soc = _doctor_lines(result)["soc"]
    assert soc.startswith("  soc            INVALID: Ascend91OB1 (soc_config option) is not a "
                          "SoC version CANN knows; did you mean Ascend910B1? known: Ascend310, ")
    assert "Ascend310P3" in soc and "Ascend910_9392" in soc
    assert "NOT READY: invalid soc;" in result.out
    result = run(capsys, "doctor", "--option", "soc_config=Ascend910B1")
    assert result.code == 0 and "Ascend910B1 (soc_config option)" in result.out


def test_the_toolkit_platform_files_are_the_soc_list(cann_fakes, tmp_path, monkeypatch, capsys):
    platform = tmp_path / "toolkit" / "compiler" / "data" / "platform_config"
    platform.mkdir(parents=True)
    for name in ("Ascend310P3", "Ascend950"):
        (platform / f"{name}.ini").write_text("[version]\n")
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path / "toolkit"))
    result = run(capsys, "doctor", "--option", "soc_config=Ascend950")
    assert "Ascend950 (soc_config option)" in _doctor_lines(result)["soc"]
    model = image_model(tmp_path)
    result = run(capsys, "convert", model, "--to", "om", "--soc-version", "Ascend910B1",
                 "--out", tmp_path / "m.om")
    assert _one_error(result) == (
        "invalid value 'Ascend910B1' for option '--soc-version': a SoC version CANN knows "
        f"(known: Ascend310P3, Ascend950 (from {platform}; the Name of `npu-smi info` prefixed "
        "with 'Ascend'))")
    assert not (tmp_path / "m.om").exists()


def test_probe_device_does_not_send_the_user_to_doctor(capsys, monkeypatch):
    import sys

    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setitem(sys.modules, "acl", None)  # no pyACL here (a test may have faked one)
    result = run(capsys, "doctor", "--probe-device", "--option", "soc_config=Ascend310P3")
    device = _doctor_lines(result)["device"]
    assert device.startswith("  device         MISSING: pyACL (`import acl`) cannot be imported")
    assert "doctor" not in device
