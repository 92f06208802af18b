"""The ``toolkit.dumpdata`` protobuf messages of Ascend's tensor dump files, built at run time.

A dump file (see :mod:`npu_adapter.datadump.writer`) starts with a serialized ``DumpData`` message.
The messages are declared here from their documented field list (name, number, type) with
protobuf's descriptor API and compiled into a private descriptor pool, so no generated
``_pb2`` module is shipped and the same code runs with every protobuf major version TensorFlow
brings (4.x with TensorFlow 2.15, 7.x with 2.21).

``python -m npu_adapter.datadump.proto`` prints the equivalent ``.proto`` text.

Public names: :data:`DumpData`, :data:`OpOutput`, :data:`OpInput`, :data:`OriginalOp`,
:data:`Shape`, :data:`DimRange`, :data:`OpBuffer`, :data:`OpAttr`, :data:`Workspace` (message
classes); :data:`DATA_TYPES` / :data:`FORMATS` (enum name → number) and their inverses.
"""

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = [
    "DATA_TYPES",
    "DATA_TYPE_NAMES",
    "DimRange",
    "DumpData",
    "FORMATS",
    "FORMAT_NAMES",
    "OpAttr",
    "OpBuffer",
    "OpInput",
    "OpOutput",
    "OriginalOp",
    "PACKAGE",
    "Shape",
    "Workspace",
    "file_descriptor_proto",
    "proto_text",
]

PACKAGE = "toolkit.dumpdata"
_FILE_NAME = "npu_adapter/datadump/dump_data.proto"

# ``OutputDataType``. This numbering is the dump format's own; it is *not* aclDataType's.
DATA_TYPES = {
    "DT_UNDEFINED": 0, "DT_FLOAT": 1, "DT_FLOAT16": 2, "DT_INT8": 3, "DT_UINT8": 4,
    "DT_INT16": 5, "DT_UINT16": 6, "DT_INT32": 7, "DT_INT64": 8, "DT_UINT32": 9,
    "DT_UINT64": 10, "DT_BOOL": 11, "DT_DOUBLE": 12, "DT_STRING": 13, "DT_DUAL_SUB_INT8": 14,
    "DT_DUAL_SUB_UINT8": 15, "DT_COMPLEX64": 16, "DT_COMPLEX128": 17, "DT_QINT8": 18,
    "DT_QINT16": 19, "DT_QINT32": 20, "DT_QUINT8": 21, "DT_QUINT16": 22, "DT_RESOURCE": 23,
    "DT_STRING_REF": 24, "DT_DUAL": 25, "DT_VARIANT": 26, "DT_BF16": 27, "DT_INT4": 28,
    "DT_UINT1": 29, "DT_INT2": 30, "DT_UINT2": 31, "DT_COMPLEX32": 32, "DT_HIFLOAT8": 33,
    "DT_FLOAT8_E5M2": 34, "DT_FLOAT8_E4M3FN": 35, "DT_FLOAT8_E8M0": 36, "DT_FLOAT6_E3M2": 37,
    "DT_FLOAT6_E2M3": 38, "DT_FLOAT4_E2M1": 39, "DT_FLOAT4_E1M2": 40,
}
DATA_TYPE_NAMES = {number: name for name, number in DATA_TYPES.items()}

