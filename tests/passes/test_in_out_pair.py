"""``in_out_pair``: the option ``in_out_pair`` names the device region as in/out node pairs; the
pass replaces ``mark_candidates``' placements by that region (or its complement).

graph_cases.chain_with_branch, with ``in_out_pair = [[['A'],['C']]]`` (the region is every node
on a path from A to C)::

    in ─► A ─► B ─► C ─► D             flag true (default):  A, B, C  npu:in_out_pair_region
               └──► E                                        in, D, E host:in_out_pair_excluded
                                       flag false:           A, B, C  host:in_out_pair_region
                                                             D, E     npu:supported
"""

import numpy as np
import pytest
from graph_cases import chain_with_branch

from npu_adapter.config import NpuConfig
from npu_adapter.errors import RewriteError
from npu_adapter.op_support import OpSupportList
from npu_adapter.passes import PassContext, PassManager, get_pass
from npu_adapter.passes.in_out_pair import InOutPairWarning
from npu_adapter.testing import GraphBuilder, run_graph_def
from npu_adapter.vocabulary import PLACEMENT_ATTR

REGION = "[[['A'],['C']]]"


def _ctx(**options):
    return PassContext(config=NpuConfig.from_dict(dict({"mix_compile_mode": True}, **options)))


def _placements(graph_def):
    return {n.name: n.attr[PLACEMENT_ATTR].s.decode() for n in graph_def.node}


def _marked(graph_def, ctx):
    return get_pass("mark_candidates")(graph_def, ctx).graph_def


def test_the_region_goes_to_the_device_and_the_rest_stays_on_the_host():
    ctx = _ctx(in_out_pair=REGION)
    marked = _marked(chain_with_branch(), ctx)
    result = get_pass("in_out_pair")(marked, ctx)
    assert _placements(result.graph_def) == {
        "in": "host:in_out_pair_excluded", "A": "npu:in_out_pair_region",
        "B": "npu:in_out_pair_region", "C": "npu:in_out_pair_region",
        "D": "host:in_out_pair_excluded", "E": "host:in_out_pair_excluded"}
    assert result.info["region"] == 3 and result.info["changed_from_default"]


def test_with_the_flag_false_the_region_stays_on_the_host():
    ctx = _ctx(in_out_pair=REGION, in_out_pair_flag=False)
    out = PassManager.from_pipeline("mark_candidates,in_out_pair").run(chain_with_branch(), ctx)
    assert _placements(out.graph_def) == {
        "in": "host:graph_input", "A": "host:in_out_pair_region",
        "B": "host:in_out_pair_region", "C": "host:in_out_pair_region",
        "D": "npu:supported", "E": "npu:supported"}


def test_the_clusters_follow_the_region_and_compute_what_plain_tensorflow_computes():
    graph_def = chain_with_branch()
    ctx = _ctx(in_out_pair=REGION)
    out = PassManager.from_pipeline(
        "mark_candidates,in_out_pair,cluster,encapsulate,lower,finalize").run(graph_def, ctx)
    geops = [n for n in out.graph_def.node if n.op == "StatefulPartitionedCall"]
    assert [n.attr["_npu_adapter_outputs"].list.s for n in geops] == [[b"C:0", b"B:0"]]
    feeds = {"in:0": np.float32([-1.5, 2.25, -3.75])}
    np.testing.assert_array_equal(run_graph_def(out.graph_def, ["D:0", "E:0"], feeds),
                                  run_graph_def(graph_def, ["D:0", "E:0"], feeds))


def test_without_the_option_the_pass_changes_nothing():
    marked = _marked(chain_with_branch(), _ctx())
    result = get_pass("in_out_pair")(marked, _ctx())
    assert result.graph_def is marked and result.info == {"active": False}


def test_an_unknown_node_skips_its_entry_and_keeps_mark_candidates_placements():
    ctx = _ctx(in_out_pair="[[['nope'],['C']]]")
    marked = _marked(chain_with_branch(), ctx)
    with pytest.warns(InOutPairWarning, match="in-node 'nope' is not in the graph"):
        result = get_pass("in_out_pair")(marked, ctx)
    assert result.graph_def is marked
    assert result.info == {"active": True, "fallback": True, "skipped_entries": ["nope"]}


def test_an_unsupported_node_in_the_region_is_the_originals_error():
    """in ─► A (Abs) ─► B (Tan, not supported) ─► C (Abs)."""
    b = GraphBuilder()
    b.placeholder("in", shape=[3])
    b.unary("Abs", "A", "in")
    b.unary("Tan", "B", "A")
    b.unary("Abs", "C", "B")
    ctx = PassContext(config=NpuConfig.from_dict({"mix_compile_mode": True,
                                                  "in_out_pair": REGION}),
                      op_support=OpSupportList.from_names(["Placeholder", "Abs"]))
    with pytest.raises(RewriteError, match="B is not supported npu node.") as info:
        get_pass("in_out_pair")(_marked(b.graph_def(), ctx), ctx)
    assert info.value.code == "Internal" and info.value.node == "B"


def test_it_needs_the_placements_of_mark_candidates():
    with pytest.raises(Exception, match="run 'mark_candidates' before it"):
        get_pass("in_out_pair")(chain_with_branch(), _ctx(in_out_pair=REGION))
