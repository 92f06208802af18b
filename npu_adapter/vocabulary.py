"""The rewrite's vocabulary: node attribute names, op names and placement reason codes.

Every name the passes, the backends, the session and the reports use to talk to each other
through a GraphDef is defined here, once. Two families:

* the original TF Adapter's names (``_subgraphs``, ``_NpuOptimizer``, ``_keep_dtype``,
  ``_graph_dynamic_input``, ...): kept as the original spells them, because user scripts and
  the original's tools put them on nodes and read them back;
* our own bookkeeping, all prefixed ``_npu_adapter_`` (``finalize`` removes the placement
  annotation; cluster nodes keep their boundary attributes, which cost TensorFlow nothing).

Placement annotation: ``_npu_adapter_placement = "<device>:<reason>"`` where device is
:data:`DEVICE_NPU` (candidate for a cluster) or :data:`DEVICE_HOST`, and reason is a stable
snake_case code of :data:`REASON_DESCRIPTIONS`.
"""

# --------------------------------------------------------------------------- the original's
GEOP_OP = "GeOp"
CLUSTER_ATTR = "_subgraphs"            # cluster name of a member node (partition pass)
NPU_OPTIMIZER_ATTR = "_NpuOptimizer"   # marks nodes that carry the session options
NO_NEED_OPTIMIZE_ATTR = "_NoNeedOptimize"
WITHOUT_NPU_COMPILE_ATTR = "_without_npu_compile"
KEEP_DTYPE_ATTR = "_keep_dtype"
OP_MAX_SIZE_ATTR = "_op_max_size"
SUBGRAPH_MULTI_DIMS_INDEX_ATTR = "_subgraph_multi_dims_index"
SUBGRAPH_MULTI_DIMS_SHAPE_ATTR = "_subgraph_multi_dims_input_shape"
SUBGRAPH_MULTI_DIMS_DIMS_ATTR = "_subgraph_multi_dims_input_dims"
# set_graph_exec_config on a fetch (override the session's dynamic options)
GRAPH_DYNAMIC_INPUT_ATTR = "_graph_dynamic_input"
GRAPH_DYNAMIC_MODE_ATTR = "_graph_dynamic_graph_execute_mode"
GRAPH_DYNAMIC_RANGE_ATTR = "_graph_dynamic_inputs_shape_range"
IS_TRAIN_GRAPH_ATTR = "_is_train_graph"
RECOMPUTE_MODE_ATTR = "_recompute_mode"
# graph options stamped on every GeOp
DYNAMIC_INPUT_ATTR = "_dynamic_input"
DYNAMIC_MODE_ATTR = "_dynamic_graph_execute_mode"
LAZY_RECOMPILE = "lazy_recompile"
DYNAMIC_EXECUTE = "dynamic_execute"

# --------------------------------------------------------------------------- ours
PLACEMENT_ATTR = "_npu_adapter_placement"
# On a cluster node: the original tensor names at its boundary, in argument / output order.
CLUSTER_INPUTS_ATTR = "_npu_adapter_inputs"
CLUSTER_OUTPUTS_ATTR = "_npu_adapter_outputs"
# Large Consts a cluster reads from the outer graph (Backend.hoist_constants_bytes): members.
CLUSTER_HOISTED_ATTR = "_npu_adapter_hoisted"
# Gears: one entry per gear, the dynamic inputs' patterns, and the selection policy.
CLUSTER_GEARS_ATTR = "_npu_adapter_gears"
CLUSTER_GEAR_PATTERNS_ATTR = "_npu_adapter_gear_patterns"
GEAR_POLICY_ATTR = "_npu_adapter_gear_policy"
# Attrs naming the function a cluster node calls, before (GeOp) and after lowering.
CLUSTER_FUNCTION_ATTRS = ("function", "f")
# On a lowered cluster node that calls a wrapper (the cann backend's call into its runtime):
# the cluster's own FunctionDef, which lists its members.
CLUSTER_BODY_ATTR = "_npu_adapter_cluster_function"
# Op types a cluster node has: GeOp before lowering, a function call after.
CLUSTER_NODE_OPS = frozenset({GEOP_OP, "StatefulPartitionedCall", "PartitionedCall"})
# Suffix of a cluster function's per-gear copy: ``<cluster>_gear_<k>``.
GEAR_FUNCTION_SUFFIX = "_gear_"
# Marks the Cast nodes the precision emulation inserts
# (``<tensor node>/npu_adapter_cast_<port>_<dtype>``); they are not members of the user's graph.
PRECISION_CAST_MARK = "/npu_adapter_cast_"
# Suffix of a Const copied into a second cluster in mix mode (the original's name).
COPIED_CONST_SUFFIX = "_copied"
# Where a backend runs some cluster members outside the cluster's function (the CPU reference
# keeps state owners and ops on ref edges in the outer graph; see passes/_outside.py):
# on such a member, the reason code (set by ``cluster``, read by ``encapsulate`` and the report);
EXECUTES_ATTR = "_npu_adapter_executes"
# on a variable read through a ref/resource edge by other clusters (mix mode), their names;
COPIED_INTO_ATTR = "_npu_adapter_copied_into"
# on a cluster node, the names of its members that run in the outer graph;
CLUSTER_OUTER_ATTR = "_npu_adapter_outer"
# on a cluster node, the boundary of the cluster as the original builds its GeOp (only when it
# differs from the node's own inputs/outputs because members run outside);
CLUSTER_PLACED_INPUTS_ATTR = "_npu_adapter_placed_inputs"
CLUSTER_PLACED_OUTPUTS_ATTR = "_npu_adapter_placed_outputs"
# on the further function calls of a cluster run in several steps, the cluster's name.
CLUSTER_PART_OF_ATTR = "_npu_adapter_part_of"
# Name of step ``s`` (s >= 1) of cluster ``c``: ``<c>_stage<s>`` (node and function).
STAGE_SUFFIX = "_stage"

