"""Scopes that tag the ops created inside them (``npu_bridge.estimator.npu.npu_scope``).

Each attribute scope adds node attributes to every op created inside it in the default graph, as
the original does with TensorFlow's graph attribute scope (ops created outside are untouched;
nested scopes combine, the inner one winning for an attribute both set):

=============================  ===============================================  ==============
scope                          attribute(s)                                     type
=============================  ===============================================  ==============
without_npu_compile_scope      ``_without_npu_compile`` = True                  bool
npu_variable_scope(placement)  ``_variable_placement`` = placement value        string
keep_dtype_scope               ``_keep_dtype`` = 1                              int
npu_stage_scope(stage)         ``_stage_level`` = stage                         int
npu_mem_type_scope             ``_output_memory_type`` = 1                      int
npu_weight_prefetch_scope      ``_buffer_pool_id``, ``_buffer_pool_size``       int, int
op_specified_engine_scope      ``_specified_engine_name``,                      string, string
                               ``_specified_kernel_lib_name``
npu_qos_label_scope(label)     ``_qos_service_label`` = label                   int
subgraph_multi_dims_scope(i)   ``_subgraph_multi_dims_index`` = i               int
npu_optimizer_scope            ``_optimizer`` = True                            bool
disable_autofuse               ``_disable_autofuse_scope`` = True               bool
limit_core_num_scope           ``_op_vectorcore_num`` (and ``_op_aicore_num``)  string
=============================  ===============================================  ==============

Two scopes are name scopes, interpreted by the partition pass from the node names:
``npu_recompute_scope()`` = ``NpuRecompute`` and ``npu_graph_slice_scope(n)`` =
``SliceNum-<n>-NpuGraphSlicing<n>``.

Argument checks raise ``TypeError``/``ValueError`` naming the argument (the original hands bad
values to protobuf, which fails with a less helpful message).
"""

import contextlib
import re

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from npu_adapter import tf_compat
from npu_bridge.estimator.npu import util
from npu_bridge.estimator.npu.npu_config import NpuExecutePlacement

__all__ = [
    "disable_autofuse",
    "keep_dtype_scope",
    "limit_core_num_scope",
    "npu_graph_slice_scope",
    "npu_mem_type_scope",
    "npu_optimizer_scope",
    "npu_qos_label_scope",
    "npu_recompute_scope",
    "npu_stage_scope",
    "npu_variable_scope",
    "npu_weight_prefetch_scope",
    "op_specified_engine_scope",
    "subgraph_multi_dims_scope",
    "without_npu_compile_scope",
]

_INT_TEXT_RE = re.compile(r"[+-]?\d+\Z")


def _int_attr(value, name):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")
    return attr_value_pb2.AttrValue(i=value)


def _str_attr(value, name):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}: {value!r}")
    return attr_value_pb2.AttrValue(s=value.encode("utf-8"))


_TRUE = attr_value_pb2.AttrValue(b=True)


@contextlib.contextmanager
def without_npu_compile_scope():
    """Ops created inside stay on the host (``_without_npu_compile`` = True)."""
    with tf_compat.attr_scope({"_without_npu_compile": _TRUE}):
        yield


@contextlib.contextmanager
def npu_variable_scope(placement=NpuExecutePlacement.ALL):
    """``_variable_placement`` = ``placement.value``; ``placement`` must be a
    :class:`~npu_bridge.estimator.npu.npu_config.NpuExecutePlacement` member (ValueError)."""
    if not isinstance(placement, NpuExecutePlacement):
        raise ValueError(f"placement value must be in NpuExecutePlacement's values "
                         f"{[member.name for member in NpuExecutePlacement]}, got {placement!r}")
    with tf_compat.attr_scope({"_variable_placement": _str_attr(placement.value, "placement")}):
        yield


@contextlib.contextmanager
def keep_dtype_scope():
    """Ops created inside keep their original precision (int ``_keep_dtype`` = 1)."""
    with tf_compat.attr_scope({"_keep_dtype": attr_value_pb2.AttrValue(i=1)}):
        yield


@contextlib.contextmanager
def npu_stage_scope(stage):
    """Ops created inside form pipeline stage ``stage`` (int ``_stage_level``)."""
    with tf_compat.attr_scope({"_stage_level": _int_attr(stage, "stage")}):
        yield


@contextlib.contextmanager
def npu_mem_type_scope():
    """Outputs of ops created inside use the special memory type (int ``_output_memory_type``
    = 1)."""
    with tf_compat.attr_scope({"_output_memory_type": attr_value_pb2.AttrValue(i=1)}):
        yield


