"""npu_bridge.estimator.npu.util: checks, loop sinking, sharding helpers, graph-level attrs."""

import os

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.errors import NpuConfigError
from npu_bridge import _env
from npu_bridge.estimator.npu import util
from npu_bridge.estimator.npu.npu_config import ExperimentalConfig, GraphMemoryOptimizeConfig


@pytest.fixture(autouse=True)
def _single_rank_env(monkeypatch):
    for name in _env.RANK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def _attr(op, name):
    value = op.node_def.attr[name]
    field = value.WhichOneof("value")
    return field, getattr(value, field)


# ---- checks ----------------------------------------------------------------------------------


def test_check_not_none():
    util.check_not_none(0, "x")
    with pytest.raises(ValueError, match="x must not be None"):
        util.check_not_none(None, "x")


@pytest.mark.parametrize("check,good,bad_value,bad_type", [
    (util.check_positive_integer, [1, 7], [0, -1], [1.0, "1", None, True]),
    (util.check_nonnegative_integer, [0, 3], [-1], [0.0, "0", None, False]),
])
def test_integer_checks(check, good, bad_value, bad_type):
    for value in good:
        check(value, "n")
    for value in bad_value:
        with pytest.raises(ValueError, match="n must be"):
            check(value, "n")
    for value in bad_type:
        with pytest.raises(TypeError, match="n must be int"):
            check(value, "n")


def test_check_bool_type():
    util.check_bool_type(True, "flag")
    util.check_bool_type(False, "flag")
    for value in (1, 0, "True", None):
        with pytest.raises(TypeError, match="flag must be True or False"):
            util.check_bool_type(value, "flag")


@pytest.mark.parametrize("value,expected", [(True, 1), (False, 0), (1, -1), (None, -1),
                                            ("True", -1)])
def test_convert_bool_to_int(value, expected):
    assert util.convert_bool_to_int(value) == expected


def test_format_string():
    assert util.format_string(None, "s") == ""
    assert util.format_string("abc", "s") == "abc"
    with pytest.raises(TypeError, match="s must be string"):
        util.format_string(3, "s")


def test_check_profiling_options():
    assert util.check_profiling_options(["training_trace"]) == "training_trace"
    assert util.check_profiling_options(("training_trace", "task_time", "op_trace")) == \
        "training_trace:task_time:op_trace"
    for bad in ([], (), None, "training_trace"):
        with pytest.raises(ValueError, match="non-empty list"):
            util.check_profiling_options(bad)
    with pytest.raises(ValueError, match="'task_trace' is invalid"):
        util.check_profiling_options(["training_trace", "task_trace"])


def test_check_path(tmp_path):
    assert util.check_path(str(tmp_path)) == os.path.realpath(str(tmp_path))
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    assert util.check_path(str(link)) == os.path.realpath(str(tmp_path))
    with pytest.raises(ValueError, match="is not exists"):
        util.check_path(str(tmp_path / "missing"))
    file_path = tmp_path / "file.txt"
    file_path.write_text("x")
    with pytest.raises(ValueError, match="is not directory"):
        util.check_path(str(file_path))
    with pytest.raises(ValueError, match="is not exists"):
        util.check_path(None)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read and write any directory")
