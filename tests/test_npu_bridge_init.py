"""npu_bridge import side effects (TF1 aliases, NPU session, eager mode), the npu_init
functions, and the session hooks.

Importing ``npu_bridge.npu_init`` disables eager execution for the whole process, so that part
runs in a fresh subprocess; everything else uses ``npu_bridge._init_api`` in-process.
"""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

import npu_adapter.session
import npu_bridge
from npu_bridge import _env, _init_api, _tf1_aliases
from npu_bridge.estimator import npu_ops
from npu_bridge.estimator.npu import util
from npu_bridge.estimator.npu.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_bridge.estimator.npu.npu_config import HAS_TF_ESTIMATOR, NPURunConfig
from npu_bridge.estimator.npu.npu_hook import (
    NPUBroadcastGlobalVariablesHook,
    NPUCheckpointSaverHook,
    NPUInfeedOutfeedSessionHook,
    NPULogOutfeedSessionHook,
    NPUOutputTensorHook,
    NPUShutDownHook,
    SetIterationsVarHook,
    TellMeStepOrLossHook,
)
from npu_bridge.estimator.npu.npu_optimizer import NPUDistributedOptimizer


@pytest.fixture(autouse=True)
def _single_rank_env(monkeypatch):
    for name in _env.RANK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


# ---- fresh process: import side effects ------------------------------------------------------

_SCRIPT = textwrap.dedent('''
    import json
    import os

    import tensorflow as tf

    result = {"eager_before": tf.executing_eagerly(),
              "legacy_keras_before": os.environ.get("TF_USE_LEGACY_KERAS")}

    import npu_bridge  # noqa: E402
    import npu_adapter.session  # noqa: E402

    result["legacy_keras_after"] = os.environ.get("TF_USE_LEGACY_KERAS")
    result["version"] = npu_bridge.version
    result["eager_after_npu_bridge"] = tf.executing_eagerly()
    result["session_is_npu"] = (
        npu_adapter.session.is_installed()
        and tf.Session is tf.compat.v1.Session
        and tf.InteractiveSession is tf.compat.v1.InteractiveSession)
    result["placeholder"] = tf.placeholder is tf.compat.v1.placeholder
    result["estimator_reachable"] = hasattr(npu_bridge.estimator, "npu_ops")
    result["hccl_reachable"] = hasattr(npu_bridge.hccl, "hccl_ops")

    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        y = tf.layers.dense(x, 2, kernel_initializer=tf.compat.v1.ones_initializer())
        loss = tf.reduce_mean(tf.square(y))
        step = tf.train.get_or_create_global_step()
        train = tf.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            result["dense"] = sess.run(y, {x: [[1.0, 2.0, 3.0]]}).tolist()
            sess.run(train, {x: [[1.0, 2.0, 3.0]]})
            result["step"] = int(sess.run(step))
            result["session_type"] = type(sess).__name__
            result["session_rewrites"] = npu_adapter.session.is_npu_session(sess)
            result["saver"] = type(saver).__name__

    from npu_bridge.npu_init import *  # noqa: E402,F403

    result["eager_after_npu_init"] = tf.executing_eagerly()
    result["exported"] = sorted(name for name in npu_bridge.npu_init.__all__
                                if name in globals())
    result["all"] = sorted(npu_bridge.npu_init.__all__)
    init_op = npu_ops.initialize_system()
    shutdown_op = npu_ops.shutdown_system()
    sess, shutdown = init_resource()
    result["rank"] = [get_npu_rank_id(), get_npu_local_rank_id(), get_npu_rank_size(),
                      get_npu_local_rank_size()]
    shutdown_resource(sess, shutdown)
    close_session(sess)
    keras_session = set_keras_session_npu_config()
    result["keras_session"] = backend.get_session() is keras_session
    npu_clear_session()
    result["keras_session_replaced"] = backend.get_session() is not keras_session
    keras_config = backend.get_session()._config
    result["keras_config_npu"] = any(
        opt.name == "NpuOptimizer"
        for opt in keras_config.graph_options.rewrite_options.custom_optimizers)

    from npu_bridge import _tf1_aliases  # noqa: E402
    _tf1_aliases.uninstall()
    result["after_uninstall"] = [hasattr(tf, "placeholder"), hasattr(tf.train, "Saver"),
                                 type(tf.losses).__name__]
    _tf1_aliases.install()
    result["after_reinstall"] = [hasattr(tf, "placeholder"), hasattr(tf.train, "Saver"),
                                 type(tf.losses).__name__]
    print(json.dumps(result))
''')


