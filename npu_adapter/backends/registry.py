"""Backend registry: names → backend classes, with lazy registration by module path.

The built-in backends are registered as ``"module:Class"`` strings, so importing the registry does
not import them (the CANN backend pulls in pyACL, the XLA one more of TensorFlow); the module is
imported on the first :func:`get_backend` for that name. Third-party backends may register a class
or a ``"module:Class"`` string the same way.
"""

import importlib
import re
import threading

from npu_adapter.backends.base import Backend
from npu_adapter.errors import BackendError

__all__ = [
    "BUILTIN_BACKENDS",
    "get_backend",
    "list_backends",
    "register_backend",
    "unregister_backend",
]

BUILTIN_BACKENDS = (
    ("cann", "npu_adapter.backends.cann:CannBackend"),
    ("cpu", "npu_adapter.backends.cpu:CpuReferenceBackend"),
    ("xla", "npu_adapter.backends.xla:XlaBackend"),
)

_NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
_TARGET_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")

_LOCK = threading.RLock()
# name → Backend subclass, or "module:Class" until the first get_backend resolves it.
_REGISTRY = dict(BUILTIN_BACKENDS)


def _check_name(name):
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise BackendError(
            f"invalid backend name {name!r}: use lower-case letters, digits and underscores, "
            f"starting with a letter (e.g. 'cpu', 'my_device')"
        )


def register_backend(name, cls, *, replace=False):
    """Register a backend class under ``name``.

    Args:
        name: lower-case identifier (``[a-z][a-z0-9_]*``).
        cls: a :class:`Backend` subclass, or a ``"package.module:ClassName"`` string imported on
            first use.
        replace: allow replacing an existing registration (built-ins included).

    Raises:
        BackendError: the name is invalid or already registered (and ``replace`` is false), or
            ``cls`` is neither a Backend subclass nor a ``"module:Class"`` string.
    """
    _check_name(name)
    if isinstance(cls, str):
        if not _TARGET_RE.fullmatch(cls):
            raise BackendError(
                f"cannot register backend {name!r}: {cls!r} is not a 'package.module:ClassName' "
                f"path"
            )
    elif not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendError(
            f"cannot register backend {name!r}: {cls!r} is not a subclass of "
            f"npu_adapter.backends.Backend"
        )
    with _LOCK:
        if name in _REGISTRY and not replace:
            raise BackendError(
                f"a backend named {name!r} is already registered ({_describe(_REGISTRY[name])}); "
                f"pass replace=True to replace it"
            )
        _REGISTRY[name] = cls


def unregister_backend(name):
    """Remove the backend registered under ``name``.

    Raises:
        BackendError: no backend has that name.
    """
    with _LOCK:
        if name not in _REGISTRY:
            raise BackendError(_unknown_message(name))
        del _REGISTRY[name]


def list_backends():
    """Names of all registered backends, sorted (whether or not they can be imported here)."""
    with _LOCK:
        return sorted(_REGISTRY)


def get_backend(name):
    """A new instance of the backend registered under ``name``.

    Raises:
        BackendError: the name is unknown (the message lists the registered names), or the
            backend's module cannot be imported in this build, or it does not define a
            :class:`Backend` subclass under the registered name.
    """
    with _LOCK:
        if not isinstance(name, str) or name not in _REGISTRY:
            raise BackendError(_unknown_message(name))
        cls = _REGISTRY[name]
        if isinstance(cls, str):
            cls = _resolve(name, cls)
            _REGISTRY[name] = cls
    return cls()


def _resolve(name, target):
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise BackendError(
                f"backend {name!r} is not available in this build: its module {module_name!r} "
                f"is not installed"
            ) from e
        raise BackendError(
            f"backend {name!r} is not available in this build: importing {module_name!r} "
            f"failed because module {e.name!r} is missing"
        ) from e
    except ImportError as e:
        raise BackendError(
            f"backend {name!r} is not available in this build: importing {module_name!r} "
            f"failed ({e})"
        ) from e
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendError(
            f"backend {name!r}: {target!r} does not name a subclass of "
            f"npu_adapter.backends.Backend (found {cls!r})"
        )
    return cls


def _describe(entry):
    if isinstance(entry, str):
        return entry
    return f"{entry.__module__}:{entry.__qualname__}"


def _unknown_message(name):
    names = ", ".join(sorted(_REGISTRY)) or "none"
    return f"unknown backend {name!r}; registered backends: {names}"
