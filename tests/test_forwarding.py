"""Forwarding Identities of the rewrite's functions are bypassed in the executed graph only."""

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import function_pb2

from npu_adapter.graph.forwarding import bypass_argument_identities


def _fdef(text_nodes, ret, control=()):
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = "GeOp1_0"
    for name in ("a", "b"):
        arg = fdef.signature.input_arg.add()
        arg.name, arg.type = name, tf.float32.as_datatype_enum
    out = fdef.signature.output_arg.add()
    out.name, out.type = "out", tf.float32.as_datatype_enum
    for name, op, inputs in text_nodes:
        node = fdef.node_def.add()
        node.name, node.op = name, op
        node.input.extend(inputs)
        node.attr["T"].type = tf.float32.as_datatype_enum
    fdef.ret["out"] = ret
    for name in control:
        fdef.control_ret[name] = name
    return fdef


def test_an_identity_of_an_argument_is_bypassed():
    fdef = _fdef([("w/read", "Identity", ["a"]), ("mul", "Mul", ["w/read:output:0", "b"])],
                 "mul:z:0")
    out = bypass_argument_identities(fdef)
    assert [n.name for n in out.node_def] == ["mul"]
    assert list(out.node_def[0].input) == ["a", "b"]
    assert [n.name for n in fdef.node_def] == ["w/read", "mul"]  # the input is not modified


def test_identities_that_matter_are_kept():
    cases = [
        # an output of the function
        [("w/read", "Identity", ["a"]), ("mul", "Mul", ["a", "b"])], "w/read:output:0",
        # a control source of another node
        [("w/read", "Identity", ["a"]), ("mul", "Mul", ["a", "b", "^w/read"])], "mul:z:0",
        # an Identity of another node, or one with a control input
        [("w/read", "Identity", ["b", "^x"]), ("x", "Neg", ["a"]),
         ("mul", "Mul", ["w/read:output:0", "x:y:0"])], "mul:z:0",
    ]
    for nodes, ret in zip(cases[0::2], cases[1::2]):
        fdef = _fdef(nodes, ret)
        assert bypass_argument_identities(fdef) is fdef


def test_a_frozen_model_runs_the_same_without_them():
    from npu_adapter.config import NpuConfig
    from npu_adapter.session import NpuSession, plain_session_class

    rs = np.random.RandomState(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 256], name="x")
        w = tf.constant(rs.randn(256, 4096).astype(np.float32), name="w")  # 4 MB: passed in
        y = tf.nn.relu(tf.matmul(x, tf.identity(w, name="w/read")), name="y")
    feed = {x: rs.randn(3, 256).astype(np.float32)}
    # Isolated, the cluster stays a function in the shadow (a session installs it inlined
    # otherwise, and the forwarding Identities are then plain nodes of the graph).
    config = NpuConfig.from_dict({"npu_adapter_isolate_clusters": True}).to_config_proto()
    with NpuSession(graph=graph, config=config) as sess:
        value = sess.run(y, feed)
        shadow_functions = sess._npu_shadow.graph.as_graph_def().library.function
    with plain_session_class()(graph=graph) as sess:
        assert value.tobytes() == sess.run(y, feed).tobytes()
    bodies = [n.op for f in shadow_functions for n in f.node_def]
    assert "MatMul" in bodies and "Identity" not in bodies
