"""verify_graph: every structural problem is reported at once, with the node involved."""

import pytest
import tensorflow as tf
from graph_cases import build_geop_graph, mix_compile_graph, while_loop_v1_graph
from tensorflow.core.framework import attr_value_pb2, function_pb2

from npu_adapter.errors import GraphError, GraphInvariantError
from npu_adapter.graph.verify import Violation, check_graph, verify_graph
from npu_adapter.testing import GraphBuilder


def _kinds(violations):
    return sorted((v.kind, v.node) for v in violations)


def _func_attr(name):
    av = attr_value_pb2.AttrValue()
    av.func.name = name
    return av


def _function(name, body_op="Identity", attrs=None):
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = name
    fdef.signature.input_arg.add(name="x", type=tf.float32.as_datatype_enum)
    fdef.signature.output_arg.add(name="y", type=tf.float32.as_datatype_enum)
    node = fdef.node_def.add(name="inner", op=body_op, input=["x"])
    node.attr["T"].type = tf.float32.as_datatype_enum
    for key, value in (attrs or {}).items():
        node.attr[key].CopyFrom(value)
    fdef.ret["y"] = "inner:output:0"
    return fdef


@pytest.mark.parametrize("factory", [build_geop_graph, mix_compile_graph, while_loop_v1_graph])
def test_valid_graphs_have_no_violations(factory):
    gd = factory()
    assert verify_graph(gd) == []
    check_graph(gd)  # does not raise


def test_v1_while_loop_passes_but_a_real_cycle_next_to_it_does_not():
    gd = while_loop_v1_graph()
    assert verify_graph(gd) == []
    # Break the loop's protection: the back edge now leaves an Identity, not a NextIteration.
    for node in gd.node:
        if node.op == "NextIteration":
            node.op = "Identity"
    (violation,) = verify_graph(gd)
    assert violation.kind == "cycle"
    assert "while/Merge" in violation.message and "while/NextIteration" in violation.message


def _everything_wrong():
    """One graph with one problem of each kind (plus a valid v1-style back edge)."""
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.placeholder("x", shape=[2])                                  # duplicate_name
    b.unary("Abs", "_bad name", "x")                               # invalid_name
    b.op("Add", "misordered", ["^x", "x", "x"], T=tf.float32)      # control_before_data
    b.unary("Abs", "dangling", "nowhere:1")                        # dangling_input
    b.unary("Abs", "port", "x:3")                                  # port_out_of_range
    b.binary("Add", "loop_a", "x", "loop_b")                       # cycle
    b.unary("Abs", "loop_b", "loop_a")
    b.op("If", "calls_missing", ["x", "x"], Tcond=tf.float32, Tin=[tf.float32],
         Tout=[tf.float32], then_branch=_func_attr("present_fn"),
         else_branch=_func_attr("absent_fn"))                      # missing_function (attr)
    b.add_function(_function("present_fn"))
    b.add_function(_function("library_fn", body_op="PartitionedCall",
                             attrs={"f": _func_attr("gone_fn")}))  # missing_function (library)
    return b.graph_def()


def test_all_violations_are_reported_at_once():
    violations = verify_graph(_everything_wrong())
    assert _kinds(violations) == [
        ("control_before_data", "misordered"),
        ("cycle", "loop_a"),
        ("dangling_input", "dangling"),
        ("duplicate_name", "x"),
        ("invalid_name", "_bad name"),
        ("missing_function", "calls_missing"),
        ("missing_function", "library_fn/inner"),
        ("port_out_of_range", "port"),
    ]
    text = {v.kind: v.message for v in violations}
    assert "'nowhere'" in text["dangling_input"] and "'nowhere:1'" in text["dangling_input"]
    assert "reads output 3 of 'x' (Placeholder), which has 1 output(s)" in \
        text["port_out_of_range"]
    assert "loop_a -> loop_b -> loop_a" in text["cycle"] or \
        "loop_b -> loop_a -> loop_b" in text["cycle"]
    missing = {v.node: v.message for v in violations if v.kind == "missing_function"}
    assert "attr 'else_branch' references function 'absent_fn'" in missing["calls_missing"]
    assert "function 'library_fn' node 'inner' attr 'f' references function 'gone_fn'" in \
        missing["library_fn/inner"]


