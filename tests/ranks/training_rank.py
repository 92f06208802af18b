"""One rank of the distributed training tests; results go to OUT_DIR/rank<r>.npz (+ .json).

1. ``equiv``: the model of ``training_model`` on this rank's shard of the batch, every rank
   starting from its own initial values; ``NPUBroadcastGlobalVariablesHook`` in a
   ``MonitoredTrainingSession`` gives them rank 0's, ``NPUDistributedOptimizer`` (two fused
   segments by ``set_split_strategy_by_idx``) averages the gradients; STEPS SGD steps.
2. ``agree``: a linear model per rank, not averaged, with ``NPULossScaleOptimizer(...,
   is_distributed=True)``; at step OVERFLOW_STEP rank 1's input is inf: every rank must skip.
3. ``npuopt``: the same data averaged with ``NPUOptimizer(is_distributed=True,
   is_loss_scale=True)``.
4. ``sharded``: a linear model of one variable per feature, averaged with
   ``NPUDistributedOptimizer(is_weight_update_sharding=True)``.
5. ``keras``: a Keras model in graph mode with ``NPUBroadcastGlobalVariablesCallback`` and
   ``npu_keras_optimizer``.
6. ``ref_adam``: a TF1 ref variable trained by ``NPUDistributedOptimizer(AdamOptimizer)`` with a
   loss through ``tf.linalg.svd`` (the step is split between host and device), every rank
   starting from its own ``w`` and ``broadcast_global_variables(0)`` run once.
7. the rank getters of ``npu_init`` after ``init_resource``.
"""

import json
import os
import sys

import numpy as np

from npu_bridge.npu_init import *  # noqa: F403 - the way Ascend scripts import it
from npu_bridge.npu_init import (
    ExponentialUpdateLossScaleManager,
    NPUBroadcastGlobalVariablesCallback,
    NPUBroadcastGlobalVariablesHook,
    NPUDistributedOptimizer,
    NPULossScaleOptimizer,
    NPUOptimizer,
    get_npu_local_rank_id,
    get_npu_local_rank_size,
    get_npu_rank_id,
    get_npu_rank_size,
    get_rank_id,
    get_rank_size,
    init_resource,
    npu_config_proto,
    npu_keras_optimizer,
    set_split_strategy_by_idx,
    shutdown_resource,
    tf,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import training_model

STEPS = int(os.environ.get("TRAINING_STEPS", "50"))
LEARNING_RATE = 0.1
AGREE_STEPS = 10
OVERFLOW_STEP = 4


def equivalence(rank, size):
    x, ids, y = training_model.data()
    rows = training_model.shard(rank, size)
    with tf.Graph().as_default():
        loss, variables = training_model.build(tf.constant(x[rows]), tf.constant(ids[rows]),
                                               tf.constant(y[rows]), seed=rank)
        set_split_strategy_by_idx([1])  # dense gradients w1, b1 | w2, b2; emb is gathered
        step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = NPUDistributedOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE))
        train = optimizer.minimize(loss, global_step=step)
        hooks = [NPUBroadcastGlobalVariablesHook(0, rank),
                 tf.compat.v1.train.StopAtStepHook(last_step=STEPS)]
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks,
                                                         config=npu_config_proto()) as sess:
            while not sess.should_stop():
                sess.run(train)
            # StopAtStepHook stops after the step that reaches STEPS; read the final values
            # with the session itself (no hooks).
            return sess.run_step_fn(lambda step_context: step_context.session.run(variables))


def _linear_graph(rank, size, optimizer_factory, manager):
    x, _, y = training_model.data()
    rows = training_model.shard(rank, size)
    poison = tf.compat.v1.placeholder(tf.float32, [])
    w = tf.compat.v1.get_variable("w", initializer=np.full((x.shape[1], 1), 0.5, np.float32),
                                  use_resource=True)
    prediction = tf.matmul(tf.constant(x[rows]) * poison, w)
    loss = tf.reduce_mean(tf.square(prediction - tf.constant(y[rows])))
    step = tf.compat.v1.train.get_or_create_global_step()
    train = optimizer_factory(manager).minimize(loss, global_step=step)
    return poison, w, step, train


