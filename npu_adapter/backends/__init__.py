"""Device backends: the interface, the registry and the built-ins ``cpu``, ``xla`` and ``cann``.

``get_backend(name)`` returns a new backend instance; the built-in modules are imported only when
their backend is first asked for.
"""

from npu_adapter.backends.base import Backend
from npu_adapter.backends.registry import (
    get_backend,
    list_backends,
    register_backend,
    unregister_backend,
)

__all__ = ["Backend", "get_backend", "list_backends", "register_backend", "unregister_backend"]
