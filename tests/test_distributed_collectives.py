"""Every hccl_ops collective at 2 and 3 ranks (processes on loopback) against NumPy.

Each rank runs ``tests/ranks/collectives_rank.py`` (one launch per rank count); the references
below are computed here from the same per-rank inputs.
"""

import json
import sys

import numpy as np
import pytest

from npu_adapter.distributed import groups

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent / "ranks"))
from collective_inputs import inputs
from harness import run_job


def _all_to_all_v_reference(ins, rank):
    size = len(ins)
    counts = ins[rank]["a2a_recv_counts"]
    displs = ins[rank]["a2a_recv_displs"]
    out = np.zeros(int(max(displs + counts)), np.float32)
    for source in range(size):
        start = ins[source]["a2a_send_displs"][rank]
        count = ins[source]["a2a_send_counts"][rank]
        assert count == counts[source]
        out[displs[source]:displs[source] + count] = ins[source]["a2a_data"][start:start + count]
    return out


def _all_to_all_v_c_reference(ins, rank):
    matrix = ins[rank]["a2a_matrix"]
    parts = []
    for source in range(len(ins)):
        offset = int(matrix[source][:rank].sum())
        parts.append(ins[source]["a2a_c_data"][offset:offset + matrix[source][rank]])
    return np.concatenate(parts)


def _check_rank(rank, size, got, info, ins):
    xs = np.stack([item["x"] for item in ins])
    np.testing.assert_allclose(got["allreduce_sum"], xs.sum(0), rtol=1e-6)
    np.testing.assert_array_equal(got["allreduce_max"], xs.max(0))
    np.testing.assert_array_equal(got["allreduce_min"], xs.min(0))
    np.testing.assert_allclose(got["allreduce_prod"], xs.prod(0), rtol=1e-6)
    np.testing.assert_array_equal(got["allreduce_int32_sum"],
                                  np.sum([item["i32"] for item in ins], 0))
    np.testing.assert_array_equal(got["allreduce_int64_max"],
                                  np.max([item["i64"] for item in ins], 0))
    assert got["allreduce_float16_sum"].dtype == np.float16
    np.testing.assert_allclose(got["allreduce_float16_sum"].astype(np.float32),
                               np.sum([item["f16"].astype(np.float32) for item in ins], 0),
                               rtol=2e-3)
    assert got["allreduce_int8_min"].dtype == np.int8
    np.testing.assert_array_equal(got["allreduce_int8_min"],
                                  np.min([item["i8"] for item in ins], 0))
    np.testing.assert_array_equal(got["allgather"], np.concatenate(xs))
    np.testing.assert_array_equal(got["broadcast_x"], ins[size - 1]["x"])
    assert got["broadcast_flags"].dtype == np.bool_
    np.testing.assert_array_equal(got["broadcast_flags"], ins[size - 1]["flags"])
    np.testing.assert_allclose(got["reduce_sum_root1"], xs.sum(0), rtol=1e-6)
    zs = np.stack([item["z"] for item in ins])
    np.testing.assert_allclose(got["reduce_scatter_sum"], zs.sum(0)[2 * rank:2 * rank + 2],
                               rtol=1e-6)
    np.testing.assert_array_equal(got["reduce_scatter_max"], zs.max(0)[2 * rank:2 * rank + 2])
    np.testing.assert_array_equal(got["all_to_all_v"], _all_to_all_v_reference(ins, rank))
    assert got["all_to_all_v_c"].dtype == np.int32
    np.testing.assert_array_equal(got["all_to_all_v_c"], _all_to_all_v_c_reference(ins, rank))
    np.testing.assert_array_equal(got["received"], ins[(rank - 1) % size]["p2p"])
    np.testing.assert_array_equal(got["allreduce_grad"],
                                  np.full((2, 3), (rank + 1) * size, np.float32))
    np.testing.assert_allclose(got["npu_allreduce_sum"], xs.sum(0), rtol=1e-6)
    np.testing.assert_allclose(got["npu_allreduce_mean"], xs.sum(0) / size, rtol=1e-6)
    np.testing.assert_array_equal(got["npu_allreduce_slices_values"],
                                  np.concatenate([item["rows"] for item in ins]))
    np.testing.assert_array_equal(got["npu_allreduce_slices_indices"],
                                  np.concatenate([item["row_ids"] for item in ins]))
    assert info["none_stays_none"]
    dyn = [item["dyn"] for item in ins]
    np.testing.assert_array_equal(got["gather_dynamic_2"], np.concatenate([d[:2] for d in dyn]))
    np.testing.assert_array_equal(got["gather_dynamic_3"], np.concatenate(dyn))
    assert (info["rank"], info["size"]) == (rank, size)
    assert (info["local_rank"], info["local_size"]) == (rank, size)  # all on 127.0.0.1
    evens = list(range(0, size, 2))
    if rank % 2 == 0 and len(evens) > 1:
        np.testing.assert_allclose(got["evens_allreduce"], xs[evens].sum(0), rtol=1e-6)
        assert info["evens_rank"] == evens.index(rank) == info["evens_group_of_me"]
        assert (info["evens_size"], info["evens_world_of_last"]) == (len(evens), evens[-1])
    else:
        assert "evens_allreduce" not in got


@pytest.mark.parametrize("size", [2, 3])
def test_every_collective_matches_numpy(tmp_path, size):
    status, out, err = run_job(size, "collectives_rank.py", [tmp_path], collective_timeout=60)
    assert status == 0, out + err
    ins = [inputs(rank, size) for rank in range(size)]
    for rank in range(size):
        with np.load(tmp_path / f"rank{rank}.npz") as data:
            got = {key: data[key] for key in data.files}
        info = json.loads((tmp_path / f"rank{rank}.json").read_text())
        _check_rank(rank, size, got, info, ins)
        assert f"[{rank}] rank {rank} of {size}:" in out


def test_world_group_key_is_fixed():
    assert groups.WORLD_GROUP_KEY == 1 and groups.WORLD_GROUP == "hccl_world_group"
