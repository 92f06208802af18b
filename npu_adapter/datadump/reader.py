"""Read dump trees and dump files, ours or a device's.

:func:`scan_dump_tree` finds every dump file under a directory and places it by its path
(``{time}/{device_id}/{model_name}/{model_id}/{data_index}/{file}``); :func:`read_dump_file`
decodes one file (header and tensors). A device may store tensors in a tiled device format
(``NC1HWC0`` for 4-D activations, ``FRACTAL_NZ`` for matrices): :meth:`DumpTensor.values` turns
those back into the logical layout given by ``original_shape``, so they compare with ours.
"""

import dataclasses
import os
import struct

import numpy as np

from npu_adapter.datadump import proto
from npu_adapter.datadump.dtypes import decode_array
from npu_adapter.datadump.layout import MAPPING_FILE, parse_file_name
from npu_adapter.datadump.stats import read_stats_csv
from npu_adapter.errors import NpuAdapterError

__all__ = [
    "DumpEntry",
    "DumpFormatError",
    "DumpRecord",
    "DumpTensor",
    "UnsupportedFormatError",
    "read_dump_file",
    "read_stats_file",
    "scan_dump_tree",
    "to_logical",
]

_PLAIN_FORMATS = frozenset({
    "FORMAT_ND", "FORMAT_NCHW", "FORMAT_NHWC", "FORMAT_HWCN", "FORMAT_CHWN", "FORMAT_NDHWC",
    "FORMAT_NCDHW", "FORMAT_DHWCN", "FORMAT_DHWNC", "FORMAT_NC", "FORMAT_CN", "FORMAT_NCL",
    "FORMAT_MD",
})


class DumpFormatError(NpuAdapterError, ValueError):
    """A file is not a valid dump file (truncated, bad header, sizes that do not add up)."""


class UnsupportedFormatError(NpuAdapterError, ValueError):
    """A tensor is stored in a device format this reader cannot turn into its logical layout."""


@dataclasses.dataclass
class DumpTensor:
    """One input or output of a dumped op, as the header describes it."""

    direction: str
    index: int
    dtype: str
    format: str
    shape: tuple
    original_shape: tuple
    size: int
    data: object

    def raw_values(self):
        """The values in the stored layout (``shape``)."""
        return decode_array(self.dtype, self.data, self.shape)

    def values(self):
        """The values in the logical layout (``original_shape``); see :func:`to_logical`."""
        return to_logical(self.raw_values(), self.format, self.original_shape)


@dataclasses.dataclass
class DumpRecord:
    """A decoded dump file: its name parts, header fields and tensors."""

    path: str
    op_type: str
    op_name: str
    task_id: int
    stream_id: object
    timestamp: int
    dump_time: int
    inputs: list
    outputs: list
    attrs: dict
    header: object

    def tensors(self):
        """Inputs then outputs."""
        return list(self.inputs) + list(self.outputs)


def _tensor(direction, index, message):
    dtype = proto.DATA_TYPE_NAMES.get(message.data_type, f"DT_{message.data_type}")
    fmt = proto.FORMAT_NAMES.get(message.format, f"FORMAT_{message.format}")
    shape = tuple(int(d) for d in message.shape.dim)
    original = tuple(int(d) for d in message.original_shape.dim) if message.HasField(
        "original_shape") else shape
    return DumpTensor(direction, index, dtype, fmt, shape, original, int(message.size), None)


def read_dump_file(path):
    """Decode the dump file at ``path`` into a :class:`DumpRecord`.

    Raises :class:`DumpFormatError` naming the problem when the file is not a dump file.
    """
    with open(path, "rb") as f:
        content = f.read()
    view = memoryview(content)
    if len(content) < 8:
        raise DumpFormatError(f"{path}: {len(content)} bytes is too short for a dump file "
                              "(it starts with an 8-byte header length)")
    (length,) = struct.unpack_from("<Q", content, 0)
    if length > len(content) - 8:
        raise DumpFormatError(f"{path}: header length {length} exceeds the file size "
                              f"{len(content)}")
    header = proto.DumpData()
    try:
        header.ParseFromString(bytes(view[8:8 + length]))
    except Exception as exc:  # protobuf raises DecodeError (a subclass of Exception)
        raise DumpFormatError(f"{path}: the header is not a DumpData message ({exc})") from None
    tensors = [_tensor("input", i, m) for i, m in enumerate(header.input)]
    tensors += [_tensor("output", i, m) for i, m in enumerate(header.output)]
    extra = sum(int(b.size) for b in header.buffer) + sum(int(s.size) for s in header.space)
    payload = len(content) - 8 - length
    needed = sum(t.size for t in tensors) + extra
    if needed != payload:
        raise DumpFormatError(f"{path}: the header describes {needed} bytes of tensor data but "
                              f"the file holds {payload}")
    offset = 8 + length
    for tensor in tensors:
        tensor.data = view[offset:offset + tensor.size]
        offset += tensor.size
    name = _parsed_name(path)
    return DumpRecord(
        path=path, op_type=name.op_type if name else "", op_name=header.op_name or (
            name.op_name if name else ""),
        task_id=name.task_id if name else 0, stream_id=name.stream_id if name else None,
        timestamp=name.timestamp if name else 0, dump_time=int(header.dump_time),
        inputs=[t for t in tensors if t.direction == "input"],
        outputs=[t for t in tensors if t.direction == "output"],
        attrs={a.name: a.value for a in header.attr}, header=header)


def read_stats_file(path):
    """The rows of a statistics CSV (dicts keyed by column name)."""
    with open(path, encoding="utf-8") as f:
        return read_stats_csv(f.read())


