"""Tests of the model corpus (bench/models.py) and the synthetic graph generator (bench/synthetic).

Only the small models run by default; the large ones (ResNet-50, MobileNetV2, Inception-v3,
BERT-base) run with ``NPU_ADAPTER_SLOW_TESTS=1``.
"""

import collections
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

try:
    import bench  # noqa: F401
except ImportError:  # pytest run from elsewhere than the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import models
from bench.synthetic import DEFAULT_MIX, synthetic_graph
from npu_adapter.errors import NpuConfigError

SLOW = os.environ.get("NPU_ADAPTER_SLOW_TESTS") == "1"

VARIABLE_OPS = {"VariableV2", "VarHandleOp", "Assign", "AssignVariableOp", "ReadVariableOp"}
V1_LOOP_OPS = {"Enter", "Exit", "NextIteration", "Merge", "Switch", "LoopCond"}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("model_cache")


def _run(graph_def, feeds, fetches, *, init_op=None, targets=(), steps=0):
    """Import ``graph_def`` into a fresh graph and run it; returns (first results, last results)."""
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        if init_op:
            sess.run(init_op)
        first = sess.run(fetches, feeds)
        for _ in range(steps):
            sess.run(list(targets), feeds)
        last = sess.run(fetches, feeds)
    return first, last


def _assert_same_run(value, repeat):
    # Not bit-exact: with oneDNN on (the TF 2.21 default) a CPU run may differ from the previous
    # one in the last bit (seen on wide AddN fan-ins of the synthetic graph).
    np.testing.assert_allclose(value, repeat, rtol=1e-6, atol=1e-6)


def _node_names(graph_def):
    return {node.name for node in graph_def.node}


def _op_types(graph_def):
    return {node.op for node in graph_def.node}


def _check_names(spec):
    names = _node_names(spec.graph_def)
    for tensor in list(spec.feeds) + spec.fetches:
        op_name, _, index = tensor.partition(":")
        assert op_name in names and index.isdigit(), (spec.name, tensor)
    for op_name in spec.targets + ([spec.init_op] if spec.init_op else []):
        assert op_name in names, (spec.name, op_name)


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def test_registry_lists_every_model_with_kind_and_size():
    expected = {
        "resnet50",
        "mobilenet_v2",
        "inception_v3",
        "bert_encoder",
        "bert_tiny",
        "lenet_train",
        "lenet_train_resource",
        "lenet_train_momentum",
        "lstm",
        "small_cnn",
        "small_mlp",
    }
    assert set(models.list_models()) == expected
    small = models.small_models()
    assert set(small) == expected - {"resnet50", "mobilenet_v2", "inception_v3", "bert_encoder"}


def test_unknown_model_names_the_model_and_the_choices(cache_dir):
    with pytest.raises(NpuConfigError) as info:
        models.get_model("resnet51", cache_dir=cache_dir)
    message = str(info.value)
    assert "resnet51" in message and "resnet50" in message and "small_cnn" in message


# --------------------------------------------------------------------------------------------
# Small models: build, import, run
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["small_cnn", "small_mlp", "bert_tiny", "lstm"])
def test_small_inference_model_is_frozen_and_runs(name, cache_dir):
    spec = models.get_model(name, cache_dir=cache_dir)
    assert spec.name == name and spec.kind == "inference" and spec.size == "small"
    assert spec.targets == [] and spec.init_op is None and spec.saved_model_dir is None
    assert not _op_types(spec.graph_def) & VARIABLE_OPS
    _check_names(spec)
    results, again = _run(spec.graph_def, spec.feeds, spec.fetches)
    for value, repeat in zip(results, again):
        assert np.all(np.isfinite(value)) and np.std(value) > 0
        _assert_same_run(value, repeat)


