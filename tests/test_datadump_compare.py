"""dump compare: ours against ours (fp32 vs float16-emulated, an injected error) and ours
against a dump laid out by a device; the JSON, the HTML page and the CLI."""

import importlib
import io
import json
import os
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.cli import main
from npu_adapter.config import NpuConfig
from npu_adapter.datadump import DumpSession, compare_dumps, proto, read_dump_file, scan_dump_tree
from npu_adapter.datadump.compare import compare_arrays
from npu_adapter.datadump.compare_html import render_comparison_html
from npu_adapter.datadump.dtypes import dtype_name_of_array

tf1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def net(variant="golden"):
    """x ─► conv (Conv2D) ─► bias (BiasAdd) ─► act (Relu) ─► flat (Reshape) ─► fc (MatMul)
    ─► scaled (Mul) ─► out (Tanh) ─► total (Sum)

    ``variant``: ``golden``; ``changed`` (scaled multiplies by 0.55 instead of 0.5: one op
    differs); ``half`` (every op computes in float16, as a device would)."""
    dtype = tf.float16 if variant == "half" else tf.float32
    rng = np.random.default_rng(7)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 6, 6, 3], name="x")
        h = tf.cast(x, dtype) if variant == "half" else x
        w = tf.constant(rng.standard_normal((3, 3, 3, 4)).astype(np.float32) / 3, dtype,
                        name="w")
        conv = tf.nn.conv2d(h, w, 1, "SAME", name="net/conv")
        bias = tf.nn.bias_add(conv, tf.constant([0.1, -0.2, 0.3, 0.0], dtype), name="net/bias")
        act = tf.nn.relu(bias, name="net/act")
        flat = tf.reshape(act, [2, 144], name="net/flat")
        fc_w = tf.constant(rng.standard_normal((144, 5)).astype(np.float32) / 12, dtype)
        fc = tf.matmul(flat, fc_w, name="net/fc")
        scaled = tf.multiply(fc, tf.constant(0.55 if variant == "changed" else 0.5, dtype),
                             name="net/scaled")
        out = tf.tanh(scaled, name="net/out")
        tf.reduce_sum(tf.cast(out, tf.float32), name="total")
    return g


def feed(step):
    rng = np.random.default_rng(100 + step)
    return {"x:0": rng.standard_normal((2, 6, 6, 3)).astype(np.float32)}


def dump(tmp_path, name, variant, steps=2):
    directory = tmp_path / name
    directory.mkdir()
    config = NpuConfig(enable_dump=True, dump_path=str(directory), dump_mode="all")
    result = npu_adapter.rewrite(net(variant).as_graph_def(), config, fetches=["total:0"],
                                 feeds=["x:0"])
    with DumpSession.from_config(config, stream=io.StringIO()) as session:
        graph_def = session.instrument(result.graph_def)
        with tf.Graph().as_default():
            tf.import_graph_def(graph_def, name="")
            with tf1.Session() as sess:
                for step in range(steps):
                    sess.run(result.tensor_map["total:0"], feed(step))
    return str(directory)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("compare")
    return {variant: dump(tmp_path, variant, variant) for variant in ("golden", "changed",
                                                                       "half")}


def test_identical_dumps_do_not_diverge(dumps):
    result = compare_dumps(dumps["golden"], dumps["golden"], progress_interval=0)
    assert result.steps == [0, 1]
    assert all(op.status == "ok" for op in result.ops) and len(result.ops) == 2 * 8
    assert all(t.cosine == 1.0 and t.max_abs == 0.0 for op in result.ops for t in op.tensors)
    assert result.first_divergence(0) is None


def test_the_changed_op_is_the_first_divergence(dumps):
    result = compare_dumps(dumps["golden"], dumps["changed"], progress_interval=0)
    for step in (0, 1):
        first = result.first_divergence(step)
        assert (first.op_name, first.op_type) == ("net/scaled", "Mul")
        ops = {op.op_name: op for op in result.ops if op.step == step}
        for upstream in ("net/conv", "net/bias", "net/act", "net/flat", "net/fc"):
            assert ops[upstream].status == "ok", upstream
        assert ops["net/out"].status == "diverged"   # it carries the error on
        # The inputs of the changed op agree; its output is off by 10%.
        scaled = {(t.direction, t.index): t for t in ops["net/scaled"].tensors}
        assert scaled[("input", 0)].max_abs == 0.0
        assert scaled[("output", 0)].max_rel == pytest.approx(0.1, rel=1e-5)
        assert first.order < ops["net/out"].order


