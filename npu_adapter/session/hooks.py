"""The ``BaseSession`` methods of a session that may rewrite: each hands an NPU session's call to
its :class:`~npu_adapter.session.runner.SessionRunner` and any other session's to TensorFlow.

A session is an NPU session when it has a runner: :func:`npu_init` gives it one when its
``ConfigProto`` names ``NpuOptimizer`` (see :meth:`SessionRunner.parse`); a session without one
carries nothing of ours and runs TensorFlow's own code, errors included.
:mod:`npu_adapter.session.install` puts these functions on TensorFlow's ``BaseSession``;
:class:`~npu_adapter.session.classes.NpuSession` has them as its own methods.
"""

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

from npu_adapter import distributed, tf_compat
from npu_adapter.session.runner import SessionRunner
from npu_adapter.tf_compat import tf_session_method

__all__ = ["HOOKS", "runner_of", "attach_runner", "new_runner", "npu_options", "npu_init", "run",
           "close",
           "make_callable", "make_callable_from_options", "partial_run_setup", "partial_run"]

_RUNNER = "_npu_runner"
_TF_INIT = tf_session_method("__init__")
_TF_RUN = tf_session_method("run")
_TF_CLOSE = tf_session_method("close")
_TF_MAKE_CALLABLE = tf_session_method("make_callable")
_TF_CALLABLE_FROM_OPTIONS = tf_session_method("_make_callable_from_options")
_TF_PARTIAL_RUN_SETUP = tf_session_method("partial_run_setup")
_TF_PARTIAL_RUN = tf_session_method("partial_run")


def runner_of(session):
    """The :class:`SessionRunner` of ``session``, or None when it does not rewrite."""
    return session.__dict__.get(_RUNNER)


def npu_options(config):
    """The ``NpuConfig`` of a session created with ``config`` when it rewrites, else None (a
    ``config`` that is no ``ConfigProto`` is left to TensorFlow to refuse)."""
    if not isinstance(config, config_pb2.ConfigProto):
        return None
    return SessionRunner.parse(config)


def attach_runner(session, runner):
    """Make ``session`` (created) an NPU session run by ``runner``."""
    session.__dict__[_RUNNER] = runner


def new_runner(npu_config, target, graph, config):
    """The runner of a session about to be created with these arguments. It is made before
    TensorFlow's session: a backend may have to set up TensorFlow before the process's first
    session (the XLA backend's persistent cache)."""
    if graph is None:
        graph = tf.compat.v1.get_default_graph()
    return SessionRunner(npu_config, graph, target, config)


def prepared_runner(session, target, graph, config):
    """The runner of ``session``, which is being made, or None when it is no NPU session (a
    ``PlainSession``, a config without ``NpuOptimizer``, or a graph that is no ``tf.Graph``,
    for TensorFlow's own error). Options are checked before any TensorFlow session exists; a
    session refused for them is made safe to delete."""
    from npu_adapter.session.classes import PlainSession

    if isinstance(session, PlainSession) or (graph is not None and
                                             not isinstance(graph, tf.Graph)):
        return None
    try:
        npu_config = npu_options(config)
        return None if npu_config is None else new_runner(npu_config, target, graph, config)
    except BaseException:
        tf_compat.mark_session_refused(session)
        raise


def start(session, runner, tf_init, target, graph, config):
    """TensorFlow's ``tf_init`` of ``session``, then ``runner`` (if any) attached to it."""
    try:
        tf_init(session, target, graph, config)
    except BaseException:
        if runner is not None:
            runner.close()
        raise
    if runner is not None:
        attach_runner(session, runner)


def npu_init(self, target="", graph=None, config=None):
    """``BaseSession.__init__``: options parsed and checked first (before a session exists),
    the runner, then TensorFlow's session on the user's graph."""
    from npu_adapter.session.classes import PlainSession

    runner = prepared_runner(self, target, graph, config)
    if runner is None and not isinstance(self, PlainSession):
        # In a rank of a multi-rank job every session runs on the rank's TensorFlow server, so
        # the collectives (HCCL ops) of any session reach the other ranks, as every session of
        # the original's process reaches HCCL; elsewhere the arguments stay as they are.
        target, config = distributed.session_target(target, config)
    start(self, runner, _TF_INIT, target, graph, config)


def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
    """``Session.run``; an NPU session runs the rewritten graph."""
    runner = self.__dict__.get(_RUNNER)
    if runner is None:
        return _TF_RUN(self, fetches, feed_dict, options, run_metadata)
    return runner.run(self, fetches, feed_dict, options, run_metadata)


def close(self):
    """``Session.close``; an NPU session also closes (or hands on) its runner's session."""
    runner = self.__dict__.get(_RUNNER)
    try:
        if runner is not None:
            runner.close()
    finally:
        _TF_CLOSE(self)


def make_callable(self, fetches, feed_list=None, accept_options=False):
    """``Session.make_callable``; an NPU session's callables run the rewritten graph."""
    runner = self.__dict__.get(_RUNNER)
    if runner is None:
        return _TF_MAKE_CALLABLE(self, fetches, feed_list, accept_options)
    return runner.make_callable(self, fetches, feed_list, accept_options)


def make_callable_from_options(self, callable_options):
    """``Session._make_callable_from_options`` (what the Keras backend calls)."""
    runner = self.__dict__.get(_RUNNER)
    if runner is None:
        return _TF_CALLABLE_FROM_OPTIONS(self, callable_options)
    return runner.make_callable_from_options(callable_options)


def partial_run_setup(self, fetches, feeds=None):
    """``Session.partial_run_setup``."""
    runner = self.__dict__.get(_RUNNER)
    if runner is None:
        return _TF_PARTIAL_RUN_SETUP(self, fetches, feeds)
    return runner.partial_run_setup(fetches, feeds)


def partial_run(self, handle, fetches, feed_dict=None):
    """``Session.partial_run``."""
    runner = self.__dict__.get(_RUNNER)
    if runner is None:
        return _TF_PARTIAL_RUN(self, handle, fetches, feed_dict)
    return runner.partial_run(handle, fetches, feed_dict)


HOOKS = {
    "__init__": npu_init,
    "run": run,
    "close": close,
    "make_callable": make_callable,
    "_make_callable_from_options": make_callable_from_options,
    "partial_run_setup": partial_run_setup,
    "partial_run": partial_run,
}
"""``BaseSession`` method name → its replacement (the names of ``tf_compat.SESSION_METHODS``)."""
