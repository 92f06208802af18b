"""Checks of the options that name files, or hold a file's worth of structured text.

The original adapter passes these values on to GE, which reads them when the first graph is
compiled: a typo in a path, or a malformed line, then fails long after the script configured
the session, with a message that names neither the option nor the line. We check them when the
option is set, and every error names the option, the file and (for content) the line:

* path options (:data:`PATH_OPTIONS`): no NUL character (no file system accepts one);
* ``modify_mixlist``: an existing regular file holding a JSON object ``{"black-list": {...},
  "white-list": {...}, "gray-list": {...}}`` (``//`` comments allowed) whose lists are
  ``"to-add"`` / ``"to-remove"`` arrays of op types (:func:`read_modify_mixlist`);
* ``customize_dtypes``: an existing regular file, one ``OpName::InputDtype:...,OutputDtype:...``
  or ``OpType::Type:InputDtype:...,OutputDtype:...`` entry per line (:func:`read_customize_dtypes`);
* ``optypelist_for_implmode``: comma-separated op types (:func:`parse_op_type_list`);
* ``profiling_options``: a JSON object of string keys and scalar values
  (:func:`parse_profiling_options`).

``docs/options.md`` describes the formats. The readers return the parsed content, so code that
uses a file (precision emulation, profiling) reads it through the same checks.
"""

import json
import os
import re

from npu_adapter.errors import NpuConfigError, excerpt

__all__ = [
    "PATH_OPTIONS",
    "MIXLIST_LISTS",
    "MIXLIST_ACTIONS",
    "check_path_text",
    "parse_op_type_list",
    "parse_profiling_options",
    "read_customize_dtypes",
    "read_modify_mixlist",
]

