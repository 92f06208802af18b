"""npu_adapter.model_io: .pb, .pbtxt, .meta and SavedModel directories, and their errors."""

import importlib.util
import os

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

from npu_adapter.errors import GraphError, NpuAdapterError
from npu_adapter.model_io import ModelFileError, load_graph_def, load_model
from npu_adapter.testing.equivalence import run_graph_def

tf1 = tf.compat.v1


def _small_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        w = tf.constant(np.ones([3, 2], np.float32), name="w")
        tf.nn.relu(tf.matmul(x, w, name="mm"), name="y")
    return g


def _node_names(graph_def):
    return [n.name for n in graph_def.node]


def test_binary_graph_def(tmp_path):
    graph_def = _small_graph().as_graph_def()
    path = tmp_path / "frozen.pb"
    path.write_bytes(graph_def.SerializeToString())
    model = load_model(path)
    assert model.kind == "graph_def"
    assert model.graph_def == graph_def
    assert model.fetches == [] and model.feeds == [] and model.signature is None
    assert model.name == "frozen.pb"
    assert load_graph_def(str(path)) == graph_def


def test_text_graph_def(tmp_path):
    graph_def = _small_graph().as_graph_def()
    path = tmp_path / "graph.pbtxt"
    path.write_text(text_format.MessageToString(graph_def))
    model = load_model(path)
    assert model.kind == "graph_def"
    assert _node_names(model.graph_def) == ["x", "w", "mm", "y"]


def test_text_graph_under_another_suffix_is_recognised(tmp_path):
    path = tmp_path / "graph.model"
    path.write_text(text_format.MessageToString(_small_graph().as_graph_def()))
    assert _node_names(load_model(path).graph_def) == ["x", "w", "mm", "y"]


def test_meta_graph_without_signature(tmp_path):
    g = _small_graph()
    path = tmp_path / "model.ckpt.meta"
    with g.as_default():
        tf1.train.export_meta_graph(filename=str(path), graph=g)
    model = load_model(path)
    assert model.kind == "meta_graph"
    assert _node_names(model.graph_def) == ["x", "w", "mm", "y"]
    assert model.fetches == [] and model.signature is None
    assert model.meta_graph_def is not None


def test_meta_graph_as_text(tmp_path):
    path = tmp_path / "model.meta"
    g = _small_graph()
    with g.as_default():
        tf1.train.export_meta_graph(filename=str(path), graph=g, as_text=True)
    assert load_model(path).kind == "meta_graph"


def _saved_model(tmp_path, signatures=None, tags=("serve",)):
    g = _small_graph()
    export = tmp_path / "saved"
    with tf1.Session(graph=g) as sess:
        builder = tf1.saved_model.Builder(str(export))
        x = g.get_tensor_by_name("x:0")
        y = g.get_tensor_by_name("y:0")
        mm = g.get_tensor_by_name("mm:0")
        if signatures is None:
            signatures = {
                "serving_default": tf1.saved_model.predict_signature_def({"x": x}, {"y": y}),
                "logits": tf1.saved_model.predict_signature_def({"x": x}, {"mm": mm}),
            }
        builder.add_meta_graph_and_variables(sess, list(tags), signature_def_map=signatures)
        builder.save()
    return export


def test_saved_model_directory_uses_serving_default(tmp_path):
    export = _saved_model(tmp_path)
    model = load_model(export)
    assert model.kind == "saved_model"
    assert model.signature == "serving_default"
    assert model.fetches == ["y:0"] and model.feeds == ["x:0"]
    assert sorted(model.signatures) == ["logits", "serving_default"]
    assert model.tags == ["serve"]
    assert model.name == "saved"
    assert {"x", "w", "mm", "y"} <= set(_node_names(model.graph_def))


def test_saved_model_other_signature_and_pb_path(tmp_path):
    export = _saved_model(tmp_path)
    model = load_model(export / "saved_model.pb", signature="logits")
    assert model.fetches == ["mm:0"]


