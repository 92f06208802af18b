"""``read_graph_config``: gating, the graph-level checks, and the expansion of
``_UnaryOpsComposition`` (docs/original-adapter.md, 1–3).

The one rewrite it makes::

    x ─► comp (_UnaryOpsComposition, op_names [Neg, Abs]) ─► out (Sqrt)
  becomes
    x ─► comp_0_Neg ─► comp_1_Abs ─► out
"""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorflow.core.framework import graph_pb2

from npu_adapter.config import NpuConfig
from npu_adapter.errors import RewriteError
from npu_adapter.graph.view import GraphView
from npu_adapter.passes import PassContext, PassManager, get_pass
from npu_adapter.pipeline.graph_config import read_graph_config
from npu_adapter.testing import GraphBuilder, assert_graph_equal, run_graph_def


def _ctx(**options):
    return PassContext(config=NpuConfig.from_dict(options))


def _composition_graph():
    b = GraphBuilder()
    b.placeholder("x", shape=[3])
    b.op("_UnaryOpsComposition", "comp", ["x"], T=tf.float32, op_names=["Neg", "Abs"])
    b.unary("Sqrt", "out", "comp")
    return b.graph_def()


def _expanded_graph():
    b = GraphBuilder()
    b.placeholder("x", shape=[3])
    b.unary("Neg", "comp_0_Neg", "x")
    b.unary("Abs", "comp_1_Abs", "comp_0_Neg")
    b.unary("Sqrt", "out", "comp_1_Abs")
    return b.graph_def()


def test_a_unary_composition_becomes_one_node_per_op():
    result = get_pass("read_graph_config")(_composition_graph(), _ctx())
    assert result.modified and result.info["unary_compositions_expanded"] == 1
    assert_graph_equal(result.graph_def, _expanded_graph())


def test_the_expanded_graph_computes_what_the_composition_computed():
    graph_def = _composition_graph()
    expanded = get_pass("read_graph_config")(graph_def, _ctx()).graph_def
    feeds = {"x:0": np.float32([-4.0, 0.25, 9.0])}
    before = run_graph_def(graph_def, ["comp:0", "out:0"], feeds)
    after = run_graph_def(expanded, ["comp_1_Abs:0", "out:0"], feeds)
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(after[1], np.float32([2.0, 0.5, 3.0]))


def test_a_name_already_taken_gets_an_underscore():
    b = GraphBuilder()
    b.placeholder("x", shape=[3])
    b.unary("Floor", "comp_0_Abs", "x")
    b.op("_UnaryOpsComposition", "comp", ["comp_0_Abs"], T=tf.float32, op_names=["Abs"])
    out = get_pass("read_graph_config")(b.graph_def(), _ctx()).graph_def
    assert [(n.name, n.op, list(n.input)) for n in out.node] == [
        ("x", "Placeholder", []), ("comp_0_Abs", "Floor", ["x"]),
        ("comp_0_Abs_", "Abs", ["comp_0_Abs"])]


def test_in_the_pipeline_the_next_pass_sees_the_expanded_nodes():
    manager = PassManager.from_pipeline("read_graph_config,mark_candidates")
    out = manager.run(_composition_graph(), _ctx()).graph_def
    placements = {n.name: n.attr["_npu_adapter_placement"].s for n in out.node}
    assert placements == {"x": b"host:graph_input", "comp_0_Neg": b"npu:supported",
                          "comp_1_Abs": b"npu:supported", "out": b"npu:supported"}


def test_a_graph_without_composition_is_returned_as_it_is():
    b = GraphBuilder()
    b.placeholder("x", shape=[1, 4, 4, 3])
    b.op("MaxPool", "pool", ["x"], T=tf.float32, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
         padding="VALID", data_format="NCHW")
    graph_def = b.graph_def()
    result = get_pass("read_graph_config")(graph_def, _ctx())
    assert result.graph_def is graph_def and not result.modified
    assert result.info == {"unary_compositions_expanded": 0, "data_format": "NCHW",
                           "dynamic_input": False}


# --------------------------------------------------------------------------- gating
def _gated(reason):
    graph_def = _composition_graph()
    if reason == "no_need_optimize":
        graph_def.node[1].attr["_NoNeedOptimize"].b = True
    if reason == "already_rewritten":
        graph_def.node[1].attr["_NpuOptimizer"].s = b"NpuOptimizer"
    return graph_def


@pytest.mark.parametrize("reason, config", [
    ("no_npu_optimizer", NpuConfig.from_config_proto(tf.compat.v1.ConfigProto())),
    ("job_ps", NpuConfig.from_dict({"job": "ps"})),
    ("use_off_line_false", NpuConfig.from_dict({"use_off_line": False})),
    ("no_need_optimize", NpuConfig.from_dict({})),
    ("already_rewritten", NpuConfig.from_dict({})),
])
def test_a_gated_graph_is_left_alone_by_every_gated_pass(reason, config):
    graph_def = _gated(reason)
    result = get_pass("read_graph_config")(graph_def, PassContext(config=config))
    assert result.graph_def is graph_def and result.info == {"skipped": reason}
    pipeline = PassManager.from_pipeline(
        "read_graph_config,mark_candidates,in_out_pair,cluster,encapsulate")
    outcome = pipeline.run(graph_def, PassContext(config=config))
    assert outcome.graph_def is graph_def and not outcome.modified
    assert {r.info["skipped"] for _, r in outcome.results} == {reason}