@pytest.fixture(scope="module")
def fresh_process(tmp_path_factory):
    script = tmp_path_factory.mktemp("npu_bridge_import") / "script.py"
    script.write_text(_SCRIPT)
    env = {key: value for key, value in os.environ.items()
           if key not in _env.RANK_ENV_VARS + ("TF_USE_LEGACY_KERAS",)}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    completed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                               env=env, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_import_npu_bridge_installs_aliases_and_npu_session(fresh_process):
    result = fresh_process
    # Set only when TensorFlow's own Keras is Keras 3 (TensorFlow >= 2.16; on 2.15 tf.keras stays
    # its Keras 2, as without npu_bridge) and tf_keras is installed (without it the legacy-Keras
    # path breaks TensorFlow).
    keras3 = int(importlib.metadata.version("keras").split(".")[0]) >= 3
    legacy = "1" if keras3 and importlib.util.find_spec("tf_keras") is not None else None
    assert result["legacy_keras_before"] is None and result["legacy_keras_after"] == legacy
    assert result["version"] == "v1.15.0"
    assert result["session_is_npu"] and result["placeholder"]
    assert result["estimator_reachable"] and result["hccl_reachable"]
    assert result["session_type"] == "Session" and result["saver"] == "Saver"
    assert result["session_rewrites"] is False  # no NpuOptimizer entry: TensorFlow's session
    assert result["dense"] == [[6.0, 6.0]]
    assert result["step"] == 1


def test_eager_mode_changes_only_with_npu_init(fresh_process):
    assert fresh_process["eager_before"] is True
    assert fresh_process["eager_after_npu_bridge"] is True
    assert fresh_process["eager_after_npu_init"] is False


def test_npu_init_star_exports(fresh_process):
    assert fresh_process["exported"] == fresh_process["all"]
    for name in ("NPURunConfig", "ProfilingConfig", "MemoryConfig", "DumpConfig",
                 "DynamicInputConfig", "ExperimentalConfig", "npu_ops", "npu_rnn", "npu_scope",
                 "util", "hccl_ops", "npu_unary_ops", "get_rank_size", "create_group",
                 "npu_config_proto", "init_resource", "config_pb2", "rewriter_config_pb2",
                 "RewriterConfig", "session", "session_run_hook", "tf", "os",
                 "NPUDistributedOptimizer", "NPULossScaleOptimizer", "FixedLossScaleManager",
                 "TellMeStepOrLossHook", "NPUEstimator", "NpuEmptyHook", "experimental_options"):
        assert name in fresh_process["all"], name


def test_npu_init_resource_and_keras_session(fresh_process):
    assert fresh_process["rank"] == [0, 0, 1, 1]
    assert fresh_process["keras_session"] and fresh_process["keras_session_replaced"]
    assert fresh_process["keras_config_npu"]


def test_aliases_uninstall_and_reinstall(fresh_process):
    keras_module = fresh_process["after_uninstall"][2]
    assert fresh_process["after_uninstall"][:2] == [False, False] and keras_module == "module"
    assert fresh_process["after_reinstall"] == [True, True, "TF1View"]


# ---- aliases in this process -----------------------------------------------------------------


