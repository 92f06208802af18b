"""pytest plugin of :mod:`bench.tf_session_suite`: which test is running, and a per-test timeout.

The suite copies this file next to its ``sitecustomize.py`` and loads it with ``-p
tf_suite_progress``. Before each test it appends the test's node id to the file named by
``NPU_SUITE_PROGRESS`` (flushed at once), so that when the process dies — a crash in native code,
or the timeout below — the suite knows which test did it, while pytest's own JUnit XML report is
never written. With ``NPU_SUITE_TEST_TIMEOUT`` (seconds) a test running longer makes the process
print every thread's Python stack to stderr and exit (``faulthandler``), so a hang costs one test,
not the whole file.
"""

import faulthandler
import os

__all__ = ["PROGRESS_VARIABLE", "TEST_TIMEOUT_VARIABLE", "TIMEOUT_BANNER"]

PROGRESS_VARIABLE = "NPU_SUITE_PROGRESS"
TEST_TIMEOUT_VARIABLE = "NPU_SUITE_TEST_TIMEOUT"
TIMEOUT_BANNER = "Timeout ("
"""How ``faulthandler`` starts what it prints when a test runs past the timeout."""

_STDERR = []  # a copy of the process's stderr, kept before pytest captures file descriptor 2


def pytest_configure(config):
    # pytest redirects descriptor 2 while a test runs; the stacks of a timed-out test must
    # reach the real stderr (the suite's log), as pytest's own faulthandler plugin does.
    _STDERR.append(os.fdopen(os.dup(2), "w"))


def pytest_unconfigure(config):
    faulthandler.cancel_dump_traceback_later()
    while _STDERR:
        _STDERR.pop().close()


def pytest_runtest_logstart(nodeid, location):
    path = os.environ.get(PROGRESS_VARIABLE)
    if path:
        with open(path, "a", encoding="utf-8") as progress:
            progress.write(nodeid + "\n")
    timeout = float(os.environ.get(TEST_TIMEOUT_VARIABLE) or 0)
    if timeout > 0 and _STDERR:
        faulthandler.dump_traceback_later(timeout, exit=True, file=_STDERR[-1])


def pytest_runtest_logfinish(nodeid, location):
    faulthandler.cancel_dump_traceback_later()