def test_check_path_without_permission(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(ValueError, match="read and write permissions"):
            util.check_path(str(locked))
    finally:
        locked.chmod(0o700)


def test_check_aoe_mode():
    for mode in ("1", "2", "4"):
        util.check_aoe_mode(mode)
    for mode in ("3", 1, "", None):
        with pytest.raises(ValueError, match="aoe_mode"):
            util.check_aoe_mode(mode)


# ---- loop sinking ----------------------------------------------------------------------------


def test_register_func_is_idempotent_and_the_collection_survives_a_meta_graph():
    util.register_func("iterations_per_loop")
    util.register_func("iterations_per_loop")
    with tf.Graph().as_default():
        var = util.create_or_get_var("iterations_per_loop")
        meta = tf.compat.v1.train.export_meta_graph()
    assert "npu_runconfig_iterations_per_loop" in meta.collection_def
    with tf.Graph().as_default() as graph:
        tf.compat.v1.train.import_meta_graph(meta)
        (restored,) = graph.get_collection("npu_runconfig_iterations_per_loop")
        assert isinstance(restored, tf.Variable) and restored.name == var.name
        assert util.create_or_get_var("iterations_per_loop") is restored


def test_create_or_get_var():
    with tf.Graph().as_default() as graph:
        tf.compat.v1.train.create_global_step()
        var = util.create_or_get_var("loop_cond")
        again = util.create_or_get_var("loop_cond")
        assert var is again
        assert var.dtype.base_dtype == tf.int64
        assert var.name == "npu_runconfig/loop_cond:0"
        assert graph.get_collection("npu_runconfig_loop_cond") == [var]
        assert var in graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
        assert var not in tf.compat.v1.trainable_variables()


def _train_op():
    var = tf.compat.v1.get_variable("w", initializer=1.0, use_resource=True)
    return tf.compat.v1.assign_add(var, 1.0).op


def test_set_iteration_per_loop_loads_variables():
    with tf.Graph().as_default():
        train_op = _train_op()
        with tf.compat.v1.Session() as sess:
            assert util.set_iteration_per_loop(sess, train_op, 1) is train_op
            for name in ("iterations_per_loop", "loop_cond", "zero", "one"):
                util.create_or_get_var(name)
            sess.run(tf.compat.v1.local_variables_initializer())
            group = util.set_iteration_per_loop(sess, train_op, 5)
            assert group.name == "IterationOp"
            assert train_op in group.control_inputs
            values = sess.run([util.create_or_get_var(name) for name in
                               ("iterations_per_loop", "loop_cond", "zero", "one")])
            assert values == [4, 0, 0, 1]


def test_set_iteration_per_loop_errors():
    with tf.Graph().as_default():
        train_op = _train_op()
        tensor = tf.constant(1.0)
        with pytest.raises(ValueError, match="type is 'float32'.*'Operation'"):
            util.set_iteration_per_loop(None, tensor, 2)
        with pytest.raises(ValueError, match="iterations_per_loop must be positive"):
            util.set_iteration_per_loop(None, train_op, 0)
        with pytest.raises(TypeError, match="iterations_per_loop must be int"):
            util.set_iteration_per_loop(None, train_op, 2.0)


def test_iteration_per_loop_class():
    with tf.Graph().as_default():
        train_op = _train_op()
        loop = util.IterationPerLoop()
        with pytest.raises(ValueError, match="Operation"):
            loop.create_iteration_per_loop_var(tf.constant(1))
        with tf.compat.v1.Session() as sess, pytest.raises(RuntimeError, match="create_"):
            loop.load_iteration_per_loop_var(sess, 3)
        group = loop.create_iteration_per_loop_var(train_op)
        assert group.name == "IterationOp"
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.local_variables_initializer())
            loop.load_iteration_per_loop_var(sess, 3)
            assert sess.run(util.create_or_get_var("iterations_per_loop")) == 2
            with pytest.raises(ValueError, match="iterations_per_loop"):
                loop.load_iteration_per_loop_var(sess, 0)


def test_get_ranksize(monkeypatch):
    assert util.get_ranksize() == "1"
    monkeypatch.setenv("RANK_SIZE", "4")
    assert util.get_ranksize() == "4"
    monkeypatch.setenv("CM_WORKER_SIZE", "4")
    with pytest.raises(ValueError, match="RANK_SIZE and CM_WORKER_SIZE"):
        util.get_ranksize()
    monkeypatch.delenv("RANK_SIZE")
    assert util.get_ranksize() == "4"
    monkeypatch.setenv("CM_WORKER_SIZE", "four")
    with pytest.raises(ValueError, match=r"CM_WORKER_SIZE \('four'\): not an integer"):
        util.get_ranksize()


def test_variable_initializer_in_host():
    with tf.Graph().as_default():
        var = tf.compat.v1.get_variable("v", initializer=3.0, use_resource=True)
        init = util.variable_initializer_in_host([var])
        assert init.name == "var_in_host"
        with tf.compat.v1.Session() as sess:
            sess.run(init)
            assert sess.run(var) == 3.0


# ---- gradient sharding -----------------------------------------------------------------------


class _Item:
    def __init__(self, size):
        self.size = size
        self.root_rank_id = -1


@pytest.mark.parametrize("sizes,number,expected", [
    ([4, 4, 4, 4], 2, [0, 0, 1, 1]),
    ([10, 1, 1, 1, 1], 2, [0, 1, 1, 1, 1]),
    ([1, 1, 1, 10], 2, [0, 0, 0, 1]),
    ([3, 3, 3], 3, [0, 1, 2]),
    ([5, 2, 2, 1], 1, [0, 0, 0, 0]),
])
def test_fair_division(sizes, number, expected):
    items = [_Item(size) for size in sizes]
    assert util.fair_division(items, number) is items
    assert [item.root_rank_id for item in items] == expected


