"""Helpers for testing rewrites and sessions: graph builders, structural comparison, numerical
equivalence of a rewrite, and the differential tester of sessions.

Shipped with the library so users can test their own graphs, options, passes and backends the
way we test ours. ``docs/testing.md`` shows how. The hypothesis strategies of random graphs are
in :mod:`npu_adapter.testing.strategies` (they need ``hypothesis``); the long run is
``python -m npu_adapter.testing.fuzz``.
"""

from npu_adapter.testing.builders import GraphBuilder, attr_value, node_def
from npu_adapter.testing.cases import FeedValue, GraphCase
from npu_adapter.testing.compare import assert_graph_equal, canonical_edges, graph_defs_equal
from npu_adapter.testing.differential import (
    EXPECTED_REFUSALS,
    OPTION_SETS,
    ExpectedRefusal,
    InvalidGraphError,
    Mismatch,
    OptionSet,
    RunFailure,
    RunOutcome,
    SessionComparison,
    SessionMismatchError,
    assert_session_equivalent,
    compare_sessions,
    option_sets_by_name,
)
from npu_adapter.testing.equivalence import (
    assert_rewrite_equivalent,
    compare_values,
    run_graph_def,
    variable_reads,
)
from npu_adapter.testing.values import Difference, difference, seeded_array

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
    "variable_reads",
    "assert_session_equivalent",
    "compare_sessions",
    "OPTION_SETS",
    "OptionSet",
    "EXPECTED_REFUSALS",
    "ExpectedRefusal",
    "option_sets_by_name",
    "SessionComparison",
    "RunOutcome",
    "RunFailure",
    "Mismatch",
    "SessionMismatchError",
    "InvalidGraphError",
    "GraphCase",
    "FeedValue",
    "Difference",
    "difference",
    "seeded_array",
]
