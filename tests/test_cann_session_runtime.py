"""The cann backend's per-session runtime on the common backend runtime interface
(``npu_adapter.backends.runtime``): shared models, gear and lazy variants, statistics."""

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("npu_adapter.backends.runtime")

import npu_adapter
from npu_adapter.backends import get_backend
from npu_adapter.backends.cann.session_runtime import CannBackendRuntime
from npu_adapter.config import NpuConfig
from npu_adapter.graph.splice import plan_splice, splice_into_graph
from npu_adapter.session import plain_session_class

OPTIONS = {"npu_adapter_backend": "cann", "input_shape": "x:-1,4", "dynamic_dims": "1;2",
           "dynamic_node_type": 1}


def _graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.constant(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2), name="w")
        tf.nn.relu(tf.matmul(x, w), name="y")
    return graph


def test_gear_variant_runs_the_multi_gear_model(cann_fakes):
    graph = _graph()
    config = NpuConfig.from_dict(OPTIONS)
    result = npu_adapter.rewrite(graph.as_graph_def(), config, fetches=["y:0"], feeds=["x:0"],
                                 backend="cann")
    first = CannBackendRuntime(get_backend("cann"), config)
    second = CannBackendRuntime(get_backend("cann"), config)
    assert first.cann is second.cann  # one set of models per options
    program = first.prepare(result, ["x:0"])
    selection = program.select({"x:0": (2, 4)})
    assert selection.gears == (1,)
    variant = program.variant_graph(selection.variant.key)
    user_nodes = {node.name: node for node in graph.as_graph_def().node}
    rename = splice_into_graph(graph, plan_splice(variant, user_nodes), "rewritten")
    target = result.tensor_map["y:0"].rpartition(":")
    fetch = graph.get_tensor_by_name(f"{rename(target[0])}:{target[2]}")
    value = np.arange(8, dtype=np.float32).reshape(2, 4)
    with plain_session_class()(graph=graph) as sess:
        got, expected = sess.run([fetch, "y:0"], {"x:0": value})
    np.testing.assert_array_equal(got, expected)
    stats = first.stats()
    (name,) = stats.clusters
    assert stats.clusters[name].status == "compiled"
    assert stats.clusters[name].compiles == 1 and stats.compiles == 1
    assert stats.clusters[name].gear_counts == {1: 1}
    first.close()
    leaks = cann_fakes.acl.fake.leaks()
    assert first.cann.stats().loads == 1 and leaks["models"] and leaks["devices"] == [0]
    second.close()  # the last session unloads the models and releases the device
    assert cann_fakes.acl.fake.leaks() == {"initialized": [True]}  # acl.finalize at exit
