"""The user's fetched, fed and target names stay valid in a rewritten graph (graph/aliases.py).

Each rewritten graph is imported on its own into a fresh ``tf.Graph`` and run by the names of the
original graph; the values are compared with plain TensorFlow on the original graph.
"""

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.graph.aliases import complete_fetch_ports, without_aliases

tf1 = tf.compat.v1


def _graph():
    """x ─► matmul ─► split(3) ─► (a, b, c); probs = softmax(b); counter += 1 as a train op."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.constant(np.arange(24, dtype=np.float32).reshape(4, 6) / 10, name="w")
        mm = tf.matmul(x, w, name="mm")
        parts = tf.split(mm, 3, axis=1, name="split")
        tf.nn.softmax(parts[1], name="probs")
        tf.add(parts[0], parts[2], name="sum02")
        tf.group(tf.identity(mm), name="train_op")
    return graph


def _run(graph_def, fetches, feeds, targets=()):
    with tf.Graph().as_default() as graph:
        tf1.import_graph_def(graph_def, name="")
        with tf1.Session(graph=graph) as sess:
            if targets:
                sess.run(list(targets), feeds)
            return sess.run(fetches, feeds)


@pytest.fixture(scope="module")
def graph_def():
    return _graph().as_graph_def()


X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def test_fetched_names_survive_the_rewrite(graph_def):
    result = npu_adapter.rewrite(graph_def, {}, fetches=["probs:0", "sum02:0"])
    assert {c.name for c in result.clusters} == {"GeOp1_0"}
    assert result.tensor_map["probs:0"].startswith("GeOp1_0")
    assert set(result.aliases) == {"probs", "sum02"}
    ops = {n.name: n.op for n in result.graph_def.node}
    assert ops["probs"] == "Identity" and ops["sum02"] == "Identity"
    want = _run(graph_def, ["probs:0", "sum02:0"], {"x:0": X})
    got = _run(result.graph_def, ["probs:0", "sum02:0"], {"x:0": X})
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_a_partly_fetched_multi_output_node_gets_an_identity_n(graph_def):
    result = npu_adapter.rewrite(graph_def, {}, fetches=["split:2"])
    alias = next(n for n in result.graph_def.node if n.name == "split")
    assert alias.op == "IdentityN" and len(alias.input) == 3
    assert list(alias.attr["T"].list.type) == [tf.float32.as_datatype_enum] * 3
    want = _run(graph_def, ["split:0", "split:1", "split:2"], {"x:0": X})
    got = _run(result.graph_def, ["split:0", "split:1", "split:2"], {"x:0": X})
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_a_fed_intermediate_tensor_can_be_fed_by_its_name(graph_def):
    result = npu_adapter.rewrite(graph_def, {}, fetches=["probs:0"], feeds=["mm:0"])
    assert result.feed_map["mm:0"] != "mm:0"  # a placeholder stands for the feed
    assert "mm" in result.aliases
    fed = np.arange(18, dtype=np.float32).reshape(3, 6) / 7
    want = _run(graph_def, "probs:0", {"mm:0": fed})
    got = _run(result.graph_def, "probs:0", {"mm:0": fed})
    np.testing.assert_array_equal(want, got)


def test_a_target_that_moved_into_a_cluster_is_a_no_op_running_it(graph_def):
    result = npu_adapter.rewrite(graph_def, {}, fetches=["probs:0"], targets=["train_op"])
    assert result.op_map["train_op"] == "GeOp1_0"
    train = next(n for n in result.graph_def.node if n.name == "train_op")
    assert train.op == "NoOp" and list(train.input) == ["^GeOp1_0"]
    got = _run(result.graph_def, "probs:0", {"x:0": X}, targets=["train_op"])
    np.testing.assert_array_equal(got, _run(graph_def, "probs:0", {"x:0": X}))


def test_convert_writes_a_graph_usable_by_the_original_names(graph_def, tmp_path, capsys):
    from npu_adapter import cli

    model = tmp_path / "m.pb"
    model.write_bytes(graph_def.SerializeToString())
    out = tmp_path / "out.pb"
    assert cli.main(["convert", str(model), "--out", str(out), "--fetch", "probs:0"]) == 0
    converted = tf1.GraphDef.FromString(out.read_bytes())
    np.testing.assert_array_equal(_run(converted, "probs:0", {"x:0": X}),
                                  _run(graph_def, "probs:0", {"x:0": X}))
    assert "fetch probs:0 -> GeOp1_0:0" in capsys.readouterr().out


def test_nothing_is_added_when_nothing_moved(graph_def):
    result = npu_adapter.rewrite(graph_def, {"use_off_line": False}, fetches=["probs:0"])
    assert result.aliases == {} and result.skip_reason


def test_without_aliases_gives_back_the_partition(graph_def):
    result = npu_adapter.rewrite(graph_def, {}, fetches=["probs:0"], feeds=["mm:0"])
    plain = without_aliases(result.graph_def, result.aliases)
    names = {n.name for n in plain.node}
    assert not names & set(result.aliases)
    standing = result.feed_map["mm:0"].split(":")[0]
    assert any(standing in [i.split(":")[0] for i in n.input] for n in plain.node)


def test_complete_fetch_ports():
    assert complete_fetch_ports(["a:2", "b:0", "a:0"]) == ["a:2", "b:0", "a:0", "a:1"]
    assert complete_fetch_ports(["c:0"]) == ["c:0"]


def test_aliases_from_a_view_of_the_user_graph_equal_those_from_its_nodes(graph_def):
    """``rewrite`` hands keep_user_names its view and name set; a caller without them gets the
    same aliases (looked up from the NodeDefs)."""
    from npu_adapter.graph.aliases import keep_user_names
    from npu_adapter.graph.view import GraphView

    fetches = ["probs:0", "sum02:0", "split:1"]
    result = npu_adapter.rewrite(graph_def, {}, fetches=fetches, targets=["train_op"])
    bare = without_aliases(result.graph_def, result.aliases)
    kwargs = {"fetches": fetches, "targets": ["train_op"], "tensor_map": result.tensor_map,
              "op_map": result.op_map}
    plain, plain_aliases = keep_user_names(bare, graph_def, **kwargs)
    viewed, viewed_aliases = keep_user_names(
        bare, graph_def, present={n.name for n in bare.node}, user_view=GraphView(graph_def),
        **kwargs)
    assert plain_aliases == viewed_aliases == result.aliases and "split" in plain_aliases
    assert plain.SerializeToString(deterministic=True) == \
        viewed.SerializeToString(deterministic=True)