@pytest.mark.parametrize("number", [-1, 4, 1.0])
def test_fair_division_rejects_bad_number(number):
    with pytest.raises(ValueError, match="'number'"):
        util.fair_division([_Item(1), _Item(2), _Item(3)], number)


def test_grad_division_helpers():
    with tf.Graph().as_default():
        w1 = tf.compat.v1.get_variable("w1", shape=[4, 4], use_resource=True)
        w2 = tf.compat.v1.get_variable("w2", shape=[16], use_resource=True)
        w3 = tf.compat.v1.get_variable("w3", shape=[], use_resource=True)
        g1, g2, g3 = tf.zeros([4, 4]), tf.zeros([16]), tf.zeros([])
        assert util.GradDivisionItem(g1, w1).size == 64
        assert util.GradDivisionItem(g3, w3).size == 0
        util.add_grads_and_vars([(g1, w1), (None, w3), (g2, w2)], 2)
        items = util.get_all_grad_item()
        assert [item.var for item in items] == [w1, w2]
        assert util.get_gid_by_grad(g1) == 0 and util.get_gid_by_grad(g2) == 1
        assert util.get_gid_by_weight(w2) == 1
        assert util.get_gid_by_weight(w3) == -1 and util.get_gid_by_grad(g3) == -1


# ---- set_graph_exec_config -------------------------------------------------------------------

_EXEC_ATTRS = ("_graph_dynamic_input", "_graph_dynamic_graph_execute_mode",
               "_graph_dynamic_inputs_shape_range", "_is_train_graph")


def _exec_attrs(op):
    return {name: _attr(op, name) for name in _EXEC_ATTRS + ("_recompute_mode",)
            if name in op.node_def.attr}


def test_set_graph_exec_config_on_tensor_defaults():
    with tf.Graph().as_default():
        loss = tf.reduce_sum(tf.compat.v1.placeholder(tf.float32, [None]), name="loss")
        other = tf.identity(loss, name="other")
        assert util.set_graph_exec_config(loss) is loss
        assert _exec_attrs(loss.op) == {
            "_graph_dynamic_input": ("b", False),
            "_graph_dynamic_graph_execute_mode": ("s", b"dynamic_execute"),
            "_graph_dynamic_inputs_shape_range": ("s", b""),
            "_is_train_graph": ("b", False),
        }
        assert _exec_attrs(other.op) == {}


def test_set_graph_exec_config_on_operation_with_recompute():
    with tf.Graph().as_default():
        train_op = _train_op()
        config = ExperimentalConfig(
            graph_memory_optimize_config=GraphMemoryOptimizeConfig(recompute="manual"))
        result = util.set_graph_exec_config(
            train_op, dynamic_input=True, dynamic_graph_execute_mode="lazy_recompile",
            dynamic_inputs_shape_range="data:[1~50,3]", is_train_graph=True,
            experimental_config=config)
        assert result is train_op
        assert _exec_attrs(train_op) == {
            "_graph_dynamic_input": ("b", True),
            "_graph_dynamic_graph_execute_mode": ("s", b"lazy_recompile"),
            "_graph_dynamic_inputs_shape_range": ("s", b"data:[1~50,3]"),
            "_is_train_graph": ("b", True),
            "_recompute_mode": ("s", b"manual"),
        }


def test_set_graph_exec_config_without_recompute_has_no_recompute_attr():
    with tf.Graph().as_default():
        op = tf.constant(1.0).op
        util.set_graph_exec_config(op, experimental_config=ExperimentalConfig(
            graph_memory_optimize_config=GraphMemoryOptimizeConfig(graph_slice="auto")))
        assert "_recompute_mode" not in op.node_def.attr
        assert _attr(op, "_graph_dynamic_input") == ("b", False)


def test_set_graph_exec_config_list_tuple_and_name():
    with tf.Graph().as_default():
        a = tf.constant(1.0, name="a")
        b = tf.constant(2.0, name="b")
        c = tf.constant(3.0, name="c")
        d = tf.constant(4.0, name="d")
        fetch = [a, (b.op, [c])]
        assert util.set_graph_exec_config(fetch, is_train_graph=True) is fetch
        returned = util.set_graph_exec_config("d:0", dynamic_input=True)
        assert returned is d
        for tensor in (a, b, c):
            assert _attr(tensor.op, "_is_train_graph") == ("b", True)
        assert _attr(d.op, "_graph_dynamic_input") == ("b", True)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"dynamic_graph_execute_mode": "static"}, ValueError,
     "lazy_recompile or dynamic_execute"),
    ({"experimental_config": GraphMemoryOptimizeConfig()}, ValueError,
     "experimental_config type must be ExperimentalConfig"),
    ({"dynamic_input": "True"}, TypeError, "dynamic_input must be True or False"),
    ({"is_train_graph": 1}, TypeError, "is_train_graph must be True or False"),
    ({"dynamic_inputs_shape_range": 3}, TypeError, "dynamic_inputs_shape_range"),
    ({"dynamic_inputs_shape_range": "data:[1~a]"}, NpuConfigError,
     "dynamic_inputs_shape_range"),
])
def test_set_graph_exec_config_argument_errors(kwargs, error, match):
    with tf.Graph().as_default():
        op = tf.constant(1.0).op
        with pytest.raises(error, match=match):
            util.set_graph_exec_config(op, **kwargs)
        assert "_graph_dynamic_input" not in op.node_def.attr