def test_saved_model_first_signature_without_default(tmp_path):
    g_sig = {"b_sig": None, "a_sig": None}
    export = tmp_path / "saved"
    g = _small_graph()
    with tf1.Session(graph=g) as sess:
        builder = tf1.saved_model.Builder(str(export))
        for key in g_sig:
            g_sig[key] = tf1.saved_model.predict_signature_def(
                {"x": g.get_tensor_by_name("x:0")}, {"out": g.get_tensor_by_name(
                    "y:0" if key == "a_sig" else "mm:0")})
        builder.add_meta_graph_and_variables(sess, ["train"], signature_def_map=g_sig)
        builder.save()
    model = load_model(export)
    assert model.signature == "a_sig" and model.fetches == ["y:0"]
    assert model.tags == ["train"]
    assert load_model(export, tags=["train"]).tags == ["train"]


def test_saved_model_errors(tmp_path):
    export = _saved_model(tmp_path)
    with pytest.raises(ModelFileError, match=r"no signature 'nope'; signatures: logits, "
                                             r"serving_default"):
        load_model(export, signature="nope")
    with pytest.raises(ModelFileError, match=r"no MetaGraphDef with tags 'gpu'.*tag sets: serve"):
        load_model(export, tags=["gpu"])


def test_missing_path(tmp_path):
    path = tmp_path / "missing.pb"
    with pytest.raises(ModelFileError, match="missing.pb: no such file or directory") as info:
        load_model(path)
    assert info.value.path == str(path)
    assert isinstance(info.value, GraphError) and isinstance(info.value, NpuAdapterError)


def test_corrupt_binary(tmp_path):
    path = tmp_path / "corrupt.pb"
    path.write_bytes(b"\x0a\xff\xff\xff\xff\x0f garbage \x00\x01")
    with pytest.raises(ModelFileError, match=r"corrupt.pb: is not a binary GraphDef, "
                                             r"MetaGraphDef or SavedModel"):
        load_model(path)


def test_corrupt_text(tmp_path):
    path = tmp_path / "bad.pbtxt"
    path.write_text('node { name: "a" op: "Const" \n bogus_field: 3 }\n')
    with pytest.raises(ModelFileError, match=r"bad.pbtxt: is not a text GraphDef.*2:") as info:
        load_model(path)
    assert "bogus_field" in str(info.value)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.pb"
    path.write_bytes(b"")
    with pytest.raises(ModelFileError, match="empty.pb: is empty; expected .pb"):
        load_model(path)


def test_directory_without_saved_model(tmp_path):
    with pytest.raises(ModelFileError, match="is a directory but not a SavedModel"):
        load_model(tmp_path)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root can read any file")
def test_unreadable_file(tmp_path):  # pragma: no cover - CI runs as root
    path = tmp_path / "secret.pb"
    path.write_bytes(_small_graph().as_graph_def().SerializeToString())
    path.chmod(0)
    with pytest.raises(ModelFileError, match="cannot read"):
        load_model(path)


# ------------------------------------------------------------------ TensorFlow 2 SavedModels


IMAGES = np.random.RandomState(3).rand(2, 8, 8, 3).astype(np.float32)

# Saving rebinds tf.saved_model to a new module object (Keras 3's export does), which would
# drop the TF1 names npu_bridge added to the old one for every later test: the models are
# saved in a process of their own.
_SAVE_MODELS = """
import sys
import numpy as np
import tensorflow as tf

root = sys.argv[1]
images = np.random.RandomState(3).rand(2, 8, 8, 3).astype(np.float32)


def layers(keras):
    # image -> conv (Conv2D) -> lgamma (a Lambda: an op no device runs) -> pool -> probs.
    image = keras.Input((8, 8, 3), name="image")
    x = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(image)
    x = keras.layers.Lambda(lambda t: tf.math.lgamma(t + 1.0), name="lgamma")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(image, keras.layers.Dense(3, activation="softmax", name="probs")(x))


import keras
if int(keras.__version__.split(".")[0]) >= 3:
    model = layers(keras)
    model.export(root + "/keras3", verbose=False)
    np.save(root + "/keras3.npy", model(images).numpy())
import tf_keras
model = layers(tf_keras)
model.save(root + "/tf_keras", save_format="tf")
np.save(root + "/tf_keras.npy", model(images).numpy())
"""


