"""Dump files: the DumpData header, the binary layout, names and directories, statistics CSVs,
the reader (ours and device formats). No TensorFlow session is needed here."""

import os
import pathlib
import struct

import dump_wire
import numpy as np
import pytest

from npu_adapter.datadump import layout, proto
from npu_adapter.datadump.dtypes import decode_array, dtype_name_of_array
from npu_adapter.datadump.reader import (
    DumpFormatError,
    UnsupportedFormatError,
    read_dump_file,
    scan_dump_tree,
    to_logical,
)
from npu_adapter.datadump.stats import STATS_HEADER, read_stats_csv, stats_row, write_stats_csv
from npu_adapter.datadump.writer import TensorSpec, build_header, encode_dump, write_atomic

ARRAYS = {
    "DT_FLOAT": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
    "DT_FLOAT16": np.array([[1.5, -2.0], [65504.0, 0.0]], np.float16),
    "DT_DOUBLE": np.array([1e300, -1e-300], np.float64),
    "DT_INT8": np.array([-128, 127], np.int8),
    "DT_UINT8": np.array([0, 255], np.uint8),
    "DT_INT16": np.array([-32768, 7], np.int16),
    "DT_UINT16": np.array([65535], np.uint16),
    "DT_INT32": np.array([[1, -2, 3]], np.int32),
    "DT_INT64": np.array([2**62, -(2**62)], np.int64),
    "DT_UINT32": np.array([2**32 - 1], np.uint32),
    "DT_UINT64": np.array([2**64 - 1], np.uint64),
    "DT_BOOL": np.array([True, False, True]),
    "DT_COMPLEX64": np.array([1 + 2j, -3j], np.complex64),
    "DT_COMPLEX128": np.array([1e200 + 1j], np.complex128),
    "DT_INT32_SCALAR": np.array(7, np.int32),
}


def _dump_bytes(inputs, outputs, op_name="scope/op", dump_time=1234567890123456, attrs=()):
    header = build_header(op_name, inputs, outputs, dump_time, attrs)
    return b"".join(bytes(c) for c in encode_dump(header, list(inputs) + list(outputs)))


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_independent_parser_reads_every_dtype(name):
    array = ARRAYS[name]
    dt = name.replace("_SCALAR", "")
    content = _dump_bytes([TensorSpec(array)], [TensorSpec(array[..., ::-1] if array.ndim
                                                           else array)])
    parsed = dump_wire.parse_dump(content)
    assert parsed["op_name"] == "scope/op" and parsed["dump_time"] == 1234567890123456
    assert parsed["trailing"] == 0
    for direction, values in (("inputs", array), ("outputs", array[..., ::-1] if array.ndim
                                                     else array)):
        tensor = parsed[direction][0]
        assert tensor["data_type"] == dump_wire.DT[dt]
        assert tensor["format"] == dump_wire.FORMAT_ND
        assert tensor["shape"] == list(values.shape)
        assert tensor["original_shape"] == list(values.shape)
        assert tensor["size"] == values.nbytes
        assert tensor["data"] == b""  # the header's data fields are empty
    raw_in = parsed["payloads"][0][2]
    decoded = np.frombuffer(raw_in, dtype=dump_wire.NUMPY_OF_DT[dump_wire.DT[dt]])
    np.testing.assert_array_equal(decoded.reshape(array.shape), array)


def test_bfloat16_is_stored_as_its_bits_and_read_back_exactly():
    bits = np.array([0x3F80, 0xC040, 0x7F80, 0x0001], np.uint16)   # 1, -3, inf, tiny
    values = decode_array("DT_BF16", bits.tobytes(), (4,))
    expected = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(values, expected)
    assert values[0] == 1.0 and values[1] == -3.0 and np.isposinf(values[2])


def test_file_size_is_header_plus_tensor_sizes():
    inputs = [TensorSpec(ARRAYS["DT_FLOAT"]), TensorSpec(ARRAYS["DT_INT64"])]
    outputs = [TensorSpec(ARRAYS["DT_BOOL"])]
    content = _dump_bytes(inputs, outputs)
    (length,) = struct.unpack("<Q", content[:8])
    assert len(content) == 8 + length + sum(s.array.nbytes for s in inputs + outputs)
    header = proto.DumpData.FromString(content[8:8 + length])
    assert [i.size for i in header.input] == [24, 16] and header.output[0].size == 3


