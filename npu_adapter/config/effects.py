"""What each option does in npu-adapter, as opposed to the original adapter.

Every ``NpuOptimizer`` option is accepted (the original's scripts must run unchanged), but not
every option can mean something without Ascend hardware. Each option has one effect class:

* ``runs``: changes what npu-adapter does on every backend, the CPU reference included
  (partitioning, gears, loop sinking, dumps, profiling, caches, ...);
* ``emulated``: the CPU reference reproduces the device's behaviour when asked to
  (precision modes, with ``npu_adapter_emulate_precision``);
* ``cann``: passed on to CANN by the ``cann`` backend (an ATC flag or a pyACL setting); no effect
  on the CPU reference or XLA;
* ``compat``: accepted for compatibility only: validated as the original validates it, then
  ignored, because it tunes GE's own runtime (memory, streams, HCCL, AOE tuning) which no backend
  here has. The README lists these options.

:data:`EFFECTS` maps every option to ``(class, note)``; ``npu-adapter options`` shows both.
"""

__all__ = ["EFFECT_CLASSES", "EFFECTS", "effect_of"]

EFFECT_CLASSES = {
    "runs": "has an effect here, on every backend",
    "emulated": "emulated on the CPU reference (npu_adapter_emulate_precision)",
    "cann": "passed to CANN by the cann backend only",
    "compat": "accepted for compatibility only (validated, then ignored)",
}

_R, _E, _C, _X = "runs", "emulated", "cann", "compat"

