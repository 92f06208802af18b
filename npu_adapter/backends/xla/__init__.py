"""The ``xla`` backend: clusters compiled by XLA on the host CPU (``npu_adapter_backend=xla``).

``lowering`` checks each cluster and marks it for XLA or lets it fall back to the CPU
reference (``compilability`` is the check, ``depthwise`` writes depthwise convolutions as XLA
compiles them well); ``runtime`` runs each compiled cluster compiled or on TensorFlow's kernels,
whichever its first runs measure faster (``trial`` measures, ``decisions`` remembers) and counts
executables per session; ``persistent_cache`` runs ``graph_compiler_cache_dir`` on TensorFlow's
persistent XLA cache; ``probe`` holds the backend's own small sessions. See ``docs/xla.md``.
"""

from npu_adapter.backends.xla.compilability import VALUE_DEPENDENT_SHAPE_OPS, check_functions
from npu_adapter.backends.xla.lowering import XlaBackend, cluster_verdicts, lower_for_xla
from npu_adapter.backends.xla.persistent_cache import PersistentCache, XlaCacheWarning
from npu_adapter.backends.xla.runtime import XlaProgram, XlaRuntime

__all__ = [
    "VALUE_DEPENDENT_SHAPE_OPS",
    "PersistentCache",
    "XlaBackend",
    "XlaCacheWarning",
    "XlaProgram",
    "XlaRuntime",
    "check_functions",
    "cluster_verdicts",
    "lower_for_xla",
]
