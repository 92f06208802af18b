"""The functions of :mod:`npu_bridge.npu_init`, importable without its side effect.

:mod:`npu_bridge.npu_init` re-exports everything here and then disables eager execution; this
module does not, so it can be used (and tested) in a process that stays eager.
"""

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from npu_bridge import _env, _keras_session
from npu_bridge.estimator import npu_ops
from npu_bridge.estimator.npu import util
from npu_bridge.estimator.npu.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_bridge.estimator.npu.npu_config import (
    HAS_TF_ESTIMATOR,
    NPURunConfig,
    PlainRunConfig,
    apply_npu_session_defaults,
)
from npu_bridge.estimator.npu.npu_hook import NPUBroadcastGlobalVariablesHook
from npu_bridge.estimator.npu.npu_optimizer import (
    KerasDistributeOptimizer,
    NPUDistributedOptimizer,
)
from npu_bridge.hccl.manage import api as hccl_api

__all__ = [
    "NpuEmptyHook",
    "close_session",
    "experimental_options",
    "get_npu_local_rank_id",
    "get_npu_local_rank_size",
    "get_npu_rank_id",
    "get_npu_rank_size",
    "init_resource",
    "npu_callbacks_append",
    "npu_clear_session",
    "npu_config_proto",
    "npu_graph_options",
    "npu_hooks_append",
    "npu_keras_optimizer",
    "npu_optimizer_options",
    "npu_run_config_init",
    "npu_tf_optimizer",
    "set_keras_session_npu_config",
    "shutdown_resource",
]

experimental_options = {
    "disable_model_pruning": False,
    "function_optimization": RewriterConfig.ON,
    "constant_folding": RewriterConfig.ON,
    "shape_optimization": RewriterConfig.ON,
    "arithmetic_optimization": RewriterConfig.ON,
    "loop_optimization": RewriterConfig.ON,
    "dependency_optimization": RewriterConfig.ON,
    "layout_optimizer": RewriterConfig.ON,
}
"""The Grappler switches the original exports (all on, pruning not disabled)."""


def npu_config_proto(config_proto=None):
    """``config_proto`` (modified in place; a new ``ConfigProto`` for None) with the NPU
    session settings: an ``NpuOptimizer`` entry if there is none (memory optimisation is then
    turned OFF), and always ``allow_soft_placement`` True, ``log_device_placement`` False,
    remapping OFF, ``global_jit_level`` OFF.

    Unlike the original, which silently replaces any non-``ConfigProto`` argument by a new
    proto, anything but None or a ``ConfigProto`` raises ``TypeError``.
    """
    if config_proto is None:
        config_proto = config_pb2.ConfigProto()
    return apply_npu_session_defaults(config_proto)


def npu_graph_options(graph_options=None):
    """``graph_options`` (or a new ``GraphOptions``) with ``global_jit_level`` OFF."""
    if graph_options is None:
        graph_options = config_pb2.GraphOptions()
    if not isinstance(graph_options, config_pb2.GraphOptions):
        raise TypeError(f"graph_options must be a GraphOptions, got "
                        f"{type(graph_options).__name__}")
    graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return graph_options


def npu_optimizer_options(optimizer_options=None):
    """``optimizer_options`` (or a new ``OptimizerOptions``) with ``global_jit_level`` OFF."""
    if optimizer_options is None:
        optimizer_options = config_pb2.OptimizerOptions()
    if not isinstance(optimizer_options, config_pb2.OptimizerOptions):
        raise TypeError(f"optimizer_options must be an OptimizerOptions, got "
                        f"{type(optimizer_options).__name__}")
    optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return optimizer_options


def _run_config_types():
    types = [PlainRunConfig]
    if HAS_TF_ESTIMATOR:
        types.append(tf.estimator.RunConfig)
    return tuple(types)


def npu_run_config_init(run_config=None):
    """``run_config`` whose session config went through :func:`npu_config_proto`.

    None gives a new ``tf.estimator.RunConfig`` (TensorFlow 2.15) or, without ``tf.estimator``,
    a new :class:`~npu_bridge.estimator.npu.npu_config.NPURunConfig`. Anything but a run
    config raises ``TypeError``.
    """
    if run_config is None:
        run_config = tf.estimator.RunConfig() if HAS_TF_ESTIMATOR else NPURunConfig()
    if not isinstance(run_config, _run_config_types()):
        raise TypeError(f"run_config must be a tf.estimator.RunConfig or NPURunConfig, got "
                        f"{type(run_config).__name__}")
    run_config.__dict__["_session_config"] = npu_config_proto(run_config.session_config)
    return run_config


