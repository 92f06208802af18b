"""One rank of the collectives test: every hccl_ops collective on inputs that depend only on
the rank, results written to OUT_DIR/rank<r>.npz (+ .json) for the test to compare with NumPy.

Inputs (the test rebuilds them): see ``inputs(rank, size)``. Every rank runs the same number of
collective steps (three ``Session.run`` calls), as TensorFlow's collectives require.
"""

import json
import os
import sys

import numpy as np

from npu_bridge.npu_init import *  # noqa: F403 - the way Ascend scripts import it
from npu_bridge.npu_init import (
    create_group,
    get_group_rank_from_world_rank,
    get_local_rank_id,
    get_local_rank_size,
    get_rank_id,
    get_rank_size,
    get_world_rank_from_group_rank,
    hccl_ops,
    npu_allreduce,
    npu_config_proto,
    tf,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collective_inputs import inputs


def main(out_dir):
    rank, size = get_rank_id(), get_rank_size()
    data = inputs(rank, size)
    info = {"rank": rank, "size": size, "local_rank": get_local_rank_id(),
            "local_size": get_local_rank_size()}
    fetch = {}
    x = tf.constant(data["x"])
    for reduction in ("sum", "max", "min", "prod"):
        fetch[f"allreduce_{reduction}"] = hccl_ops.allreduce(x, reduction)
    fetch["allreduce_int32_sum"] = hccl_ops.allreduce(tf.constant(data["i32"]), "sum")
    fetch["allreduce_int64_max"] = hccl_ops.allreduce(tf.constant(data["i64"]), "max")
    fetch["allreduce_float16_sum"] = hccl_ops.allreduce(tf.constant(data["f16"]), "sum")
    fetch["allreduce_int8_min"] = hccl_ops.allreduce(tf.constant(data["i8"]), "min")
    fetch["allgather"] = hccl_ops.allgather(x, size)
    root = size - 1
    bcast = hccl_ops.broadcast([x, tf.constant(data["flags"])], root)
    fetch["broadcast_x"], fetch["broadcast_flags"] = bcast
    fetch["reduce_sum_root1"] = hccl_ops.reduce(x, "sum", 1)
    fetch["reduce_scatter_sum"] = hccl_ops.reduce_scatter(tf.constant(data["z"]), "sum", size)
    fetch["reduce_scatter_max"] = hccl_ops.reduce_scatter(tf.constant(data["z"]), "max", size)
    fetch["all_to_all_v"] = hccl_ops.all_to_all_v(
        tf.constant(data["a2a_data"]), data["a2a_send_counts"], data["a2a_send_displs"],
        data["a2a_recv_counts"], data["a2a_recv_displs"])
    fetch["all_to_all_v_c"] = hccl_ops.all_to_all_v_c(
        tf.constant(data["a2a_c_data"]), data["a2a_matrix"], rank)
    # Point to point, around the ring: send to the next rank, receive from the previous one.
    send_op = hccl_ops.send(tf.constant(data["p2p"]), 7, (rank + 1) % size)
    fetch["received"] = hccl_ops.receive([2, 3], tf.float32, 7, (rank - 1) % size)
    # The gradient of an all-reduce sum is the all-reduce sum of the incoming gradients.
    scale = tf.constant(float(rank + 1))
    fetch["allreduce_grad"] = tf.gradients(
        tf.reduce_sum(hccl_ops.allreduce(x * scale, "sum")), x)[0]
    # npu_allreduce: the mean of a dense tensor; IndexedSlices with rank + 1 rows are gathered.
    slices = tf.IndexedSlices(tf.constant(data["rows"]), tf.constant(data["row_ids"]),
                              tf.constant([10, 3]))
    mean, none, gathered_slices = npu_allreduce([x, None, slices], "sum")
    fetch["npu_allreduce_sum"] = mean
    fetch["npu_allreduce_slices_values"] = gathered_slices.values
    fetch["npu_allreduce_slices_indices"] = gathered_slices.indices
    fetch["npu_allreduce_mean"] = npu_allreduce(x)
    info["none_stays_none"] = none is None
    # A subgroup of the even ranks (only its members build its ops).
    evens = list(range(0, size, 2))
    if rank % 2 == 0 and len(evens) > 1:
        create_group("evens", len(evens), evens)
        info["evens_rank"] = get_rank_id("evens")
        info["evens_size"] = get_rank_size("evens")
        info["evens_world_of_last"] = get_world_rank_from_group_rank("evens", len(evens) - 1)
        info["evens_group_of_me"] = get_group_rank_from_world_rank(rank, "evens")
        fetch["evens_allreduce"] = hccl_ops.allreduce(x, "sum", group="evens")
    # A tensor whose shape changes between runs (the instance key follows the shape).
    ragged = tf.compat.v1.placeholder(tf.float32, [None, 3])
    gathered = hccl_ops.allgather(ragged, size)
    with tf.compat.v1.Session(config=npu_config_proto()) as sess:  # rewritten: an NpuSession
        values = sess.run({**fetch, "_send": send_op})
        values.pop("_send")
        values["gather_dynamic_2"] = sess.run(gathered, {ragged: data["dyn"][:2]})
        values["gather_dynamic_3"] = sess.run(gathered, {ragged: data["dyn"]})
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **values)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump(info, handle)
    print(f"rank {rank} of {size}: {len(values)} results", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
