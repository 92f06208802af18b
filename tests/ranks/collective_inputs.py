"""Inputs of ``collectives_rank.py``, shared with the test that computes the references."""

import numpy as np


def _a2a_counts(size):
    # send[i][j]: elements rank i sends to rank j (0 allowed).
    return np.array([[(i + 2 * j) % 3 for j in range(size)] for i in range(size)], np.int64)


def inputs(rank, size):
    """The inputs of ``rank`` in a job of ``size`` ranks."""
    rng = np.random.RandomState(1000 + rank)
    counts = _a2a_counts(size)
    send_counts = counts[rank]
    gap = 1  # a hole between the blocks of the send buffer
    send_displs = np.array([int(sum(send_counts[:j])) + gap * j for j in range(size)], np.int64)
    a2a_len = int(send_displs[-1] + send_counts[-1]) + 2
    recv_counts = counts[:, rank]
    recv_displs = np.array([int(sum(recv_counts[:i])) + i for i in range(size)], np.int64)
    matrix = np.array([[i + 2 * j + 1 for j in range(size)] for i in range(size)], np.int64)
    return {
        "x": (rng.rand(2, 3) * 4 - 2).astype(np.float32),
        "i32": rng.randint(-50, 50, size=(3,)).astype(np.int32),
        "i64": rng.randint(-10**12, 10**12, size=(4,)).astype(np.int64),
        "f16": rng.rand(5).astype(np.float16),
        "i8": rng.randint(-100, 100, size=(4,)).astype(np.int8),
        "flags": rng.rand(4) > 0.5,
        "z": rng.rand(2 * size, 3).astype(np.float32),
        "a2a_data": (100 * rank + np.arange(a2a_len)).astype(np.float32),
        "a2a_send_counts": send_counts,
        "a2a_send_displs": send_displs,
        "a2a_recv_counts": recv_counts,
        "a2a_recv_displs": recv_displs,
        "a2a_c_data": (1000 * rank + np.arange(int(matrix[rank].sum()))).astype(np.int32),
        "a2a_matrix": matrix,
        "p2p": np.full((2, 3), rank + 0.5, np.float32),
        "dyn": rng.rand(3, 3).astype(np.float32),
        "rows": rng.rand(rank + 1, 3).astype(np.float32),
        "row_ids": (np.arange(rank + 1) + 2 * rank).astype(np.int64),
    }
