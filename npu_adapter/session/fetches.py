"""Fetch and feed structures of ``Session.run``, taken apart and moved to another graph.

An NPU session runs the user's fetches on its execution graph. Rather than rebuild the results
itself, it hands TensorFlow's own ``run`` the same structure with every graph element replaced
by the element standing for it in the execution graph: TensorFlow then builds the results
(lists, tuples, namedtuples, dicts, attrs classes, ``SparseTensorValue`` ...) exactly as for
the user's structure. The rules follow TensorFlow's session: nested lists, tuples, mappings and
attrs classes; ``SparseTensor``, ``IndexedSlices`` and ``RaggedTensor`` by their component
tensors; anything else through ``Graph.as_graph_element`` (tensors, operations, their names,
variables), with TensorFlow's errors for what it cannot interpret.
"""

import collections

import tensorflow as tf

__all__ = ["fetch_elements", "map_fetches", "feed_elements", "map_feeds", "shape_of"]

_COMPOSITES = (tf.SparseTensor, tf.IndexedSlices, tf.RaggedTensor)


def _element(graph, fetch):
    """The tensor or operation of ``graph`` that ``fetch`` names, with TensorFlow's errors."""
    if fetch is None:
        raise TypeError(f"Argument `fetch` = {fetch} has invalid type "
                        f'"{type(fetch).__name__}". Cannot be None')
    try:
        return graph.as_graph_element(fetch, allow_tensor=True, allow_operation=True)
    except TypeError as exc:
        raise TypeError(f"Argument `fetch` = {fetch} has invalid type "
                        f'"{type(fetch).__name__}" must be a string or Tensor. ({exc})') from None
    except (ValueError, KeyError) as exc:
        detail = exc.args[0] if exc.args else exc
        raise ValueError(f"Argument `fetch` = {fetch} cannot be interpreted as a Tensor. "
                         f"({detail})") from None


def _walk(fetch, leaf):
    """``fetch`` with ``leaf`` applied to every graph element (TensorFlow's structure rules)."""
    if isinstance(fetch, _COMPOSITES):
        return tf.nest.map_structure(leaf, fetch, expand_composites=True)
    if isinstance(fetch, (list, tuple)):
        items = [_walk(f, leaf) for f in fetch]
        if isinstance(fetch, list):
            return items
        if hasattr(fetch, "_fields"):  # a namedtuple
            return type(fetch)(*items)
        return type(fetch)(items)
    if isinstance(fetch, collections.abc.Mapping):
        if isinstance(fetch, collections.defaultdict):
            out = type(fetch)(fetch.default_factory)
        else:
            out = type(fetch)()
        for key, value in fetch.items():
            out[key] = _walk(value, leaf)
        return out
    fields = getattr(type(fetch), "__attrs_attrs__", None)
    if fields is not None:
        return type(fetch)(**{f.name: _walk(getattr(fetch, f.name), leaf) for f in fields})
    return leaf(fetch)


def fetch_elements(graph, fetches):
    """The distinct tensors and operations of ``graph`` that ``fetches`` names, in order."""
    seen = {}

    def leaf(fetch):
        element = _element(graph, fetch)
        seen.setdefault(element, None)
        return element

    _walk(fetches, leaf)
    return list(seen)


def map_fetches(graph, fetches, tensors, ops):
    """``fetches`` with each element of ``graph`` replaced by ``tensors[name]`` (a tensor) or
    ``ops[name]`` (an operation)."""

    def leaf(fetch):
        element = _element(graph, fetch)
        if isinstance(element, tf.Tensor):
            return tensors[element.name]
        return ops[element.name]

    return _walk(fetches, leaf)


def _feed_tensor(graph, key):
    try:
        return graph.as_graph_element(key, allow_tensor=True, allow_operation=False)
    except Exception as exc:
        raise TypeError(f"Cannot interpret feed_dict key as Tensor: {exc.args[0]}") from None


def feed_elements(graph, keys):
    """The tensors of ``graph`` fed by the feed keys ``keys`` (composite keys by component)."""
    out = []
    for key in keys:
        if isinstance(key, _COMPOSITES):
            out.extend(_feed_tensor(graph, t) for t in tf.nest.flatten(key, expand_composites=True))
        else:
            out.append(_feed_tensor(graph, key))
    return out


def map_feeds(graph, feed_dict, feeds):
    """``feed_dict`` with each key replaced by ``feeds[tensor name]`` (composite keys rebuilt
    from their mapped components); values are left as they are."""
    out = {}
    for key, value in feed_dict.items():
        if isinstance(key, _COMPOSITES):
            key = tf.nest.map_structure(lambda t: feeds[_feed_tensor(graph, t).name], key,
                                        expand_composites=True)
        else:
            key = feeds[_feed_tensor(graph, key).name]
        out[key] = value
    return out


def shape_of(value):
    """The shape of a fed value, as a tuple (what gear selection reads)."""
    shape = getattr(value, "shape", None)
    if shape is not None and not callable(shape):
        return tuple(shape)
    import numpy as np

    return np.shape(value)
