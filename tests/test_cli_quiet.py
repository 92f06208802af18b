"""Every command prints only its own lines: TensorFlow's start-up lines (absl, oneDNN, CUDA
probing, CPU features) and its logged errors stay off stderr, in real processes started as a user
starts them; ``launch`` gives its ranks the same set-up. An explicit ``TF_CPP_MIN_LOG_LEVEL``
still wins."""

import os
import re
import subprocess
import sys

import pytest
from cli_cases import image_batch, image_model

# What a user's shell has: no TF_CPP_MIN_LOG_LEVEL, oneDNN at TensorFlow's default (on).
USER_ENV = {k: v for k, v in os.environ.items()
            if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
RANK_SCRIPT = """\
import os
import tensorflow as tf
print("rank", os.environ["RANK_ID"], "sum", int(tf.reduce_sum(tf.ones([3]))))
"""
INFO_LINE = re.compile(r"^(\[\d+\] )?(I\d{4} |\d{4}-\d\d-\d\d [\d:.]+: I )", re.M)


def _cli(cwd, *argv, env=None):
    return subprocess.run([sys.executable, "-m", "npu_adapter.cli", *map(str, argv)], cwd=cwd,
                          env=dict(USER_ENV, **(env or {})), capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("quiet")
    (root / "rank.py").write_text(RANK_SCRIPT)
    return {"model": image_model(root), "batch": image_batch(root), "root": root}


COMMANDS = {
    "options --check": (["options", "--check", "mix_compile_mode=true"], 0),
    "doctor": (["doctor"], 2),  # no CANN here: the report says what is missing
    "numerics": (["numerics", "{model}", "--feed", "input:0={batch}", "--fetch", "output:0",
                  "--out", "{root}/numerics"], 0),
    "convert --to savedmodel": (["convert", "{model}", "--to", "savedmodel", "--out",
                                 "{root}/served"], 0),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_commands_print_only_their_own_lines(files, name):
    argv, code = COMMANDS[name]
    proc = _cli(files["root"], *(a.format(**files) for a in argv))
    assert (proc.returncode, proc.stderr) == (code, ""), proc.stderr
    assert proc.stdout


def test_convert_to_om_without_atc_prints_one_line(files, tmp_path):
    proc = _cli(files["root"], "convert", files["model"], "--to", "om", "--soc-version",
                "Ascend310P3", "--out", tmp_path / "m.om", env={"PATH": str(tmp_path)})
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and "`atc` is not on PATH" in proc.stderr


def test_launched_ranks_print_only_their_own_lines(files):
    proc = _cli(files["root"], "launch", "-n", "2", "rank.py")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert sorted(proc.stdout.splitlines()) == ["[0] rank 0 sum 3", "[1] rank 1 sum 3"]


def test_an_explicit_log_level_wins(files):
    # 2: TensorFlow's logged errors (the failed cuInit of a machine without a GPU), no
    # start-up lines
    proc = _cli(files["root"], "launch", "-n", "1", "rank.py", env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0
    assert all(re.match(r"\[\d\] (E\d{4} |\d{4}-\d\d-\d\d [\d:.]+: E )", line)
               for line in proc.stderr.splitlines()), proc.stderr
    # 0: everything, start-up lines included
    proc = _cli(files["root"], "doctor", env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert proc.returncode == 2 and INFO_LINE.search(proc.stderr), proc.stderr


def test_main_leaves_no_import_hook_behind(tmp_path):
    """A Python caller of main() that had not imported TensorFlow imports it as usual after."""
    code = ("import sys; from npu_adapter.cli import main; from npu_adapter.cli import quiet; "
            f"main(['dump', 'show', {str(tmp_path)!r}]); "
            "assert 'tensorflow' not in sys.modules; "
            "sys.exit(any(type(f).__module__ == quiet.__name__ for f in sys.meta_path))")
    proc = subprocess.run([sys.executable, "-c", code], env=USER_ENV, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(f"npu-adapter: error: {tmp_path} holds no dump files")
