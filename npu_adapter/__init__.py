"""npu-adapter: the TF Adapter (npu_bridge) front end, reimplemented in Python for TF 2.x.

Public API (the README's Quick start): :class:`NpuConfig`, :func:`rewrite` and
:class:`RewriteResult`, :class:`NpuSession`, :func:`install`, :func:`dump_graphs`, the
``backends`` and ``passes`` packages and ``testing`` helpers. Heavy modules are imported on
first use.
"""

import importlib
import importlib.machinery
import sys

__version__ = "0.1.0"

SUPPORTED_TENSORFLOW = "2.15-2.21"
"""The TensorFlow releases npu-adapter runs on."""

# An imported TensorFlow counts as installed; otherwise PathFinder looks at the installed
# packages only. (importlib.util.find_spec raises ValueError when sys.modules["tensorflow"] is
# a TF1 alias module without a __spec__, as some launchers install.)
if ("tensorflow" not in sys.modules
        and importlib.machinery.PathFinder.find_spec("tensorflow") is None):
    # npu-adapter does not require TensorFlow by distribution name (that would install a second
    # TensorFlow over tensorflow-cpu, tensorflow-aarch64 or a vendor build): say what to do.
    raise ImportError(
        f"npu-adapter needs TensorFlow {SUPPORTED_TENSORFLOW}, and none is installed. In a fresh "
        "environment install it with the project: pip install 'npu-adapter[tf]' (or, from a "
        "checkout, pip install -e '.[tf]'); otherwise install your platform's build, e.g. "
        "pip install 'tensorflow-cpu>=2.15,<2.22'.")

# Before any module of the project imports TensorFlow: under a launcher that put a TF1 alias
# module in sys.modules["tensorflow"], the project's modules still get TensorFlow 2's API.
from npu_adapter import tensorflow_alias  # noqa: E402

tensorflow_alias.install()

__all__ = [
    "NpuConfig",
    "NpuSession",
    "RewriteResult",
    "ClusterInfo",
    "rewrite",
    "install",
    "uninstall",
    "dump_graphs",
    "errors",
    "__version__",
]

_LAZY = {
    "NpuConfig": ("npu_adapter.config", "NpuConfig"),
    "rewrite": ("npu_adapter.api", "rewrite"),
    "RewriteResult": ("npu_adapter.pipeline.result", "RewriteResult"),
    "ClusterInfo": ("npu_adapter.pipeline.result", "ClusterInfo"),
    "NpuSession": ("npu_adapter.session", "NpuSession"),
    "install": ("npu_adapter.session", "install"),
    "uninstall": ("npu_adapter.session", "uninstall"),
    "dump_graphs": ("npu_adapter.report", "dump_graphs"),
}


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    if name in ("errors", "backends", "passes", "testing", "graph"):
        return importlib.import_module(f"npu_adapter.{name}")
    raise AttributeError(f"module 'npu_adapter' has no attribute {name!r}")
