"""Dump and profiling options set once for the process by ``initialize_system``.

A script that calls ``npu_bridge.estimator.npu_ops.initialize_system()`` must give the dump and
profiling options to the session that runs that op; they then hold for the whole NPU system,
i.e. for every later session, until ``shutdown_system()`` (the ``initialize_system`` API
documentation of the TF Adapter). The session calls :func:`on_initialize_system` when a run
executes ``NPUInit`` and :func:`on_shutdown_system` for ``NPUShutdown``; a session that dumps or
profiles reads its options through :func:`with_system_options`: its own explicit options win,
the ones it leaves unset come from the ``initialize_system`` session.
"""

import threading

__all__ = ["SYSTEM_OPTIONS", "on_initialize_system", "on_shutdown_system", "system_options",
           "with_system_options"]

SYSTEM_OPTIONS = ("enable_dump", "enable_dump_debug", "dump_path", "dump_step", "dump_mode",
                  "dump_debug_mode", "dump_data", "dump_layer", "op_debug_level",
                  "profiling_mode", "profiling_options")
"""The options ``initialize_system`` makes process-wide."""

_lock = threading.Lock()
_options = {}


def on_initialize_system(config):
    """Remember the explicit dump and profiling options of ``config`` (an ``NpuConfig``), the
    options of the session that ran ``initialize_system``."""
    values = {name: config.get(name) for name in SYSTEM_OPTIONS if config.is_set(name)}
    with _lock:
        _options.clear()
        _options.update(values)


def on_shutdown_system():
    """Forget them (``shutdown_system``)."""
    with _lock:
        _options.clear()


def system_options():
    """The remembered options (a copy)."""
    with _lock:
        return dict(_options)


def with_system_options(config):
    """``config`` with the dump and profiling options it leaves unset taken from the
    ``initialize_system`` session (``config`` itself when there are none)."""
    inherited = {name: value for name, value in system_options().items()
                 if not config.is_set(name)}
    return config.replace(**inherited) if inherited else config