PATH_OPTIONS = (
    "aoe_config_file", "compress_weight_conf", "customize_dtypes", "debug_dir", "dump_path",
    "fusion_switch_file", "graph_compiler_cache_dir", "graph_parallel_option_path",
    "insert_op_file", "modify_mixlist", "npu_adapter_dump_dir", "op_compiler_cache_dir",
    "op_debug_config", "op_precision_mode", "resource_config_path", "work_path",
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


def _read_text_file(option, path):
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


def _strip_comments(text):
    """Drop ``//`` comments outside JSON strings (CANN's examples annotate the lists that way),
    keeping every line so that line numbers stay right."""
    lines = []
    for line in text.split("\n"):
        in_string = escaped = False
        cut = len(line)
        for i, char in enumerate(line):
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif line.startswith("//", i):
                cut = i
                break
        lines.append(line[:cut])
    return "\n".join(lines)


def read_modify_mixlist(path, option="modify_mixlist"):
    """Read and check a ``modify_mixlist`` JSON file; returns ``{list: {action: [op types]}}``.

    The top level is an object whose keys are among :data:`MIXLIST_LISTS`; each value is an
    object whose keys are among :data:`MIXLIST_ACTIONS`; each of those is an array of op type
    names (``[A-Za-z_][A-Za-z0-9_]*``). Errors name the file and the line.
    """
    text = _strip_comments(_read_text_file(option, path))
    allowed = ('a JSON file like {"black-list": {"to-add": ["Cast"], "to-remove": []}, '
               '"white-list": {...}}')
    try:
        content = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NpuConfigError(option, path, allowed,
                             detail=f"line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(content, dict):
        raise NpuConfigError(option, path, allowed,
                             detail=f"line 1: the file holds a JSON {type(content).__name__}, "
                                    "not an object")
    result = {}
    for list_name, actions in content.items():
        where = f"line {_line_of(text, json.dumps(list_name))}"
        if list_name not in MIXLIST_LISTS:
            raise NpuConfigError(option, path, allowed,
                                 detail=f"{where}: unknown list {excerpt(list_name)}; allowed: "
                                        + ", ".join(MIXLIST_LISTS))
        if not isinstance(actions, dict):
            raise NpuConfigError(option, path, allowed,
                                 detail=f"{where}: {list_name!r} must map to an object with "
                                        "'to-add' and/or 'to-remove'")
        result[list_name] = {}
        for action, op_types in actions.items():
            if action not in MIXLIST_ACTIONS:
                raise NpuConfigError(option, path, allowed,
                                     detail=f"{where}: unknown key {excerpt(action)} in "
                                            f"{list_name!r}; allowed: to-add, to-remove")
            if not isinstance(op_types, list):
                raise NpuConfigError(option, path, allowed,
                                     detail=f"{where}: {list_name!r}.{action!r} must be an "
                                            "array of op type names")
            for op_type in op_types:
                if not isinstance(op_type, str) or not _OP_TYPE_RE.match(op_type):
                    line = _line_of(text, json.dumps(op_type)) if isinstance(op_type, str) \
                        else None
                    at = f"line {line}" if line else where
                    raise NpuConfigError(option, path, allowed,
                                         detail=f"{at}: {excerpt(op_type)} in {list_name!r}."
                                                f"{action!r} is not an op type name")
            result[list_name][action] = list(op_types)
    return result


def _parse_dtypes(option, path, number, part, label):
    names = [name.strip() for name in part.split(",")]
    if not names or not all(names):
        raise NpuConfigError(option, path, _DTYPES_ALLOWED,
                             detail=f"line {number}: empty dtype in {label}")
    for name in names:
        if not _DTYPE_RE.match(name):
            raise NpuConfigError(option, path, _DTYPES_ALLOWED,
                                 detail=f"line {number}: {excerpt(name)} in {label} is not a "
                                        "dtype name such as float16")
    return names


_DTYPES_ALLOWED = ("a text file with one 'OpName::InputDtype:d1,d2,OutputDtype:d1' or "
                   "'OpType::Type:InputDtype:d1,OutputDtype:d1' entry per line")
_DTYPE_FIELD_RE = re.compile(r"(InputDtype|OutputDtype):")


def read_customize_dtypes(path, option="customize_dtypes"):
    """Read and check a ``customize_dtypes`` file.

    Each line that is neither empty nor a ``#`` comment is ``<op name>::<fields>``,
    ``OpName::<op name>:<fields>`` or ``OpType::<op type>:<fields>``, where ``<fields>`` is
    ``InputDtype:d1,d2,...`` and/or ``OutputDtype:d1,...`` (separated by a comma), dtypes
    being names such as ``float16``.
    Returns a list of ``(kind, name, input_dtypes, output_dtypes, line)`` with kind ``"name"``
    or ``"type"``; errors name the file and the line.
    """
    text = _read_text_file(option, path)
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head, sep, rest = line.partition("::")
        if not sep or not head.strip():
            raise NpuConfigError(option, path, _DTYPES_ALLOWED,
                                 detail=f"line {number}: {excerpt(line)} has no '<op>::'")
        head = head.strip()
        if head in ("OpType", "OpName"):  # OpName::<name>: is another spelling of a name line
            target, colon, rest = rest.partition(":")
            target = target.strip()
            valid = _OP_TYPE_RE.match(target) if head == "OpType" else _OP_NAME_RE.match(target)
            if not colon or not valid:
                raise NpuConfigError(option, path, _DTYPES_ALLOWED,
                                     detail=f"line {number}: {excerpt(target)} after "
                                            f"'{head}::' is not an op "
                                            f"{'type name' if head == 'OpType' else 'name'}")
            kind, name = ("type" if head == "OpType" else "name"), target
        else:
            if not _OP_NAME_RE.match(head):
                raise NpuConfigError(option, path, _DTYPES_ALLOWED,
                                     detail=f"line {number}: {excerpt(head)} is not an op name")
            kind, name = "name", head
        fields = list(_DTYPE_FIELD_RE.finditer(rest))
        if not fields or fields[0].start() != 0 or len(fields) > 2 or \
                len({m.group(1) for m in fields}) != len(fields):
            raise NpuConfigError(option, path, _DTYPES_ALLOWED,
                                 detail=f"line {number}: expected 'InputDtype:...' and/or "
                                        f"'OutputDtype:...' after {excerpt(name)}")
        dtypes = {}
        for k, match in enumerate(fields):
            end = fields[k + 1].start() if k + 1 < len(fields) else len(rest)
            part = rest[match.end():end].strip()
            if k + 1 < len(fields):
                if not part.endswith(","):
                    raise NpuConfigError(option, path, _DTYPES_ALLOWED,
                                         detail=f"line {number}: ',' expected before "
                                                f"{fields[k + 1].group(1)}")
                part = part[:-1]
            dtypes[match.group(1)] = _parse_dtypes(option, path, number, part, match.group(1))
        entries.append((kind, name, tuple(dtypes.get("InputDtype", ())),
                        tuple(dtypes.get("OutputDtype", ())), number))
    return entries


def parse_op_type_list(text, option="optypelist_for_implmode"):
    """``"Pooling,SoftmaxV2"`` → ``["Pooling", "SoftmaxV2"]``: comma-separated op type names."""
    names = [name.strip() for name in text.split(",")]
    for k, name in enumerate(names):
        if not _OP_TYPE_RE.match(name):
            raise NpuConfigError(option, text, "comma-separated op types, e.g. "
                                 "'Pooling,SoftmaxV2'",
                                 detail=f"entry {k + 1} ({excerpt(name)}) is not an op type name")
    return names


def parse_profiling_options(text, option="profiling_options"):
    """Parse ``profiling_options``: a JSON object of string keys and string/number/bool values,
    e.g. ``{"output": "/tmp/profiling", "training_trace": "on"}``; ``output`` must be a path
    without NUL. Returns the dict."""
    allowed = 'a JSON object such as {"output": "/tmp/profiling", "training_trace": "on"}'
    try:
        content = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NpuConfigError(option, text, allowed,
                             detail=f"line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(content, dict):
        raise NpuConfigError(option, text, allowed,
                             detail=f"a JSON {type(content).__name__}, not an object")
    for key, value in content.items():
        if not isinstance(value, (str, int, float, bool)) or value is None:
            raise NpuConfigError(option, text, allowed,
                                 detail=f"the value of {excerpt(key)} is a JSON "
                                        f"{type(value).__name__}; expected a string, number or "
                                        "bool")
    output = content.get("output")
    if isinstance(output, str):
        check_path_text(option + ".output", output)
    return content
