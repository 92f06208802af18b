"""Session classes: ``NpuSession`` (the NPU behaviour without :func:`~npu_adapter.install`) and
``PlainSession`` (TensorFlow's behaviour whatever is installed)."""

import tensorflow as tf

from npu_adapter.session import hooks
from npu_adapter.tf_compat import base_session

__all__ = ["NpuSession", "NpuInteractiveSession", "PlainSession"]

_tf1 = tf.compat.v1


def _init(session, tf_class, target, graph, config):
    """``tf_class.__init__`` of ``session``, made an NPU session when ``config`` names
    ``NpuOptimizer`` (by the installed ``BaseSession.__init__`` when :func:`npu_adapter.install`
    is in effect, else here, as that hook does it)."""
    if base_session().__init__ is hooks.npu_init:  # installed: the hook does it
        tf_class.__init__(session, target, graph, config)
        return
    runner = hooks.prepared_runner(session, target, graph, config)
    hooks.start(session, runner, tf_class.__init__, target, graph, config)


class _RunsThroughTheRunner:
    """The session methods an NPU session class takes from the hooks (as the installed
    ``BaseSession`` does)."""

    run = hooks.run
    close = hooks.close
    make_callable = hooks.make_callable
    _make_callable_from_options = hooks.make_callable_from_options
    partial_run_setup = hooks.partial_run_setup
    partial_run = hooks.partial_run


class NpuSession(_RunsThroughTheRunner, _tf1.Session):
    """A ``tf.compat.v1.Session`` that rewrites its runs when its config names
    ``NpuOptimizer``, whether or not :func:`npu_adapter.install` was called (with it, every
    ``tf.compat.v1.Session`` does). Arguments are TensorFlow's."""

    def __init__(self, target="", graph=None, config=None):
        _init(self, _tf1.Session, target, graph, config)


class NpuInteractiveSession(_RunsThroughTheRunner, _tf1.InteractiveSession):
    """``tf.compat.v1.InteractiveSession`` counterpart of :class:`NpuSession`."""

    def __init__(self, target="", graph=None, config=None):
        _init(self, _tf1.InteractiveSession, target, graph, config)

    def close(self):
        """Close the runner's session, then TensorFlow's ``InteractiveSession.close``."""
        runner = hooks.runner_of(self)
        try:
            if runner is not None:
                runner.close()
        finally:
            _tf1.InteractiveSession.close(self)


class PlainSession(_tf1.Session):
    """TensorFlow's session behaviour even while :func:`npu_adapter.install` is in effect (the
    NPU sessions' own TensorFlow sessions, and comparisons with plain TensorFlow): it never
    gets a runner, so every call is TensorFlow's."""