def loss_scaling(rank, size, optimizer_factory):
    """Per step: (loss scale after the step, global step, weights)."""
    with tf.Graph().as_default():
        manager = ExponentialUpdateLossScaleManager(
            init_loss_scale=2 ** 8, incr_every_n_steps=3, decr_every_n_nan_or_inf=1,
            decr_ratio=0.5)
        poison, w, step, train = _linear_graph(rank, size, optimizer_factory, manager)
        scale = manager.get_loss_scale()
        init = tf.compat.v1.global_variables_initializer()
        scales, steps, weights = [], [], []
        with tf.compat.v1.Session(config=npu_config_proto()) as sess:
            sess.run(init)
            for index in range(AGREE_STEPS):
                bad = index == OVERFLOW_STEP and rank == 1
                sess.run(train, {poison: np.inf if bad else 1.0})
                value_scale, value_step, value_w = sess.run([scale, step, w])
                scales.append(value_scale)
                steps.append(value_step)
                weights.append(value_w)
    return np.array(scales), np.array(steps), np.array(weights)


def weight_update_sharding(rank, size):
    """Weights after each of AGREE_STEPS steps (one variable per feature, each updated on its
    owner rank and broadcast)."""
    x, _, y = training_model.data()
    rows = training_model.shard(rank, size)
    with tf.Graph().as_default():
        weights = [tf.compat.v1.get_variable(f"w{j}", initializer=[[0.5]], use_resource=True)
                   for j in range(x.shape[1])]
        features = tf.constant(x[rows])
        prediction = tf.add_n([features[:, j:j + 1] * weights[j] for j in range(x.shape[1])])
        loss = tf.reduce_mean(tf.square(prediction - tf.constant(y[rows])))
        optimizer = NPUDistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.05),
                                            is_weight_update_sharding=True)
        train = optimizer.minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
        trace = []
        with tf.compat.v1.Session(config=npu_config_proto()) as sess:
            sess.run(init)
            for _ in range(AGREE_STEPS):
                sess.run(train)
                trace.append(np.concatenate(sess.run(weights)))
    return np.array(trace)


def keras_callback(rank, size):
    keras = tf.keras
    x, _, y = training_model.data()
    rows = training_model.shard(rank, size)
    kernel = np.full((x.shape[1], 1), 0.1 * (rank + 1), np.float32)
    with tf.Graph().as_default():
        model = keras.Sequential([keras.layers.Dense(
            1, input_shape=(x.shape[1],), kernel_initializer=keras.initializers.Constant(kernel),
            bias_initializer="zeros")])
        model.compile(optimizer=npu_keras_optimizer(keras.optimizers.legacy.SGD(0.1)), loss="mse")
        model.fit(x[rows], y[rows], batch_size=x[rows].shape[0], epochs=1, verbose=0,
                  shuffle=False, callbacks=[NPUBroadcastGlobalVariablesCallback(0)])
        kernel_after, bias_after = model.get_weights()
    keras.backend.clear_session()
    return kernel_after, bias_after


def ref_adam(rank, size):
    """``w`` after each step."""
    from npu_bridge.estimator.npu.npu_hook import broadcast_global_variables

    x, _, _ = training_model.data()
    with tf.Graph().as_default():
        w = tf.compat.v1.Variable(training_model.ref_adam_initial(rank), use_resource=False)
        loss = training_model.ref_adam_loss(tf.constant(x[training_model.shard(rank, size)]), w)
        train = NPUDistributedOptimizer(tf.compat.v1.train.AdamOptimizer(0.05)).minimize(loss)
        broadcast = broadcast_global_variables(0)
        with tf.compat.v1.Session(config=npu_config_proto()) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(broadcast)
            trace = []
            for _ in range(training_model.REF_ADAM_STEPS):
                sess.run(train)
                trace.append(sess.run(w))
    return np.array(trace)


def main(out_dir):
    rank, size = get_rank_id(), get_rank_size()
    results = {f"equiv_{name}": value for name, value in equivalence(rank, size).items()}

    def loss_scale_only(manager):
        return NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.05), manager,
                                     is_distributed=True)

    def averaged(manager):
        return NPUOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.05), manager,
                            is_distributed=True, is_loss_scale=True)

    for name, factory in (("agree", loss_scale_only), ("npuopt", averaged)):
        scales, steps, weights = loss_scaling(rank, size, factory)
        results.update({f"{name}_scales": scales, f"{name}_steps": steps,
                        f"{name}_weights": weights})
    results["sharded_weights"] = weight_update_sharding(rank, size)
    results["keras_kernel"], results["keras_bias"] = keras_callback(rank, size)
    results["ref_adam_weights"] = ref_adam(rank, size)
    with tf.Graph().as_default():
        sess, shutdown = init_resource()
        info = {"rank_id": get_npu_rank_id(), "rank_size": get_npu_rank_size(),
                "local_rank_id": get_npu_local_rank_id(),
                "local_rank_size": get_npu_local_rank_size()}
        shutdown_resource(sess, shutdown)
        sess.close()
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **results)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump(info, handle)
    print(f"rank {rank} of {size}: trained", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
