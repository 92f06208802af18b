"""Dumps around rewrite(): the per-pass tree, PRINT_MODEL files and the dump env variables."""

import os

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from graph_cases import mix_cnn_graph
from tensorflow.core.framework import graph_pb2

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.errors import NpuConfigError, RewriteError
from npu_adapter.graph.aliases import without_aliases
from npu_adapter.graph.names import sanitize_filename
from npu_adapter.passes import DEFAULT_PIPELINE
from npu_adapter.pipeline.dump_instruments import (
    CompatDumpInstrument,
    PassDumpInstrument,
    rewrite_dump_instruments,
)
from npu_adapter.pipeline.dump_settings import read_dump_settings

tf1 = tf.compat.v1

DUMP_VARS = ("PRINT_MODEL", "DUMP_GRAPH_PATH", "NPU_COLLECT_PATH", "DUMP_GE_GRAPH",
             "DUMP_GRAPH_LEVEL", "ASCEND_DEVICE_ID", "DEVICE_ID")
MIX = {"mix_compile_mode": True}
FETCHES = ["probs:0"]
PASSES = DEFAULT_PIPELINE.split(",")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in DUMP_VARS:
        monkeypatch.delenv(name, raising=False)


def cnn(extra_placeholder=None):
    """conv1 → [host: abs, sqrt under without_npu_compile] → conv2 → mean → softmax."""
    return mix_cnn_graph(extra_placeholder=extra_placeholder).as_graph_def()


def files(path):
    found = []
    for root, _, names in os.walk(path):
        for name in names:
            found.append(os.path.relpath(os.path.join(root, name), path).replace(os.sep, "/"))
    return sorted(found)


def parse(path):
    graph = graph_pb2.GraphDef()
    with open(path, encoding="utf-8") as f:
        text_format.Parse(f.read(), graph)
    return graph


def pass_files(stage_names):
    return [f"{i:03d}_{name}_{stage}.pbtxt" for i, name in enumerate(PASSES)
            for stage in stage_names]


# ------------------------------------------------------------------------------ per-pass tree


def test_dump_dir_has_every_pass_input_and_output(tmp_path):
    result = npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path, graph_num=2)
    written = files(tmp_path)
    assert all(name.startswith("graph_2/") for name in written)
    graphs = [n[len("graph_2/"):] for n in written if "_fn_" not in n]
    assert graphs == sorted(pass_files(["before", "after"]))
    final = parse(tmp_path / "graph_2" / pass_files(["after"])[-1])
    # The last pass's output is the result less the aliases that keep the user's names.
    assert final == without_aliases(result.graph_def, result.aliases)
    first = parse(tmp_path / "graph_2" / pass_files(["before"])[0])
    assert [n.name for n in first.node][:3] == ["images", "conv1/w", "conv1/conv"]
    # Level 1 (the default without DUMP_GE_GRAPH) adds one GraphDef per new function.
    encapsulate = PASSES.index("encapsulate")
    fn_files = [n for n in written if "_fn_" in n]
    assert f"graph_2/{encapsulate:03d}_encapsulate_after_fn_GeOp2_0.pbtxt" in fn_files
    body = parse(tmp_path / f"graph_2/{encapsulate:03d}_encapsulate_after_fn_GeOp2_0.pbtxt")
    ops = {n.name: n.op for n in body.node}
    assert ops["images_0_arg"] == "_Arg" and ops["conv1/conv"] == "Conv2D"
    retvals = [n for n in body.node if n.op == "_Retval"]
    assert [list(n.input) for n in retvals] == [["conv1/relu"]]


def test_dump_text_is_sorted_and_identical_across_runs(tmp_path):
    for run in ("a", "b"):
        npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path / run)
    names = files(tmp_path / "a")
    assert names == files(tmp_path / "b")
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    text = (tmp_path / "a" / "graph_1" / pass_files(["before"])[0]).read_text()
    conv = text[text.index('name: "conv1/conv"'):]
    conv = conv[:conv.index("\nnode {")]
    keys = [line.split('"')[1] for line in conv.splitlines() if line.strip().startswith("key:")]
    assert keys == sorted(keys) and "T" in keys and "strides" in keys


def test_run_names_cannot_escape_the_dump_dir(tmp_path):
    out = tmp_path / "out"
    dump = PassDumpInstrument(out, run_name="../../etc x.y\\z")
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, instruments=[dump])
    assert os.listdir(tmp_path) == ["out"]
    assert os.listdir(out) == ["_etc_x_y_z"]
    assert all(os.path.dirname(p) == str(out / "_etc_x_y_z") for p in dump.files)
    assert sanitize_filename("a.b/c\\d e") == "a_b_c_d_e"


