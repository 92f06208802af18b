"""Reproducible model corpus: real architectures as TF1 GraphDefs, built from fixed seeds.

Nothing is downloaded and no pretrained weights are used: every model is built in a
``tf.compat.v1`` graph with seeded initialisers, then frozen (inference models) or kept with its
variables (training models). The result is cached on disk, keyed by model name, the model's
recipe version, the cache format and the TensorFlow version, so a second ``get_model`` is a file
read. Building is deterministic: the same name on the same TensorFlow version gives a
byte-identical GraphDef (``SerializeToString(deterministic=True)``).

The cache lives in ``<repo>/.cache/models/`` (git-ignored) unless ``NPU_ADAPTER_MODEL_CACHE``
names another directory. Each entry is one ``.npz`` file (GraphDef bytes, JSON metadata and the
sample feeds; read back with ``allow_pickle=False``), written to a temporary file and renamed into
place so concurrent builders never see a half-written entry.

The Keras application models (``resnet50``, ``mobilenet_v2``, ``inception_v3``) need Keras 2
(``tf_keras``, or ``tf.keras`` on TensorFlow 2.15): Keras 3 applications do not build in a
``tf.compat.v1`` graph. The LSTM needs the legacy ``LSTMCell``, which TensorFlow 2.16+ only
provides through ``tf_keras`` as well. The other models use raw TensorFlow ops only.
"""

import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import re
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError

from npu_adapter.errors import NpuConfigError

__all__ = [
    "CACHE_ENV",
    "SEED",
    "ModelSpec",
    "build_model",
    "cache_path",
    "default_cache_dir",
    "get_model",
    "list_models",
    "saved_model",
    "small_models",
]

CACHE_ENV = "NPU_ADAPTER_MODEL_CACHE"
"""Environment variable that overrides the cache directory."""

SEED = 0
"""Seed of every model in the corpus (graph-level seed, Keras seeds and sample feeds)."""

# Bump when the layout of a cache entry changes; a model's own version lives in its recipe.
_FORMAT_VERSION = "1"

_LOG = logging.getLogger(__name__)

_SERVING_KEY = tf.compat.v1.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY


@dataclasses.dataclass
class ModelSpec:
    """One model of the corpus, ready to import and run.

    ``feeds`` maps tensor names (``"input:0"``) to deterministic sample inputs and ``fetches``
    lists tensor names; both are valid in ``graph_def``. ``targets`` are op names to run without
    fetching (the train op of training graphs). ``init_op`` is the variable initialiser of
    training graphs (``None`` for frozen graphs). ``saved_model_dir`` is set by
    :func:`saved_model`. ``graph_bytes`` holds the serialized GraphDef instead of ``graph_def``
    when :func:`get_model` was asked for it.
    """

    name: str
    graph_def: tf.compat.v1.GraphDef
    feeds: Dict[str, np.ndarray]
    fetches: List[str]
    targets: List[str]
    kind: str
    size: str
    init_op: Optional[str] = None
    saved_model_dir: Optional[str] = None
    graph_bytes: Optional[bytes] = None


@dataclasses.dataclass
class _Built:
    feeds: Dict[str, np.ndarray]
    fetches: List[str]
    targets: List[str] = dataclasses.field(default_factory=list)
    init_op: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class _Recipe:
    name: str
    kind: str
    size: str
    version: str
    builder: Callable[[np.random.RandomState], _Built]


_RECIPES: Dict[str, _Recipe] = {}


def _recipe(name, *, kind, size, version="1"):
    def register(builder):
        _RECIPES[name] = _Recipe(name, kind, size, version, builder)
        return builder

    return register


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def list_models() -> List[str]:
    """Names of all models of the corpus, in a fixed order."""
    return list(_RECIPES)


def small_models() -> List[str]:
    """Names of the models cheap enough for CI (build, freeze and one run in a few seconds)."""
    return [name for name, recipe in _RECIPES.items() if recipe.size == "small"]