DEVICE_NPU = "npu"
DEVICE_HOST = "host"

# Every reason code the passes use, with the sentence the placement report shows for it.
REASON_DESCRIPTIONS = {
    # on the device
    "supported": "op type is in the backend's support list",
    "const_follows_consumer": "Const pulled into the cluster of the device op that consumes it",
    "in_out_pair_region": "inside the in_out_pair region (offloaded because in_out_pair_flag is "
                          "true, or kept on the host because it is false)",
    # on the host: the op itself
    "unsupported_op": "op type is not in the backend's support list",
    "gray_op_in_mix_mode": "op is gray-listed (isGray) and mix_compile_mode is on",
    "without_npu_compile_scope": "created under without_npu_compile_scope",
    "dataset_op": "dataset ops never go into a cluster",
    "arg_retval": "_Arg/_Retval nodes never go into a cluster",
    "string_join": "StringJoin is excluded by the original adapter",
    "const_not_supported_here": "Const with no device consumer reached through a control edge",
    "function_not_supported": "calls or references a function with an unsupported op",
    "state_owner": "owns state (variable, queue, iterator, table) that stays on the host "
                   "(cann backend: the device model cannot hold it)",
    "graph_input": "Placeholder: a graph input fed by the session (the original sees fed "
                   "tensors as _Arg nodes, which never go into a cluster)",
    "string_tensor": "reads or produces a string tensor, which an ATC model cannot take or "
                     "return (cann backend)",
    "v1_control_flow": "TF v1 control flow (Switch/Merge/Enter/Exit/...): ATC converts only "
                       "functional control flow, so the cann backend keeps it on the host",
    "variable_placement_host": "variable_placement is Host",
    "unsupported_resource": "resource input not produced by a VarHandleOp (mix mode)",
    "const_without_device_consumer": "Const that feeds no device op",
    "unknown_dtype": "edge dtypes cannot be inferred (unregistered op)",
    # on the host: because of a neighbour
    "ref_edge": "reference (ref) edge to a host node; ref edges never cross the boundary",
    "resource_edge": "resource edge to a host node; resource edges never cross the boundary",
    "variant_edge": "variant edge to a host node; variant edges never cross the boundary",
    "string_edge_with_loop_sinking": "string edge to a host node while iterations_per_loop > 1",
    "dead_tensor_edge": "part of a v1 cond (Switch/Merge) region that also has host nodes",
    "host_while_frame": "in a v1 while loop that also has host nodes (loops are never split)",
    "in_out_pair_excluded": "outside the in_out_pair region (in_out_pair_flag is true)",
    # on the host: clustering decisions
    "not_in_largest_cluster": "full-offload mode keeps only the largest mergeable cluster",
    "singleton_noop_identity": "lone NoOp/Identity: the largest cluster has a single node",
    "below_min_cluster_size": "cluster smaller than npu_adapter_min_cluster_size",
    "max_clusters_exceeded": "beyond npu_adapter_max_clusters (smallest clusters dropped)",
    # where a device node executes on this backend, when not inside its cluster's function
    "ref_edge_cpu_reference": "reads or writes a ref tensor (TF1 VariableV2 and the ops on its "
                              "ref edges): a TF function cannot hold one, so the CPU reference "
                              "runs it in the outer graph and passes values in and out",
    "resource_handle_cpu_reference": "creates a resource (variable, queue, table) the session "
                                     "owns: the CPU reference runs it in the outer graph and "
                                     "passes the handle to the cluster function as an argument",
    "ref_control_flow_cpu_reference": "in a v1 while loop or cond with a ref op that runs in the "
                                      "outer graph on the CPU reference: the loop or cond runs "
                                      "there with it (a function cannot hold part of one)",
    # graph-level
    "outfeed_graph": "graph contains OutfeedDequeueOp (host-call graph): left untouched",
    "dataset_init_graph": "iterator initialisation graph (MakeIterator + Iterator): untouched",
    "not_rewritten": "the graph was not rewritten (see the rewrite's skip reason)",
}

