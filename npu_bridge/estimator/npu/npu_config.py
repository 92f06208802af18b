"""Run configuration of NPU estimators (``npu_bridge.estimator.npu.npu_config``).

``NPURunConfig`` subclasses ``tf.estimator.RunConfig`` where ``tf.estimator`` exists (TensorFlow
2.15). TensorFlow 2.16 removed ``tf.estimator``; there ``NPURunConfig`` derives from
:class:`PlainRunConfig`, a small class with the same constructor and read-only properties as
``RunConfig`` (``model_dir``, ``session_config``, ``save_checkpoints_steps``, ..., ``replace``),
so scripts that only build an ``NPURunConfig`` for its session options keep working.

:func:`npu_run_config_options` turns an ``NPURunConfig`` into the ``NpuOptimizer`` options the
original ``NPUEstimator.__load_graph_optimizers`` writes, and
:func:`npu_run_config_to_config_proto` into a ``ConfigProto``; both go through
:class:`npu_adapter.NpuConfig`, the single option model, so every value is validated there.

The sub-configurations (``ProfilingConfig``, ``MemoryConfig``, ``DumpConfig``,
``GraphMemoryOptimizeConfig``, ``ExperimentalConfig``, ``DynamicInputConfig``) keep the
original's private attribute names (``_enable_dump``, ``_recompute``, ...) because scripts and
the original's helpers read them.
"""

import copy
import json
import os
from enum import Enum
from inspect import signature

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

from npu_adapter.config import NPU_OPTIMIZER_NAME, OPTIONS_BY_NAME, NpuConfig, parsers
from npu_bridge.estimator.npu import util

__all__ = [
    "GRAPPLER_OPTIMIZERS",
    "HAS_TF_ESTIMATOR",
    "DumpConfig",
    "DynamicInputConfig",
    "ExperimentalConfig",
    "GraphMemoryOptimizeConfig",
    "MemoryConfig",
    "NPURunConfig",
    "NpuExecutePlacement",
    "PlainRunConfig",
    "ProfilingConfig",
    "apply_npu_session_defaults",
    "decorator_tf_session",
    "npu_run_config_options",
    "npu_run_config_to_config_proto",
    "set_npu_default_config",
]

HAS_TF_ESTIMATOR = hasattr(tf, "estimator") and hasattr(tf.estimator, "RunConfig")
"""True when this TensorFlow still has ``tf.estimator`` (2.15; removed in 2.16)."""

GRAPPLER_OPTIMIZERS = ("pruning", "function", "constfold", "shape", "arithmetic", "loop",
                       "dependency", "layout", "GradFusionOptimizer")
"""``rewrite_options.optimizers`` that NPUEstimator sets (which makes Grappler run only these)."""


def _check_type(value, types, name, what):
    if value is not None and (not isinstance(value, types) or isinstance(value, bool)
                              and bool not in types):
        raise TypeError(f"{name} must be {what} or None, got {type(value).__name__}: {value!r}")


def _check_str(value, name):
    _check_type(value, (str,), name, "a string")


def _check_int(value, name):
    _check_type(value, (int,), name, "an int")


def _check_option(value, option):
    """Validate ``value`` with the option table's check for ``option`` (NpuConfigError)."""
    if value is not None:
        OPTIONS_BY_NAME[option].validate(value)
    return value