@pytest.fixture(scope="module")
def tf2_saved_models(tmp_path_factory):
    """A Keras 3 ``model.export()`` and a tf_keras ``model.save()`` SavedModel of the same
    layers, with what TensorFlow computes for :data:`IMAGES`."""
    import subprocess
    import sys

    # Not imported here: on TensorFlow 2.15 an imported tf_keras takes over Keras 2.15's
    # optimizer conversion (TensorFlow's own model_to_estimator then fails in later tests).
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("needs tf_keras")
    root = tmp_path_factory.mktemp("tf2_saved")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", _SAVE_MODELS, str(root)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {kind: (root / kind, key, np.load(root / f"{kind}.npy"))
            for kind, key in (("keras3", "output_0"), ("tf_keras", "probs"))
            if (root / f"{kind}.npy").exists()}


@pytest.mark.parametrize("kind", ["keras3", "tf_keras"])
def test_tf2_saved_model_is_inlined_per_op_with_the_signature_names(tf2_saved_models, kind):
    if kind not in tf2_saved_models:
        pytest.skip("Keras 3 is not installed")
    path, output_key, expected = tf2_saved_models[kind]
    model = load_model(path)
    assert model.inlined and model.signature == "serving_default"
    assert model.fetches == [f"{output_key}:0"] and model.feeds == ["image:0"]
    assert model.signature_outputs == {output_key: f"{output_key}:0"}
    ops = {n.op for n in model.graph_def.node}
    assert not ops & {"StatefulPartitionedCall", "PartitionedCall", "VarHandleOp"}
    assert {"Conv2D", "Lgamma", "Mean", "MatMul", "Softmax"} <= ops
    # The same numbers as the SavedModel's own function, bit for bit.
    (got,) = run_graph_def(model.graph_def, model.fetches, {"image:0": IMAGES})
    np.testing.assert_array_equal(got, expected)


def test_tf2_saved_model_placement_is_per_layer(tf2_saved_models, tmp_path, capsys):
    import npu_adapter
    from npu_adapter.cli import main

    path, output_key, expected = tf2_saved_models.get("keras3") or tf2_saved_models["tf_keras"]
    out = npu_adapter.dump_graphs(path, {"mix_compile_mode": True}, tmp_path / "report",
                                  tensorboard=False)
    nodes = out.report["nodes"]

    def placed(op):
        return {(info["device"], info["reason"]) for info in nodes.values() if info["op"] == op}

    assert placed("Conv2D") == placed("MatMul") == {("npu", "supported")}
    assert placed("Lgamma") == {("host", "unsupported_op")}
    clusters = out.report["clusters"]
    assert len(clusters) == 2
    conv = next(n for n, info in nodes.items() if info["op"] == "Conv2D")
    matmul = next(n for n, info in nodes.items() if info["op"] == "MatMul")
    assert nodes[conv]["cluster"] == clusters[0]["name"]
    assert nodes[matmul]["cluster"] == clusters[1]["name"]
    assert [s["op"] for s in clusters[1]["separators"]["inputs"]] == ["Lgamma"]
    assert out.report["fetches"] == [f"{output_key}:0"]
    # convert names the fetch by the signature's output, and the converted graph computes the
    # same numbers.
    pb = tmp_path / "converted.pb"
    assert main(["convert", str(path), "--out", str(pb), "--option",
                 "mix_compile_mode=true"]) == 0
    printed = capsys.readouterr().out
    mapped = printed.split(f"fetch {output_key}:0 -> ")[1].split()[0]
    (got,) = run_graph_def(load_graph_def(pb), [mapped], {"image:0": IMAGES})
    np.testing.assert_array_equal(got, expected)
