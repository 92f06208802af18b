"""Training under precision emulation: loss scaling with NPULossScaleOptimizer converges and
skips the steps whose float16 gradients overflow, as on the device; accelerate_train_mode
switches from the low precision to the original one once, at the documented point."""


import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.precision.accelerate import (
    PHASE_LOW,
    PHASE_OFF,
    PHASE_ORIGINAL,
    AccelerateTrainModeError,
    AccelerateTrainSchedule,
    low_precision_config,
)
from npu_adapter.session import NpuSession, plain_session_class, runner_of
from npu_bridge.estimator.npu.npu_loss_scale_manager import ExponentialUpdateLossScaleManager
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer

tf1 = tf.compat.v1
PlainSession = plain_session_class()
_RNG = np.random.RandomState(0)
XS = _RNG.uniform(-1, 1, [64, 4]).astype(np.float32)
YS = (np.sin(XS.sum(axis=1, keepdims=True) * 1.5)).astype(np.float32)


def _mlp(init_scale):
    """A 4-32-1 MLP trained with loss scaling; returns (graph, handles)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        y = tf1.placeholder(tf.float32, [None, 1], name="y")
        init = np.random.RandomState(5)
        h = tf1.layers.dense(x, 32, activation=tf.nn.tanh, name="h",
                             kernel_initializer=tf1.constant_initializer(
                                 (init.randn(4, 32) * 0.5).astype(np.float32)))
        out = tf1.layers.dense(h, 1, name="out", kernel_initializer=tf1.constant_initializer(
            (init.randn(32, 1) * 0.3).astype(np.float32)))
        loss = tf.reduce_mean(tf.square(out - y), name="loss")
        manager = ExponentialUpdateLossScaleManager(init_scale, incr_every_n_steps=1000,
                                                    decr_every_n_nan_or_inf=1, decr_ratio=0.5)
        opt = NPULossScaleOptimizer(tf1.train.GradientDescentOptimizer(0.1), manager)
        train = opt.minimize(loss)
        init = tf1.global_variables_initializer()
        kernel = graph.get_tensor_by_name("h/kernel/Read/ReadVariableOp:0")
        scale = manager.get_loss_scale()
    return graph, {"loss": loss, "train": train, "init": init, "scale": scale, "kernel": kernel}


def _train(cls, config, init_scale, steps=200):
    graph, t = _mlp(init_scale)
    losses, skipped, scales = [], 0, []
    with cls(graph=graph, config=config) as sess:
        sess.run(t["init"])
        for _ in range(steps):
            before = sess.run(t["kernel"])
            loss, scale = sess.run([t["loss"], t["scale"]], {"x:0": XS, "y:0": YS})
            sess.run(t["train"], {"x:0": XS, "y:0": YS})
            if np.array_equal(before, sess.run(t["kernel"])):
                skipped += 1
            losses.append(float(loss))
            scales.append(float(scale))
    return losses, skipped, scales


def _mixed_config(**extra):
    return NpuConfig.from_dict(dict(precision_mode="allow_mix_precision",
                                    npu_adapter_emulate_precision="on", **extra)).to_config_proto()


@pytest.fixture(scope="module")
def converging_run():
    return _train(NpuSession, _mixed_config(), 128.0)


def test_mixed_precision_with_loss_scaling_converges(converging_run):
    losses, skipped, scales = converging_run
    assert skipped == 0 and set(scales) == {128.0}
    assert losses[-1] < 0.25 * losses[0]
    print(f"\nallow_mix_precision + loss scale 128, 200 steps: loss {losses[0]:.4f} → "
          f"{losses[-1]:.4f}, skipped {skipped}")


def test_emulation_changes_the_numbers(converging_run):
    # the same 200 steps in float32 (plain TensorFlow) give other losses
    plain, _, _ = _train(PlainSession, None, 128.0, steps=5)
    assert plain[0] == pytest.approx(converging_run[0][0], rel=1e-2)
    assert plain[1:5] != converging_run[0][1:5]


def test_float16_overflow_skips_steps_and_shrinks_the_scale():
    # 2**30 times the loss overflows float16 in the emulated backward pass; float32 would not.
    losses, skipped, scales = _train(NpuSession, _mixed_config(), 2.0 ** 30, steps=40)
    assert skipped >= 5
    # every skipped step halved the scale (decr_every_n_nan_or_inf=1, decr_ratio=0.5)
    assert scales[0] == 2.0 ** 30 and scales[-1] == 2.0 ** 30 / 2 ** skipped
    assert all(b in (a, a / 2) for a, b in zip(scales, scales[1:]))
    # once the scale fits, training proceeds
    assert losses[-1] < losses[skipped]
    _, plain_skipped, _ = _train(PlainSession, None, 2.0 ** 30, steps=3)
    assert plain_skipped == 0
    print(f"\nloss scale 2**30 under allow_mix_precision: {skipped} skipped steps, scale "
          f"{scales[0]:.3g} → {scales[-1]:.3g}; plain float32: {plain_skipped} skipped")


# ---- accelerate_train_mode --------------------------------------------------------------

def test_schedule_step_mode_switches_once_at_ratio_times_total():
    config = NpuConfig.from_dict({"experimental_accelerate_train_mode": "fast|step|0.5"})
    env = {"STEP_NOW": "0", "TOTAL_STEP": "40"}
    schedule = AccelerateTrainSchedule.from_config(config, environ=env)
    phases = []
    for step in range(40):
        phases.append(schedule.phase())
        env["STEP_NOW"] = str(step + 1)   # what TellMeStepOrLossHook writes after each run
    assert phases == [PHASE_LOW] * 20 + [PHASE_ORIGINAL] * 20
    stats = schedule.stats()
    assert (stats["switched_at_run"], stats["low_precision_runs"], stats["runs"]) == (21, 20, 40)
    env["STEP_NOW"] = "0"   # never switches back
    assert schedule.phase() == PHASE_ORIGINAL


def test_schedule_step_mode_with_loop_sinking_switches_earlier():
    config = NpuConfig.from_dict({"experimental_accelerate_train_mode": "fast|step|0.9",
                                  "iterations_per_loop": 5})
    env = {"STEP_NOW": "5", "TOTAL_STEP": "10"}
    schedule = AccelerateTrainSchedule.from_config(config, environ=env)
    assert schedule.phase() == PHASE_ORIGINAL   # 5 + 5 >= 10


def test_schedule_loss_mode():
    config = NpuConfig.from_dict({"experimental_accelerate_train_mode": "fast1|loss|1.1"})
    env = {"LOSS_NOW": "0.0", "TARGET_LOSS": "2.0"}
    schedule = AccelerateTrainSchedule.from_config(config, environ=env)
    assert schedule.phase() == PHASE_LOW           # 0.0: nothing reported yet
    for loss, phase in ((5.0, PHASE_LOW), (2.3, PHASE_LOW), (2.19, PHASE_ORIGINAL),
                        (9.0, PHASE_ORIGINAL)):
        env["LOSS_NOW"] = str(loss)
        assert schedule.phase() == phase
    assert schedule.stats()["low_precision_dtype"] == "bfloat16"
    assert low_precision_config(config).precision_mode == "allow_mix_precision_bf16"


def test_schedule_without_the_hook_warns_and_stays_off():
    config = NpuConfig.from_dict({"experimental_accelerate_train_mode": "fast|step|0.5"})
    schedule = AccelerateTrainSchedule.from_config(config, environ={})
    with pytest.warns(UserWarning, match="cannot take effect"):
        assert schedule.phase() == PHASE_OFF
    assert schedule.phase() == PHASE_OFF
    assert AccelerateTrainSchedule.from_config(NpuConfig.from_dict({})) is None


@pytest.mark.parametrize("options, low", [
    ({}, {"precision_mode": "allow_mix_precision_fp16"}),
    ({"precision_mode": "must_keep_origin_dtype"}, {"precision_mode": "allow_mix_precision_fp16"}),
    ({"precision_mode": "allow_fp32_to_fp16"}, {"precision_mode": "allow_mix_precision_fp16"}),
    ({"precision_mode_v2": "origin"}, {"precision_mode_v2": "mixed_float16"}),
])
def test_low_precision_config_per_mode(options, low):
    config = NpuConfig.from_dict(dict(options, experimental_accelerate_train_mode="fast|step"))
    lowered = low_precision_config(config)
    assert {k: lowered.get(k) for k in low} == low


@pytest.mark.parametrize("options", [{"precision_mode": "force_fp16"},
                                     {"precision_mode": "allow_mix_precision"},
                                     {"precision_mode_v2": "fp16"},
                                     {"precision_mode_v2": "mixed_float16"}])
def test_accelerate_mode_restrictions_are_named_errors(options):
    config = NpuConfig.from_dict(dict(options, experimental_accelerate_train_mode="fast|step"))
    with pytest.raises(AccelerateTrainModeError, match="experimental_accelerate_train_mode"):
        AccelerateTrainSchedule.from_config(config)


def _step_graph():
    """One SGD step of a 4-16-1 MLP as a pure function of the weights (fed and fetched), so
    two rewrites (low and original precision) can share the same training state."""
    graph = tf.Graph()
    shapes = {"w1": [4, 16], "b1": [16], "w2": [16, 1], "b2": [1]}
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [64, 4], name="x")
        y = tf1.placeholder(tf.float32, [64, 1], name="y")
        params = {k: tf1.placeholder(tf.float32, s, name=k) for k, s in shapes.items()}
        h = tf.nn.tanh(tf.matmul(x, params["w1"]) + params["b1"])
        out = tf.matmul(h, params["w2"]) + params["b2"]
        loss = tf.reduce_mean(tf.square(out - y), name="loss")
        grads = tf.gradients(loss, [params[k] for k in shapes])
        for (k, p), g in zip(params.items(), grads):
            tf.identity(p - 0.1 * g, name=f"new_{k}")
    init = {k: (np.random.RandomState(i).randn(*s) * 0.5).astype(np.float32)
            for i, (k, s) in enumerate(shapes.items())}
    return graph.as_graph_def(), init


_FETCHES = ["loss:0", "new_w1:0", "new_b1:0", "new_w2:0", "new_b2:0"]


class _Stepper:
    def __init__(self, graph_def, options):
        self.result = npu_adapter.rewrite(graph_def, options, fetches=_FETCHES,
                                          feeds=["x:0", "y:0", "w1:0", "b1:0", "w2:0", "b2:0"])
        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(self.result.graph_def, name="")
        self.sess = PlainSession(graph=graph)
        self.fetches = [self.result.tensor_map[f] for f in _FETCHES]

    def __call__(self, state):
        feeds = {"x:0": XS, "y:0": YS, **{f"{k}:0": v for k, v in state.items()}}
        loss, *new = self.sess.run(self.fetches, feeds)
        return loss, dict(zip(state, new))


def test_accelerate_fast_step_half_over_40_steps():
    graph_def, init = _step_graph()
    base = {"precision_mode": "must_keep_origin_dtype",
            "experimental_accelerate_train_mode": "fast|step|0.5",
            "npu_adapter_emulate_precision": "on"}
    config = NpuConfig.from_dict(base)
    env = {"STEP_NOW": "0", "TOTAL_STEP": "40"}
    schedule = AccelerateTrainSchedule.from_config(config, environ=env)
    # the session keeps one rewrite per phase
    steppers = {PHASE_LOW: _Stepper(graph_def, low_precision_config(config)),
                PHASE_ORIGINAL: _Stepper(graph_def, config)}
    low_only = steppers[PHASE_LOW]
    plain32 = _Stepper(graph_def, {"precision_mode": "must_keep_origin_dtype"})  # emulation off
    state, low_state = dict(init), dict(init)
    phases = []
    for step in range(1, 41):
        phase = schedule.phase()
        phases.append(phase)
        loss, new = steppers[phase](state)
        if step <= 20:
            # float16 numerics: exactly a run that is in mixed float16 throughout
            low_loss, low_state = low_only(low_state)
            assert loss == low_loss and all(np.array_equal(new[k], low_state[k]) for k in new)
        else:
            # float32 numerics: exactly plain TensorFlow on the same state, not the low run
            ref_loss, ref_new = plain32(state)
            low_loss, _ = low_only(state)
            assert loss == ref_loss and all(np.array_equal(new[k], ref_new[k]) for k in new)
            assert loss != low_loss
        state = new
        env["STEP_NOW"] = str(step)
    assert phases == [PHASE_LOW] * 20 + [PHASE_ORIGINAL] * 20
    decisions = steppers[PHASE_LOW].result.pass_info["precision"]["decisions"]
    assert "float16" in {d["dtype"] for d in decisions.values()}
    assert {d["dtype"] for d in steppers[PHASE_ORIGINAL].result.pass_info["precision"][
        "decisions"].values()} == {"float32"}


def test_accelerate_fast_loss_switches_when_the_loss_crosses_the_threshold():
    graph_def, init = _step_graph()
    config = NpuConfig.from_dict({"experimental_accelerate_train_mode": "fast|loss|1.5",
                                  "precision_mode": "must_keep_origin_dtype",
                                  "npu_adapter_emulate_precision": "on"})
    first_loss = _Stepper(graph_def, {})(dict(init))[0]
    target = float(first_loss) * 0.4 / 1.5   # switch once the loss is below 40% of the first
    env = {"LOSS_NOW": "0.0", "TARGET_LOSS": str(target)}
    schedule = AccelerateTrainSchedule.from_config(config, environ=env)
    steppers = {PHASE_LOW: _Stepper(graph_def, low_precision_config(config)),
                PHASE_ORIGINAL: _Stepper(graph_def, config)}
    state, losses, phases = dict(init), [], []
    for _ in range(60):
        phase = schedule.phase()
        loss, state = steppers[phase](state)
        phases.append(phase)
        losses.append(float(loss))
        env["LOSS_NOW"] = str(float(loss))
    switch = phases.index(PHASE_ORIGINAL)
    threshold = np.float32(target) * np.float32(1.5)
    assert 0 < switch < 60 and phases[switch:] == [PHASE_ORIGINAL] * (60 - switch)
    # the run that switched is the first after a reported loss at or below the threshold
    assert np.float32(losses[switch - 1]) <= threshold
    assert all(np.float32(v) > threshold for v in losses[:switch - 1])


def test_npu_session_switches_precision_once(monkeypatch):
    """NpuSession reads the hook's progress before each run: steps 1-4 run the low-precision
    rewrite, steps 5-8 the original precision, and the switch is in the session statistics."""
    from npu_adapter.session import NpuSession

    def build():
        graph = tf.Graph()
        with graph.as_default():
            x = tf.constant(XS)
            y = tf.constant(YS)
            w = tf1.get_variable("w", [4, 1], initializer=tf1.constant_initializer(0.5),
                                 use_resource=True)
            loss = tf.reduce_mean(tf.square(tf.nn.tanh(tf.matmul(x, w) * 3.0) - y),
                                  name="loss")
            train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
            init = tf1.global_variables_initializer()
        return graph, loss, train, init

    base = {"precision_mode": "must_keep_origin_dtype", "npu_adapter_emulate_precision": "on"}
    config = NpuConfig.from_dict(dict(base, experimental_accelerate_train_mode="fast|step|0.5"))
    monkeypatch.setenv("TOTAL_STEP", "8")
    losses = {}
    for label, cfg in (("switch", config),
                       ("low", low_precision_config(config).replace(
                           experimental_accelerate_train_mode="")),
                       ("origin", NpuConfig.from_dict(base))):
        graph, loss, train, init = build()
        monkeypatch.setenv("STEP_NOW", "0")
        with NpuSession(graph=graph, config=cfg.to_config_proto()) as sess:
            sess.run(init)
            if label == "switch":
                monkeypatch.setenv("STEP_NOW", "0")
            values = []
            for step in range(8):
                values.append(sess.run([loss, train])[0])
                monkeypatch.setenv("STEP_NOW", str(step + 1))
            losses[label] = values
            if label == "switch":
                stats = runner_of(sess).accelerate_stats()
    # run 1 initialises, runs 2-5 are steps 1-4 (low), run 6 (STEP_NOW=4=0.5*8) switches
    assert (stats["low_precision_runs"], stats["switched_at_run"]) == (5, 6)
    assert losses["switch"][0] == losses["low"][0]
    assert losses["low"][0] != losses["origin"][0]