class PlainRunConfig:
    """The parts of ``tf.estimator.RunConfig`` an ``NPURunConfig`` needs, for TensorFlow >= 2.16.

    Same constructor and read-only properties as ``RunConfig``; no cluster handling (no
    ``TF_CONFIG`` parsing) and no distribution strategy logic.
    """

    _DEFAULT_CHECKPOINT_SECS = 600

    def __init__(self, model_dir=None, tf_random_seed=None, save_summary_steps=100,
                 save_checkpoints_steps=None, save_checkpoints_secs=None, session_config=None,
                 keep_checkpoint_max=5, keep_checkpoint_every_n_hours=10000,
                 log_step_count_steps=100, train_distribute=None, device_fn=None, protocol=None,
                 eval_distribute=None, experimental_distribute=None,
                 experimental_max_worker_delay_secs=None, session_creation_timeout_secs=7200,
                 checkpoint_save_graph_def=True):
        if save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise ValueError("Can not provide both save_checkpoints_steps and "
                             "save_checkpoints_secs.")
        if session_config is not None and not isinstance(session_config,
                                                         config_pb2.ConfigProto):
            raise ValueError(f"session_config must be a ConfigProto, got "
                             f"{type(session_config).__name__}")
        self._model_dir = model_dir
        self._tf_random_seed = tf_random_seed
        self._save_summary_steps = save_summary_steps
        self._save_checkpoints_steps = save_checkpoints_steps
        self._save_checkpoints_secs = save_checkpoints_secs
        self._session_config = session_config
        self._keep_checkpoint_max = keep_checkpoint_max
        self._keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self._log_step_count_steps = log_step_count_steps
        self._train_distribute = train_distribute
        self._device_fn = device_fn
        self._protocol = protocol
        self._eval_distribute = eval_distribute
        self._experimental_distribute = experimental_distribute
        self._experimental_max_worker_delay_secs = experimental_max_worker_delay_secs
        self._session_creation_timeout_secs = session_creation_timeout_secs
        self._checkpoint_save_graph_def = checkpoint_save_graph_def

    model_dir = property(lambda self: self._model_dir, doc="Checkpoint/summary directory.")
    tf_random_seed = property(lambda self: self._tf_random_seed, doc="Graph-level seed.")
    save_summary_steps = property(lambda self: self._save_summary_steps)
    save_checkpoints_steps = property(lambda self: self._save_checkpoints_steps)
    save_checkpoints_secs = property(lambda self: self._save_checkpoints_secs)
    session_config = property(lambda self: self._session_config, doc="The ConfigProto.")
    keep_checkpoint_max = property(lambda self: self._keep_checkpoint_max)
    keep_checkpoint_every_n_hours = property(lambda self: self._keep_checkpoint_every_n_hours)
    log_step_count_steps = property(lambda self: self._log_step_count_steps)
    train_distribute = property(lambda self: self._train_distribute)
    eval_distribute = property(lambda self: self._eval_distribute)
    device_fn = property(lambda self: self._device_fn)
    protocol = property(lambda self: self._protocol)
    experimental_max_worker_delay_secs = property(
        lambda self: self._experimental_max_worker_delay_secs)
    session_creation_timeout_secs = property(lambda self: self._session_creation_timeout_secs)
    checkpoint_save_graph_def = property(lambda self: self._checkpoint_save_graph_def)

    def replace(self, **kwargs):
        """A copy with the given ``RunConfig`` properties replaced (as ``RunConfig.replace``)."""
        new = copy.deepcopy(self)
        for key, value in kwargs.items():
            if not isinstance(getattr(type(self), key, None), property):
                raise ValueError(f"{key!r} is not a RunConfig property that can be replaced")
            setattr(new, "_" + key, value)
        if new._save_checkpoints_steps is not None and new._save_checkpoints_secs is not None:
            raise ValueError("Can not provide both save_checkpoints_steps and "
                             "save_checkpoints_secs.")
        return new


_RunConfigBase = tf.estimator.RunConfig if HAS_TF_ESTIMATOR else PlainRunConfig


def _parameter_server_strategy_types():
    types = []
    for module in (tf.distribute.experimental, tf.compat.v1.distribute.experimental):
        cls = getattr(module, "ParameterServerStrategy", None)
        if cls is not None and cls not in types:
            types.append(cls)
    return tuple(types)


def _tf_config():
    raw = os.environ.get("TF_CONFIG") or "{}"
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable TF_CONFIG is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("environment variable TF_CONFIG must hold a JSON object")
    return value


# NPURunConfig keyword -> attribute name. The original stores some settings publicly and most
# behind an underscore; we keep its names because scripts read them.
_PUBLIC_FIELDS = (
    "enable_data_pre_proc", "is_tailing_optimization", "variable_format_optimize",
    "op_debug_level", "enable_scope_fusion_passes", "topo_sorting_mode", "aoe_config_file",
    "insert_op_file", "stream_sync_timeout", "event_sync_timeout",
)
_PRIVATE_FIELDS = (
    "profiling_config", "precision_mode", "enable_reduce_precision", "hcom_parallel",
    "graph_memory_max_size", "variable_memory_max_size", "stream_max_parallel_num",
    "op_select_implmode", "optypelist_for_implmode", "aoe_mode", "work_path", "buffer_optimize",
    "enable_small_channel", "fusion_switch_file", "enable_compress_weight",
    "compress_weight_conf", "op_compiler_cache_mode", "op_compiler_cache_dir", "debug_dir",
    "hcom_multi_mode", "dynamic_input", "dynamic_graph_execute_mode",
    "dynamic_inputs_shape_range", "local_rank_id", "local_device_list", "session_device_id",
    "distribute_config", "modify_mixlist", "op_precision_mode", "device_type", "soc_config",
    "hccl_timeout", "op_wait_timeout", "op_execute_timeout", "HCCL_algorithm",
    "customize_dtypes", "op_debug_config", "memory_config", "external_weight", "deterministic",
    "frozen_variable", "variable_placement", "jit_compile", "precision_mode_v2",
    "ac_parallel_enable", "quant_dumpable", "input_fusion_size", "compile_dynamic_mode",
    "graph_max_parallel_model_num", "export_compile_stat", "aicore_num", "oo_constant_folding",
    "input_batch_cpy", "shape_generalization_mode", "all_tensor_not_empty",
    "auto_multistream_parallel_mode", "oo_level", "optimization_switch",
)