def test_failing_pass_leaves_its_input_in_the_dump(tmp_path):
    # A graph node already named like the first cluster makes encapsulate refuse the rewrite.
    with pytest.raises(RewriteError, match="GeOp1_0"):
        npu_adapter.rewrite(cnn(extra_placeholder="GeOp1_0"), MIX, fetches=FETCHES + ["GeOp1_0"],
                            dump_dir=tmp_path)
    written = [n for n in files(tmp_path / "graph_1") if "_fn_" not in n]
    encapsulate = PASSES.index("encapsulate")
    expected = pass_files(["before", "after"])[:2 * encapsulate + 1]
    assert written == sorted(expected)
    assert expected[-1] == f"{encapsulate:03d}_encapsulate_before.pbtxt"


def test_no_dump_dir_and_no_env_means_no_instruments():
    assert rewrite_dump_instruments(None, 1, environ={}) == []


# ------------------------------------------------------------------------ DUMP_GE_GRAPH (content)


def _const_value(graph, name):
    return {n.name: n for n in graph.node}[name].attr["value"].tensor


def test_dump_ge_graph_1_is_full(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path)
    first = parse(tmp_path / "graph_1" / pass_files(["before"])[0])
    value = _const_value(first, "conv1/w")
    assert len(value.tensor_content) == 3 * 3 * 3 * 4 * 4


def test_dump_ge_graph_2_drops_tensor_contents_keeps_dtype_and_shape(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "2")
    result = npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path)
    first = parse(tmp_path / "graph_1" / pass_files(["before"])[0])
    value = _const_value(first, "conv1/w")
    assert value.tensor_content == b"" and not value.float_val
    assert value.dtype == tf.float32.as_datatype_enum
    assert [d.size for d in value.tensor_shape.dim] == [3, 3, 3, 4]
    assert first.node[1].attr["dtype"].type == tf.float32.as_datatype_enum
    final = parse(tmp_path / "graph_1" / pass_files(["after"])[-1])
    body = {f.signature.name: f for f in final.library.function}["GeOp1_1"]
    weights = {n.name: n for n in body.node_def}["conv2/w"].attr["value"].tensor
    assert weights.tensor_content == b"" and len(weights.tensor_shape.dim) == 4
    assert result.graph_def != final  # the rewrite itself keeps its weights


def test_dump_ge_graph_3_is_structure_only(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "3")
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path)
    for name in files(tmp_path):
        text = (tmp_path / name).read_text()
        assert "attr {" not in text, name
    final = parse(tmp_path / "graph_1" / pass_files(["after"])[-1])
    nodes = {n.name: n for n in final.node}
    assert nodes["GeOp1_1"].op == "StatefulPartitionedCall"
    assert list(nodes["GeOp1_1"].input) == ["host/id"]
    body = {f.signature.name: f for f in final.library.function}["GeOp1_1"]
    assert [a.name for a in body.signature.input_arg] == ["host_id_0_arg"]
    assert {n.name for n in body.node_def} >= {"conv2/conv", "probs"}


@pytest.mark.parametrize("value", ["0", "4", "full", "-1"])
def test_dump_ge_graph_invalid(monkeypatch, tmp_path, value):
    monkeypatch.setenv("DUMP_GE_GRAPH", value)
    with pytest.raises(NpuConfigError, match="'DUMP_GE_GRAPH'.*1 \\(full\\)") as info:
        npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path)
    assert info.value.value == value
    assert files(tmp_path) == []


# ---------------------------------------------------------------------- DUMP_GRAPH_LEVEL (count)


def _graph_files(path):
    return [n.split("/", 1)[1] for n in files(path)]


def test_dump_graph_level_defaults_to_2_with_dump_ge_graph(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path)
    assert _graph_files(tmp_path) == sorted(pass_files(["before", "after"]))


def test_dump_graph_level_1_adds_function_subgraphs(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "1")
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path)
    written = _graph_files(tmp_path)
    fn_files = sorted(n for n in written if "_fn_" in n)
    encapsulate = PASSES.index("encapsulate")
    assert fn_files[:2] == [f"{encapsulate:03d}_encapsulate_after_fn_GeOp1_0.pbtxt",
                            f"{encapsulate:03d}_encapsulate_after_fn_GeOp1_1.pbtxt"]
    assert sorted(n for n in written if "_fn_" not in n) == sorted(pass_files(["before",
                                                                              "after"]))


