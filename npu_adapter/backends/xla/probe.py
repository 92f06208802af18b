"""Small TensorFlow sessions the XLA backend runs for itself.

:func:`plain_session` opens a TensorFlow session on a private graph (no ``NpuOptimizer`` in its
config, so it is never rewritten). :func:`compile_probe` makes XLA compile a one-op function in
such a session: the backend uses it to find out whether TensorFlow writes to the persistent
compilation cache it was told about (TensorFlow reads that flag once per process).
"""

import contextlib
import os

__all__ = ["compile_probe", "plain_session"]


@contextlib.contextmanager
def plain_session(graph):
    """A ``tf.compat.v1.Session`` on ``graph`` that npu-adapter leaves alone."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto()
    sess = tf.compat.v1.Session(graph=graph, config=config)
    try:
        yield sess
    finally:
        sess.close()


def compile_probe(nonce):
    """Compile and run ``x * nonce`` with XLA in a plain session; returns the result (a float).

    ``nonce`` is a float baked into the function, so each distinct value is a distinct XLA
    cluster (a distinct persistent-cache entry)."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.framework import function_pb2, types_pb2

    from npu_adapter.vocabulary import XLA_MUST_COMPILE_ATTR

    name = f"npu_adapter_xla_probe_{os.getpid()}"
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = name
    fdef.signature.input_arg.add(name="x", type=types_pb2.DT_FLOAT)
    fdef.signature.output_arg.add(name="y", type=types_pb2.DT_FLOAT)
    const = fdef.node_def.add(name="k", op="Const")
    const.attr["dtype"].type = types_pb2.DT_FLOAT
    const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.float32(nonce)))
    mul = fdef.node_def.add(name="mul", op="Mul", input=["x", "k:output:0"])
    mul.attr["T"].type = types_pb2.DT_FLOAT
    fdef.ret["y"] = "mul:z:0"
    graph_def = tf.compat.v1.GraphDef()
    graph_def.library.function.add().CopyFrom(fdef)
    x = graph_def.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    call = graph_def.node.add(name="call", op="PartitionedCall", input=["x"])
    call.attr["f"].func.name = name
    call.attr["Tin"].list.type.append(types_pb2.DT_FLOAT)
    call.attr["Tout"].list.type.append(types_pb2.DT_FLOAT)
    call.attr[XLA_MUST_COMPILE_ATTR].b = True
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with plain_session(graph) as sess:
        return float(sess.run("call:0", {"x:0": np.float32(1.0)}))
