"""Process-wide NPU resources (``npu_bridge.estimator.npu.npu_plugin``).

In the original, :func:`npu_resource_init` hands a map of GE initialisation options to the
SWIG module's ``PluginInit`` (one global GE instance for every session of the process),
:func:`npu_resource_shutdown` finalises it and :func:`npu_close` closes the device at exit. Here
the same checks run and the same option map is built, and the map is kept as the process-wide
plugin state (:func:`plugin_state`) that backends may read; on the CPU reference there is no
engine to start. The second ``npu_resource_init`` of a process is ignored until a shutdown, as
in the original; a process whose ``TF_CONFIG`` says it is a parameter server initialises nothing.

The overflow mode (:func:`set_device_sat_mode`, :func:`is_inf_nan_enabled`) is recorded: mode 1
(INF/NaN, IEEE 754 results) is the default and what the CPU reference computes; mode 0
(saturation) is accepted and recorded for device backends, the CPU reference still computes IEEE
results.

The RDMA and device-memory functions (:func:`init_rdma_pool`, :func:`rdma_remote_register`,
:func:`rdma_remote_init`, :func:`get_var_addr_and_size`, :func:`malloc_shared_memory`) check
their arguments as the original does, then raise
:class:`~npu_bridge._device_only.DeviceOnlyError`: they address device memory.
:func:`get_rdma_cache` is an ordinary variable in a memory-type scope and works.
"""

import copy
import json
import os
import threading

import tensorflow as tf

from npu_bridge import _env
from npu_bridge._device_only import DeviceOnlyError
from npu_bridge.estimator.npu import npu_scope, util
from npu_bridge.hccl.manage.api import get_local_rank_size, get_rank_id

__all__ = [
    "PluginState",
    "check_graph_run_mode",
    "get_rdma_cache",
    "get_var_addr_and_size",
    "init_debug_dir",
    "init_op_compiler_cache_dir",
    "init_op_compiler_cache_mode",
    "init_rdma_pool",
    "is_inf_nan_enabled",
    "malloc_shared_memory",
    "npu_close",
    "npu_resource_init",
    "npu_resource_shutdown",
    "plugin_state",
    "rdma_remote_init",
    "rdma_remote_register",
    "set_device_sat_mode",
]

# GE's option keys, as the original's SWIG module exports them.
OP_DEBUG_LEVEL = "ge.opDebugLevel"
OPTION_EXEC_ENABLE_SCOPE_FUSION_PASSES = "ge.exec.enableScopeFusionPasses"
OPTION_EXEC_PROFILING_MODE = "ge.exec.profilingMode"
OPTION_EXEC_PROFILING_OPTIONS = "ge.exec.profilingOptions"
OPTION_GRAPH_RUN_MODE = "ge.graphRunMode"
OPTION_EXEC_HCCL_FLAG = "ge.exec.hcclFlag"
OPTION_EXEC_DEVICE_ID = "ge.exec.deviceId"
OPTION_EXEC_JOB_ID = "ge.exec.jobId"

SAT_MODE_SATURATION = 0
SAT_MODE_INF_NAN = 1


class PluginState:
    """Snapshot of the process-wide plugin state.

    ``initialized``: :func:`npu_resource_init` ran and no shutdown followed; ``init_options``:
    the GE option map it built (``{}`` when not initialised); ``sat_mode``: the overflow mode
    (1 INF/NaN, 0 saturation); ``closed``: :func:`npu_close` ran.
    """

    __slots__ = ("closed", "init_options", "initialized", "sat_mode")

    def __init__(self, initialized, init_options, sat_mode, closed):
        self.initialized = initialized
        self.init_options = init_options
        self.sat_mode = sat_mode
        self.closed = closed

    def __repr__(self):
        return (f"PluginState(initialized={self.initialized}, sat_mode={self.sat_mode}, "
                f"closed={self.closed}, init_options={self.init_options})")


_LOCK = threading.Lock()
_STATE = {"initialized": False, "init_options": {}, "sat_mode": SAT_MODE_INF_NAN,
          "closed": False}


