"""npu_bridge.estimator.npu.npu_scope: the attribute each scope puts on the ops built inside."""

import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from npu_bridge.estimator.npu import npu_scope
from npu_bridge.estimator.npu.npu_config import NpuExecutePlacement


def _attr(op, name):
    """The AttrValue ``name`` of ``op`` as (field, value), via the NodeDef."""
    value = op.node_def.attr[name]
    field = value.WhichOneof("value")
    return field, getattr(value, field)


def _build(scope_factory):
    """Build one op before, two inside (one nested in a name scope) and one after the scope."""
    graph = tf.Graph()
    with graph.as_default():
        before = tf.constant(1.0, name="before")
        with scope_factory():
            inside = tf.add(before, 1.0, name="inside")
            with tf.name_scope("nested"):
                nested = tf.identity(inside, name="nested_op")
        after = tf.identity(nested, name="after")
    return before.op, inside.op, nested.op, after.op


ATTR_SCOPES = [
    # (id, scope factory, {attr: (field, value)})
    ("without_npu_compile", npu_scope.without_npu_compile_scope,
     {"_without_npu_compile": ("b", True)}),
    ("variable_default", npu_scope.npu_variable_scope, {"_variable_placement": ("s", b"all")}),
    ("variable_host", lambda: npu_scope.npu_variable_scope(NpuExecutePlacement.HOST),
     {"_variable_placement": ("s", b"host")}),
    ("keep_dtype", npu_scope.keep_dtype_scope, {"_keep_dtype": ("i", 1)}),
    ("stage", lambda: npu_scope.npu_stage_scope(3), {"_stage_level": ("i", 3)}),
    ("mem_type", npu_scope.npu_mem_type_scope, {"_output_memory_type": ("i", 1)}),
    ("prefetch_default", npu_scope.npu_weight_prefetch_scope,
     {"_buffer_pool_id": ("i", 0), "_buffer_pool_size": ("i", 536870912)}),
    ("prefetch", lambda: npu_scope.npu_weight_prefetch_scope(2, 1024),
     {"_buffer_pool_id": ("i", 2), "_buffer_pool_size": ("i", 1024)}),
    ("engine", lambda: npu_scope.op_specified_engine_scope("DNN_VM_AICPU", "aicpu_kernel"),
     {"_specified_engine_name": ("s", b"DNN_VM_AICPU"),
      "_specified_kernel_lib_name": ("s", b"aicpu_kernel")}),
    ("qos", lambda: npu_scope.npu_qos_label_scope(7), {"_qos_service_label": ("i", 7)}),
    ("multi_dims", lambda: npu_scope.subgraph_multi_dims_scope(0),
     {"_subgraph_multi_dims_index": ("i", 0)}),
    ("optimizer", npu_scope.npu_optimizer_scope, {"_optimizer": ("b", True)}),
    ("autofuse", npu_scope.disable_autofuse, {"_disable_autofuse_scope": ("b", True)}),
    ("core_num_vector", lambda: npu_scope.limit_core_num_scope(op_vectorore_num="8"),
     {"_op_vectorcore_num": ("s", b"8")}),
    ("core_num_both", lambda: npu_scope.limit_core_num_scope("4", "8"),
     {"_op_vectorcore_num": ("s", b"8"), "_op_aicore_num": ("s", b"4")}),
]


@pytest.mark.parametrize("factory,expected", [case[1:] for case in ATTR_SCOPES],
                         ids=[case[0] for case in ATTR_SCOPES])
def test_scope_sets_exact_attrs_inside_only(factory, expected):
    before, inside, nested, after = _build(factory)
    for op in (inside, nested):
        for name, value in expected.items():
            assert _attr(op, name) == value, (op.name, name)
    for op in (before, after):
        for name in expected:
            assert name not in op.node_def.attr, (op.name, name)


def test_limit_core_num_default_aicore_is_not_stamped():
    _, inside, _, _ = _build(lambda: npu_scope.limit_core_num_scope(op_vectorore_num="2"))
    assert "_op_aicore_num" not in inside.node_def.attr


def test_nested_attr_scopes_combine_and_inner_wins():
    graph = tf.Graph()
    with graph.as_default(), npu_scope.keep_dtype_scope(), npu_scope.npu_stage_scope(1):
        outer = tf.constant(1.0, name="outer")
        with npu_scope.npu_stage_scope(2):
            inner = tf.identity(outer, name="inner")
    assert _attr(outer.op, "_keep_dtype") == ("i", 1)
    assert _attr(outer.op, "_stage_level") == ("i", 1)
    assert _attr(inner.op, "_keep_dtype") == ("i", 1)
    assert _attr(inner.op, "_stage_level") == ("i", 2)


