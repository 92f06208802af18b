"""``lower``: the backend makes the cluster nodes executable (``Backend.lower``). For the CPU
reference every ``GeOp`` becomes a ``StatefulPartitionedCall`` of the same name calling the same
function, so the graph is plain TensorFlow::

    x ─► GeOp1_0 (GeOp, function GeOp1_0, data_format ND) ─► out
  becomes
    x ─► GeOp1_0 (StatefulPartitionedCall, f GeOp1_0, _data_format ND) ─► out
"""

import numpy as np

from npu_adapter.config import NpuConfig
from npu_adapter.op_support import OpSupportList
from npu_adapter.passes import PassContext, PassManager, get_pass
from npu_adapter.testing import GraphBuilder, run_graph_def

OPS = OpSupportList.from_names(["Abs", "Neg"])


def _graph():
    """x ─► a (Abs) ─► n (Neg) ─► out (Floor, host)."""
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    b.unary("Neg", "n", "a")
    b.unary("Floor", "out", "n")
    return b.graph_def()


def _encapsulated(**options):
    ctx = PassContext(config=NpuConfig.from_dict(options), op_support=OPS)
    return PassManager.from_pipeline("mark_candidates,cluster,encapsulate").run(
        _graph(), ctx).graph_def, ctx


def test_each_cluster_node_becomes_a_call_of_its_function():
    graph_def, ctx = _encapsulated()
    result = get_pass("lower")(graph_def, ctx)
    assert result.info == {"backend": "cpu", "clusters": 1}
    before = next(n for n in graph_def.node if n.name == "GeOp1_0")
    after = next(n for n in result.graph_def.node if n.name == "GeOp1_0")
    assert (after.op, list(after.input)) == ("StatefulPartitionedCall", list(before.input))
    assert after.attr["f"].func.name == "GeOp1_0" and "function" not in after.attr
    assert after.attr["_data_format"].s == before.attr["data_format"].s == b"ND"
    assert after.attr["Tin"] == before.attr["Tin"] and after.attr["Tout"] == before.attr["Tout"]
    assert result.graph_def.library == graph_def.library
    assert before.op == "GeOp"  # the input is never edited


def test_the_lowered_graph_computes_what_plain_tensorflow_computes():
    ctx = PassContext(config=NpuConfig.from_dict({}), op_support=OPS)
    out = PassManager.from_pipeline("mark_candidates,cluster,encapsulate,lower").run(
        _graph(), ctx).graph_def
    feeds = {"x:0": np.float32([-2.5, 1.25])}
    np.testing.assert_array_equal(run_graph_def(out, ["out:0"], feeds)[0],
                                  run_graph_def(_graph(), ["out:0"], feeds)[0])


def test_isolated_clusters_stay_function_calls():
    graph_def, ctx = _encapsulated(npu_adapter_isolate_clusters=True)
    out = get_pass("lower")(graph_def, ctx).graph_def
    (fdef,) = out.library.function
    assert fdef.attr["_noinline"].b


def test_without_cluster_nodes_the_graph_is_returned_as_it_is():
    graph_def = _graph()
    result = get_pass("lower")(graph_def, PassContext())
    assert result.graph_def is graph_def and result.info == {"clusters": 0}
