"""Numbers under emulation: bit for bit what a hand-written float16 model computes (force_fp16)
or what float32 TensorFlow computes (must_keep_origin_dtype); the numerics tool finds the op that
overflows and its suggested fix removes the overflow; the CLI writes JSON and HTML."""

import json

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.cli import main
from npu_adapter.precision import find_numeric_issues
from npu_adapter.precision.numerics import compare_values
from npu_adapter.testing.equivalence import run_graph_def

tf1 = tf.compat.v1
_RNG = np.random.RandomState(7)
W1 = (_RNG.randn(3, 3, 3, 4) * 0.5).astype(np.float32)
B1 = _RNG.randn(4).astype(np.float32)
W2 = (_RNG.randn(64, 5) * 0.3).astype(np.float32)
B2 = _RNG.randn(5).astype(np.float32)
X = _RNG.randn(2, 4, 4, 3).astype(np.float32)


def _cnn(dtype):
    """Conv2D → BiasAdd → Relu → Reshape → MatMul → Add, weights as constants of ``dtype``; a
    float16 model casts its input and its output."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 4, 4, 3], name="x")
        h = tf.cast(x, dtype) if dtype != tf.float32 else x
        h = tf.nn.conv2d(h, tf.constant(W1.astype(dtype.as_numpy_dtype)), [1, 1, 1, 1], "SAME",
                         name="conv")
        h = tf.nn.relu(tf.nn.bias_add(h, tf.constant(B1.astype(dtype.as_numpy_dtype))))
        h = tf.reshape(h, [2, 64])
        h = tf.matmul(h, tf.constant(W2.astype(dtype.as_numpy_dtype)), name="mm")
        h = tf.add(h, tf.constant(B2.astype(dtype.as_numpy_dtype)))
        if dtype != tf.float32:
            h = tf.cast(h, tf.float32)
        tf.identity(h, name="out")
    return g.as_graph_def()


def _emulated(options):
    options = dict(options, npu_adapter_emulate_precision="on")
    result = npu_adapter.rewrite(_cnn(tf.float32), options, fetches=["out:0"])
    return run_graph_def(result.graph_def, [result.tensor_map["out:0"]], {"x": X})[0]


def test_force_fp16_equals_a_float16_model_bit_for_bit():
    got = _emulated({"precision_mode": "force_fp16"})
    expected = run_graph_def(_cnn(tf.float16), ["out:0"], {"x": X})[0]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)
    # and it is not the float32 result
    assert not np.array_equal(got, run_graph_def(_cnn(tf.float32), ["out:0"], {"x": X})[0])


def test_must_keep_origin_dtype_equals_float32_bit_for_bit():
    got = _emulated({"precision_mode": "must_keep_origin_dtype"})
    np.testing.assert_array_equal(got, run_graph_def(_cnn(tf.float32), ["out:0"], {"x": X})[0])


def test_bfloat16_mode_equals_a_bfloat16_model():
    got = _emulated({"precision_mode": "allow_mix_precision_bf16"})
    # mixed bf16: every op of this model is white or follows one (Relu/Reshape are white/gray)
    expected = run_graph_def(_cnn(tf.bfloat16), ["out:0"], {"x": X})[0]
    np.testing.assert_array_equal(got, expected)


def test_compare_values_figures():
    ref = np.array([1.0, -2.0, 70000.0], np.float32)
    emu = np.array([1.0, -2.0, np.inf], np.float32)
    figures = compare_values(ref, emu)
    assert figures["nonfinite"] == 1 and figures["reference_over_fp16"] == 1
    # An overflow has no finite error: not the 0 / cosine 1 of the finite rest.
    assert figures["max_abs_error"] == np.inf and figures["max_relative_error"] == np.inf
    assert np.isnan(figures["cosine"])
    drift = compare_values(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
    assert drift["max_relative_error"] == pytest.approx(0.25)
    assert drift["cosine"] == pytest.approx((1 + 5) / (np.sqrt(5) * np.sqrt(7.25)))


def _overflowing():
    """x → MatMul → Exp → Sum (un-normalised) → out: exp overflows float16 for inputs > 11."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [4, 8], name="x")
        w = tf.constant(np.full([8, 16], 0.5, np.float32), name="w")
        mm = tf.matmul(x, w, name="mm")
        ex = tf.exp(mm, name="ex")
        tf.identity(tf.reduce_sum(ex, axis=1, name="sm"), name="out")
    return g.as_graph_def()


XO = np.linspace(0.0, 3.5, 32, dtype=np.float32).reshape(4, 8)  # mm up to 14: exp(14) > 65504


