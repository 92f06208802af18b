"""``modify_mixlist``: the JSON file that edits the mixed-precision lists.

The file is a JSON object with up to three keys, ``black-list``, ``white-list`` and
``gray-list``; each holds ``to-add`` and/or ``to-remove``, lists of op types::

    {
      "black-list": {"to-add": ["Exp", "ReduceSum"]},
      "white-list": {"to-remove": ["Conv2D"]}
    }

Op types are Ascend IR names (``ReduceSum``, ``MatMulV2``) or TensorFlow names (``Sum``,
``MatMul``): both match. ``//`` comments to the end of a line (as in the product
documentation's samples) are ignored. Every problem is a
:class:`~npu_adapter.errors.PrecisionFileError` naming the file and the line.
"""

import dataclasses
import re

from npu_adapter.errors import NpuConfigError, PrecisionFileError

__all__ = ["MixlistEdit", "MixlistEdits", "parse_mixlist", "load_mixlist"]

OPTION = "modify_mixlist"
_KEYS = {"black-list": "black", "white-list": "white", "gray-list": "gray"}
_ACTIONS = ("to-add", "to-remove")
_ALLOWED = ('a JSON object {"black-list"|"white-list"|"gray-list": {"to-add": [op types], '
            '"to-remove": [op types]}}')
_OP_TYPE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class MixlistEdit:
    """One op type added to or removed from one list."""

    list: str     # white / black / gray
    action: str   # to-add / to-remove
    name: str     # op type as written
    line: int     # 1-based line of the name in the file


@dataclasses.dataclass(frozen=True)
class MixlistEdits:
    """The parsed file: its path and every edit in file order."""

    path: str
    entries: tuple


def _strip_comments(text):
    """Drop ``//`` comments outside strings, keeping every line (so line numbers stay)."""
    out = []
    for line in text.split("\n"):
        in_string = escaped = False
        cut = len(line)
        for i, ch in enumerate(line):
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif line.startswith("//", i):
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def _line_of(text, needle, start_line=1):
    lines = text.split("\n")
    for number in range(max(start_line, 1), len(lines) + 1):
        if needle in lines[number - 1]:
            return number
    for number, line in enumerate(lines, 1):
        if needle in line:
            return number
    return None


def parse_mixlist(text, path="<modify_mixlist>"):
    """Parse the text of a mixlist file into :class:`MixlistEdits`."""
    import json

    clean = _strip_comments(text)
    try:
        doc = json.loads(clean)
    except json.JSONDecodeError as exc:
        raise PrecisionFileError(OPTION, path, exc.lineno, f"not valid JSON: {exc.msg}",
                                 _ALLOWED) from None
    if not isinstance(doc, dict):
        raise PrecisionFileError(OPTION, path, 1, f"the file holds a JSON {type(doc).__name__}",
                                 _ALLOWED)
    entries = []
    seen = {}
    for key, body in doc.items():
        key_line = _line_of(clean, f'"{key}"')
        if key not in _KEYS:
            raise PrecisionFileError(OPTION, path, key_line, f"unknown key {key!r}", _ALLOWED)
        if not isinstance(body, dict):
            raise PrecisionFileError(OPTION, path, key_line,
                                     f"{key!r} must hold an object with to-add / to-remove",
                                     _ALLOWED)
        for action, names in body.items():
            action_line = _line_of(clean, f'"{action}"', key_line or 1)
            if action not in _ACTIONS:
                raise PrecisionFileError(OPTION, path, action_line,
                                         f"unknown key {action!r} in {key!r}", _ALLOWED)
            if not isinstance(names, list):
                raise PrecisionFileError(OPTION, path, action_line,
                                         f"{key}.{action} must be a list of op types", _ALLOWED)
            for name in names:
                line = _line_of(clean, f'"{name}"', action_line or 1) if isinstance(name, str) \
                    else action_line
                if not isinstance(name, str) or not _OP_TYPE.match(name):
                    raise PrecisionFileError(OPTION, path, line,
                                             f"{name!r} in {key}.{action} is not an op type",
                                             _ALLOWED)
                previous = seen.get(name)
                here = (_KEYS[key], action)
                if previous is not None:
                    if previous[0] == here:
                        raise PrecisionFileError(OPTION, path, line,
                                                 f"{name} is listed twice in {key}.{action}",
                                                 _ALLOWED)
                    if previous[0][1] == "to-add" and action == "to-add":
                        raise PrecisionFileError(
                            OPTION, path, line,
                            f"{name} is added to both the {previous[0][0]} list (line "
                            f"{previous[1]}) and the {_KEYS[key]} list", _ALLOWED)
                    if previous[0][0] == here[0]:
                        raise PrecisionFileError(
                            OPTION, path, line,
                            f"{name} is both added to and removed from the {here[0]} list",
                            _ALLOWED)
                seen[name] = (here, line)
                entries.append(MixlistEdit(_KEYS[key], action, name, line or 1))
    return MixlistEdits(str(path), tuple(entries))


def load_mixlist(path):
    """Read and parse the mixlist file at ``path``."""
    from npu_adapter.config.files import read_text_file

    try:  # the checks every option file gets (NUL, size, UTF-8)
        text = read_text_file(OPTION, path)
    except NpuConfigError as exc:
        raise PrecisionFileError(OPTION, path, None, f"cannot be read ({exc.detail})",
                                 exc.allowed) from None
    return parse_mixlist(text, path)
