"""TensorFlow's start-up lines kept off stderr: every ``npu-adapter`` command, and the ranks
``npu-adapter launch`` starts, print only their own lines.

When TensorFlow's native libraries load they log from C++ (CUDA probing, oneDNN, CPU features,
"All log messages before absl::InitializeLog() is called..."), some lines twice and whatever
``TF_CPP_MIN_LOG_LEVEL`` says, since they come before the logging is set up. :func:`install`
puts a one-shot import hook in place: whenever TensorFlow is first imported in the process (by
the command, or by the rank's training script), ``TF_CPP_MIN_LOG_LEVEL`` gets its default if the
user did not set it, and file descriptor 2 goes to a temporary file for the duration of the
import; what was written there is replayed when the import fails (or with ``verbose``). A user
who sets ``TF_CPP_MIN_LOG_LEVEL=0`` (show informational lines) sees every line, as without
npu-adapter. A process that never imports TensorFlow (``dump show``) is not affected.
"""

import contextlib
import importlib.abc
import importlib.util
import os
import sys

__all__ = ["DEFAULT_LOG_LEVEL", "LOG_LEVEL_ENV", "install", "quiet_stderr", "uninstall"]

LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
DEFAULT_LOG_LEVEL = "3"
"""``TF_CPP_MIN_LOG_LEVEL`` when the user did not set it: besides its informational lines,
TensorFlow logs errors it does not raise (a failed ``cuInit`` on every machine without a GPU,
as an Ascend server is; oneDNN's float16 notice), which say nothing about the user's model; what
goes wrong raises. ``TF_CPP_MIN_LOG_LEVEL=2`` shows them again."""


@contextlib.contextmanager
def quiet_stderr(replay=False):
    """File descriptor 2 goes to a temporary file inside the block; what was written is
    written back to stderr when the block raises, or when ``replay`` is true."""
    import tempfile

    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr is not a real file (tests)
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as captured:
        failed = True
        try:
            os.dup2(captured.fileno(), fd)
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            if failed or replay:
                captured.seek(0)
                sys.stderr.write(captured.read().decode("utf-8", "replace"))
                sys.stderr.flush()


class _QuietLoader(importlib.abc.Loader):
    """Runs the ``tensorflow`` package's loader with stderr captured (see :func:`install`)."""

    def __init__(self, inner, default_level, verbose):
        self.inner = inner
        self.default_level = default_level
        self.verbose = verbose

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        os.environ.setdefault(LOG_LEVEL_ENV, self.default_level)
        wants_info = os.environ.get(LOG_LEVEL_ENV, "").strip() in ("", "0")
        # The module keeps TensorFlow's own loader, as after a plain import.
        module.__loader__ = self.inner
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        if wants_info:
            self.inner.exec_module(module)
            return
        with quiet_stderr(replay=self.verbose):
            self.inner.exec_module(module)

    def __getattr__(self, name):  # get_resource_reader, is_package, ...: TensorFlow's loader
        return getattr(self.inner, name)


class _QuietFinder(importlib.abc.MetaPathFinder):
    def __init__(self, default_level, verbose):
        self.default_level = default_level
        self.verbose = verbose

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow":
            return None
        _remove_hooks()  # one shot: the real finders find the package
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _QuietLoader(spec.loader, self.default_level, self.verbose)
        return spec


def _remove_hooks():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _QuietFinder)]


def uninstall():
    """Remove the hook :func:`install` put in place, if TensorFlow was not imported since."""
    _remove_hooks()


def install(default_level=DEFAULT_LOG_LEVEL, verbose=False):
    """Make the first import of TensorFlow in this process quiet (see the module docstring).

    Args:
        default_level: ``TF_CPP_MIN_LOG_LEVEL`` when the environment does not set it.
        verbose: replay the captured start-up lines after the import.

    Does nothing when TensorFlow is already imported.
    """
    if "tensorflow" in sys.modules:
        return
    _remove_hooks()
    sys.meta_path.insert(0, _QuietFinder(str(default_level), verbose))