def test_attrs_and_proto_text():
    content = _dump_bytes([], [], op_name="Node_OpDebug", attrs=[("overflow", "inf")])
    assert dump_wire.parse_dump(content)["attrs"] == {"overflow": "inf"}
    text = proto.proto_text()
    for line in ("package toolkit.dumpdata;", "repeated OpOutput output = 3;",
                 "uint64 dump_time = 2;", "DT_BF16 = 27;", "FORMAT_FRACTAL_NZ = 29;",
                 "uint32 arg_index = 10;", "repeated DimRange dim_range = 10;"):
        assert line in text, line


def _repeated(field):
    # protobuf 7 has is_repeated; protobuf 4 only label (3 = LABEL_REPEATED).
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == 3


def test_descriptor_field_numbers_match_the_documented_list():
    fields = {f.name: (f.number, _repeated(f)) for f in proto.DumpData.DESCRIPTOR.fields}
    assert fields == {"version": (1, False), "dump_time": (2, False), "output": (3, True),
                      "input": (4, True), "buffer": (5, True), "op_name": (6, False),
                      "attr": (7, True), "space": (8, True), "dfx_message": (9, False)}
    output = {f.name: f.number for f in proto.OpOutput.DESCRIPTOR.fields}
    assert output == {"data_type": 1, "format": 2, "shape": 3, "original_op": 4, "data": 5,
                      "size": 6, "original_shape": 7, "sub_format": 8, "address": 9,
                      "dim_range": 10, "offset": 11}
    inp = {f.name: f.number for f in proto.OpInput.DESCRIPTOR.fields}
    assert inp == {"data_type": 1, "format": 2, "shape": 3, "data": 4, "size": 5,
                   "original_shape": 6, "sub_format": 7, "address": 8, "offset": 9,
                   "arg_index": 10, "input_type": 11}


def test_arrays_of_undumpable_types_are_refused():
    assert dtype_name_of_array(np.array(["a"])) is None
    with pytest.raises(TypeError, match="cannot be dumped"):
        TensorSpec(np.array(["a"], dtype=object))


# ---------------------------------------------------------------------------- names and paths


@pytest.mark.parametrize("name, expected", [
    ("conv1/Conv2D", "conv1_Conv2D"),
    ("a.b c\\d", "a_b_c_d"),
    ("../../etc/passwd", "______etc_passwd"),
    ("", "_"),
    ("x\x00y:z", "x_y_z"),
    ("ok_name-1", "ok_name-1"),
])
def test_sanitize(name, expected):
    assert layout.sanitize(name) == expected


def test_file_names_and_their_parsing():
    name = layout.dump_file_name("Conv2D", "net/conv.1", 7, 0, 1700000000123456)
    assert name == "Conv2D.net_conv_1.7.0.1700000000123456"
    parsed = layout.parse_file_name(name)
    assert (parsed.op_type, parsed.op_name, parsed.task_id, parsed.stream_id,
            parsed.timestamp, parsed.kind) == ("Conv2D", "net_conv_1", 7, 0, 1700000000123456,
                                               "tensor")
    old = layout.parse_file_name("Relu.relu1.12.1597922031178434")   # no stream id
    assert (old.task_id, old.stream_id, old.timestamp) == (12, None, 1597922031178434)
    stats = layout.parse_file_name(name + ".csv")
    assert stats.kind == "stats" and stats.op_name == "net_conv_1"
    debug = layout.parse_file_name("OpDebug.Node_OpDebug.59.1.1597922031178434")
    assert debug.kind == "opdebug"
    ffts = layout.parse_file_name("Add.add.3.2.1597922031178434.1.0.4.0")
    assert ffts.extra == (1, 0, 4, 0) and ffts.stream_id == 2
    for not_a_dump in ("mapping.csv", "README", "a.b.c", "Conv2D.x.y.0.1"):
        assert layout.parse_file_name(not_a_dump) is None


def test_iteration_dir_levels():
    path = layout.iteration_dir("20260101120000", 3, "GeOp1_0", 11, 5)
    assert path.split(os.sep) == ["20260101120000", "3", "GeOp1_0", "11", "5"]
    assert layout.iteration_dir("t", 0, "../x", 1, 0).split(os.sep)[2] == "___x"


