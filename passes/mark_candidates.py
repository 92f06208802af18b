"""``mark_candidates``: decide, for every node, whether it may go to the device.

Input: any GraphDef. Output: the same graph with every node annotated
``_npu_adapter_placement = "npu:<reason>"`` (a candidate for a cluster) or ``"host:<reason>"``.
Nothing else changes. Skipped (output = input) when the graph is gated (no ``NpuOptimizer``,
``use_off_line`` false, ``_NoNeedOptimize``, job ps/default, already rewritten).

Rules, in the original's order:

1. ``OutfeedDequeueOp`` anywhere → nothing is a candidate (host-call graph). ``MakeIterator`` with
   an ``Iterator``/``IteratorV2`` → nothing (iterator initialisation graph).
2. Per node: the support predicate (:class:`passes._rules.SupportOracle`: op list, gray ops in mix
   mode, ``_without_npu_compile``, library functions, the backend's exclusions); a Const becomes a
   candidate only through a control input from a supported node or, at the end, by feeding a
   candidate; mix mode refuses resource inputs not produced by a ``VarHandleOp``;
   ``variable_placement="Host"`` keeps variables on the host (with ``Device``, the default,
   variables, their reads and their updates are candidates like any op); with
   ``enable_data_pre_proc`` an ``Iterator``→``IteratorGetNext`` pair is a candidate.
3. Infection (:func:`passes._rules.infect`): ref, resource and variant edges never cross the
   boundary; string edges only when ``iterations_per_loop == 1``.
4. v1 while frames and cond regions stay wholly on one side (:func:`apply_group_rules`).
5. ``AddRelationalConst``: Consts follow their device consumers.
"""

from tensorflow.core.framework import types_pb2

from npu_adapter.graph.types import REF_OFFSET, base_type, may_have_dtype, rules_out_dtypes
from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.pipeline.registry import register_pass

from . import _rules
from ._common import write_placements

__all__ = ["MarkCandidatesPass"]

_ITERATOR_OPS = ("Iterator", "IteratorV2")
_VARIABLE_OPS = ("Variable", "VariableV2", "VarHandleOp")
# The op types enable_data_pre_proc decides by their neighbours (see _dp_candidate).
_DP_OPS = frozenset({"AdpGetNext", "IteratorGetNext", *_ITERATOR_OPS})
# A resource argument, plain or (in a malformed graph) as a ref.
_RESOURCE_TYPES = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_RESOURCE + REF_OFFSET})


def _graph_level_reason(view):
    ops = set(view.ops)
    if "OutfeedDequeueOp" in ops:
        return "outfeed_graph"
    if any("MakeIterator" in op for op in ops) and ops.intersection(_ITERATOR_OPS):
        return "dataset_init_graph"
    return None


def _unsupported_resource(view, i):
    """Mix-mode rule: the first resource input must come from a VarHandleOp, and only a
    VarHandleOp may output a resource."""
    ops = view.ops
    if ops[i] not in view.functions and not may_have_dtype(view.node_at(i), _RESOURCE_TYPES):
        return False  # most ops: their attrs rule a resource out without expanding the types
    in_types = view.input_types(i) or ()
    for slot, t in enumerate(in_types):
        if base_type(t) == types_pb2.DT_RESOURCE:
            if slot >= len(view.data_inputs[i]):
                break
            src = view.data_inputs[i][slot][0]
            if src < 0 or ops[src] != "VarHandleOp":
                return True
            break
    out_types = view.output_types(i) or ()
    return ops[i] != "VarHandleOp" and types_pb2.DT_RESOURCE in out_types


def _dp_candidate(view, i):
    """enable_dp special case: an Iterator(V2) → IteratorGetNext pair, and AdpGetNext."""
    node = view.node_at(i)
    if node.op == "AdpGetNext":
        return True
    if node.op == "IteratorGetNext":
        src = view.data_inputs[i][0][0] if view.data_inputs[i] else -1
        return src >= 0 and view.ops[src] in _ITERATOR_OPS
    if node.op in _ITERATOR_OPS:
        return any(view.ops[d] == "IteratorGetNext" for d, _, _ in view.data_outputs[i])
    return None


