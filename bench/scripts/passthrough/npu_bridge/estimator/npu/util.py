"""Pass-through ``util``: loop sinking runs the same steps, one ``Session.run`` each."""

import tensorflow as tf

__all__ = ["set_iteration_per_loop"]


def set_iteration_per_loop(sess, train_op, iterations_per_loop=1):
    """``train_op`` grouped as ``IterationOp``; a run of ``sess`` that fetches it runs the
    training step ``iterations_per_loop`` times (the fetched values are the last run's), so
    the script trains as many steps as with loop sinking."""
    loop_op = tf.group(train_op, name="IterationOp")
    if iterations_per_loop == 1:
        return loop_op
    run = sess.run

    def run_loop(fetches, *args, **kwargs):
        for _ in range(iterations_per_loop - 1):
            run(loop_op, *args, **kwargs)
        return run(fetches, *args, **kwargs)

    def looping_run(fetches, *args, **kwargs):
        flat = fetches if isinstance(fetches, (list, tuple)) else [fetches]
        if any(f is loop_op for f in flat):
            return run_loop(fetches, *args, **kwargs)
        return run(fetches, *args, **kwargs)

    sess.run = looping_run
    return loop_op
