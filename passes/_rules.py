"""Candidate rules shared by ``mark_candidates``, ``in_out_pair`` and ``cluster``.

This module holds the parts of the original ``FindNpuSupportCandidates`` that are
not a pass on their own:

* :class:`SupportOracle` — ``IsNpuSupportingNode``: the op list (gray ops count as unsupported in
  mix mode), ``_without_npu_compile``, library functions that are wholly supported, func-valued
  attrs, and the backend's own exclusions (graph inputs on the CPU reference).
* :func:`infect` — the worklist that keeps ref, resource and variant edges (and string edges with
  loop sinking) from crossing the host/device boundary.
* :func:`while_frames` / :func:`cond_regions` — TF1 control-flow structure. A v1 while loop and the
  nodes between a ``Switch`` and its ``Merge`` may never be split across the boundary: frames need
  their ``Enter``/``Exit`` together and a dead tensor cannot leave a function. The original applies
  the frame rule in mix mode only; we apply both rules in every mode because the CPU reference runs
  clusters as TF functions (documented deviation).

Everything works on node indices of a :class:`~npu_adapter.graph.GraphView` and is linear in
nodes + edges (each node is pushed on a worklist at most once per rule round).
"""

import collections

from tensorflow.core.framework import types_pb2

from npu_adapter.graph.types import (
    REF_OFFSET,
    base_type,
    has_ref_inputs,
    is_ref_type,
    may_reference_functions,
    op_def_for,
    rules_out_dtypes,
)
from npu_adapter.graph.view import LOOP_BACK_EDGE_OPS
from npu_adapter.op_support import is_op_supported
from npu_adapter.pipeline.graph_config import node_settings
from npu_adapter.vocabulary import WITHOUT_NPU_COMPILE_ATTR

__all__ = [
    "SupportOracle",
    "infect",
    "while_frames",
    "cond_regions",
    "apply_group_rules",
    "add_relational_consts",
    "CONST_OPS",
]

CONST_OPS = frozenset({"Const", "HostConst"})
_STRING = types_pb2.DT_STRING
_RESOURCE = types_pb2.DT_RESOURCE
_VARIANT = types_pb2.DT_VARIANT
_CROSS_RULE_REASON = {
    _RESOURCE: "resource_edge",
    _VARIANT: "variant_edge",
    _STRING: "string_edge_with_loop_sinking",
}
# The dtypes of an edge that may not cross (besides any ref).
_CROSSING_TYPES = frozenset(list(_CROSS_RULE_REASON) + [t + REF_OFFSET for t in _CROSS_RULE_REASON])
_VARIABLE_OPS = frozenset({"Variable", "VariableV2", "VarHandleOp"})
_ITERATOR_OPS = frozenset({"Iterator", "IteratorV2"})
_GETNEXT_OPS = frozenset({"IteratorGetNext", "GetNext"})
ENTER_OPS = frozenset({"Enter", "RefEnter"})
EXIT_OPS = frozenset({"Exit", "RefExit"})


def _func_names(node):
    if not may_reference_functions(node.op):
        return
    for key in sorted(node.attr):
        value = node.attr[key]
        if value.HasField("func"):
            yield value.func.name
        elif value.HasField("list"):
            for f in value.list.func:
                yield f.name


