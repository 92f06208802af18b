"""Checks of the options that name files, or hold a file's worth of structured text.

The original adapter passes these values on to GE, which reads them when the first graph is
compiled: a typo in a path, or a malformed line, then fails long after the script configured
the session, with a message that names neither the option nor the line. We check them when the
option is set, and every error names the option, the file and (for content) the line:

* path options (:data:`PATH_OPTIONS`): no NUL character (no file system accepts one);
* ``modify_mixlist`` and ``customize_dtypes``: a readable UTF-8 regular file
  (:func:`read_text_file`) whose content the precision parsers check
  (:mod:`npu_adapter.precision.mixlist`, :mod:`npu_adapter.precision.customize`);
* ``optypelist_for_implmode``: comma-separated op types (:func:`parse_op_type_list`);

``docs/options.md`` describes the formats. The readers return the parsed content, so code that
uses a file (precision emulation) reads it through the same checks.
"""

import os
import re

from npu_adapter.errors import NpuConfigError, excerpt

__all__ = [
    "PATH_OPTIONS",
    "MIXLIST_LISTS",
    "MIXLIST_ACTIONS",
    "check_path_text",
    "parse_op_type_list",
    "read_text_file",
]

PATH_OPTIONS = (
    "aoe_config_file", "compress_weight_conf", "customize_dtypes", "debug_dir", "dump_path",
    "fusion_switch_file", "graph_compiler_cache_dir", "graph_parallel_option_path",
    "insert_op_file", "modify_mixlist", "npu_adapter_cache_dir", "npu_adapter_dump_dir",
    "op_compiler_cache_dir", "op_debug_config", "op_precision_mode", "resource_config_path",
    "work_path",
)
"""Options whose value is a file or directory path."""

MIXLIST_LISTS = ("black-list", "white-list", "gray-list")
"""The lists a ``modify_mixlist`` file may edit."""

MIXLIST_ACTIONS = ("to-add", "to-remove")
"""What a ``modify_mixlist`` list entry does with its op types."""

_OP_TYPE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DTYPE_RE = re.compile(r"[a-z][a-z0-9_]*\Z")
_OP_NAME_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-/>]*\Z")
_MAX_FILE_BYTES = 16 * 1024 * 1024


def check_path_text(option, path):
    """``path`` unless it holds a NUL character (which no file system accepts)."""
    if "\0" in path:
        raise NpuConfigError(option, path, "a file system path",
                             detail=f"it contains a NUL character at offset {path.index(chr(0))}")
    return path


def read_text_file(option, path):
    """The text of the UTF-8 file ``path`` named by ``option``, after the checks every option
    file gets (no NUL in the path, a regular file, at most 16 MiB, UTF-8); errors are
    :class:`NpuConfigError` naming the option, the path and the problem."""
    check_path_text(option, path)
    allowed = "the path of a readable UTF-8 text file"
    if not os.path.exists(path):
        raise NpuConfigError(option, path, allowed, detail="no such file")
    if os.path.isdir(path):
        raise NpuConfigError(option, path, allowed, detail="it is a directory")
    if not os.path.isfile(path):
        raise NpuConfigError(option, path, allowed, detail="not a regular file")
    try:
        size = os.path.getsize(path)
        if size > _MAX_FILE_BYTES:
            raise NpuConfigError(option, path, allowed,
                                 detail=f"{size} bytes; at most {_MAX_FILE_BYTES} are read")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise NpuConfigError(option, path, allowed, detail=exc.strerror or str(exc)) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise NpuConfigError(option, path, allowed,
                             detail=f"line {line}: bytes that are not UTF-8") from None


def _line_of(text, fragment):
    index = text.find(fragment)
    return text.count("\n", 0, index) + 1 if index >= 0 else None


def parse_op_type_list(text, option="optypelist_for_implmode"):
    """``"Pooling,SoftmaxV2"`` → ``["Pooling", "SoftmaxV2"]``: comma-separated op type names."""
    names = [name.strip() for name in text.split(",")]
    for k, name in enumerate(names):
        if not _OP_TYPE_RE.match(name):
            raise NpuConfigError(option, text, "comma-separated op types, e.g. "
                                 "'Pooling,SoftmaxV2'",
                                 detail=f"entry {k + 1} ({excerpt(name)}) is not an op type name")
    return names
