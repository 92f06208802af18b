"""``precision``: with ``npu_adapter_emulate_precision=on``, every cluster function computes in
the dtypes the NPU would use; off (the default), the pass changes nothing.

With ``precision_mode=force_fp16``::

    GeOp1_0(x_0_arg) { mm = MatMul(x_0_arg, w); out = Identity(mm) }       (float32)
  becomes
    GeOp1_0(x_0_arg) { mm = MatMul(Cast<f16>(x_0_arg), Cast<f16>(w));
                       out = Identity(mm); return Cast<f32>(out) }

The signature does not change, so the host graph does not either.
"""

import numpy as np
import tensorflow as tf

from npu_adapter.config import NpuConfig
from npu_adapter.passes import PassContext, PassManager, get_pass
from npu_adapter.testing import GraphBuilder, run_graph_def

W = np.random.RandomState(3).randn(3, 2).astype(np.float32)
X = np.random.RandomState(4).randn(2, 3).astype(np.float32)
EMULATE = {"npu_adapter_emulate_precision": "on", "precision_mode": "force_fp16"}


def _graph(dtype=tf.float32):
    """x ─► mm (MatMul x, w) ─► out; with float16, x is cast in and out cast back."""
    b = GraphBuilder()
    b.placeholder("x", shape=[2, 3])
    x = "x"
    if dtype != tf.float32:
        x = b.op("Cast", "x16", ["x"], SrcT=tf.float32, DstT=dtype, Truncate=False)
    b.const("w", W.astype(dtype.as_numpy_dtype))
    b.op("MatMul", "mm", [x, "w"], T=dtype)
    if dtype != tf.float32:
        b.op("Cast", "out", ["mm"], SrcT=dtype, DstT=tf.float32, Truncate=False)
    else:
        b.op("Identity", "out", ["mm"], T=dtype)
    return b.graph_def()


def _encapsulated(options):
    ctx = PassContext(config=NpuConfig.from_dict(options))
    return PassManager.from_pipeline("mark_candidates,cluster,encapsulate").run(
        _graph(), ctx).graph_def, ctx


def test_force_fp16_casts_the_cluster_to_float16_and_keeps_its_signature():
    graph_def, ctx = _encapsulated(EMULATE)
    result = get_pass("precision")(graph_def, ctx)
    assert result.modified and result.info["casts"] == {"GeOp1_0": 3}
    assert result.info["decisions"]["mm"]["dtype"] == "float16"
    before = next(f for f in graph_def.library.function if f.signature.name == "GeOp1_0")
    after = next(f for f in result.graph_def.library.function if f.signature.name == "GeOp1_0")
    assert after.signature == before.signature
    casts = sorted(n.attr["DstT"].type for n in after.node_def if n.op == "Cast")
    assert casts == sorted([tf.float16.as_datatype_enum] * 2 + [tf.float32.as_datatype_enum])
    assert list(result.graph_def.node) == list(graph_def.node)


def test_the_emulated_cluster_computes_what_a_float16_model_computes():
    ctx = PassContext(config=NpuConfig.from_dict(EMULATE))
    out = PassManager.from_pipeline(
        "mark_candidates,cluster,encapsulate,precision,lower").run(_graph(), ctx).graph_def
    (cluster,) = [n for n in out.node if b"out:0" in n.attr["_npu_adapter_outputs"].list.s]
    got = run_graph_def(out, [f"{cluster.name}:0"], {"x:0": X})[0]
    expected = run_graph_def(_graph(tf.float16), ["out:0"], {"x:0": X})[0]
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(got, run_graph_def(_graph(), ["out:0"], {"x:0": X})[0])


def test_off_by_default_the_graph_is_returned_as_it_is():
    graph_def, ctx = _encapsulated({})
    result = get_pass("precision")(graph_def, ctx)
    assert result.graph_def is graph_def and result.info == {"emulation": "off"}