@pytest.mark.parametrize("name", ["small_cnn", "small_mlp"])
def test_small_classifiers_have_a_dynamic_batch_dim(name, cache_dir):
    spec = models.get_model(name, cache_dir=cache_dir)
    [feed_name] = spec.feeds
    placeholder = next(n for n in spec.graph_def.node if n.name == feed_name.split(":")[0])
    dims = [d.size for d in placeholder.attr["shape"].shape.dim]
    assert dims[0] == -1 and all(d > 0 for d in dims[1:])
    sample = spec.feeds[feed_name]
    for batch in (1, 3):
        [probs], _ = _run(spec.graph_def, {feed_name: sample[:1].repeat(batch, 0)}, spec.fetches)
        assert probs.shape == (batch, 10)
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_bert_tiny_shapes_and_mask(cache_dir):
    spec = models.get_model("bert_tiny", cache_dir=cache_dir)
    assert set(spec.feeds) == {"input_ids:0", "input_mask:0", "segment_ids:0"}
    assert all(v.dtype == np.int32 for v in spec.feeds.values())
    assert "Erf" in _op_types(spec.graph_def) and "GatherV2" in _op_types(spec.graph_def)
    (sequence, pooled), _ = _run(spec.graph_def, spec.feeds, spec.fetches)
    assert sequence.shape == (1, 32, 128) and pooled.shape == (1, 128)
    # Masked positions must not influence the others: change the padded ids only.
    feeds = dict(spec.feeds)
    ids = feeds["input_ids:0"].copy()
    padded = feeds["input_mask:0"][0] == 0
    assert padded.any() and not padded.all()
    ids[0, padded] = (ids[0, padded] + 7) % 2048
    feeds["input_ids:0"] = ids
    (sequence2, _), _ = _run(spec.graph_def, feeds, spec.fetches)
    kept = ~padded
    np.testing.assert_allclose(sequence2[0, kept], sequence[0, kept], rtol=1e-4, atol=1e-5)
    assert not np.allclose(sequence2[0, padded], sequence[0, padded])


def test_lstm_is_a_frozen_v1_while_loop(cache_dir):
    spec = models.get_model("lstm", cache_dir=cache_dir)
    ops = _op_types(spec.graph_def)
    assert ops >= V1_LOOP_OPS
    assert "While" not in ops and "StatelessWhile" not in ops
    (logits, state), _ = _run(spec.graph_def, spec.feeds, spec.fetches)
    assert logits.shape == (4, 20, 1000) and state.shape == (4, 64)


@pytest.mark.parametrize(
    "name, apply_op",
    [
        ("lenet_train", "ApplyGradientDescent"),
        ("lenet_train_resource", "ResourceApplyGradientDescent"),
        ("lenet_train_momentum", "ApplyMomentum"),
    ],
)
def test_lenet_training_step_lowers_the_loss(name, apply_op, cache_dir):
    spec = models.get_model(name, cache_dir=cache_dir)
    assert spec.kind == "training" and spec.size == "small"
    assert spec.fetches == ["loss:0"] and len(spec.targets) == 1 and spec.init_op
    _check_names(spec)
    ops = _op_types(spec.graph_def)
    assert apply_op in ops
    assert ("VarHandleOp" in ops) == (name == "lenet_train_resource")
    assert ("VariableV2" in ops) == (name != "lenet_train_resource")
    assert spec.feeds["images:0"].shape == (8, 28, 28, 1)
    np.testing.assert_array_equal(spec.feeds["labels:0"].sum(axis=1), np.ones(8))
    resource = name == "lenet_train_resource"
    step = "lenet/global_step/Read/ReadVariableOp:0" if resource else "lenet/global_step:0"
    ([loss0, step0], [loss1, step1]) = _run(
        spec.graph_def,
        spec.feeds,
        spec.fetches + [step],
        init_op=spec.init_op,
        targets=spec.targets,
        steps=3,
    )
    assert np.isfinite(loss0) and np.isfinite(loss1)
    assert 1.5 < loss0 < 3.5  # about ln(10) for a fresh 10-way classifier
    assert loss1 < loss0
    assert (step0, step1) == (0, 3)


def test_ref_and_resource_lenet_start_from_the_same_weights(cache_dir):
    losses = []
    for name in ("lenet_train", "lenet_train_resource"):
        spec = models.get_model(name, cache_dir=cache_dir)
        first, last = _run(
            spec.graph_def, spec.feeds, spec.fetches, init_op=spec.init_op,
            targets=spec.targets, steps=1,
        )
        losses.append((first[0], last[0]))
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)


# --------------------------------------------------------------------------------------------
# Determinism and cache
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["small_cnn", "lenet_train"])
def test_building_twice_gives_byte_identical_graphs(name):
    first = models.build_model(name)
    second = models.build_model(name)
    assert first.graph_def.SerializeToString(
        deterministic=True
    ) == second.graph_def.SerializeToString(deterministic=True)
    assert list(first.feeds) == list(second.feeds)
    for key in first.feeds:
        np.testing.assert_array_equal(first.feeds[key], second.feeds[key])


def test_building_restores_random_state_and_control_flow_mode():
    v2_before = tf.compat.v1.control_flow_v2_enabled()
    random.seed(1234)
    np.random.seed(1234)
    expected = (random.random(), np.random.random())
    random.seed(1234)
    np.random.seed(1234)
    models.build_model("lstm")
    assert (random.random(), np.random.random()) == expected
    assert tf.compat.v1.control_flow_v2_enabled() == v2_before


