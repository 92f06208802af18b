"""Making every session TensorFlow opens an NPU session (what importing ``npu_bridge`` does).

The original adapter is a plugin of TensorFlow's runtime, so every session of the process sees
it. Here the hook is TensorFlow's own session class: :func:`install` gives
``tensorflow.python.client.session.BaseSession`` (the base of ``tf.compat.v1.Session`` and
``InteractiveSession``) the behaviour of :class:`~npu_adapter.session.NpuSession`. Every session
is then an NPU session, however it is created — by a script (``tf.compat.v1.Session``,
``tf.Session``), or by TensorFlow's own modules (``MonitoredTrainingSession``, ``SessionManager``,
``tf.estimator``, the Keras backend), or through a reference to the class taken before the
install. A session whose config has no ``NpuOptimizer`` entry behaves exactly as TensorFlow's.

Replacing the module attribute ``Session`` instead would not reach references taken earlier, and
breaks TensorFlow's ``Session.__init__``, which calls ``super(Session, self)`` through that very
attribute.
"""

import threading

from npu_adapter.session.core import (
    PlainSession,
    _BaseSession,
    _NpuSessionMixin,
)

__all__ = ["install", "uninstall", "is_installed", "plain_session_class"]

_LOCK = threading.Lock()
_MISSING = object()
_SAVED = {}  # BaseSession attribute name -> its value before install (or _MISSING)


def _members():
    members = {name: value for name, value in vars(_NpuSessionMixin).items()
               if name not in ("__module__", "__doc__", "__dict__", "__weakref__",
                               "__qualname__", "__firstlineno__", "__static_attributes__")}
    members["__init__"] = _NpuSessionMixin._npu_base_init
    return members


def install():
    """Give every TF1 session of the process the NpuSession behaviour: sessions made with
    ``tf.compat.v1.Session`` / ``InteractiveSession`` (and ``tf.Session``) and those
    TensorFlow's own modules create (``MonitoredTrainingSession``, ``SessionManager``,
    ``tf.estimator``, the Keras backend). This is what importing ``npu_bridge`` does.
    Idempotent; sessions created before stay as they were."""
    with _LOCK:
        if _SAVED:
            return
        for name, value in _members().items():
            _SAVED[name] = _BaseSession.__dict__.get(name, _MISSING)
            setattr(_BaseSession, name, value)


def uninstall():
    """Restore TensorFlow's own session behaviour for sessions created afterwards."""
    with _LOCK:
        for name, value in _SAVED.items():
            if value is _MISSING:
                delattr(_BaseSession, name)
            else:
                setattr(_BaseSession, name, value)
        _SAVED.clear()


def is_installed():
    """True between :func:`install` and :func:`uninstall`."""
    return bool(_SAVED)


def plain_session_class():
    """A ``tf.compat.v1.Session`` subclass that behaves as TensorFlow's own session even while
    :func:`install` is in effect (for comparisons with plain TensorFlow)."""
    return PlainSession
