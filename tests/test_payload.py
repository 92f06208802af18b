"""Rewriting without the weights (npu_adapter/graph/payload.py): the light graph the passes see,
the restore, and byte-identical results with and without it."""

import numpy as np
import pytest
import tensorflow as tf

from bench import models
from npu_adapter import api, rewrite
from npu_adapter.graph import payload
from npu_adapter.graph.payload import PAYLOAD_ATTR, strip_payloads
from npu_adapter.graph.serialize import to_bytes
from npu_adapter.graph.view import GraphView
from npu_adapter.op_support import OpSupportList
from npu_adapter.pipeline.instruments import PassInstrument
from npu_adapter.testing import GraphBuilder

tf1 = tf.compat.v1


def _weights_graph():
    b = GraphBuilder()
    b.placeholder("x", shape=[4, 64])
    b.const("W", np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64))  # 16 KB
    b.const("b", np.ones([64], np.float16))  # small: copied as is
    b.const("names", np.array([b"a", b"b"] * 4096))  # strings are never set aside
    b.binary("MatMul", "y", "x", "W")
    return b.graph_def()


def _serialized(graph_def):
    return graph_def.SerializeToString(deterministic=True)


def test_strip_sets_large_constants_aside_and_restore_puts_them_back():
    gd = _weights_graph()
    before = _serialized(gd)
    light, store = strip_payloads(gd, min_bytes=1024)
    assert _serialized(gd) == before, "the input graph is never modified"
    assert len(store) == 1
    nodes = {n.name: n for n in light.node}
    w = nodes["W"].attr["value"].tensor
    assert w.tensor_content == b"" and [d.size for d in w.tensor_shape.dim] == [64, 64]
    assert w.dtype == tf.float32.as_datatype_enum
    assert nodes["W"].attr[PAYLOAD_ATTR].s == b"W"
    assert PAYLOAD_ATTR not in nodes["b"].attr and PAYLOAD_ATTR not in nodes["names"].attr
    assert _serialized(store.restore(light)) == before


def test_graphs_without_large_constants_are_not_copied():
    gd = _weights_graph()
    same, store = strip_payloads(gd, min_bytes=1 << 20)
    assert same is gd and store is None


def test_restore_fills_copies_inside_functions():
    """A marked const copied into a function body (``C_copied`` in mix mode, any const of a
    cluster on a backend that keeps constants in the GeOp) gets its data back too."""
    gd = _weights_graph()
    light, store = strip_payloads(gd, min_bytes=1024)
    fdef = light.library.function.add()
    fdef.signature.name = "f"
    copy = fdef.node_def.add()
    copy.CopyFrom(next(n for n in light.node if n.name == "W"))
    copy.name = "W_copied"
    store.restore(light)
    restored = fdef.node_def[0]
    assert PAYLOAD_ATTR not in restored.attr
    want = next(n for n in gd.node if n.name == "W").attr["value"].tensor
    assert restored.attr["value"].tensor == want


class _Watch(PassInstrument):
    """Any instrument turns payload stripping off (instruments see the full graphs)."""

    def __init__(self):
        self.payload_free = []

    def before_pass(self, index, pass_, graph_def, ctx):
        self.payload_free.append(any(PAYLOAD_ATTR in n.attr for n in graph_def.node))


CASES = [
    ("small_cnn", {}, "cpu"),
    ("small_cnn", {"mix_compile_mode": True}, "original_like"),
    ("lenet_train", {"mix_compile_mode": True}, "cpu"),
    ("lenet_train", {}, "original_like"),
    ("bert_tiny", {}, "cpu"),
    ("bert_tiny", {"mix_compile_mode": True}, "original_like"),
    ("lstm", {}, "cpu"),
]


@pytest.mark.parametrize("name,options,backend", CASES)
def test_rewrite_is_byte_identical_with_and_without_payloads(name, options, backend,
                                                             monkeypatch):
    monkeypatch.setattr(payload, "MIN_PAYLOAD_BYTES", 64)  # strip nearly every const
    stripped = []

    def counting_strip(graph_def, min_bytes=None, **kwargs):
        light, store = strip_payloads(graph_def, min_bytes, **kwargs)
        stripped.append(len(store or ()))
        return light, store

    monkeypatch.setattr(api, "strip_payloads", counting_strip)
    spec = models.get_model(name)
    before = _serialized(spec.graph_def)
    kwargs = {"fetches": spec.fetches, "feeds": list(spec.feeds), "targets": spec.targets,
                  "backend": backend}
    light = rewrite(spec.graph_def, options, **kwargs)
    watch = _Watch()
    full = rewrite(spec.graph_def, options, instruments=[watch], **kwargs)
    assert stripped[0] > 0 and len(stripped) == 1, stripped
    assert watch.payload_free and not any(watch.payload_free)
    assert _serialized(spec.graph_def) == before
    assert _serialized(light.graph_def) == _serialized(full.graph_def)
    assert light.modified == full.modified
    assert [c.nodes for c in light.clusters] == [c.nodes for c in full.clusters]
    assert light.placement == full.placement
    graph = light.graph_def
    bodies = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    assert not any(PAYLOAD_ATTR in n.attr for n in bodies)


def test_unchanged_graph_is_reported_unmodified(monkeypatch):
    """With nothing to offload the restored graph equals the input: not ``modified``."""
    monkeypatch.setattr(payload, "MIN_PAYLOAD_BYTES", 64)
    gd = _weights_graph()
    res = rewrite(gd, {}, backend="cpu", op_support=OpSupportList.from_names([]))
    assert not res.clusters
    assert not res.modified


@pytest.mark.parametrize("min_bytes", [1, 1024, 1 << 20])
def test_strip_payloads_reads_the_sizes_from_the_view_with_the_same_result(min_bytes):
    b = GraphBuilder()
    b.const("w1", np.ones([32, 32], np.float32))
    b.const("w2", np.ones([16, 64], np.float32))
    b.const("s", np.array([b"x" * 5000]))  # strings are never set aside
    b.op("MatMul", "m", ["w1", "w2"], T=tf.float32)
    graph_def = b.graph_def()
    plain, plain_store = strip_payloads(graph_def, min_bytes)
    viewed, viewed_store = strip_payloads(graph_def, min_bytes, view=GraphView(graph_def))
    assert to_bytes(plain) == to_bytes(viewed)
    assert (plain_store is None) == (viewed_store is None)
    if plain_store is not None:
        assert len(plain_store) == len(viewed_store) > 0
        viewed_store.restore(viewed)
        assert to_bytes(viewed) == to_bytes(graph_def)
