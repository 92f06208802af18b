"""When a session profiles, and with which options.

Three sources turn profiling on, as in the original:

1. the session options ``profiling_mode`` (+ ``profiling_options``; empty options get the
   original's default JSON);
2. the environment, when the session options do not set ``profiling_mode``:
   ``PROFILING_MODE=true`` with ``PROFILING_OPTIONS`` (the same JSON; default as above);
3. a started ``npu_bridge.profiler.profiler.Profiler`` (``Profiler(level, aic_metrics,
   output_path).start()``), read through :func:`active_api_profiler`.

A started ``Profiler`` while the session options or ``PROFILING_MODE`` already profile is an
error, as in the original (two collectors cannot own one device).
"""

import dataclasses
import os
import sys

from npu_adapter.config.options import PROFILING_DEFAULT_OPTIONS
from npu_adapter.errors import NpuConfigError
from npu_adapter.profiling.options import parse_profiling_options

__all__ = ["API_PROFILER_MODULE", "ProfilingSettings", "active_api_profiler",
           "static_profiling_settings"]

API_PROFILER_MODULE = "npu_bridge.profiler.profiler"
_ACCESSOR = "current_request"


def active_api_profiler():
    """The started ``npu_bridge.profiler.profiler.Profiler``, or None.

    Contract with that module: it exposes ``current_request()``, returning the started
    ``Profiler`` (None when none is started), which has the attributes ``level``,
    ``aic_metrics`` and ``output_path`` given to its constructor. The module is only looked up
    if it was imported (a started Profiler implies it was), so this costs a dict lookup.
    """
    module = sys.modules.get(API_PROFILER_MODULE)
    accessor = getattr(module, _ACCESSOR, None) if module is not None else None
    return accessor() if callable(accessor) else None


@dataclasses.dataclass(frozen=True)
class ProfilingSettings:
    """Profiling options of a session: the parsed options, where they came from (``session
    options``, ``PROFILING_MODE``, ``Profiler``), the output directory (absolute) and the
    device id."""

    options: object
    source: str
    output: str
    device_id: int = 0
    level: str = ""

    @classmethod
    def from_options_text(cls, text, source, device_id=0, cwd=None):
        """Settings from a ``profiling_options`` JSON text."""
        options = parse_profiling_options(text)
        output = os.path.abspath(os.path.join(cwd or os.getcwd(), options.output))
        return cls(options, source, output, device_id)

    @classmethod
    def from_api_profiler(cls, profiler, device_id=0, cwd=None):
        """Settings from a started ``Profiler`` (its ``output_path`` and ``aic_metrics``)."""
        output = getattr(profiler, "output_path", None) or "./"
        metrics = getattr(profiler, "aic_metrics", None) or "PipeUtilization"
        import json

        text = json.dumps({"output": str(output), "training_trace": "on",
                           "aic_metrics": str(metrics)})
        settings = cls.from_options_text(text, "Profiler", device_id, cwd)
        return dataclasses.replace(settings, level=str(getattr(profiler, "level", "") or ""))


def static_profiling_settings(config, environ=None, device_id=0):
    """The settings from the session options or the environment (sources 1 and 2), or None.

    Raises:
        NpuConfigError: ``PROFILING_OPTIONS`` is not valid (the session option was checked when
            the options were read).
    """
    environ = os.environ if environ is None else environ
    if config is not None and config.is_set("profiling_mode"):
        if not config.profiling_mode:
            return None
        text = config.profiling_options or PROFILING_DEFAULT_OPTIONS
        return ProfilingSettings.from_options_text(text, "session options", device_id)
    if environ.get("PROFILING_MODE", "").strip().lower() != "true":
        return None
    text = environ.get("PROFILING_OPTIONS", "") or PROFILING_DEFAULT_OPTIONS
    try:
        return ProfilingSettings.from_options_text(text, "PROFILING_MODE", device_id)
    except NpuConfigError as exc:
        raise NpuConfigError("PROFILING_OPTIONS", text, exc.allowed,
                             detail=f"environment variable; {exc.detail}" if exc.detail
                             else "environment variable") from None