REASON_SUPPORTED = "supported"
REASON_UNSUPPORTED_OP = "unsupported_op"
REASON_GRAY_OP_IN_MIX_MODE = "gray_op_in_mix_mode"
REASON_WITHOUT_NPU_COMPILE_SCOPE = "without_npu_compile_scope"
REASON_DATASET_OP = "dataset_op"
REASON_CONST_NOT_SUPPORTED_HERE = "const_not_supported_here"
REASON_ARG_RETVAL = "arg_retval"
REASON_STRING_JOIN = "string_join"

# Why an op computes in the dtype the precision emulation gives it (``precision`` pass).
PRECISION_REASON_DESCRIPTIONS = {
    "mode_force_low": "force_fp16 / fp16: every float32 op computes in the low-precision dtype",
    "mode_origin": "must_keep_origin_dtype / origin: the op keeps the graph's dtype",
    "already_low": "already in float16 / bfloat16 in the graph: kept",
    "cube_low": "matrix op: computes in the low-precision dtype (allow_fp32_to_fp16 / _bf16)",
    "vector_keeps_fp32": "vector op with a float32 kernel keeps float32 (allow_fp32_to_fp16)",
    "no_fp32_kernel": "the device has no float32 kernel for it: low precision",
    "cube_fp16in_fp32out": "matrix op: float16 inputs, float32 result (force_fp32 / "
                           "cube_fp16in_fp32out)",
    "force_fp32": "vector op in float32 (force_fp32 / cube_fp16in_fp32out)",
    "white_list": "white list (precision_reduce true): low precision in mixed mode",
    "black_list": "black list (precision_reduce false): keeps float32 in mixed mode",
    "gray_follows_low": "gray list: an input arrives in low precision, so the op follows it",
    "gray_keeps": "gray list: no input arrives in low precision, so the op keeps float32",
    "customize_dtypes": "a customize_dtypes line sets its dtypes",
    "keep_dtype": "_keep_dtype (keep_dtype_scope / keep_tensors_dtypes): original dtype",
    "scalar_kept": "scalar arithmetic (loss scale, learning rate, counters) keeps float32",
    "follows_input": "moves or selects values only: computes in the dtype its input arrives in",
    "not_reducible": "never retyped (Cast, constant, control flow, stateful or resource op, "
                     "function call)",
}
REASON_GRAPH_INPUT = "graph_input"
REASON_STATE_OWNER = "state_owner"
REASON_V1_CONTROL_FLOW = "v1_control_flow"
REASON_STRING_TENSOR = "string_tensor"

# ---- the NPU system ops of npu_bridge (initialize_system / shutdown_system)
NPU_SYSTEM_OP_ATTR = "_npu_adapter_op"
"""String attribute on the ``NoOp`` standing for ``NPUInit`` / ``NPUShutdown`` (its value)."""

# --------------------------------------------------------------------------- xla backend
# On a lowered cluster node of the xla backend: "xla" (compiled by XLA) or "fallback" (runs on
# the CPU reference), and for a fallback the reason code and the sentence saying why.
XLA_STATUS_ATTR = "_npu_adapter_xla_status"
XLA_REASON_ATTR = "_npu_adapter_xla_reason"
XLA_DETAIL_ATTR = "_npu_adapter_xla_detail"
XLA_STATUS_COMPILED = "xla"
XLA_STATUS_FALLBACK = "fallback"
# On a compiled cluster's call node: the name of the cluster's function as TensorFlow's kernels
# run it (the call node itself calls the form XLA compiles); the runtime switches a cluster to it
# when TensorFlow's kernels are measured faster.
XLA_TF_FUNCTION_ATTR = "_npu_adapter_xla_tf_function"
# TensorFlow's attr on a function call node that makes XLA compile the call.
XLA_MUST_COMPILE_ATTR = "_XlaMustCompile"
XLA_FALLBACK_REASONS = {
    "xla_no_kernel": "an op has no XLA kernel for the CPU JIT",
    "xla_dtype": "an op has an XLA kernel, but not for the dtype it uses here",
    "xla_value_dependent_shape": "an op's output shape depends on input values",
    "xla_unsupported_tensor": "an op reads or produces string or variant tensors, or resources "
                              "other than variables",
    "xla_random": "an op draws random numbers (XLA draws other numbers than TensorFlow for the "
                  "same seed)",
    "xla_unknown_function": "a function the cluster calls is not in the graph's library",
}