def plugin_state():
    """The current :class:`PluginState` (a copy; changing it changes nothing)."""
    with _LOCK:
        return PluginState(_STATE["initialized"], copy.deepcopy(_STATE["init_options"]),
                           _STATE["sat_mode"], _STATE["closed"])


def init_op_compiler_cache_mode(init, op_compiler_cache_mode):
    """Put ``op_compiler_cache_mode`` into the option map ``init`` (unless None)."""
    if op_compiler_cache_mode is not None:
        init["ge.op_compiler_cache_mode"] = op_compiler_cache_mode


def init_op_compiler_cache_dir(init, op_compiler_cache_dir):
    """Put ``op_compiler_cache_dir`` into the option map ``init`` (unless None)."""
    if op_compiler_cache_dir is not None:
        init["ge.op_compiler_cache_dir"] = op_compiler_cache_dir


def init_debug_dir(init, debug_dir):
    """Put ``debug_dir`` into the option map ``init`` (unless None)."""
    if debug_dir is not None:
        init["ge.debugDir"] = debug_dir


def check_graph_run_mode(graph_run_mode):
    """``ValueError`` when ``graph_run_mode`` is above 1 (0 inference, 1 training)."""
    if graph_run_mode > 1:
        raise ValueError('"graph_run_mode" value must be 0 or 1')


def _bool_text(value):
    return "true" if value is True else "false"


def _build_init_options(graph_run_mode, op_debug_level, enable_profiling, profiling_options,
                        precision_mode, enable_scope_fusion_passes, enable_exception_dump,
                        aoe_mode, work_path, op_compiler_cache_mode, op_compiler_cache_dir,
                        debug_dir, hcom_multi_mode, distribute_config, aoe_config_file,
                        precision_mode_v2, export_compile_stat, aicore_num, oo_constant_folding,
                        input_batch_cpy, oo_level, optimization_switch):
    util.check_nonnegative_integer(graph_run_mode, "graph_run_mode")
    check_graph_run_mode(graph_run_mode)
    util.check_nonnegative_integer(enable_exception_dump, "enable_exception_dump")
    util.check_nonnegative_integer(op_debug_level, "op_debug_level")
    util.check_bool_type(enable_profiling, "enable_profiling")
    init = {
        OPTION_GRAPH_RUN_MODE: str(graph_run_mode),
        OP_DEBUG_LEVEL: str(op_debug_level),
        OPTION_EXEC_PROFILING_MODE: str(util.convert_bool_to_int(enable_profiling)),
    }
    if enable_profiling:
        if profiling_options is None:
            raise ValueError("profiling_options must be set when use profiling")
        init[OPTION_EXEC_PROFILING_OPTIONS] = str(profiling_options)
    if precision_mode is not None:
        init["ge.exec.precision_mode"] = str(precision_mode)
    if precision_mode_v2 is not None:
        init["ge.exec.precision_mode_v2"] = str(precision_mode_v2)
    if enable_scope_fusion_passes is not None:
        init[OPTION_EXEC_ENABLE_SCOPE_FUSION_PASSES] = str(enable_scope_fusion_passes)
    init["ge.exec.enable_exception_dump"] = str(enable_exception_dump)
    if aoe_mode is not None:
        util.check_aoe_mode(aoe_mode)
        init["ge.jobType"] = str(aoe_mode)
        init["ge.tuningPath"] = util.check_path(work_path if work_path is not None else "./")
        if distribute_config is not None:
            init["distribute_config"] = str(distribute_config)
    init_op_compiler_cache_mode(init, op_compiler_cache_mode)
    init_op_compiler_cache_dir(init, op_compiler_cache_dir)
    init_debug_dir(init, debug_dir)
    util.check_bool_type(hcom_multi_mode, "hcom_multi_mode")
    init["ge.hcomMultiMode"] = str(util.convert_bool_to_int(hcom_multi_mode))
    init["ge.aoe_config_file"] = str(aoe_config_file)
    if export_compile_stat is not None:
        init["ge.exportCompileStat"] = str(export_compile_stat)
    if aicore_num is not None:
        init["ge.aicoreNum"] = str(aicore_num)
    if oo_constant_folding is not None:
        util.check_bool_type(oo_constant_folding, "oo_constant_folding")
        init["ge.oo.constantFolding"] = _bool_text(oo_constant_folding)
    if input_batch_cpy is not None:
        util.check_bool_type(input_batch_cpy, "input_batch_cpy")
        init["ge.inputBatchCpy"] = _bool_text(input_batch_cpy)
    if oo_level is not None:
        init["ge.oo.level"] = str(oo_level)
    if optimization_switch is not None:
        init["ge.optimization_switch"] = str(optimization_switch)
    return init