def test_float32_against_float16_emulation(dumps):
    strict = compare_dumps(dumps["golden"], dumps["half"], progress_interval=0)
    tensors = [t for op in strict.ops for t in op.tensors]
    net_outputs = [t for op in strict.ops if op.op_name.startswith("net/") for t in op.tensors
                   if t.direction == "output"]
    assert {(t.golden_dtype, t.other_dtype) for t in net_outputs} == {("DT_FLOAT", "DT_FLOAT16")}
    assert all(t.cosine > 0.999 for t in tensors)
    assert all(0 < t.max_abs < 0.01 for t in tensors if t.direction == "output")
    assert strict.first_divergence(0) is not None     # float16 rounding exceeds rtol 1e-3
    loose = compare_dumps(dumps["golden"], dumps["half"], rtol=2e-2, atol=2e-3,
                          progress_interval=0)
    assert loose.first_divergence(0) is None


# ---------------------------------------------------------------------------- an overflow


def overflow_net():
    """x ─► fc1 (MatMul) ─► act1 (Relu) ─► fc2 (MatMul, 900 × 16 inputs: beyond float16's
    65504) ─► scaled (Mul) ─► sig (Sigmoid) ─► total (Sum)"""
    rng = np.random.default_rng(1)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 16], name="x")
        w1 = tf.constant(rng.standard_normal((16, 16)).astype(np.float32))
        act1 = tf.nn.relu(tf.matmul(x, w1, name="fc1"), name="act1")
        fc2 = tf.matmul(act1, tf.constant(np.full((16, 4), 900.0, np.float32)), name="fc2")
        sig = tf.nn.sigmoid(tf.multiply(fc2, 1e-5, name="scaled"), name="sig")
        tf.reduce_sum(sig, name="total")
    return g


def overflow_dump(directory, emulate):
    """One iteration of :func:`overflow_net`; ``emulate``: force_fp16 under precision
    emulation (every device op computes in float16, as the device would)."""
    directory.mkdir()
    options = {"enable_dump": True, "dump_path": str(directory), "dump_mode": "all"}
    if emulate:
        options.update(npu_adapter_emulate_precision="on", precision_mode="force_fp16")
    config = NpuConfig(**options)
    result = npu_adapter.rewrite(overflow_net().as_graph_def(), config, fetches=["total:0"],
                                 feeds=["x:0"])
    x = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32) * 10
    with DumpSession.from_config(config, stream=io.StringIO()) as session:
        graph_def = session.instrument(result.graph_def)
        with tf.Graph().as_default():
            tf.import_graph_def(graph_def, name="")
            with tf1.Session() as sess:
                sess.run(result.tensor_map["total:0"], {"x:0": x})
    return str(directory)


