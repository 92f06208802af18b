"""The fake ``.om`` container shared by the fake ``atc`` (writer) and the fake ``acl`` (reader).

Layout: the magic ``b"FAKEOM01"``, an 8-byte little-endian header length, a JSON header (the
SoC, every ATC flag, the model inputs with the shapes ``--input_shape`` fixed, the gears, the
output tensors), then the frozen GraphDef ATC was given. Only the fakes know this format.
"""

import json
import struct

MAGIC = b"FAKEOM01"


def write_om(path, header, graph_bytes):
    text = json.dumps(header, sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(text)) + text + graph_bytes)


def read_om(path):
    """``(header, graph bytes)``; ValueError when the file is no fake .om."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise ValueError(f"{path} is not an .om model")
    (length,) = struct.unpack("<Q", data[len(MAGIC):len(MAGIC) + 8])
    start = len(MAGIC) + 8
    try:
        header = json.loads(data[start:start + length])
    except ValueError as exc:
        raise ValueError(f"{path}: corrupted model header ({exc})") from None
    return header, data[start + length:]
