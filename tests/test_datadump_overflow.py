"""Overflow detection (enable_dump_debug): the overflowing op is reported at the right step."""

import io
import json
import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.datadump import DumpSession, inf_nan_enabled, read_dump_file, scan_dump_tree
from npu_adapter.datadump.overflow import ATOMIC_ACCUMULATE_OPS, checks_op, overflow_kind
from npu_adapter.datadump.settings import emulated_dtype_of
from npu_bridge.estimator.npu.npu_hook import TellMeStepOrLossHook

tf1 = tf.compat.v1


def overflow_graph():
    """x ─► scale (Mul 2) ─► exp ─► plus (AddV2 1) ─► log ─► total (Sum)
    y ─► seg (UnsortedSegmentSum of both rows into one) ─► seg_total (Sum)"""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [3], name="x")
        y = tf1.placeholder(tf.float32, [2], name="y")
        e = tf.exp(tf.multiply(x, 2.0, name="scale"), name="exp")
        tf.reduce_sum(tf.math.log(tf.add(e, 1.0, name="plus"), name="log"), name="total")
        seg = tf.math.unsorted_segment_sum(y, tf.constant([0, 0]), 1, name="seg")
        tf.reduce_sum(seg, name="seg_total")
    return g


def step_feed(step, big_step=2, huge_step=None):
    x = np.array([1.0, 2.0, 100.0 if step == big_step else 3.0], np.float32)
    y = np.array([3e38, 3e38] if step == huge_step else [1.0, 2.0], np.float32)
    return {"x:0": x, "y:0": y, "step_in:0": np.int64(40 + step)}


def run_overflow(tmp_path, options=(), steps=4, huge_step=None, hooks=()):
    config = NpuConfig(enable_dump_debug=True, dump_path=str(tmp_path), **dict(options))
    fetches = ["total:0", "seg_total:0"]
    result = npu_adapter.rewrite(overflow_graph().as_graph_def(), config, fetches=fetches,
                                 feeds=["x:0", "y:0"])
    stream = io.StringIO()
    dump = DumpSession.from_config(config, stream=stream, progress_interval=0)
    graph_def = dump.instrument(result.graph_def)
    with tf.Graph().as_default() as graph:
        tf.import_graph_def(graph_def, name="")
        # The training step the script would track (read by TellMeStepOrLossHook).
        tf1.placeholder_with_default(tf.constant(0, tf.int64), [], name="step_in")
        for hook in hooks:
            hook.begin()
        with tf1.Session(graph=graph) as sess:
            for step in range(steps):
                hook_fetches = [h.before_run(None).fetches for h in hooks]
                outs, hook_results = sess.run(
                    ([result.tensor_map[f] for f in fetches], hook_fetches),
                    step_feed(step, huge_step=huge_step))
                for hook, results in zip(hooks, hook_results):
                    hook.after_run(None, tf1.train.SessionRunValues(results, None, None))
    dump.close()
    return dump, stream.getvalue()


def summary(tmp_path):
    (time_dir,) = os.listdir(tmp_path)
    with open(tmp_path / time_dir / "overflow_summary.json") as f:
        return json.load(f)["overflows"]


def test_exp_overflow_is_reported_at_its_step(tmp_path):
    dump, said = run_overflow(tmp_path)
    (entry,) = summary(tmp_path)
    assert entry["step"] == 2 and entry["model_name"] == dump.models[0].name
    first = entry["first_overflow"]
    assert (first["op_name"], first["op_type"], first["kind"], first["inputs_finite"]) == \
        ("exp", "Exp", "inf", True)
    # The ops after it carry the overflow on; they are dumped too, marked as such.
    later = {o["op_name"]: o["inputs_finite"] for o in entry["overflowing_ops"]}
    assert later == {"exp": True, "plus": False, "log": False, "total": False}
    entries = scan_dump_tree(str(tmp_path))
    assert {e.step for e in entries} == {2}
    records = {(e.kind, e.name.task_id): read_dump_file(e.path) for e in entries}
    exp = next(r for (kind, _), r in records.items() if kind == "tensor" and r.op_name == "exp")
    np.testing.assert_array_equal(exp.inputs[0].values(), [2.0, 4.0, 200.0])
    assert np.isposinf(exp.outputs[0].values()[2])
    debug = [r for (kind, _), r in records.items() if kind == "opdebug"]
    assert len(debug) == 4
    exp_debug = next(r for r in debug if r.attrs["op_name"] == "exp")
    assert exp_debug.attrs["overflow"] == "inf" and exp_debug.attrs["step"] == "2"
    assert "overflow in GeOp1_0 at step 2 starts at exp (Exp)" in said


