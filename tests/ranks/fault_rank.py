"""A rank that all-reduces in a loop and prints its progress (the fault test kills one)."""

import sys
import time

from npu_bridge.npu_init import get_rank_id, hccl_ops, tf


def main():
    rank = get_rank_id()
    value = tf.compat.v1.placeholder(tf.float32, [4])
    total = hccl_ops.allreduce(value, "sum")
    with tf.compat.v1.Session() as sess:
        for step in range(100000):
            sess.run(total, {value: [1.0] * 4})
            print(f"rank {rank} step {step}", flush=True)
            time.sleep(0.02)
    sys.exit(0)


if __name__ == "__main__":
    main()