# ``OutputFormat``: logical layouts (ND, NCHW, NHWC, ...) and the device's tiled layouts.
FORMATS = {
    "FORMAT_NCHW": 0, "FORMAT_NHWC": 1, "FORMAT_ND": 2, "FORMAT_NC1HWC0": 3, "FORMAT_FRACTAL_Z": 4,
    "FORMAT_NC1C0HWPAD": 5, "FORMAT_NHWC1C0": 6, "FORMAT_FSR_NCHW": 7,
    "FORMAT_FRACTAL_DECONV": 8, "FORMAT_C1HWNC0": 9, "FORMAT_FRACTAL_DECONV_TRANSPOSE": 10,
    "FORMAT_FRACTAL_DECONV_SP_STRIDE_TRANS": 11, "FORMAT_NC1HWC0_C04": 12,
    "FORMAT_FRACTAL_Z_C04": 13, "FORMAT_CHWN": 14, "FORMAT_FRACTAL_DECONV_SP_STRIDE8_TRANS": 15,
    "FORMAT_HWCN": 16, "FORMAT_NC1KHKWHWC0": 17, "FORMAT_BN_WEIGHT": 18,
    "FORMAT_FILTER_HWCK": 19, "FORMAT_HASHTABLE_LOOKUP_LOOKUPS": 20,
    "FORMAT_HASHTABLE_LOOKUP_KEYS": 21, "FORMAT_HASHTABLE_LOOKUP_VALUE": 22,
    "FORMAT_HASHTABLE_LOOKUP_OUTPUT": 23, "FORMAT_HASHTABLE_LOOKUP_HITS": 24,
    "FORMAT_C1HWNCoC0": 25, "FORMAT_MD": 26, "FORMAT_NDHWC": 27, "FORMAT_FRACTAL_ZZ": 28,
    "FORMAT_FRACTAL_NZ": 29, "FORMAT_NCDHW": 30, "FORMAT_DHWCN": 31, "FORMAT_NDC1HWC0": 32,
    "FORMAT_FRACTAL_Z_3D": 33, "FORMAT_CN": 34, "FORMAT_NC": 35, "FORMAT_DHWNC": 36,
    "FORMAT_FRACTAL_Z_3D_TRANSPOSE": 37, "FORMAT_FRACTAL_ZN_LSTM": 38, "FORMAT_FRACTAL_Z_G": 39,
    "FORMAT_RESERVED": 40, "FORMAT_ALL": 41, "FORMAT_NULL": 42, "FORMAT_ND_RNN_BIAS": 43,
    "FORMAT_FRACTAL_ZN_RNN": 44, "FORMAT_YUV": 45, "FORMAT_YUV_A": 46, "FORMAT_NCL": 47,
    "FORMAT_FRACTAL_Z_WINO": 48, "FORMAT_C1HWC0": 49, "FORMAT_MAX": 0xFF,
}
FORMAT_NAMES = {number: name for name, number in FORMATS.items()}

_ENUMS = {
    "OutputDataType": DATA_TYPES,
    "OutputFormat": FORMATS,
    "BufferType": {"L1": 0},
    "SpaceType": {"LOG": 0},
}

# message → [(field name, number, type, repeated)]; a type is a scalar keyword, an enum name or a
# message name of this package.
_MESSAGES = {
    "OriginalOp": [
        ("name", 1, "string", False),
        ("output_index", 2, "uint32", False),
        ("data_type", 3, "OutputDataType", False),
        ("format", 4, "OutputFormat", False),
    ],
    "Shape": [("dim", 1, "uint64", True)],
    "DimRange": [("dim_start", 1, "uint64", False), ("dim_end", 2, "uint64", False)],
    "OpOutput": [
        ("data_type", 1, "OutputDataType", False),
        ("format", 2, "OutputFormat", False),
        ("shape", 3, "Shape", False),
        ("original_op", 4, "OriginalOp", False),
        ("data", 5, "bytes", False),
        ("size", 6, "uint64", False),
        ("original_shape", 7, "Shape", False),
        ("sub_format", 8, "int32", False),
        ("address", 9, "uint64", False),
        ("dim_range", 10, "DimRange", True),
        ("offset", 11, "uint64", False),
    ],
    "OpInput": [
        ("data_type", 1, "OutputDataType", False),
        ("format", 2, "OutputFormat", False),
        ("shape", 3, "Shape", False),
        ("data", 4, "bytes", False),
        ("size", 5, "uint64", False),
        ("original_shape", 6, "Shape", False),
        ("sub_format", 7, "int32", False),
        ("address", 8, "uint64", False),
        ("offset", 9, "uint64", False),
        ("arg_index", 10, "uint32", False),
        ("input_type", 11, "uint32", False),
    ],
    "OpBuffer": [
        ("buffer_type", 1, "BufferType", False),
        ("data", 2, "bytes", False),
        ("size", 3, "uint64", False),
    ],
    "OpAttr": [("name", 1, "string", False), ("value", 2, "string", False)],
    "Workspace": [
        ("type", 1, "SpaceType", False),
        ("data", 2, "bytes", False),
        ("size", 3, "uint64", False),
    ],
    "DumpData": [
        ("version", 1, "string", False),
        ("dump_time", 2, "uint64", False),
        ("output", 3, "OpOutput", True),
        ("input", 4, "OpInput", True),
        ("buffer", 5, "OpBuffer", True),
        ("op_name", 6, "string", False),
        ("attr", 7, "OpAttr", True),
        ("space", 8, "Workspace", True),
        ("dfx_message", 9, "string", False),
    ],
}

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "uint64": _F.TYPE_UINT64,
    "uint32": _F.TYPE_UINT32,
    "int32": _F.TYPE_INT32,
}


