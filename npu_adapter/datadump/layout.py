"""Where dump files go and how they are named, as on an Ascend device.

Directory of one model iteration::

    {dump_path}/{time}/{device_id}/{model_name}/{model_id}/{data_index}/

``time`` is ``YYYYMMDDhhmmss`` (local time when the session's first dump was written),
``model_name`` the cluster (``GeOp1_0``), ``model_id`` its graph id, ``data_index`` the iteration
(the ``dump_step`` number). A tensor dump file is named
``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}``, its statistics file the same plus
``.csv``, and an overflow record ``OpDebug.Node_OpDebug.{task_id}.{stream_id}.{timestamp}``.
``timestamp`` is microseconds since the epoch (16 digits).

In ``model_name``, ``op_type`` and ``op_name`` the characters ``.``, ``/``, ``\\`` and space
become ``_``, as the original does; so do any other characters that could change the meaning of
a path (control characters, ``:``...). A file name longer than the file system allows (255
bytes) is replaced by a digit string derived from it, and the pair is recorded in
``mapping.csv`` of the same directory. :func:`safe_join` refuses any path that would leave the
dump directory.

Older releases name files ``{op_type}.{op_name}.{task_id}.{timestamp}`` (no stream id);
:func:`parse_file_name` reads both forms.
"""

import dataclasses
import hashlib
import os
import re

__all__ = [
    "MAPPING_FILE",
    "MAX_FILE_NAME_BYTES",
    "OPDEBUG_NAME",
    "OPDEBUG_TYPE",
    "DumpFileName",
    "dump_file_name",
    "iteration_dir",
    "parse_file_name",
    "safe_join",
    "sanitize",
    "shorten_file_name",
    "time_dir_name",
]

MAX_FILE_NAME_BYTES = 255
MAPPING_FILE = "mapping.csv"
OPDEBUG_TYPE = "OpDebug"
OPDEBUG_NAME = "Node_OpDebug"
STATS_SUFFIX = ".csv"

# The original replaces these four; we also replace anything outside TensorFlow's name alphabet.
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")


def sanitize(name):
    """``name`` as one safe path component: ``.``, ``/``, ``\\``, space (and any other character
    outside ``[A-Za-z0-9_-]``) become ``_``; an empty name becomes ``_``."""
    return _UNSAFE.sub("_", str(name)) or "_"


def time_dir_name(struct_time):
    """``YYYYMMDDhhmmss`` of a ``time.struct_time``."""
    return (f"{struct_time.tm_year:04d}{struct_time.tm_mon:02d}{struct_time.tm_mday:02d}"
            f"{struct_time.tm_hour:02d}{struct_time.tm_min:02d}{struct_time.tm_sec:02d}")


def iteration_dir(time_dir, device_id, model_name, model_id, step):
    """Relative directory of one model iteration (all parts sanitised)."""
    return os.path.join(sanitize(time_dir), str(int(device_id)), sanitize(model_name),
                        str(int(model_id)), str(int(step)))


def dump_file_name(op_type, op_name, task_id, stream_id, timestamp):
    """``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`` with sanitised names."""
    numbers = f"{int(task_id)}.{int(stream_id)}.{int(timestamp)}"
    return f"{sanitize(op_type)}.{sanitize(op_name)}.{numbers}"


def shorten_file_name(file_name):
    """``file_name`` if it fits the file system, else a digit string derived from it (the same
    for the same name) that keeps its suffix (``.csv``)."""
    if len(file_name.encode("utf-8")) <= MAX_FILE_NAME_BYTES:
        return file_name
    suffix = STATS_SUFFIX if file_name.endswith(STATS_SUFFIX) else ""
    digest = hashlib.sha256(file_name.encode("utf-8")).hexdigest()
    return str(int(digest[:15], 16)) + suffix


def safe_join(root, *parts):
    """``os.path.join(root, *parts)``, refusing any result outside ``root``."""
    root_real = os.path.realpath(root)
    path = os.path.realpath(os.path.join(root_real, *parts))
    if os.path.commonpath([root_real, path]) != root_real:
        raise ValueError(f"refusing to write {path!r}: it is outside the dump directory "
                         f"{root_real!r}")
    return path


@dataclasses.dataclass(frozen=True)
class DumpFileName:
    """The parts of a dump file name.

    ``kind`` is ``"tensor"``, ``"stats"`` (a ``.csv`` statistics file) or ``"opdebug"`` (an
    overflow record). ``stream_id`` is None for the older four-part form; ``extra`` holds the
    fields some task types append (``task_type``, ``context_id``, ``thread_id``, ``device_id``).
    """

    op_type: str
    op_name: str
    task_id: int
    stream_id: object
    timestamp: int
    kind: str
    extra: tuple = ()


def parse_file_name(file_name):
    """Parse a dump file name; None when it is not one (e.g. ``mapping.csv``)."""
    kind = "tensor"
    base = file_name
    if base.endswith(STATS_SUFFIX):
        kind = "stats"
        base = base[: -len(STATS_SUFFIX)]
    parts = base.split(".")
    if len(parts) < 4 or not all(p.isdigit() for p in parts[2:]):
        return None
    numbers = [int(p) for p in parts[2:]]
    if len(numbers) == 2:   # {type}.{name}.{task}.{timestamp}
        task_id, stream_id, timestamp, extra = numbers[0], None, numbers[1], ()
    else:
        task_id, stream_id, timestamp, extra = numbers[0], numbers[1], numbers[2], numbers[3:]
    if parts[0].lower() == OPDEBUG_TYPE.lower() and kind == "tensor":
        kind = "opdebug"
    return DumpFileName(parts[0], parts[1], task_id, stream_id, timestamp, kind, tuple(extra))
