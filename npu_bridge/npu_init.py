"""``from npu_bridge.npu_init import *``: everything a TF1.15 Ascend script expects.

Star-exports the run configuration classes, ``NPUEstimator``, the hooks, the optimizers and loss
scale managers, the modules ``npu_ops``, ``npu_rnn``, ``npu_scope``, ``util``, ``npu_unary_ops``,
``hccl_ops``, the HCCL management functions, the functions of :mod:`npu_bridge._init_api`
(``npu_config_proto``, ``init_resource``, ``npu_run_config_init``, ...), and ``tf``, ``os``,
``config_pb2``, ``rewriter_config_pb2``, ``RewriterConfig``, ``session``, ``session_run_hook``
and (with Keras 2) ``backend``, as the original does. ``tf`` is the script's TensorFlow: what
``import tensorflow`` gives it when the star import runs (under a TF1 alias launcher, the alias
module wrapping ``tf.compat.v1``): the star import never swaps TensorFlow 2's API, where
``tf.nn.dropout(x, 0.9)`` means a rate of 0.9, in for the script's TF1 one. ``session`` and
``session_run_hook``, the original's TensorFlow modules, hold their public classes here
(``session.Session``, ``session.InteractiveSession``; ``session_run_hook.SessionRunHook``,
``SessionRunArgs``, ``SessionRunContext``, ``SessionRunValues``).

**Side effect: importing this module disables eager execution**
(``tf.compat.v1.disable_eager_execution()``). TF1.15 scripts assume graph mode: they call
``tf.placeholder``, run ``tf.Session`` on the default graph and build ``npu_ops`` that refuse
eager mode. Importing :mod:`npu_bridge` alone does not change the execution mode; use that (or
:mod:`npu_bridge._init_api`) in programs that need eager execution.

The NPU session and the TF1 aliases are installed by importing :mod:`npu_bridge` (this module
imports it). The modules ``keras_to_npu``, ``npu_plugin``, ``npu_strategy``, ``npu_cpu_ops``,
``profiler`` and ``scoped_graph_manager`` are exported as the original does (see
``docs/api-modules.md``).
"""

import os
import types

import tensorflow as _tf
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from npu_bridge._init_api import (
    NpuEmptyHook,
    close_session,
    experimental_options,
    get_npu_local_rank_id,
    get_npu_local_rank_size,
    get_npu_rank_id,
    get_npu_rank_size,
    init_resource,
    npu_callbacks_append,
    npu_clear_session,
    npu_config_proto,
    npu_graph_options,
    npu_hooks_append,
    npu_keras_optimizer,
    npu_optimizer_options,
    npu_run_config_init,
    npu_tf_optimizer,
    set_keras_session_npu_config,
    shutdown_resource,
)
from npu_bridge.estimator import npu_ops

# API modules (docs/api-modules.md), exported under the original's names.
from npu_bridge.estimator.npu import (
    keras_to_npu,
    npu_plugin,
    npu_rnn,
    npu_scope,
    npu_strategy,
    util,
)
from npu_bridge.estimator.npu.npu_callbacks import NPUBroadcastGlobalVariablesCallback
from npu_bridge.estimator.npu.npu_config import (
    DumpConfig,
    DynamicInputConfig,
    ExperimentalConfig,
    GraphMemoryOptimizeConfig,
    MemoryConfig,
    NPURunConfig,
    ProfilingConfig,
    decorator_tf_session,
)
from npu_bridge.estimator.npu.npu_estimator import NPUEstimator, NPUEstimatorSpec
from npu_bridge.estimator.npu.npu_hook import (
    NPUBroadcastGlobalVariablesHook,
    NPUCheckpointSaverHook,
    NPUOutputTensorHook,
    SetIterationsVarHook,
    TellMeStepOrLossHook,
)
from npu_bridge.estimator.npu.npu_loss_scale_manager import (
    ExponentialUpdateLossScaleManager,
    FixedLossScaleManager,
)
from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
from npu_bridge.estimator.npu.npu_optimizer import (
    KerasDistributeOptimizer,
    NPUDistributedOptimizer,
    NPUOptimizer,
    npu_allreduce,
    npu_distributed_optimizer_wrapper,
)
from npu_bridge.estimator.npu_unary_ops import npu_unary_ops
from npu_bridge.hccl import hccl_ops
from npu_bridge.hccl.manage.api import (
    create_group,
    destroy_group,
    get_group_rank_from_world_rank,
    get_local_rank_id,
    get_local_rank_size,
    get_rank_id,
    get_rank_size,
    get_world_rank_from_group_rank,
    set_split_strategy_by_idx,
    set_split_strategy_by_size,
)
from npu_bridge.npu_cpu import npu_cpu_ops
from npu_bridge.profiler import profiler
from npu_bridge.scoped_graph_manager import scoped_graph_manager


