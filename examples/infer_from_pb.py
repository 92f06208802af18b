"""Online inference of a frozen classifier with a ``Classifier`` class (the sample program of
CANN's TensorFlow online-inference guide).

The original sample loads a downloaded ResNet-50 ``.pb`` and an ImageNet folder; here a small
CNN is trained first (no downloads; about a second) on synthetic images whose class is a bright
square in one of ten places, and frozen to ``--model_path``. Then the sample's flow runs
unchanged on 30 images the training never saw: load the pb, build the session with the
NpuOptimizer config, batch the data (padding the last batch with zeros), infer, count
top-1/top-5. The same flow runs once more without NpuOptimizer and the logits must be
bit-identical. (The accuracy says the model learned its task; under force_fp16 the NPU computes
in float16, which the CPU reference emulates only with ``npu_adapter_emulate_precision``.)

    python examples/infer_from_pb.py [--batchsize 4] [--model_path /tmp/cnn.pb]
"""

import argparse
import os
import sys
import tempfile

# The helpers set TensorFlow's environment before it is imported: keep this order.
# isort: off
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import compare, quiet, without_npu_optimizer

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig

import npu_bridge  # noqa: F401 - as in the original sample: installs the NPU session
# isort: on


tf1 = tf.compat.v1
IMAGE = (32, 32, 3)
CLASSES = 10


TRAIN_STEPS = 60


def synthetic_images(count, seed):
    """``count`` noisy images and their labels: class k has a bright 6x6 square at the k-th of
    ten places, so the class can be learned."""
    rs = np.random.RandomState(seed)
    labels = rs.randint(0, CLASSES, count)
    images = rs.rand(count, *IMAGE).astype(np.float32) * 0.5
    for image, label in zip(images, labels):
        row, col = divmod(int(label), 5)
        image[4 + 14 * row:10 + 14 * row, 1 + 6 * col:7 + 6 * col, :] += 1.0
    return images, labels


def make_model(path, seed=0):
    """Train a small CNN on synthetic images (:data:`TRAIN_STEPS` Adam steps) and freeze it to
    ``path``; return the held-out images and labels to infer."""
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(seed)
        images = tf1.placeholder(tf.float32, (None,) + IMAGE, name="input_data")
        labels = tf1.placeholder(tf.int64, [None], name="labels")
        x = images
        for i, channels in enumerate((16, 32)):
            # Explicit initializer seeds: Keras-backed layers ignore the graph seed.
            x = tf1.layers.conv2d(x, channels, 3, padding="same", activation=tf.nn.relu,
                                  kernel_initializer=tf1.glorot_uniform_initializer(seed=i),
                                  name=f"conv{i}")
            x = tf1.layers.max_pooling2d(x, 2, 2)
        x = tf1.layers.flatten(x)
        logits = tf1.layers.dense(x, CLASSES, name="final_dense",
                                  kernel_initializer=tf1.glorot_uniform_initializer(seed=9))
        loss = tf1.losses.sparse_softmax_cross_entropy(labels, logits)
        train = tf1.train.AdamOptimizer(1e-3).minimize(loss)
        data, target = synthetic_images(256, seed)
        with tf1.Session(graph=graph) as sess:  # no NpuOptimizer: plain TensorFlow
            sess.run(tf1.global_variables_initializer())
            for step in range(TRAIN_STEPS):
                batch = slice(32 * (step % 8), 32 * (step % 8) + 32)
                sess.run(train, {images: data[batch], labels: target[batch]})
            frozen = tf1.graph_util.convert_variables_to_constants(
                sess, graph.as_graph_def(), ["final_dense/BiasAdd"])
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(frozen.SerializeToString())
    return synthetic_images(30, seed + 1)   # 30 images: the last batch is padded


def npu_config():
    config = tf1.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    custom_op.parameter_map["use_off_line"].b = True
    custom_op.parameter_map["precision_mode"].s = tf.compat.as_bytes("force_fp16")
    custom_op.parameter_map["graph_run_mode"].i = 0
    config.graph_options.rewrite_options.remapping = RewriterConfig.OFF
    config.graph_options.rewrite_options.memory_optimization = RewriterConfig.OFF
    return config


class Classifier:
    """The sample's classifier: the session lives as long as the object (compile once)."""

    def __init__(self, model_path, batch_size, config):
        self.batch_size = batch_size
        self.graph = self._load_model(model_path)
        self.input_tensor = self.graph.get_tensor_by_name("input_data:0")
        self.output_tensor = self.graph.get_tensor_by_name("final_dense/BiasAdd:0")
        self.sess = tf1.Session(config=config, graph=self.graph)

    @staticmethod
    def _load_model(model_file):
        with tf.io.gfile.GFile(model_file, "rb") as gf:
            graph_def = tf1.GraphDef()
            graph_def.ParseFromString(gf.read())
        with tf.Graph().as_default() as graph:
            tf.graph_util.import_graph_def(graph_def, name="")
        return graph

    def do_infer(self, batch_data):
        return np.array([self.sess.run(self.output_tensor, {self.input_tensor: data})
                         for data in batch_data])

    def batch_process(self, image_data, label_data):
        n = image_data.shape[0]
        m = n % self.batch_size
        if m:
            pad = np.zeros((self.batch_size - m,) + IMAGE, np.float32)
            image_data = np.concatenate((image_data, pad), axis=0)
        batches = [image_data[i:i + self.batch_size] for i in range(0, n, self.batch_size)]
        labels = [label_data[i:i + self.batch_size] for i in range(0, n, self.batch_size)]
        return batches, labels

    def close(self):
        self.sess.close()


def run(model_path, batch_size, config, images, labels):
    classifier = Classifier(model_path, batch_size, config)
    try:
        batches, batch_labels = classifier.batch_process(images, labels)
        logits = classifier.do_infer(batches)
    finally:
        classifier.close()
    top1 = top5 = 0
    for out, lab in zip(logits, batch_labels):
        out = out[:len(lab)]
        top1 += int(np.sum(np.argmax(out, 1) == lab))
        top5 += int(np.sum([lab[i] in np.argsort(out[i])[-5:] for i in range(len(lab))]))
    return logits, top1, top5


def main(argv=None):
    quiet()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batchsize", type=int, default=4)
    parser.add_argument("--model_path", default=None)
    args = parser.parse_args(argv)
    path = args.model_path or os.path.join(tempfile.mkdtemp(), "cnn.pb")
    images, labels = make_model(path)
    npu_logits, top1, top5 = run(path, args.batchsize, npu_config(), images, labels)
    plain_logits, _, _ = run(path, args.batchsize, without_npu_optimizer(npu_config()),
                             images, labels)
    print(f"Top1 accuracy: {top1 / len(labels) * 100:.1f}%  Top5: {top5 / len(labels) * 100:.1f}%"
          f"  images: {len(labels)} held-out synthetic images (the CNN was trained for "
          f"{TRAIN_STEPS} steps on 256 others; chance is {100 / CLASSES:.0f}%)")
    return 0 if compare(list(npu_logits), list(plain_logits)) else 1


if __name__ == "__main__":
    sys.exit(main())