def test_dump_graph_level_2(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "2")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "2")
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path)
    assert _graph_files(tmp_path) == sorted(pass_files(["before", "after"]))


def test_dump_graph_level_3_is_the_last_graph(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "3")
    result = npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path)
    assert _graph_files(tmp_path) == [pass_files(["after"])[-1]]
    assert parse(tmp_path / "graph_1" / pass_files(["after"])[-1]) == \
        without_aliases(result.graph_def, result.aliases)


def test_dump_graph_level_4_is_the_first_graph(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "4")
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path)
    assert _graph_files(tmp_path) == [pass_files(["before"])[0]]


def test_dump_graph_level_is_ignored_without_dump_ge_graph(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "3")
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path / "a")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "not a level")
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, dump_dir=tmp_path / "b")
    for run in ("a", "b"):
        written = _graph_files(tmp_path / run)
        assert len(written) > 2 * len(PASSES)  # every graph plus the function subgraphs


@pytest.mark.parametrize("value", ["0", "5", "last"])
def test_dump_graph_level_invalid(monkeypatch, value):
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", value)
    with pytest.raises(NpuConfigError, match="'DUMP_GRAPH_LEVEL'.*4 \\(the first graph\\)"):
        read_dump_settings()


def test_dump_graph_level_on_failure_keeps_the_failing_input(tmp_path, monkeypatch):
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "3")
    with pytest.raises(RewriteError):
        npu_adapter.rewrite(cnn(extra_placeholder="GeOp1_0"), MIX,
                            fetches=FETCHES + ["GeOp1_0"], dump_dir=tmp_path)
    encapsulate = PASSES.index("encapsulate")
    assert _graph_files(tmp_path) == [f"{encapsulate:03d}_encapsulate_before.pbtxt"]


# ------------------------------------------------------------------------- PRINT_MODEL files


def test_print_model_writes_the_original_file_names(tmp_path, monkeypatch):
    monkeypatch.setenv("PRINT_MODEL", "1")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path / "new" / "dir"))
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES, graph_num=3)
    assert files(tmp_path / "new" / "dir") == [
        "AfterSubGraph_3.pbtxt", "BeforeSubGraph_3.pbtxt", "TF_GeOp3_0.pbtxt",
        "TF_GeOp3_1.pbtxt"]
    after = parse(tmp_path / "new" / "dir" / "AfterSubGraph_3.pbtxt")
    assert [n.op for n in after.node if n.name.startswith("GeOp")] == ["GeOp", "GeOp"]
    before = parse(tmp_path / "new" / "dir" / "BeforeSubGraph_3.pbtxt")
    assert "GeOp" not in {n.op for n in before.node}
    body = parse(tmp_path / "new" / "dir" / "TF_GeOp3_1.pbtxt")
    ops = [n.op for n in body.node]
    assert ops[0] == "_Arg" and ops[-1] == "_Retval" and "Conv2D" in ops


@pytest.mark.parametrize("value", ["0", "true", "", "2"])
def test_print_model_only_for_1(tmp_path, monkeypatch, value):
    monkeypatch.setenv("PRINT_MODEL", value)
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES)
    assert files(tmp_path) == []


def test_print_model_defaults_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("PRINT_MODEL", "1")
    monkeypatch.chdir(tmp_path)
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES)
    assert "BeforeSubGraph_1.pbtxt" in files(tmp_path)


def _collect_dir(tmp_path, device):
    return tmp_path / "collect" / "extra-info" / "graph" / f"{os.getpid()}_{device}"


def test_npu_collect_path_wins_over_dump_graph_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PRINT_MODEL", "1")
    monkeypatch.setenv("NPU_COLLECT_PATH", str(tmp_path / "collect"))
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path / "plain"))
    npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES)
    assert "AfterSubGraph_1.pbtxt" in files(_collect_dir(tmp_path, 0))
    assert not (tmp_path / "plain").exists()


