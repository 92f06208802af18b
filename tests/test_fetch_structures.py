"""Fetch structures of ``Session.run``: an NPU session takes them apart and builds its results
(``npu_adapter.session.fetch_structures``) as plain TensorFlow's session does, errors included."""

import collections
import types

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.config import NpuConfig
from npu_adapter.session import NpuSession, plain_session_class
from npu_adapter.session.fetch_structures import fetch_mapper

tf1 = tf.compat.v1
PlainSession = plain_session_class()

Pair = collections.namedtuple("Pair", ["first", "second"])


class Record:
    """A class as the ``attrs`` package makes them (``__attrs_attrs__`` names the fields in the
    order of ``__init__``), which TensorFlow takes apart like a namedtuple."""

    __attrs_attrs__ = (types.SimpleNamespace(name="loss"), types.SimpleNamespace(name="parts"))

    def __init__(self, loss, parts):
        self.loss = loss
        self.parts = parts


def _graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [2], name="x")
        y = tf.multiply(x, 3.0, name="y")
        z = tf.add(y, 1.0, name="z")
        sparse = tf.SparseTensor([[0, 1], [1, 0]], tf.stack([y[0], z[1]]), [2, 2])
        slices = tf.IndexedSlices(y, tf.constant([0, 3]), tf.constant([4]))
        shapeless = tf.IndexedSlices(z, tf.constant([1, 2]))
        ragged = tf.RaggedTensor.from_row_splits(tf.concat([y, z], 0), [0, 1, 4])
        nested = tf.RaggedTensor.from_row_splits(ragged, [0, 1, 2])
        tf1.get_variable("w", [2], initializer=tf1.ones_initializer(),
                         regularizer=lambda w: tf.reduce_sum(w) * 0.5)
        (lazy_loss,) = tf1.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)
        init = tf1.global_variables_initializer()
    fetches = {
        "list": [y, "z:0", z.op, "y"],
        "tuple": (y, (z, [y])),
        "pair": Pair(y, {"z": z}),
        "ordered": collections.OrderedDict([("b", z), ("a", y)]),
        "default": collections.defaultdict(list, {"y": y}),
        "record": Record(z, [y, z]),
        "sparse": sparse,
        "slices": [slices, shapeless],
        "ragged": (ragged, nested),
        "loss": lazy_loss,
        "empty": [(), {}],
    }
    return graph, x, init, fetches


def _plain(value):
    """``value`` with numpy arrays as lists, the types of the containers kept."""
    if isinstance(value, np.ndarray) or np.isscalar(value):
        return np.asarray(value).tolist()
    if isinstance(value, tf1.ragged.RaggedTensorValue):
        return ("ragged", _plain(value.values), _plain(value.row_splits))
    if isinstance(value, tuple):
        items = [_plain(v) for v in value]
        return (type(value).__name__, *items)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return (type(value).__name__, [(k, _plain(v)) for k, v in value.items()])
    if isinstance(value, Record):
        return ("Record", _plain(value.loss), _plain(value.parts))
    return value


@pytest.mark.parametrize("options", [{}, {"mix_compile_mode": True}], ids=["full", "mix"])
def test_every_fetch_structure_gives_plain_tensorflows_results(options):
    got = {}
    for name, cls, config in (("plain", PlainSession, None),
                              ("npu", NpuSession, NpuConfig.from_dict(options).to_config_proto())):
        graph, x, init, fetches = _graph()
        with cls(graph=graph, config=config) as sess:
            sess.run(init)
            got[name] = sess.run(fetches, {x: [1.0, 2.0]})
    assert _plain(got["npu"]) == _plain(got["plain"])
    assert type(got["npu"]["default"]) is collections.defaultdict
    assert got["npu"]["default"].default_factory is list
    assert got["npu"]["list"][2] is None  # an operation fetches None
    slices, shapeless = got["npu"]["slices"]
    assert slices.dense_shape.tolist() == [4] and shapeless.dense_shape is None
    assert type(slices).__name__ == "IndexedSlicesValue" and slices._fields == (
        "values", "indices", "dense_shape")
    assert isinstance(got["npu"]["sparse"], tf1.SparseTensorValue)


def test_each_element_is_fetched_once_in_the_order_of_the_structure():
    graph, _, _, fetches = _graph()
    y, z = graph.get_tensor_by_name("y:0"), graph.get_tensor_by_name("z:0")
    mapper = fetch_mapper(graph, [fetches["list"], fetches["tuple"]])
    assert mapper.unique_fetches() == [y, z, z.op, y.op]
    assert mapper.build_results([1, 2, None, None]) == [[1, 2, None, None], (1, (2, [1]))]


@pytest.mark.parametrize("fetch, error, message", [
    (None, TypeError, "Cannot be None"),
    (37, TypeError, 'invalid type "int" must be a string or Tensor'),
    ({"a": [1.5]}, TypeError, 'invalid type "float" must be a string or Tensor'),
    ("nothing:0", ValueError, "cannot be interpreted as a Tensor"),
    ("y:3", ValueError, "cannot be interpreted as a Tensor"),
])
def test_a_fetch_tensorflow_cannot_interpret_gets_its_error(fetch, error, message):
    graph, x, _, _ = _graph()
    for cls in (PlainSession, NpuSession):
        config = NpuConfig.from_dict({}).to_config_proto() if cls is NpuSession else None
        with cls(graph=graph, config=config) as sess, pytest.raises(error, match=message):
            sess.run(fetch, {x: [1.0, 2.0]})


def test_a_tensor_of_another_graph_is_refused_as_tensorflow_does():
    graph, x, _, _ = _graph()
    with tf.Graph().as_default():
        other = tf.constant(1.0)
    with pytest.raises(ValueError, match="is not an element of this graph"):
        fetch_mapper(graph, [other])
