"""The fetch structure of a ``Session.run``, taken apart and its results built, by TF1's rules.

``Session.run`` takes any nesting of lists, tuples, namedtuples, mappings and attrs classes whose
leaves are graph elements (tensors, operations, their names, variables) or composite tensors:
a ``SparseTensor`` is fetched as a ``SparseTensorValue``, an ``IndexedSlices`` as an
``IndexedSlicesValue``, a ``RaggedTensor`` as a ``RaggedTensorValue``, an operation as None.
Each element is fetched once however often it appears. These are the rules of TensorFlow's own
fetch mapper (``tensorflow/python/client/session.py``), which is not public; TensorFlow also
expands the types registered with its internal ``register_session_run_conversion_functions``:
of those, the two TensorFlow registers itself (``RaggedTensor``, and ``get_variable``'s lazily
built regularization losses) are fetched here alike, others are refused as plain TensorFlow
refuses any object it cannot interpret (feed keys of such types already were: see
``bench/README.md``).
"""

import collections
from collections import abc

import tensorflow as tf

__all__ = ["IndexedSlicesValue", "FetchMapper", "fetch_mapper"]

IndexedSlicesValue = collections.namedtuple("IndexedSlicesValue",
                                            ["values", "indices", "dense_shape"])
"""What a fetched ``IndexedSlices`` gives (TensorFlow's namedtuple of this name and these fields
is not public)."""


def fetch_mapper(graph, fetches):
    """The :class:`FetchMapper` of ``fetches`` in ``graph``."""
    return FetchMapper(graph, fetches)


class FetchMapper:
    """A fetch structure of ``graph`` taken apart: :meth:`unique_fetches` gives the tensors and
    operations to run, :meth:`build_results` the user's structure of their values.

    Raises:
        TypeError: ``fetches`` is None, or a leaf is no graph element (TensorFlow's message).
        ValueError: a leaf names nothing of ``graph`` (TensorFlow's message).
    """

    def __init__(self, graph, fetches):
        self._graph = graph
        self._elements = []
        self._index = {}  # id(element) -> its position in self._elements
        self._build = self._mapper(fetches)

    def unique_fetches(self):
        """The tensors and operations to run, each once, in the order of the structure."""
        return self._elements

    def build_results(self, values):
        """The user's structure, each leaf replaced by its value; ``values`` are those of
        :meth:`unique_fetches`, in that order."""
        return self._build(values)

    def _mapper(self, fetch):
        """A function of the run's values giving the results of ``fetch``."""
        if fetch is None:
            raise TypeError(f'Argument `fetch` = {fetch} has invalid type '
                            f'"{type(fetch).__name__}". Cannot be None')
        if isinstance(fetch, (list, tuple)):
            return self._sequence(fetch)
        if isinstance(fetch, abc.Mapping):
            kind = type(fetch)
            keys = list(fetch.keys())
            parts = [self._mapper(fetch[key]) for key in keys]
            if isinstance(fetch, collections.defaultdict):
                factory = fetch.default_factory
                return lambda values: collections.defaultdict(
                    factory, zip(keys, (p(values) for p in parts)))
            return lambda values: kind(zip(keys, (p(values) for p in parts)))
        fields = getattr(type(fetch), "__attrs_attrs__", None)
        if fields is not None:
            kind = type(fetch)
            parts = [self._mapper(getattr(fetch, field.name)) for field in fields]
            return lambda values: kind(*(p(values) for p in parts))
        return self._leaf(fetch)

    def _sequence(self, fetch):
        kind = type(getattr(fetch, "__wrapped__", fetch))  # TensorFlow's tracking wrappers
        parts = [self._mapper(item) for item in fetch]
        if issubclass(kind, list):
            return lambda values: [p(values) for p in parts]
        if kind is tuple:
            return lambda values: tuple(p(values) for p in parts)
        return lambda values: kind(*(p(values) for p in parts))  # a namedtuple

    def _leaf(self, fetch):
        if isinstance(fetch, tf.RaggedTensor):
            components, build = list(fetch.nested_row_splits) + [fetch.flat_values], _ragged
        elif isinstance(fetch, tf.SparseTensor):
            components = [fetch.indices, fetch.values, fetch.dense_shape]
            build = _sparse
        elif isinstance(fetch, tf.IndexedSlices):
            components = [fetch.values, fetch.indices]
            if fetch.dense_shape is not None:
                components.append(fetch.dense_shape)
            build = _indexed_slices
        else:
            components, build = [fetch], _first
        positions = [self._position(_graph_element(self._graph, c)) for c in components]
        return lambda values: build([values[i] for i in positions])

    def _position(self, element):
        position = self._index.get(id(element))
        if position is None:
            position = self._index[id(element)] = len(self._elements)
            self._elements.append(element)
        return position


def _first(values):
    return values[0]


def _sparse(values):
    return tf.compat.v1.SparseTensorValue(*values)


def _indexed_slices(values):
    return IndexedSlicesValue(values[0], values[1], values[2] if len(values) == 3 else None)


def _ragged(values):
    value = values[-1]
    for splits in reversed(values[:-1]):
        value = tf.compat.v1.ragged.RaggedTensorValue(value, splits)
    return value


def _graph_element(graph, fetch):
    """The tensor or operation of ``graph`` that the leaf ``fetch`` names, with TensorFlow's
    errors for one it cannot interpret."""
    try:
        return graph.as_graph_element(fetch, allow_tensor=True, allow_operation=True)
    except TypeError as exc:
        output = _named_output(fetch)
        if output is None:
            raise TypeError(f'Argument `fetch` = {fetch} has invalid type '
                            f'"{type(fetch).__name__}" must be a string or Tensor. '
                            f'({exc})') from None
        return _graph_element(graph, output)
    except (ValueError, KeyError) as exc:
        raise ValueError(f'Argument `fetch` = {fetch} cannot be interpreted as a Tensor. '
                         f'({exc})') from None


def _named_output(fetch):
    """The graph tensor a tensor-like object that is none stands for, by its ``op`` and
    ``value_index`` (``get_variable``'s lazily built regularization losses), else None."""
    if not tf.is_tensor(fetch):
        return None
    try:
        output = fetch.op.outputs[fetch.value_index]
    except Exception:  # a symbolic tensor that has no op (a Keras input)
        return None
    return output if isinstance(output, tf.Tensor) else None