@pytest.mark.parametrize("env, config, device", [
    ({"ASCEND_DEVICE_ID": "3"}, {}, 3),
    ({"DEVICE_ID": "5"}, {}, 5),
    ({"ASCEND_DEVICE_ID": "2", "DEVICE_ID": "5"}, {}, 2),
    ({"ASCEND_DEVICE_ID": "2"}, {"session_device_id": 7}, 7),
])
def test_collect_path_device_id(tmp_path, monkeypatch, env, config, device):
    monkeypatch.setenv("PRINT_MODEL", "1")
    monkeypatch.setenv("NPU_COLLECT_PATH", str(tmp_path / "collect"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    npu_adapter.rewrite(cnn(), {**MIX, **config}, fetches=FETCHES)
    assert "BeforeSubGraph_1.pbtxt" in files(_collect_dir(tmp_path, device))


@pytest.mark.parametrize("name", ["ASCEND_DEVICE_ID", "DEVICE_ID"])
def test_collect_path_bad_device_id(tmp_path, monkeypatch, name):
    monkeypatch.setenv("PRINT_MODEL", "1")
    monkeypatch.setenv("NPU_COLLECT_PATH", str(tmp_path / "collect"))
    monkeypatch.setenv(name, "-1")
    with pytest.raises(NpuConfigError, match=f"'{name}': an integer >= 0"):
        npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES)


def test_print_model_content_and_count_levels(tmp_path, monkeypatch):
    monkeypatch.setenv("PRINT_MODEL", "1")
    monkeypatch.setenv("DUMP_GE_GRAPH", "2")
    for level, expected in (("2", ["AfterSubGraph_1.pbtxt", "BeforeSubGraph_1.pbtxt",
                                   "TF_GeOp1_0.pbtxt", "TF_GeOp1_1.pbtxt"]),
                            ("3", ["AfterSubGraph_1.pbtxt"]),
                            ("4", ["BeforeSubGraph_1.pbtxt"])):
        out = tmp_path / level
        monkeypatch.setenv("DUMP_GRAPH_PATH", str(out))
        monkeypatch.setenv("DUMP_GRAPH_LEVEL", level)
        npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES)
        assert files(out) == expected, level
        for name in expected:
            assert "tensor_content" not in (out / name).read_text()


def nested_function_graph():
    """abs → PartitionedCall(f: relu * 2) → sqrt: one cluster that calls a function."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 2], name="x")

        @tf.function
        def f(a):
            return tf.nn.relu(a) * 2.0

        tf.identity(tf.math.sqrt(f(tf.math.abs(x, name="abs"))), name="out")
    return g.as_graph_def()


def test_print_model_level_1_writes_function_subgraphs(tmp_path, monkeypatch):
    monkeypatch.setenv("PRINT_MODEL", "1")
    monkeypatch.setenv("DUMP_GE_GRAPH", "1")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path / "one"))
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "1")
    npu_adapter.rewrite(nested_function_graph(), MIX, fetches=["out:0"])
    written = files(tmp_path / "one")
    subgraphs = [n for n in written if n.startswith("TF_Subgraph_")]
    assert len(subgraphs) == 1 and "inference_f" in subgraphs[0]
    body = parse(tmp_path / "one" / "TF_GeOp1_0.pbtxt")
    assert [f.signature.name for f in body.library.function] == [
        subgraphs[0][len("TF_Subgraph_"):-len(".pbtxt")]]
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path / "two"))
    monkeypatch.setenv("DUMP_GRAPH_LEVEL", "2")
    npu_adapter.rewrite(nested_function_graph(), MIX, fetches=["out:0"])
    assert not [n for n in files(tmp_path / "two") if n.startswith("TF_Subgraph_")]


def test_environ_argument_and_instrument_types(tmp_path):
    env = {"PRINT_MODEL": "1", "DUMP_GRAPH_PATH": str(tmp_path), "DUMP_GE_GRAPH": "3",
           "DUMP_GRAPH_LEVEL": "4"}
    instruments = rewrite_dump_instruments(tmp_path / "d", 4, environ=env)
    assert [type(i) for i in instruments] == [PassDumpInstrument, CompatDumpInstrument]
    assert instruments[0].run_name == "graph_4"
    assert (instruments[0].content_level, instruments[0].count_level) == (3, 4)
    settings = read_dump_settings(env)
    assert settings.compat_path() == str(tmp_path)


# --------------------------------------------------------------------------------- NpuSession


def test_session_dumps_each_signature_rewrite(tmp_path):
    from npu_adapter.session import NpuSession

    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(cnn(), name="")
    config = NpuConfig.from_dict({**MIX, "npu_adapter_dump_dir": str(tmp_path)})
    images = np.ones([2, 8, 8, 3], np.float32)
    with NpuSession(graph=g, config=config.to_config_proto()) as sess:
        sess.run("probs:0", {"images:0": images})
        sess.run("conv1/relu:0", {"images:0": images})
    runs = sorted(os.listdir(tmp_path))
    assert len(runs) == 2 and all(r.startswith("graph_") for r in runs)
    for run in runs:
        assert pass_files(["after"])[-1] in os.listdir(tmp_path / run)
