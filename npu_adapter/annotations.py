"""Node attributes through which the rewrite passes hand state to each other.

The original TF Adapter passes communicate through node attributes (``_subgraphs`` names the
cluster of a node, ``_NpuOptimizer`` marks nodes carrying options); we do the same, so each pass
is a pure function of its GraphDef and can run on its own. Our own attributes use the
``_npu_adapter_`` prefix and are removed by the ``finalize`` pass, so a rewritten graph's host
nodes are byte-identical to the user's.

Placement annotation: ``_npu_adapter_placement`` = ``"<device>:<reason>"`` where device is ``npu``
(candidate for a cluster) or ``host`` and reason is a stable snake_case code (see
:data:`REASON_DESCRIPTIONS`).
"""

__all__ = [
    "PLACEMENT_ATTR",
    "CLUSTER_ATTR",
    "NPU_OPTIMIZER_ATTR",
    "NO_NEED_OPTIMIZE_ATTR",
    "WITHOUT_NPU_COMPILE_ATTR",
    "GEOP_OP",
    "DEVICE_NPU",
    "DEVICE_HOST",
    "REASON_DESCRIPTIONS",
    "get_placement",
    "set_placement",
    "is_candidate",
    "strip_annotations",
]

PLACEMENT_ATTR = "_npu_adapter_placement"
CLUSTER_ATTR = "_subgraphs"  # name of the original's attribute
NPU_OPTIMIZER_ATTR = "_NpuOptimizer"
NO_NEED_OPTIMIZE_ATTR = "_NoNeedOptimize"
WITHOUT_NPU_COMPILE_ATTR = "_without_npu_compile"
GEOP_OP = "GeOp"
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
    "function_not_supported": "calls or references a function with an unsupported op",
    "state_owner": "owns state (variable, queue, iterator, table) that stays with the session",
    "graph_input": "Placeholder: a graph input fed by the session",
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
    # graph-level
    "outfeed_graph": "graph contains OutfeedDequeueOp (host-call graph): left untouched",
    "dataset_init_graph": "iterator initialisation graph (MakeIterator + Iterator): untouched",
    "not_rewritten": "the graph was not rewritten (see the rewrite's skip reason)",
}


def get_placement(node):
    """``(device, reason)`` from a node's placement annotation, or None when absent."""
    value = node.attr.get(PLACEMENT_ATTR)
    if value is None:
        return None
    device, _, reason = value.s.decode().partition(":")
    return device, reason


def set_placement(node, device, reason):
    """Write the placement annotation on ``node`` (a NodeDef owned by the caller)."""
    node.attr[PLACEMENT_ATTR].s = f"{device}:{reason}".encode()


def is_candidate(node):
    """True when the node is annotated as a device candidate."""
    value = node.attr.get(PLACEMENT_ATTR)
    return value is not None and value.s.startswith(b"npu:")


def strip_annotations(node_defs):
    """Remove our ``_npu_adapter_placement`` annotation from ``node_defs`` (edited in place)."""
    for node in node_defs:
        if PLACEMENT_ATTR in node.attr:
            del node.attr[PLACEMENT_ATTR]