def test_long_file_names_are_shortened_deterministically():
    long_name = "Add." + "x" * 300 + ".1.0.1700000000000000"
    short = layout.shorten_file_name(long_name)
    assert short.isdigit() and len(short) <= 255
    assert layout.shorten_file_name(long_name) == short
    assert layout.shorten_file_name(long_name + ".csv").endswith(".csv")
    assert layout.shorten_file_name("Add.a.1.0.2") == "Add.a.1.0.2"


def test_safe_join_refuses_to_leave_the_root(tmp_path):
    assert layout.safe_join(str(tmp_path), "a", "b").startswith(str(tmp_path))
    with pytest.raises(ValueError, match="outside the dump directory"):
        layout.safe_join(str(tmp_path), "..", "elsewhere")
    os.symlink("/", tmp_path / "link")
    with pytest.raises(ValueError, match="outside"):
        layout.safe_join(str(tmp_path), "link", "etc")


def test_write_atomic_leaves_no_temporary_file(tmp_path):
    path = write_atomic(str(tmp_path / "d" / "f"), [b"abc", np.arange(3, dtype=np.uint8)])
    assert pathlib.Path(path).read_bytes() == b"abc\x00\x01\x02"
    assert os.listdir(tmp_path / "d") == ["f"]


# ---------------------------------------------------------------------------- statistics


def test_stats_rows_match_numpy():
    a = np.array([[1.5, -2.0, np.nan], [np.inf, -np.inf, 4.25]], np.float32)
    row = stats_row("Output", 0, a, "DT_FLOAT", "FORMAT_ND")
    finite = a[np.isfinite(a)].astype(np.float64)
    assert row[:6] == ["Output", "0", "24", "DT_FLOAT", "ND", "2x3"]
    assert float(row[6]) == finite.max() and float(row[7]) == finite.min()
    assert float(row[8]) == finite.mean()
    assert row[9:] == ["6", "1", "1", "1"]
    ints = stats_row("Input", 1, np.array([3, -7, 10], np.int64), "DT_INT64", "FORMAT_ND")
    assert ints[6:10] == ["10", "-7", repr(2 / 1), "3"]
    assert stats_row("Input", 0, np.array(2.5, np.float32), "DT_FLOAT", "ND")[5] == ""
    empty = stats_row("Input", 0, np.zeros([0, 3], np.float32), "DT_FLOAT", "ND")
    assert empty[6:10] == ["NA", "NA", "NA", "0"]
    allnan = stats_row("Input", 0, np.array([np.nan]), "DT_DOUBLE", "ND")
    assert allnan[6:11] == ["NA", "NA", "NA", "1", "1"]
    text = write_stats_csv([row, ints])
    assert text.splitlines()[0] == ",".join(STATS_HEADER)
    assert read_stats_csv(text)[1]["Max Value"] == "10"


# ---------------------------------------------------------------------------- reader


def _write(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content)
    return str(path)


def test_reader_round_trip_and_errors(tmp_path):
    a = ARRAYS["DT_FLOAT"]
    good = _write(tmp_path / "Relu.r.1.0.1700000000000001",
                  _dump_bytes([TensorSpec(a)], [TensorSpec(np.maximum(a, 0))], op_name="n/r"))
    record = read_dump_file(good)
    assert record.op_name == "n/r" and record.op_type == "Relu" and record.stream_id == 0
    np.testing.assert_array_equal(record.inputs[0].values(), a)
    np.testing.assert_array_equal(record.outputs[0].values(), np.maximum(a, 0))
    content = pathlib.Path(good).read_bytes()
    cases = {
        "short": content[:5],
        "length": struct.pack("<Q", 10**9) + content[8:],
        "truncated": content[:-4],
        "extra": content + b"\x00",
        "garbage": struct.pack("<Q", 4) + b"\xff\xff\xff\xff",
    }
    messages = {"short": "too short", "length": "exceeds the file size",
                "truncated": "describes 48 bytes", "extra": "describes 48 bytes",
                "garbage": "not a DumpData"}
    for key, bad in cases.items():
        path = _write(tmp_path / f"bad_{key}" / "Relu.r.1.0.1", bad)
        with pytest.raises(DumpFormatError, match=messages[key]):
            read_dump_file(path)


