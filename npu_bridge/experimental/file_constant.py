"""A constant read from a binary file (``npu_bridge.experimental.file_constant``).

:func:`file_constant` builds ``FileConstant``: at run time the op reads ``file_path``, a raw
little-endian array of ``dtype`` with exactly ``prod(shape)`` elements, and returns it with
``shape`` (``InvalidArgumentError`` when the size does not match). A ``file_id`` is the name GE
resolves through its weight-file map; here ids are resolved through
:func:`set_file_id_paths` when the op is built, and an unknown id raises
:class:`~npu_adapter.errors.NpuAdapterError` naming it.
"""

import threading

import tensorflow as tf

from npu_adapter.errors import NpuAdapterError
from npu_bridge.helper import helper

__all__ = ["file_constant", "file_id_paths", "gen_npu_cpu_ops", "set_file_id_paths"]

SUPPORTED_DTYPES = (tf.float32, tf.float16, tf.int8, tf.int16, tf.uint16, tf.uint8, tf.int32,
                    tf.int64, tf.uint32, tf.uint64, tf.bool, tf.float64)

_LOCK = threading.Lock()
_FILE_IDS = {}


def set_file_id_paths(mapping):
    """Register ``{file_id: path}`` for :func:`file_constant` (adds to earlier ones)."""
    if not isinstance(mapping, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in mapping.items()):
        raise ValueError(f"mapping must be a dict of non-empty file ids to paths, got "
                         f"{mapping!r}")
    with _LOCK:
        _FILE_IDS.update(mapping)


def file_id_paths():
    """The registered ``{file_id: path}`` (a copy)."""
    with _LOCK:
        return dict(_FILE_IDS)


def _file_constant(file_path="", file_id="", shape=(), dtype=tf.float32, name=None):
    dtype = tf.as_dtype(dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"file_constant: dtype {dtype.name} is not supported; use one of "
                         f"{[d.name for d in SUPPORTED_DTYPES]}")
    if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ValueError(f"file_constant: shape must be a list of non-negative ints, got "
                         f"{shape!r}")
    if not file_path:
        if not file_id:
            raise ValueError("file_constant: give file_path or file_id")
        with _LOCK:
            file_path = _FILE_IDS.get(file_id)
        if file_path is None:
            raise NpuAdapterError(
                f"file_constant: file_id {file_id!r} is not registered; GE resolves file ids "
                "through its weight-file map, here call "
                "npu_bridge.experimental.file_constant.set_file_id_paths({id: path}) first or "
                "pass file_path")
    elements = 1
    for dim in shape:
        elements *= dim
    itemsize = 1 if dtype == tf.bool else dtype.size
    with tf.name_scope(name or "FileConstant"):
        raw = tf.io.read_file(file_path)
        # Check the byte count of the file itself: a check on the decoded size can be folded
        # away by Grappler's shape inference through the Reshape below.
        check = tf.debugging.assert_equal(
            tf.strings.length(raw), elements * itemsize,
            message=f"file_constant: {file_path} does not hold {elements} {dtype.name} "
                    f"elements for shape {list(shape)}")
        with tf.control_dependencies([check]):
            raw = tf.identity(raw)
        if dtype == tf.bool:
            flat = tf.cast(tf.io.decode_raw(raw, tf.uint8), tf.bool)
        else:
            flat = tf.io.decode_raw(raw, dtype, little_endian=True)
        return tf.reshape(flat, shape)


helper.register_gen_ops({"FileConstant": _file_constant})
gen_npu_cpu_ops = helper.get_gen_ops()


def file_constant(shape, dtype, file_path=None, file_id=None, name=None):
    """A tensor of ``shape`` and ``dtype`` read from ``file_path`` (or the file registered for
    ``file_id``) when the graph runs."""
    return gen_npu_cpu_ops.file_constant(file_path=file_path or "", file_id=file_id or "",
                                         shape=shape, dtype=dtype, name=name)