def file_descriptor_proto():
    """The ``FileDescriptorProto`` of ``dump_data.proto`` (proto3, package ``toolkit.dumpdata``)."""
    proto = descriptor_pb2.FileDescriptorProto(name=_FILE_NAME, package=PACKAGE, syntax="proto3")
    for enum_name, values in _ENUMS.items():
        enum = proto.enum_type.add(name=enum_name)
        for name, number in sorted(values.items(), key=lambda item: item[1]):
            enum.value.add(name=name, number=number)
    for message_name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=message_name)
        for name, number, kind, repeated in fields:
            field = message.field.add(name=name, number=number, json_name=_json_name(name))
            field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if kind in _SCALARS:
                field.type = _SCALARS[kind]
            elif kind in _ENUMS:
                field.type = _F.TYPE_ENUM
                field.type_name = f".{PACKAGE}.{kind}"
            else:
                field.type = _F.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{kind}"
    return proto


def _json_name(name):
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _build_classes():
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor_proto())
    classes = {}
    for name in _MESSAGES:
        descriptor = pool.FindMessageTypeByName(f"{PACKAGE}.{name}")
        if hasattr(message_factory, "GetMessageClass"):
            classes[name] = message_factory.GetMessageClass(descriptor)
        else:  # pragma: no cover - protobuf < 4.21
            classes[name] = message_factory.MessageFactory(pool).GetPrototype(descriptor)
    return classes


_CLASSES = _build_classes()
DumpData = _CLASSES["DumpData"]
OpOutput = _CLASSES["OpOutput"]
OpInput = _CLASSES["OpInput"]
OriginalOp = _CLASSES["OriginalOp"]
Shape = _CLASSES["Shape"]
DimRange = _CLASSES["DimRange"]
OpBuffer = _CLASSES["OpBuffer"]
OpAttr = _CLASSES["OpAttr"]
Workspace = _CLASSES["Workspace"]


def proto_text():
    """The messages as ``.proto`` source text (for documentation and other tools)."""
    lines = ['syntax = "proto3";', "", f"package {PACKAGE};", ""]
    for enum_name, values in _ENUMS.items():
        lines.append(f"enum {enum_name} {{")
        for name, number in sorted(values.items(), key=lambda item: item[1]):
            lines.append(f"  {name} = {number};")
        lines += ["}", ""]
    for message_name, fields in _MESSAGES.items():
        lines.append(f"message {message_name} {{")
        for name, number, kind, repeated in fields:
            prefix = "repeated " if repeated else ""
            lines.append(f"  {prefix}{kind} {name} = {number};")
        lines += ["}", ""]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - documentation helper
    print(proto_text())
