"""``encapsulate``: every cluster (the nodes whose ``_subgraphs`` names it) becomes one ``GeOp``
node calling a FunctionDef of the same name; the annotations end here.

With the op list {Abs, Neg}::

    init (NoOp) ┄┄► a (Abs) ─► n (Neg) ─► out (Floor)          a, n: _subgraphs GeOp1_0
    x ────────────►┘
  becomes
    init ┄┄► GeOp1_0 ─► out        GeOp1_0(x_0_arg) { a = Abs(x_0_arg); n = Neg(a:y:0) }
    x ─────►┘                          returns n_0_retval = n:y:0

(┄┄► is a control edge: it is lifted onto the cluster node, which records that it was ``a``'s.)
"""

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.config import NpuConfig
from npu_adapter.errors import RewriteError
from npu_adapter.op_support import OpSupportList
from npu_adapter.passes import PassContext, PassManager, get_pass
from npu_adapter.testing import GraphBuilder, canonical_edges, run_graph_def
from npu_adapter.vocabulary import CLUSTER_ATTR, PLACEMENT_ATTR

OPS = OpSupportList.from_names(["Abs", "Neg", "Mul", "Const"])


def _ctx(**options):
    return PassContext(config=NpuConfig.from_dict(options), op_support=OPS)


def _chain():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.op("NoOp", "init")
    b.op("Abs", "a", ["x", "^init"], T=tf.float32)
    b.unary("Neg", "n", "a")
    b.unary("Floor", "out", "n")
    return b


def _clustered():
    """_chain() as mark_candidates and cluster leave it, annotated by hand."""
    b = _chain()
    for name, placement in [("x", "host:unsupported_op"), ("init", "host:unsupported_op"),
                            ("a", "npu:supported"), ("n", "npu:supported"),
                            ("out", "host:unsupported_op")]:
        b.set_attr(name, PLACEMENT_ATTR, placement)
    for name in ("a", "n"):
        b.set_attr(name, CLUSTER_ATTR, "GeOp1_0")
    return b.graph_def()


def _body(graph_def, name):
    fdef = next(f for f in graph_def.library.function if f.signature.name == name)
    return [(n.name, n.op, list(n.input)) for n in fdef.node_def], fdef


def test_a_cluster_becomes_one_node_calling_its_function():
    result = get_pass("encapsulate")(_clustered(), _ctx())
    out = result.graph_def
    assert [(n.name, n.op, list(n.input)) for n in out.node] == [
        ("x", "Placeholder", []), ("init", "NoOp", []), ("GeOp1_0", "GeOp", ["x", "^init"]),
        ("out", "Floor", ["GeOp1_0"])]
    geop = out.node[2]
    assert geop.attr["function"].func.name == "GeOp1_0"
    assert list(geop.attr["_npu_adapter_inputs"].list.s) == [b"x:0"]
    assert list(geop.attr["_npu_adapter_outputs"].list.s) == [b"n:0"]
    assert geop.attr["_NpuOptimizer"].s == b"NpuOptimizer"  # the options, as the original
    # The lifted control edge: body node a's input 1 was ^init.
    assert list(geop.attr["_npu_adapter_control_inputs"].list.s) == [b"a 1 init init"]
    body, fdef = _body(out, "GeOp1_0")
    assert body == [("a", "Abs", ["x_0_arg"]), ("n", "Neg", ["a:y:0"])]
    assert [a.name for a in fdef.signature.input_arg] == ["x_0_arg"]
    assert dict(fdef.ret) == {"n_0_retval": "n:y:0"}
    # The bookkeeping annotations end here; the nodes keep every other attribute.
    nodes = list(out.node) + list(fdef.node_def)
    assert not any(PLACEMENT_ATTR in n.attr or CLUSTER_ATTR in n.attr for n in nodes)
    assert result.info == {"clusters": 1, "inputs": {"GeOp1_0": 1},
                           "outputs": {"GeOp1_0": 1}, "run_outside": 0}