def test_cache_entry_is_keyed_and_reloaded(tmp_path):
    path = models.cache_path("small_mlp", cache_dir=tmp_path)
    assert path.parent == tmp_path and "small_mlp" in path.name and tf.__version__ in path.name
    assert not path.exists()
    built = models.get_model("small_mlp", cache_dir=tmp_path)
    assert path.exists()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left over
    loaded = models.get_model("small_mlp", cache_dir=tmp_path)
    assert loaded is not built
    assert loaded.graph_def.SerializeToString(
        deterministic=True
    ) == built.graph_def.SerializeToString(deterministic=True)
    assert (loaded.fetches, loaded.targets, loaded.kind, loaded.size) == (
        built.fetches, built.targets, built.kind, built.size,
    )
    np.testing.assert_array_equal(loaded.feeds["input:0"], built.feeds["input:0"])


def test_cache_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "elsewhere"))
    assert models.default_cache_dir() == tmp_path / "elsewhere"
    assert models.cache_path("small_mlp").parent == tmp_path / "elsewhere"
    monkeypatch.delenv(models.CACHE_ENV)
    assert models.default_cache_dir().parts[-2:] == (".cache", "models")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_unreadable_cache_entry_is_rebuilt(damage, tmp_path):
    path = models.cache_path("small_mlp", cache_dir=tmp_path)
    if damage == "garbage":
        path.write_bytes(b"not a zip file")
    else:
        models.get_model("small_mlp", cache_dir=tmp_path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    spec = models.get_model("small_mlp", cache_dir=tmp_path)
    assert len(spec.graph_def.node) > 0
    with np.load(path, allow_pickle=False) as data:
        assert "graph_def" in data.files


# --------------------------------------------------------------------------------------------
# SavedModel export
# --------------------------------------------------------------------------------------------


def _run_saved_model(export_dir, feeds):
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], str(export_dir))
        signature = meta.signature_def["serving_default"]
        feed = {signature.inputs[key].name: value for key, value in feeds.items()}
        keys = sorted(signature.outputs)
        values = sess.run([signature.outputs[k].name for k in keys], feed)
    return dict(zip(keys, values))


@pytest.mark.parametrize("frozen", [False, True])
def test_saved_model_matches_the_frozen_graph(frozen, tmp_path, cache_dir):
    out = tmp_path / "small_cnn_sm"
    spec = models.saved_model("small_cnn", out, frozen=frozen, cache_dir=cache_dir)
    assert spec.saved_model_dir == str(out) and (out / "saved_model.pb").exists()
    outputs = _run_saved_model(out, {"input": spec.feeds["input:0"]})
    assert set(outputs) == {"probabilities"}
    [expected], _ = _run(spec.graph_def, spec.feeds, spec.fetches)
    np.testing.assert_allclose(outputs["probabilities"], expected, rtol=1e-5, atol=1e-6)


def test_saved_model_refuses_training_graphs_and_used_directories(tmp_path, cache_dir):
    with pytest.raises(NpuConfigError, match="lenet_train.*inference"):
        models.saved_model("lenet_train", tmp_path / "a", cache_dir=cache_dir)
    used = tmp_path / "used"
    used.mkdir()
    (used / "file").write_text("x")
    with pytest.raises(NpuConfigError, match="out_dir"):
        models.saved_model("small_mlp", used, cache_dir=cache_dir)


# --------------------------------------------------------------------------------------------
# Large models (NPU_ADAPTER_SLOW_TESTS=1)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, shapes",
    [
        ("resnet50", [(1, 1000)]),
        ("mobilenet_v2", [(1, 1000)]),
        ("inception_v3", [(1, 1000)]),
        ("bert_encoder", [(1, 128, 768), (1, 768)]),
    ],
)
@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="large model; set NPU_ADAPTER_SLOW_TESTS=1")
def test_large_model_is_frozen_and_runs(name, shapes, cache_dir):
    spec = models.get_model(name, cache_dir=cache_dir)
    assert spec.size == "large" and spec.kind == "inference"
    assert not _op_types(spec.graph_def) & VARIABLE_OPS
    _check_names(spec)
    results, _ = _run(spec.graph_def, spec.feeds, spec.fetches)
    assert [r.shape for r in results] == shapes
    assert all(np.all(np.isfinite(r)) for r in results)



# --------------------------------------------------------------------------------------------
# Synthetic graphs
# --------------------------------------------------------------------------------------------


