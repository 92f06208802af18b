"""The xla backend on the model corpus (bench/models.py): the same outputs as plain TensorFlow
within float32 tolerance in both forms of each cluster (the first runs alternate them), one
compilation, none in the steady state.

Every test here builds corpus models, so all run only with ``NPU_ADAPTER_SLOW_TESTS=1``
(tests/test_xla_backend.py covers small models in CI).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

try:
    import bench  # noqa: F401
except ImportError:  # pytest run from elsewhere than the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import models
from npu_adapter.backends.xla.decisions import forget_decisions
from npu_adapter.backends.xla.trial import PAIRS
from npu_adapter.config import NpuConfig
from npu_adapter.session import NpuSession, plain_session_class, runner_of

SLOW = os.environ.get("NPU_ADAPTER_SLOW_TESTS") == "1"
PlainSession = plain_session_class()
# Relative to the output's largest magnitude: deep float32 nets accumulate XLA's reordered
# arithmetic (fusion, different convolution algorithms) over tens of layers.
RTOL = 1e-4


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("model_cache")


def _compare_with_plain(spec):
    """Every run of the xla session — the first runs alternate XLA's executable and TensorFlow's
    kernels until the cluster is decided, then two more — against plain TensorFlow."""
    forget_decisions()
    config = NpuConfig.from_dict({"npu_adapter_backend": "xla"}).to_config_proto()
    graphs = []
    for _ in range(2):
        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(spec.graph_def, name="")
        graphs.append(graph)
    with PlainSession(graph=graphs[0]) as sess:
        want = sess.run(spec.fetches, spec.feeds)
    with NpuSession(graph=graphs[1], config=config) as sess:
        for _ in range(2 + 2 * PAIRS + 2):
            got = sess.run(spec.fetches, spec.feeds)
            for w, g in zip(want, got):
                scale = float(np.max(np.abs(w))) or 1.0
                np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * scale)
        decided = runner_of(sess).runtime_stats()
        sess.run(spec.fetches, spec.feeds)
        stats = runner_of(sess).runtime_stats()
    forget_decisions()
    assert stats.compiles == decided.compiles == 1  # compiled once, on the second run
    assert all(st.status in ("compiled", "tensorflow") for st in stats.clusters.values())
    return stats


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="builds a corpus model; set NPU_ADAPTER_SLOW_TESTS=1")
def test_small_cnn_matches_plain_tensorflow(cache_dir):
    _compare_with_plain(models.get_model("small_cnn", cache_dir=cache_dir))


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "inception_v3", "bert_encoder"])
@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="large model; set NPU_ADAPTER_SLOW_TESTS=1")
def test_large_model_matches_plain_tensorflow(name, cache_dir):
    _compare_with_plain(models.get_model(name, cache_dir=cache_dir))
