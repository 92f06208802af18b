"""npu_bridge.hccl: the rank environment, group management and the collectives on one rank (run
here) and at several ranks (built here; run by test_distributed_collectives.py)."""

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.distributed import groups
from npu_adapter.distributed.errors import RankEnvironmentError
from npu_adapter.errors import BackendError
from npu_bridge import _env, _init_api
from npu_bridge.estimator.npu import npu_optimizer
from npu_bridge.estimator.npu.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_bridge.estimator.npu.npu_hook import (
    NPUBroadcastGlobalVariablesHook,
    broadcast_global_variables,
)
from npu_bridge.hccl import hccl_ops
from npu_bridge.hccl.manage import api


@pytest.fixture(autouse=True)
def _single_rank_env(monkeypatch):
    for name in _env.RANK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    groups.reset()
    yield
    groups.reset()


# ---- environment -----------------------------------------------------------------------------


def test_env_defaults():
    assert (_env.rank_size(), _env.rank_id(), _env.device_id()) == (1, 0, 0)


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
    ({"RANK_SIZE": "two"}, _env.rank_size, r"RANK_SIZE \('two'\): not an integer"),
    ({"RANK_SIZE": "1.0"}, _env.rank_size, r"RANK_SIZE \('1.0'\): not an integer"),
    ({"RANK_SIZE": "0"}, _env.rank_size, r"RANK_SIZE \('0'\): out of range"),
    ({"RANK_SIZE": "1", "CM_WORKER_SIZE": "1"}, _env.rank_size,
     "RANK_SIZE and CM_WORKER_SIZE cannot be configured at the same time"),
    ({"RANK_ID": "1"}, _env.rank_id, "RANK_ID .*must be smaller than the rank size 1"),
    ({"RANK_SIZE": "4", "RANK_ID": "4"}, _env.rank_id, "RANK_ID .*must be smaller"),
    ({"RANK_ID": "-1"}, _env.rank_id, r"RANK_ID \('-1'\): out of range"),
    ({"RANK_ID": "x"}, _env.rank_id, r"RANK_ID \('x'\): not an integer"),
    ({"DEVICE_ID": "gpu0"}, _env.device_id, r"DEVICE_ID \('gpu0'\): not an integer"),
    ({"DEVICE_ID": "-2"}, _env.device_id, r"DEVICE_ID \('-2'\): out of range"),
    ({"DEVICE_ID": "x"}, api.get_rank_id, "DEVICE_ID"),
    ({"RANK_ID": "2"}, api.get_rank_size, "RANK_ID"),
])
def test_invalid_env_values_name_the_variable(monkeypatch, env, function, match):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RankEnvironmentError, match=match):
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
    (("g", 2, [0, 1]), "rank_num=2 must be an integer from 1 to the rank size 1"),
    (("g", 1, [1]), r"contains 1, which is not a world rank \(0 to 0\)"),
    (("g", 1, 0), "must be a list of world rank ids"),
    (("g", 1, [0, 0]), "has 2 entries but rank_num=1"),
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
    with tf.compat.v1.Session(graph=graph) as sess:
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
    with tf.compat.v1.Session(graph=graph) as sess:
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
    with tf.compat.v1.Session(graph=graph) as sess:
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
    (lambda x: hccl_ops.send(x, 0, 1), "dest_rank=1 is not a rank .* expected 0 to 0"),
    (lambda x: hccl_ops.receive([2], tf.float32, 0, 0), "src_rank=0 is this rank itself"),
    (lambda x: hccl_ops.send(x, 1.5, 0), "sr_tag must be an integer"),
])
def test_collective_argument_errors(call, match):
    """Checked as HCCL does; on one rank there is no peer for send/receive."""
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


# ---- several ranks: what is built (the runs are in test_distributed_collectives.py) ----------


def _opt():
    return tf.compat.v1.train.GradientDescentOptimizer(0.1)


@pytest.fixture
def four_ranks(monkeypatch):
    """This process as rank 1 of 4 (graphs are built, never run: no server starts)."""
    monkeypatch.setenv("RANK_SIZE", "4")
    monkeypatch.setenv("RANK_ID", "1")


def _op_types(graph):
    return [op.type for op in graph.get_operations() if op.type.startswith("Collective")]