def test_numerics_finds_the_overflowing_op_and_the_fix_removes_it(tmp_path):
    config = {"precision_mode": "allow_mix_precision"}
    report = find_numeric_issues(_overflowing(), config, feeds={"x:0": XO}, fetches=["out:0"])
    assert report.consistent
    assert [i.comparison.tensor for i in report.first_issues] == ["ex:0"]
    first = report.first_issues[0]
    assert first.comparison.status == "overflow" and first.comparison.dtype == "float16"
    assert first.comparison.reason == "white_list"
    # downstream tensors overflow because of it, in topological order
    assert [(i.comparison.tensor, i.first) for i in report.issues] == [
        ("ex:0", True), ("sm:0", False), ("out:0", False)]
    assert first.fix["modify_mixlist"] == {"black-list": {"to-add": ["Exp"]}}
    path = tmp_path / "mixlist.json"
    path.write_text(json.dumps(first.fix["modify_mixlist"]))
    fixed = find_numeric_issues(_overflowing(), dict(config, modify_mixlist=str(path)),
                                feeds={"x:0": XO}, fetches=["out:0"])
    assert fixed.overflows == [] and fixed.consistent
    # the rewritten graph, run as a session would, no longer gives inf either
    result = npu_adapter.rewrite(_overflowing(), dict(config, modify_mixlist=str(path),
                                                      npu_adapter_emulate_precision="on"),
                                 fetches=["out:0"])
    out = run_graph_def(result.graph_def, [result.tensor_map["out:0"]], {"x": XO})[0]
    assert np.isfinite(out).all()


def test_numerics_gray_sum_overflow_in_force_fp16_suggests_keep_dtype():
    small = XO * 0.8   # exp stays below 65504 (e^9.96), the un-normalised sum of 16 does not
    report = find_numeric_issues(_overflowing(), {"precision_mode": "force_fp16"},
                                 feeds={"x:0": small}, fetches=["out:0"])
    assert [i.comparison.tensor for i in report.first_issues] == ["sm:0"]
    fix = report.first_issues[0].fix
    assert fix["option"] == "keep_dtype_scope" and fix["keep_tensors_dtypes"] == ["sm:0"]
    from npu_bridge.estimator.npu import util

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(_overflowing(), name="")
        util.keep_tensors_dtypes(g, fix["keep_tensors_dtypes"])
    fixed = find_numeric_issues(g.as_graph_def(), {"precision_mode": "force_fp16"},
                                feeds={"x:0": small}, fetches=["out:0"])
    assert fixed.overflows == []


def test_numerics_cli_writes_json_and_html(tmp_path, capsys):
    from npu_adapter.graph.serialize import to_bytes

    model = tmp_path / "model.pb"
    model.write_bytes(to_bytes(_overflowing()))
    np.save(tmp_path / "x.npy", XO)
    out = tmp_path / "out"
    code = main(["numerics", str(model), "--feed", f"x:0={tmp_path / 'x.npy'}", "--fetch",
                 "out:0", "--option", "precision_mode=allow_mix_precision", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "first overflow: ex:0" in printed and "black-list" in printed
    data = json.loads((out / "numerics.json").read_text())
    assert data["summary"]["first_issues"] == ["ex:0"]
    ex = next(t for t in data["tensors"] if t["tensor"] == "ex:0")
    inf_count = ex["nonfinite"]
    assert inf_count > 0 and f"{inf_count} of 64 values inf/nan" in printed
    # The overflowing tensor's figures say so: no cosine, an infinite error.
    assert ex["cosine"] is None and ex["max_relative_error"] == "inf"
    page = (out / "numerics.html").read_text()
    assert "<script src" not in page and "ex:0" in page and "First problem" in page
    assert f"{inf_count} of 64 values inf/nan where float32 is finite" in page
    row = page[page.index('<td class="mono">ex:0</td>'):]
    row = row[:row.index("</tr>")]
    assert '>inf</td>' in row and '>–</td>' in row and ">1</td>" not in row
    assert 'table class="sortable"' in page
    # same inputs, same bytes
    main(["numerics", str(model), "--feed", f"x:0={tmp_path / 'x.npy'}", "--fetch", "out:0",
          "--option", "precision_mode=allow_mix_precision", "--out", str(tmp_path / "again")])
    assert (tmp_path / "again" / "numerics.json").read_text() == json.dumps(
        data, indent=1, ensure_ascii=False) + "\n"


def test_numerics_cli_needs_feeds(tmp_path, capsys):
    from npu_adapter.graph.serialize import to_bytes

    model = tmp_path / "model.pb"
    model.write_bytes(to_bytes(_overflowing()))
    code = main(["numerics", str(model), "--fetch", "out:0", "--out", str(tmp_path / "o")])
    assert code == 2 and "--feed" in capsys.readouterr().err


def test_values_float16_rounds_to_zero_are_not_a_drift():
    """1e-11 becomes 0 in float16: a relative error of 1 and a cosine of 0 that mean nothing
    (the error is below float16's smallest step); the scaled-up tensor after it is compared
    as usual."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [4, 8], name="x")
        tiny = tf.multiply(x, 1e-11, name="tiny")
        tf.identity(tf.multiply(tiny, 1e4, name="back"), name="out")
    report = find_numeric_issues(g.as_graph_def(), {"precision_mode": "force_fp16"},
                                 feeds={"x:0": XO + 1.0}, fetches=["out:0"])
    by_tensor = {c.tensor: c for c in report.comparisons}
    assert by_tensor["tiny:0"].max_relative_error == 1.0 and by_tensor["tiny:0"].cosine == 0
    assert by_tensor["tiny:0"].status == "ok"
    # "back" multiplies float16's zeros back: the loss of the values is visible there.
    assert by_tensor["back:0"].status == "drift"
    assert [i.comparison.tensor for i in report.first_issues] == ["back:0"]