class SupportOracle:
    """Answers "may this node go to the device?" for one graph (``IsNpuSupportingNode``)."""

    def __init__(self, view, op_list, backend, *, mix_compile_mode):
        self.view = view
        self.op_list = op_list
        self.backend = backend
        self.mix = bool(mix_compile_mode)
        self._functions = {}
        self._per_op = {}
        self._node_at = view.node_at
        # Whether a node carries _without_npu_compile (else each answer is its op type's).
        self._without_possible = node_settings(view).without_npu_compile

    def function_supported(self, name, _stack=None):
        """True when library function ``name`` holds only supported ops (Consts allowed).

        Functions calling functions are decided callees first with an explicit stack, not by
        recursion: a chain of calls thousands deep must not exhaust Python's stack. A function
        already being decided (a recursive call) counts as supported; its caller decides.
        """
        if name in self._functions:
            return self._functions[name]
        functions = self.view.functions
        if name not in functions:
            return False
        on_stack = set() if _stack is None else _stack
        if name in on_stack:
            return True  # recursion: decided by the outer frame
        on_stack.add(name)
        pending = [(name, iter(self._callees(name)))]
        while pending:
            fname, callees = pending[-1]
            for callee in callees:
                if callee in functions and callee not in self._functions \
                        and callee not in on_stack:
                    on_stack.add(callee)
                    pending.append((callee, iter(self._callees(callee))))
                    break
            else:  # every callee is decided (or on the stack): decide this one
                pending.pop()
                ok = True
                for node in functions[fname].node_def:
                    if not self._node_ok(node, support_const=True, stack=on_stack)[0]:
                        ok = False
                        break
                self._functions[fname] = ok
                on_stack.discard(fname)
        return self._functions[name]

    def _callees(self, name):
        """Names of the library functions the body of ``name`` calls (op or func attr)."""
        functions = self.view.functions
        for node in functions[name].node_def:
            if node.op in functions:
                yield node.op
            yield from _func_names(node)

    def _node_ok(self, node, *, support_const, stack=None):
        without = False
        attr = node.attr.get(WITHOUT_NPU_COMPILE_ATTR)
        if attr is not None:
            without = bool(attr.b) if attr.HasField("b") else attr.s in (b"1", b"true", b"True")
        op = node.op
        cacheable = (not without and self.backend.per_op_node_support
                     and op not in self.view.functions and not may_reference_functions(op))
        if cacheable:
            key = (op, support_const)
            cached = self._per_op.get(key)
            if cached is None:
                cached = self._per_op[key] = self._decide(node, support_const, False, stack)
            return cached
        return self._decide(node, support_const, without, stack)

    def _decide(self, node, support_const, without, stack):
        ok, reason = is_op_supported(node.op, self.op_list, mix_compile_mode=self.mix,
                                     support_const=support_const, without_npu_compile=without)
        if not ok and reason == "unsupported_op" and node.op in self.view.functions:
            ok = self.function_supported(node.op, stack)
            reason = "supported" if ok else "function_not_supported"
        if ok:
            for fname in _func_names(node):
                if not self.function_supported(fname, stack):
                    return False, "function_not_supported"
            ok, reason = self.backend.supports_node(node, op_def_for(node.op))
        return ok, reason

    def decided_by_type(self, op):
        """True when every node of op type ``op`` gets the same answer: no node may carry
        ``_without_npu_compile``, the backend decides per op type, and the op is neither a
        library function nor one that can carry a function attr."""
        return (not self._without_possible and self.backend.per_op_node_support
                and op not in self.view.functions and not may_reference_functions(op))

    def node_support(self, i, *, support_const=False):
        """``(supported, reason)`` for node ``i`` of the view."""
        node = None
        if not self._without_possible or \
                WITHOUT_NPU_COMPILE_ATTR not in (node := self._node_at(i)).attr:
            # The answer already decided for this op type (only ops whose answer depends on
            # the type alone are remembered), without reading the node again.
            cached = self._per_op.get((self.view.ops[i], support_const))
            if cached is not None:
                return cached
        return self._node_ok(node if node is not None else self._node_at(i),
                             support_const=support_const)


def _has_attr(node, key):
    return key in node.attr


