"""Fetch and feed structures of ``Session.run``, taken apart and moved to the execution graph.

An NPU session runs the user's fetches on its execution graph. Fetch structures are taken apart
and their results built by TensorFlow 1's rules (:mod:`npu_adapter.session.fetch_structures`:
nested lists, tuples, mappings, attrs classes, composite tensors, and TensorFlow's errors for
anything else); the session runs the mapped elements. Feed keys are
moved as TensorFlow reads them: a tuple key with a tuple value feeds each element, a composite
key (``SparseTensor``, ``IndexedSlices``, ``RaggedTensor``) its component tensors; TensorFlow's
run on the moved keys then checks the values, naming the user's tensors (the execution graph
holds them under their own names).
"""

import tensorflow as tf

from npu_adapter.session.fetch_structures import fetch_mapper

__all__ = ["fetch_mapper", "flat_feeds", "feed_elements", "map_feeds", "shape_of"]


def flat_feeds(feed_dict):
    """``[(key, value), ...]`` of ``feed_dict`` with tuple keys taken apart against their
    values, as TensorFlow's session flattens them."""
    out = []
    for key, value in feed_dict.items():
        _flatten_item(key, value, out)
    return out


def _flatten_item(key, value, out):
    if isinstance(key, (list, tuple)) and not hasattr(key, "_fields"):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise ValueError(f"The feed_dict key {key} is a tuple; its value must be a tuple of "
                             f"as many values, got {type(value).__name__}")
        for k, v in zip(key, value):
            _flatten_item(k, v, out)
    else:
        out.append((key, value))


def _components(key):
    """The tensors a feed key stands for: itself, or a composite's component tensors."""
    if isinstance(key, tf.IndexedSlices):
        return [t for t in (key.values, key.indices, key.dense_shape) if t is not None]
    if isinstance(key, (tf.SparseTensor, tf.RaggedTensor)):
        return tf.nest.flatten(key, expand_composites=True)
    return [key]


def _feed_tensor(graph, key):
    try:
        return graph.as_graph_element(key, allow_tensor=True, allow_operation=False)
    except Exception as exc:
        raise TypeError(f"Cannot interpret feed_dict key as Tensor: {exc.args[0]}") from None


def feed_elements(graph, items):
    """The tensors of ``graph`` that the flat feed ``items`` (:func:`flat_feeds`) feed."""
    return [_feed_tensor(graph, t) for key, _ in items for t in _components(key)]


def map_feeds(graph, items, feeds):
    """The flat feed ``items`` as a feed dict of the execution graph: each key moved to
    ``feeds[tensor name]`` (composite keys rebuilt from their moved components); values are
    left as they are."""
    out = {}
    for key, value in items:
        if isinstance(key, tf.IndexedSlices):
            moved = [feeds[_feed_tensor(graph, t).name] if t is not None else None
                     for t in (key.values, key.indices, key.dense_shape)]
            key = tf.IndexedSlices(*moved)
        elif isinstance(key, (tf.SparseTensor, tf.RaggedTensor)):
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
