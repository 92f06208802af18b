"""Data types of dumped tensors: TensorFlow dtypes, NumPy dtypes and the dump format's names.

The dump format names its data types ``DT_FLOAT``, ``DT_FLOAT16``, ``DT_BF16``, ... with its own
numbering (see :mod:`npu_adapter.datadump.proto`). Only tensors with a fixed-size element type are
dumped: numbers and booleans. Strings, resources and variants have no raw byte layout a dump
reader could interpret, so they are left out of dump files.
"""

import numpy as np

__all__ = [
    "DUMPABLE_TF_TYPES",
    "FLOAT_DTYPE_NAMES",
    "dtype_name_of_array",
    "numpy_dtype_for",
    "decode_array",
]

# TensorFlow's DataType enum (types.proto) → the dump format's name; only dumpable types.
DUMPABLE_TF_TYPES = {
    1: "DT_FLOAT",       # DT_FLOAT
    2: "DT_DOUBLE",      # DT_DOUBLE
    3: "DT_INT32",       # DT_INT32
    4: "DT_UINT8",       # DT_UINT8
    5: "DT_INT16",       # DT_INT16
    6: "DT_INT8",        # DT_INT8
    8: "DT_COMPLEX64",   # DT_COMPLEX64
    9: "DT_INT64",       # DT_INT64
    10: "DT_BOOL",       # DT_BOOL
    14: "DT_BF16",       # DT_BFLOAT16
    17: "DT_UINT16",     # DT_UINT16
    18: "DT_COMPLEX128",  # DT_COMPLEX128
    19: "DT_FLOAT16",    # DT_HALF
    22: "DT_UINT32",     # DT_UINT32
    23: "DT_UINT64",     # DT_UINT64
}

FLOAT_DTYPE_NAMES = frozenset({"DT_FLOAT", "DT_FLOAT16", "DT_BF16", "DT_DOUBLE"})
"""Dump data types whose values can overflow to inf or become nan."""

# Dump name → NumPy dtype of the stored little-endian bytes (bfloat16 is stored as its bits).
_STORAGE = {
    "DT_FLOAT": "<f4", "DT_FLOAT16": "<f2", "DT_DOUBLE": "<f8", "DT_INT8": "i1", "DT_UINT8": "u1",
    "DT_INT16": "<i2", "DT_UINT16": "<u2", "DT_INT32": "<i4", "DT_UINT32": "<u4",
    "DT_INT64": "<i8", "DT_UINT64": "<u8", "DT_BOOL": "?", "DT_COMPLEX64": "<c8",
    "DT_COMPLEX128": "<c16", "DT_BF16": "<u2",
}

_BY_NUMPY_NAME = {
    "float32": "DT_FLOAT", "float16": "DT_FLOAT16", "float64": "DT_DOUBLE", "int8": "DT_INT8",
    "uint8": "DT_UINT8", "int16": "DT_INT16", "uint16": "DT_UINT16", "int32": "DT_INT32",
    "uint32": "DT_UINT32", "int64": "DT_INT64", "uint64": "DT_UINT64", "bool": "DT_BOOL",
    "complex64": "DT_COMPLEX64", "complex128": "DT_COMPLEX128", "bfloat16": "DT_BF16",
}


def dtype_name_of_array(array):
    """The dump format's name of ``array``'s dtype (``DT_FLOAT``, ...), or None."""
    return _BY_NUMPY_NAME.get(np.dtype(array.dtype).name)


def numpy_dtype_for(name):
    """The NumPy dtype a tensor of dump type ``name`` is read as (bfloat16 → float32), or None
    for types without a raw layout we can read."""
    if name == "DT_BF16":
        return np.dtype(np.float32)
    storage = _STORAGE.get(name)
    return np.dtype(storage).newbyteorder("=") if storage else None


def decode_array(name, data, shape):
    """The values of a tensor of dump type ``name`` from its raw ``data`` bytes.

    bfloat16 values are widened to float32 exactly (a bfloat16 is the upper half of a float32).
    Raises ValueError when the byte count does not match the shape.
    """
    storage = _STORAGE.get(name)
    if storage is None:
        raise ValueError(f"tensors of type {name} have no raw layout that can be read")
    array = np.frombuffer(data, dtype=np.dtype(storage))
    count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if array.size != count:
        raise ValueError(f"{len(data)} bytes of {name} hold {array.size} values, but the shape "
                         f"{list(shape)} needs {count}")
    if name == "DT_BF16":
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(array.dtype.newbyteorder("="), copy=False).reshape(shape)
