"""The project's modules work with TensorFlow 2's API, also under a TF1 alias launcher.

TF1.15 scripts are often run on TensorFlow 2 by a launcher that imports TensorFlow and then puts
a module wrapping ``tf.compat.v1`` into ``sys.modules["tensorflow"]``, so that the script's
``import tensorflow as tf`` gives it the TF1 API. Such a module is not the TensorFlow package:
it often has no ``__spec__``, and its members have TF1 meanings that the project's own code
does not expect (``tf.nn.dropout`` takes ``keep_prob``, ``tf.where`` does not broadcast,
``tf.saved_model.load`` takes a session, ``tf.__internal__`` is missing).

:func:`install` (run when :mod:`npu_adapter` is imported, before any of its modules imports
TensorFlow) routes ``import tensorflow`` made by the project's own packages (``npu_adapter``,
``npu_bridge``, ``hccl``): when ``sys.modules["tensorflow"]`` is such an alias module, they get
``tf.compat.v2`` (TensorFlow's own TF2 API module, the one ``tf_keras`` imports as ``tf``);
otherwise the import is left to Python as usual. Every other module of the process, the script's
included, keeps seeing what the launcher put there. The routing is a wrapper around
``builtins.__import__``: Python answers ``import tensorflow`` from ``sys.modules`` before any
import hook is asked, and only ``__import__`` knows which module is importing. Imports of
TensorFlow's submodules
(``from tensorflow.python.framework import ops``) need no routing: they are found in
``sys.modules`` by their own names.

Under an alias module, :func:`tensorflow_api` also registers TensorFlow's ``compat`` API
modules under the names they are imported by (``tensorflow.compat.v1``, ``tensorflow.compat.v2``):
a library that imports them by dotted path (``tf_keras`` runs ``import tensorflow.compat.v2 as
tf``) could not find them otherwise, because an alias module has no ``__path__`` to look in.
"""

import builtins
import importlib
import sys
import threading

__all__ = ["PROJECT_PACKAGES", "install", "is_alias", "tensorflow_api"]

PROJECT_PACKAGES = frozenset({"npu_adapter", "npu_bridge", "hccl"})
"""Top-level packages whose ``import tensorflow`` is routed by :func:`install`."""

_TF2_API_MODULE = "tensorflow._api.v2.compat.v2"  # what `tf.compat.v2` is on the real package
_COMPAT_MODULES = {  # the name a script imports -> the module TensorFlow gives that name
    "tensorflow.compat": "tensorflow._api.v2.compat",
    "tensorflow.compat.v1": "tensorflow._api.v2.compat.v1",
    "tensorflow.compat.v2": _TF2_API_MODULE,
}
_LOCK = threading.Lock()
_STATE = {"previous_import": None}


def is_alias(module):
    """True when ``module`` (what ``sys.modules["tensorflow"]`` holds) is not the TensorFlow
    package itself but a module a launcher put in its place (no ``__spec__``, or the spec of
    another module such as ``tf.compat.v1``)."""
    spec = getattr(module, "__spec__", None)
    return spec is None or spec.name != "tensorflow"


def tensorflow_api():
    """The TensorFlow module the project's code works with: the package itself, or, when
    ``sys.modules["tensorflow"]`` is an alias module (:func:`is_alias`), TensorFlow's TF2 API
    module as ``import tensorflow.compat.v2`` gives it (what ``tf_keras`` works with)."""
    module = sys.modules.get("tensorflow")
    if module is None:
        module = importlib.import_module("tensorflow")
    if not is_alias(module):
        return module
    for name, api_name in _COMPAT_MODULES.items():
        if name not in sys.modules:
            sys.modules[name] = importlib.import_module(api_name)
    return sys.modules["tensorflow.compat.v2"]


def _imported_by_project(importer_globals):
    name = importer_globals.get("__name__") if importer_globals else None
    return isinstance(name, str) and name.partition(".")[0] in PROJECT_PACKAGES


def _project_import(name, globals=None, locals=None, fromlist=(), level=0):
    """``builtins.__import__`` with ``import tensorflow`` (and ``from tensorflow import x``)
    of the project's modules routed to :func:`tensorflow_api` under an alias module."""
    if name == "tensorflow" and level == 0 and _imported_by_project(globals):
        running = sys.modules.get("tensorflow")
        if running is not None and is_alias(running):
            return tensorflow_api()
    return _STATE["previous_import"](name, globals, locals, fromlist, level)


def install():
    """Route the project's ``import tensorflow`` as the module docstring says (idempotent).
    Imports of every other module go to the ``__import__`` that was in place before."""
    with _LOCK:
        if _STATE["previous_import"] is None:
            _STATE["previous_import"] = builtins.__import__
            builtins.__import__ = _project_import

