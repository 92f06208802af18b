"""``npu-adapter convert``: offline rewrite of a model file, and its error paths."""

import numpy as np
import tensorflow as tf

from npu_adapter.cli import EXIT_INVALID, EXIT_OK, main
from npu_adapter.testing import run_graph_def

tf1 = tf.compat.v1


def _model(tmp_path):
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        tf.nn.relu(tf.matmul(x, np.eye(3, dtype=np.float32)) - 0.5, name="y")
    path = tmp_path / "model.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    return path, g.as_graph_def()


def test_convert_writes_a_runnable_rewritten_graph(tmp_path, capsys):
    path, original = _model(tmp_path)
    out = tmp_path / "rewritten.pb"
    assert main(["convert", str(path), "--out", str(out), "--fetch", "y:0", "--feed", "x:0",
                 "--option", "mix_compile_mode=true"]) == EXIT_OK
    printed = capsys.readouterr().out
    assert "GeOp1_0" in printed and "fetch y:0 -> GeOp1_0:0" in printed
    rewritten = tf1.GraphDef.FromString(out.read_bytes())
    assert any(n.op == "StatefulPartitionedCall" for n in rewritten.node)
    feeds = {"x:0": np.array([[1.0, 0.2, 3.0]], np.float32)}
    (expected,) = run_graph_def(original, ["y:0"], feeds)
    (actual,) = run_graph_def(rewritten, ["GeOp1_0:0"], feeds)
    assert expected.tobytes() == actual.tobytes()


def test_convert_text_output_and_determinism(tmp_path):
    path, _ = _model(tmp_path)
    first, second = tmp_path / "a.pbtxt", tmp_path / "b.pbtxt"
    for out in (first, second):
        assert main(["convert", str(path), "--out", str(out), "--fetch", "y:0"]) == EXIT_OK
    assert first.read_bytes() == second.read_bytes()
    assert b"GeOp1_0" in first.read_bytes()


def test_convert_errors_are_one_line(tmp_path, capsys):
    path, _ = _model(tmp_path)
    cases = [
        ["convert", str(tmp_path / "missing.pb"), "--out", str(tmp_path / "o.pb")],
        ["convert", str(path), "--out", str(tmp_path / "o.txt")],
        ["convert", str(path), "--out", str(tmp_path / "o.pb"), "--option", "nope=1"],
        ["convert", str(path), "--out", str(tmp_path / "o.pb"), "--fetch", "nope:0"],
    ]
    for argv in cases:
        assert main(argv) == EXIT_INVALID
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "o.pb").exists()
