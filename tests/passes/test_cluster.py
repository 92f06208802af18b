"""``cluster``: group the device candidates into clusters that create no cycle, and name them
``GeOp<N>_<k>``. Every member gets the original's ``_subgraphs`` attribute; candidates left out
of every cluster become host nodes with the reason.

With the op list {Abs, Add, Neg} (h, a Floor, stays on the host)::

    x ─► a (Abs) ─► h (Floor) ─► c (Add) ─► n (Neg)
         └──────────────────────►┘

a and c cannot share a cluster: the path a ─► h ─► c would leave it and come back. Mix mode
keeps both clusters; full offload keeps the largest one only::

    mix:           a [_subgraphs GeOp1_0]      c, n [_subgraphs GeOp1_1]
    full offload:  a [host:not_in_largest_cluster]      c, n [_subgraphs GeOp1_0]
"""

import pytest
import tensorflow as tf
from graph_cases import mix_cnn_graph, while_loop_v1_graph

from npu_adapter.config import NpuConfig
from npu_adapter.op_support import OpSupportList
from npu_adapter.passes import PassContext, PassManager, get_pass
from npu_adapter.testing import GraphBuilder, assert_graph_equal
from npu_adapter.vocabulary import CLUSTER_ATTR, PLACEMENT_ATTR

OPS = OpSupportList.from_names(["Abs", "Add", "Neg"])


def _ctx(ops=OPS, **options):
    return PassContext(config=NpuConfig.from_dict(options), op_support=ops)


def _attr(graph_def, key):
    return {n.name: n.attr[key].s.decode() for n in graph_def.node if key in n.attr}


def _diamond():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    b.unary("Floor", "h", "a")
    b.binary("Add", "c", "a", "h")
    b.unary("Neg", "n", "c")
    return b


def _annotated(b, placements):
    """``b``'s graph annotated by hand, as mark_candidates would."""
    for name, value in placements.items():
        b.set_attr(name, PLACEMENT_ATTR, value)
    return b.graph_def()


_PLACEMENTS = {"x": "host:graph_input", "a": "npu:supported", "h": "host:unsupported_op",
               "c": "npu:supported", "n": "npu:supported"}


def test_mix_mode_keeps_both_clusters_of_a_path_through_the_host():
    graph_def = _annotated(_diamond(), _PLACEMENTS)
    result = get_pass("cluster")(graph_def, _ctx(mix_compile_mode=True))
    expected = _diamond()
    _annotated(expected, _PLACEMENTS)
    for name, cluster in [("a", "GeOp1_0"), ("c", "GeOp1_1"), ("n", "GeOp1_1")]:
        expected.set_attr(name, CLUSTER_ATTR, cluster)
    assert_graph_equal(result.graph_def, expected.graph_def())
    assert result.info["clusters"] == ["GeOp1_0", "GeOp1_1"] and result.info["sizes"] == [1, 2]


def test_full_offload_keeps_the_largest_cluster_only():
    graph_def = _annotated(_diamond(), _PLACEMENTS)
    out = get_pass("cluster")(graph_def, _ctx()).graph_def
    assert _attr(out, CLUSTER_ATTR) == {"c": "GeOp1_0", "n": "GeOp1_0"}
    assert _attr(out, PLACEMENT_ATTR)["a"] == "host:not_in_largest_cluster"


def test_independent_clusters_merge_in_both_modes():
    """x ─► a (Abs) ─► h1 (Floor)    y ─► n (Neg) ─► h2 (Floor): no path joins a and n."""
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.placeholder("y", shape=[2])
    b.unary("Abs", "a", "x")
    b.unary("Floor", "h1", "a")
    b.unary("Neg", "n", "y")
    b.unary("Floor", "h2", "n")
    for mix in (False, True):
        out = PassManager.from_pipeline("mark_candidates,cluster").run(
            b.graph_def(), _ctx(mix_compile_mode=mix)).graph_def
        assert _attr(out, CLUSTER_ATTR) == {"a": "GeOp1_0", "n": "GeOp1_0"}


