"""Small real models and a transcript runner for the CLI tests (``tests/test_cli_*.py``).

The models are built with TensorFlow and frozen to ``.pb`` files, as a user would hand them to
``npu-adapter``: :func:`image_model` (``input:0`` of shape 1x16x16x3 → Conv2D → Relu →
MatMul → ``output:0``) and :func:`constant_model` (no input at all: constants → MatMul → Exp →
``out:0``).
"""

import dataclasses
import os
import re

import numpy as np
import tensorflow as tf

from npu_adapter import cli

tf1 = tf.compat.v1

IMAGE_SHAPE = (1, 16, 16, 3)
"""The shape of :func:`image_model`'s ``input:0``."""

# A Python repr in a message: None/True/False as words, a dict or tuple literal, a list of
# quoted strings, a float printed with 10 or more decimals.
REPR_PATTERNS = (
    re.compile(r"\bNone\b"), re.compile(r"\b(True|False)\b"), re.compile(r"\{'"),
    re.compile(r"\('[^']*', \("), re.compile(r"\[\('"), re.compile(r"\['[^']*', '"),
    re.compile(r"\d\.\d{10,}"),
)


def reprs_in(text):
    """The Python reprs found in ``text`` (see :data:`REPR_PATTERNS`)."""
    return [m.group(0) for pattern in REPR_PATTERNS for m in pattern.finditer(text)]


def image_model(folder, name="model.pb"):
    """Write :func:`image_model`'s frozen GraphDef to ``folder/name``; return the path."""
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, IMAGE_SHAPE, name="input")
        w = tf.constant(rng.standard_normal((3, 3, 3, 4)).astype(np.float32))
        h = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))
        h = tf.reshape(h, [1, 16 * 16 * 4])
        tf.matmul(h, tf.constant(rng.standard_normal((1024, 2)).astype(np.float32)),
                  name="output")
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(graph.as_graph_def().SerializeToString())
    return path


def constant_model(folder, name="constants.pb"):
    """A model without any input (``out:0`` computed from constants); return its path."""
    rng = np.random.default_rng(1)
    graph = tf.Graph()
    with graph.as_default():
        c = tf.constant(rng.standard_normal((4, 4)).astype(np.float32), name="c")
        tf.exp(tf.matmul(c, c), name="out")
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(graph.as_graph_def().SerializeToString())
    return path


def image_batch(folder, name="batch.npy", shape=IMAGE_SHAPE, dtype=np.float32):
    """A ``.npy`` file of ``shape`` and ``dtype``; return its path."""
    path = os.path.join(folder, name)
    np.save(path, np.random.default_rng(2).standard_normal(shape).astype(dtype))
    return path


@dataclasses.dataclass
class Transcript:
    """One CLI run: the exit code and what it printed."""

    code: int
    out: str
    err: str

    @property
    def err_lines(self):
        return self.err.splitlines()


def run(capsys, *argv):
    """Run ``npu-adapter argv...`` in this process (the console entry's ``main``)."""
    capsys.readouterr()
    code = cli.main([os.fspath(a) for a in argv])
    out, err = capsys.readouterr()
    return Transcript(code, out, err)


def tree(root):
    """``{relative path: mode bits}`` of ``root`` and everything below it."""
    found = {".": os.stat(root).st_mode & 0o777}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = os.lstat(path).st_mode & 0o777
    return found


def dump_tree(folder, name="dump", steps=2, scale=1.0):
    """A data dump (``enable_dump``) of :func:`image_model` run ``steps`` times, weights
    scaled by ``scale`` (another scale: another dump to compare); return its directory."""
    import io

    import npu_adapter
    from npu_adapter.config import NpuConfig
    from npu_adapter.datadump import DumpSession

    directory = os.path.join(folder, name)
    os.makedirs(directory)
    with open(image_model(folder, name + ".pb"), "rb") as f:
        graph_def = tf1.GraphDef.FromString(f.read())
    if scale != 1.0:
        for node in graph_def.node:
            if node.op == "Const" and node.attr["dtype"].type == tf.float32.as_datatype_enum:
                value = tf.make_ndarray(node.attr["value"].tensor) * scale
                node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
    config = NpuConfig(enable_dump=True, dump_path=directory, dump_mode="all")
    result = npu_adapter.rewrite(graph_def, config, fetches=["output:0"], feeds=["input:0"])
    with DumpSession.from_config(config, stream=io.StringIO()) as session:
        instrumented = session.instrument(result.graph_def)
        with tf.Graph().as_default():
            tf.import_graph_def(instrumented, name="")
            with tf1.Session() as sess:
                for step in range(steps):
                    batch = np.full(IMAGE_SHAPE, 0.1 * (step + 1), np.float32)
                    sess.run(result.tensor_map["output:0"], {"input:0": batch})
    return directory