@pytest.mark.parametrize("fetch,match", [
    (3, "fetch is invalid.*got int"),
    ({"a": 1}, "fetch is invalid.*got dict"),
    ("missing:0", "'missing:0' is not the name of a tensor"),
    ("a", "'a' is not the name of a tensor"),
])
def test_set_graph_exec_config_fetch_errors(fetch, match):
    with tf.Graph().as_default():
        tf.constant(1.0, name="a")
        with pytest.raises(ValueError, match=match):
            util.set_graph_exec_config(fetch)


def test_npu_compile_runs_fetches():
    with tf.Graph().as_default():
        var = tf.compat.v1.get_variable("v", initializer=0.0, use_resource=True)
        inc = tf.compat.v1.assign_add(var, 2.0)
        with tf.compat.v1.Session() as sess:
            sess.run(var.initializer)
            assert util.npu_compile(sess, inc) is None
            assert sess.run(var) == 2.0


def test_global_dict():
    util.global_dict_init()
    assert util.get_value("k") is None and util.get_value("k", 5) == 5
    util.set_value("k", 3)
    assert util.get_value("k", 5) == 3
    util.global_dict_init()
    assert util.get_value("k") is None


# ---- keep_tensors_dtypes and per-op attrs ----------------------------------------------------


def test_keep_tensors_dtypes():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.identity(a, name="b")
        c = tf.identity(b, name="c")
    util.keep_tensors_dtypes(graph, ("a:0",))
    util.keep_tensors_dtypes(graph, ["c:0"])
    assert _attr(a.op, "_keep_dtype") == ("i", 1)
    assert _attr(c.op, "_keep_dtype") == ("i", 1)
    assert "_keep_dtype" not in b.op.node_def.attr


def test_keep_tensors_dtypes_errors():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant(1.0, name="a")
    with pytest.raises(ValueError, match="graph param must be ops.Graph"):
        util.keep_tensors_dtypes(graph.as_graph_def(), ["a:0"])
    with pytest.raises(ValueError, match="input_tensors must be list or tuple"):
        util.keep_tensors_dtypes(graph, "a:0")
    with pytest.raises(ValueError, match="'nope:0' is not the name of a tensor"):
        util.keep_tensors_dtypes(graph, ["a:0", "nope:0"])
    assert "_keep_dtype" not in a.op.node_def.attr  # all names are checked before tagging
    with pytest.raises(ValueError, match="tensor names must be strings"):
        util.keep_tensors_dtypes(graph, [a])


def test_set_op_tensor_max_range_and_size():
    with tf.Graph().as_default():
        a = tf.constant([1.0], name="a")
        b = tf.identity(a, name="b")
        util.set_op_tensor_max_range(a, "[100]")
        util.set_op_tensor_max_range(b.op, "[3,4]")
        util.set_op_tensor_max_size(a.op, 4096)
        assert _attr(a.op, "_op_max_shape") == ("s", b"[100]")
        assert _attr(b.op, "_op_max_shape") == ("s", b"[3,4]")
        assert _attr(a.op, "_op_max_size") == ("i", 4096)
        with pytest.raises(TypeError, match="max_shape must be a string"):
            util.set_op_tensor_max_range(a, [100])
        with pytest.raises(ValueError, match="max_size must be positive"):
            util.set_op_tensor_max_size(a, 0)
        with pytest.raises(TypeError, match="max_size must be int"):
            util.set_op_tensor_max_size(a, "10")
        with pytest.raises(TypeError, match="expected a tf.Operation"):
            util.set_op_tensor_max_size("a:0", 10)


