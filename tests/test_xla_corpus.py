"""The xla backend on the model corpus (bench/models.py): the same outputs as plain TensorFlow
within float32 tolerance, and no recompilation across runs.

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


def _compare_with_plain(spec, runs=3):
    config = NpuConfig.from_dict({"npu_adapter_backend": "xla"}).to_config_proto()
    outputs = {}
    for cls, cfg in ((PlainSession, None), (NpuSession, config)):
        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(spec.graph_def, name="")
        with cls(graph=graph, config=cfg) as sess:
            outputs[cls] = sess.run(spec.fetches, spec.feeds)
            if cls is NpuSession:
                first = runner_of(sess).runtime_stats().compiles
                for _ in range(runs):
                    again = sess.run(spec.fetches, spec.feeds)
                stats = runner_of(sess).runtime_stats()
    for want, got, repeat in zip(outputs[PlainSession], outputs[NpuSession], again):
        scale = float(np.max(np.abs(want))) or 1.0
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * scale)
        np.testing.assert_allclose(repeat, got, rtol=1e-6, atol=1e-6 * scale)
    assert stats.compiles == first >= 1  # compiled on the first run, never again
    assert any(st.status == "compiled" for st in stats.clusters.values())
    return stats


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="builds a corpus model; set NPU_ADAPTER_SLOW_TESTS=1")
def test_small_cnn_matches_plain_tensorflow(cache_dir):
    _compare_with_plain(models.get_model("small_cnn", cache_dir=cache_dir))


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "inception_v3", "bert_encoder"])
@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="large model; set NPU_ADAPTER_SLOW_TESTS=1")
def test_large_model_matches_plain_tensorflow(name, cache_dir):
    _compare_with_plain(models.get_model(name, cache_dir=cache_dir), runs=1)
