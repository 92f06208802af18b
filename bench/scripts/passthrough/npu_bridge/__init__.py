"""A pass-through ``npu_bridge`` for timing whole scripts: the same names, every option ignored.

Put first on ``sys.path`` (``bench/scripts/passthrough``), it stands in for the real package so
that the benchmark's scripts run unchanged on plain TensorFlow: sessions are TensorFlow's own, the
``NpuOptimizer`` entry of a ``ConfigProto`` is left for TensorFlow to ignore, loop sinking runs
the same number of training steps one ``Session.run`` at a time, and the loss-scale optimizer is
TensorFlow's. What it does not stand in for is absent (an ``AttributeError`` or ``ImportError``
says a script needs more of it). Used by ``bench/bench_scripts.py`` only.
"""
