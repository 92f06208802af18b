"""Bad input for partitioning: every failure is a named error and leaves the input untouched.

(The malformed in_out_pair strings are in test_partition_scenarios.py; these are
further shapes of bad input, each also checked for "nothing half-rewritten".)
"""

import pytest
import tensorflow as tf
from graph_cases import chain_with_branch, control_flow_v1

from npu_adapter import rewrite
from npu_adapter.errors import (
    GraphError,
    GraphInvariantError,
    NpuAdapterError,
    NpuConfigError,
    RewriteError,
)
from npu_adapter.graph.serialize import to_bytes
from npu_adapter.op_support import OpSupportList
from npu_adapter.testing import GraphBuilder

tf1 = tf.compat.v1
OPS = OpSupportList.from_names(["Abs", "Floor", "Add", "Mul", "Neg", "Identity"])


def _rewrite_fails(graph_def, error, match=None, options=None, **kwargs):
    """Rewrite must raise ``error`` and leave ``graph_def`` byte-identical; returns the error."""
    before = to_bytes(graph_def)
    with pytest.raises(error, match=match) as info:
        rewrite(graph_def, options if options is not None else {}, op_support=OPS, **kwargs)
    assert to_bytes(graph_def) == before, "the input GraphDef was modified"
    assert isinstance(info.value, NpuAdapterError)
    return info.value


# --------------------------------------------------------------------------- in_out_pair
@pytest.mark.parametrize("text", [
    "[['A'],['C']]",                 # two bracket levels (one pair, not a list of pairs)
    "[[['A'],['C']]",                # unbalanced: missing ]
    "[[['A'],['C']]]]",              # unbalanced: extra ]
    "[[['A'],['C']]] [[['B'],['D']]]",  # two lists
    "   ",                           # empty (blank)
    "[[[''],['C']]]",                # empty node name
    "[[['A']]]",                     # a pair with one list
    "[[['A'],['C'],['D']]]",         # a pair with three lists
    "'A'",                           # not a list
    "42",                            # not a list
    "{'A': ['C']}",                  # a dict
    "(('A',),('C',))",               # tuples
    "[[['A\"B'],['C']]]",            # a quote inside a name
    "[[[\"it's\"],['C']]]",          # an apostrophe inside a name
    "[[['A' 'B'],['C']]]",           # missing comma
    "[[['A'],['C']]]trailing",       # trailing garbage
])
def test_malformed_in_out_pair_is_a_config_error(text):
    err = _rewrite_fails(chain_with_branch(), NpuConfigError, "in_out_pair",
                         {"mix_compile_mode": True, "in_out_pair": text})
    assert err.option == "in_out_pair"
    assert isinstance(err, ValueError)
    assert "e.g." in str(err)  # says what would be valid


def test_in_out_pair_error_names_the_offset():
    err = _rewrite_fails(chain_with_branch(), NpuConfigError, None,
                         {"mix_compile_mode": True, "in_out_pair": "[[['A'];['C']]]"})
    assert "at offset 7" in str(err) and err.value == ";"


def test_in_out_pair_region_with_unsupported_node_fails_in_its_pass():
    """The error comes after mark_candidates already annotated a copy: still nothing leaks."""
    b = GraphBuilder()
    b.placeholder("in", shape=[3])
    b.unary("Abs", "A", "in")
    b.unary("Tan", "B", "A")
    b.unary("Abs", "C", "B")
    err = _rewrite_fails(b.graph_def(), RewriteError, "B is not supported npu node.",
                         {"mix_compile_mode": True, "in_out_pair": "[[['A'],['C']]]"})
    assert err.code == "Internal" and err.node == "B"
    assert err.pass_name == "in_out_pair"
    assert err.previous_passes == ["read_graph_config", "mark_candidates"]