def test_through_the_pipeline_text_it_gives_what_it_gives_alone():
    piped = PassManager.from_pipeline("mark_candidates,cluster,encapsulate").run(
        _chain().graph_def(), _ctx()).graph_def
    alone = get_pass("encapsulate")(get_pass("cluster")(get_pass("mark_candidates")(
        _chain().graph_def(), _ctx()).graph_def, _ctx()).graph_def, _ctx()).graph_def
    assert piped.SerializeToString(deterministic=True) == \
        alone.SerializeToString(deterministic=True)
    assert canonical_edges(piped) == ["GeOp1_0->out", "init:control->GeOp1_0:control",
                                      "x->GeOp1_0"]


def test_the_encapsulated_graph_computes_what_plain_tensorflow_computes():
    graph_def = _chain().graph_def()
    out = PassManager.from_pipeline("mark_candidates,cluster,encapsulate,lower").run(
        graph_def, _ctx()).graph_def
    feeds = {"x:0": np.float32([-1.5, 2.5])}
    np.testing.assert_array_equal(run_graph_def(out, ["out:0"], feeds)[0],
                                  run_graph_def(graph_def, ["out:0"], feeds)[0])


def test_mix_mode_copies_a_constant_into_each_cluster_that_reads_it():
    """CopyConstBetweenGeOp::

        c (Const) ─► m1 (Mul x c) ─► h (Floor) ─► m2 (Mul h c)
        └──────────────────────────────────────►┘
      becomes GeOp1_0 { c, m1 } ─► h ─► GeOp1_1 { c_copied, m2 }, with ^GeOp1_0 on GeOp1_1
      (the control edge from the original Const to its copy)."""
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.const("c", np.float32([2, 3]))
    b.binary("Mul", "m1", "x", "c")
    b.unary("Floor", "h", "m1")
    b.binary("Mul", "m2", "h", "c")
    graph_def = b.graph_def()
    out = PassManager.from_pipeline("mark_candidates,cluster,encapsulate").run(
        graph_def, _ctx(mix_compile_mode=True)).graph_def
    assert [(n.name, list(n.input)) for n in out.node] == [
        ("x", []), ("GeOp1_0", ["x"]), ("h", ["GeOp1_0"]), ("GeOp1_1", ["h", "^GeOp1_0"])]
    assert _body(out, "GeOp1_1")[0] == [("c_copied", "Const", []),
                                         ("m2", "Mul", ["h_0_arg", "c_copied:output:0"])]
    # The control edge waits for c, a member of GeOp1_0; it is c_copied's.
    assert list(out.node[3].attr["_npu_adapter_control_inputs"].list.s) == \
        [b"c_copied 0 GeOp1_0 c"]
    again = PassManager.from_pipeline("mark_candidates,cluster,encapsulate").run(
        b.graph_def(), _ctx(mix_compile_mode=True)).graph_def
    assert again.SerializeToString(deterministic=True) == out.SerializeToString(deterministic=True)
    lowered = get_pass("lower")(out, _ctx()).graph_def
    feeds = {"x:0": np.float32([1.5, -2.25])}
    np.testing.assert_array_equal(run_graph_def(lowered, ["GeOp1_1:0"], feeds)[0],
                                  run_graph_def(graph_def, ["m2:0"], feeds)[0])


def test_a_ref_tensor_crossing_the_boundary_is_the_originals_error():
    """v (VariableV2, host) ═ref═► assign (Assign, clustered): a function cannot take a ref."""
    b = GraphBuilder()
    b.op("VariableV2", "v", dtype=tf.float32, shape=[2], container="", shared_name="")
    b.const("c", np.float32([1, 2]))
    b.op("Assign", "assign", ["v", "c"], T=tf.float32)
    b.set_attr("v", PLACEMENT_ATTR, "host:unsupported_op")
    for name in ("c", "assign"):
        b.set_attr(name, PLACEMENT_ATTR, "npu:supported")
        b.set_attr(name, CLUSTER_ATTR, "GeOp1_0")
    with pytest.raises(RewriteError, match="Ref Tensors .* are not supported as args") as info:
        get_pass("encapsulate")(b.graph_def(), PassContext(backend="original_like"))
    assert info.value.code == "InvalidArgument"


def test_without_clusters_the_graph_is_returned_as_it_is():
    b = _chain()
    for name in ("x", "init", "a", "n", "out"):
        b.set_attr(name, PLACEMENT_ATTR, "host:unsupported_op")
    graph_def = b.graph_def()
    result = get_pass("encapsulate")(graph_def, _ctx())
    assert result.graph_def is graph_def and result.info == {"clusters": 0}
