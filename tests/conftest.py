"""Test-wide set-up: quiet TensorFlow, strict pass checks, and the backends the tests use."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Every rewrite in the tests verifies the graph after each pass and fails a pass that mutates its
# input or misreports `modified` (see npu_adapter.api).
os.environ["NPU_ADAPTER_CHECK_PASSES"] = "1"

import pytest  # noqa: E402

from npu_adapter.backends import register_backend  # noqa: E402
from npu_adapter.backends.cpu import CpuReferenceBackend, lower_to_function_calls  # noqa: E402
from npu_adapter.op_support import original_test_fixture_list  # noqa: E402


class OriginalLikeBackend(CpuReferenceBackend):
    """Partitions like the original adapter on an NPU: the device owns variables and graph
    inputs are ordinary candidates. Its graphs are inspected, not run."""

    name = "original_like"
    keeps_state_on_host = False

    def supports_node(self, node_def, op_def):
        return True, "supported"

    def lower(self, graph_def, clusters, ctx):
        return lower_to_function_calls(graph_def)


register_backend("original_like", OriginalLikeBackend, replace=True)


@pytest.fixture
def fixture_ops():
    """The original adapter's 37-op unit-test support list."""
    return original_test_fixture_list()