def test_every_alias_is_the_compat_v1_object():
    v1 = tf.compat.v1
    assert npu_bridge.version == "v1.15.0"
    added = _tf1_aliases.installed()
    for name in _tf1_aliases.TOP_LEVEL_ALIASES:
        assert hasattr(tf, name), name
        if name not in ("Session", "InteractiveSession"):
            assert getattr(tf, name) is getattr(v1, name), name
    assert "placeholder" in added["top_level"] and "layers" in added["top_level"]
    for module, names in added["modules"].items():
        for name in names:
            assert getattr(getattr(tf, module), name) is getattr(getattr(v1, module), name)
    for name in ("Saver", "AdamOptimizer", "MomentumOptimizer", "import_meta_graph",
                 "get_or_create_global_step", "MonitoredTrainingSession", "SessionRunHook"):
        assert name in added["modules"]["train"], name
    assert {"FileWriter", "merge_all"} <= set(added["modules"]["summary"])
    assert "rnn_cell" in added["modules"]["nn"]
    assert added["views"] == ["initializers", "losses", "metrics"]


def test_tf2_members_keep_their_meaning():
    conflicts = _tf1_aliases.conflicts()
    for name in ("tf.nn.dropout", "tf.summary.scalar", "tf.losses.mean_squared_error",
                 "tf.train.Checkpoint"):
        assert name in conflicts
    assert tf.nn.dropout is not tf.compat.v1.nn.dropout
    assert tf.summary.scalar is not tf.compat.v1.summary.scalar
    assert tf.losses.softmax_cross_entropy is tf.compat.v1.losses.softmax_cross_entropy
    assert tf.losses.mean_squared_error is not tf.compat.v1.losses.mean_squared_error
    assert tf.losses.MeanSquaredError is tf.keras.losses.MeanSquaredError
    assert not hasattr(tf.keras.losses, "softmax_cross_entropy")  # Keras is untouched
    assert "get_total_loss" in dir(tf.losses) and "MeanSquaredError" in dir(tf.losses)
    with pytest.raises(AttributeError, match="neither in TensorFlow 2 nor in tf.compat.v1"):
        tf.metrics.no_such_metric  # noqa: B018


def test_npu_session_is_installed():
    # This module imported npu_adapter.session before npu_bridge (and tf_keras), so the session
    # module may hold an older tf.compat.v1 object: every one must have the NPU classes.
    assert npu_adapter.session.is_installed()
    assert tf.Session is tf.compat.v1.Session
    assert sys.modules["tensorflow.compat.v1"].Session is tf.compat.v1.Session
    with tf.compat.v1.Session(graph=tf.Graph(), config=_init_api.npu_config_proto()) as sess:
        assert npu_adapter.session.is_npu_session(sess)


# ---- npu_init functions ----------------------------------------------------------------------


def _assert_npu_defaults(proto):
    rewrite = proto.graph_options.rewrite_options
    assert [opt.name for opt in rewrite.custom_optimizers].count("NpuOptimizer") == 1
    assert proto.allow_soft_placement and not proto.log_device_placement
    assert rewrite.remapping == RewriterConfig.OFF
    assert proto.graph_options.optimizer_options.global_jit_level == \
        config_pb2.OptimizerOptions.OFF


def test_npu_config_proto_new_and_existing():
    proto = _init_api.npu_config_proto()
    _assert_npu_defaults(proto)
    assert proto.graph_options.rewrite_options.memory_optimization == RewriterConfig.OFF
    given = config_pb2.ConfigProto(log_device_placement=True, allow_soft_placement=False)
    entry = given.graph_options.rewrite_options.custom_optimizers.add()
    entry.name = "NpuOptimizer"
    entry.parameter_map["mix_compile_mode"].b = True
    given.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.ON_1
    assert _init_api.npu_config_proto(given) is given
    _assert_npu_defaults(given)
    assert given.graph_options.rewrite_options.memory_optimization == \
        RewriterConfig.DEFAULT_MEM_OPT  # only turned off when the entry is added
    assert given.graph_options.rewrite_options.custom_optimizers[0] \
        .parameter_map["mix_compile_mode"].b
    with pytest.raises(TypeError, match="ConfigProto"):
        _init_api.npu_config_proto("config")


