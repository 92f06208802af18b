"""Cluster members a backend runs outside the cluster's function, and the steps of the rest.

The partition is the original's: with ``variable_placement=Device`` a training step, variables,
reads and updates included, is one cluster. A backend that keeps state with the TensorFlow session
(the CPU reference) cannot put all of it in a TensorFlow function: a ref tensor (TF1
``VariableV2`` and the ``Assign``/``Apply*`` ops on its ref edges) cannot exist in one, and a
resource the session owns (``VarHandleOp``, queues, tables) must be created by the session's own
node. The backend names such ops (``Backend.outside_cluster_reason``, decided per op type); they
then run in the outer graph under their own names, resource handles enter the function as
arguments and values cross as ordinary arguments and results. The report keeps them in their
cluster and says where they run.

Taking ops out of a cluster can make the rest depend on itself through them: the gradients are
computed in the cluster, applied outside (``ApplyGradientDescent`` on a ref), and the ``group``
NoOp that ends the step (in the cluster) waits for the updates. So the members left inside are
split into steps (:func:`member_steps`): step ``s + 1`` holds what depends on an outside member
that depends on step ``s``. Each step is one function call; the original cluster is convex (no
path leaves it and comes back), so a path can only leave a step and come back through the
cluster's own outside members, and the steps are ordered without cycles.

Everything is linear in the members and edges of the clusters concerned.
"""

from npu_adapter.graph.types import op_def_for
from npu_adapter.graph.view import LOOP_BACK_EDGE_OPS

__all__ = ["outside_members", "member_steps", "REF_CONTROL_FLOW"]

REF_CONTROL_FLOW = "ref_control_flow_cpu_reference"


def outside_members(view, clustered, backend, groups=()):
    """Reason code per cluster member that ``backend`` runs in the outer graph.

    Args:
        view: the GraphView.
        clustered: indices of the nodes that are in a cluster.
        backend: the backend; its ``outside_cluster_reason(node_def, op_def)`` (absent or None:
            every member runs inside) is asked once per op type of the graph, with
            ``node_def=None``: the answer may depend on the op type only.
        groups: ``(reason, member indices)`` of the v1 while-loop nests and cond regions: a
            function cannot hold part of one, so when one of its nodes runs outside, all of its
            clustered nodes do (``ref_control_flow_cpu_reference``).

    Returns:
        dict node index → reason code (empty when everything runs inside).
    """
    rule = getattr(backend, "outside_cluster_reason", None)
    if rule is None:
        return {}
    ops = view.ops
    # Ask once per op type of the graph; most graphs have none of these ops, and then no node is
    # looked at one by one.
    op_types = view.op_types()
    per_op = {}
    for op in op_types:
        reason = rule(None, op_def_for(op))
        if reason:
            per_op[op] = reason
    if not per_op:
        return {}
    found = {i: per_op[ops[i]] for i in clustered if ops[i] in per_op}
    if found and groups:
        clustered_set = clustered if isinstance(clustered, (set, frozenset, dict)) \
            else set(clustered)
        for _, members in groups:
            if any(i in found for i in members):
                for i in members:
                    if i in clustered_set and i not in found:
                        found[i] = REF_CONTROL_FLOW
    return found


def member_steps(view, inside, outside, rank):
    """The step of every member of one cluster that runs inside (see the module docstring).

    Args:
        view: the GraphView.
        inside: indices of the members that run in the cluster's functions.
        outside: indices of the cluster's own members that run in the outer graph.
        rank: position of every node in a topological order of the graph (back edges of v1
            loops left out): :meth:`GraphView.topological_rank`.

    Returns:
        dict index → step (0, 1, ...; contiguous, step 0 non-empty when ``inside`` is).
    """
    inside = set(inside)
    outside = set(outside)
    members = sorted(inside | outside, key=rank.__getitem__)
    ops = view.ops
    preds_of = view.predecessor_table()
    level = {}
    for v in members:
        is_inside = v in inside
        best = 0 if is_inside else -1
        for p in preds_of[v]:
            lp = level.get(p)
            if lp is None or ops[p] in LOOP_BACK_EDGE_OPS:
                continue  # outside the cluster, or a loop back edge
            if is_inside and p in outside:
                lp += 1  # the value comes back from an op run outside after step lp
            if lp > best:
                best = lp
        level[v] = best
    used = sorted({level[v] for v in inside})
    renumber = {s: k for k, s in enumerate(used)}
    return {v: renumber[level[v]] for v in inside}