def _parsed_name(path):
    directory, file_name = os.path.split(path)
    parsed = parse_file_name(file_name)
    if parsed is None:
        original = _mapping(directory).get(file_name)
        if original:
            parsed = parse_file_name(original)
    return parsed


def _mapping(directory):
    path = os.path.join(directory, MAPPING_FILE)
    mapping = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                short, _, original = line.rstrip("\n").partition(",")
                if original:
                    mapping[short] = original
    except OSError:
        pass
    return mapping


# ---------------------------------------------------------------------------- device formats


def to_logical(values, fmt, original_shape):
    """``values`` stored in format ``fmt`` as an array of ``original_shape``.

    Plain formats are reshaped. ``FORMAT_NC1HWC0`` (N, C1, H, W, C0) becomes NCHW or NHWC —
    whichever ``original_shape`` is — with the channel padding dropped. ``FORMAT_FRACTAL_NZ``
    (..., N1, M1, M0, N0) becomes (..., M, N) with the padding dropped. Other device formats
    raise :class:`UnsupportedFormatError`.
    """
    original = tuple(int(d) for d in original_shape)
    if fmt in _PLAIN_FORMATS:
        if values.size == int(np.prod(original, dtype=np.int64)):
            return values.reshape(original)
        raise UnsupportedFormatError(f"{values.size} values do not fill the original shape "
                                     f"{list(original)}")
    if fmt == "FORMAT_NC1HWC0":
        return _from_nc1hwc0(values, original)
    if fmt == "FORMAT_FRACTAL_NZ":
        return _from_fractal_nz(values, original)
    raise UnsupportedFormatError(f"device format {fmt} is not converted to a logical layout")


def _from_nc1hwc0(values, original):
    if values.ndim != 5 or len(original) != 4:
        raise UnsupportedFormatError(f"NC1HWC0 data of shape {list(values.shape)} cannot hold "
                                     f"the original shape {list(original)}")
    n, c1, h, w, c0 = values.shape
    nchw = values.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)
    if original[0] == n and original[1:3] == (h, w) and original[3] <= c1 * c0:
        return np.ascontiguousarray(nchw[:, :original[3]].transpose(0, 2, 3, 1))
    if original[0] == n and original[2:] == (h, w) and original[1] <= c1 * c0:
        return np.ascontiguousarray(nchw[:, :original[1]])
    raise UnsupportedFormatError(f"NC1HWC0 data of shape {list(values.shape)} matches neither "
                                 f"NHWC nor NCHW {list(original)}")


def _from_fractal_nz(values, original):
    if values.ndim < 4 or len(original) < 2 or values.ndim - 2 != len(original):
        raise UnsupportedFormatError(f"FRACTAL_NZ data of shape {list(values.shape)} cannot hold "
                                     f"the original shape {list(original)}")
    *batch, n1, m1, m0, n0 = values.shape
    order = list(range(len(batch))) + [len(batch) + 1, len(batch) + 2, len(batch),
                                       len(batch) + 3]
    matrix = values.transpose(order).reshape(*batch, m1 * m0, n1 * n0)
    m, n = original[-2:]
    if tuple(batch) != original[:-2] or m > m1 * m0 or n > n1 * n0:
        raise UnsupportedFormatError(f"FRACTAL_NZ data of shape {list(values.shape)} cannot hold "
                                     f"the original shape {list(original)}")
    return np.ascontiguousarray(matrix[..., :m, :n])


# ---------------------------------------------------------------------------- trees


@dataclasses.dataclass(frozen=True)
class DumpEntry:
    """One dump file found under a tree, placed by its directory.

    ``time``, ``device_id``, ``model_name``, ``model_id`` and ``step`` come from the path
    (``{time}/{device_id}/{model_name}/{model_id}/{data_index}/``); each is None when the path
    does not have that level (single-op dumps have ``{time}/{device_id}/`` only).
    """

    path: str
    name: object
    time: object
    device_id: object
    model_name: object
    model_id: object
    step: object

    @property
    def kind(self):
        """``tensor``, ``stats`` or ``opdebug``."""
        return self.name.kind

    @property
    def op_name(self):
        """The (sanitised) op name from the file name."""
        return self.name.op_name


def _context(directory):
    parts = os.path.normpath(os.path.abspath(directory)).split(os.sep)
    if (len(parts) >= 6 and parts[-1].isdigit() and parts[-2].isdigit()
            and parts[-4].isdigit()):
        return parts[-5], int(parts[-4]), parts[-3], int(parts[-2]), int(parts[-1])
    if len(parts) >= 3 and parts[-1].isdigit() and parts[-2].isdigit() and len(parts[-2]) == 14:
        return parts[-2], int(parts[-1]), None, None, None
    return None, None, None, None, None


def scan_dump_tree(root):
    """Every dump file under ``root`` (a directory), sorted by (step, model, task id, name).

    Raises :class:`DumpFormatError` when ``root`` is not a directory.
    """
    if not os.path.isdir(root):
        raise DumpFormatError(f"{root}: not a directory")
    entries = []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        mapping = None
        for file_name in sorted(files):
            if file_name.startswith(".") or file_name == MAPPING_FILE:
                continue
            parsed = parse_file_name(file_name)
            if parsed is None:
                if mapping is None:
                    mapping = _mapping(directory)
                original = mapping.get(file_name)
                parsed = parse_file_name(original) if original else None
            if parsed is None:
                continue
            time, device, model_name, model_id, step = _context(directory)
            entries.append(DumpEntry(os.path.join(directory, file_name), parsed, time, device,
                                     model_name, model_id, step))
    entries.sort(key=lambda e: (-1 if e.step is None else e.step, e.time or "",
                                e.model_id or 0, e.model_name or "", e.name.task_id,
                                e.name.timestamp, e.path))
    return entries
