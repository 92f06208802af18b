"""Every corpus model gives the same numbers after rewriting, bit for bit, in full-offload and
mix mode (small models here; all of them with NPU_ADAPTER_SLOW_TESTS=1 and in the benchmark)."""

import os

import pytest

from bench import models
from npu_adapter.testing import assert_rewrite_equivalent

SLOW = os.environ.get("NPU_ADAPTER_SLOW_TESTS") == "1"
ALL = models.list_models()
SMALL = set(models.small_models())


@pytest.mark.parametrize("mix", [False, True], ids=["full_offload", "mix"])
@pytest.mark.parametrize("name", ALL)
def test_model_rewrite_is_bit_for_bit_equivalent(name, mix, tmp_path_factory):
    if name not in SMALL and not SLOW:
        pytest.skip("large model: set NPU_ADAPTER_SLOW_TESTS=1")
    spec = models.get_model(name)
    steps = 3 if spec.targets else 1
    result = assert_rewrite_equivalent(
        spec.graph_def, {"mix_compile_mode": mix}, spec.feeds, spec.fetches,
        targets=spec.targets, init=[spec.init_op] if spec.init_op else [], steps=steps)
    assert result.clusters, "the model should have at least one device cluster"