def test_variables_created_in_scope_are_tagged():
    graph = tf.Graph()
    with graph.as_default(), npu_scope.npu_variable_scope(NpuExecutePlacement.DVPP):
        var = tf.compat.v1.get_variable("w", shape=[2], use_resource=True)
    assert _attr(var.op, "_variable_placement") == ("s", b"dvpp")


def test_recompute_scope_is_a_name_scope():
    graph = tf.Graph()
    with graph.as_default():
        with npu_scope.npu_recompute_scope():
            op = tf.constant(1.0, name="c")
        with tf.name_scope("outer"), npu_scope.npu_recompute_scope():
            nested = tf.constant(1.0, name="c")
    assert op.op.name == "NpuRecompute/c"
    assert nested.op.name == "outer/NpuRecompute/c"
    assert not any(name.startswith("_") for name in op.op.node_def.attr)


@pytest.mark.parametrize("slice_num,prefix", [
    (4, "SliceNum-4-NpuGraphSlicing4/"),
    (None, "SliceNum-None-NpuGraphSlicingNone/"),
])
def test_graph_slice_scope_name(slice_num, prefix):
    graph = tf.Graph()
    with graph.as_default(), npu_scope.npu_graph_slice_scope(slice_num):
        op = tf.constant(1.0, name="c")
    assert op.op.name == prefix + "c"


@pytest.mark.parametrize("slice_num,error", [(0, ValueError), (-2, ValueError),
                                             (1.5, TypeError), ("2", TypeError),
                                             (True, TypeError)])
def test_graph_slice_scope_rejects_non_positive_int(slice_num, error):
    with tf.Graph().as_default(), pytest.raises(error, match="slice_num"):
        npu_scope.npu_graph_slice_scope(slice_num)


@pytest.mark.parametrize("placement", ["all", "ALL", 1, None])
def test_variable_scope_rejects_non_enum(placement):
    with tf.Graph().as_default(), pytest.raises(ValueError, match="NpuExecutePlacement"), \
            npu_scope.npu_variable_scope(placement):
        pass


@pytest.mark.parametrize("factory,error,match", [
    (lambda: npu_scope.npu_stage_scope("1"), TypeError, "stage"),
    (lambda: npu_scope.npu_stage_scope(True), TypeError, "stage"),
    (lambda: npu_scope.npu_qos_label_scope(1.0), TypeError, "label"),
    (lambda: npu_scope.subgraph_multi_dims_scope(None), TypeError, "index"),
    (lambda: npu_scope.op_specified_engine_scope(1, "lib"), TypeError, "engine_name"),
    (lambda: npu_scope.op_specified_engine_scope("e", None), TypeError, "kernel_lib_name"),
    (lambda: npu_scope.npu_weight_prefetch_scope(-1), ValueError, "buffer_pool_id"),
    (lambda: npu_scope.npu_weight_prefetch_scope(0, 0), ValueError, "buffer_pool_size"),
])
def test_scope_argument_errors(factory, error, match):
    with tf.Graph().as_default(), pytest.raises(error, match=match), factory():
        pass


@pytest.mark.parametrize("aicore,vector,match", [
    ("0", "0", "op_vectorore_num must be greater than zero"),  # the original's default fails
    ("0", 8, "op_vectorore_num must be string"),
    ("0", "eight", "op_vectorore_num can not be converted"),
    ("0", "1_0", "op_vectorore_num can not be converted"),
    ("0", "-3", "op_vectorore_num must be greater than zero"),
    (4, "8", "op_aicore_num must be string"),
    ("x", "8", "op_aicore_num can not be converted"),
    ("-1", "8", "op_aicore_num must be non-negative"),
])
def test_limit_core_num_validation(aicore, vector, match):
    with tf.Graph().as_default(), pytest.raises(ValueError, match=match), \
            npu_scope.limit_core_num_scope(aicore, vector):
        pass


def test_attr_values_are_attr_value_protos():
    before, inside, _, _ = _build(npu_scope.keep_dtype_scope)
    value = inside.get_attr("_keep_dtype")
    assert value == 1 and isinstance(value, int)
    assert isinstance(inside.node_def.attr["_keep_dtype"], attr_value_pb2.AttrValue)