def test_several_ranks_build_tensorflow_collectives(four_ranks):
    assert (api.get_rank_size(), api.get_rank_id(), api.get_local_rank_size()) == (4, 1, 4)
    with tf.Graph().as_default() as graph:
        x = tf.constant(_value())
        hccl_ops.allreduce(x, "max")
        hccl_ops.allgather(x, 4)
        hccl_ops.broadcast([x], 0)
        hccl_ops.broadcast([x], 1)
        hccl_ops.reduce_scatter(tf.zeros([8, 3]), "sum", 4)
        hccl_ops.send(x, 3, 2)
        hccl_ops.receive([2, 3], tf.float32, 3, 0)
    assert _op_types(graph) == [
        "CollectiveReduceV2", "CollectiveGatherV2", "CollectiveBcastRecvV2",
        "CollectiveBcastSendV2", "CollectiveReduceV2", "CollectiveBcastSendV2",
        "CollectiveBcastRecvV2"]
    reduce_op = next(op for op in graph.get_operations() if op.type == "CollectiveReduceV2")
    assert reduce_op.get_attr("merge_op") == b"Max" and reduce_op.name.startswith("HcomAllReduce")
    assert reduce_op.get_attr("timeout_seconds") == 600.0
    assert tf.get_static_value(reduce_op.inputs[1]) == 4
    assert tf.get_static_value(reduce_op.inputs[2]) == groups.WORLD_GROUP_KEY


def _instance_keys(build):
    with tf.Graph().as_default() as graph:
        build()
    return [int(tf.get_static_value(op.inputs[3])) for op in graph.get_operations()
            if op.type == "CollectiveReduceV2"]


def test_instance_keys_are_deterministic_and_per_group(four_ranks):
    def two_reductions():
        x = tf.constant(_value())
        hccl_ops.allreduce(x, "sum")
        hccl_ops.allreduce(x, "sum")

    first = _instance_keys(two_reductions)
    assert first == _instance_keys(two_reductions)  # the same graph again: the same keys
    assert len(set(first)) == 2
    api.create_group("pair", 2, [1, 3])

    def group_first():
        x = tf.constant(_value())
        hccl_ops.allreduce(x, "sum", group="pair")
        hccl_ops.allreduce(x, "sum")
        hccl_ops.allreduce(x, "sum")

    # The world collectives keep their keys whatever the subgroup collectives before them.
    assert _instance_keys(group_first)[1:] == first


def test_dynamic_shapes_get_a_key_per_runtime_shape(four_ranks):
    with tf.Graph().as_default() as graph:
        hccl_ops.allreduce(tf.compat.v1.placeholder(tf.float32, [None]), "sum")
    op = next(op for op in graph.get_operations() if op.type == "CollectiveReduceV2")
    assert op.inputs[3].op.type != "Const"  # computed from the runtime shape


def test_the_sum_has_a_gradient_the_others_do_not(four_ranks):
    with tf.Graph().as_default() as graph:
        x = tf.constant(_value())
        grad = tf.gradients(hccl_ops.allreduce(x, "sum"), x)[0]
        assert grad.op.type == "CollectiveReduceV2" and "/HcomAllReduceGrad/" in grad.op.name
        with pytest.raises(LookupError, match="No gradient defined"):
            tf.gradients(hccl_ops.allreduce(x, "max"), x)
    assert len(_op_types(graph)) == 3


def test_several_ranks_argument_errors(four_ranks):
    with tf.Graph().as_default():
        x = tf.constant(_value())
        with pytest.raises(ValueError, match="rank_size=2 does not match the size 4"):
            hccl_ops.allgather(x, 2)
        with pytest.raises(ValueError, match="root_rank=4 is not a rank .* expected 0 to 3"):
            hccl_ops.broadcast([x], 4)
        with pytest.raises(ValueError, match="dest_rank=1 is this rank itself"):
            hccl_ops.send(x, 0, 1)
        with pytest.raises(ValueError, match="rank=0 is not this process's rank 1"):
            hccl_ops.all_to_all_v_c(x, [[1] * 4] * 4, 0)
        with pytest.raises(ValueError, match="first dimension \\(6\\) .* not divisible by "
                                             "the group size 4"):
            hccl_ops.reduce_scatter(tf.zeros([6]), "sum", 4)
        with pytest.raises(TypeError, match="dtype string cannot be exchanged"):
            hccl_ops.allgather(tf.constant(["a"]), 4)
    with pytest.raises(ValueError, match="world rank 1, which is not in rank_ids=\\[0, 2\\]"):
        api.create_group("g", 2, [0, 2])
    with pytest.raises(ValueError, match="strictly ascending"):
        api.create_group("g", 2, [3, 1])
    api.create_group("g", 2, [1, 3])
    assert (api.get_rank_size("g"), api.get_rank_id("g")) == (2, 0)
    assert api.get_world_rank_from_group_rank("g", 1) == 3
    assert api.get_group_rank_from_world_rank(3, "g") == 1
    with pytest.raises(ValueError, match="world_rank_id=2 is not a member"):
        api.get_group_rank_from_world_rank(2, "g")


