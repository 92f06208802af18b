"""Benchmarks and the model corpus used by tests and benchmarks.

``bench.models`` builds real architectures (ResNet-50, MobileNetV2, Inception-v3, BERT, LeNet
training graphs, an LSTM, small CI models) as TF1 GraphDefs from fixed seeds and caches them;
``bench.synthetic`` generates large valid GraphDefs of a requested size directly as protobufs.
``python -m bench`` (``bench.run``, sections ``bench_*.py``, utilities in ``bench.harness``) runs
the benchmarks; ``bench/PERFORMANCE.md`` holds the latest figures. The submodules import
TensorFlow, so this package imports nothing on its own.
"""

__all__ = ["models", "synthetic"]