class NPURunConfig(_RunConfigBase):
    """``RunConfig`` with the NPU session options (the original's parameters, in its order).

    Checks (as the original): ``iterations_per_loop`` positive int (TypeError/ValueError);
    ``mix_compile_mode`` bool (TypeError) and, when True, ``iterations_per_loop`` 1
    (ValueError); ``jit_compile`` str (TypeError); a ``TF_CONFIG`` cluster requires a
    ``ParameterServerStrategy`` as ``distribute`` and vice versa, and requires
    ``mix_compile_mode`` (ValueError); ``dump_config``, ``experimental_config``,
    ``dynamic_input_config``, ``profiling_config`` and ``memory_config`` must have their types
    (ValueError); ``horovod_mode`` bool (ValueError); ``graph_run_mode`` 0 or 1 and
    ``enable_exception_dump`` a non-negative int. ``save_checkpoints_steps`` defaults to 100
    when neither it nor ``save_checkpoints_secs`` is given. Option values themselves are checked
    by :func:`npu_run_config_options`.

    With ``tf.estimator`` missing (TensorFlow >= 2.16) the base class is
    :class:`PlainRunConfig`; a ``distribute`` strategy is then stored but not used.
    """

    def __init__(self, iterations_per_loop=1, profiling_config=None, model_dir=None,
                 tf_random_seed=None, save_summary_steps=0, save_checkpoints_steps=None,
                 save_checkpoints_secs=None, session_config=None, keep_checkpoint_max=5,
                 keep_checkpoint_every_n_hours=10000, log_step_count_steps=100, distribute=None,
                 enable_data_pre_proc=True, precision_mode=None, enable_reduce_precision=False,
                 variable_format_optimize=None, mix_compile_mode=False, hcom_parallel=True,
                 graph_memory_max_size=None, variable_memory_max_size=None, dump_config=None,
                 stream_max_parallel_num=None, is_tailing_optimization=False,
                 horovod_mode=False, graph_run_mode=1, op_debug_level=None,
                 enable_scope_fusion_passes=None, enable_exception_dump=2,
                 op_select_implmode=None, optypelist_for_implmode=None,
                 dynamic_input_config=None, aoe_mode=None, work_path=None,
                 buffer_optimize="l2_optimize", enable_small_channel=0, fusion_switch_file=None,
                 enable_compress_weight=False, compress_weight_conf=None,
                 op_compiler_cache_mode=None, op_compiler_cache_dir=None, debug_dir=None,
                 hcom_multi_mode=False, dynamic_input=None,
                 dynamic_graph_execute_mode="dynamic_execute", dynamic_inputs_shape_range=None,
                 train_distribute=None, eval_distribute=None, local_rank_id=None,
                 local_device_list=None, session_device_id=None, distribute_config=None,
                 modify_mixlist=None, op_precision_mode=None, device_type="default_device_type",
                 soc_config=None, hccl_timeout=None, op_wait_timeout=None,
                 op_execute_timeout=None, HCCL_algorithm=None, customize_dtypes=None,
                 op_debug_config=None, memory_config=None, experimental_config=None,
                 topo_sorting_mode=None, aoe_config_file=None, insert_op_file=None,
                 stream_sync_timeout=-1, event_sync_timeout=-1, external_weight=False,
                 deterministic=0, frozen_variable=False, variable_placement="Device",
                 jit_compile="auto", precision_mode_v2=None, ac_parallel_enable=None,
                 quant_dumpable=None, input_fusion_size=131072, compile_dynamic_mode=None,
                 graph_max_parallel_model_num=1, export_compile_stat=1, aicore_num=None,
                 oo_constant_folding=True, input_batch_cpy=False,
                 shape_generalization_mode="STRICT", all_tensor_not_empty=False,
                 auto_multistream_parallel_mode=None, oo_level="O3", optimization_switch=None):
        arguments = dict(locals())
        util.check_positive_integer(iterations_per_loop, "iterations_per_loop")
        if not isinstance(mix_compile_mode, bool):
            raise TypeError(f'"mix_compile_mode" type must be bool, got '
                            f"{type(mix_compile_mode).__name__}")
        if mix_compile_mode and iterations_per_loop != 1:
            raise ValueError('"iterations_per_loop" must be 1 with "mix_compile_mode" is True, '
                             f"got {iterations_per_loop}")
        if not isinstance(jit_compile, str):
            raise TypeError(f"jit_compile: expected str, got {type(jit_compile).__name__}")
        cluster = _tf_config().get("cluster") or {}
        ps_types = _parameter_server_strategy_types()
        is_ps = bool(ps_types) and isinstance(distribute, ps_types)
        if bool(cluster) != is_ps:
            raise ValueError('"cluster" and "distribute" must all be set in ps mode: TF_CONFIG '
                             f"{'has' if cluster else 'has no'} cluster but distribute is "
                             f"{type(distribute).__name__}")
        if cluster and not mix_compile_mode:
            raise ValueError('"mix_compile_mode" can only be True with "cluster" is set')
        for name, cls in (("profiling_config", ProfilingConfig), ("dump_config", DumpConfig),
                          ("memory_config", MemoryConfig),
                          ("experimental_config", ExperimentalConfig),
                          ("dynamic_input_config", DynamicInputConfig)):
            value = arguments[name]
            if value is not None and not isinstance(value, cls):
                raise ValueError(f"`{name}` must be provided with type `{cls.__name__}`, got "
                                 f"{type(value).__name__}")
        if not isinstance(horovod_mode, bool):
            raise ValueError(f'"horovod_mode" type must be bool, got '
                             f"{type(horovod_mode).__name__}")
        util.check_nonnegative_integer(graph_run_mode, "graph_run_mode")
        if graph_run_mode > 1:
            raise ValueError(f'"graph_run_mode" value must be 0 or 1, got {graph_run_mode}')
        util.check_nonnegative_integer(enable_exception_dump, "enable_exception_dump")

        self.iterations_per_loop = iterations_per_loop
        self.mix_compile_mode = mix_compile_mode
        self.horovod_mode = horovod_mode
        self.graph_run_mode = graph_run_mode
        self.enable_exception_dump = enable_exception_dump
        for name in _PUBLIC_FIELDS:
            setattr(self, name, arguments[name])
        for name in _PRIVATE_FIELDS:
            setattr(self, "_" + name, arguments[name])
        self._dump_config = dump_config
        self._experimental_config = experimental_config
        self._dynamic_input_config = dynamic_input_config
        if save_checkpoints_steps is None and save_checkpoints_secs is None:
            save_checkpoints_steps = 100
        if distribute is not None:
            train_distribute = train_distribute or distribute
            eval_distribute = eval_distribute or distribute
        super().__init__(
            model_dir=model_dir, tf_random_seed=tf_random_seed,
            save_summary_steps=save_summary_steps, save_checkpoints_steps=save_checkpoints_steps,
            save_checkpoints_secs=save_checkpoints_secs, session_config=session_config,
            keep_checkpoint_max=keep_checkpoint_max,
            keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
            log_step_count_steps=log_step_count_steps, train_distribute=train_distribute,
            eval_distribute=eval_distribute)


