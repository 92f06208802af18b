"""``insert_gears``: a cluster with dynamic inputs becomes one static-shape copy per gear and a
dispatcher that picks the gear from the runtime shapes.

With ``input_shape = "x:-1,4"``, ``dynamic_dims = "1;2"``, ``dynamic_node_type = 1``::

    x [?, 4] ─► GeOp1_0 { r = Relu(x); out = Neg(r) }
  becomes
    x ─► GeOp1_0 (_npu_adapter_gears ["x:0:1,4", "x:0:2,4"])
         GeOp1_0        = check rank ─► pick the gear (exact) ─► Case(GeOp1_0_gear_0,
                                                                       GeOp1_0_gear_1)
         GeOp1_0_gear_g = the cluster's body with x pinned to [g + 1, 4] (EnsureShape)
"""

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.config import NpuConfig
from npu_adapter.passes import PassContext, PassManager, get_pass
from npu_adapter.testing import GraphBuilder, run_graph_def

GEARS = {"input_shape": "x:-1,4", "dynamic_dims": "1;2", "dynamic_node_type": 1}


def _graph():
    b = GraphBuilder()
    b.placeholder("x", shape=[None, 4])
    b.unary("Relu", "r", "x")
    b.unary("Neg", "out", "r")
    return b.graph_def()


def _encapsulated(options):
    ctx = PassContext(config=NpuConfig.from_dict(options))
    return PassManager.from_pipeline("mark_candidates,cluster,encapsulate").run(
        _graph(), ctx).graph_def, ctx


def test_each_gear_gets_a_static_copy_and_the_cluster_a_dispatcher():
    graph_def, ctx = _encapsulated(GEARS)
    result = get_pass("insert_gears")(graph_def, ctx)
    assert result.info == {"source": "dynamic_dims", "gears": {"GeOp1_0": 2}, "policy": "exact"}
    out = result.graph_def
    node = next(n for n in out.node if n.name == "GeOp1_0")
    assert list(node.attr["_npu_adapter_gears"].list.s) == [b"x:0:1,4", b"x:0:2,4"]
    assert list(node.attr["_npu_adapter_gear_patterns"].list.s) == [b"x:0:-1,4"]
    assert node.attr["_npu_adapter_gear_policy"].s == b"exact"
    assert node.attr["_input_shape"].s == b"x:-1,4"  # (the option, as encapsulate stamps it)
    functions = {f.signature.name: f for f in out.library.function}
    assert sorted(functions) == ["GeOp1_0", "GeOp1_0_gear_0", "GeOp1_0_gear_1"]
    (case,) = [n for n in functions["GeOp1_0"].node_def if n.op == "Case"]
    assert [f.name for f in case.attr["branches"].list.func] == ["GeOp1_0_gear_0",
                                                                 "GeOp1_0_gear_1"]
    for g in (0, 1):
        (pinned,) = [n for n in functions[f"GeOp1_0_gear_{g}"].node_def
                     if n.op == "EnsureShape"]
        assert tf.TensorShape(pinned.attr["shape"].shape).as_list() == [g + 1, 4]
    # The signature does not change: the host graph is untouched.
    assert functions["GeOp1_0"].signature.input_arg == \
        next(f for f in graph_def.library.function).signature.input_arg


@pytest.mark.parametrize("rows", [1, 2])
def test_every_gear_computes_what_plain_tensorflow_computes(rows):
    ctx = PassContext(config=NpuConfig.from_dict(GEARS))
    out = PassManager.from_pipeline(
        "mark_candidates,cluster,encapsulate,insert_gears,lower").run(_graph(), ctx).graph_def
    feeds = {"x:0": np.random.RandomState(rows).randn(rows, 4).astype(np.float32)}
    np.testing.assert_array_equal(run_graph_def(out, ["GeOp1_0:0"], feeds)[0],
                                  run_graph_def(_graph(), ["out:0"], feeds)[0])


def test_the_cpu_reference_lowers_every_gear_to_one_body():
    """The CPU lowering keeps the dispatcher's checks and its Case calls one shape-polymorphic
    body for every gear (the first copy, unpinned), so a random op keeps one state across
    gears."""
    ctx = PassContext(config=NpuConfig.from_dict(GEARS))
    pipeline = PassManager.from_pipeline("mark_candidates,cluster,encapsulate,insert_gears,lower")
    out = pipeline.run(_graph(), ctx).graph_def
    functions = {f.signature.name: f for f in out.library.function}
    assert sorted(functions) == ["GeOp1_0", "GeOp1_0_gear_0"]
    assert not any(n.op == "EnsureShape" for n in functions["GeOp1_0_gear_0"].node_def)
    (case,) = [n for n in functions["GeOp1_0"].node_def if n.op == "Case"]
    assert [f.name for f in case.attr["branches"].list.func] == ["GeOp1_0_gear_0"]
    assert case.input[0].startswith("gear_index:")  # (it waits for the checks)
    again = pipeline.run(_graph(), PassContext(config=NpuConfig.from_dict(GEARS))).graph_def
    assert again.SerializeToString(deterministic=True) == \
        out.SerializeToString(deterministic=True)


def test_a_shape_in_no_gear_is_a_named_error():
    ctx = PassContext(config=NpuConfig.from_dict(GEARS))
    out = PassManager.from_pipeline(
        "mark_candidates,cluster,encapsulate,insert_gears,lower").run(_graph(), ctx).graph_def
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"input x:0 has shape\] \[3 4\] \[allowed gears: gear 0: "
                             r"x:0:1,4 \| gear 1: x:0:2,4"):
        run_graph_def(out, ["GeOp1_0:0"], {"x:0": np.ones([3, 4], np.float32)})


def test_the_pad_up_policy_is_compiled_into_the_dispatcher():
    graph_def, ctx = _encapsulated(dict(GEARS, npu_adapter_gear_policy="pad_up"))
    out = get_pass("insert_gears")(graph_def, ctx).graph_def
    node = next(n for n in out.node if n.name == "GeOp1_0")
    assert node.attr["_npu_adapter_gear_policy"].s == b"pad_up"
    dispatcher = next(f for f in out.library.function if f.signature.name == "GeOp1_0")
    assert any(n.op == "PadV2" or n.op == "Pad" for n in dispatcher.node_def)


def test_without_gears_the_graph_is_returned_as_it_is():
    graph_def, ctx = _encapsulated({})
    result = get_pass("insert_gears")(graph_def, ctx)
    assert result.graph_def is graph_def and result.info == {"clusters": 0}
