"""Periodic progress lines for long data dumps and profiles.

A :class:`ProgressLog` counts steps, files and bytes and prints one line to stderr at most every
``interval`` seconds (default 10, or ``NPU_ADAPTER_PROGRESS_INTERVAL``; 0 turns the lines off),
plus a last line when it is closed::

    npu-adapter: data dump: 1,240 files (56.3 MiB), steps 0-4 -> /data/dump/20261124101500
"""

import os
import sys
import threading
import time

__all__ = ["ProgressLog", "progress_interval"]

_DEFAULT_INTERVAL = 10.0


def progress_interval(environ=None):
    """Seconds between progress lines (``NPU_ADAPTER_PROGRESS_INTERVAL``, default 10)."""
    environ = os.environ if environ is None else environ
    text = environ.get("NPU_ADAPTER_PROGRESS_INTERVAL", "")
    try:
        return max(float(text), 0.0) if text else _DEFAULT_INTERVAL
    except ValueError:
        return _DEFAULT_INTERVAL


def _size(count):
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover


class ProgressLog:
    """Thread-safe counters with rate-limited progress lines.

    Args:
        what: what is in progress (``"data dump"``, ``"profiling"``).
        where: the output directory shown in each line.
        interval: seconds between lines; 0 disables them; None reads the environment.
        stream: where lines go (default ``sys.stderr``).
        clock: monotonic clock in seconds (tests pass their own).
    """

    def __init__(self, what, where="", interval=None, stream=None, clock=time.monotonic):
        self.what = what
        self.where = where
        self.interval = progress_interval() if interval is None else float(interval)
        self._stream = stream
        self._clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self.files = 0
        self.bytes = 0
        self.first_step = None
        self.last_step = None
        self.lines = 0

    def add(self, files=0, nbytes=0, step=None):
        """Count ``files`` files of ``nbytes`` bytes written for ``step``; print a line when
        ``interval`` seconds passed since the last one."""
        with self._lock:
            self.files += files
            self.bytes += nbytes
            if step is not None:
                self.first_step = step if self.first_step is None else min(self.first_step, step)
                self.last_step = step if self.last_step is None else max(self.last_step, step)
            now = self._clock()
            due = self.interval > 0 and now - self._last >= self.interval
            if due:
                self._last = now
                line = self.line()
        if due:
            self._emit(line)

    def line(self):
        """The current progress text."""
        steps = ""
        if self.first_step is not None:
            steps = (f", step {self.first_step}" if self.first_step == self.last_step
                     else f", steps {self.first_step}-{self.last_step}")
        where = f" -> {self.where}" if self.where else ""
        return (f"npu-adapter: {self.what}: {self.files:,} files ({_size(self.bytes)})"
                f"{steps}{where}")

    def close(self):
        """Print the final line (when anything was written and lines are on)."""
        with self._lock:
            line = self.line() if self.files and self.interval > 0 else None
        if line:
            self._emit(line + " (done)")

    def _emit(self, line):
        stream = self._stream or sys.stderr
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # a closed stream must not break the run
            return
        self.lines += 1
