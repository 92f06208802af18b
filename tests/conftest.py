"""Test-wide set-up: quiet TensorFlow, strict pass checks, and the backends the tests use."""

import contextlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Plain TensorFlow is not run-to-run reproducible with oneDNN's custom CPU ops (1-ulp differences
# on wide AddN fan-ins, seen on TF 2.21); bit-for-bit equivalence tests need them off. Must be set
# before TensorFlow is imported.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# Every rewrite in the tests verifies the graph after each pass and fails a pass that mutates its
# input or misreports `modified` (see npu_adapter.api).
os.environ["NPU_ADAPTER_CHECK_PASSES"] = "1"

import pytest

from npu_adapter.backends import register_backend
from npu_adapter.backends.cpu import CpuReferenceBackend, lower_to_function_calls
from npu_adapter.op_support import original_test_fixture_list


class OriginalLikeBackend(CpuReferenceBackend):
    """Partitions like the original adapter on an NPU: the device owns variables and graph
    inputs are ordinary candidates. Its graphs are inspected, not run."""

    name = "original_like"
    keeps_state_on_host = False
    per_op_node_support = True
    hoist_constants_bytes = None  # constants go into the GeOp, as in the original
    outside_cluster_reason = None  # the device runs every member of its GeOps

    def supports_node(self, node_def, op_def):
        return True, "supported"

    def lower(self, graph_def, clusters, ctx):
        return lower_to_function_calls(graph_def)


register_backend("original_like", OriginalLikeBackend, replace=True)


@pytest.fixture
def fixture_ops():
    """The original adapter's 37-op unit-test support list."""
    return original_test_fixture_list()


@pytest.fixture
def cann_fakes(tmp_path, monkeypatch):
    """The CANN fakes in place: a fake ``atc`` first on PATH (its runs logged), the fake
    ``acl`` importable, ``SOC_VERSION`` set; everything released and reset afterwards."""
    from cann_fakes import FAKES, CannFakes

    fakes = CannFakes(tmp_path / "cann_fakes")
    fakes.write_atc()
    for key, value in fakes.environ().items():
        if key != "PYTHONPATH":
            monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(FAKES)
    import acl

    acl.fake.reset()
    fakes.acl = acl
    yield fakes
    from npu_adapter.backends.cann import shutdown

    try:
        shutdown()
    finally:
        acl.fake.reset()


@pytest.fixture
def counted_passes(monkeypatch):
    """A list that grows by one per pass-pipeline run; the in-memory rewrite cache starts and
    ends empty."""
    from npu_adapter.pipeline.manager import PassManager
    from npu_adapter.session import rewrite_cache

    runs = []
    real_run = PassManager.run

    def counting_run(self, graph_def, ctx=None, **kwargs):
        runs.append(1)
        return real_run(self, graph_def, ctx, **kwargs)

    monkeypatch.setattr(PassManager, "run", counting_run)
    rewrite_cache.MEMORY.clear()
    yield runs
    rewrite_cache.MEMORY.clear()


@pytest.fixture(autouse=True)
def _eager_mode_stays_on(request):
    """A test that turns eager execution off (``npu_bridge.npu_init`` does on import, as the
    original) changes every later test of the process: such imports belong in a subprocess."""
    import tensorflow as tf

    eager_before = tf.executing_eagerly()
    yield
    if eager_before and not tf.executing_eagerly():
        # TensorFlow may refuse once graphs exist; the failure below says why either way.
        with contextlib.suppress(ValueError):
            tf.compat.v1.enable_eager_execution()
        pytest.fail(f"{request.node.nodeid} disabled eager execution for the whole process; "
                    "run that part in a subprocess")