def default_cache_dir() -> Path:
    """The cache directory: ``$NPU_ADAPTER_MODEL_CACHE`` or ``<repo>/.cache/models``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / ".cache" / "models"


def cache_path(name: str, *, cache_dir=None) -> Path:
    """Path of the cache entry of model ``name`` for the running TensorFlow version."""
    recipe = _get_recipe(name)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    tf_version = re.sub(r"[^A-Za-z0-9._-]", "_", tf.__version__)
    return directory / f"{recipe.name}-v{recipe.version}-f{_FORMAT_VERSION}-tf{tf_version}.npz"


def get_model(name: str, *, cache_dir=None, serialized=False) -> ModelSpec:
    """Return model ``name``, loading it from the cache or building (and caching) it.

    ``cache_dir`` overrides the default directory (see :func:`default_cache_dir`). Each call
    returns a new :class:`ModelSpec`, so callers may modify it freely. With ``serialized`` the
    spec holds the GraphDef's bytes in ``graph_bytes`` instead of the parsed ``graph_def`` (for
    an import that never needs it parsed: BERT-base's 438 MB take ~2 s to parse).
    """
    path = cache_path(name, cache_dir=cache_dir)
    if path.exists():
        try:
            return _load(path, serialized)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, DecodeError) as exc:
            # A truncated or foreign file must not break the corpus: rebuild and overwrite it.
            _LOG.warning("model cache entry %s is unreadable (%s); rebuilding it", path, exc)
    spec = build_model(name)
    _store(spec, path)
    if serialized:
        spec.graph_bytes = spec.graph_def.SerializeToString(deterministic=True)
        spec.graph_def = None
    return spec


def build_model(name: str) -> ModelSpec:
    """Build model ``name`` from scratch, without touching the cache."""
    recipe = _get_recipe(name)
    graph = tf.Graph()
    with graph.as_default(), _seeded(SEED), _v1_control_flow():
        built = recipe.builder(np.random.RandomState(SEED))
        if recipe.kind == "training":
            graph_def = graph.as_graph_def()
        else:
            graph_def = _freeze(graph, built)
    return ModelSpec(
        name=recipe.name,
        graph_def=graph_def,
        feeds=built.feeds,
        fetches=list(built.fetches),
        targets=list(built.targets),
        kind=recipe.kind,
        size=recipe.size,
        init_op=built.init_op,
    )


def saved_model(name: str, out_dir, *, frozen: bool = False, cache_dir=None) -> ModelSpec:
    """Write inference model ``name`` as a TF1 SavedModel in ``out_dir`` and return its spec.

    The SavedModel has the ``serve`` tag and a ``serving_default`` predict signature whose input
    keys are the feed op names and whose output keys are the fetch op names (with ``_<k>`` for
    output ``k > 0``). By default the graph keeps its variables (rebuilt from the same seeds, so
    the values equal the frozen model's constants); ``frozen=True`` saves the frozen GraphDef.
    ``out_dir`` must not exist or be empty. The returned spec has ``saved_model_dir`` set.
    """
    recipe = _get_recipe(name)
    if recipe.kind != "inference":
        inference = [n for n, r in _RECIPES.items() if r.kind == "inference"]
        raise NpuConfigError(
            "model", name, f"an inference model, one of {inference}", detail="training graphs "
            "have no serving signature"
        )
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise NpuConfigError("out_dir", str(out_dir), "a directory that does not exist or is empty")
    spec = get_model(name, cache_dir=cache_dir)
    graph = tf.Graph()
    with graph.as_default():
        if frozen:
            tf.import_graph_def(spec.graph_def, name="")
            init = None
        else:
            with _seeded(SEED), _v1_control_flow():
                recipe.builder(np.random.RandomState(SEED))
            init = tf.compat.v1.global_variables_initializer()
        inputs = {_signature_key(t): graph.get_tensor_by_name(t) for t in spec.feeds}
        outputs = {_signature_key(t): graph.get_tensor_by_name(t) for t in spec.fetches}
        signature = tf.compat.v1.saved_model.predict_signature_def(inputs, outputs)
        with tf.compat.v1.Session(graph=graph) as sess:
            if init is not None:
                sess.run(init)
            builder = tf.compat.v1.saved_model.Builder(str(out_dir))
            builder.add_meta_graph_and_variables(
                sess,
                [tf.compat.v1.saved_model.tag_constants.SERVING],
                signature_def_map={_SERVING_KEY: signature},
            )
            builder.save()
    spec.saved_model_dir = str(out_dir)
    return spec


# --------------------------------------------------------------------------------------------
# Building, freezing, caching
# --------------------------------------------------------------------------------------------


def _get_recipe(name):
    try:
        return _RECIPES[name]
    except KeyError:
        raise NpuConfigError("model", name, f"one of {list(_RECIPES)}") from None


def _signature_key(tensor_name):
    op_name, _, index = tensor_name.partition(":")
    return op_name if index in ("", "0") else f"{op_name}_{index}"


def _op_name(tensor_name):
    return tensor_name.partition(":")[0]


@contextlib.contextmanager
def _seeded(seed):
    """Seed TF's graph-level RNG and the Python RNGs Keras draws initialiser seeds from.

    Keras 2 gives every unseeded initialiser a seed from ``random`` (unless a program installed
    its own generator with ``keras.utils.set_random_seed``, which nothing here does), so those
    are seeded here and restored afterwards: building a model must not change the caller's
    random state.
    """
    tf.compat.v1.set_random_seed(seed)
    py_state = random.getstate()
    np_state = np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


@contextlib.contextmanager
def _v1_control_flow():
    """Build with TF1 control flow (Enter/Exit/Switch/Merge), as TF 1.15 scripts produce it."""
    was_v2 = tf.compat.v1.control_flow_v2_enabled()
    tf.compat.v1.disable_control_flow_v2()
    try:
        yield
    finally:
        if was_v2:
            tf.compat.v1.enable_control_flow_v2()


def _freeze(graph, built):
    init = tf.compat.v1.global_variables_initializer()
    outputs = sorted({_op_name(t) for t in built.fetches})
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        return tf.compat.v1.graph_util.convert_variables_to_constants(
            sess, graph.as_graph_def(), outputs
        )


def _store(spec, path):
    meta = {
        "name": spec.name,
        "kind": spec.kind,
        "size": spec.size,
        "fetches": spec.fetches,
        "targets": spec.targets,
        "init_op": spec.init_op,
        "feeds": list(spec.feeds),
        "tensorflow": tf.__version__,
    }
    arrays = {
        "graph_def": np.frombuffer(spec.graph_def.SerializeToString(deterministic=True), np.uint8),
        "meta": np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), np.uint8),
    }
    for i, value in enumerate(spec.feeds.values()):
        arrays[f"feed_{i}"] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _load(path, serialized=False):
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(data["meta"].tobytes().decode("utf-8"))
        graph_bytes = data["graph_def"].tobytes()
        graph_def = None
        if not serialized:
            graph_def = tf.compat.v1.GraphDef()
            graph_def.ParseFromString(graph_bytes)
            graph_bytes = None
        elif not graph_bytes:
            raise ValueError("empty GraphDef")
        feeds = {name: data[f"feed_{i}"] for i, name in enumerate(meta["feeds"])}
    return ModelSpec(
        name=meta["name"],
        graph_def=graph_def,
        graph_bytes=graph_bytes,
        feeds=feeds,
        fetches=list(meta["fetches"]),
        targets=list(meta["targets"]),
        kind=meta["kind"],
        size=meta["size"],
        init_op=meta["init_op"],
    )


# --------------------------------------------------------------------------------------------
# Layers from raw TF ops. The models put them under use_resource=False, so their variables
# are TF 1.15's ref variables (VariableV2), as in the scripts the adapter serves.
# --------------------------------------------------------------------------------------------


def _dense(x, units, name, activation=None, stddev=None):
    with tf.compat.v1.variable_scope(name):
        fan_in = int(x.shape[-1])
        init = (
            tf.compat.v1.truncated_normal_initializer(stddev=stddev)
            if stddev is not None
            else tf.compat.v1.glorot_uniform_initializer()
        )
        kernel = tf.compat.v1.get_variable("kernel", [fan_in, units], initializer=init)
        bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.zeros_initializer())
        y = tf.nn.bias_add(tf.matmul(x, kernel), bias)
        return activation(y) if activation is not None else y


def _conv(x, filters, ksize, name, padding="SAME"):
    with tf.compat.v1.variable_scope(name):
        kernel = tf.compat.v1.get_variable(
            "kernel",
            [ksize, ksize, int(x.shape[-1]), filters],
            initializer=tf.compat.v1.glorot_uniform_initializer(),
        )
        bias = tf.compat.v1.get_variable("bias", [filters], initializer=tf.zeros_initializer())
        y = tf.nn.conv2d(x, kernel, strides=[1, 1, 1, 1], padding=padding)
        return tf.nn.relu(tf.nn.bias_add(y, bias))


def _max_pool(x):
    return tf.nn.max_pool2d(x, ksize=2, strides=2, padding="VALID")


def _images(rng, shape):
    return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def _one_hot(rng, batch, classes):
    labels = np.zeros([batch, classes], np.float32)
    labels[np.arange(batch), rng.randint(0, classes, size=batch)] = 1.0
    return labels


# --------------------------------------------------------------------------------------------
# Small CI models
# --------------------------------------------------------------------------------------------


@_recipe("small_cnn", kind="inference", size="small")
def _small_cnn(rng):
    x = tf.compat.v1.placeholder(tf.float32, [None, 32, 32, 3], name="input")
    with tf.compat.v1.variable_scope("small_cnn", use_resource=False):
        y = _max_pool(_conv(x, 16, 3, "conv1"))
        y = _max_pool(_conv(y, 32, 3, "conv2"))
        y = _max_pool(_conv(y, 64, 3, "conv3"))
        y = tf.reshape(y, [-1, 4 * 4 * 64])
        y = _dense(y, 128, "dense1", activation=tf.nn.relu)
        logits = _dense(y, 10, "dense2")
    tf.identity(logits, name="logits")
    tf.nn.softmax(logits, name="probabilities")
    return _Built(feeds={"input:0": _images(rng, [4, 32, 32, 3])}, fetches=["probabilities:0"])


@_recipe("small_mlp", kind="inference", size="small")
def _small_mlp(rng):
    x = tf.compat.v1.placeholder(tf.float32, [None, 64], name="input")
    with tf.compat.v1.variable_scope("small_mlp", use_resource=False):
        y = _dense(x, 128, "dense1", activation=tf.nn.relu)
        y = _dense(y, 64, "dense2", activation=tf.nn.relu)
        logits = _dense(y, 10, "dense3")
    tf.nn.softmax(logits, name="probabilities")
    return _Built(feeds={"input:0": _images(rng, [4, 64])}, fetches=["probabilities:0"])


# --------------------------------------------------------------------------------------------
# LeNet-5 training graphs (not frozen)
# --------------------------------------------------------------------------------------------


def _lenet_train(rng, *, use_resource, optimizer):
    images = tf.compat.v1.placeholder(tf.float32, [8, 28, 28, 1], name="images")
    labels = tf.compat.v1.placeholder(tf.float32, [8, 10], name="labels")
    with tf.compat.v1.variable_scope("lenet", use_resource=use_resource):
        y = _max_pool(_conv(images, 6, 5, "conv1"))
        y = _max_pool(_conv(y, 16, 5, "conv2", padding="VALID"))
        y = tf.reshape(y, [-1, 5 * 5 * 16])
        y = _dense(y, 120, "fc1", activation=tf.nn.relu)
        y = _dense(y, 84, "fc2", activation=tf.nn.relu)
        logits = _dense(y, 10, "fc3")
        global_step = tf.compat.v1.get_variable(
            "global_step",
            [],
            tf.int64,
            initializer=tf.zeros_initializer(),
            trainable=False,
            collections=[
                tf.compat.v1.GraphKeys.GLOBAL_VARIABLES,
                tf.compat.v1.GraphKeys.GLOBAL_STEP,
            ],
        )
    per_example = tf.compat.v1.nn.softmax_cross_entropy_with_logits_v2(
        labels=labels, logits=logits
    )
    loss = tf.reduce_mean(per_example, name="loss")
    if optimizer == "momentum":
        opt = tf.compat.v1.train.MomentumOptimizer(learning_rate=0.05, momentum=0.9)
    else:
        opt = tf.compat.v1.train.GradientDescentOptimizer(learning_rate=0.05)
    train_op = opt.minimize(loss, global_step=global_step, name="train_op")
    init = tf.compat.v1.global_variables_initializer()
    return _Built(
        feeds={"images:0": _images(rng, [8, 28, 28, 1]), "labels:0": _one_hot(rng, 8, 10)},
        fetches=[loss.name],
        targets=[train_op.name],
        init_op=init.name,
    )


@_recipe("lenet_train", kind="training", size="small")
def _lenet_train_ref(rng):
    return _lenet_train(rng, use_resource=False, optimizer="sgd")


@_recipe("lenet_train_resource", kind="training", size="small")
def _lenet_train_resource(rng):
    return _lenet_train(rng, use_resource=True, optimizer="sgd")


@_recipe("lenet_train_momentum", kind="training", size="small")
def _lenet_train_momentum(rng):
    return _lenet_train(rng, use_resource=False, optimizer="momentum")


# --------------------------------------------------------------------------------------------
# LSTM language model (v1 while loop from dynamic_rnn)
# --------------------------------------------------------------------------------------------


def _lstm_cell_class():
    try:
        return tf.compat.v1.nn.rnn_cell.LSTMCell
    except AttributeError:
        pass  # TF >= 2.16 with Keras 3: the legacy cells only live in tf_keras.
    try:
        from tf_keras.src.layers.rnn.legacy_cells import LSTMCell
    except ImportError as exc:
        raise ImportError(
            "model 'lstm' needs the legacy tf.compat.v1 LSTMCell, which TensorFlow "
            f"{tf.__version__} with Keras 3 only provides through tf_keras: pip install tf_keras"
        ) from exc
    return LSTMCell


@_recipe("lstm", kind="inference", size="small")
def _lstm(rng):
    batch, steps, hidden, vocab = 4, 20, 64, 1000
    ids = tf.compat.v1.placeholder(tf.int32, [batch, steps], name="input_ids")
    with tf.compat.v1.variable_scope("lstm_lm", use_resource=False):
        embedding = tf.compat.v1.get_variable(
            "embedding", [vocab, hidden], initializer=tf.compat.v1.random_uniform_initializer(-1, 1)
        )
        x = tf.gather(embedding, ids)
        with warnings.catch_warnings():
            # The legacy cell warns that it is deprecated: using it is the point of this model.
            warnings.simplefilter("ignore", UserWarning)
            cell = _lstm_cell_class()(
                hidden, initializer=tf.compat.v1.glorot_uniform_initializer(), name="lstm_cell"
            )
        outputs, state = tf.compat.v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        logits = _dense(tf.reshape(outputs, [-1, hidden]), vocab, "softmax")
    tf.reshape(logits, [batch, steps, vocab], name="logits")
    tf.identity(state.h, name="final_state")
    return _Built(
        feeds={"input_ids:0": rng.randint(0, vocab, size=[batch, steps]).astype(np.int32)},
        fetches=["logits:0", "final_state:0"],
    )


# --------------------------------------------------------------------------------------------
# BERT encoder from raw ops (layout and names follow google-research/bert's modeling.py)
# --------------------------------------------------------------------------------------------


def _layer_norm(x, name):
    with tf.compat.v1.variable_scope(name):
        width = int(x.shape[-1])
        gamma = tf.compat.v1.get_variable("gamma", [width], initializer=tf.ones_initializer())
        beta = tf.compat.v1.get_variable("beta", [width], initializer=tf.zeros_initializer())
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta


def _gelu(x):
    return x * 0.5 * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def _bert(rng, *, vocab, hidden, layers, heads, intermediate, seq, batch=1, max_positions=512):
    head_size = hidden // heads
    stddev = 0.02
    init = tf.compat.v1.truncated_normal_initializer(stddev=stddev)
    input_ids = tf.compat.v1.placeholder(tf.int32, [batch, seq], name="input_ids")
    input_mask = tf.compat.v1.placeholder(tf.int32, [batch, seq], name="input_mask")
    segment_ids = tf.compat.v1.placeholder(tf.int32, [batch, seq], name="segment_ids")

    with tf.compat.v1.variable_scope("bert", use_resource=False):
        with tf.compat.v1.variable_scope("embeddings"):
            word_table = tf.compat.v1.get_variable("word_embeddings", [vocab, hidden], None, init)
            x = tf.gather(word_table, tf.reshape(input_ids, [-1]))
            type_table = tf.compat.v1.get_variable(
                "token_type_embeddings", [2, hidden], None, init
            )
            x += tf.matmul(tf.one_hot(tf.reshape(segment_ids, [-1]), depth=2), type_table)
            x = tf.reshape(x, [batch, seq, hidden])
            position_table = tf.compat.v1.get_variable(
                "position_embeddings", [max_positions, hidden], None, init
            )
            x += tf.expand_dims(tf.slice(position_table, [0, 0], [seq, -1]), 0)
            x = _layer_norm(x, "LayerNorm")

        with tf.compat.v1.variable_scope("encoder"):
            mask = tf.cast(tf.reshape(input_mask, [batch, 1, seq]), tf.float32)
            mask = tf.ones([batch, seq, 1], tf.float32) * mask
            adder = (1.0 - tf.expand_dims(mask, axis=1)) * -10000.0
            h = tf.reshape(x, [batch * seq, hidden])
            for i in range(layers):
                with tf.compat.v1.variable_scope(f"layer_{i}"):
                    h = _bert_layer(h, adder, batch, seq, heads, head_size, intermediate, stddev)
            sequence_output = tf.reshape(h, [batch, seq, hidden])

        with tf.compat.v1.variable_scope("pooler"):
            first = tf.squeeze(sequence_output[:, 0:1, :], axis=1)
            pooled = _dense(first, hidden, "dense", activation=tf.tanh, stddev=stddev)

    tf.identity(sequence_output, name="sequence_output")
    tf.identity(pooled, name="pooled_output")
    valid = seq - seq // 4  # a padded tail, so the attention mask does something
    mask_value = np.zeros([batch, seq], np.int32)
    mask_value[:, :valid] = 1
    segments = np.zeros([batch, seq], np.int32)
    segments[:, valid // 2 : valid] = 1
    return _Built(
        feeds={
            "input_ids:0": rng.randint(0, vocab, size=[batch, seq]).astype(np.int32),
            "input_mask:0": mask_value,
            "segment_ids:0": segments,
        },
        fetches=["sequence_output:0", "pooled_output:0"],
    )


def _bert_layer(h, adder, batch, seq, heads, head_size, intermediate, stddev):
    hidden = heads * head_size

    def split_heads(t):
        return tf.transpose(tf.reshape(t, [batch, seq, heads, head_size]), [0, 2, 1, 3])

    with tf.compat.v1.variable_scope("attention"):
        with tf.compat.v1.variable_scope("self"):
            q = split_heads(_dense(h, hidden, "query", stddev=stddev))
            k = split_heads(_dense(h, hidden, "key", stddev=stddev))
            v = split_heads(_dense(h, hidden, "value", stddev=stddev))
            scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(head_size))
            probs = tf.nn.softmax(scores + adder)
            context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])
            context = tf.reshape(context, [batch * seq, hidden])
        with tf.compat.v1.variable_scope("output"):
            attention = _dense(context, hidden, "dense", stddev=stddev)
            attention = _layer_norm(attention + h, "LayerNorm")
    with tf.compat.v1.variable_scope("intermediate"):
        inner = _dense(attention, intermediate, "dense", activation=_gelu, stddev=stddev)
    with tf.compat.v1.variable_scope("output"):
        out = _dense(inner, hidden, "dense", stddev=stddev)
        return _layer_norm(out + attention, "LayerNorm")


@_recipe("bert_tiny", kind="inference", size="small")
def _bert_tiny(rng):
    # A 2k vocabulary instead of BERT's 30522: the graph is the same, the constants 8x smaller.
    return _bert(rng, vocab=2048, hidden=128, layers=2, heads=2, intermediate=512, seq=32)


@_recipe("bert_encoder", kind="inference", size="large")
def _bert_encoder(rng):
    return _bert(rng, vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072, seq=128)


# --------------------------------------------------------------------------------------------
# Keras applications (weights=None), frozen
# --------------------------------------------------------------------------------------------


def _keras():
    """The Keras 2 module: ``tf_keras`` if installed, else ``tf.keras`` when it is Keras 2."""
    try:
        import tf_keras

        return tf_keras
    except ImportError:
        pass
    try:
        import keras

        major = int(keras.__version__.split(".")[0])
    except (ImportError, AttributeError, ValueError):
        major = None
    if major == 2:
        return tf.keras
    raise ImportError(
        f"the Keras application models need Keras 2, but TensorFlow {tf.__version__} comes with "
        "Keras 3, whose applications do not build in a tf.compat.v1 graph: pip install tf_keras"
    )


def _keras_application(rng, app_name, image_size):
    keras = _keras()
    shape = (image_size, image_size, 3)
    x = tf.compat.v1.placeholder(tf.float32, (1,) + shape, name="input")
    model = getattr(keras.applications, app_name)(weights=None, input_shape=shape)
    # training=False gives plain inference batch norm instead of a cond on the learning phase.
    tf.identity(model(x, training=False), name="probabilities")
    return _Built(feeds={"input:0": _images(rng, (1,) + shape)}, fetches=["probabilities:0"])


@_recipe("resnet50", kind="inference", size="large")
def _resnet50(rng):
    return _keras_application(rng, "ResNet50", 224)


@_recipe("mobilenet_v2", kind="inference", size="large")
def _mobilenet_v2(rng):
    return _keras_application(rng, "MobileNetV2", 224)


@_recipe("inception_v3", kind="inference", size="large")
def _inception_v3(rng):
    return _keras_application(rng, "InceptionV3", 299)


def _main(argv):
    """Build (or load) the named models, or all of them, and print a one-line summary each."""
    import time

    names = argv or list_models()
    for name in names:
        start = time.perf_counter()
        spec = get_model(name)
        seconds = time.perf_counter() - start
        size_mb = spec.graph_def.ByteSize() / 1e6
        print(
            f"{name:24s} {spec.kind:9s} {spec.size:5s} nodes={len(spec.graph_def.node):6d} "
            f"bytes={size_mb:8.1f}MB time={seconds:6.1f}s  {cache_path(name)}"
        )


if __name__ == "__main__":
    _main(sys.argv[1:])