class ProfilingConfig:
    """Profiling switch and options (``profiling_mode`` / ``profiling_options``)."""

    def __init__(self, enable_profiling=False, profiling_options=None):
        util.check_bool_type(enable_profiling, "enable_profiling")
        _check_str(profiling_options, "profiling_options")
        self._enable_profiling = enable_profiling
        self._profiling_options = profiling_options


class MemoryConfig:
    """Memory policies (``atomic_clean_policy``, ``static_memory_policy``,
    ``memory_optimization_policy``, ``variable_use_1g_huge_page``)."""

    def __init__(self, atomic_clean_policy=0, static_memory_policy=0,
                 memory_optimization_policy=None, variable_use_1g_huge_page=0):
        util.check_nonnegative_integer(atomic_clean_policy, "atomic_clean_policy")
        if static_memory_policy is not None:
            util.check_nonnegative_integer(static_memory_policy, "static_memory_policy")
        _check_str(memory_optimization_policy, "memory_optimization_policy")
        if variable_use_1g_huge_page is not None:
            util.check_nonnegative_integer(variable_use_1g_huge_page,
                                           "variable_use_1g_huge_page")
            _check_option(variable_use_1g_huge_page, "variable_use_1g_huge_page")
        self._atomic_clean_policy = atomic_clean_policy
        self._static_memory_policy = static_memory_policy
        self._memory_optimization_policy = memory_optimization_policy
        self._variable_use_1g_huge_page = variable_use_1g_huge_page


class DumpConfig:
    """Data dump / overflow dump settings; values are checked with the option table's rules
    (``dump_mode``, ``dump_debug_mode``, ``dump_data``, ``dump_step``). Whether ``dump_path``
    exists is checked when the options are built (it must when dumping is on)."""

    def __init__(self, enable_dump=False, dump_path=None, dump_step=None, dump_mode="output",
                 enable_dump_debug=False, dump_debug_mode="all", dump_data="tensor",
                 dump_layer=None):
        util.check_bool_type(enable_dump, "enable_dump")
        util.check_bool_type(enable_dump_debug, "enable_dump_debug")
        for name, value in (("dump_path", dump_path), ("dump_step", dump_step),
                            ("dump_mode", dump_mode), ("dump_debug_mode", dump_debug_mode),
                            ("dump_data", dump_data), ("dump_layer", dump_layer)):
            _check_str(value, name)
            if name != "dump_path":
                _check_option(value, name)
        self._enable_dump = enable_dump
        self._dump_path = dump_path
        self._dump_step = dump_step
        self._dump_mode = dump_mode
        self._enable_dump_debug = enable_dump_debug
        self._dump_debug_mode = dump_debug_mode
        self.dump_data = dump_data
        self.dump_layer = dump_layer


