"""``customize_dtypes``: per-op dtypes that override the precision mode.

One rule per line, by op name or by op type (the name wins when both match)::

    # by name
    scope/dense/MatMul::InputDtype:float32,float32,OutputDtype:float32
    # by type (Ascend IR or TensorFlow op type)
    OpType::Relu:InputDtype:float16,OutputDtype:float16
    # by name, spelled out
    OpName::scope/dense/MatMul:InputDtype:float32,float32,OutputDtype:float32

``InputDtype`` lists one dtype per input of the op, in order; ``OutputDtype`` one per output.
Either part may be left out. Blank lines and lines starting with ``#`` are skipped. Problems are
:class:`~npu_adapter.errors.PrecisionFileError` naming the file and the line.
"""

import dataclasses
import re

from npu_adapter.errors import NpuConfigError, PrecisionFileError

__all__ = ["CustomizeRule", "CustomizeDtypes", "parse_customize_dtypes",
           "load_customize_dtypes", "DTYPE_NAMES"]

OPTION = "customize_dtypes"
_ALLOWED = ("lines 'OpName::InputDtype:d1,d2,...,OutputDtype:d1,...' or "
            "'OpType::TypeName:InputDtype:...,OutputDtype:...'")
# names accepted in the file → canonical names (TensorFlow's)
DTYPE_NAMES = {
    "float16": "float16", "fp16": "float16", "half": "float16",
    "float32": "float32", "float": "float32", "fp32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float64": "float64", "double": "float64",
    "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16",
    "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
    "bool": "bool",
}
_TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class CustomizeRule:
    """One line: the dtypes it asks for and where it was written."""

    key: str          # op name or op type
    by_type: bool
    inputs: tuple     # canonical dtype names, or ()
    outputs: tuple
    line: int
    text: str

    def describe(self, path):
        """``"path:line: text"`` for reports."""
        return f"{path}:{self.line}: {self.text}"


@dataclasses.dataclass(frozen=True)
class CustomizeDtypes:
    """The parsed file."""

    path: str
    by_name: dict
    by_type: dict

    def rule_for(self, node_name, op_type, ir_type):
        """The rule for a node: by name first, then by TF or IR op type; None if none."""
        rule = self.by_name.get(node_name)
        if rule is None:
            rule = self.by_type.get(op_type) or self.by_type.get(ir_type)
        return rule


def _dtypes(path, number, text, part):
    names = []
    for raw in part.split(","):
        name = raw.strip().lower()
        if not name:
            continue
        if name not in DTYPE_NAMES:
            raise PrecisionFileError(OPTION, path, number,
                                     f"unknown dtype {raw.strip()!r} in {text!r}",
                                     "dtypes " + ", ".join(sorted(set(DTYPE_NAMES.values()))))
        names.append(DTYPE_NAMES[name])
    return tuple(names)


def _parse_spec(path, number, text, spec):
    """``InputDtype:a,b,OutputDtype:c`` → (inputs, outputs)."""
    match = re.fullmatch(r"\s*(?:InputDtype:(?P<i>[^:]*?))?\s*,?\s*"
                         r"(?:OutputDtype:(?P<o>[^:]*?))?\s*,?\s*", spec)
    if match is None or (match.group("i") is None and match.group("o") is None):
        raise PrecisionFileError(OPTION, path, number,
                                 f"expected InputDtype:... and/or OutputDtype:... in {text!r}",
                                 _ALLOWED)
    if match.group("i") is not None and match.group("o") is not None and \
            not re.search(r",\s*OutputDtype:", spec):
        raise PrecisionFileError(OPTION, path, number,
                                 f"',' expected before OutputDtype in {text!r}", _ALLOWED)
    given = [match.group(g) for g in ("i", "o") if match.group(g) and match.group(g).strip(" ,")]
    for group, field in (("i", "InputDtype"), ("o", "OutputDtype")):
        if given and match.group(group) is not None and not match.group(group).strip(" ,"):
            raise PrecisionFileError(OPTION, path, number, f"empty dtype list after {field} in "
                                     f"{text!r}", _ALLOWED)
    inputs = _dtypes(path, number, text, match.group("i") or "")
    outputs = _dtypes(path, number, text, match.group("o") or "")
    if not inputs and not outputs:
        raise PrecisionFileError(OPTION, path, number, f"no dtype given in {text!r}", _ALLOWED)
    return inputs, outputs


def parse_customize_dtypes(text, path="<customize_dtypes>"):
    """Parse the text of a customize_dtypes file into :class:`CustomizeDtypes`."""
    by_name, by_type = {}, {}
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, rest = line.partition("::")
        if not sep or not key.strip():
            raise PrecisionFileError(OPTION, path, number, f"no '::' after an op name or "
                                     f"'OpType' in {line!r}", _ALLOWED)
        key = key.strip()
        if key in ("OpType", "OpName"):
            target, colon, spec = rest.partition(":")
            target = target.strip()
            valid = _TYPE_NAME.match(target) if key == "OpType" else target and " " not in target
            if not colon or not valid:
                what = "an op type" if key == "OpType" else "an op name"
                raise PrecisionFileError(OPTION, path, number,
                                         f"'{key}::' must be followed by {what} and ':' "
                                         f"in {line!r}", _ALLOWED)
            table, by = (by_type, True) if key == "OpType" else (by_name, False)
        else:
            target, table, by, spec = key, by_name, False, rest
        inputs, outputs = _parse_spec(path, number, line, spec)
        if target in table:
            raise PrecisionFileError(OPTION, path, number,
                                     f"{'op type' if by else 'op'} {target!r} already has a rule "
                                     f"on line {table[target].line}", _ALLOWED)
        table[target] = CustomizeRule(target, by, inputs, outputs, number, line)
    return CustomizeDtypes(str(path), by_name, by_type)


def load_customize_dtypes(path):
    """Read and parse the customize_dtypes file at ``path``."""
    from npu_adapter.config.files import read_text_file

    try:  # the checks every option file gets (NUL, size, UTF-8)
        text = read_text_file(OPTION, path)
    except NpuConfigError as exc:
        raise PrecisionFileError(OPTION, path, None, f"cannot be read ({exc.detail})",
                                 exc.allowed) from None
    return parse_customize_dtypes(text, path)