def test_rdma_ops_need_the_device_at_any_rank_count(four_ranks):
    with pytest.raises(BackendError, match="RDMA"):
        hccl_ops.remote_read(None, tf.float32)


def test_one_rank_hooks_and_callbacks_do_nothing():
    hook = NPUBroadcastGlobalVariablesHook(0, 0)
    with tf.Graph().as_default():
        hook.begin()
        assert hook._bcast_op is None
        assert broadcast_global_variables(0).type == "NoOp"
    with pytest.raises(ValueError, match="root_rank=1 is not a rank"):
        NPUBroadcastGlobalVariablesHook(1, 0)
    callback = NPUBroadcastGlobalVariablesCallback(0)
    assert isinstance(callback, tf.keras.callbacks.Callback)
    callback.on_batch_begin(0)
    assert callback.broadcast_done
    with pytest.raises(ValueError, match="root_rank=2 is not a rank"):
        NPUBroadcastGlobalVariablesCallback(2)


def test_broadcast_hook_at_several_ranks_assigns_every_variable(four_ranks):
    with tf.Graph().as_default() as graph:
        tf.compat.v1.get_variable("w", [2, 3])
        tf.compat.v1.get_variable("flags", initializer=[True, False], use_resource=True)
        tf.compat.v1.train.get_or_create_global_step()
        hook = NPUBroadcastGlobalVariablesHook(2, 1)
        hook.begin()
    assert hook._bcast_op is not None
    assert _op_types(graph) == ["CollectiveBcastRecvV2"] * 3


def test_npu_init_helpers_at_several_ranks(four_ranks):
    hooks = _init_api.npu_hooks_append()
    assert isinstance(hooks[0], NPUBroadcastGlobalVariablesHook)
    opt = _init_api.npu_tf_optimizer(_opt())
    assert isinstance(opt, npu_optimizer.NPUDistributedOptimizer)


def test_keras_distribute_optimizer_applies_averaged_gradients_at_one_rank():
    from npu_bridge.estimator.npu.npu_optimizer import KerasDistributeOptimizer

    inner = tf.keras.optimizers.SGD(learning_rate=0.5)
    config = inner.get_config()
    wrapped = KerasDistributeOptimizer(inner)
    assert wrapped is inner and isinstance(inner, (KerasDistributeOptimizer,
                                                   tf.keras.optimizers.SGD))
    assert KerasDistributeOptimizer(wrapped) is wrapped
    var = tf.Variable([1.0, 2.0])
    wrapped.apply_gradients([(tf.constant([0.2, -0.4]), var)])
    np.testing.assert_allclose(var.numpy(), [0.9, 2.2], rtol=1e-6)
    assert wrapped.get_config() == config


def test_gen_hccl_ops_builds_the_same_collectives_at_one_rank():
    from npu_bridge.hccl import hccl_ops

    g = tf.Graph()
    with g.as_default():
        x = tf.constant([1.0, -2.0])
        outputs = [hccl_ops.gen_hccl_ops.hcom_all_reduce(x, "sum"),
                   hccl_ops.gen_hccl_ops.hcom_all_gather(x, 1),
                   hccl_ops.gen_hccl_ops.hcom_broadcast([x], 0)[0]]
        with tf.compat.v1.Session(graph=g) as sess:
            for value in sess.run(outputs):
                np.testing.assert_array_equal(value, [1.0, -2.0])