def test_scan_places_files_by_their_directories(tmp_path):
    content = _dump_bytes([], [TensorSpec(np.ones(2, np.float32))])
    base = tmp_path / "20260101120000" / "0"
    _write(base / "GeOp1_0" / "1" / "0" / "Add.a.2.0.11", content)
    _write(base / "GeOp1_0" / "1" / "1" / "Add.a.2.0.12", content)
    _write(base / "GeOp1_1" / "11" / "0" / "Mul.m.1.0.13", content)
    _write(base / "Mul.single.1.0.14", content)                      # single-op dump
    _write(base / "GeOp1_0" / "1" / "0" / "mapping.csv", b"")
    _write(base / "GeOp1_0" / "1" / "0" / ".tmpfile.tmp", b"")
    entries = scan_dump_tree(str(tmp_path))
    placed = [(e.time, e.device_id, e.model_name, e.model_id, e.step, e.op_name) for e in entries]
    assert placed == [
        ("20260101120000", 0, None, None, None, "single"),
        ("20260101120000", 0, "GeOp1_0", 1, 0, "a"),
        ("20260101120000", 0, "GeOp1_1", 11, 0, "m"),
        ("20260101120000", 0, "GeOp1_0", 1, 1, "a"),
    ]
    # Scanning below the top still places the files by their absolute paths.
    deeper = scan_dump_tree(str(base / "GeOp1_0" / "1"))
    assert [(e.model_name, e.step) for e in deeper] == [("GeOp1_0", 0), ("GeOp1_0", 1)]
    with pytest.raises(DumpFormatError, match="not a directory"):
        scan_dump_tree(str(tmp_path / "missing"))


def test_shortened_names_are_resolved_through_mapping_csv(tmp_path):
    long_name = "Add." + "y" * 300 + ".4.0.1700000000000000"
    short = layout.shorten_file_name(long_name)
    _write(tmp_path / "t" / "0" / "M" / "1" / "0" / short,
           _dump_bytes([], [TensorSpec(np.ones(1, np.float32))], op_name="y" * 300))
    _write(tmp_path / "t" / "0" / "M" / "1" / "0" / "mapping.csv",
           f"{short},{long_name}\n".encode())
    (entry,) = scan_dump_tree(str(tmp_path))
    assert entry.op_name == "y" * 300 and entry.name.task_id == 4
    assert read_dump_file(entry.path).task_id == 4


# ---------------------------------------------------------------------------- device formats


def _to_nc1hwc0(nchw, c0=16):
    n, c, h, w = nchw.shape
    c1 = -(-c // c0)
    padded = np.zeros((n, c1 * c0, h, w), nchw.dtype)
    padded[:, :c] = nchw
    return padded.reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2).copy()


def _to_fractal_nz(matrix, m0=16, n0=16):
    *batch, m, n = matrix.shape
    m1, n1 = -(-m // m0), -(-n // n0)
    padded = np.zeros((*batch, m1 * m0, n1 * n0), matrix.dtype)
    padded[..., :m, :n] = matrix
    blocks = padded.reshape(*batch, m1, m0, n1, n0)
    k = len(batch)
    return blocks.transpose(*range(k), k + 2, k, k + 1, k + 3).copy()


def test_nc1hwc0_back_to_nhwc_and_nchw():
    rng = np.random.default_rng(0)
    nhwc = rng.standard_normal((2, 5, 4, 20)).astype(np.float32)
    device = _to_nc1hwc0(nhwc.transpose(0, 3, 1, 2))
    assert device.shape == (2, 2, 5, 4, 16)
    np.testing.assert_array_equal(to_logical(device, "FORMAT_NC1HWC0", nhwc.shape), nhwc)
    nchw = nhwc.transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(to_logical(device, "FORMAT_NC1HWC0", nchw.shape), nchw)
    with pytest.raises(UnsupportedFormatError):
        to_logical(device, "FORMAT_NC1HWC0", (2, 3, 3, 3))


def test_fractal_nz_back_to_matrices():
    rng = np.random.default_rng(1)
    for shape in ((20, 33), (3, 17, 5)):
        matrix = rng.standard_normal(shape).astype(np.float16)
        device = _to_fractal_nz(matrix)
        np.testing.assert_array_equal(to_logical(device, "FORMAT_FRACTAL_NZ", shape), matrix)
    with pytest.raises(UnsupportedFormatError, match="FRACTAL_Z is not converted"):
        to_logical(np.zeros(4), "FORMAT_FRACTAL_Z", (2, 2))
    with pytest.raises(UnsupportedFormatError, match="do not fill"):
        to_logical(np.zeros(4), "FORMAT_ND", (2, 3))
