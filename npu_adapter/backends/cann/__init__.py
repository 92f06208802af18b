"""The ``cann`` backend: clusters compiled by ATC into ``.om`` models and run with pyACL.

``lowering`` partitions and lowers (``CannBackend``), ``freeze`` writes a cluster as a frozen
GraphDef, ``atc`` turns options into ATC flags and runs ATC, ``acl_runtime`` wraps pyACL,
``runtime`` compiles, caches and runs, ``toolkit`` finds CANN, ``dump`` writes the acl.json
dump section. See ``docs/cann.md``.
"""

from npu_adapter.backends.cann.errors import (
    AclError,
    AtcError,
    CannConfigError,
    CannError,
    CannLoweringError,
    CannNotAvailableError,
    CannRuntimeError,
    GearMismatchError,
)
from npu_adapter.backends.cann.lowering import CannBackend, lower_for_cann
from npu_adapter.backends.cann.runtime import (
    CannRuntime,
    CannRuntimeOptions,
    runtime_for,
    runtime_options_from_config,
    runtimes,
    shutdown,
)

__all__ = [
    "AclError",
    "AtcError",
    "CannBackend",
    "CannConfigError",
    "CannError",
    "CannLoweringError",
    "CannNotAvailableError",
    "CannRuntime",
    "CannRuntimeError",
    "CannRuntimeOptions",
    "GearMismatchError",
    "lower_for_cann",
    "runtime_for",
    "runtime_options_from_config",
    "runtimes",
    "shutdown",
]