def _consumers(graph_def):
    counts = collections.Counter()
    for node in graph_def.node:
        for name in node.input:
            counts[name.lstrip("^").split(":")[0]] += 1
    return counts


def _longest_single_consumer_chain(graph_def):
    """Length of the longest run of nodes each feeding the next as its first data input."""
    first_input = {}
    for node in graph_def.node:
        if node.input and not node.input[0].startswith("^"):
            first_input[node.name] = node.input[0].split(":")[0]
    depth = {}
    for node in graph_def.node:  # nodes are emitted in order along chains
        parent = first_input.get(node.name)
        depth[node.name] = depth.get(parent, 0) + 1 if parent else 1
    return max(depth.values())


def test_synthetic_graph_imports_and_runs():
    result = synthetic_graph(2000, seed=0)
    graph_def = result.graph_def
    assert abs(len(graph_def.node) - 2000) <= 100
    names = _node_names(graph_def)
    assert len(names) == len(graph_def.node)
    ops = _op_types(graph_def)
    required = V1_LOOP_OPS | {
        "AsString", "StringJoin", "StringToNumber",
        "VarHandleOp", "ReadVariableOp", "AssignVariableOp",
        "Add", "Mul", "MatMul", "Relu", "Identity", "AddN", "Const", "Placeholder",
    }
    assert required <= ops, required - ops
    assert any(i.startswith("^") for n in graph_def.node for i in n.input)
    assert max(_consumers(graph_def).values()) >= 8  # fan-out
    assert max(len(n.input) for n in graph_def.node if n.op == "AddN") >= 4  # fan-in
    assert _longest_single_consumer_chain(graph_def) >= 100
    for tensor in list(result.feeds) + result.fetches:
        assert tensor.split(":")[0] in names
    values, again = _run(graph_def, result.feeds, result.fetches)
    assert len(values) == len(result.fetches) >= 1
    for value, repeat in zip(values, again):
        assert value.shape == (4, 4) and value.dtype == np.float32
        assert np.all(np.isfinite(value))
        _assert_same_run(value, repeat)


def test_synthetic_graph_is_deterministic_per_seed():
    a = synthetic_graph(3000, seed=7).graph_def.SerializeToString(deterministic=True)
    b = synthetic_graph(3000, seed=7).graph_def.SerializeToString(deterministic=True)
    c = synthetic_graph(3000, seed=8).graph_def.SerializeToString(deterministic=True)
    assert a == b
    assert a != c


@pytest.mark.parametrize("num_nodes", [200, 2000, 10000, 30000])
def test_synthetic_graph_size_is_within_five_percent(num_nodes):
    result = synthetic_graph(num_nodes, seed=num_nodes)
    assert abs(len(result.graph_def.node) - num_nodes) <= 0.05 * num_nodes


def test_synthetic_mix_selects_the_block_kinds():
    chains = synthetic_graph(1000, mix={"chain": 1.0})
    ops = _op_types(chains.graph_def)
    assert not ops & (V1_LOOP_OPS | {"AsString", "VarHandleOp"})
    loops = synthetic_graph(1000, mix={"chain": 1.0, "while": 1.0})
    loop_ops = _op_types(loops.graph_def)
    assert loop_ops >= V1_LOOP_OPS and "VarHandleOp" not in loop_ops
    counts = collections.Counter(n.op for n in loops.graph_def.node)
    assert counts["LoopCond"] >= 5
    # The default mix is followed by node share: the loops hold about their 9 %.
    default = synthetic_graph(5000, seed=1)
    in_loops = sum(1 for n in default.graph_def.node if n.name.startswith("while_"))
    assert 0.05 * 5000 < in_loops < 0.13 * 5000
    assert set(DEFAULT_MIX) == {"chain", "fan", "while", "string", "resource"}


@pytest.mark.parametrize(
    "kwargs, option",
    [
        ({"num_nodes": 10}, "num_nodes"),
        ({"num_nodes": 2000.0}, "num_nodes"),
        ({"num_nodes": 2000, "mix": {"chains": 1.0}}, "mix"),
        ({"num_nodes": 2000, "mix": {"chain": -1.0}}, "mix['chain']"),
        ({"num_nodes": 2000, "mix": {"chain": 0.0}}, "mix"),
        ({"num_nodes": 2000, "control_edge_rate": 2}, "control_edge_rate"),
    ],
)
def test_synthetic_rejects_bad_arguments(kwargs, option):
    with pytest.raises(NpuConfigError) as info:
        synthetic_graph(**kwargs)
    assert info.value.option == option