def _task_type():
    """The ``task.type`` of ``TF_CONFIG`` (None when unset or not JSON, as the original
    ignores a malformed value)."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        return None
    task = config.get("task") if isinstance(config, dict) else None
    return task.get("type") if isinstance(task, dict) else None


def npu_resource_init(graph_run_mode=1, op_debug_level=0, enable_profiling=False,
                      profiling_options=None, precision_mode=None,
                      enable_scope_fusion_passes=None, enable_exception_dump=2, aoe_mode=None,
                      work_path=None, op_compiler_cache_mode=None, op_compiler_cache_dir=None,
                      debug_dir=None, hcom_multi_mode=False, distribute_config=None,
                      aoe_config_file=None, precision_mode_v2=None, export_compile_stat=1,
                      aicore_num=None, oo_constant_folding=True, input_batch_cpy=False,
                      oo_level="O3", optimization_switch=None):
    """Initialise the process-wide NPU resources with these GE options.

    Checks as the original: ``graph_run_mode`` a non-negative int <= 1, ``op_debug_level`` and
    ``enable_exception_dump`` non-negative ints, ``enable_profiling``/``hcom_multi_mode``/
    ``oo_constant_folding``/``input_batch_cpy`` bools (``TypeError``), ``profiling_options``
    required with profiling, ``aoe_mode`` one of '1', '2', '4' with ``work_path`` (default the
    current directory) an existing read-write directory (``ValueError``). The option map (plus
    the device id from ``DEVICE_ID``, the job id from ``JOB_ID`` and the HCCL flag, 0 for an
    evaluator) becomes :func:`plugin_state`. Already initialised: nothing changes.
    """
    init = _build_init_options(
        graph_run_mode, op_debug_level, enable_profiling, profiling_options, precision_mode,
        enable_scope_fusion_passes, enable_exception_dump, aoe_mode, work_path,
        op_compiler_cache_mode, op_compiler_cache_dir, debug_dir, hcom_multi_mode,
        distribute_config, aoe_config_file, precision_mode_v2, export_compile_stat, aicore_num,
        oo_constant_folding, input_batch_cpy, oo_level, optimization_switch)
    task_type = _task_type()
    if task_type == "ps":
        return  # the original initialises nothing in a parameter-server process
    init[OPTION_EXEC_HCCL_FLAG] = "0" if task_type == "evaluator" else "1"
    init[OPTION_EXEC_DEVICE_ID] = str(_env.device_id())
    job_id = os.environ.get("JOB_ID", "")
    if job_id:
        init[OPTION_EXEC_JOB_ID] = job_id
    with _LOCK:
        if _STATE["initialized"]:
            return
        _STATE["initialized"] = True
        _STATE["init_options"] = init
        _STATE["closed"] = False


def npu_resource_shutdown():
    """Finalise what :func:`npu_resource_init` set up (nothing happens when not initialised)."""
    with _LOCK:
        _STATE["initialized"] = False
        _STATE["init_options"] = {}


def npu_close():
    """Release the NPU at process end (``npu_bridge`` registers it with ``atexit``): finalises
    the plugin state and marks it closed."""
    with _LOCK:
        _STATE["initialized"] = False
        _STATE["init_options"] = {}
        _STATE["closed"] = True


def init_rdma_pool(mem_size):
    """Device only: allocate the RDMA memory pool (``mem_size`` must be an int)."""
    if not isinstance(mem_size, int):
        raise ValueError(f"{mem_size} should be int")
    raise DeviceOnlyError("npu_plugin.init_rdma_pool",
                          "it allocates an RDMA memory pool on the device")


def _check_row(row):
    if not isinstance(row, (tuple, list)) or len(row) < 3 or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in row[:3]):
        raise ValueError(f"remote variable rows must be (rank_id, address, size) integers, "
                         f"got {row!r}")


def _server_id():
    return int(get_rank_id() / get_local_rank_size())


def rdma_remote_register(remote_var_list):
    """Device only: register the device addresses of remote variables for RDMA.

    ``remote_var_list`` must be a tuple or list of per-variable lists of
    ``(rank_id, address, size)`` rows (``ValueError`` otherwise)."""
    if not isinstance(remote_var_list, (tuple, list)):
        raise ValueError(f"{remote_var_list} should be tuple or list")
    _server_id()  # validates the rank environment, as the original reads it here
    for var in remote_var_list:
        for line in var:
            _check_row(line)
    raise DeviceOnlyError("npu_plugin.rdma_remote_register",
                          "it registers device memory addresses with the RDMA engine")


def rdma_remote_init(remote_var_list, mem_size):
    """Device only: allocate the RDMA pool and register remote variables in one call."""
    if not isinstance(remote_var_list, (tuple, list)):
        raise ValueError(f"{remote_var_list} should be tuple or list")
    if not isinstance(mem_size, int):
        raise ValueError(f"{mem_size} should be int")
    server_id = _server_id()
    for var in remote_var_list:
        if not isinstance(var, (tuple, list)) or len(var) <= server_id:
            raise ValueError(f"each entry of remote_var_list must list one (rank_id, address, "
                             f"size) row per server; no row for server {server_id} in {var!r}")
        _check_row(var[server_id])
    raise DeviceOnlyError("npu_plugin.rdma_remote_init",
                          "it allocates an RDMA pool and registers device memory addresses")


def get_var_addr_and_size(var_name):
    """Device only: the device address and size of a variable (``var_name`` must be a str)."""
    if not isinstance(var_name, str):
        raise ValueError(f"{var_name} should be str")
    raise DeviceOnlyError("npu_plugin.get_var_addr_and_size",
                          f"it returns the device memory address of variable {var_name!r}")


def malloc_shared_memory(var_name, shape, data_type):
    """Device only: allocate device memory shared between processes for a variable."""
    if not isinstance(var_name, str):
        raise ValueError(f"{var_name} should be str")
    if not isinstance(shape, (tuple, list)) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise ValueError(f"shape should be a list of int, got {shape!r}")
    raise DeviceOnlyError("npu_plugin.malloc_shared_memory",
                          f"it allocates shared device memory for variable {var_name!r}")


def get_rdma_cache(data_type, shape, name="rdma_w"):
    """A zero-initialised variable ``name`` for RDMA-read rows, created in
    :func:`~npu_bridge.estimator.npu.npu_scope.npu_mem_type_scope` (its ops carry the
    memory-type attribute). Works on any backend."""
    with npu_scope.npu_mem_type_scope():
        return tf.compat.v1.get_variable(name=name, shape=shape, dtype=data_type,
                                         initializer=tf.compat.v1.zeros_initializer())


def set_device_sat_mode(mode):
    """Set the process's floating-point overflow mode: 0 saturation, 1 INF/NaN (IEEE 754).

    ``ValueError`` for anything else. The CPU reference always computes IEEE results; the mode is
    recorded in :func:`plugin_state` for device backends.
    """
    if isinstance(mode, bool) or not isinstance(mode, int) or mode not in (0, 1):
        raise ValueError(f"set_device_sat_mode: mode must be 0 (saturation) or 1 (INF/NaN), "
                         f"got {mode!r}")
    with _LOCK:
        _STATE["sat_mode"] = mode


def is_inf_nan_enabled():
    """True when the overflow mode is INF/NaN (mode 1, the default)."""
    with _LOCK:
        return _STATE["sat_mode"] == SAT_MODE_INF_NAN