@contextlib.contextmanager
def npu_weight_prefetch_scope(buffer_pool_id=0, buffer_pool_size=536870912):
    """Prefetch ops created inside use buffer pool ``buffer_pool_id`` of ``buffer_pool_size``
    bytes (ints ``_buffer_pool_id`` / ``_buffer_pool_size``; id >= 0, size > 0)."""
    util.check_nonnegative_integer(buffer_pool_id, "buffer_pool_id")
    util.check_positive_integer(buffer_pool_size, "buffer_pool_size")
    with tf_compat.attr_scope({"_buffer_pool_id": attr_value_pb2.AttrValue(i=buffer_pool_id),
                      "_buffer_pool_size": attr_value_pb2.AttrValue(i=buffer_pool_size)}):
        yield


@contextlib.contextmanager
def op_specified_engine_scope(engine_name, kernel_lib_name):
    """Ops created inside run on ``engine_name`` with ``kernel_lib_name`` (strings
    ``_specified_engine_name`` / ``_specified_kernel_lib_name``)."""
    with tf_compat.attr_scope({
            "_specified_engine_name": _str_attr(engine_name, "engine_name"),
            "_specified_kernel_lib_name": _str_attr(kernel_lib_name, "kernel_lib_name")}):
        yield


@contextlib.contextmanager
def npu_qos_label_scope(label):
    """Ops created inside get QoS service label ``label`` (int ``_qos_service_label``)."""
    with tf_compat.attr_scope({"_qos_service_label": _int_attr(label, "label")}):
        yield


@contextlib.contextmanager
def subgraph_multi_dims_scope(index):
    """Ops created inside form gear subgraph ``index`` (int ``_subgraph_multi_dims_index``);
    give its input op the gears with ``util.set_op_input_tensor_multi_dims``."""
    with tf_compat.attr_scope({"_subgraph_multi_dims_index": _int_attr(index, "index")}):
        yield


@contextlib.contextmanager
def npu_optimizer_scope():
    """Ops created inside belong to the optimizer (``_optimizer`` = True)."""
    with tf_compat.attr_scope({"_optimizer": _TRUE}):
        yield


def npu_recompute_scope():
    """Name scope ``NpuRecompute``: ops inside are recomputed in the backward pass."""
    return tf.name_scope("NpuRecompute")


def npu_graph_slice_scope(slice_num=None):
    """Name scope ``SliceNum-<n>-NpuGraphSlicing<n>`` (``n`` a positive int, or None, which the
    original writes as ``None``)."""
    if slice_num is not None:
        util.check_positive_integer(slice_num, "slice_num")
    return tf.name_scope(f"SliceNum-{slice_num}-NpuGraphSlicing{slice_num}")


@contextlib.contextmanager
def disable_autofuse():
    """Ops created inside are not auto-fused (``_disable_autofuse_scope`` = True)."""
    with tf_compat.attr_scope({"_disable_autofuse_scope": _TRUE}):
        yield


def _core_num(value, name, minimum):
    if not isinstance(value, str):
        raise ValueError(f"Param {name} must be string, got {type(value).__name__}: {value!r}")
    if not _INT_TEXT_RE.match(value.strip()):
        raise ValueError(f"Param {name} can not be converted into a valid int number: "
                         f"{value!r}")
    number = int(value.strip())
    if number < minimum:
        relation = "greater than zero" if minimum == 1 else "non-negative"
        raise ValueError(f"Param {name} must be {relation}, got {value!r}")
    return number


@contextlib.contextmanager
def limit_core_num_scope(op_aicore_num="0", op_vectorore_num="0"):
    """Limit the cores of auto-fused ops created inside (``op_vectorore_num`` is the original's
    spelling).

    ``op_vectorore_num`` must be a string holding a positive integer (ValueError otherwise, as
    the original; so the default "0" is rejected) and becomes string ``_op_vectorcore_num``.
    ``op_aicore_num`` must be a string holding a non-negative integer; the original ignores it
    ("only support aiv core num now"); a positive value is kept as string ``_op_aicore_num``.
    """
    aicore = _core_num(op_aicore_num, "op_aicore_num", 0)
    _core_num(op_vectorore_num, "op_vectorore_num", 1)
    attrs = {"_op_vectorcore_num": _str_attr(op_vectorore_num, "op_vectorore_num")}
    if aicore > 0:
        attrs["_op_aicore_num"] = _str_attr(op_aicore_num, "op_aicore_num")
    with tf_compat.attr_scope(attrs):
        yield
