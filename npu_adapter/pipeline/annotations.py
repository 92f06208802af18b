"""Placement annotations: how the rewrite passes hand node placements to each other.

The original TF Adapter passes communicate through node attributes (``_subgraphs`` names the
cluster of a node, ``_NpuOptimizer`` marks nodes carrying options); we do the same, so each pass
is a pure function of its GraphDef and can run on its own. Our own attributes use the
``_npu_adapter_`` prefix and are removed by the ``finalize`` pass, so a rewritten graph's host
nodes are byte-identical to the user's.

Placement annotation: ``_npu_adapter_placement`` = ``"<device>:<reason>"`` where device is ``npu``
(candidate for a cluster) or ``host`` and reason is a stable snake_case code (see
:data:`npu_adapter.vocabulary.REASON_DESCRIPTIONS`).
"""

__all__ = ["get_placement", "set_placement", "is_candidate", "strip_annotations"]

from npu_adapter.vocabulary import PLACEMENT_ATTR


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