def test_check_graph_raises_with_every_violation_and_the_context():
    with pytest.raises(GraphInvariantError) as info:
        check_graph(_everything_wrong(), context="after pass 'x'")
    err = info.value
    assert isinstance(err, GraphError)
    assert len(err.violations) == 8 and err.context == "after pass 'x'"
    assert str(err).startswith("after pass 'x': graph has 8 invariant violation(s):")
    assert all(f"  - {v}" in str(err) for v in err.violations)


def test_violation_text_shows_the_kind():
    v = Violation("dangling_input", "n", "node 'n' has input 'm'")
    assert str(v) == "[dangling_input] node 'n' has input 'm'"
    assert v.kind == "dangling_input" and v.node == "n"


def test_ports_in_range_and_unknown_producers_are_accepted():
    b = GraphBuilder()
    b.placeholder("x", shape=[4])
    b.op("Unique", "u", ["x"], T=tf.float32, out_idx=tf.int32)
    b.unary("Abs", "first", "u")
    b.op("Identity", "second", ["u:1"], T=tf.int32)
    b.op("NotRegistered", "mystery", ["x"])
    b.op("Identity", "reads_mystery", ["mystery:7"], T=tf.float32)
    assert verify_graph(b.graph_def()) == []


def test_port_check_can_be_turned_off():
    b = GraphBuilder()
    b.placeholder("x")
    b.unary("Abs", "a", "x:2")
    assert _kinds(verify_graph(b.graph_def())) == [("port_out_of_range", "a")]
    assert verify_graph(b.graph_def(), check_ports=False) == []


def test_function_lists_and_registered_ops_count_as_present():
    b = GraphBuilder()
    b.placeholder("x")
    av = attr_value_pb2.AttrValue()
    av.list.func.add(name="present_fn")
    av.list.func.add(name="Identity")     # a registered op name is a valid function reference
    av.list.func.add(name="absent_list_fn")
    b.op("Case", "case", ["x", "x"], Tin=[tf.float32], Tout=[tf.float32], branches=av)
    b.add_function(_function("present_fn"))
    violations = verify_graph(b.graph_def())
    assert _kinds(violations) == [("missing_function", "case")]
    assert "'absent_list_fn'" in violations[0].message


def test_functions_referenced_only_inside_the_library_are_checked():
    b = GraphBuilder()
    b.placeholder("x")
    b.add_function(_function("outer", body_op="PartitionedCall", attrs={"f": _func_attr("mid")}))
    b.add_function(_function("mid", body_op="PartitionedCall", attrs={"f": _func_attr("leaf")}))
    assert _kinds(verify_graph(b.graph_def())) == [("missing_function", "mid/inner")]
    b.add_function(_function("leaf"))
    assert verify_graph(b.graph_def()) == []


def test_op_registry_check_is_opt_in():
    b = GraphBuilder()
    b.placeholder("x")
    b.op("NoSuchOp", "weird", ["x"])
    b.op("GeOp", "geop", ["x"], Tin=[tf.float32], Tout=[tf.float32])
    b.add_function(_function("lib_fn"))
    b.op("lib_fn", "call", ["x"])
    gd = b.graph_def()
    assert verify_graph(gd) == []
    violations = verify_graph(gd, check_op_registry=True)
    assert _kinds(violations) == [("unknown_op", "weird")]
    assert "'NoSuchOp'" in violations[0].message
    assert _kinds(verify_graph(gd, check_op_registry=True, allowed_unregistered_ops=())) == [
        ("unknown_op", "geop"), ("unknown_op", "weird")]


def test_a_prebuilt_view_gives_the_same_answer():
    from npu_adapter.graph.view import GraphView

    gd = _everything_wrong()
    assert verify_graph(gd, view=GraphView(gd)) == verify_graph(gd)


def test_verify_does_not_modify_the_graph():
    gd = _everything_wrong()
    before = gd.SerializeToString(deterministic=True)
    verify_graph(gd, check_op_registry=True)
    assert gd.SerializeToString(deterministic=True) == before
