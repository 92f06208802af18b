"""npu_adapter.dump_graphs: the output tree, determinism, inputs, TensorBoard runs, options."""

import json
import os

import pytest
import tensorflow as tf
from graph_cases import mix_cnn_graph
from tensorflow.core.framework import graph_pb2

import npu_adapter
from npu_adapter.errors import NpuConfigError
from npu_adapter.passes import DEFAULT_PIPELINE
from npu_adapter.report.tensorboard import EVENT_FILE_NAME

tf1 = tf.compat.v1

MIX = {"mix_compile_mode": True}
FETCHES = ["probs:0"]
PASSES = DEFAULT_PIPELINE.split(",")
DUMP_VARS = ("PRINT_MODEL", "DUMP_GRAPH_PATH", "NPU_COLLECT_PATH", "DUMP_GE_GRAPH",
             "DUMP_GRAPH_LEVEL")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in DUMP_VARS:
        monkeypatch.delenv(name, raising=False)


def cnn_graph():
    return mix_cnn_graph()


def tree(path):
    found = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                found[os.path.relpath(full, path).replace(os.sep, "/")] = f.read()
    return found


def test_output_tree(tmp_path):
    out = npu_adapter.dump_graphs(cnn_graph().as_graph_def(), MIX, tmp_path, fetches=FETCHES)
    written = sorted(tree(tmp_path))
    assert out.files == written
    top = sorted({name.split("/")[0] for name in written})
    assert top == ["final.pbtxt", "graph", "graph_1", "placement.json", "report.html",
                   "tensorboard"]
    assert [f"graph/{n}" for n in ("GeOp1_0.dot", "GeOp1_0.svg", "GeOp1_1.dot", "GeOp1_1.svg",
                                   "partition.dot", "partition.svg")] == \
        [n for n in written if n.startswith("graph/")]
    assert [n for n in written if n.startswith("tensorboard/")] == [
        f"tensorboard/{run}/{EVENT_FILE_NAME}" for run in ("after", "before", "placement")]
    assert f"graph_1/{len(PASSES) - 1:03d}_{PASSES[-1]}_after.pbtxt" in written
    assert out.pass_dumps and all(os.path.isabs(p) for p in out.pass_dumps)
    assert json.loads((tmp_path / "placement.json").read_text()) == out.report
    assert [c.name for c in out.result.clusters] == ["GeOp1_0", "GeOp1_1"]
    assert out.renderer in ("dot", "builtin")
    assert out.path("report.html") == os.path.join(str(tmp_path), "report.html")
    assert [name for name, _ in out.timings][-1] == "total"


def test_two_runs_give_byte_identical_trees(tmp_path):
    graph_def = cnn_graph().as_graph_def()
    for run in ("a", "b"):
        npu_adapter.dump_graphs(graph_def, MIX, tmp_path / run, fetches=FETCHES)
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert sorted(a) == sorted(b)
    different = [name for name in a if a[name] != b[name]]
    assert different == []
    for name, data in a.items():
        if not name.endswith(EVENT_FILE_NAME):
            text = data.decode("utf-8")
            assert str(tmp_path) not in text, name  # no absolute paths in the files


def test_rerun_removes_stale_files_only(tmp_path):
    graph_def = cnn_graph().as_graph_def()
    (tmp_path / "notes.txt").write_text("mine")
    npu_adapter.dump_graphs(graph_def, MIX, tmp_path, fetches=FETCHES, timings=True)
    assert (tmp_path / "timings.json").exists()
    npu_adapter.dump_graphs(graph_def, {}, tmp_path, fetches=FETCHES, count_level=4)
    written = sorted(tree(tmp_path))
    assert "notes.txt" in written and "timings.json" not in written
    assert [n for n in written if n.startswith("graph_1/")] == [
        f"graph_1/000_{PASSES[0]}_before.pbtxt"]
    assert [n for n in written if n.startswith("graph/")] == ["graph/GeOp1_0.dot",
                                                             "graph/GeOp1_0.svg",
                                                             "graph/partition.dot",
                                                             "graph/partition.svg"]


def test_tensorboard_runs_read_back(tmp_path):
    graph_def = cnn_graph().as_graph_def()
    out = npu_adapter.dump_graphs(graph_def, MIX, tmp_path, fetches=FETCHES, html=False,
                                  dot=False)
    graphs = {}
    for run in ("before", "after", "placement"):
        path = tmp_path / "tensorboard" / run / EVENT_FILE_NAME
        events = list(tf1.train.summary_iterator(str(path)))
        assert events[0].file_version == "brain.Event:2"
        graph = graph_pb2.GraphDef()
        graph.ParseFromString(events[1].graph_def)
        graphs[run] = graph
    assert [n.name for n in graphs["before"].node] == [n.name for n in graph_def.node]
    assert graphs["after"] == out.result.graph_def
    devices = {n.name: n.device for n in graphs["placement"].node}
    assert devices["conv1/conv"] == "/device:NPU:0/GeOp1_0"
    assert devices["host/sqrt"] == "/device:CPU:0"
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "graph").exists()


