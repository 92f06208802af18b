"""Small TensorFlow sessions the XLA backend runs for itself.

:func:`plain_session` opens a TensorFlow session on a private graph (no ``NpuOptimizer`` in its
config, so it is never rewritten): the compilability check runs one to make TensorFlow register
its ``XLA_CPU_JIT`` kernels.
"""

import contextlib

__all__ = ["plain_session"]


@contextlib.contextmanager
def plain_session(graph):
    """A ``tf.compat.v1.Session`` on ``graph`` that npu-adapter leaves alone."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto()
    sess = tf.compat.v1.Session(graph=graph, config=config)
    try:
        yield sess
    finally:
        sess.close()
