"""The session npu_bridge gives Keras is the session the script's Keras models run in.

TF 1.15 has one Keras: ``tf.keras`` is ``tensorflow.python.keras``, and a session handed to its
backend (``set_keras_session_npu_config``, ``K.set_session(sess)``) is the one ``Model.fit``
runs in. TensorFlow 2 can hold three in one process:

* the Keras 2 that npu_bridge hands the NPU session to, ``tf.compat.v1.keras`` (:func:`backend`):
  ``tf_keras`` on TensorFlow >= 2.16 (importing npu_bridge sets ``TF_USE_LEGACY_KERAS=1``), the
  ``keras`` 2.15 package on TensorFlow 2.15;
* Keras 3, which knows no TF1 session: what ``import tensorflow.keras`` and ``tf.keras`` give on
  TensorFlow >= 2.16 when TensorFlow decided before ``TF_USE_LEGACY_KERAS`` was set (TensorFlow
  imported before npu_bridge);
* TensorFlow's bundled legacy copy ``tensorflow.python.keras``, whose ``backend.set_session``
  TF 1.15 scripts call and whose session ``tf.keras`` models never read.

:func:`install` (run when npu_bridge is imported) makes them meet: ``import tensorflow.keras``
gives the Keras 2 above even when TensorFlow was imported first (TensorFlow's module path is
pointed at ``tf_keras``' API, as TensorFlow points it when the variable is set before it is
imported), and the legacy backend's ``set_session``, ``get_session`` and ``clear_session`` are
those of the Keras 2 backend. Where they cannot meet — Keras 3 was loaded through
``tensorflow.keras`` or ``tf.keras`` before npu_bridge was imported — :func:`backend` raises a
``RuntimeError`` that says what to do, so a script never trains silently without the NPU
session.
"""

import importlib
import importlib.util
import os
import sys

import tensorflow as tf

from npu_adapter import tensorflow_alias, tf_compat

__all__ = ["LEGACY_BACKEND_FUNCTIONS", "backend", "install"]

LEGACY_BACKEND_FUNCTIONS = ("set_session", "get_session", "clear_session")
"""The functions of ``tensorflow.python.keras.backend`` that become the Keras 2 backend's."""

_KERAS3_HINT = (
    "import npu_bridge (or set TF_USE_LEGACY_KERAS=1, with tf_keras installed) before "
    "TensorFlow's Keras is first used, so that tf.keras and tensorflow.keras are tf_keras")


def _legacy_keras_requested():
    return os.environ.get("TF_USE_LEGACY_KERAS") in ("true", "True", "1")


def _api_dir(package, *parts):
    """The directory of ``package``'s module ``parts`` (no import), or None."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return None
    return os.path.join(os.path.dirname(spec.origin), *parts)


def _route_module_path_keras():
    """Point ``import tensorflow.keras...`` at tf_keras when TensorFlow chose Keras 3 before
    ``TF_USE_LEGACY_KERAS`` was set, and nothing was imported from it yet."""
    package = sys.modules.get("tensorflow")
    if (package is None or tensorflow_alias.is_alias(package) or not _legacy_keras_requested()
            or "tensorflow.keras" in sys.modules):
        return
    path = getattr(package, "__path__", None)
    keras3, legacy = _api_dir("keras", "api", "_v2"), _api_dir("tf_keras", "api", "_v2")
    if path is None or legacy is None or keras3 not in path or legacy in path:
        return
    package.__path__ = [legacy if entry == keras3 else entry for entry in path]


def _keras_models():
    """The Keras ``Model`` classes the script can reach: ``tf.keras``'s and, once imported,
    ``tensorflow.keras``'s."""
    models = {"tf.keras": tf.keras.Model}
    module_path = sys.modules.get("tensorflow.keras")
    if module_path is not None and hasattr(module_path, "Model"):
        models["tensorflow.keras"] = module_path.Model
    return models


def backend():
    """The Keras 2 backend npu_bridge hands sessions to, ``tf.compat.v1.keras.backend``.

    Raises:
        RuntimeError: that Keras is not the one the script's models come from (Keras 3 was
            loaded through ``tf.keras`` or ``tensorflow.keras`` first, or there is no Keras 2):
            a session given to it would never be used.
    """
    keras2 = tf.compat.v1.keras
    if not hasattr(keras2.backend, "set_session"):
        raise RuntimeError("tf.compat.v1.keras.backend has no set_session: this Keras is Keras "
                           f"3, which runs no TF1 session; {_KERAS3_HINT}")
    for name, model in _keras_models().items():
        if model is not keras2.Model:
            raise RuntimeError(
                f"{name} is Keras 3 (module {model.__module__}), loaded before npu_bridge set "
                "TF_USE_LEGACY_KERAS=1: its models run no TF1 session, so they would train "
                f"without the NPU session; {_KERAS3_HINT}")
    return keras2.backend


def _forward_legacy_backend():
    """``tensorflow.python.keras.backend``'s session functions become the Keras 2 backend's
    (each checking, when called, that this Keras is the script's: :func:`backend`)."""
    legacy = tf_compat.legacy_keras_backend()
    if legacy is None:
        return  # a TensorFlow without the bundled copy
    for name in LEGACY_BACKEND_FUNCTIONS:
        if getattr(getattr(legacy, name, None), "npu_bridge_forwarded", False):
            continue

        def forwarded(*args, _name=name, **kwargs):
            return getattr(backend(), _name)(*args, **kwargs)

        forwarded.__name__ = name
        forwarded.__doc__ = (f"``{name}`` of the Keras that tf.keras models use (npu_bridge: "
                             "in TF 1.15 this module was tf.keras' own backend).")
        forwarded.npu_bridge_forwarded = True
        setattr(legacy, name, forwarded)


def install():
    """Make the Keras sessions meet as the module docstring says (idempotent)."""
    _route_module_path_keras()
    _forward_legacy_backend()