def _check_graph_mem_optimize_config(value, name):
    if value is not None and value not in ("auto", "manual"):
        raise ValueError(f"{name} should be in ['auto', 'manual'], got {value!r}")


class GraphMemoryOptimizeConfig:
    """Recompute and graph slicing modes: each None, ``"auto"`` or ``"manual"``."""

    def __init__(self, recompute=None, graph_slice=None):
        _check_graph_mem_optimize_config(recompute, "recompute")
        _check_graph_mem_optimize_config(graph_slice, "graph_slice")
        self._recompute = recompute
        self._graph_slice = graph_slice


class ExperimentalConfig:
    """Experimental options (CANN's NPURunConfig documentation): logical device deployment,
    graph memory optimisation, graph parallelism, graph compile cache, resource config,
    ``accelerate_train_mode`` (checked like the option ``experimental_accelerate_train_mode``,
    e.g. ``"fast|step|0.9"``).
    """

    def __init__(self, logical_device_cluster_deploy_mode="LB", logical_device_id=None,
                 model_deploy_mode=None, model_deploy_devicelist=None,
                 graph_memory_optimize_config=None, enable_graph_parallel=None,
                 graph_parallel_option_path=None, graph_compiler_cache_dir=None,
                 resource_config_path=None, accelerate_train_mode=None):
        for name, value in (
                ("logical_device_cluster_deploy_mode", logical_device_cluster_deploy_mode),
                ("logical_device_id", logical_device_id), ("model_deploy_mode", model_deploy_mode),
                ("model_deploy_devicelist", model_deploy_devicelist),
                ("graph_parallel_option_path", graph_parallel_option_path),
                ("graph_compiler_cache_dir", graph_compiler_cache_dir),
                ("resource_config_path", resource_config_path),
                ("accelerate_train_mode", accelerate_train_mode)):
            _check_str(value, name)
        if enable_graph_parallel is not None:
            util.check_bool_type(enable_graph_parallel, "enable_graph_parallel")
        if graph_memory_optimize_config is not None and not isinstance(
                graph_memory_optimize_config, GraphMemoryOptimizeConfig):
            raise ValueError("graph_memory_optimize_config type must be "
                             f"GraphMemoryOptimizeConfig, got "
                             f"{type(graph_memory_optimize_config).__name__}")
        if accelerate_train_mode:
            parsers.parse_accelerate_train_mode(accelerate_train_mode)
        self._logical_device_cluster_deploy_mode = logical_device_cluster_deploy_mode
        self._logical_device_id = logical_device_id
        self._model_deploy_mode = model_deploy_mode
        self._model_deploy_devicelist = model_deploy_devicelist
        self._graph_memory_optimize_config = graph_memory_optimize_config
        self._enable_graph_parallel = enable_graph_parallel
        self._graph_parallel_option_path = graph_parallel_option_path
        self._graph_compiler_cache_dir = graph_compiler_cache_dir
        self._resource_config_path = resource_config_path
        self._accelerate_train_mode = accelerate_train_mode


class NpuExecutePlacement(Enum):
    """Where ops of an :func:`~npu_bridge.estimator.npu.npu_scope.npu_variable_scope` run."""

    ALL = "all"
    CUBE = "cube"
    VECTOR = "vector"
    TAISHAN = "taishan"
    DVPP = "dvpp"
    HOST = "host"


class DynamicInputConfig:
    """Whole-graph dynamic dims: ``input_shape``, ``dynamic_dims``, ``dynamic_node_type`` and
    ``compile_hybrid_mode`` (docs/options.md).

    The first three are given together (or all None) and are checked like the session options
    (alphabetical input order, one value per ``-1`` in each gear, 2..100 gears, node type 0/1).
    """

    def __init__(self, input_shape, dynamic_dims, dynamic_node_type, compile_hybrid_mode=None):
        trio = {"input_shape": input_shape, "dynamic_dims": dynamic_dims,
                "dynamic_node_type": dynamic_node_type}
        given = [name for name, value in trio.items() if value is not None]
        if given and len(given) != len(trio):
            missing = [name for name in trio if name not in given]
            raise ValueError("input_shape, dynamic_dims and dynamic_node_type should use "
                             f"together; missing {', '.join(missing)}")
        _check_str(input_shape, "input_shape")
        _check_str(dynamic_dims, "dynamic_dims")
        _check_int(dynamic_node_type, "dynamic_node_type")
        _check_int(compile_hybrid_mode, "compile_hybrid_mode")
        if given:
            parsers.validate_dims_trio(input_shape, dynamic_dims, dynamic_node_type)
        if compile_hybrid_mode is not None and compile_hybrid_mode not in (0, 1):
            raise ValueError(f"compile_hybrid_mode must be 0 or 1, got {compile_hybrid_mode}")
        self._input_shape = input_shape
        self._dynamic_dims = dynamic_dims
        self._dynamic_node_type = dynamic_node_type
        self._compile_hybrid_mode = compile_hybrid_mode