# --------------------------------------------------------------------------- cycles
def _cycle_graph(control=False):
    """x ─► a(Add x, b) ─► b(Abs) ─► a: a cycle (through a control edge when ``control``)."""
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    if control:
        b.op("Abs", "a", ["x", "^b"], T=tf.float32)
    else:
        b.binary("Add", "a", "x", "b")
    b.unary("Abs", "b", "a")
    b.unary("Neg", "out", "b")
    return b.graph_def()


@pytest.mark.parametrize("control", [False, True])
@pytest.mark.parametrize("kwargs", [{}, {"fetches": ["out:0"]}, {"fetches": ["out"],
                                                                   "feeds": ["x"]}])
def test_a_cycle_is_an_unimplemented_rewrite_error(control, kwargs):
    err = _rewrite_fails(_cycle_graph(control), RewriteError, "Input graph has a cycle", **kwargs)
    assert err.code == "Unimplemented"
    assert err.node in ("a", "b")
    assert "a -> b -> a" in str(err) or "b -> a -> b" in str(err)


def test_a_cycle_next_to_a_valid_v1_loop_is_still_an_error():
    g = tf.Graph()
    with g.as_default(), control_flow_v1():
        x = tf1.placeholder(tf.float32, [2], name="x")
        tf1.while_loop(lambda i: i < 3, lambda i: i + 1, [tf.constant(0)], name="loop")
        tf.abs(x, name="a")
    gd = g.as_graph_def()
    for node in gd.node:
        if node.name == "a":
            node.input.append("^a_tail")
    tail = gd.node.add(name="a_tail", op="Identity", input=["a"])
    tail.attr["T"].type = tf.float32.as_datatype_enum
    err = _rewrite_fails(gd, RewriteError, "cycle")
    assert err.code == "Unimplemented"
    assert "loop/" not in str(err)  # the loop's back edge is not the cycle


# --------------------------------------------------------------------------- run signature
@pytest.mark.parametrize("kwargs, match", [
    ({"fetches": ["nope:0"]}, "fetch 'nope:0': the graph has no node named 'nope'"),
    ({"fetches": ["D"], "feeds": ["ghost:0"]}, "feed 'ghost:0': the graph has no node named"),
    ({"targets": ["not_there"]}, "target 'not_there'"),
    ({"fetches": ["D:3"]}, "fetch 'D:3': node 'D' \\(Floor\\) has 1 output"),
    ({"fetches": ["^D"]}, "fetch '\\^D' names an operation"),
    ({"feeds": ["in:0"]}, "feeds need fetches or targets"),
])
def test_unknown_fetch_feed_or_target_is_a_graph_error(kwargs, match):
    _rewrite_fails(chain_with_branch(), GraphError, match, **kwargs)


def test_structurally_invalid_graph_lists_every_violation():
    gd = chain_with_branch()
    gd.node[1].input.append("missing_node")
    dup = gd.node.add()
    dup.CopyFrom(gd.node[2])
    err = _rewrite_fails(gd, GraphInvariantError, "input graph")
    kinds = sorted(v.split("]")[0] + "]" for v in err.violations)
    assert kinds == ["[dangling_input]", "[duplicate_name]"]


def test_not_a_graph_def_is_a_type_error():
    with pytest.raises(TypeError, match="graph_def must be a GraphDef, got str"):
        rewrite("graph", {})


def test_invalid_option_value_is_a_config_error_before_anything_runs():
    err = _rewrite_fails(chain_with_branch(), NpuConfigError, "mix_compile_mode",
                         {"mix_compile_mode": "perhaps"})
    assert err.option == "mix_compile_mode"


def test_a_failed_rewrite_does_not_spoil_the_next_one():
    gd = chain_with_branch()
    _rewrite_fails(gd, NpuConfigError, None, {"mix_compile_mode": True, "in_out_pair": "[["})
    res = rewrite(gd, {"mix_compile_mode": True, "in_out_pair": "[[['A'],['C']]]"},
                  op_support=OPS, fetches=["D:0", "E:0"])
    assert [set(c.nodes) for c in res.clusters] == [{"A", "B", "C"}]
