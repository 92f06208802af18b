"""Warnings raised while reading NpuOptimizer options.

The original adapter logs a warning for deprecated options and silently ignores unknown keys. We
use Python warnings of our own category so a script (or a test) can filter or escalate them, and
we emit each distinct warning only once per process: a training loop that builds many sessions
should not print the same deprecation notice thousands of times.
"""

import sys
import threading
import warnings

__all__ = ["NpuAdapterWarning", "reset_warn_once", "user_stacklevel", "warn_once"]


class NpuAdapterWarning(UserWarning):
    """Category of every warning issued by npu-adapter (deprecated/unknown options, clamping)."""


_lock = threading.Lock()
_seen = set()


_OWN_PACKAGES = ("npu_adapter", "npu_bridge")


def user_stacklevel():
    """The ``stacklevel`` (for a ``warnings.warn`` called by our caller) of the first frame
    outside npu-adapter, so the warning points at the user's line."""
    frame = sys._getframe(2)
    level = 2
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[0] not in _OWN_PACKAGES:
            return level
        frame = frame.f_back
        level += 1
    return level


def warn_once(key, message, category=NpuAdapterWarning, stacklevel=None):
    """Issue ``message`` as a warning unless a warning with the same ``key`` was already issued.

    ``key`` identifies the condition (for example ``("deprecated", "dynamic_input")``), not the
    text, so the first message wins. ``stacklevel`` defaults to the first frame outside
    npu-adapter. Returns True when the warning was issued now.
    """
    with _lock:
        if key in _seen:
            return False
        _seen.add(key)
    if stacklevel is None:
        stacklevel = user_stacklevel()
    warnings.warn(message, category, stacklevel=stacklevel)
    return True


def reset_warn_once():
    """Forget which warnings were issued (for tests that check the warn-once behaviour)."""
    with _lock:
        _seen.clear()