def test_set_op_input_tensor_multi_dims():
    with tf.Graph().as_default():
        image = tf.compat.v1.placeholder(tf.uint8, (None, None, 3), name="image")
        expanded = tf.expand_dims(image, axis=0)
        util.set_op_input_tensor_multi_dims(expanded, "0:-1,-1,3", "480,480;960,960;1920,1920")
        assert _attr(expanded.op, "_subgraph_multi_dims_input_shape") == ("s", b"0:-1,-1,3")
        assert _attr(expanded.op, "_subgraph_multi_dims_input_dims") == \
            ("s", b"480,480;960,960;1920,1920")
        assert "_subgraph_multi_dims_input_shape" not in image.op.node_def.attr
        both = tf.add(tf.compat.v1.placeholder(tf.float32, [None, 4]),
                      tf.compat.v1.placeholder(tf.float32, [None, 4]))
        util.set_op_input_tensor_multi_dims(both.op, "0:-1,4;1:-1,4", "2,2;8,8")
        assert _attr(both.op, "_subgraph_multi_dims_input_dims") == ("s", b"2,2;8,8")


def test_parse_op_input_multi_dims():
    entries, gears = util.parse_op_input_multi_dims("0:-1,-1,3;2:5,-1", "1,2,3;4,5,6")
    assert entries == [(0, (-1, -1, 3)), (2, (5, -1))]
    assert gears == [(1, 2, 3), (4, 5, 6)]


@pytest.mark.parametrize("input_shape,input_dims,fragment", [
    ("", "1;2", "''"),
    ("-1,3", "1;2", "'-1,3'"),                      # no index
    ("0:-1:3", "1;2", "'0:-1:3'"),                  # two colons
    ("x:-1,3", "1;2", "'x'"),                       # index not an int
    ("-1:-1,3", "1;2", "'-1'"),                     # negative index
    ("0:-1;0:-1", "1,1;2,2", "'0:-1'"),             # duplicate index
    ("0:-1,,3", "1;2", "'0:-1,,3'"),                # empty dim
    ("0:-2,3", "1;2", "'-2'"),                      # dim below -1
    ("0:a,3", "1;2", "'a'"),
    ("0:1_0,-1", "1;2", "'1_0'"),                   # no Python int() leniency
    ("0:4,3", "1;2", "'0:4,3'"),                    # no -1 at all
    ("0:-1,3", "", "''"),
    ("0:-1,3", "480", "'480'"),                     # a single gear
    ("0:-1,-1", "1,2;3", "'3'"),                    # wrong value count
    ("0:-1,3", "1;1", "'1'"),                       # duplicate gear
    ("0:-1,3", "1;0", "'0'"),                       # non-positive value
    ("0:-1,3", "1;-4", "'-4'"),
    ("0:-1,3", "1;;2", "''"),                       # empty gear
    ("0:-1,3", ";".join(str(i) for i in range(1, 102)), "between 2 and 100"),
])
def test_multi_dims_validation_catalogue(input_shape, input_dims, fragment):
    with tf.Graph().as_default():
        op = tf.identity(tf.compat.v1.placeholder(tf.float32), name="op").op
        with pytest.raises(ValueError) as info:
            util.set_op_input_tensor_multi_dims(op, input_shape, input_dims)
        assert fragment in str(info.value)
        assert "set_op_input_tensor_multi_dims" in str(info.value)
        assert "_subgraph_multi_dims_input_shape" not in op.node_def.attr


def test_multi_dims_checked_against_the_op():
    with tf.Graph().as_default():
        image = tf.compat.v1.placeholder(tf.float32, (None, None, 3))
        op = tf.identity(image).op
        with pytest.raises(ValueError, match="input index of op .* 1 input"):
            util.set_op_input_tensor_multi_dims(op, "1:-1,-1,3", "1,1;2,2")
        with pytest.raises(ValueError, match=r"compatible with input 0 .* \(None, None, 3\)"):
            util.set_op_input_tensor_multi_dims(op, "0:-1,-1,4", "1,1;2,2")
        with pytest.raises(ValueError, match="compatible with input 0"):
            util.set_op_input_tensor_multi_dims(op, "0:-1,3", "1;2")
        with pytest.raises(NpuConfigError, match="input_dims"):
            util.set_op_input_tensor_multi_dims(op, "0:-1,-1,3", 5)


def test_attrs_survive_graph_def_round_trip():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant(np.zeros([2], np.float32), name="a")
        util.set_graph_exec_config(a)
        util.keep_tensors_dtypes(graph, ["a:0"])
    node = {n.name: n for n in graph.as_graph_def().node}["a"]
    assert node.attr["_keep_dtype"].i == 1
    assert node.attr["_graph_dynamic_graph_execute_mode"].s == b"dynamic_execute"
