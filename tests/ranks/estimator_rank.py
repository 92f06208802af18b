"""One rank of the NPUEstimator test (TensorFlow 2.15): the model of ``training_model`` on this
rank's shard, every rank starting from its own initial values; NPUEstimator adds the broadcast
hook, NPUDistributedOptimizer averages. Final variables go to OUT_DIR/rank<r>.npz."""

import os
import sys

import numpy as np

from npu_bridge.npu_init import (
    NPUDistributedOptimizer,
    NPUEstimator,
    NPUEstimatorSpec,
    NPURunConfig,
    get_rank_id,
    get_rank_size,
    tf,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import training_model

STEPS = 10


def main(out_dir):
    rank, size = get_rank_id(), get_rank_size()
    x, ids, y = training_model.data()
    rows = training_model.shard(rank, size)

    def input_fn():
        features = {"x": x[rows], "ids": ids[rows]}
        dataset = tf.compat.v1.data.Dataset.from_tensor_slices((features, y[rows]))
        return dataset.batch(len(y[rows]), drop_remainder=True).repeat()

    def model_fn(features, labels, mode):
        loss, _ = training_model.build(features["x"], features["ids"], labels, seed=rank)
        optimizer = NPUDistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
        train = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
        return NPUEstimatorSpec(mode, loss=loss, train_op=train)

    config = NPURunConfig(model_dir=os.path.join(out_dir, f"model{rank}"),
                          save_checkpoints_steps=STEPS)
    estimator = NPUEstimator(model_fn=model_fn, config=config)
    estimator.train(input_fn, max_steps=STEPS)
    values = {name: estimator.get_variable_value(name)
              for name in training_model.initial_values(0)}
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **values)
    print(f"rank {rank} of {size}: estimator trained", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
