"""An independent reader of dump files, written for the tests from the documented field list.

It does not use protobuf or npu-adapter: it decodes the protobuf wire format by hand (varints,
length-delimited fields) for exactly the fields the documentation lists, and then slices the raw
tensor bytes that follow the header. If our writer put a field under the wrong number or type,
this reader would not find it.

    DumpData:  version=1 string, dump_time=2 uint64, output=3 OpOutput*, input=4 OpInput*,
               buffer=5, op_name=6 string, attr=7 OpAttr*, space=8, dfx_message=9
    OpOutput:  data_type=1, format=2, shape=3 Shape, original_op=4, data=5 bytes, size=6 uint64,
               original_shape=7 Shape
    OpInput:   data_type=1, format=2, shape=3 Shape, data=4 bytes, size=5 uint64,
               original_shape=6 Shape
    Shape:     dim=1 repeated uint64
    OpAttr:    name=1 string, value=2 string
"""

import struct

# The dump format's data type numbers, from the documentation (not from npu_adapter).
DT = {"DT_FLOAT": 1, "DT_FLOAT16": 2, "DT_INT8": 3, "DT_UINT8": 4, "DT_INT16": 5,
      "DT_UINT16": 6, "DT_INT32": 7, "DT_INT64": 8, "DT_UINT32": 9, "DT_UINT64": 10,
      "DT_BOOL": 11, "DT_DOUBLE": 12, "DT_COMPLEX64": 16, "DT_COMPLEX128": 17, "DT_BF16": 27}
FORMAT_ND = 2
NUMPY_OF_DT = {1: "<f4", 2: "<f2", 3: "i1", 4: "u1", 5: "<i2", 6: "<u2", 7: "<i4", 8: "<i8",
               9: "<u4", 10: "<u8", 11: "?", 12: "<f8", 16: "<c8", 17: "<c16", 27: "<u2"}


def _varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(buf):
    """``[(field number, wire type, value)]``; length-delimited values are bytes."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value = struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value = bytes(buf[pos:pos + length])
            pos += length
        elif wire == 5:
            value = struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        else:
            raise ValueError(f"wire type {wire} of field {number}")
        out.append((number, wire, value))
    return out


def _shape(buf):
    dims = []
    for number, wire, value in fields(buf):
        assert number == 1, number
        if wire == 2:  # packed
            pos = 0
            while pos < len(value):
                dim, pos = _varint(value, pos)
                dims.append(dim)
        else:
            dims.append(value)
    return dims


def _tensor(buf, size_field, data_field, original_field):
    tensor = {"data_type": 0, "format": 0, "shape": [], "size": 0, "original_shape": None,
              "data": b""}
    for number, _, value in fields(buf):
        if number == 1:
            tensor["data_type"] = value
        elif number == 2:
            tensor["format"] = value
        elif number == 3:
            tensor["shape"] = _shape(value)
        elif number == size_field:
            tensor["size"] = value
        elif number == data_field:
            tensor["data"] = value
        elif number == original_field:
            tensor["original_shape"] = _shape(value)
    return tensor


def parse_dump(content):
    """``{"op_name", "dump_time", "inputs", "outputs", "attrs", "payloads"}`` of a dump file's
    bytes; each payload is ``(direction, index, raw bytes)``."""
    (length,) = struct.unpack_from("<Q", content, 0)
    header = content[8:8 + length]
    result = {"op_name": "", "dump_time": 0, "version": "", "inputs": [], "outputs": [],
              "attrs": {}}
    for number, _, value in fields(header):
        if number == 1:
            result["version"] = value.decode()
        elif number == 2:
            result["dump_time"] = value
        elif number == 3:
            result["outputs"].append(_tensor(value, 6, 5, 7))
        elif number == 4:
            result["inputs"].append(_tensor(value, 5, 4, 6))
        elif number == 6:
            result["op_name"] = value.decode()
        elif number == 7:
            attr = {n: v.decode() for n, _, v in fields(value)}
            result["attrs"][attr.get(1, "")] = attr.get(2, "")
    offset = 8 + length
    payloads = []
    for direction in ("inputs", "outputs"):
        for index, tensor in enumerate(result[direction]):
            payloads.append((direction, index, content[offset:offset + tensor["size"]]))
            offset += tensor["size"]
    result["payloads"] = payloads
    result["trailing"] = len(content) - offset
    return result
