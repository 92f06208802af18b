"""The op-library handle of ``npu_bridge`` (``npu_bridge.helper.helper``).

In the original, ``npu_bridge_handle`` is the module ``tf.load_op_library`` returns for
``_tf_adapter.so`` and every op module takes its generated wrappers from it
(``gen_npu_cpu_ops = helper.get_gen_ops()``; ``gen_npu_cpu_ops.dense_image_warp(...)``). This build
has no shared library: :data:`npu_bridge_handle` is a :class:`GenOps` namespace to which the op
modules register the Python functions that implement each op with TensorFlow ops
(:func:`register_gen_ops`). An op is found by its snake_case wrapper name or its CamelCase op type
(``dense_image_warp`` or ``DenseImageWarp``), as in a generated module. Looking up an op that no
module has registered first imports the op modules listed in :data:`PROVIDER_MODULES`, then raises
``AttributeError`` naming the op.
"""

import importlib
import re
import threading

__all__ = ["GenOps", "PROVIDER_MODULES", "get_gen_ops", "npu_bridge_handle", "register_gen_ops",
           "version"]

version = "v1.15.0"
"""The version of the original adapter this package stands in for."""

PROVIDER_MODULES = (
    "npu_bridge.npu_cpu.npu_cpu_ops",
    "npu_bridge.npu_cpu.lru_cache",
    "npu_bridge.image.image_ops",
    "npu_bridge.experimental.file_constant",
    "npu_bridge.experimental.get_shape",
    "npu_bridge.experimental.image",
)
"""Modules that register ops; imported on the first lookup of an unknown op (more may register
themselves when imported)."""

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _snake_case(name):
    return _CAMEL_BOUNDARY.sub("_", name).lower()


class GenOps:
    """Namespace of op wrappers, standing in for the module of generated wrappers."""

    def __init__(self):
        self.__dict__["_ops"] = {}
        self.__dict__["_lock"] = threading.Lock()
        self.__dict__["_providers_loaded"] = False

    def register(self, ops):
        """Register ``{name: function}``; each is reachable by its name and the snake_case
        form of it. A name registered twice with another function raises ``ValueError``."""
        with self._lock:
            for name, fn in ops.items():
                for key in {name, _snake_case(name)}:
                    known = self._ops.get(key)
                    if known is not None and known is not fn:
                        raise ValueError(f"op {key!r} is already registered by "
                                         f"{known.__module__}.{known.__qualname__}")
                    self._ops[key] = fn

    def _load_providers(self):
        if self._providers_loaded:
            return
        self.__dict__["_providers_loaded"] = True
        for module in PROVIDER_MODULES:
            importlib.import_module(module)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        ops = self.__dict__["_ops"]
        if name not in ops and _snake_case(name) not in ops:
            self._load_providers()
        fn = ops.get(name) or ops.get(_snake_case(name))
        if fn is None:
            raise AttributeError(
                f"op {name!r} is not available: no npu_bridge module implements it with "
                "TensorFlow ops (this build has no _tf_adapter.so)")
        return fn

    def __setattr__(self, name, value):
        raise AttributeError("register ops with register_gen_ops(); the handle is read-only")

    def __dir__(self):
        self._load_providers()
        return sorted(self._ops)

    def __repr__(self):
        return f"<npu_bridge op handle: {len(self._ops)} registered names>"


npu_bridge_handle = GenOps()
"""The op handle (the original's loaded ``_tf_adapter.so`` module)."""


def register_gen_ops(ops):
    """Register op implementations ``{op name: function}`` on :data:`npu_bridge_handle`."""
    npu_bridge_handle.register(ops)


def get_gen_ops():
    """The op handle every op module takes its wrappers from."""
    return npu_bridge_handle
