"""Grappler-style rewrite passes (installed as ``npu_adapter.passes``).

Importing this package registers every built-in pass. The default pipeline is
:data:`DEFAULT_PIPELINE`; each pass also runs on its own: ``get_pass(name)(graph_def, ctx)``.
"""

from npu_adapter.pipeline.base import PassContext, PassResult
from npu_adapter.pipeline.manager import PassManager
from npu_adapter.pipeline.registry import get_pass, list_passes, register_pass

from . import (  # noqa: F401 - imported for registration
    cluster,
    encapsulate,
    finalize,
    in_out_pair,
    insert_gears,
    lower,
    mark_candidates,
    precision,
    read_graph_config,
)

__all__ = [
    "DEFAULT_PIPELINE",
    "PassContext",
    "PassManager",
    "PassResult",
    "default_pipeline",
    "get_pass",
    "list_passes",
    "register_pass",
]

DEFAULT_PIPELINE = (
    "read_graph_config,mark_candidates,in_out_pair,cluster,encapsulate,insert_gears,precision,"
    "lower,finalize"
)


def default_pipeline():
    """A fresh list of the default passes."""
    from npu_adapter.pipeline.text import parse_pipeline

    return parse_pipeline(DEFAULT_PIPELINE)
