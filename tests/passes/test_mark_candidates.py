"""``mark_candidates``: every node gets ``_npu_adapter_placement`` = ``"npu:<reason>"`` (a
candidate for a cluster) or ``"host:<reason>"``; nothing else changes.

With the op list {Placeholder, Abs, Neg}::

    x (Placeholder) ─► a (Abs) ─► f (Floor) ─► n (Neg)
  becomes
    x [host:graph_input] ─► a [npu:supported] ─► f [host:unsupported_op] ─► n [npu:supported]

(the CPU reference keeps graph inputs on the host: the session feeds them).
"""

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import mix_compile_graph

from npu_adapter.config import NpuConfig
from npu_adapter.op_support import OpSupportList
from npu_adapter.passes import PassContext, PassManager, get_pass
from npu_adapter.testing import GraphBuilder, assert_graph_equal
from npu_adapter.vocabulary import PLACEMENT_ATTR

OPS = OpSupportList.from_names(["Placeholder", "Abs", "Neg", "Add", "Const", "Identity",
                                "VariableV2"])


def _ctx(ops=OPS, **options):
    return PassContext(config=NpuConfig.from_dict(options), op_support=ops)


def _placements(graph_def):
    return {n.name: n.attr[PLACEMENT_ATTR].s.decode() for n in graph_def.node}


def _chain():
    b = GraphBuilder()
    b.placeholder("x", shape=[3])
    b.unary("Abs", "a", "x")
    b.unary("Floor", "f", "a")
    b.unary("Neg", "n", "f")
    return b


def test_every_node_is_annotated_and_nothing_else_changes():
    b = _chain()
    graph_def = b.graph_def()
    result = get_pass("mark_candidates")(graph_def, _ctx())
    for name, value in [("x", "host:graph_input"), ("a", "npu:supported"),
                        ("f", "host:unsupported_op"), ("n", "npu:supported")]:
        b.set_attr(name, PLACEMENT_ATTR, value)
    assert_graph_equal(result.graph_def, b.graph_def())
    assert result.modified and result.info == {"candidates": 2, "host": 2}
    assert PLACEMENT_ATTR not in graph_def.node[0].attr  # the input is never edited


def test_through_the_pipeline_text_and_again_on_its_own_output():
    alone = get_pass("mark_candidates")(_chain().graph_def(), _ctx()).graph_def
    piped = PassManager.from_pipeline("mark_candidates").run(_chain().graph_def(), _ctx())
    assert_graph_equal(piped.graph_def, alone)
    again = get_pass("mark_candidates")(alone, _ctx())
    assert again.graph_def is alone and not again.modified


def test_a_ref_edge_never_crosses_the_boundary():
    """v (VariableV2) ═ref═► assign (Assign, not supported): the variable follows it to the
    host, or the cluster would hand a ref tensor out."""
    b = GraphBuilder()
    b.op("VariableV2", "v", dtype=tf.float32, shape=[2], container="", shared_name="")
    b.const("init", np.ones([2], np.float32))
    b.op("Assign", "assign", ["v", "init"], T=tf.float32)
    b.op("Identity", "read", ["v"], T=tf.float32)
    placements = _placements(get_pass("mark_candidates")(b.graph_def(), _ctx()).graph_def)
    assert placements["assign"] == "host:unsupported_op"
    assert placements["v"] == "host:ref_edge"
    assert placements["read"] == "npu:supported"  # Identity reads the value, not the ref


def test_constants_follow_their_consumers():
    """c ─► add (Add) ─► f (Floor, host) ─► g (Floor, host) ◄─ d: c goes to the device with
    add; d feeds host nodes only."""
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.const("c", np.ones([2], np.float32))
    b.binary("Add", "add", "x", "c")
    b.unary("Floor", "f", "add")
    b.const("d", np.ones([2], np.float32))
    b.binary("Mul", "g", "f", "d")
    placements = _placements(get_pass("mark_candidates")(b.graph_def(), _ctx()).graph_def)
    assert placements["c"] == "npu:const_follows_consumer"
    assert placements["d"] == "host:const_without_device_consumer"


def test_without_npu_compile_keeps_a_node_on_the_host():
    b = _chain()
    b.set_attr("a", "_without_npu_compile", True)
    placements = _placements(get_pass("mark_candidates")(b.graph_def(), _ctx()).graph_def)
    assert placements["a"] == "host:without_npu_compile_scope"
    assert placements["n"] == "npu:supported"


def test_unique_is_gray_in_the_bundled_list_so_mix_mode_keeps_it_on_host():
    """RandomUniformInt ─► Unique ─► ArgMax (graph_cases.mix_compile_graph, no scope)."""
    graph_def = mix_compile_graph(without_scope=False)
    mix = get_pass("mark_candidates")(graph_def, PassContext(
        config=NpuConfig.from_dict({"mix_compile_mode": True})))
    assert _placements(mix.graph_def)["Unique"] == "host:gray_op_in_mix_mode"
    full = get_pass("mark_candidates")(graph_def, PassContext(config=NpuConfig.from_dict({})))
    assert _placements(full.graph_def)["Unique"] == "npu:supported"


@pytest.mark.parametrize("op, reason", [("OutfeedDequeueOp", "outfeed_graph")])
def test_a_host_call_graph_gets_no_candidate(op, reason):
    b = _chain()
    b.op(op, "outfeed", dtypes=[tf.float32], device_ordinal=0)
    placements = _placements(get_pass("mark_candidates")(b.graph_def(), _ctx()).graph_def)
    assert set(placements.values()) == {f"host:{reason}"}
