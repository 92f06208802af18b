"""System and channel ops: ``NPUInit``/``NPUShutdown`` (marked no-ops a session recognises) and
the ops that mean the device itself (outfeed channels, the data channel's ``GetNext``, ONNX
models), which raise :class:`~npu_adapter.errors.DeviceOnlyError` when they are built."""

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from npu_adapter import tf_compat
from npu_adapter.vocabulary import NPU_SYSTEM_OP_ATTR

from .common import device_only

__all__ = [
    "NPU_ADAPTER_OP_ATTR",
    "get_next",
    "npu_init",
    "npu_onnx_graph_op",
    "npu_shutdown",
    "outfeed_dequeue_op",
    "outfeed_enqueue_op",
    "stop_outfeed_dequeue_op",
]

NPU_ADAPTER_OP_ATTR = NPU_SYSTEM_OP_ATTR
"""String attribute that marks the ``NoOp`` standing in for an NPU system op."""

_OUTFEED_REASON = ("an outfeed channel carries tensors from the device to the host while a "
                   "loop runs on the device; on the host, fetch the tensors with Session.run "
                   "(or tf.print them)")


def _marker_op(op_type, name):
    op = tf.no_op(name=name or op_type)
    tf_compat.set_op_attr(op, NPU_ADAPTER_OP_ATTR,
                          attr_value_pb2.AttrValue(s=op_type.encode("ascii")))
    return op


def npu_init(name=None):
    """``NPUInit``: a ``NoOp`` named ``NPUInit`` carrying ``_npu_adapter_op = "NPUInit"``."""
    return _marker_op("NPUInit", name)


def npu_shutdown(name=None):
    """``NPUShutdown``: a ``NoOp`` named ``NPUShutdown`` carrying
    ``_npu_adapter_op = "NPUShutdown"``."""
    return _marker_op("NPUShutdown", name)


def outfeed_enqueue_op(inputs, channel_name, name=None):
    """``OutfeedEnqueueOp``: device only (``DeviceOnlyError``)."""
    device_only("outfeed_enqueue_op", f"{_OUTFEED_REASON} (channel {channel_name!r})")


def outfeed_dequeue_op(channel_name, output_types, output_shapes, name=None):
    """``OutfeedDequeueOp``: device only (``DeviceOnlyError``)."""
    device_only("outfeed_dequeue_op", f"{_OUTFEED_REASON} (channel {channel_name!r})")


def stop_outfeed_dequeue_op(channel_name, name=None):
    """``StopOutfeedDequeueOp``: device only (``DeviceOnlyError``)."""
    device_only("stop_outfeed_dequeue_op", f"{_OUTFEED_REASON} (channel {channel_name!r})")


def get_next(output_types, output_shapes, channel_name, name=None):
    """``GetNext`` on a named device data channel: device only (``DeviceOnlyError``)."""
    device_only("channel_get_next",
                f"the channel {channel_name!r} is fed by the device's data-transfer queue; on "
                "the host read the data with a tf.data iterator's get_next()")


def npu_onnx_graph_op(inputs, tout, model_path, name=None):
    """``NpuOnnxGraphOp``: device only (``DeviceOnlyError``)."""
    device_only("NpuOnnxGraphOp",
                f"the ONNX model {model_path!r} is parsed and run by the device runtime inside a "
                "GeOp; on the host, replace it by the equivalent TensorFlow computation")
