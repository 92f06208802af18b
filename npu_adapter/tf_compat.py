"""The one door to TensorFlow's non-public API.

npu-adapter runs on TensorFlow 2.15-2.21 through its public API. Where no public API serves, the
non-public name is reached here and nowhere else, each with the reason; ``tests/test_tf_compat.py``
checks every name on the running TensorFlow, so a release that moves one fails there with a
message naming it, not deep inside a session.
"""

import tensorflow as tf

__all__ = ["BaseSession", "SESSION_METHODS", "tf_session_method", "while_context"]

# ``tensorflow.python.client.session.BaseSession``: the base of ``tf.compat.v1.Session`` and
# ``InteractiveSession``, and of the sessions TensorFlow's own modules create
# (``MonitoredTrainingSession``, ``SessionManager``, ``tf.estimator``, the Keras backend) through
# that module rather than through ``tf.compat.v1.Session``. Installing the NPU behaviour on it is
# the only way to reach every session of the process, as the original adapter, a plugin of
# TensorFlow's runtime, does. Reached through the public class's MRO: the module is not public.
BaseSession = tf.compat.v1.Session.__mro__[1]

# The ``BaseSession`` methods :mod:`npu_adapter.session.install` replaces. All but one are public;
# ``_make_callable_from_options`` is the entry the Keras backend (tf_keras and TensorFlow's legacy
# Keras) calls to run a model in a TF1 session, so a session that rewrites must serve it too.
SESSION_METHODS = ("__init__", "run", "close", "make_callable", "_make_callable_from_options",
                   "partial_run_setup", "partial_run")
# TensorFlow's own implementations, taken before anything replaces them.
_TF_SESSION_METHODS = {name: BaseSession.__dict__[name] for name in SESSION_METHODS}


def tf_session_method(name):
    """TensorFlow's own ``BaseSession`` method ``name`` (one of :data:`SESSION_METHODS`)."""
    return _TF_SESSION_METHODS[name]


def while_context():
    """TensorFlow's TF1 while-loop builder (``control_flow_ops.WhileContext``).

    Loop sinking runs ``iterations_per_loop`` steps in one TF1 while loop (``Enter``/``Exit``
    frames), whatever the process's control-flow setting: TF1 reference variables are loop
    invariants only in such a loop. ``tf.compat.v1.while_loop`` builds a functional ``While``
    unless control flow v2 is switched off for the whole process."""
    from tensorflow.python.ops import control_flow_ops

    return control_flow_ops.WhileContext