def infect(view, candidate, reasons, seeds, *, iterations_per_loop, enable_dp):
    """Move candidates to the host across edges that may not cross the boundary.

    Args:
        view: the GraphView.
        candidate: list of bools per node, updated in place.
        reasons: dict node index → host reason, updated for every node moved to the host.
        seeds: host node indices to start from (nodes that do not infect are left out).
        iterations_per_loop: strings may cross only when it is 1 (no loop sinking).
        enable_dp: enable_data_pre_proc (a string GetNext output may then cross).

    Returns:
        The list of node indices moved to the host, in the order they were moved.
    """
    node_at = view.node_at
    ops = view.ops
    data_out = view.data_outputs
    moved = []
    queue = collections.deque(seeds)
    strings_cross = iterations_per_loop == 1

    def host(i, reason):
        candidate[i] = False
        reasons[i] = reason
        moved.append(i)
        queue.append(i)

    data_in = view.data_inputs
    edge_type = view.edge_type
    functions = view.functions
    # Per op type: no edge into its nodes can be one that may not cross (no ref input, and its
    # OpDef allows none of the crossing dtypes), so its input types need not be worked out.
    plain = {}

    def plain_inputs(op):
        found = plain.get(op)
        if found is None:
            found = plain[op] = op not in functions and not has_ref_inputs(op) \
                and rules_out_dtypes(op, _CROSSING_TYPES)
        return found

    while queue:
        h = queue.popleft()
        # Out-edges: a candidate consumer of a host tensor.
        for d, slot, _ in data_out[h]:
            if not candidate[d] or plain_inputs(ops[d]):
                continue
            t = edge_type(d, slot)
            if t is None:
                continue
            if is_ref_type(t):
                host(d, "ref_edge")
                continue
            b = base_type(t)
            if b in _CROSS_RULE_REASON:
                if (_has_attr(node_at(d), "_op_max_size") or ops[d] == "Assert"
                        or ops[h] in CONST_OPS or (strings_cross and b == _STRING)):
                    continue
                host(d, _CROSS_RULE_REASON[b])
        # In-edges: a candidate producer of a tensor the host node reads.
        if plain_inputs(ops[h]):
            continue
        in_types = None
        for slot, (s, _) in enumerate(data_in[h]):
            if s < 0 or not candidate[s]:
                continue
            if in_types is None:
                in_types = view.input_types(h) or ()
            t = in_types[slot] if slot < len(in_types) else view.source_type(h, slot)
            if t is None:
                continue
            if is_ref_type(t):
                host(s, "ref_edge")
                continue
            b = base_type(t)
            if b in _CROSS_RULE_REASON:
                if _has_attr(node_at(h), "_op_max_size") or (strings_cross and b == _STRING):
                    continue
                if enable_dp and b == _STRING and ops[s] in _GETNEXT_OPS:
                    continue
                host(s, _CROSS_RULE_REASON[b])
    return moved


# --------------------------------------------------------------------------- control flow v1
def while_frames(view):
    """Frames of TF1 while loops (cached in the view).

    Returns:
        ``(frame_of, parent, members)``: ``frame_of[i]`` is the frame id of node ``i`` (0 = root),
        ``parent[f]`` the parent frame of ``f``, ``members[f]`` the node indices of frame ``f``
        (root excluded). Empty when the graph has no ``Enter`` node.
    """
    cached = view.cache.get("while_frames")
    if cached is None:
        cached = view.cache["while_frames"] = _compute_while_frames(view)
    return cached


def _compute_while_frames(view):
    ops = view.ops
    if "Enter" not in ops and "RefEnter" not in ops:
        return [0] * len(ops), {0: None}, {}
    order, _ = view.topological_order(skip_back_edges=True)
    preds_of = view.predecessor_table()
    frame_of = [0] * len(ops)
    parent = {0: None}
    child_ids = {}
    members = collections.defaultdict(list)
    for i in order:
        # The frame of the first producer that is not a loop back edge (data inputs first, then
        # control inputs); consumers of an Exit live in the parent of the Exit's frame.
        f = 0
        for s in preds_of[i]:
            op = ops[s]
            if op in LOOP_BACK_EDGE_OPS:
                continue
            f = frame_of[s]
            if f and op in EXIT_OPS:
                f = parent[f]
            break
        if ops[i] in ENTER_OPS:
            key = (f, view.node_at(i).attr["frame_name"].s)
            if key not in child_ids:
                child_ids[key] = len(parent)
                parent[child_ids[key]] = f
            f = child_ids[key]
        frame_of[i] = f
        if f:
            members[f].append(i)
    # NextIteration nodes were visited in topological order too (their input is the loop body).
    return frame_of, parent, dict(members)


def cond_regions(view):
    """Node sets between each v1 cond ``Switch`` and its ``Merge`` (cached in the view; nested
    conds are unioned).

    A region is found from each ``Merge`` that is not a loop merge: walk backwards until
    ``Switch`` nodes, then keep the nodes forward-reachable from those switches. Returns a list of
    sorted index lists.
    """
    cached = view.cache.get("cond_regions")
    if cached is None:
        cached = view.cache["cond_regions"] = _compute_cond_regions(view)
    return cached


