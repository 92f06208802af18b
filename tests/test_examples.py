"""Every example runs as users run it (a fresh interpreter) and matches plain TensorFlow."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs_and_matches_plain_tensorflow(example):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / example)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    verdicts = [line for line in lines if "equals plain TensorFlow bit for bit" in line]
    assert verdicts and all(line.endswith("True") for line in verdicts), proc.stdout
    if example == "infer_from_pb.py":
        # The accuracy means something: a trained model, on images it did not see.
        (line,) = [line for line in lines if line.startswith("Top1 accuracy:")]
        assert float(line.split()[2].rstrip("%")) >= 90 and "held-out" in line, line


def test_examples_use_the_npu_session():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "mix_compile.py")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert "mix_compile_mode: clusters GeOp" in proc.stdout
    assert "in_out_pair, flag true: clusters GeOp2_0 (10 nodes)\n" in proc.stdout
