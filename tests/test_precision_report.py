"""placement.json and report.html under precision emulation: every device op's dtype and why,
a precision section (ops per dtype, casts, ops a modify_mixlist edit changed); nothing new when
emulation is off."""

import json

import numpy as np
import tensorflow as tf

from npu_adapter.cli import main
from npu_adapter.graph.serialize import to_bytes
from npu_adapter.report import dump_graphs

tf1 = tf.compat.v1


def _model():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [4, 8], name="x")
        w = tf.constant(np.ones([8, 16], np.float32), name="w")
        mm = tf.matmul(x, w, name="mm")
        ex = tf.exp(mm, name="ex")
        tf.identity(tf.reduce_sum(ex, axis=1, name="sm"), name="out")
    return g.as_graph_def()


def _dump(tmp_path, options, name="run"):
    return dump_graphs(_model(), options, tmp_path / name, fetches=["out:0"], tensorboard=False,
                       dot=False, renderer="builtin")


def test_placement_report_has_dtype_and_reason_per_device_op(tmp_path):
    mixlist = tmp_path / "mix.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": ["Exp"]}}))
    outcome = _dump(tmp_path, {"precision_mode": "allow_mix_precision",
                               "modify_mixlist": str(mixlist),
                               "npu_adapter_emulate_precision": "on"})
    report = json.loads((tmp_path / "run" / "placement.json").read_text())
    nodes = report["nodes"]
    assert nodes["mm"]["precision"]["dtype"] == "float16"
    assert nodes["mm"]["precision"]["reason"] == "white_list"
    assert nodes["ex"]["precision"]["dtype"] == "float32"
    assert nodes["ex"]["precision"]["list_source"] == "modify_mixlist"
    assert "mix.json:1" in nodes["ex"]["precision"]["detail"]
    assert "precision" not in nodes["x"]          # host node
    section = report["precision"]
    assert section["setting"] == "precision_mode=allow_mix_precision"
    assert section["ops_per_dtype"] == {"float32": 3, "float16": 1}   # ex, sm, out; mm
    assert section["casts"] == 3
    assert [(c["node"], c["before"], c["after"]) for c in section["mixlist_changes"]] == [
        ("ex", "float16", "float32"), ("out", "float16", "float32"),
        ("sm", "float16", "float32")]
    assert {r["reason"] for r in section["by_reason"]} >= {"white_list", "black_list"}
    page = (tmp_path / "run" / "report.html").read_text()
    assert 'id="precision"' in page and "Dtype · why" in page
    assert "Ops a modify_mixlist edit changed" in page
    assert outcome.report == report
    # deterministic: a second dump is byte-identical
    _dump(tmp_path, {"precision_mode": "allow_mix_precision", "modify_mixlist": str(mixlist),
                     "npu_adapter_emulate_precision": "on"}, name="again")
    for name in ("placement.json", "report.html"):
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()


def test_no_precision_section_when_emulation_is_off(tmp_path):
    _dump(tmp_path, {"precision_mode": "allow_mix_precision"})
    report = json.loads((tmp_path / "run" / "placement.json").read_text())
    assert "precision" not in report
    assert all("precision" not in n for n in report["nodes"].values())
    assert 'id="precision"' not in (tmp_path / "run" / "report.html").read_text()


def test_inspect_and_convert_apply_the_mode(tmp_path, capsys):
    model = tmp_path / "m.pb"
    model.write_bytes(to_bytes(_model()))
    assert main(["inspect", str(model), "--fetch", "out:0", "--option",
                 "precision_mode=force_fp16", "--option", "npu_adapter_emulate_precision=on",
                 "--out", str(tmp_path / "i"), "--no-tensorboard", "--no-drawings", "-q"]) == 0
    report = json.loads((tmp_path / "i" / "placement.json").read_text())
    assert report["precision"]["ops_per_dtype"] == {"float16": 4}
    out = tmp_path / "c.pbtxt"
    assert main(["convert", str(model), "--fetch", "out:0", "--option",
                 "precision_mode=force_fp16", "--option", "npu_adapter_emulate_precision=on",
                 "--out", str(out)]) == 0
    assert "DstT" in out.read_text() and "type: DT_HALF" in out.read_text()
