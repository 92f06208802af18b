"""``in_out_pair``: choose the device nodes from user-given in/out node pairs.

Runs after ``mark_candidates`` and does nothing unless the option ``in_out_pair`` is set. The
region of a pair ``[[ins], [outs]]`` is every node on a directed path from an in-node to one of
its out-nodes (out-nodes are not expanded further); a path that reaches a node saved by an earlier
entry is saved as well (the original's cross-entry behaviour). Then:

* ``in_out_pair_flag`` true (default): the region is offloaded and everything else stays on the
  host (``in_out_pair_excluded``). Every region node must be supported, else ``RewriteError``
  ("<node> is not supported npu node.", as the original's Internal error) — except graph inputs
  the session feeds (the original sees them as ``_Arg`` nodes), which stay on the host.
* ``in_out_pair_flag`` false: the region stays on the host (``in_out_pair_region``) and every
  other supported node (Consts included) is offloaded.

Support is judged with mix semantics (gray ops unsupported) and Consts allowed, as the original.
Unknown in/out node names are warned about (naming them) and their entry skipped; if no candidate
results, the ``mark_candidates`` annotations are kept (the original's fallback). As in the
original, no ref/resource/variant/string edge rule applies on this path (a ref tensor crossing the
boundary is then the original's error, raised by ``encapsulate``); only the v1 control-flow rules
do, because a function cannot hold part of a while loop or cond (documented deviation).
"""

import warnings

from npu_adapter.errors import RewriteError
from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.pipeline.registry import register_pass

from . import _rules
from ._common import read_placements, write_placements

__all__ = ["InOutPairPass", "in_out_pair_region", "InOutPairWarning"]

# Reasons for which a region node stays on the host without failing the rewrite: the backend
# (not the op list) keeps it there.
_BACKEND_REASONS = ("graph_input",)


class InOutPairWarning(UserWarning):
    """An in_out_pair entry names a node that is not in the graph (the entry is skipped)."""


def in_out_pair_region(view, head, tails, saved):
    """Indices on a path from ``head`` to a node of ``tails`` or of ``saved`` (see module doc)."""
    tail_set = set(tails)
    forward = {head}
    stack = [head]
    while stack:
        v = stack.pop()
        if v in tail_set:
            continue  # out-nodes are not expanded
        for w in view.successors(v):
            if w not in forward:
                forward.add(w)
                stack.append(w)
    targets = [v for v in forward if v in tail_set or v in saved]
    region = set(targets)
    stack = list(targets)
    while stack:
        v = stack.pop()
        for p in view.predecessors(v):
            if p in forward and p not in region and p not in tail_set:
                region.add(p)
                stack.append(p)
    return region


@register_pass
class InOutPairPass(PassBase):
    """Replace the candidate set by the in_out_pair region (or its complement)."""

    name = "in_out_pair"
    gated = True
    needs = ("placement",)

    def run(self, graph_def, ctx, view):
        config = ctx.config
        text = config.in_out_pair or ""
        if not text:
            return PassResult(graph_def, False, {"active": False})
        if not config.mix_compile_mode:
            raise RewriteError("mix_compile_mode must be True when use in_out_pair.",
                               code="Internal")
        from npu_adapter.config.parsers import parse_in_out_pair

        entries = parse_in_out_pair(text)
        region = set()
        skipped_entries = []
        for head, tails in entries:
            if head not in view.index:
                warnings.warn(f"in_out_pair: in-node {head!r} is not in the graph; entry skipped",
                              InOutPairWarning, stacklevel=2)
                skipped_entries.append(head)
                continue
            missing = [t for t in tails if t not in view.index]
            if missing:
                warnings.warn(
                    f"in_out_pair: out-node(s) {missing} of in-node {head!r} are not in the "
                    "graph; entry skipped", InOutPairWarning, stacklevel=2)
                skipped_entries.append(head)
                continue
            region |= in_out_pair_region(view, view.index[head],
                                         [view.index[t] for t in tails], region)

        flag = bool(config.in_out_pair_flag)
        oracle = _rules.SupportOracle(view, ctx.op_support, ctx.backend,
                                      mix_compile_mode=True)
        n = len(view)
        candidate = [False] * n
        reasons = {}
        for i in range(n):
            in_region = i in region
            ok, reason = oracle.node_support(i, support_const=True)
            if flag:
                if not in_region:
                    reasons[i] = "in_out_pair_excluded"
                elif ok:
                    candidate[i] = True
                    reasons[i] = "in_out_pair_region"
                elif reason in _BACKEND_REASONS:
                    reasons[i] = reason
                else:
                    raise RewriteError(f"{view.names[i]} is not supported npu node.",
                                       code="Internal", node=view.names[i])
            elif in_region:
                reasons[i] = "in_out_pair_region"
            elif ok:
                candidate[i] = True
                reasons[i] = "supported"
            else:
                reasons[i] = reason
        if not any(candidate):
            # The original falls back to the default candidate search; mark_candidates' result
            # is already in the graph.
            return PassResult(graph_def, False, {"active": True, "fallback": True,
                                                 "skipped_entries": skipped_entries})
        self._apply_group_rules(view, ctx, candidate, reasons)
        previous = read_placements(view)
        out, modified = write_placements(graph_def, candidate, reasons)
        return PassResult(out, modified, {
            "active": True,
            "fallback": False,
            "region": len(region),
            "candidates": sum(candidate),
            "skipped_entries": skipped_entries,
            "changed_from_default": previous[0] != candidate,
        }, view.rebind(out) if modified else None)

    @staticmethod
    def _apply_group_rules(view, ctx, candidate, reasons):
        config = ctx.config
        ipl = int(config.iterations_per_loop)
        enable_dp = bool(config.enable_data_pre_proc)
        _rules.apply_group_rules(view, candidate, reasons, _rules.while_frames(view),
                                 _rules.cond_regions(view), iterations_per_loop=ipl,
                                 enable_dp=enable_dp)
