"""Helpers of the npu_bridge API-module tests: build in a fresh graph, run in a session."""

import tensorflow as tf


def run(build, *more_runs):
    """Build ``build()`` in a new graph and run it; each ``more_runs`` item (a function of the
    first build's result giving fetches) runs afterwards in the same session. Returns the list of
    results (one item when there are no more runs)."""
    with tf.Graph().as_default():
        fetches = build()
        extra = [make(fetches) for make in more_runs]
        with tf.compat.v1.Session() as sess:
            results = [sess.run(fetches)] + [sess.run(e) for e in extra]
    return results if more_runs else results[0]