def _module(name, **members):
    module = types.ModuleType(name, f"The public classes of TensorFlow's {name} module.")
    vars(module).update(members)
    return module


session = _module("session", Session=_tf.compat.v1.Session,
                  InteractiveSession=_tf.compat.v1.InteractiveSession)
session_run_hook = _module(
    "session_run_hook", SessionRunHook=_tf.compat.v1.train.SessionRunHook,
    SessionRunArgs=_tf.compat.v1.train.SessionRunArgs,
    SessionRunContext=_tf.compat.v1.train.SessionRunContext,
    SessionRunValues=_tf.compat.v1.train.SessionRunValues)

try:
    backend = _tf.compat.v1.keras.backend
except (AttributeError, ImportError):  # Keras 3 without tf_keras has no v1 backend
    backend = None

__all__ = [
    # run configuration and estimator
    "NPURunConfig", "ProfilingConfig", "MemoryConfig", "DumpConfig", "DynamicInputConfig",
    "ExperimentalConfig", "GraphMemoryOptimizeConfig", "decorator_tf_session", "NPUEstimator",
    "NPUEstimatorSpec",
    # hooks and callbacks
    "NPUCheckpointSaverHook", "NPUOutputTensorHook", "NPUBroadcastGlobalVariablesHook",
    "SetIterationsVarHook", "TellMeStepOrLossHook", "NPUBroadcastGlobalVariablesCallback",
    "NpuEmptyHook",
    # optimizers and loss scaling
    "NPUDistributedOptimizer", "KerasDistributeOptimizer", "npu_distributed_optimizer_wrapper",
    "NPUOptimizer", "npu_allreduce", "NPULossScaleOptimizer", "FixedLossScaleManager",
    "ExponentialUpdateLossScaleManager", "npu_keras_optimizer", "npu_tf_optimizer",
    # modules
    "npu_ops", "npu_rnn", "npu_scope", "util", "npu_unary_ops", "hccl_ops",
    # HCCL management
    "create_group", "destroy_group", "get_rank_size", "get_local_rank_size", "get_rank_id",
    "get_local_rank_id", "get_world_rank_from_group_rank", "get_group_rank_from_world_rank",
    "set_split_strategy_by_idx", "set_split_strategy_by_size",
    # session helpers
    "experimental_options", "npu_hooks_append", "npu_callbacks_append", "npu_config_proto",
    "npu_graph_options", "npu_optimizer_options", "npu_run_config_init",
    "set_keras_session_npu_config", "init_resource", "shutdown_resource", "close_session",
    "get_npu_rank_id", "get_npu_local_rank_id", "get_npu_rank_size",
    "get_npu_local_rank_size", "npu_clear_session",
    # TensorFlow re-exports
    "config_pb2", "rewriter_config_pb2", "RewriterConfig", "session", "session_run_hook",
    "backend", "tf", "os",  # noqa: F822 - tf: the module's __getattr__
]

__all__ += ["keras_to_npu", "npu_plugin", "npu_strategy", "npu_cpu_ops", "profiler",
            "scoped_graph_manager"]

_tf.compat.v1.disable_eager_execution()


def __getattr__(name):
    """``tf``: the script's TensorFlow (``sys.modules["tensorflow"]``; see the module docstring)."""
    if name == "tf":
        import sys

        return sys.modules.get("tensorflow", _tf)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
