"""``npu-adapter doctor`` and ``npu-adapter convert --to om|savedmodel`` (through the fakes).

The ``.om`` files ``convert --to om`` writes are loaded and run with the backend's pyACL layer
on the fake ``acl`` and compared with the original model run by TensorFlow; the SavedModels of
``--to savedmodel`` are loaded with ``tf.saved_model.load`` and must serve the same outputs.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bench import models
from npu_adapter.backends.cann.acl_runtime import AclProcess, OmModel
from npu_adapter.cli import main
from npu_adapter.session import plain_session_class


def _reference(spec, feeds=None):
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(spec.graph_def, name="")
    with plain_session_class()(graph=graph) as sess:
        return sess.run(spec.fetches, feeds or spec.feeds)


def _run_om(acl, path, arrays, dims=None, gear=False):
    with open(path + ".json") as f:
        description = json.load(f)
    model = OmModel(AclProcess.get(acl), path, 0, label=os.path.basename(path),
                    num_inputs=len(description["inputs"]),
                    num_outputs=len(description["outputs"]), gear=gear)
    try:
        return model.execute(arrays, dims)
    finally:
        model.unload()


# ---------------------------------------------------------------------------- doctor
def test_doctor_with_the_fakes(cann_fakes, capsys):
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert f"atc            {cann_fakes.atc} (PATH)" in text
    assert "soc            Ascend310P3 (SOC_VERSION)" in text
    assert "cann backend   ready" in text
    assert main(["doctor", "--json", "--probe-device", "--option", "soc_config=Ascend910B1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ready"] and report["missing"] == []
    assert report["soc"]["value"] == "Ascend910B1"
    assert report["soc"]["source"] == "soc_config option"
    assert report["pyACL (acl)"]["found"] and report["device"]["value"] == "device 0 opens"
    assert report["op list"]["ops"] > 500
    assert cann_fakes.acl.fake.leaks() == {}
    assert cann_fakes.acl.fake.call_names() == ["acl.init", "acl.rt.set_device",
                                                "acl.rt.reset_device", "acl.finalize"]


def test_doctor_reports_what_is_missing(cann_fakes, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SOC_VERSION")
    for key in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        monkeypatch.delenv(key, raising=False)
    code = main(["doctor", "--option", "session_device_id=7", "--probe-device"])
    text = capsys.readouterr().out
    assert code == 2
    assert "atc            MISSING: not on PATH" in text
    assert "soc            MISSING: set the soc_config option or SOC_VERSION" in text
    assert "device         MISSING: acl.rt.set_device(7) returned 107001 " \
           "ACL_ERROR_RT_INVALID_DEVICEID" in text
    assert "NOT READY: missing atc, soc, device" in text
    assert cann_fakes.acl.fake.leaks() == {}


# ---------------------------------------------------------------------------- --to om
@pytest.fixture(scope="module")
def saved_cnn(tmp_path_factory):
    path = tmp_path_factory.mktemp("saved") / "small_cnn"
    return models.saved_model("small_cnn", str(path))


def test_convert_saved_model_to_om_with_gears(cann_fakes, saved_cnn, tmp_path, capsys):
    out = str(tmp_path / "cnn.om")
    code = main(["convert", saved_cnn.saved_model_dir, "--to", "om", "--out", out,
                 "--option", "input_shape=input:-1,32,32,3", "--option", "dynamic_dims=1;4",
                 "--option", "dynamic_node_type=1", "--option", "precision_mode=force_fp16"])
    assert code == 0, capsys.readouterr().err
    flags = cann_fakes.atc_flags()
    assert flags["input_shape"] == "input:-1,32,32,3" and flags["dynamic_dims"] == "1;4"
    assert flags["input_format"] == "ND" and flags["precision_mode"] == "force_fp16"
    assert flags["out_nodes"] == "probabilities:0"
    with open(out + ".json") as f:
        description = json.load(f)
    assert description["signature"] == "serving_default"
    assert description["inputs"] == [{"key": "input", "name": "input", "dtype": "float32",
                                      "shape": [-1, 32, 32, 3]}]
    assert description["outputs"] == [{"key": "probabilities", "tensor": "probabilities:0"}]
    images = saved_cnn.feeds["input:0"]
    for batch in (1, 4):
        value = np.resize(images, (batch,) + images.shape[1:]).astype(np.float32)
        (got,) = _run_om(cann_fakes.acl, out, [value], dims=list(value.shape), gear=True)
        (expected,) = _reference(saved_cnn, {"input:0": value})
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # No scratch directory or ATC file (fusion_result.json) is left next to the model.
    assert sorted(os.listdir(tmp_path)) == ["cann_fakes", "cnn.om", "cnn.om.json"]


@pytest.mark.parametrize("name", ["small_mlp", "bert_tiny"])
def test_convert_frozen_pb_to_om(cann_fakes, tmp_path, name, capsys):
    spec = models.get_model(name)
    pb = tmp_path / f"{name}.pb"
    pb.write_bytes(spec.graph_def.SerializeToString())
    out = str(tmp_path / f"{name}.om")
    shapes = ";".join(f"{t.split(':')[0]}:{','.join(map(str, v.shape))}"
                      for t, v in spec.feeds.items())
    args = ["convert", str(pb), "--to", "om", "--out", out, "--soc-version", "Ascend910B1",
            "--input-shape", shapes, "--fetch", *spec.fetches]
    assert main(args) == 0, capsys.readouterr().err
    assert cann_fakes.atc_flags()["soc_version"] == "Ascend910B1"
    with open(out + ".json") as f:
        description = json.load(f)
    arrays = [spec.feeds[f"{entry['name']}:0"] for entry in description["inputs"]]
    got = _run_om(cann_fakes.acl, out, arrays)
    for g, e in zip(got, _reference(spec)):
        np.testing.assert_array_equal(g, e)


def test_convert_to_om_errors(cann_fakes, tmp_path, capsys, monkeypatch):
    lstm = tmp_path / "lstm.pb"
    lstm.write_bytes(models.get_model("lstm").graph_def.SerializeToString())
    assert main(["convert", str(lstm), "--to", "om", "--out", str(tmp_path / "l.om")]) == 2
    assert "TF v1 control flow" in capsys.readouterr().err
    mlp = tmp_path / "mlp.pb"
    mlp.write_bytes(models.get_model("small_mlp").graph_def.SerializeToString())
    assert main(["convert", str(mlp), "--to", "om", "--out", str(tmp_path / "m.pb")]) == 2
    assert "ending in .om" in capsys.readouterr().err
    monkeypatch.delenv("SOC_VERSION")
    assert main(["convert", str(mlp), "--to", "om", "--out", str(tmp_path / "m.om")]) == 2
    assert "soc_config" in capsys.readouterr().err
    monkeypatch.setenv("FAKE_ATC_FAIL", "internal")
    assert main(["convert", str(mlp), "--to", "om", "--out", str(tmp_path / "m.om"),
                 "--soc-version", "Ascend310"]) == 2
    assert "E19999: Internal Error" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "m.om")


# ---------------------------------------------------------------------------- --to savedmodel
def _serve(path, feeds):
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    keys = sorted(fn.structured_input_signature[1])
    return keys, {k: v.numpy() for k, v in fn(**{k: tf.constant(feeds[k]) for k in keys}).items()}


def test_convert_saved_model_to_savedmodel(saved_cnn, tmp_path, capsys):
    out = str(tmp_path / "served")
    assert main(["convert", saved_cnn.saved_model_dir, "--to", "savedmodel", "--out", out]) == 0
    assert "GeOp1_0" in capsys.readouterr().out
    keys, outputs = _serve(out, {"input": saved_cnn.feeds["input:0"]})
    assert keys == ["input"] and list(outputs) == ["probabilities"]
    (expected,) = _reference(saved_cnn)
    np.testing.assert_array_equal(outputs["probabilities"], expected)
    from npu_adapter.model_io import load_model

    graph_def = load_model(out).graph_def  # plain TensorFlow: servable by TF Serving
    ops = {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function
                                            for n in f.node_def}
    assert "StatefulPartitionedCall" in ops and "PyFunc" not in ops
    assert main(["convert", saved_cnn.saved_model_dir, "--to", "savedmodel", "--out", out]) == 2
    assert "does not exist yet" in capsys.readouterr().err


def test_convert_frozen_pb_to_savedmodel(tmp_path, capsys):
    spec = models.get_model("bert_tiny")
    pb = tmp_path / "bert.pb"
    pb.write_bytes(spec.graph_def.SerializeToString())
    out = str(tmp_path / "served")
    feeds = list(spec.feeds)
    assert main(["convert", str(pb), "--to", "savedmodel", "--out", out,
                 "--fetch", *spec.fetches, "--feed", *feeds]) == 0, capsys.readouterr().err
    keys, outputs = _serve(out, {t.split(":")[0]: v for t, v in spec.feeds.items()})
    assert keys == sorted(t.split(":")[0] for t in feeds)
    for fetch, expected in zip(spec.fetches, _reference(spec)):
        np.testing.assert_array_equal(outputs[fetch.split(":")[0]], expected)
    assert main(["convert", str(pb), "--to", "savedmodel", "--out", str(tmp_path / "x"),
                 "--backend", "cann"]) == 2
    assert "--to om for the Ascend model" in capsys.readouterr().err