# --------------------------------------------------------------------------- checks
@pytest.mark.parametrize("options, graph, match", [
    ({"iterations_per_loop": 10}, "one_shot", "OneShotIterator 'it' cannot be used with "
                                              "iterations_per_loop=10"),
    ({}, "missing_mode", "node 'out' has _graph_dynamic_input but no "
                         "_graph_dynamic_graph_execute_mode"),
    ({"iterations_per_loop": 4}, "lazy", "iterations_per_loop only support 1 in "
                                         "lazy_recompile mode"),
])
def test_graph_level_conditions_the_original_rejects_are_rewrite_errors(options, graph, match):
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    if graph == "one_shot":
        b.op("OneShotIterator", "it", container="", shared_name="",
             output_types=[tf.float32])
    b.unary("Abs", "out", "x")
    if graph in ("missing_mode", "lazy"):
        b.set_attr("out", "_graph_dynamic_input", True)
    if graph == "lazy":
        b.set_attr("out", "_graph_dynamic_graph_execute_mode", "lazy_recompile")
    with pytest.raises(RewriteError, match=match) as info:
        get_pass("read_graph_config")(b.graph_def(), _ctx(**options))
    assert info.value.code == "InvalidArgument"


# --------------------------------------------------------------------------- the node walk
_OPS = ("IteratorGetNext", "RestoreV2", "OneShotIterator", "Conv2D", "NoOp")


@st.composite
def _config_graphs(draw):
    """Graphs of the ops the graph-config walk counts, with or without the attributes it reads
    (data_format, the gates, set_graph_exec_config's)."""
    graph_def = graph_pb2.GraphDef()
    for k in range(draw(st.integers(1, 8))):
        node = graph_def.node.add()
        node.name = f"n{k}"
        node.op = draw(st.sampled_from(_OPS))  # (the walk reads op types and attrs only)
        if draw(st.booleans()):
            node.attr["data_format"].s = draw(st.sampled_from([b"NHWC", b"NCHW", b""]))
        extra = draw(st.sampled_from([None] * 6 + ["_NoNeedOptimize", "_NpuOptimizer",
                                                   "_graph_dynamic_input", "dynamic_pair"]))
        if extra == "dynamic_pair":
            node.attr["_graph_dynamic_input"].b = draw(st.booleans())
            node.attr["_graph_dynamic_graph_execute_mode"].s = b"dynamic_execute"
        elif extra is not None:
            node.attr[extra].b = True
    return graph_def


def _reference(graph_def, config):
    """What the original's GetGraphConfig loop decides, node by node in one walk (the gate first,
    then the first error, then the settings): the outcome read_graph_config must give."""
    ipl = config.iterations_per_loop
    error = None
    counts = {"getnext": 0, "restore": False, "data_format": "", "dynamic": None}
    gate = None
    for node in graph_def.node:
        attrs = node.attr
        if gate is None and "_NoNeedOptimize" in attrs:
            gate = "no_need_optimize"
        elif gate is None and "_NpuOptimizer" in attrs:
            gate = "already_rewritten"
        if gate is not None or error is not None:
            continue
        if node.op == "IteratorGetNext":
            counts["getnext"] += 1
        elif node.op == "RestoreV2":
            counts["restore"] = True
        elif node.op == "OneShotIterator" and ipl != 1:
            error = f"OneShotIterator {node.name!r}"
            continue
        if not counts["data_format"] and "data_format" in attrs:
            counts["data_format"] = attrs["data_format"].s.decode()
        if "_graph_dynamic_input" in attrs:
            if "_graph_dynamic_graph_execute_mode" not in attrs:
                error = f"node {node.name!r} has _graph_dynamic_input but no"
                continue
            counts["dynamic"] = node.attr["_graph_dynamic_input"].b
    if gate is not None:
        return ("skipped", gate)
    if not config.use_off_line:
        return ("skipped", "use_off_line_false")
    if error is not None:
        return ("error", error)
    return ("config", counts["getnext"], counts["restore"], counts["data_format"] or "ND",
            bool(counts["dynamic"]) if counts["dynamic"] is not None else False)


@settings(max_examples=300, deadline=None)
@given(_config_graphs(), st.sampled_from([1, 3]), st.booleans())
def test_the_graph_config_is_the_one_walk_of_the_original(graph_def, loops, off_line):
    config = NpuConfig.from_dict({"iterations_per_loop": loops, "use_off_line": off_line})
    expected = _reference(graph_def, config)
    try:
        found = read_graph_config(GraphView(graph_def), config)
    except RewriteError as exc:
        assert expected[0] == "error" and expected[1] in str(exc)
        return
    if found.skipped:
        assert expected == ("skipped", found.skip_reason)
    else:
        assert expected == ("config", found.getnext_count, found.is_var_init_graph,
                            found.data_format, found.dynamic_input)
