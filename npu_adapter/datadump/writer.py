"""Tensor dump files in the device's binary layout.

A file is::

    uint64 (little-endian)  L = length of the header
    L bytes                 a serialized toolkit.dumpdata.DumpData whose ``data`` fields are empty
    raw tensor bytes        every input (``size`` bytes each, in order), then every output,
                            then buffers and workspaces (we write none)

so its size is ``8 + L + Σ input.size + Σ output.size``. Tensors are written in C order, in their
logical shape, with format ``FORMAT_ND`` and ``original_shape`` equal to ``shape``.

Every file is written to a temporary name in its directory and renamed into place, so a reader
never sees half a file.
"""

import contextlib
import os
import struct
import sys
import threading

import numpy as np

from npu_adapter.datadump import proto
from npu_adapter.datadump.dtypes import dtype_name_of_array

__all__ = ["HEADER_LENGTH_FORMAT", "TensorSpec", "build_header", "encode_dump",
           "tensor_bytes", "write_atomic"]

HEADER_LENGTH_FORMAT = "<Q"
_LITTLE = sys.byteorder == "little"


class TensorSpec:
    """One tensor of a dump: its array and how it is described in the header."""

    __slots__ = ("array", "dtype_name", "format_name")

    def __init__(self, array, dtype_name=None, format_name="FORMAT_ND"):
        self.array = np.asarray(array)
        self.dtype_name = dtype_name or dtype_name_of_array(self.array)
        if self.dtype_name is None:
            raise TypeError(f"arrays of dtype {self.array.dtype} cannot be dumped")
        self.format_name = format_name


def tensor_bytes(array):
    """A contiguous little-endian byte view of ``array`` (no copy when already so)."""
    array = np.ascontiguousarray(array)
    if not _LITTLE and array.dtype.byteorder == "=" and array.dtype.itemsize > 1:
        array = array.byteswap()  # pragma: no cover - big-endian hosts
    return array.reshape(-1).view(np.uint8)


def _describe(message, spec):
    message.data_type = proto.DATA_TYPES[spec.dtype_name]
    message.format = proto.FORMATS[spec.format_name]
    dims = [int(d) for d in spec.array.shape]
    message.shape.dim.extend(dims)
    message.original_shape.dim.extend(dims)
    message.size = int(spec.array.nbytes)


def build_header(op_name, inputs=(), outputs=(), dump_time=0, attrs=()):
    """The ``DumpData`` header of a dump: ``inputs``/``outputs`` are :class:`TensorSpec`\\ s,
    ``attrs`` ``(name, value)`` string pairs (stored in ``DumpData.attr``)."""
    header = proto.DumpData(op_name=op_name, dump_time=int(dump_time))
    for spec in inputs:
        _describe(header.input.add(), spec)
    for spec in outputs:
        _describe(header.output.add(), spec)
    for name, value in attrs:
        header.attr.add(name=str(name), value=str(value))
    return header


def encode_dump(header, tensors=()):
    """The chunks of a dump file (header length, header, then each tensor's bytes)."""
    serialized = header.SerializeToString(deterministic=True)
    return [struct.pack(HEADER_LENGTH_FORMAT, len(serialized)), serialized,
            *(tensor_bytes(spec.array) for spec in tensors)]


def write_atomic(path, chunks, make_dirs=True):
    """Write ``chunks`` (bytes-like objects, or a str) to ``path`` through a temporary file in the
    same directory, then rename it into place. Creates the directory unless ``make_dirs`` is
    False (the caller made it)."""
    directory = os.path.dirname(path)
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(
        directory, f".{os.path.basename(path)}.{os.getpid()}.{threading.get_ident()}.tmp")
    if isinstance(chunks, str):
        chunks = [chunks.encode("utf-8")]
    try:
        with open(temporary, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path