def test_graph_and_optimizer_options():
    graph_options = _init_api.npu_graph_options()
    assert graph_options.optimizer_options.global_jit_level == config_pb2.OptimizerOptions.OFF
    given = config_pb2.GraphOptions(build_cost_model=3)
    assert _init_api.npu_graph_options(given) is given and given.build_cost_model == 3
    options = _init_api.npu_optimizer_options(
        config_pb2.OptimizerOptions(do_function_inlining=True))
    assert options.global_jit_level == config_pb2.OptimizerOptions.OFF
    assert options.do_function_inlining
    with pytest.raises(TypeError, match="GraphOptions"):
        _init_api.npu_graph_options(config_pb2.ConfigProto())
    with pytest.raises(TypeError, match="OptimizerOptions"):
        _init_api.npu_optimizer_options(1)
    assert _init_api.experimental_options["constant_folding"] == RewriterConfig.ON
    assert _init_api.experimental_options["disable_model_pruning"] is False


def test_npu_run_config_init():
    config = _init_api.npu_run_config_init()
    expected = tf.estimator.RunConfig if HAS_TF_ESTIMATOR else NPURunConfig
    assert type(config) is expected
    _assert_npu_defaults(config.session_config)
    npu_config = NPURunConfig(session_config=config_pb2.ConfigProto(log_device_placement=True))
    assert _init_api.npu_run_config_init(npu_config) is npu_config
    _assert_npu_defaults(npu_config.session_config)
    with pytest.raises(TypeError, match="run_config must be"):
        _init_api.npu_run_config_init({"model_dir": "/tmp"})


def test_init_resource_shutdown_and_close():
    util.global_dict_init()
    assert [_init_api.get_npu_rank_id(), _init_api.get_npu_local_rank_id(),
            _init_api.get_npu_rank_size(), _init_api.get_npu_local_rank_size()] == [0, 0, 1, 1]
    util.set_value("npu_rank_size", 5)
    with tf.Graph().as_default() as graph:
        sess, shutdown = _init_api.init_resource(config_pb2.ConfigProto())
        assert npu_adapter.session.is_npu_session(sess) and sess.graph is graph
        _assert_npu_defaults(sess._config)
        assert shutdown.name == "NPUShutdown" and graph.get_operation_by_name("NPUInit")
        assert _init_api.get_npu_rank_size() == 1  # re-initialised and recorded
        _init_api.shutdown_resource(sess, shutdown)
        _init_api.close_session(sess)
        with pytest.raises(RuntimeError, match="closed Session"):
            sess.run(shutdown)


def test_hooks_and_callbacks_append():
    hooks = [_init_api.NpuEmptyHook()]
    assert _init_api.npu_hooks_append(hooks) is hooks
    assert isinstance(hooks[1], NPUBroadcastGlobalVariablesHook) and len(hooks) == 2
    fresh = _init_api.npu_hooks_append(("not", "a list"))
    assert len(fresh) == 1 and isinstance(fresh[0], NPUBroadcastGlobalVariablesHook)
    callbacks = _init_api.npu_callbacks_append()
    assert len(callbacks) == 1 and isinstance(callbacks[0], NPUBroadcastGlobalVariablesCallback)
    assert isinstance(_init_api.NpuEmptyHook(), tf.compat.v1.train.SessionRunHook)


def test_optimizer_helpers():
    opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    wrapped = _init_api.npu_tf_optimizer(opt)
    assert isinstance(wrapped, NPUDistributedOptimizer) and wrapped._opt is opt
    keras_opt = tf.keras.optimizers.SGD(0.1)
    assert _init_api.npu_keras_optimizer(keras_opt) is keras_opt  # made distributed in place


# ---- hooks -----------------------------------------------------------------------------------


def _counter_graph():
    step = tf.compat.v1.train.get_or_create_global_step()
    loss = tf.cast(10 - step, tf.float32, name="loss")
    train = tf.compat.v1.assign_add(step, 1)
    return step, loss, train


def test_set_iterations_var_hook():
    with tf.Graph().as_default():
        _, _, train = _counter_graph()
        hook = SetIterationsVarHook(4)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            sess.run(train)
            values = sess.run([util.create_or_get_var(name) for name in
                               ("iterations_per_loop", "loop_cond", "zero", "one")])
    assert values == [3, 0, 0, 1]
    with pytest.raises(ValueError, match="iterations_per_loop must be positive"):
        SetIterationsVarHook(0)


