"""Making every session TensorFlow opens an NPU session (what importing ``npu_bridge`` does).

The original adapter is a plugin of TensorFlow's runtime, so every session of the process sees
it. Here the hook is TensorFlow's own session class: :func:`install` replaces eight methods of
``BaseSession`` (the base of ``tf.compat.v1.Session`` and ``InteractiveSession``,
``tf_compat.SESSION_METHODS``) with :mod:`npu_adapter.session.hooks`. Every session created
afterwards whose config names ``NpuOptimizer`` is then an NPU session, however it is created — by
a script, by TensorFlow's own modules (``MonitoredTrainingSession``, ``SessionManager``,
``tf.estimator``, the Keras backend), or through a reference to the class taken before the
install. A session whose config has no ``NpuOptimizer`` entry gets no runner and runs
TensorFlow's own code.

Replacing the module attribute ``Session`` instead would not reach references taken earlier, and
breaks TensorFlow's ``Session.__init__``, which calls ``super(Session, self)`` through that very
attribute.
"""

import threading

from npu_adapter.session import hooks
from npu_adapter.session.classes import PlainSession
from npu_adapter.tf_compat import SESSION_METHODS, base_session

__all__ = ["install", "uninstall", "is_installed", "plain_session_class"]

_LOCK = threading.Lock()
_SAVED = {}  # BaseSession method name -> its value before install


def install():
    """Give every TF1 session of the process the NPU behaviour: sessions made with
    ``tf.compat.v1.Session`` / ``InteractiveSession`` (and ``tf.Session``) and those
    TensorFlow's own modules create. This is what importing ``npu_bridge`` does. Idempotent;
    sessions created before stay as they were."""
    with _LOCK:
        if _SAVED:
            return
        base = base_session()
        for name in SESSION_METHODS:
            _SAVED[name] = vars(base)[name]
            setattr(base, name, hooks.HOOKS[name])


def uninstall():
    """Restore TensorFlow's own session behaviour for sessions created afterwards."""
    with _LOCK:
        base = base_session()
        for name, value in _SAVED.items():
            setattr(base, name, value)
        _SAVED.clear()


def is_installed():
    """True between :func:`install` and :func:`uninstall`."""
    return bool(_SAVED)


def plain_session_class():
    """A ``tf.compat.v1.Session`` subclass that behaves as TensorFlow's own session even while
    :func:`install` is in effect (for comparisons with plain TensorFlow)."""
    return PlainSession