def compute_candidates(view, ctx):
    """Candidate flags and reasons for every node of ``view`` (the default path).

    Returns ``(candidate, reasons, skipped)``; ``skipped`` holds nodes that reference
    unsupported functions (they neither become candidates nor infect their neighbours).
    """
    config = ctx.config
    n = len(view)
    candidate = [False] * n
    reasons = {}
    skipped = set()
    graph_reason = _graph_level_reason(view)
    if graph_reason is not None:
        return candidate, dict.fromkeys(range(n), graph_reason), skipped

    mix = bool(config.mix_compile_mode)
    iterations_per_loop = int(config.iterations_per_loop)
    enable_dp = bool(config.enable_data_pre_proc)
    variables_on_host = config.variable_placement == "Host"
    oracle = _rules.SupportOracle(view, ctx.op_support, ctx.backend,
                                  mix_compile_mode=mix)
    functions = view.functions
    # The outcome for the op types whose every node gets the same one (most of them): found at
    # the first node of the type, then copied (the loop runs once per node).
    by_type = {}
    same_for_type = set()
    for op in view.op_types():
        if op in _rules.CONST_OPS or (enable_dp and op in _DP_OPS) or \
                not oracle.decided_by_type(op):
            continue
        # (The mix-mode resource rule reads the node's inputs, unless the OpDef rules it out.)
        if mix and not rules_out_dtypes(op, _RESOURCE_TYPES):
            continue
        same_for_type.add(op)
    for i, op in enumerate(view.ops):
        known = by_type.get(op)
        if known is not None:
            candidate[i] = known[0]
            if not known[0]:
                reasons[i] = known[1]
            continue
        if op in _rules.CONST_OPS:
            ok, reason = oracle.node_support(i, support_const=True)
            if ok and any(src >= 0 and oracle.node_support(src)[0]
                          for src in view.control_inputs[i]):
                candidate[i] = True
                reasons[i] = "const_follows_consumer"
            else:
                reasons[i] = reason if not ok else "const_not_supported_here"
            continue
        if enable_dp:
            dp = _dp_candidate(view, i)
            if dp is not None:
                candidate[i] = dp
                reasons[i] = "supported" if dp else "unsupported_op"
                if not dp:
                    skipped.add(i)  # neither candidate nor host member
                continue
        ok, reason = oracle.node_support(i)
        if reason == "function_not_supported":
            skipped.add(i)
            reasons[i] = reason
            continue
        if ok and variables_on_host and op in _VARIABLE_OPS:
            ok, reason = False, "variable_placement_host"
        # (Most op types rule a resource out by their OpDef: no call, no attr read.)
        if ok and mix and (op in functions or not rules_out_dtypes(op, _RESOURCE_TYPES)) \
                and _unsupported_resource(view, i):
            ok, reason = False, "unsupported_resource"
        candidate[i] = ok
        if not ok:
            reasons[i] = reason
        if op in same_for_type:
            by_type[op] = (ok, reason)

    seeds = [i for i in range(n) if not candidate[i] and i not in skipped]
    _rules.infect(view, candidate, reasons, seeds,
                  iterations_per_loop=iterations_per_loop, enable_dp=enable_dp)
    _rules.apply_group_rules(view, candidate, reasons, _rules.while_frames(view),
                             _rules.cond_regions(view), iterations_per_loop=iterations_per_loop,
                             enable_dp=enable_dp)
    _rules.add_relational_consts(view, candidate, reasons, skipped)
    for i in range(n):
        if candidate[i] and i not in reasons:
            reasons[i] = "supported"
    return candidate, reasons, skipped


@register_pass
class MarkCandidatesPass(PassBase):
    """Annotate every node with its device/host placement and the reason for it."""

    name = "mark_candidates"
    gated = True

    def run(self, graph_def, ctx, view):
        candidate, reasons, _ = compute_candidates(view, ctx)
        out, modified = write_placements(graph_def, candidate, reasons)
        return PassResult(out, modified, {
            "candidates": sum(candidate),
            "host": len(candidate) - sum(candidate),
        }, view.rebind(out) if modified else None)