def test_tell_me_step_or_loss_hook(monkeypatch):
    for name in ("STEP_NOW", "TOTAL_STEP", "LOSS_NOW", "TARGET_LOSS"):
        monkeypatch.delenv(name, raising=False)
    with tf.Graph().as_default():
        step, loss, train = _counter_graph()
        hook = TellMeStepOrLossHook(step=step.name, total_step=100, loss="loss:0",
                                    final_loss=7.1)
        assert (os.environ["STEP_NOW"], os.environ["TOTAL_STEP"]) == ("0", "100")
        assert (os.environ["LOSS_NOW"], os.environ["TARGET_LOSS"]) == ("0.0", "7.1")
        idle = tf.no_op()
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            sess.run(train)
            sess.run(train)
            sess.run(idle)  # a run that does not race with the increment
    assert os.environ["STEP_NOW"] == "2"
    assert float(os.environ["LOSS_NOW"]) == 8.0


@pytest.mark.parametrize("kwargs,match", [
    ({}, "step and loss cannot both be None"),
    ({"step": "global_step:0"}, "total_step must be a positive int"),
    ({"step": "global_step:0", "total_step": 0}, "total_step must be a positive int"),
    ({"loss": "loss:0"}, "final_loss must be a number"),
    ({"loss": "loss:0", "final_loss": "7"}, "final_loss must be a number"),
])
def test_tell_me_step_or_loss_hook_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TellMeStepOrLossHook(**kwargs)


def test_npu_output_tensor_hook():
    calls = []
    with tf.Graph().as_default():
        step, loss, train = _counter_graph()
        # the step variable is read inside the control dependency: after each train step
        hook = NPUOutputTensorHook({"step": step}, dependencies=train, output_fn=calls.append,
                                   output_every_n_steps=2)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            for _ in range(3):
                sess.run(train)
    assert [[item["step"] for item in batch] for batch in calls] == [[1, 2], [3]]
    at_end = []
    with tf.Graph().as_default():
        step, loss, train = _counter_graph()
        hook = NPUOutputTensorHook([loss], output_fn=at_end.append)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            sess.run(train)
            sess.run(train)
    assert [[item["loss:0"] for item in batch] for batch in at_end] == [[10.0, 9.0]]
    with pytest.raises(ValueError, match="needs an output_fn"):
        NPUOutputTensorHook({"loss": "loss:0"})
    with pytest.raises(TypeError, match="output_fn must be callable"):
        NPUOutputTensorHook({"loss": "loss:0"}, output_fn=3)


def test_checkpoint_saver_and_shutdown_hooks(tmp_path):
    with tf.Graph().as_default() as graph:
        _, _, train = _counter_graph()
        saver_hook = NPUCheckpointSaverHook(str(tmp_path), save_steps=1,
                                            saver=tf.compat.v1.train.Saver())
        shutdown_hook = NPUShutDownHook()
        with tf.compat.v1.train.MonitoredSession(hooks=[saver_hook, shutdown_hook]) as sess:
            sess.run(train)
        shutdown = graph.get_operation_by_name("NPUShutdown")
        assert shutdown.node_def.attr[npu_ops.NPU_ADAPTER_OP_ATTR].s == b"NPUShutdown"
    assert tf.train.latest_checkpoint(str(tmp_path)) is not None


def test_outfeed_hooks_are_not_provided():
    with pytest.raises(NotImplementedError, match="NPULogOutfeedSessionHook .* outfeed"):
        NPULogOutfeedSessionHook(sys.stderr)
    with pytest.raises(NotImplementedError, match="NPUInfeedOutfeedSessionHook"):
        NPUInfeedOutfeedSessionHook([], "channel")


def test_marker_ops_survive_in_graph_def():
    with tf.Graph().as_default() as graph:
        npu_ops.initialize_system()
    nodes = {node.name: node for node in graph.as_graph_def().node}
    assert nodes["NPUInit"].op == "NoOp"
    assert nodes["NPUInit"].attr["_npu_adapter_op"].s == b"NPUInit"
    assert np.array_equal([1], [1])