def _compute_cond_regions(view):
    ops = view.ops
    if view.op_types().isdisjoint(("Merge", "RefMerge")):
        return []
    merges = [i for i, op in enumerate(ops) if op in ("Merge", "RefMerge")]
    regions = []
    for m in merges:
        preds = view.predecessors(m)
        if any(ops[p] in ("NextIteration", "RefNextIteration") for p in preds):
            continue  # while-loop merge: the frame rule covers it
        back = {m}
        switches = []
        queue = collections.deque(preds)
        back.update(preds)
        while queue:
            i = queue.popleft()
            if ops[i] in ("Switch", "RefSwitch"):
                switches.append(i)
                continue
            if ops[i] in ("Enter", "RefEnter"):
                continue  # do not walk out of a loop frame
            for p in view.predecessors(i):
                if p not in back:
                    back.add(p)
                    queue.append(p)
        if not switches:
            continue
        region = set(switches)
        queue = collections.deque(switches)
        while queue:
            i = queue.popleft()
            for j in view.successors(i):
                if j in back and j not in region:
                    region.add(j)
                    queue.append(j)
        region.add(m)
        regions.append(region)
    # Union overlapping regions (nested conds share nodes) so each group is atomic.
    owner = {}
    groups = []
    for region in regions:
        hits = sorted({owner[i] for i in region if i in owner})
        if not hits:
            gid = len(groups)
            groups.append(set(region))
        else:
            gid = hits[0]
            for other in hits[1:]:
                groups[gid] |= groups[other]
                for i in groups[other]:
                    owner[i] = gid
                groups[other] = set()
            groups[gid] |= region
        for i in groups[gid]:
            owner[i] = gid
    return [sorted(g) for g in groups if g]


def apply_group_rules(view, candidate, reasons, frames, regions, *, iterations_per_loop,
                      enable_dp):
    """Keep every v1 while frame and cond region wholly on one side, with infection, to a fixed
    point. Consts inside a group do not make it host (they follow their consumers later).

    Returns the list of nodes moved to the host.
    """
    ops = view.ops
    frame_of, parent, members = frames
    moved_all = []
    while True:
        moved = []
        if members:
            bad = set()
            for f, idx in members.items():
                if any(not candidate[i] and ops[i] not in CONST_OPS for i in idx):
                    g = f
                    while g:
                        bad.add(g)
                        g = parent[g]
            if bad:
                for f in sorted(bad):
                    for i in members[f]:
                        if candidate[i]:
                            candidate[i] = False
                            reasons[i] = "host_while_frame"
                            moved.append(i)
        for region in regions:
            if any(not candidate[i] and ops[i] not in CONST_OPS for i in region):
                for i in region:
                    if candidate[i]:
                        candidate[i] = False
                        reasons[i] = "dead_tensor_edge"
                        moved.append(i)
        if not moved:
            return moved_all
        moved_all.extend(moved)
        moved_all.extend(infect(view, candidate, reasons, moved,
                                iterations_per_loop=iterations_per_loop, enable_dp=enable_dp))


def add_relational_consts(view, candidate, reasons, skipped=()):
    """``AddRelationalConst``: a host Const with an edge (data or control) into a candidate joins
    the device; the others keep the reason ``const_without_device_consumer``."""
    data_out = view.data_outputs
    control_out = view.control_outputs
    ops = view.ops
    consts = [i for i, op in enumerate(ops) if op in CONST_OPS] \
        if not view.op_types().isdisjoint(CONST_OPS) else ()
    for i in consts:
        if candidate[i] or i in skipped:
            continue
        if reasons.get(i) not in (None, "const_not_supported_here", "unsupported_op",
                                  "const_without_device_consumer"):
            continue  # excluded for a reason of its own (scope, frame, ...)
        # Consumers straight from the index: a table of successors is not needed here.
        if any(candidate[d] for d, _, _ in data_out[i]) or \
                any(candidate[d] for d in control_out[i]):
            candidate[i] = True
            reasons[i] = "const_follows_consumer"
        else:
            reasons[i] = "const_without_device_consumer"