def npu_hooks_append(hooks_list=()):
    """``hooks_list`` (a new list when it is not a list) with an
    :class:`~npu_bridge.estimator.npu.npu_hook.NPUBroadcastGlobalVariablesHook` appended."""
    if not isinstance(hooks_list, list):
        hooks_list = []
    hooks_list.append(NPUBroadcastGlobalVariablesHook(0, _env.rank_id()))
    return hooks_list


def npu_callbacks_append(callbacks_list=()):
    """``callbacks_list`` (a new list when it is not a list) with an
    :class:`~npu_bridge.estimator.npu.npu_callbacks.NPUBroadcastGlobalVariablesCallback`."""
    if not isinstance(callbacks_list, list):
        callbacks_list = []
    callbacks_list.append(NPUBroadcastGlobalVariablesCallback(0))
    return callbacks_list


def set_keras_session_npu_config(config=None):
    """Create a session with :func:`npu_config_proto` ``(config)``, make it the Keras session
    and return it.

    Raises:
        RuntimeError: the script's Keras (``tf.keras``, ``tensorflow.keras``) is Keras 3, which
            runs no TF1 session (see :func:`npu_bridge._keras_session.backend`).
    """
    backend = _keras_session.backend()
    sess = tf.compat.v1.Session(config=npu_config_proto(config))
    backend.set_session(sess)
    return sess


def npu_clear_session(config=None):
    """Clear the Keras session and install a new one configured with
    :func:`npu_config_proto` ``(config)``."""
    backend = _keras_session.backend()
    backend.clear_session()
    backend.set_session(tf.compat.v1.Session(config=npu_config_proto(config)))


def init_resource(config=None):
    """Initialise the NPU system in a session of its own: returns ``(sess, shutdown_op)``.

    Builds ``initialize_system``/``shutdown_system`` in the default graph, runs the first in a
    session configured with :func:`npu_config_proto` ``(config)``, and records the rank id,
    local rank id, rank size and local rank size (from ``hccl.manage.api``) for the
    ``get_npu_*`` functions. Finish with :func:`shutdown_resource` and :func:`close_session`.
    """
    _env.current()  # a bad rank environment fails before any session exists
    config = npu_config_proto(config)
    util.global_dict_init()
    npu_init = npu_ops.initialize_system()
    npu_shutdown = npu_ops.shutdown_system()
    sess = tf.compat.v1.Session(config=config)
    sess.run(npu_init)
    util.set_value("npu_rank_id", hccl_api.get_rank_id())
    util.set_value("npu_local_rank_id", hccl_api.get_local_rank_id())
    util.set_value("npu_rank_size", hccl_api.get_rank_size())
    util.set_value("npu_local_rank_size", hccl_api.get_local_rank_size())
    return sess, npu_shutdown


def shutdown_resource(sess, npu_shutdown):
    """Run the shutdown op returned by :func:`init_resource`."""
    sess.run(npu_shutdown)


def close_session(sess):
    """Close ``sess``."""
    sess.close()


def get_npu_rank_id():
    """Rank id recorded by :func:`init_resource` (0 before)."""
    return util.get_value("npu_rank_id", 0)


def get_npu_local_rank_id():
    """Local rank id recorded by :func:`init_resource` (0 before)."""
    return util.get_value("npu_local_rank_id", 0)


def get_npu_rank_size():
    """Rank size recorded by :func:`init_resource` (1 before)."""
    return util.get_value("npu_rank_size", 1)


def get_npu_local_rank_size():
    """Local rank size recorded by :func:`init_resource` (1 before)."""
    return util.get_value("npu_local_rank_size", 1)


class NpuEmptyHook(tf.compat.v1.train.SessionRunHook):
    """A session hook that does nothing (scripts use it as a placeholder)."""


def npu_keras_optimizer(opt):
    """``KerasDistributeOptimizer(opt)``: ``opt`` itself, averaging its gradients over the
    ranks."""
    return KerasDistributeOptimizer(opt)


def npu_tf_optimizer(opt):
    """``NPUDistributedOptimizer(opt)``: ``opt`` with its gradients averaged over the ranks
    (exactly ``opt`` on one rank)."""
    return NPUDistributedOptimizer(opt)