# --------------------------------------------------------------------------------------------
# NPURunConfig -> NpuOptimizer options (the original NPUEstimator.__load_graph_optimizers)


def _set_if(options, key, value):
    if value is not None:
        options[key] = value


def _ps_mode_options(options):
    task = _tf_config().get("task") or {}
    task_type = task.get("type")
    if task_type:
        options["job"] = str(task_type)
        try:
            options["task_index"] = int(task.get("index", 0))
        except (TypeError, ValueError):
            raise ValueError(f"TF_CONFIG task index {task.get('index')!r} is not an "
                             "integer") from None
    else:
        options["job"] = "localhost"
        options["task_index"] = 0


def _precision_options(config, options):
    if config._precision_mode is not None:
        options["precision_mode"] = config._precision_mode
    if config._precision_mode_v2 is not None:
        options["precision_mode_v2"] = config._precision_mode_v2
    if config._precision_mode is None and config._precision_mode_v2 is None:
        options["precision_mode"] = ("allow_fp32_to_fp16" if config.graph_run_mode
                                     else "force_fp16")
    options["enable_reduce_precision"] = bool(config._enable_reduce_precision)


def _profiling_options(config, options):
    profiling = config._profiling_config
    if profiling is None:
        return
    options["profiling_mode"] = profiling._enable_profiling
    if profiling._enable_profiling:
        options["profiling_options"] = profiling._profiling_options or ""


def _memory_options(config, options):
    memory = config._memory_config
    if memory is None:
        return
    options["atomic_clean_policy"] = memory._atomic_clean_policy
    _set_if(options, "static_memory_policy", memory._static_memory_policy)
    _set_if(options, "memory_optimization_policy", memory._memory_optimization_policy)
    _set_if(options, "variable_use_1g_huge_page", memory._variable_use_1g_huge_page)


def _dump_options(config, options):
    dump = config._dump_config
    if dump is None:
        options["enable_dump"] = False
        options["enable_dump_debug"] = False
        return
    options["enable_dump"] = dump._enable_dump
    options["enable_dump_debug"] = dump._enable_dump_debug
    _set_if(options, "dump_path", dump._dump_path)
    _set_if(options, "dump_step", dump._dump_step)
    _set_if(options, "dump_mode", dump._dump_mode)
    _set_if(options, "dump_debug_mode", dump._dump_debug_mode)
    _set_if(options, "dump_data", dump.dump_data)
    _set_if(options, "dump_layer", dump.dump_layer)


def _dynamic_input_options(config, options):
    dynamic = config._dynamic_input_config
    if dynamic is None or dynamic._input_shape is None:
        return
    options["input_shape"] = dynamic._input_shape
    options["dynamic_dims"] = dynamic._dynamic_dims
    options["dynamic_node_type"] = dynamic._dynamic_node_type
    _set_if(options, "compile_hybrid_mode", dynamic._compile_hybrid_mode)


def _aoe_options(config, options):
    if config._aoe_mode is not None:
        options["aoe_mode"] = config._aoe_mode
        options["work_path"] = config._work_path if config._work_path is not None else "./"
        _set_if(options, "distribute_config", config._distribute_config)
    _set_if(options, "aoe_config_file", config.aoe_config_file)


def _experimental_options(config, options):
    experimental = config._experimental_config
    if experimental is None:
        options["experimental_logical_device_cluster_deploy_mode"] = "LB"
        return
    for key, value in (
            ("experimental_logical_device_cluster_deploy_mode",
             experimental._logical_device_cluster_deploy_mode),
            ("experimental_logical_device_id", experimental._logical_device_id),
            ("experimental_model_deploy_mode", experimental._model_deploy_mode),
            ("experimental_model_deploy_devicelist", experimental._model_deploy_devicelist),
            ("resource_config_path", experimental._resource_config_path),
            ("enable_graph_parallel", experimental._enable_graph_parallel),
            ("graph_parallel_option_path", experimental._graph_parallel_option_path),
            ("graph_compiler_cache_dir", experimental._graph_compiler_cache_dir),
            ("experimental_accelerate_train_mode", experimental._accelerate_train_mode)):
        _set_if(options, key, value)
    memory = experimental._graph_memory_optimize_config
    if memory is not None:
        _set_if(options, "graph_slice", memory._graph_slice)


