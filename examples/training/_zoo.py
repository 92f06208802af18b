"""Shared by the training samples: the NPU session config a ModelZoo script builds, its plain
TensorFlow twin, the GeOps a rewrite made, and the NPU-vs-plain comparison.

Each sample's ``main(npu=...)`` runs the same script twice: with ``npu=True`` every session is an
NPU session (``import npu_bridge``) configured with the ``NpuOptimizer`` entry below; with
``npu=False`` the config has no ``NpuOptimizer`` entry, which makes the session exactly
TensorFlow's. The samples return what they observed (losses per step or per loop, final
weights, the GeOps holding the training step) so tests can compare the two runs.
"""

import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # run-to-run reproducible CPU kernels

# First: every session TensorFlow opens becomes an NPU session, and on TensorFlow >= 2.16
# tf.compat.v1.layers (the fused RNN layers) get Keras 2 (TF_USE_LEGACY_KERAS before TF).
import npu_bridge  # noqa: F401, I001

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1

# Optimizer ops of a training step: a GeOp whose members include one holds the weight update.
_APPLY_PREFIXES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")


def quiet():
    """Silence TensorFlow's deprecation chatter about the TF1 APIs these samples use on purpose."""
    import warnings

    warnings.filterwarnings("ignore")
    tf.get_logger().setLevel("ERROR")


def npu_session_config(iterations_per_loop=1, npu=True, **options):
    """The ``ConfigProto`` of a ModelZoo training script: ``NpuOptimizer`` with
    ``use_off_line``, ``iterations_per_loop`` and ``options`` (bool, int or str values), remapping
    and memory optimisation off. ``npu=False`` gives the same config without the ``NpuOptimizer``
    entry: plain TensorFlow."""
    from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

    config = tf1.ConfigProto()
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    config.graph_options.rewrite_options.memory_optimization = RewriterConfig.OFF
    if not npu:
        return config
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["iterations_per_loop"].i = int(iterations_per_loop)
    for key, value in sorted(options.items()):
        if isinstance(value, bool):
            custom_op.parameter_map[key].b = value
        elif isinstance(value, int):
            custom_op.parameter_map[key].i = value
        else:
            custom_op.parameter_map[key].s = tf.compat.as_bytes(value)
    return config


def without_npu_optimizer(config):
    """A copy of ``config`` without its ``NpuOptimizer`` entry: the same session settings
    (Grappler optimizer list, remapping, ...) on plain TensorFlow."""
    plain = tf1.ConfigProto()
    plain.CopyFrom(config)
    optimizers = plain.graph_options.rewrite_options.custom_optimizers
    kept = [o for o in optimizers if o.name != "NpuOptimizer"]
    del optimizers[:]
    optimizers.extend(kept)
    return plain


# The loop target of util.set_iteration_per_loop / NPUEstimator (tf.group(..., name="IterationOp")).
_LOOP_OP = re.compile(r"(?:^|/)IterationOp(?:_\d+)?$")


def training_geops(graph):
    """The GeOps that hold a training step among the rewrites of every session run on
    ``graph`` (TensorFlow's own sessions included): a sorted list of dicts with the cluster
    name, its member count, the optimizer ops it holds (also inside the functions its members
    call, e.g. the branches of a ``tf.cond``), and the ``IterationOp`` when the run sinks
    ``iterations_per_loop`` steps into one ``Session.run``."""
    from npu_adapter.session import graph_rewrites

    functions = {f.signature.name: f for f in graph.as_graph_def().library.function}
    found = {}
    for result in graph_rewrites(graph):
        loop = next((name for name in sorted(result.op_map) if _LOOP_OP.search(name)), None)
        for cluster, members in result.membership().items():
            applies = set()
            for name in members:
                try:
                    node_def = graph.get_operation_by_name(name).node_def
                except KeyError:
                    continue
                applies.update(_apply_types(node_def, functions, set()))
            if applies:
                key = (cluster, loop)
                found[key] = {"cluster": cluster, "size": len(members),
                              "applies": sorted(applies), "loop": loop}
    return [found[k] for k in sorted(found, key=lambda k: (k[0], k[1] or ""))]


def _apply_types(node_def, functions, seen):
    """Optimizer op types of ``node_def`` and of the functions it calls, recursively."""
    types = {node_def.op} if node_def.op.startswith(_APPLY_PREFIXES) else set()
    for value in node_def.attr.values():
        names = [value.func.name] if value.HasField("func") else \
            [f.name for f in value.list.func]
        for name in names:
            if name in functions and name not in seen:
                seen.add(name)
                for inner in functions[name].node_def:
                    types.update(_apply_types(inner, functions, seen))
    return types


def variable_values(graph, sess, collection=tf1.GraphKeys.GLOBAL_VARIABLES):
    """``{variable name: value}`` of ``collection`` in ``graph`` read through ``sess``."""
    variables = graph.get_collection(collection)
    return dict(zip((v.op.name for v in variables), sess.run(variables)))


def same_bits(a, b):
    """Whether two results (nested lists/dicts of arrays) are equal bit for bit."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            same_bits(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(
            same_bits(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def report(name, npu, plain, keys=("losses", "weights")):
    """Print the comparison of an NPU run with its plain twin; return 0 when they agree bit for
    bit and a GeOp holds the training step, else 1."""
    same = all(same_bits(npu[k], plain[k]) for k in keys)
    print(f"{name}: GeOps holding the training step: "
          + ", ".join(f"{g['cluster']} ({g['size']} ops, {'/'.join(g['applies'])}"
                      + (f", loop {g['loop']}" if g["loop"] else "") + ")"
                      for g in npu["geops"]))
    print(f"{name}: NPU run equals plain TensorFlow bit for bit:", same)
    return 0 if same and npu["geops"] else 1
