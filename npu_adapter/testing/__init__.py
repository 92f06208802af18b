"""Helpers for testing rewrites: graph builders, structural comparison, numerical equivalence.

Shipped with the library so users can test their own graphs and passes the way we test ours.
"""

from npu_adapter.testing.builders import GraphBuilder, attr_value, node_def
from npu_adapter.testing.compare import assert_graph_equal, canonical_edges, graph_defs_equal
from npu_adapter.testing.equivalence import (
    assert_rewrite_equivalent,
    compare_values,
    run_graph_def,
)

__all__ = [
    "GraphBuilder",
    "node_def",
    "attr_value",
    "assert_graph_equal",
    "graph_defs_equal",
    "canonical_edges",
    "assert_rewrite_equivalent",
    "compare_values",
    "run_graph_def",
]