def npu_run_config_options(config):
    """The ``NpuOptimizer`` options NPUEstimator derives from ``config`` (a dict, Python values).

    Follows the original's ``__load_graph_optimizers``: always ``use_off_line``
    True, ``min_group_size`` and ``enable_reduce_precision`` (compatibility keys), job and task
    index from ``TF_CONFIG`` (else ``localhost``/0), ``precision_mode`` defaulting to
    ``allow_fp32_to_fp16`` (``force_fp16`` when ``graph_run_mode`` is 0) unless a precision
    mode is given, dump flags False without a ``DumpConfig``, the LB deploy mode without an
    ``ExperimentalConfig``, ``graph_slice`` from its ``GraphMemoryOptimizeConfig``. Optional
    settings are written only when given. Deviations: ``enable_compress_weight`` is written
    only when True (the option table treats its presence as conflicting with
    ``compress_weight_conf``), and the dims of a ``DynamicInputConfig`` are forwarded whenever
    they are given (``compile_hybrid_mode`` only when set); the deprecated
    ``dynamic_graph_execute_mode``, which the original always writes, is written only with
    ``dynamic_input`` or a mode other than the default, so a default ``NPURunConfig`` warns
    about nothing.
    """
    if not isinstance(config, NPURunConfig):
        raise ValueError(f"config must be an NPURunConfig, got {type(config).__name__}")
    options = {
        "enable_data_pre_proc": config.enable_data_pre_proc,
        "mix_compile_mode": config.mix_compile_mode,
        "use_off_line": True,
        "iterations_per_loop": config.iterations_per_loop,
        "is_tailing_optimization": config.is_tailing_optimization,
        "min_group_size": True,
        "hcom_parallel": config._hcom_parallel,
        "graph_run_mode": config.graph_run_mode,
        "enable_exception_dump": config.enable_exception_dump,
        "enable_small_channel": config._enable_small_channel,
        "hcom_multi_mode": config._hcom_multi_mode,
        "device_type": config._device_type,
        "jit_compile": config._jit_compile,
        "external_weight": config._external_weight,
        "stream_sync_timeout": config.stream_sync_timeout,
        "event_sync_timeout": config.event_sync_timeout,
        "deterministic": config._deterministic,
        "frozen_variable": config._frozen_variable,
        "variable_placement": config._variable_placement,
        "input_fusion_size": config._input_fusion_size,
        "graph_max_parallel_model_num": config._graph_max_parallel_model_num,
        "export_compile_stat": config._export_compile_stat,
        "oo_constant_folding": config._oo_constant_folding,
        "input_batch_cpy": config._input_batch_cpy,
        "shape_generalization_mode": config._shape_generalization_mode,
        "all_tensor_not_empty": config._all_tensor_not_empty,
        "oo_level": config._oo_level,
    }
    if config._dynamic_input is not None or \
            config._dynamic_graph_execute_mode != "dynamic_execute":
        # The original always writes this deprecated key; written only when the user chose
        # dynamic inputs or another mode, it warns only those who use it (the default value
        # is the option's own default, so nothing else changes).
        options["dynamic_graph_execute_mode"] = config._dynamic_graph_execute_mode
    if config._graph_memory_max_size is not None:
        options["graph_memory_max_size"] = str(config._graph_memory_max_size)
    if config._variable_memory_max_size is not None:
        options["variable_memory_max_size"] = str(config._variable_memory_max_size)
    if config._enable_compress_weight:
        options["enable_compress_weight"] = True
    for key, value in (
            ("op_debug_level", config.op_debug_level),
            ("enable_scope_fusion_passes", config.enable_scope_fusion_passes),
            ("buffer_optimize", config._buffer_optimize),
            ("fusion_switch_file", config._fusion_switch_file),
            ("compress_weight_conf", config._compress_weight_conf),
            ("op_compiler_cache_mode", config._op_compiler_cache_mode),
            ("op_compiler_cache_dir", config._op_compiler_cache_dir),
            ("debug_dir", config._debug_dir),
            ("dynamic_input", config._dynamic_input),
            ("dynamic_inputs_shape_range", config._dynamic_inputs_shape_range),
            ("local_rank_id", config._local_rank_id),
            ("local_device_list", config._local_device_list),
            ("soc_config", config._soc_config),
            ("hccl_timeout", config._hccl_timeout),
            ("op_wait_timeout", config._op_wait_timeout),
            ("op_execute_timeout", config._op_execute_timeout),
            ("HCCL_algorithm", config._HCCL_algorithm),
            ("customize_dtypes", config._customize_dtypes),
            ("op_debug_config", config._op_debug_config),
            ("topo_sorting_mode", config.topo_sorting_mode),
            ("insert_op_file", config.insert_op_file),
            ("session_device_id", config._session_device_id),
            ("modify_mixlist", config._modify_mixlist),
            ("op_precision_mode", config._op_precision_mode),
            ("variable_format_optimize", config.variable_format_optimize),
            ("stream_max_parallel_num", config._stream_max_parallel_num),
            ("op_select_implmode", config._op_select_implmode),
            ("optypelist_for_implmode", config._optypelist_for_implmode),
            ("ac_parallel_enable", config._ac_parallel_enable),
            ("quant_dumpable", config._quant_dumpable),
            ("compile_dynamic_mode", config._compile_dynamic_mode),
            ("aicore_num", config._aicore_num),
            ("auto_multistream_parallel_mode", config._auto_multistream_parallel_mode),
            ("optimization_switch", config._optimization_switch)):
        _set_if(options, key, value)
    _profiling_options(config, options)
    _memory_options(config, options)
    _precision_options(config, options)
    _dump_options(config, options)
    _ps_mode_options(options)
    _dynamic_input_options(config, options)
    _aoe_options(config, options)
    _experimental_options(config, options)
    return dict(sorted(options.items()))


