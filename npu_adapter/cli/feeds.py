"""Input values given on the command line (``--feed NAME=FILE.npy``, ``--feeds FILE.npz``):
loaded without pickles and checked against the model before it runs.

A value TensorFlow would refuse (a tensor the model does not have, a shape the tensor cannot
take, a dtype that does not convert) is a one-line error naming the ``--feed`` entry, what the
model expects and what the file holds, instead of TensorFlow's exception from deep inside a run.
"""

import dataclasses

from npu_adapter.errors import NpuConfigError, UsageError

__all__ = ["Feed", "check_feeds", "load_feeds", "shape_text"]

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


@dataclasses.dataclass
class Feed:
    """One input value: the tensor it feeds, the array, and how the user gave it."""

    tensor: str
    array: object
    flag: str
    given: str


def shape_text(dims):
    """``(1,16,16,3)`` as a user writes a shape; None (unknown rank) is ``any shape``, an
    unknown dimension ``?``."""
    if dims is None:
        return "any shape"
    return "(" + ",".join("?" if d is None or d < 0 else str(d) for d in dims) + ")"


def _tensor_name(name):
    return name if ":" in name else name + ":0"


def _load_array(flag, given, path):
    import numpy as np

    allowed = "a .npy or .npz file written by numpy.save or numpy.savez"
    try:
        with open(path, "rb") as f:
            magic = f.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise NpuConfigError(flag, given, allowed,
                             detail=f"{path}: {exc.strerror or exc}") from None
    if not magic.startswith((_NPY_MAGIC, _ZIP_MAGIC)):
        raise NpuConfigError(flag, given, allowed, detail=f"{path} is not one")
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        problem = "it holds Python objects, which are never unpickled" \
            if "pickle" in str(exc) else str(exc)
        raise NpuConfigError(flag, given, allowed, detail=f"{path}: {problem}") from None
    except OSError as exc:
        raise NpuConfigError(flag, given, allowed,
                             detail=f"{path}: {exc.strerror or exc}") from None


def load_feeds(feed_args, feeds_file):
    """The :class:`Feed` of every ``--feed NAME=FILE.npy`` entry and of each array of a
    ``--feeds FILE.npz`` archive (keyed by tensor name); ``NAME`` means ``NAME:0``."""
    feeds = []
    if feeds_file:
        archive = _load_array("--feeds", feeds_file, feeds_file)
        if not hasattr(archive, "files"):
            raise NpuConfigError("--feeds", feeds_file, "a .npz archive keyed by tensor name "
                                 "(numpy.savez)", detail="it is a single .npy array")
        for key in archive.files:
            feeds.append(Feed(_tensor_name(key), archive[key], "--feeds",
                              f"{key} in {feeds_file}"))
    for item in feed_args or ():
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise NpuConfigError("--feed", item, "NAME=FILE.npy, e.g. input:0=batch.npy")
        feeds.append(Feed(_tensor_name(name), _load_array("--feed", item, path), "--feed", item))
    seen = set()
    for feed in feeds:
        if feed.tensor in seen:
            raise NpuConfigError(feed.flag, feed.given, "one value per tensor",
                                 detail=f"{feed.tensor} is given twice")
        seen.add(feed.tensor)
    return feeds


def _placeholder_spec(node):
    """``(numpy dtype, dims or None)`` a feed of ``node`` (a Placeholder) must match."""
    import tensorflow as tf

    dtype = tf.as_dtype(node.attr["dtype"].type)
    shape = node.attr["shape"].shape if "shape" in node.attr else None
    dims = None if shape is None or shape.unknown_rank else [d.size for d in shape.dim]
    return dtype, dims


def _check_value(feed, dtype, dims):
    import numpy as np

    array = np.asarray(feed.array)
    want = f"{feed.tensor} takes {dtype.name} of shape {shape_text(dims)}"
    if dims is not None and (len(dims) != array.ndim or any(
            d >= 0 and d != a for d, a in zip(dims, array.shape))):
        raise NpuConfigError(feed.flag, feed.given, "a value of the tensor's shape",
                             detail=f"{want}; the file holds shape {shape_text(array.shape)}")
    if dtype.is_numpy_compatible and dtype.as_numpy_dtype is not object:
        convertible = np.can_cast(array.dtype, dtype.as_numpy_dtype, casting="same_kind")
    else:  # strings
        convertible = array.dtype.kind in "SUO"
    if not convertible:
        raise NpuConfigError(feed.flag, feed.given, "a value of the tensor's dtype",
                             detail=f"{want}; the file holds {array.dtype.name}")


def check_feeds(graph_def, fetches, feeds):
    """Check every :class:`Feed` against ``graph_def`` as TensorFlow would when running
    ``fetches``: the tensor exists, the array's shape and dtype fit it, and every Placeholder
    the fetches need is fed (a model without inputs needs no feed).

    Raises:
        NpuConfigError: on the first feed that does not fit, naming its ``--feed`` entry.
        UsageError: a needed input has no value (naming each one, its dtype and shape).
    """
    from npu_adapter.graph.extract import extract_client_graph
    from npu_adapter.graph.names import parse_input

    nodes = {node.name: node for node in graph_def.node}
    inputs = ", ".join(sorted(f"{n.name}:0" for n in graph_def.node if n.op == "Placeholder"))
    for feed in feeds:
        node_name = parse_input(feed.tensor)[0]
        if node_name not in nodes:
            raise NpuConfigError(feed.flag, feed.given, "a tensor of the model",
                                 detail=f"the model has no node {node_name}; its inputs: "
                                        f"{inputs or 'none'}")
    # GraphError (one line, exit 2) for a port the node does not have, or a missing fetch.
    client = extract_client_graph(graph_def, fetches, (), [f.tensor for f in feeds])
    stand_ins = {node.name: node for node in client.graph_def.node}
    for feed in feeds:
        node = stand_ins.get(parse_input(client.feeds[feed.tensor])[0])
        if node is not None and node.op == "Placeholder":
            _check_value(feed, *_placeholder_spec(node))
    fed = set(client.feeds.values())
    unfed = [node for node in client.graph_def.node
             if node.op == "Placeholder" and f"{node.name}:0" not in fed]
    if unfed:
        needs = "; ".join(f"{node.name}:0 ({_spec_text(*_placeholder_spec(node))})"
                          for node in unfed)
        example = f"{unfed[0].name}:0=FILE.npy"
        raise UsageError(f"the model needs a value for {needs}: give --feed {example} "
                         "(repeatable) or --feeds FILE.npz")
    return client


def _spec_text(dtype, dims):
    return f"{dtype.name} of shape {shape_text(dims)}"