EFFECTS = {
    # partition control
    "use_off_line": (_R, "false: the graph is not rewritten"),
    "mix_compile_mode": (_R, "mixed computing: several clusters, unsupported ops on the host"),
    "iterations_per_loop": (_R, "loop sinking: one run of the train op runs N steps"),
    "enable_data_pre_proc": (_R, "GetNext joins the cluster when the backend owns state"),
    "job": (_R, "ps/default leave the graph alone"),
    "task_index": (_X, "only names the device string of the original"),
    "lower_functional_ops": (_X, "functional control flow is never lowered here"),
    "in_out_pair": (_R, "regions to offload or keep on the host"),
    "in_out_pair_flag": (_R, "offload (true) or keep (false) the in_out_pair region"),
    "variable_placement": (_R, "variables in the cluster (Device) or on the host (Host)"),
    "frozen_variable": (_X, "variables are not folded into constants"),
    "const_input": (_X, "GE's input-to-Const conversion"),
    "local_rank_id": (_X, "device data-preprocessing queues"),
    "local_device_list": (_X, "device data-preprocessing queues"),
    "graph_max_parallel_model_num": (_X, "GE parallel model instances"),
    # dynamic shape
    "dynamic_input": (_R, "shape-range execution or lazy recompile"),
    "dynamic_graph_execute_mode": (_R, "dynamic_execute or lazy_recompile"),
    "dynamic_inputs_shape_range": (_R, "routed into the cluster attributes"),
    "input_shape": (_R, "gears"),
    "dynamic_dims": (_R, "gears"),
    "dynamic_node_type": (_R, "gears"),
    "compile_hybrid_mode": (_X, "GE hybrid compilation of gear graphs"),
    "compile_dynamic_mode": (_X, "GE shape generalisation"),
    "shape_generalization_mode": (_X, "GE shape generalisation"),
    "jit_compile": (_X, "GE online compilation"),
    "ac_parallel_enable": (_X, "AI CPU / AI Core parallelism"),
    "all_tensor_not_empty": (_X, "GE memory planning"),
    # precision / operator selection
    "precision_mode": (_E, "dtype of each device op (precision pass); ATC --precision_mode"),
    "precision_mode_v2": (_E, "dtype of each device op (precision pass); ATC "
                              "--precision_mode_v2 (HiFloat8 modes cannot be emulated)"),
    "modify_mixlist": (_E, "white/black/gray list edits (precision pass); ATC --modify_mixlist"),
    "op_precision_mode": (_C, "high-precision / high-performance kernels: ATC "
                              "--op_precision_mode (kernel choice, not dtype: not emulated)"),
    "op_select_implmode": (_C, "ATC --op_select_implmode"),
    "optypelist_for_implmode": (_C, "ATC --optypelist_for_implmode"),
    "customize_dtypes": (_E, "per-op dtypes (precision pass); ATC --customize_dtypes"),
    "fusion_switch_file": (_C, "ATC --fusion_switch_file"),
    "enable_scope_fusion_passes": (_C, "ATC --enable_scope_fusion_passes"),
    "buffer_optimize": (_C, "ATC --buffer_optimize"),
    "enable_small_channel": (_C, "ATC --enable_small_channel"),
    "enable_compress_weight": (_X, "weight compression is not passed to ATC"),
    "compress_weight_conf": (_X, "weight compression is not passed to ATC"),
    "deterministic": (_C, "ATC --deterministic"),
    "oo_level": (_C, "ATC --oo_level"),
    "oo_constant_folding": (_X, "GE constant folding switch"),
    "optimization_switch": (_X, "GE pass switches"),
    "topo_sorting_mode": (_X, "GE topological sorting"),
    "insert_op_file": (_C, "ATC --insert_op_conf (AIPP)"),
    "auto_multistream_parallel_mode": (_X, "GE multi-stream parallelism"),
    "aicore_num": (_C, "ATC --aicore_num"),
    "auto_tune_mode": (_X, "legacy auto tuning"),
    # memory / runtime
    "graph_run_mode": (_X, "GE training/inference mode"),
    "hcom_parallel": (_X, "HCCL overlap"),
    "hcom_multi_mode": (_X, "HCCL multi mode"),
    "graph_memory_max_size": (_X, "deprecated in the original"),
    "variable_memory_max_size": (_X, "deprecated in the original"),
    "variable_format_optimize": (_X, "deprecated in the original"),
    "stream_max_parallel_num": (_X, "GE engine parallelism"),
    "is_tailing_optimization": (_X, "HCCL tailing optimisation"),
    "atomic_clean_policy": (_C, "ATC --atomic_clean_policy"),
    "static_memory_policy": (_X, "GE memory policy"),
    "memory_optimization_policy": (_X, "GE memory policy"),
    "variable_use_1g_huge_page": (_X, "device huge pages"),
    "external_weight": (_C, "ATC --external_weight"),
    "input_fusion_size": (_X, "GE input fusion"),
    "input_batch_cpy": (_X, "GE input copies"),
    "session_device_id": (_C, "the device pyACL opens"),
    "hccl_timeout": (_X, "HCCL execution timeout"),
    "op_wait_timeout": (_X, "GE op wait timeout"),
    "op_execute_timeout": (_X, "GE op execution timeout"),
    "HCCL_algorithm": (_X, "HCCL algorithm"),
    "graph_exec_timeout": (_X, "GE graph execution timeout"),
    "stream_sync_timeout": (_X, "GE stream synchronisation"),
    "event_sync_timeout": (_X, "GE event synchronisation"),
    "device_type": (_X, "GE device type"),
    "soc_config": (_C, "ATC --soc_version"),
    "resource_config_path": (_X, "GE resources"),
    "graph_parallel_option_path": (_X, "GE graph parallelism"),
    "enable_graph_parallel": (_X, "GE graph parallelism"),
    "graph_compiler_cache_dir": (_R, "cache of compiled clusters"),
    "graph_slice": (_X, "GE graph slicing"),
    "export_compile_stat": (_C, "ATC --export_compile_stat"),
    "experimental_logical_device_cluster_deploy_mode": (_X, "logical devices"),
    "experimental_logical_device_id": (_X, "logical devices"),
    "experimental_model_deploy_mode": (_X, "model deployment"),
    "experimental_model_deploy_devicelist": (_X, "model deployment"),
    "experimental_accelerate_train_mode": (_E, "low-precision first phase of training "
                                               "(npu_adapter.precision.accelerate)"),
    # debug / dump / profiling / tuning
    "enable_dump": (_R, "data dump of every cluster op in Ascend's format (docs/data-dump.md)"),
    "enable_dump_debug": (_R, "overflow detection: overflowing ops dumped, first one per step"),
    "dump_path": (_R, "where dumps go"),
    "dump_step": (_R, "steps dumped"),
    "dump_mode": (_R, "inputs, outputs or both"),
    "dump_debug_mode": (_R, "which overflows are dumped"),
    "dump_data": (_R, "tensors or statistics"),
    "dump_layer": (_R, "ops dumped"),
    "quant_dumpable": (_X, "AMCT quantisation dumps"),
    "enable_exception_dump": (_X, "device exception dumps"),
    "op_debug_level": (_C, "ATC --op_debug_level"),
    "op_debug_config": (_C, "ATC --op_debug_config"),
    "debug_dir": (_C, "ATC --debug_dir"),
    "op_compiler_cache_mode": (_C, "ATC --op_compiler_cache_mode"),
    "op_compiler_cache_dir": (_C, "ATC --op_compiler_cache_dir"),
    "profiling_mode": (_R, "per-step Chrome traces, training trace, op summaries "
                             "(docs/profiling.md)"),
    "profiling_options": (_R, "output directory, training trace, fp/bp points; the hardware "
                                "counters are validated only"),
    "aoe_mode": (_X, "AOE tuning"),
    "work_path": (_X, "AOE working directory"),
    "distribute_config": (_X, "AOE distribution"),
    "aoe_config_file": (_X, "AOE configuration"),
    # written by NPUEstimator, never read by the original
    "enable_reduce_precision": (_X, "never read by the original either"),
    "min_group_size": (_X, "never read by the original either"),
}


def effect_of(name):
    """``(class, note)`` for option ``name``; our own ``npu_adapter_*`` options all run."""
    if name.startswith("npu_adapter_"):
        return EFFECTS.get(name, (_R, "npu-adapter option"))
    return EFFECTS[name]