@pytest.mark.parametrize("pipeline, clusters, dropped", [
    ("mark_candidates,cluster(min_size=2)", {"c": "GeOp1_0", "n": "GeOp1_0"},
     {"a": "host:below_min_cluster_size"}),
    ("mark_candidates,cluster(max_clusters=1)", {"c": "GeOp1_0", "n": "GeOp1_0"},
     {"a": "host:max_clusters_exceeded"}),
    ("mark_candidates,cluster", {"a": "GeOp1_0", "c": "GeOp1_1", "n": "GeOp1_1"}, {}),
])
def test_the_size_options_drop_clusters(pipeline, clusters, dropped):
    out = PassManager.from_pipeline(pipeline).run(
        _diamond().graph_def(), _ctx(mix_compile_mode=True)).graph_def
    assert _attr(out, CLUSTER_ATTR) == clusters
    placements = _attr(out, PLACEMENT_ATTR)
    assert {name: placements[name] for name in dropped} == dropped


def test_a_second_cluster_pass_replaces_the_first_ones_clusters():
    """The second pass keeps one cluster of the first one's two: it must see their marks (a
    stale clustering) and remove the other's."""
    graph_def = mix_cnn_graph().as_graph_def()
    ctx = PassContext(config=NpuConfig.from_dict({"mix_compile_mode": True}))
    manager = PassManager.from_pipeline("mark_candidates,cluster,cluster(max_clusters=1)")
    outcome = manager.run(graph_def, ctx)
    first, second = (r.info["clusters"] for name, r in outcome.results if name == "cluster")
    assert len(first) == 2 and len(second) == 1
    assert set(_attr(outcome.graph_def, CLUSTER_ATTR).values()) == set(second)


def test_a_v1_while_loop_is_never_split():
    """i = 0; while i < 10: i = i + 1 (Enter/Merge/Switch/NextIteration/Exit), then out."""
    graph_def = while_loop_v1_graph()
    out = PassManager.from_pipeline("mark_candidates,cluster").run(graph_def, _ctx(
        ops=None)).graph_def
    clusters = _attr(out, CLUSTER_ATTR)
    loop = [n.name for n in graph_def.node if n.name.startswith("while/")]
    assert loop and {clusters.get(name) for name in loop} == {"GeOp1_0"}


def _accumulator_loop():
    """A loop that adds ``e`` (what ``a`` computed) to an accumulator; ``c`` reads the result::

        x ─► a (Abs) ─► e (Enter) ─────────────► add ─► next (NextIteration)
             zero ─► z (Enter) ─► m (Merge) ◄─────────────┘
                                  m ─► s (Switch) ─► s:1 ─► add,   s:0 ─► out (Exit) ─► c (Neg)

    Without the back edge out of ``next``, no path joins ``a`` and ``c``, yet ``c`` reads what
    ``a`` computed: through the loop.
    """
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.placeholder("go", dtype=tf.bool, shape=[])
    b.unary("Abs", "a", "x")
    b.op("Enter", "e", ["a"], T=tf.float32, frame_name="L", is_constant=True)
    b.const("zero", [0.0, 0.0], dtype=tf.float32)
    b.op("Enter", "z", ["zero"], T=tf.float32, frame_name="L")
    b.op("Enter", "g", ["go"], T=tf.bool, frame_name="L", is_constant=True)
    b.op("Merge", "m", ["z", "next"], T=tf.float32, N=2)
    b.op("LoopCond", "cond", ["g"])
    b.op("Switch", "s", ["m", "cond"], T=tf.float32)
    b.binary("AddV2", "add", "s:1", "e")
    b.op("NextIteration", "next", ["add"], T=tf.float32)
    b.op("Exit", "out", ["s"], T=tf.float32)
    b.unary("Neg", "c", "out")
    return b


def test_a_cluster_never_both_feeds_a_loop_and_reads_what_leaves_it():
    b = _accumulator_loop()
    loop = ["x", "go", "e", "zero", "z", "g", "m", "cond", "s", "add", "next", "out"]
    host = dict.fromkeys(loop, "host:unsupported_op")
    graph_def = _annotated(b, {**host, "a": "npu:supported", "c": "npu:supported"})
    out = get_pass("cluster")(graph_def, _ctx(mix_compile_mode=True)).graph_def
    assert _attr(out, CLUSTER_ATTR) == {"a": "GeOp1_0", "c": "GeOp1_1"}


def test_without_candidates_the_graph_is_returned_as_it_is():
    graph_def = _annotated(_diamond(), dict.fromkeys(_PLACEMENTS, "host:unsupported_op"))
    result = get_pass("cluster")(graph_def, _ctx())
    assert result.graph_def is graph_def and not result.modified
    assert result.info["clusters"] == []
