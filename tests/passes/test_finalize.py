"""``finalize``: remove the placement annotations (``_npu_adapter_placement``) from every node and
every function body, so the host part of a rewritten graph is byte-identical to the user's::

    x [host:graph_input] ─► h (Floor) [host:unsupported_op] ─► GeOp1_0 { a [npu:supported] }
  becomes
    x ─► h ─► GeOp1_0 { a }

Everything else stays, the cluster nodes' boundary attributes included.
"""

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, function_pb2

from npu_adapter.config import NpuConfig
from npu_adapter.passes import PassContext, PassManager, get_pass
from npu_adapter.testing import GraphBuilder, assert_graph_equal, run_graph_def
from npu_adapter.vocabulary import PLACEMENT_ATTR


def _graph(annotated):
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Floor", "h", "x")
    b.op("StatefulPartitionedCall", "GeOp1_0", ["h"], Tin=[tf.float32], Tout=[tf.float32],
         f=attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name="GeOp1_0")),
         _npu_adapter_inputs=["h:0"], _npu_adapter_outputs=["a:0"])
    body = GraphBuilder()
    body.op("Abs", "a", ["h_0_arg"], T=tf.float32)
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = "GeOp1_0"
    fdef.signature.input_arg.add(name="h_0_arg", type=tf.float32.as_datatype_enum)
    fdef.signature.output_arg.add(name="a_0_retval", type=tf.float32.as_datatype_enum)
    fdef.node_def.extend(body.graph_def().node)
    fdef.ret["a_0_retval"] = "a:y:0"
    if annotated:
        b.set_attr("x", PLACEMENT_ATTR, "host:graph_input")
        b.set_attr("h", PLACEMENT_ATTR, "host:unsupported_op")
        fdef.node_def[0].attr[PLACEMENT_ATTR].s = b"npu:supported"
    b.add_function(fdef)
    return b.graph_def()


def test_the_annotations_go_from_the_nodes_and_the_function_bodies():
    graph_def = _graph(annotated=True)
    result = get_pass("finalize")(graph_def, PassContext())
    assert result.modified
    assert_graph_equal(result.graph_def, _graph(annotated=False))
    assert graph_def.node[0].attr[PLACEMENT_ATTR].s == b"host:graph_input"  # input untouched


def test_the_graph_computes_what_it_computed():
    out = get_pass("finalize")(_graph(annotated=True), PassContext()).graph_def
    feeds = {"x:0": np.float32([-1.5, 2.5])}
    np.testing.assert_array_equal(run_graph_def(out, ["GeOp1_0:0"], feeds)[0],
                                  np.float32([2.0, 2.0]))


def test_at_the_end_of_the_pipeline_no_annotation_is_left():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.unary("Abs", "a", "x")
    ctx = PassContext(config=NpuConfig.from_dict({}))
    out = PassManager.from_pipeline("mark_candidates,cluster,finalize").run(
        b.graph_def(), ctx).graph_def
    assert not any(PLACEMENT_ATTR in n.attr for n in out.node)
    assert out.node[1].attr["_subgraphs"].s == b"GeOp1_0"  # (only the placement goes)


def test_a_graph_without_annotations_is_returned_as_it_is():
    graph_def = _graph(annotated=False)
    result = get_pass("finalize")(graph_def, PassContext())
    assert result.graph_def is graph_def and not result.modified
