"""``NpuSession``: a ``tf.compat.v1.Session`` that rewrites each run signature (work in progress).

``install()`` makes ``tf.compat.v1.Session`` (and ``tf.Session`` where that name exists) and
``InteractiveSession`` create NPU sessions, as importing the original ``npu_bridge`` patches
``tf.Session``; ``uninstall()`` restores TensorFlow's classes.
"""

import threading

import tensorflow as tf

__all__ = ["NpuSession", "NpuInteractiveSession", "install", "uninstall", "is_installed"]

_tf1 = tf.compat.v1
_ORIGINAL = {"Session": _tf1.Session, "InteractiveSession": _tf1.InteractiveSession}
_LOCK = threading.Lock()
_INSTALLED = [False]


class NpuSession(_ORIGINAL["Session"]):
    """Session that partitions its graph for the configured backend (placeholder for now)."""


class NpuInteractiveSession(_ORIGINAL["InteractiveSession"]):
    """InteractiveSession counterpart of :class:`NpuSession` (placeholder for now)."""


def install():
    """Make ``tf.compat.v1.Session``/``InteractiveSession`` (and ``tf.Session``) NPU sessions."""
    with _LOCK:
        _tf1.Session = NpuSession
        _tf1.InteractiveSession = NpuInteractiveSession
        if hasattr(tf, "Session"):
            tf.Session = NpuSession
        _INSTALLED[0] = True


def uninstall():
    """Restore TensorFlow's own session classes."""
    with _LOCK:
        _tf1.Session = _ORIGINAL["Session"]
        _tf1.InteractiveSession = _ORIGINAL["InteractiveSession"]
        if hasattr(tf, "Session"):
            tf.Session = _ORIGINAL["Session"]
        _INSTALLED[0] = False


def is_installed():
    """True between :func:`install` and :func:`uninstall`."""
    return _INSTALLED[0]