def test_inputs_graph_meta_graph_and_path(tmp_path):
    g = cnn_graph()
    by_graph = npu_adapter.dump_graphs(g, MIX, tmp_path / "graph", fetches=FETCHES,
                                       tensorboard=False)
    with g.as_default():
        meta = tf1.train.export_meta_graph(graph=g)
    by_meta = npu_adapter.dump_graphs(meta, MIX, tmp_path / "meta", fetches=FETCHES,
                                      tensorboard=False)
    path = tmp_path / "cnn.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    by_path = npu_adapter.dump_graphs(str(path), MIX, tmp_path / "path", fetches=FETCHES,
                                      tensorboard=False)
    assert by_graph.report["nodes"] == by_meta.report["nodes"] == by_path.report["nodes"]
    assert by_path.report["model"] == "cnn.pb" and by_graph.report["model"] is None
    with pytest.raises(TypeError, match="GraphDef, a tf.Graph"):
        npu_adapter.dump_graphs(42, MIX, tmp_path / "bad")


def test_saved_model_signature_gives_the_fetches(tmp_path):
    g = cnn_graph()
    with tf1.Session(graph=g) as sess:
        builder = tf1.saved_model.Builder(str(tmp_path / "saved"))
        sig = tf1.saved_model.predict_signature_def(
            {"images": g.get_tensor_by_name("images:0")},
            {"probs": g.get_tensor_by_name("probs:0")})
        builder.add_meta_graph_and_variables(sess, ["serve"],
                                             signature_def_map={"serving_default": sig})
        builder.save()
    out = npu_adapter.dump_graphs(tmp_path / "saved", MIX, tmp_path / "out", tensorboard=False)
    assert out.report["fetches"] == ["probs:0"] and out.report["feeds"] == ["images:0"]
    assert out.report["model"] == "saved"
    assert len(out.report["nodes"]) == 15


def test_out_dir_from_the_session_option(tmp_path):
    config = {**MIX, "npu_adapter_dump_dir": str(tmp_path / "opt")}
    out = npu_adapter.dump_graphs(cnn_graph(), config, fetches=FETCHES, tensorboard=False)
    assert out.out_dir == str(tmp_path / "opt")
    assert (tmp_path / "opt" / "report.html").exists()
    with pytest.raises(ValueError, match="needs out_dir"):
        npu_adapter.dump_graphs(cnn_graph(), MIX, fetches=FETCHES)


def test_levels_as_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "3")  # the arguments win over the environment
    npu_adapter.dump_graphs(cnn_graph(), MIX, tmp_path, fetches=FETCHES, content_level=2,
                            count_level=3, tensorboard=False, html=False, dot=False)
    written = sorted(tree(tmp_path))
    assert written == ["final.pbtxt", f"graph_1/{len(PASSES) - 1:03d}_{PASSES[-1]}_after.pbtxt",
                       "placement.json"]
    text = (tmp_path / "final.pbtxt").read_text()
    assert "attr {" in text and "tensor_content" not in text
    with pytest.raises(NpuConfigError, match="'content_level'"):
        npu_adapter.dump_graphs(cnn_graph(), MIX, tmp_path, content_level=7)
    with pytest.raises(NpuConfigError, match="'count_level'"):
        npu_adapter.dump_graphs(cnn_graph(), MIX, tmp_path, count_level="x")


def test_run_name_and_progress(tmp_path):
    messages = []
    out = npu_adapter.dump_graphs(cnn_graph(), MIX, tmp_path, fetches=FETCHES,
                                  run_name="../sig 1", progress=messages.append,
                                  tensorboard=False)
    assert os.path.isdir(tmp_path / "_sig_1")
    assert all(os.path.dirname(p) == str(tmp_path / "_sig_1") for p in out.pass_dumps)
    assert messages[0].startswith("rewriting 15 nodes")
    assert any(m.startswith("pass 000 ") for m in messages)
    assert messages[-1].startswith("done in")


def test_print_model_files_come_with_dump_graphs(tmp_path, monkeypatch):
    monkeypatch.setenv("PRINT_MODEL", "1")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path / "compat"))
    npu_adapter.dump_graphs(cnn_graph(), MIX, tmp_path / "out", fetches=FETCHES,
                            tensorboard=False, html=False, dot=False)
    assert sorted(os.listdir(tmp_path / "compat")) == [
        "AfterSubGraph_1.pbtxt", "BeforeSubGraph_1.pbtxt", "TF_GeOp1_0.pbtxt",
        "TF_GeOp1_1.pbtxt"]


SLOW = os.environ.get("NPU_ADAPTER_SLOW_TESTS") == "1"


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="100k-node graph; set NPU_ADAPTER_SLOW_TESTS=1")
@pytest.mark.parametrize("config", [{}, MIX], ids=["default", "mix"])
def test_inspect_a_100k_node_graph(tmp_path, config):
    """Prints the time per stage (measured, not asserted; see the report's figures)."""
    from bench.synthetic import synthetic_graph

    graph = synthetic_graph(100000)
    out = npu_adapter.dump_graphs(graph.graph_def, config, tmp_path, fetches=graph.fetches)
    print(f"\n100k nodes ({'mix' if config else 'default'}, {out.renderer}): "
          + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in out.timings
                      if not name.startswith("pass:")))
    assert out.report["summary"]["nodes"] > 90000  # the client graph of the fetches
    assert os.path.getsize(tmp_path / "report.html") > 1_000_000
    assert (tmp_path / "graph" / "partition.svg").exists()
