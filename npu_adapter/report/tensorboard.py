"""TensorBoard log directories with the graphs of a rewrite (the Graphs tab shows them).

``tensorboard --logdir <out>/tensorboard`` lists one run per subdirectory: ``before`` (the graph the
rewrite received), ``after`` (the rewritten graph) and ``placement`` (the graph the rewrite
received with each node's ``device`` set to ``/device:NPU:0/<cluster>`` or ``/device:CPU:0``, so
TensorBoard's "Color: Device" view shows the partition).

The event files hold what ``tf.compat.v1.summary.FileWriter(logdir, graph=...)`` writes (a
``file_version`` event, then a ``graph_def`` event) but with ``wall_time`` 0 and a fixed file name
(``events.out.tfevents.0.npu-adapter``), so two dumps of the same rewrite are byte-identical.
"""

import os

__all__ = ["EVENT_FILE_NAME", "write_graph_event_file", "placement_graph"]

EVENT_FILE_NAME = "events.out.tfevents.0.npu-adapter"


def write_graph_event_file(logdir, graph_def):
    """Write one event file with ``graph_def`` into ``logdir`` (created); returns its path."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    os.makedirs(logdir, exist_ok=True)
    path = os.path.join(logdir, EVENT_FILE_NAME)
    header = event_pb2.Event(wall_time=0.0, file_version="brain.Event:2")
    graph = event_pb2.Event(wall_time=0.0, step=0,
                            graph_def=graph_def.SerializeToString(deterministic=True))
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(header.SerializeToString(deterministic=True))
        writer.write(graph.SerializeToString(deterministic=True))
    return path


def placement_graph(graph_def, report):
    """Copy of ``graph_def`` whose node devices name the placement in ``report``."""
    from tensorflow.core.framework import graph_pb2

    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    nodes = report["nodes"]
    for node in out.node:
        info = nodes.get(node.name)
        if info is None:
            continue
        if info["cluster"]:
            node.device = f"/device:NPU:0/{info['cluster']}"
        else:
            node.device = "/device:CPU:0"
    return out