@pytest.mark.parametrize("mode, expected", [
    ("all", {"exp", "plus", "log", "total", "seg", "seg_total"}),
    ("aicore_overflow", {"exp", "plus", "log", "total", "seg_total"}),
    ("atomic_overflow", {"seg"}),
])
def test_dump_debug_mode_selects_the_ops_checked(tmp_path, mode, expected):
    run_overflow(tmp_path, {"dump_debug_mode": mode}, steps=3, huge_step=2)
    (entry,) = summary(tmp_path)
    assert {o["op_name"] for o in entry["overflowing_ops"]} == expected
    assert entry["first_overflow"]["op_name"] == ("seg" if mode == "atomic_overflow" else "exp")


def test_no_overflow_writes_nothing(tmp_path):
    run_overflow(tmp_path, steps=2)   # step 2 never runs
    assert os.listdir(tmp_path) == []


def test_dump_step_limits_the_steps_checked(tmp_path):
    run_overflow(tmp_path, {"dump_step": "0|3"}, steps=4)
    assert os.listdir(tmp_path) == []


def test_training_step_from_tell_me_step_or_loss_hook(tmp_path, monkeypatch):
    monkeypatch.setenv("STEP_NOW", "0")
    hook = TellMeStepOrLossHook(step="step_in:0", total_step=100)
    run_overflow(tmp_path, steps=3, hooks=[hook])
    (entry,) = summary(tmp_path)
    # The hook wrote the previous run's step (41) before step 2 ran.
    assert entry["step"] == 2 and entry["global_step"] == 41


def test_emulated_float16_range(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the emulation option may be unknown to this build
        config = NpuConfig(enable_dump_debug=True, dump_path=str(tmp_path),
                           npu_adapter_emulate_precision="on", precision_mode="force_fp16")
    assert emulated_dtype_of(config) == "float16"
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2], name="x")
        tf.identity(tf.multiply(x, 10.0, name="big"), name="out")
    result = npu_adapter.rewrite(g.as_graph_def(), config, fetches=["out:0"], feeds=["x:0"])
    with DumpSession.from_config(config, stream=io.StringIO()) as dump:
        graph_def = dump.instrument(result.graph_def)
        with tf.Graph().as_default():
            tf.import_graph_def(graph_def, name="")
            with tf1.Session() as sess:
                for value in (6000.0, 7000.0):   # 60000 fits float16, 70000 does not
                    sess.run(result.tensor_map["out:0"], {"x:0": np.full(2, value, np.float32)})
    (entry,) = summary(tmp_path)
    assert entry["step"] == 1
    # With emulation the cluster computes in float16 (the precision pass), so 70000 becomes
    # inf inside the op, as on the device.
    assert entry["first_overflow"]["kind"] in ("inf", "exceeds float16 range")
    assert entry["first_overflow"]["op_name"] == "big"


@pytest.mark.parametrize("options, expected", [
    ({}, None),
    ({"npu_adapter_emulate_precision": "on"}, "float16"),
    ({"npu_adapter_emulate_precision": "on", "precision_mode": "allow_mix_precision_bf16"},
     "bfloat16"),
    ({"npu_adapter_emulate_precision": "on", "precision_mode_v2": "mixed_float16"}, "float16"),
    ({"npu_adapter_emulate_precision": "on", "precision_mode": "force_fp32"}, None),
    ({"npu_adapter_emulate_precision": "on", "precision_mode": "must_keep_origin_dtype"}, None),
])
def test_emulated_dtype_of(options, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert emulated_dtype_of(NpuConfig(**options)) == expected


def test_overflow_kinds_and_op_classes():
    assert overflow_kind(np.array([1.0, np.nan], np.float32)) == "nan"
    assert overflow_kind(np.array([1.0, -np.inf], np.float16)) == "inf"
    assert overflow_kind(np.array([1.0, 2.0], np.float32)) is None
    assert overflow_kind(np.array([70000.0], np.float32), "float16") == "exceeds float16 range"
    assert overflow_kind(np.array([70000.0], np.float32), "bfloat16") is None
    assert overflow_kind(np.array([1, 2], np.int32)) is None
    assert "UnsortedSegmentSum" in ATOMIC_ACCUMULATE_OPS
    assert checks_op("Exp", "all") and checks_op("Exp", "aicore_overflow")
    assert not checks_op("Exp", "atomic_overflow")
    assert checks_op("BiasAddGrad", "atomic_overflow")
    assert not checks_op("BiasAddGrad", "aicore_overflow")


def test_the_cpu_reference_is_in_inf_nan_mode():
    assert inf_nan_enabled() is True