@pytest.fixture(scope="module")
def overflow(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("overflow")
    return overflow_dump(tmp_path / "cpu", False), overflow_dump(tmp_path / "fp16", True)


def test_the_op_whose_output_overflows_is_named_with_its_output_figures(overflow):
    result = compare_dumps(*overflow, progress_interval=0)
    ops = {op.op_name: op for op in result.ops}
    fc2 = ops["fc2"]
    assert result.first_nonfinite(0) is fc2 and result.first_divergence(0) is fc2
    # Its inputs agree within the thresholds: the op itself overflows.
    assert fc2.inputs_agree is True and fc2.status == "nonfinite"
    worst = fc2.worst_tensor
    assert (worst.direction, worst.index, worst.status) == ("output", 0, "nonfinite")
    assert (worst.other_nonfinite, worst.golden_nonfinite, worst.elements) == (8, 0, 8)
    # No figure that reads as a match (cosine 1 and error 0 over no finite value).
    assert worst.cosine is None and worst.max_abs is None and worst.error_ratio is None
    # Upstream ops pass, though the inputs of fc1/act1 differ by float16 rounding.
    assert ops["fc1"].status == ops["act1"].status == "ok"
    # Passing ops stay below the threshold the chart draws, diverging ones reach it.
    for op in result.ops:
        if op.status == "ok":
            assert op.error_ratio < 1, op.op_name
        elif op.status == "diverged":
            assert op.error_ratio >= 1, op.op_name
    summary = result.to_json()["steps"][0]
    assert summary["first_nonfinite"]["op_name"] == "fc2"
    assert summary["first_nonfinite"]["figures"] == \
        "output 0: 8 of 8 values inf/nan (golden 0), 8 differ"
    assert summary["ops_with_new_nonfinite"] >= 1


def test_overflow_in_the_page_and_the_cli(overflow, tmp_path, capsys):
    page = render_comparison_html(compare_dumps(*overflow, progress_interval=0))
    assert ("the first op whose output has inf/nan is <b>fc2</b> (MatMul): output 0: 8 of 8 "
            "values inf/nan (golden 0), 8 differ. Its inputs agree") in page
    # The chart names every op and marks the first divergence in bold red.
    labels = page.split('class="oplabel"')[1:]
    assert [label[label.index(">") + 1:label.index("<")] for label in labels] == [
        "fc1", "act1", "fc2", "scaled", "sig", "total"]
    assert 'font-weight="bold">fc2</text>' in page
    assert page.count('class="pt nonfinite"') == 2     # fc2 and scaled: inf/nan
    # fc2's output row: counts of inf/nan, no cosine 1 / error 0.
    row = page[page.index('id="tensors"'):]
    row = row[row.index("<td>fc2</td>"):]
    row = row[row.index("<td>output 0</td>"):]
    row = row[:row.index("</tr>")]
    assert ">0 / 8</td>" in row and ">inf/nan: 8 of 8 differ</td>" in row
    assert ">1</td>" not in row and ">0</td>" not in row
    assert main(["dump", "compare", *overflow, "--check"]) == 3
    printed = capsys.readouterr().out
    assert ("first diverging op, the first with inf/nan in its output: fc2 (MatMul), output 0: "
            "8 of 8 values inf/nan (golden 0), 8 differ; its inputs agree") in printed


def test_models_are_ordered_by_when_their_result_was_ready(tmp_path):
    """A model's op that needs no input (the read of a weight) may run before every other
    model: the models follow their last dump, not their first."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [4], name="x")
        first = tf.exp(x * 0.5, name="first/exp")
        from tensorflow.core.framework import attr_value_pb2

        from npu_adapter import tf_compat

        with tf_compat.attr_scope({"_without_npu_compile": attr_value_pb2.AttrValue(b=True)}):
            host = tf.abs(first, name="host")
        weight = tf.identity(tf.constant([1.0, 2.0, 3.0, 4.0]), name="second/weight")
        tf.reduce_sum(tf.multiply(host, weight, name="second/mul"), name="second/total")
    directory = tmp_path / "dump"
    directory.mkdir()
    config = NpuConfig(enable_dump=True, dump_path=str(directory), dump_mode="all",
                       mix_compile_mode=True)
    result = npu_adapter.rewrite(g.as_graph_def(), config, fetches=["second/total:0"],
                                 feeds=["x:0"])
    assert len(result.clusters) == 2
    with DumpSession.from_config(config, stream=io.StringIO()) as session:
        graph_def = session.instrument(result.graph_def)
        with tf.Graph().as_default():
            tf.import_graph_def(graph_def, name="")
            with tf1.Session() as sess:
                sess.run(result.tensor_map["second/total:0"], {"x:0": np.ones(4, np.float32)})
    entries = [e for e in scan_dump_tree(str(directory)) if e.kind == "tensor"]
    earliest = min(e.name.timestamp for e in entries)
    (weight,) = [e for e in entries if e.op_name == "second_weight"]
    # As when the weight's read runs first: its file carries the earliest time stamp.
    os.rename(weight.path, weight.path.replace(str(weight.name.timestamp), str(earliest - 1)))
    ops = [op.op_name for op in compare_dumps(str(directory), str(directory),
                                              progress_interval=0).ops]
    assert ops.index("first/exp") < ops.index("second/weight") < ops.index("second/total")


# ---------------------------------------------------------------------------- a device's dump


def _nc1hwc0(nhwc, c0=16):
    n, h, w, c = nhwc.shape
    c1 = -(-c // c0)
    padded = np.zeros((n, h, w, c1 * c0), nhwc.dtype)
    padded[..., :c] = nhwc
    return padded.reshape(n, h, w, c1, c0).transpose(0, 3, 1, 2, 4).copy()


def _fractal_nz(matrix, m0=16, n0=16):
    m, n = matrix.shape
    m1, n1 = -(-m // m0), -(-n // n0)
    padded = np.zeros((m1 * m0, n1 * n0), matrix.dtype)
    padded[:m, :n] = matrix
    return padded.reshape(m1, m0, n1, n0).transpose(2, 0, 1, 3).copy()


def device_dump(source, target, corrupt=None):
    """Rewrite a dump of ours the way a device lays one out: model directory
    ``ge_default_<time>_<n>``, file names without stream id and other task ids, float16
    tensors, 4-D tensors in NC1HWC0 and matrices in FRACTAL_NZ (with ``original_shape``)."""
    for task, entry in enumerate(scan_dump_tree(source)):
        record = read_dump_file(entry.path)
        header = proto.DumpData(op_name=record.op_name, dump_time=record.dump_time)
        payload = []
        for tensor in record.tensors():
            values = tensor.values()
            if values.dtype == np.float32:
                values = values.astype(np.float16)
                if corrupt == record.op_name and tensor.direction == "output":
                    values = (values * 1.5).astype(np.float16)
            fmt = "FORMAT_ND"
            stored = values
            if values.ndim == 4:
                fmt, stored = "FORMAT_NC1HWC0", _nc1hwc0(values)
            elif values.ndim == 2 and values.dtype == np.float16:
                fmt, stored = "FORMAT_FRACTAL_NZ", _fractal_nz(values)
            message = (header.input if tensor.direction == "input" else header.output).add()
            message.data_type = proto.DATA_TYPES[dtype_name_of_array(stored)]
            message.format = proto.FORMATS[fmt]
            message.shape.dim.extend(stored.shape)
            message.original_shape.dim.extend(values.shape)
            message.size = stored.nbytes
            payload.append(np.ascontiguousarray(stored).tobytes())
        serialized = header.SerializeToString()
        directory = os.path.join(target, "20200808163566", "0", "ge_default_20200808163719_121",
                                 "11", str(entry.step))
        os.makedirs(directory, exist_ok=True)
        name = f"{entry.name.op_type}.{entry.op_name}.{100 + 3 * task}.{entry.name.timestamp}"
        with open(os.path.join(directory, name), "wb") as f:
            f.write(struct.pack("<Q", len(serialized)) + serialized + b"".join(payload))
    return target


def test_against_a_dump_laid_out_by_a_device(dumps, tmp_path):
    device = device_dump(dumps["golden"], str(tmp_path / "device"))
    entries = scan_dump_tree(device)
    assert {e.model_name for e in entries} == {"ge_default_20200808163719_121"}
    assert all(e.name.stream_id is None for e in entries)
    formats = {t.format for e in entries for t in read_dump_file(e.path).tensors()}
    assert {"FORMAT_NC1HWC0", "FORMAT_FRACTAL_NZ"} <= formats
    result = compare_dumps(dumps["golden"], device, rtol=2e-2, atol=2e-3, progress_interval=0)
    assert len(result.ops) == 16 and all(op.status == "ok" for op in result.ops)
    shapes = {op.op_name: op.tensors[-1].golden_shape for op in result.ops if op.step == 0}
    assert shapes["net/act"] == (2, 6, 6, 4) and shapes["net/fc"] == (2, 5)
    corrupted = device_dump(dumps["golden"], str(tmp_path / "bad"), corrupt="net/act")
    first = compare_dumps(dumps["golden"], corrupted, rtol=2e-2, atol=2e-3,
                          progress_interval=0).first_divergence(1)
    assert first.op_name == "net/act"


# ---------------------------------------------------------------------------- details


def test_compare_arrays_metrics():
    g = np.array([1.0, -2.0, 0.0, 4.0])
    o = np.array([1.1, -2.0, 0.5, 4.0])
    m = compare_arrays(g, o)
    assert m["max_abs"] == pytest.approx(0.5) and m["max_rel"] == pytest.approx(0.1)
    expected_cos = g @ o / (np.linalg.norm(g) * np.linalg.norm(o))
    assert m["cosine"] == pytest.approx(expected_cos) and m["diverged"]
    zeros = compare_arrays(np.zeros(3), np.zeros(3))
    assert zeros["cosine"] == 1.0 and not zeros["diverged"]
    assert compare_arrays(np.zeros(3), np.ones(3))["cosine"] == 0.0
    nan = compare_arrays(np.array([np.nan, np.inf, 1.0]), np.array([np.nan, np.inf, 1.0]))
    assert nan["nonfinite_mismatch"] == 0 and not nan["diverged"]
    assert (nan["golden_nonfinite"], nan["other_nonfinite"]) == (2, 2)
    bad = compare_arrays(np.array([np.inf, 1.0]), np.array([-np.inf, 1.0]))
    assert bad["nonfinite_mismatch"] == 1 and bad["diverged"]
    # Errors within atol are a match whatever the cosine of near-zero values says.
    tiny = compare_arrays(np.array([1e-11, 2e-11]), np.zeros(2))
    assert tiny["cosine"] == 0.0 and not tiny["diverged"] and tiny["error_ratio"] < 1
    overflow = compare_arrays(np.array([70000.0, 1.0]), np.array([np.inf, 1.0]))
    assert overflow["nonfinite_mismatch"] == 1 and overflow["diverged"]
    assert overflow["cosine"] is None and overflow["max_abs"] is None
    # error_ratio: 1 is the threshold (max abs 0.5 against 1e-5 + 1e-3 × 4).
    assert m["error_ratio"] == pytest.approx(0.5 / (1e-5 + 4e-3))


def test_shape_mismatch_and_missing_ops(dumps, tmp_path):
    other = tmp_path / "other"
    for entry in scan_dump_tree(dumps["golden"]):
        relative = os.path.relpath(entry.path, dumps["golden"])
        target = other / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.op_name == "net_out":
            continue   # missing in the other dump
        content = pathlib.Path(entry.path).read_bytes()
        if entry.op_name == "net_flat":   # claim another shape for the output
            record = read_dump_file(entry.path)
            header = record.header
            header.output[0].shape.ClearField("dim")
            header.output[0].shape.dim.extend([144, 2])
            header.output[0].original_shape.ClearField("dim")
            header.output[0].original_shape.dim.extend([144, 2])
            serialized = header.SerializeToString()
            (length,) = struct.unpack("<Q", content[:8])
            content = struct.pack("<Q", len(serialized)) + serialized + content[8 + length:]
        target.write_bytes(content)
    result = compare_dumps(dumps["golden"], str(other), progress_interval=0)
    first = result.first_divergence(0)
    assert first.op_name == "net/flat" and first.status == "shape mismatch"
    assert result.only_in_golden[0] == ["net_out"] and result.only_in_other[0] == []


def test_json_and_html(dumps, tmp_path):
    result = compare_dumps(dumps["golden"], dumps["changed"], progress_interval=0)
    path = result.write_json(str(tmp_path / "c.json"))
    data = json.loads(pathlib.Path(path).read_text())
    assert data["steps"][0]["first_divergence"]["op_name"] == "net/scaled"
    assert {op["op_name"] for op in data["ops"]} >= {"net/conv", "net/scaled"}
    page = render_comparison_html(result)
    assert page.startswith("<!DOCTYPE html>") and "table class=\"sortable\"" in page
    assert "<svg" in page and 'font-weight="bold">net/scaled</text>' in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_compare_needs_tensor_dumps(tmp_path):
    from npu_adapter.datadump.reader import DumpFormatError

    (tmp_path / "empty").mkdir()
    with pytest.raises(DumpFormatError, match="no tensor dump files"):
        compare_dumps(str(tmp_path / "empty"), str(tmp_path / "empty"))


# ---------------------------------------------------------------------------- CLI


def test_cli_show(dumps, capsys):
    assert main(["dump", "show", dumps["golden"]]) == 0
    out = capsys.readouterr().out
    assert "16 dump files, 2 iteration(s), 1 model(s)" in out
    assert "Conv2D net/conv" in out and "output 0: FLOAT[2x6x6x4] ND" in out
    assert main(["dump", "show", dumps["golden"], "--json", "--step", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["files"] == 8 and {g["step"] for g in data["iterations"]} == {1}


def test_cli_compare(dumps, tmp_path, capsys):
    out_dir = tmp_path / "report"
    code = main(["dump", "compare", dumps["golden"], dumps["changed"], "--out", str(out_dir),
                 "--check"])
    assert code == 3
    out = capsys.readouterr().out
    assert "iteration 0: 8 ops compared, 3 diverged\n  first diverging op: net/scaled (Mul), " \
        "output 0: cosine 1, max abs error" in out
    assert sorted(os.listdir(out_dir)) == ["comparison.html", "comparison.json"]
    assert main(["dump", "compare", dumps["golden"], dumps["golden"], "--check"]) == 0
    assert main(["dump", "compare", str(tmp_path / "missing"), dumps["golden"]]) == 2
    (tmp_path / "afile").write_text("x")
    assert main(["dump", "compare", dumps["golden"], dumps["golden"], "--out",
                 str(tmp_path / "afile")]) == 2
    assert "a directory" in capsys.readouterr().err


def test_cli_does_not_import_tensorflow(dumps):
    code = ("import sys; from npu_adapter.cli import main; "
            f"main(['dump', 'compare', {dumps['golden']!r}, {dumps['golden']!r}]); "
            "main(['dump', 'show', " + repr(dumps["golden"]) + "]); "
            "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
    env = dict(os.environ, PYTHONPATH=ROOT, NPU_ADAPTER_PROGRESS_INTERVAL="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ---------------------------------------------------------------------------- real browser


SHOT = importlib.import_module("npu_adapter.report.screenshot")
CHROMIUM = SHOT.find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install "
                                             "chromium)")
def test_comparison_page_in_headless_chromium(dumps, tmp_path):
    page = tmp_path / "comparison.html"
    page.write_text(render_comparison_html(compare_dumps(dumps["golden"], dumps["changed"],
                                                         progress_interval=0)))
    png = tmp_path / "comparison.png"
    SHOT.screenshot(str(page), str(png), width=1200, height=1600)
    stats, problems = SHOT.check_png(str(png), ["#f9c5c5"])   # the first divergence's row
    assert problems == [], problems


_SORT_PROBE = """
var th = document.querySelectorAll('#tensors thead th'), out = {};
function column(k) {
  return Array.prototype.map.call(document.querySelectorAll('#tensors tbody tr'),
    function (tr) { var c = tr.cells[k]; var v = c.getAttribute('data-k');
                    return v === null ? c.textContent : v; });
}
th[2].click(); out.op = column(2);
th[12].click(); out.ratio = column(12);
th[12].click(); out.ratio_desc = column(12);
return out;
"""


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
def test_comparison_tables_sort_in_headless_chromium(dumps, tmp_path):
    page = tmp_path / "comparison.html"
    result = compare_dumps(dumps["golden"], dumps["changed"], progress_interval=0)
    page.write_text(render_comparison_html(result))
    got = SHOT.probe(str(page), _SORT_PROBE)
    names = [op.op_name for op in result.ops for _ in op.tensors]
    assert got["op"] == sorted(names)   # "net/act" … "total"
    ratios, desc = ([float(v) for v in got[k]] for k in ("ratio", "ratio_desc"))
    assert ratios == sorted(ratios) and desc == sorted(ratios, reverse=True)
