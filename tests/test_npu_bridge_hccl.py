"""npu_bridge.hccl: the rank environment, group management and collectives on a single rank,
and the distributed error of every entry point when RANK_SIZE > 1."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.client.session import Session as TfSession

from npu_adapter.errors import BackendError
from npu_bridge import _env, _init_api
from npu_bridge.estimator.npu import npu_optimizer
from npu_bridge.estimator.npu.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_bridge.estimator.npu.npu_hook import (
    NPUBroadcastGlobalVariablesHook,
    broadcast_global_variables,
)
from npu_bridge.estimator.npu.npu_loss_scale_manager import FixedLossScaleManager
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
from npu_bridge.hccl import hccl_ops
from npu_bridge.hccl.manage import api


@pytest.fixture(autouse=True)
def _single_rank_env(monkeypatch):
    for name in _env.RANK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    yield
    for group in sorted(api._GROUPS):
        api._GROUPS.pop(group)
    api._SPLIT_STRATEGIES.clear()


# ---- environment -----------------------------------------------------------------------------


def test_env_defaults():
    assert (_env.rank_size(), _env.rank_id(), _env.device_id()) == (1, 0, 0)
    assert _env.require_single_rank("x") == 1


def test_env_values(monkeypatch):
    monkeypatch.setenv("RANK_SIZE", " 1 ")
    monkeypatch.setenv("RANK_ID", "0")
    monkeypatch.setenv("DEVICE_ID", "5")
    assert (_env.rank_size(), _env.rank_id(), _env.device_id()) == (1, 0, 5)
    monkeypatch.delenv("RANK_SIZE")
    monkeypatch.setenv("CM_WORKER_SIZE", "4")
    assert _env.rank_size() == 4
    monkeypatch.setenv("RANK_ID", "3")
    assert _env.rank_id() == 3


@pytest.mark.parametrize("env,function,match", [
    ({"RANK_SIZE": "two"}, _env.rank_size, "RANK_SIZE='two' is not an integer"),
    ({"RANK_SIZE": "1.0"}, _env.rank_size, "RANK_SIZE='1.0' is not an integer"),
    ({"RANK_SIZE": "0"}, _env.rank_size, "RANK_SIZE='0' is out of range"),
    ({"RANK_SIZE": "1", "CM_WORKER_SIZE": "1"}, _env.rank_size,
     "RANK_SIZE and CM_WORKER_SIZE cannot be configured at the same time"),
    ({"RANK_ID": "1"}, _env.rank_id, "RANK_ID=1 must be smaller than the rank size 1"),
    ({"RANK_SIZE": "4", "RANK_ID": "4"}, _env.rank_id, "RANK_ID=4 must be smaller"),
    ({"RANK_ID": "-1"}, _env.rank_id, "RANK_ID='-1' is out of range"),
    ({"RANK_ID": "x"}, _env.rank_id, "RANK_ID='x' is not an integer"),
    ({"DEVICE_ID": "gpu0"}, _env.device_id, "DEVICE_ID='gpu0' is not an integer"),
    ({"DEVICE_ID": "-2"}, _env.device_id, "DEVICE_ID='-2' is out of range"),
    ({"DEVICE_ID": "x"}, api.get_rank_id, "DEVICE_ID"),
    ({"RANK_ID": "2"}, api.get_rank_size, "RANK_ID=2"),
])
def test_invalid_env_values_name_the_variable(monkeypatch, env, function, match):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=match):
        function()


# ---- group management ------------------------------------------------------------------------


def test_world_group_functions():
    assert api.get_rank_size() == 1 and api.get_local_rank_size() == 1
    assert api.get_rank_id() == 0 and api.get_local_rank_id() == 0
    assert api.get_world_rank_from_group_rank(api.WORLD_GROUP, 0) == 0
    assert api.get_group_rank_from_world_rank(0, api.WORLD_GROUP) == 0
    with pytest.raises(ValueError, match="group_rank_id=1 is not a rank of group"):
        api.get_world_rank_from_group_rank(api.WORLD_GROUP, 1)
    with pytest.raises(ValueError, match="world_rank_id=3 is not a member"):
        api.get_group_rank_from_world_rank(3, api.WORLD_GROUP)
    with pytest.raises(ValueError, match="unknown group 'g1'"):
        api.get_rank_size("g1")
    with pytest.raises(ValueError, match="group must be a non-empty string"):
        api.get_rank_id("")


def test_create_and_destroy_group():
    api.create_group("g1", 1, [0])
    assert api.get_rank_size("g1") == 1 and api.get_rank_id("g1") == 0
    assert api.get_world_rank_from_group_rank("g1", 0) == 0
    with tf.Graph().as_default():
        assert hccl_ops.allreduce(tf.constant(1.0), "sum", group="g1") is not None
    with pytest.raises(ValueError, match="group 'g1' already exists"):
        api.create_group("g1", 1, [0])
    api.destroy_group("g1")
    with pytest.raises(ValueError, match="unknown group 'g1'"):
        api.destroy_group("g1")


@pytest.mark.parametrize("args,match", [
    (("g", 2, [0, 1]), "rank_num must be 1"),
    (("g", 1, [1]), r"rank_ids must be \[0\]"),
    (("g", 1, 0), r"rank_ids must be \[0\]"),
    ((api.WORLD_GROUP, 1, [0]), "is the world group"),
    (("", 1, [0]), "non-empty string"),
    (("x" * 128, 1, [0]), "longer than 127"),
])
def test_create_group_errors(args, match):
    with pytest.raises(ValueError, match=match):
        api.create_group(*args)


def test_world_group_cannot_be_destroyed():
    with pytest.raises(ValueError, match="cannot be destroyed"):
        api.destroy_group(api.WORLD_GROUP)


def test_split_strategies():
    assert api.get_split_strategy() is None
    api.set_split_strategy_by_idx([3, 10])
    assert api.get_split_strategy() == ("idx", (3, 10))
    api.set_split_strategy_by_size([60, 40])
    assert api.get_split_strategy() == ("size", (60, 40))
    for bad, match in (([10, 3], "strictly ascending"), ([-1, 2], ">= 0"), ([], "non-empty"),
                       ([1.5], "integers")):
        with pytest.raises(ValueError, match=match):
            api.set_split_strategy_by_idx(bad)
    for bad in ([50, 40], [120, -20], [0, 100]):
        with pytest.raises(ValueError, match="summing to 100"):
            api.set_split_strategy_by_size(bad)
    assert api.get_split_strategy() == ("size", (60, 40))


# ---- collectives -----------------------------------------------------------------------------


def _value():
    return np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


def _evaluate(build):
    with tf.Graph().as_default() as graph:
        fetches = build(tf.constant(_value()))
    with TfSession(graph=graph) as sess:
        return sess.run(fetches)


@pytest.mark.parametrize("reduction", ["sum", "prod", "max", "min"])
def test_allreduce_over_one_rank_is_the_input(reduction):
    np.testing.assert_array_equal(_evaluate(lambda x: hccl_ops.allreduce(x, reduction)),
                                  _value())


@pytest.mark.parametrize("build", [
    lambda x: hccl_ops.allgather(x, 1),
    lambda x: hccl_ops.reduce(x, "sum", 0),
    lambda x: hccl_ops.reduce_scatter(x, "max", 1),
    lambda x: npu_optimizer.allreduce(x),
    lambda x: npu_optimizer.allreduce(x, average=False),
    lambda x: npu_optimizer.reduce(x, 0),
    lambda x: npu_optimizer.npu_allreduce(x),
    lambda x: npu_optimizer.npu_allreduce(x, "min"),
], ids=["allgather", "reduce", "reduce_scatter", "opt_allreduce_mean", "opt_allreduce_sum",
        "opt_reduce", "npu_allreduce_mean", "npu_allreduce_min"])
def test_one_rank_collectives_are_identities(build):
    np.testing.assert_array_equal(_evaluate(build), _value())


def test_collective_op_names():
    with tf.Graph().as_default():
        x = tf.constant(1.0)
        assert hccl_ops.allreduce(x, "sum").op.name == "HcomAllReduce"
        assert hccl_ops.allgather(x, 1).op.name == "HcomAllGather"
        assert hccl_ops.broadcast([x], 0)[0].op.name.startswith("HcomBroadcast/")


def test_broadcast_returns_a_list():
    result = _evaluate(lambda x: hccl_ops.broadcast([x, x * 2], 0))
    assert isinstance(result, list) and len(result) == 2
    np.testing.assert_array_equal(result[1], _value() * 2)
    single = _evaluate(lambda x: hccl_ops.broadcast(x, root_rank=0))
    assert isinstance(single, list) and len(single) == 1


def test_npu_allreduce_structures():
    with tf.Graph().as_default() as graph:
        dense = tf.constant([1.0, 2.0])
        sparse = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([1]),
                                  tf.constant([3, 2]))
        result = npu_optimizer.npu_allreduce([dense, None, sparse], "sum")
        single = npu_optimizer.allreduce(sparse)
    assert result[1] is None and isinstance(result[2], tf.IndexedSlices)
    assert isinstance(single, tf.IndexedSlices)
    with TfSession(graph=graph) as sess:
        dense_value, values, indices = sess.run([result[0], result[2].values, single.indices])
    np.testing.assert_array_equal(dense_value, [1.0, 2.0])
    np.testing.assert_array_equal(values, [[1.0, 2.0]])
    np.testing.assert_array_equal(indices, [1])
    with pytest.raises(ValueError, match="reduction='avg'"):
        npu_optimizer.npu_allreduce(dense, "avg")


def test_all_to_all_over_one_rank():
    data = np.arange(10, dtype=np.float32)
    with tf.Graph().as_default() as graph:
        out = hccl_ops.all_to_all_v(data, [4], [3], [4], [0])
        bad = hccl_ops.all_to_all_v(data, [4], [0], [3], [0])
        out_c = hccl_ops.all_to_all_v_c(data, [[6]], 0)
    with TfSession(graph=graph) as sess:
        np.testing.assert_array_equal(sess.run(out), [3, 4, 5, 6])
        np.testing.assert_array_equal(sess.run(out_c), np.arange(6))
        with pytest.raises(tf.errors.InvalidArgumentError, match="recv_counts"):
            sess.run(bad)
    with tf.Graph().as_default(), pytest.raises(ValueError, match="rank=1"):
        hccl_ops.all_to_all_v_c(data, [[6]], 1)


@pytest.mark.parametrize("call,match", [
    (lambda x: hccl_ops.allreduce(x, "mean"), "reduction='mean' is not supported"),
    (lambda x: hccl_ops.allreduce(x, "sum", fusion=3), "fusion=3 is invalid"),
    (lambda x: hccl_ops.allreduce(x, "sum", fusion_id=1.5), "fusion_id must be an integer"),
    (lambda x: hccl_ops.allreduce(x, "sum", group="other"), "unknown group 'other'"),
    (lambda x: hccl_ops.allgather(x, 2), "rank_size=2 does not match"),
    (lambda x: hccl_ops.reduce_scatter(x, "sum", 8), "rank_size=8"),
    (lambda x: hccl_ops.broadcast([x], 1), "root_rank=1 is not a rank"),
    (lambda x: hccl_ops.broadcast([x], 0, fusion=1), "fusion=1 is invalid"),
    (lambda x: hccl_ops.reduce(x, "sum", 2), "root_rank=2"),
    (lambda x: hccl_ops.send(x, 0, 1), "dest_rank=1 .* no other rank"),
    (lambda x: hccl_ops.receive([2], tf.float32, 0, 0), "src_rank=0 .* no other rank"),
])
def test_collective_argument_errors(call, match):
    with tf.Graph().as_default(), pytest.raises(ValueError, match=match):
        call(tf.constant(1.0))


@pytest.mark.parametrize("call", [
    lambda: hccl_ops.remote_read(None, tf.float32),
    lambda: hccl_ops.remote_ref_read(None, None, 0),
    lambda: hccl_ops.remote_write(None, None, tf.float32),
    lambda: hccl_ops.remote_scatter_write(None, None, 0),
    lambda: hccl_ops.gather_all_to_all_v(None, None, None, None, tf.float32, -1),
])
def test_rdma_ops_need_the_device(call):
    with pytest.raises(BackendError, match="RDMA and needs the cann backend"):
        call()


# ---- more than one rank ----------------------------------------------------------------------


def _opt():
    return tf.compat.v1.train.GradientDescentOptimizer(0.1)


MULTI_RANK_ENTRY_POINTS = {
    "allreduce": lambda: hccl_ops.allreduce(tf.constant(1.0), "sum"),
    "allgather": lambda: hccl_ops.allgather(tf.constant(1.0), 8),
    "broadcast": lambda: hccl_ops.broadcast([tf.constant(1.0)], 0),
    "reduce": lambda: hccl_ops.reduce(tf.constant(1.0), "sum", 0),
    "reduce_scatter": lambda: hccl_ops.reduce_scatter(tf.constant(1.0), "sum", 8),
    "send": lambda: hccl_ops.send(tf.constant(1.0), 0, 1),
    "receive": lambda: hccl_ops.receive([1], tf.float32, 0, 1),
    "remote_read": lambda: hccl_ops.remote_read(None, tf.float32),
    "all_to_all_v": lambda: hccl_ops.all_to_all_v([1.0], [1], [0], [1], [0]),
    "all_to_all_v_c": lambda: hccl_ops.all_to_all_v_c([1.0], [[1]], 0),
    "create_group": lambda: api.create_group("g", 8, list(range(8))),
    "destroy_group": lambda: api.destroy_group("g"),
    "get_rank_size": api.get_rank_size,
    "get_local_rank_size": api.get_local_rank_size,
    "get_rank_id": api.get_rank_id,
    "get_local_rank_id": api.get_local_rank_id,
    "get_world_rank_from_group_rank": lambda: api.get_world_rank_from_group_rank(
        api.WORLD_GROUP, 1),
    "get_group_rank_from_world_rank": lambda: api.get_group_rank_from_world_rank(
        1, api.WORLD_GROUP),
    "set_split_strategy_by_idx": lambda: api.set_split_strategy_by_idx([1]),
    "set_split_strategy_by_size": lambda: api.set_split_strategy_by_size([100]),
    "opt_allreduce": lambda: npu_optimizer.allreduce(tf.constant(1.0)),
    "opt_reduce": lambda: npu_optimizer.reduce(tf.constant(1.0), 0),
    "npu_allreduce": lambda: npu_optimizer.npu_allreduce([tf.constant(1.0)]),
    "NPUDistributedOptimizer": lambda: npu_optimizer.NPUDistributedOptimizer(_opt()),
    "NPUOptimizer": lambda: npu_optimizer.NPUOptimizer(_opt(), is_distributed=True),
    "NPULossScaleOptimizer": lambda: NPULossScaleOptimizer(
        _opt(), FixedLossScaleManager(2), is_distributed=True),
    "KerasDistributeOptimizer": lambda: npu_optimizer.KerasDistributeOptimizer(object()),
    "npu_distributed_optimizer_wrapper": lambda: npu_optimizer
    .npu_distributed_optimizer_wrapper(_opt()),
    "NPUBroadcastGlobalVariablesHook": lambda: NPUBroadcastGlobalVariablesHook(0, 0),
    "broadcast_global_variables": lambda: broadcast_global_variables(0, 0),
    "NPUBroadcastGlobalVariablesCallback": lambda: NPUBroadcastGlobalVariablesCallback(0),
    "npu_hooks_append": _init_api.npu_hooks_append,
    "npu_callbacks_append": _init_api.npu_callbacks_append,
    "npu_tf_optimizer": lambda: _init_api.npu_tf_optimizer(_opt()),
    "npu_keras_optimizer": lambda: _init_api.npu_keras_optimizer(object()),
    "init_resource": _init_api.init_resource,
}


@pytest.mark.parametrize("name", sorted(MULTI_RANK_ENTRY_POINTS))
def test_more_than_one_rank_raises_backend_error(monkeypatch, name):
    monkeypatch.setenv("RANK_SIZE", "8")
    monkeypatch.setenv("RANK_ID", "3")
    with tf.Graph().as_default(), pytest.raises(BackendError) as info:
        MULTI_RANK_ENTRY_POINTS[name]()
    message = str(info.value)
    assert "distributed training needs" in message and "HCCL" in message
    assert "this build runs a single rank" in message
    for variable in ("RANK_SIZE=8", "CM_WORKER_SIZE", "RANK_ID", "DEVICE_ID"):
        assert variable in message


def test_cm_worker_size_is_named(monkeypatch):
    monkeypatch.setenv("CM_WORKER_SIZE", "2")
    with pytest.raises(BackendError, match="CM_WORKER_SIZE=2"):
        api.get_rank_size()
    monkeypatch.setenv("CM_WORKER_SIZE", "1")
    assert api.get_rank_size() == 1


def test_one_rank_hooks_and_callbacks_do_nothing():
    hook = NPUBroadcastGlobalVariablesHook(0, 0)
    assert type(hook).begin is tf.compat.v1.train.SessionRunHook.begin
    with pytest.raises(ValueError, match="root_rank=1"):
        NPUBroadcastGlobalVariablesHook(1, 0)
    callback = NPUBroadcastGlobalVariablesCallback(0)
    assert isinstance(callback, tf.keras.callbacks.Callback)
    with pytest.raises(ValueError, match="root_rank=2"):
        NPUBroadcastGlobalVariablesCallback(2)
    with tf.Graph().as_default():
        assert broadcast_global_variables(0, 0).type == "NoOp"
