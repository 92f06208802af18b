"""The small model of the distributed training tests, and its data (rank independent).

``build`` makes the model in the default graph from explicit initial values, so a rank and the
single-process reference start from exactly the same numbers.
"""

import numpy as np
import tensorflow as tf

BATCH = 8
FEATURES = 4
VOCAB = 10
EMBED = 3
HIDDEN = 5


def data():
    """The whole batch: features, embedding ids, targets."""
    rng = np.random.RandomState(7)
    x = rng.rand(BATCH, FEATURES).astype(np.float32)
    ids = rng.randint(0, VOCAB, size=(BATCH,)).astype(np.int32)
    y = rng.rand(BATCH, 1).astype(np.float32)
    return x, ids, y


def shard(rank, size):
    """Rows of ``rank`` when the batch is split over ``size`` ranks."""
    rows = BATCH // size
    return slice(rank * rows, (rank + 1) * rows)


def initial_values(seed):
    """Initial variables; every rank draws its own (the broadcast makes rank 0's win)."""
    rng = np.random.RandomState(seed)
    return {
        "emb": rng.randn(VOCAB, EMBED).astype(np.float32) * 0.5,
        "w1": rng.randn(FEATURES + EMBED, HIDDEN).astype(np.float32) * 0.5,
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": rng.randn(HIDDEN, 1).astype(np.float32) * 0.5,
        "b2": np.zeros(1, np.float32),
    }


def build(x, ids, y, seed):
    """Loss and variables (a dict) of the model on the given tensors."""
    init = initial_values(seed)
    variables = {name: tf.compat.v1.get_variable(name, initializer=value, use_resource=True)
                 for name, value in init.items()}
    embedded = tf.gather(variables["emb"], ids)  # its gradient is IndexedSlices
    hidden = tf.tanh(tf.matmul(tf.concat([x, embedded], 1), variables["w1"]) + variables["b1"])
    prediction = tf.matmul(hidden, variables["w2"]) + variables["b2"]
    loss = tf.reduce_mean(tf.square(prediction - y))
    return loss, variables


def train_single_process(steps, learning_rate, session_class):
    """The reference: one process, the whole batch, plain SGD; returns the final values."""
    x, ids, y = data()
    with tf.Graph().as_default() as graph:
        loss, variables = build(tf.constant(x), tf.constant(ids), tf.constant(y), seed=0)
        train = tf.compat.v1.train.GradientDescentOptimizer(learning_rate).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    with session_class(graph=graph) as sess:
        sess.run(init)
        for _ in range(steps):
            sess.run(train)
        return sess.run(variables)


REF_ADAM_STEPS = 3


def ref_adam_loss(x, w):
    """A TF1 script's loss: through a ref variable ``w`` and ``tf.linalg.svd``, whose gradient
    needs an op the device list lacks, so full offload splits the step."""
    h = tf.matmul(x, w)
    return tf.reduce_mean(tf.square(h)) + 0.1 * tf.reduce_sum(tf.linalg.svd(h, compute_uv=False))


def ref_adam_initial(seed):
    """``w`` of the ref-variable Adam phase; every rank draws its own."""
    return np.random.RandomState(100 + seed).randn(FEATURES, 3).astype(np.float32)


def ref_adam_single_process(size, session_class):
    """``w`` after each Adam step in one process, minimising the mean of the ranks' losses
    (whose gradient is the mean of theirs), from rank 0's initial ``w``."""
    x, _, _ = data()
    with tf.Graph().as_default():
        w = tf.compat.v1.Variable(ref_adam_initial(0), use_resource=False)
        loss = tf.add_n([ref_adam_loss(tf.constant(x[shard(r, size)]), w)
                         for r in range(size)]) / size
        train = tf.compat.v1.train.AdamOptimizer(0.05).minimize(loss)
        with session_class() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            trace = []
            for _ in range(REF_ADAM_STEPS):
                sess.run(train)
                trace.append(sess.run(w))
    return np.array(trace)
