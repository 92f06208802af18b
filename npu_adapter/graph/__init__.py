"""Graph core: names, an indexed view over GraphDefs, dtypes, verification, client extraction."""

from npu_adapter.graph.extract import ClientGraph, extract_client_graph, normalize_tensor_name
from npu_adapter.graph.names import format_input, parse_input, sanitize_filename, unique_name
from npu_adapter.graph.verify import Violation, check_graph, verify_graph
from npu_adapter.graph.view import GraphView

__all__ = [
    "GraphView",
    "ClientGraph",
    "extract_client_graph",
    "normalize_tensor_name",
    "parse_input",
    "format_input",
    "sanitize_filename",
    "unique_name",
    "Violation",
    "verify_graph",
    "check_graph",
]