def npu_run_config_to_config_proto(config):
    """The session ``ConfigProto`` NPUEstimator uses for ``config``.

    A copy of ``config.session_config`` (or a new one) whose ``rewrite_options.optimizers``
    gets :data:`GRAPPLER_OPTIMIZERS` appended and whose ``NpuOptimizer`` entry carries
    :func:`npu_run_config_options`, validated by :class:`npu_adapter.NpuConfig` (invalid values
    raise :class:`~npu_adapter.errors.NpuConfigError`). ``config.session_config`` is not
    modified.
    """
    options = npu_run_config_options(config)
    base = config_pb2.ConfigProto()
    if config.session_config is not None:
        base.CopyFrom(config.session_config)
    base.graph_options.rewrite_options.optimizers.extend(GRAPPLER_OPTIMIZERS)
    return NpuConfig.from_dict(options).to_config_proto(base)


# --------------------------------------------------------------------------------------------
# Session decoration (the original patches tf.Session.__init__ with these)


def apply_npu_session_defaults(tf_config):
    """Give ``tf_config`` (a ``ConfigProto``, modified in place and returned) the settings every
    NPU session has: an ``NpuOptimizer`` entry (when added, memory optimisation is turned OFF
    too), ``allow_soft_placement`` True, ``log_device_placement`` False, remapping OFF and
    ``global_jit_level`` OFF. ``TypeError`` for anything but a ``ConfigProto``."""
    if not isinstance(tf_config, config_pb2.ConfigProto):
        raise TypeError(f"config must be a tf.compat.v1.ConfigProto, got "
                        f"{type(tf_config).__name__}")
    rewrite = tf_config.graph_options.rewrite_options
    if not any(opt.name == NPU_OPTIMIZER_NAME for opt in rewrite.custom_optimizers):
        rewrite.custom_optimizers.add().name = NPU_OPTIMIZER_NAME
        rewrite.memory_optimization = RewriterConfig.OFF
    tf_config.allow_soft_placement = True
    tf_config.log_device_placement = False
    rewrite.remapping = RewriterConfig.OFF
    tf_config.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return tf_config


def set_npu_default_config(func, args, kwargs):
    """Give the ``config`` argument of a session constructor call an ``NpuOptimizer`` entry.

    ``func`` is the wrapped ``__init__``; ``config`` may be positional or a keyword. Without an
    ``NpuOptimizer`` entry one is added (see :func:`apply_npu_session_defaults`). Returns
    ``(args, kwargs)`` with ``config`` moved to ``kwargs``.
    """
    names = list(signature(func).parameters)
    config_index = names.index("config") - 1 if "config" in names else None
    args = list(args)
    if kwargs.get("config") is not None:
        tf_config = kwargs["config"]
    elif config_index is not None and len(args) > config_index \
            and args[config_index] is not None:
        tf_config = args[config_index]
    else:
        tf_config = config_pb2.ConfigProto()
    if config_index is not None and len(args) > config_index:
        del args[config_index]
    kwargs["config"] = apply_npu_session_defaults(tf_config)
    return tuple(args), kwargs


def decorator_tf_session(func):
    """Wrap a session ``__init__`` so that its config goes through
    :func:`set_npu_default_config`. Not applied by npu_bridge: the NPU session
    (:func:`npu_adapter.install`) handles configs without an ``NpuOptimizer`` entry as plain
    TensorFlow sessions instead."""

    def class_func_wrapper(self, *args, **kwargs):
        args, kwargs = set_npu_default_config(func, args, kwargs)
        return func(self, *args, **kwargs)

    class_func_wrapper.__wrapped__ = func
    return class_func_wrapper
