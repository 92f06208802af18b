"""Scoped profiling (``npu_bridge.profiler.profiler.Profiler``).

``with Profiler(level="L1", aic_metrics="ArithmeticUtilization", output_path="prof"):`` asks for
the session runs inside the scope to be profiled. The public behaviour follows the original's
documented contract:

* the three arguments are keyword-only strings (``ValueError`` otherwise, when constructed);
* :meth:`Profiler.start` validates them: ``level`` is ``L0``, ``L1`` or ``L2``;
  ``aic_metrics`` is empty or, with ``L1``/``L2`` only, one of :data:`AIC_METRICS` (an empty
  value means ``PipeUtilization`` there); ``output_path`` (default: the current directory) must
  be an existing directory with read and write permission, without control characters; profiling
  must not already be requested by the environment (``PROFILING_MODE``/``PROFILING_OPTIONS``);
  profilers cannot be nested. A failed check raises ``RuntimeError`` naming it, as the original
  turns its status message into a ``RuntimeError``.
* :meth:`Profiler.stop` ends the request; stopping a profiler that is not active does nothing.

What a request collects is decided by the runtime, not here: the process-wide request is read
with :func:`current_request` (a :class:`ProfileRequest` or None). Session code calls it at each
run and profiles the run into ``request.output_path`` when it is not None; it can tell requests
apart by ``request.generation``. The request does not conflict-check a session's own profiling
options (``profiling_mode`` in the ``NpuOptimizer`` options or ``ProfilingConfig``): the session
that sees both must refuse, as the original documents.
"""

import os
import threading

__all__ = ["AIC_METRICS", "LEVELS", "ProfileRequest", "Profiler", "current_request"]

LEVELS = ("L0", "L1", "L2")
"""Profiler levels: L0 task time and ACL API; L1 adds collective and AI Core operator data;
L2 adds runtime API and AI CPU data."""

AIC_METRICS = ("ArithmeticUtilization", "L2Cache", "Memory", "MemoryL0", "MemoryUB",
               "PipeUtilization", "ResourceConflictRatio")
"""AI Core metric groups accepted with level L1 or L2."""

DEFAULT_AIC_METRICS = "PipeUtilization"
_FORBIDDEN_PATH_CHARS = ("\n", "\f", "\r", "\b", "\t", "\v", "\u007f")
_PROFILING_ENV = ("PROFILING_MODE", "PROFILING_OPTIONS")


class ProfileRequest:
    """An active profiling request: ``level``, resolved ``aic_metrics`` ("" for L0),
    ``output_path`` (absolute) and ``generation`` (1 for the first request of the process,
    increasing)."""

    __slots__ = ("aic_metrics", "generation", "level", "output_path")

    def __init__(self, level, aic_metrics, output_path, generation):
        self.level = level
        self.aic_metrics = aic_metrics
        self.output_path = output_path
        self.generation = generation

    def __repr__(self):
        return (f"ProfileRequest(level={self.level!r}, aic_metrics={self.aic_metrics!r}, "
                f"output_path={self.output_path!r}, generation={self.generation})")


_LOCK = threading.Lock()
_ACTIVE = {"request": None, "owner": None, "generation": 0}


def current_request():
    """The active :class:`ProfileRequest`, or None outside every profiler scope."""
    with _LOCK:
        return _ACTIVE["request"]


def _resolve_metrics(level, aic_metrics):
    if level == "L0":
        if aic_metrics:
            raise RuntimeError("Please use L1 or L2 if you want to collect aic metrics!")
        return ""
    if not aic_metrics:
        return DEFAULT_AIC_METRICS
    if aic_metrics not in AIC_METRICS:
        raise RuntimeError(f"Profiler options: aic_metrics cannot set to: {aic_metrics}, "
                           f"should set aic_metrics to [{', '.join(AIC_METRICS)}].")
    return aic_metrics


def _resolve_path(output_path):
    path = output_path or "./"
    bad = [repr(c) for c in _FORBIDDEN_PATH_CHARS if c in path]
    if bad:
        raise RuntimeError(f"Profiler options: output_path {output_path!r} contains the "
                           f"forbidden character(s) {', '.join(bad)}")
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise RuntimeError(f"Profiler options: output_path {output_path!r} is not an existing "
                           "directory; create it before profiling")
    if not os.access(real, os.R_OK | os.W_OK):
        raise RuntimeError(f"Profiler options: output_path {output_path!r} needs read and "
                           "write permission")
    return real


class Profiler:
    """Profile the session runs of a ``with`` scope (see the module doc)."""

    def __init__(self, *, level="L0", aic_metrics="", output_path=""):
        for name, value in (("level", level), ("aic_metrics", aic_metrics),
                            ("output_path", output_path)):
            if not isinstance(value, str):
                raise ValueError(f"Option {name} should be str, but get type: {type(value)}")
        self._level = level
        self._aic_metrics = aic_metrics
        self._output_path = output_path

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.stop()

    def start(self):
        """Validate the options and make this profiler's request the active one."""
        with _LOCK:
            if _ACTIVE["request"] is not None:
                raise RuntimeError("Not support nested call 'profiler.Profiler'.")
            if self._level not in LEVELS:
                raise RuntimeError(f"Profiler options: level cannot set to: {self._level}, "
                                   f"should set level to [{', '.join(LEVELS)}].")
            metrics = _resolve_metrics(self._level, self._aic_metrics)
            path = _resolve_path(self._output_path)
            set_env = [name for name in _PROFILING_ENV if os.environ.get(name)]
            if set_env:
                raise RuntimeError(f"profiler.Profiler cannot be used together with the "
                                   f"environment variable(s) {', '.join(set_env)}; unset them")
            _ACTIVE["generation"] += 1
            _ACTIVE["request"] = ProfileRequest(self._level, metrics, path,
                                                _ACTIVE["generation"])
            _ACTIVE["owner"] = self

    def stop(self):
        """End this profiler's request (nothing happens when it is not the active one)."""
        with _LOCK:
            if _ACTIVE["owner"] is self:
                _ACTIVE["request"] = None
                _ACTIVE["owner"] = None
