"""Parsers for the string-valued NpuOptimizer options that carry structure.

Every function here is pure: it takes the option text and returns Python values, or raises
:class:`npu_adapter.errors.NpuConfigError` naming the option and the exact fragment that is wrong.
Nothing uses ``eval``; ``in_out_pair`` in particular has a small tokenizer of its own.

Where the original adapter is more lenient (it mangles or ignores bad input) we reject it, and the
docstring says so; where it is stricter we follow it.
"""

import math
import re
from typing import NamedTuple, Tuple

from npu_adapter.errors import NpuConfigError
from npu_adapter.errors import excerpt as _q

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_DUMP_STEP_SETS",
    "MAX_PATH_BYTES",
    "MAX_TEXT_BYTES",
    "MAX_GEARS",
    "MIN_GEARS",
    "AccelerateTrainMode",
    "DimsTrio",
    "check_int64",
    "check_text",
    "check_text_size",
    "parse_accelerate_train_mode",
    "parse_dump_step",
    "parse_dynamic_dims",
    "parse_gear_pad_values",
    "parse_gear_unpad",
    "parse_in_out_pair",
    "parse_input_shape",
    "parse_local_device_list",
    "parse_shape_range",
    "parse_shape_range_list",
    "validate_dims_trio",
]

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
MIN_GEARS = 2
MAX_GEARS = 100
MAX_DUMP_STEP_SETS = 100
MAX_TEXT_BYTES = 64 * 1024
"""The longest value a text option takes, in UTF-8 bytes. Option values are copied into every
rewritten graph (node attributes), its cache keys and reports; 64 KiB holds a list of about a
thousand op or node names, far beyond what the options are for."""
MAX_PATH_BYTES = 4096
"""The longest value a path option takes, in UTF-8 bytes (``PATH_MAX`` of Linux)."""

# TF node names (tensorflow/core/framework/node_def_util.cc); input names in `input_shape` may also
# start with "_" because the original's regex is `\w+`.
_NODE_NAME_RE = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/>]*\Z")
_INPUT_NAME_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-/>]*\Z")
_TENSOR_NAME_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-/>]*(:[0-9]+)?\Z")
# ASCII digits only: Python's \d and int() also take other scripts' digits ("١", "２"), which
# the original's parsers (and GE) do not.
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_DIGITS_RE = re.compile(r"[0-9]+\Z")
_FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")


def check_text(option, text):
    """``text`` unchanged if it is a str that encodes as UTF-8, else an ``NpuConfigError``.

    A str read from a command line or a file name with bytes that are not UTF-8 holds lone
    surrogates (``"\\udcff"``); protobuf and TensorFlow cannot store it, so it is rejected when
    the option is set rather than when the graph is rewritten.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NpuConfigError(
            option, text, "text that is valid UTF-8",
            detail=f"{exc.object[exc.start]!r} at offset {exc.start} stands for bytes that are "
                   "not UTF-8, e.g. in a command-line argument or a file name") from None
    return text


def check_text_size(option, text, limit):
    """``text`` unless its UTF-8 encoding is longer than ``limit`` bytes; the error names the
    option, the size and the limit (and quotes only the start of the value)."""
    size = len(text.encode("utf-8"))
    if size > limit:
        raise NpuConfigError(option, text, f"text of at most {limit} bytes",
                             detail=f"the value is {size} bytes long")
    return text


def check_int64(option, value, what="an integer", detail=None):
    """``value`` unless it is outside the int64 range TensorFlow and GE store integers in.

    ``detail`` may be a callable, called only when the value is out of range (error texts that
    quote a long option value must not be formatted for every value that is fine).
    """
    if not INT64_MIN <= value <= INT64_MAX:
        raise NpuConfigError(option, value, f"{what} in the int64 range "
                             f"[{INT64_MIN}, {INT64_MAX}]",
                             detail=detail() if callable(detail) else detail)
    return value


def _text(option, text):
    """Accept str or UTF-8 bytes (parameter_map strings arrive as bytes)."""
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NpuConfigError(option, text, "UTF-8 text", detail=str(exc)) from None
    if not isinstance(text, str):
        raise NpuConfigError(option, text, "a string", detail=f"got {type(text).__name__}")
    return check_text(option, text)


def _getline_split(text, sep):
    """Split like the original's getline loop: a single trailing separator adds no entry."""
    if text.endswith(sep):
        text = text[: -len(sep)]
    return text.split(sep)


def _int(option, fragment, whole, what="an integer"):
    token = fragment.strip()
    if not _INT_RE.match(token):
        raise NpuConfigError(option, fragment, what, detail=f"in {_q(whole)}")
    return check_int64(option, int(token), what, detail=lambda: f"in {_q(whole)}")


# --------------------------------------------------------------------------------------------
# input_shape / dynamic_dims / dynamic_node_type (docs/options.md, "Value formats")


def parse_input_shape(text):
    """Parse ``input_shape`` (``"name:d1,d2;name2:d1"``) into ``[(name, dims), ...]``.

    ``-1`` marks a dynamic dim; a scalar is written ``name:0`` and gives ``()`` (a ``0`` among
    several dims is a real zero-sized dim, as in the original's ``RewriteInputShapeOption``). A
    single trailing ``;`` is tolerated like the original's splitter. Rejected: empty entries or
    names, names that cannot be TF node names, empty dims, non-integers, dims below -1 (the
    original's regex would pass e.g. ``-5`` on to GE) and duplicate names.
    """
    option = "input_shape"
    text = _text(option, text)
    if not text.strip():
        raise NpuConfigError(option, text, "'name:d1,d2;...' with at least one input")
    result = []
    seen = set()
    for entry in _getline_split(text, ";"):
        if not entry.strip():
            raise NpuConfigError(option, entry, "a non-empty 'name:dims' entry",
                                 detail=f"empty entry in {_q(text)}")
        if entry.count(":") != 1:
            raise NpuConfigError(option, entry, "'name:d1,d2,...' with exactly one ':'",
                                 detail=f"in {_q(text)}")
        name, dims_text = (part.strip() for part in entry.split(":"))
        if not name:
            raise NpuConfigError(option, entry, "a non-empty input name before ':'",
                                 detail=f"in {_q(text)}")
        if not _INPUT_NAME_RE.match(name):
            raise NpuConfigError(option, name, "an input node name ([A-Za-z0-9_./-])",
                                 detail=f"in {_q(text)}")
        if name in seen:
            raise NpuConfigError(option, name, "each input listed once",
                                 detail=f"duplicate name in {_q(text)}")
        seen.add(name)
        if not dims_text:
            raise NpuConfigError(option, entry, "at least one dim after ':' (scalar: 'name:0')",
                                 detail=f"in {_q(text)}")
        dims = []
        for dim_text in dims_text.split(","):
            if not dim_text.strip():
                raise NpuConfigError(option, entry, "comma-separated integer dims",
                                     detail=f"empty dim in {_q(text)}")
            dim = _int(option, dim_text, text, "an integer dim >= -1")
            if dim < -1:
                raise NpuConfigError(option, dim_text.strip(),
                                     "a dim >= 0, or -1 for a dynamic dim",
                                     detail=f"in entry {_q(entry)}")
            dims.append(dim)
        result.append((name, () if dims == [0] else tuple(dims)))
    return result


def parse_dynamic_dims(text, dynamic_count=None):
    """Parse ``dynamic_dims`` (``"20,20;40,40"``) into a list of gears (tuples of positive ints).

    There must be between :data:`MIN_GEARS` and :data:`MAX_GEARS` gears (GE's limit on most
    chips), no duplicates, and, when ``dynamic_count`` (the number of ``-1`` dims in
    ``input_shape``) is given, exactly that many values per gear. A single trailing ``;`` is
    tolerated like the original's splitter.
    """
    option = "dynamic_dims"
    text = _text(option, text)
    if not text.strip():
        raise NpuConfigError(option, text, "';'-separated gears of comma-separated dims")
    gears = []
    for gear_text in _getline_split(text, ";"):
        if not gear_text.strip():
            raise NpuConfigError(option, gear_text, "a non-empty gear",
                                 detail=f"empty gear in {_q(text)}")
        gear = []
        for dim_text in gear_text.split(","):
            token = dim_text.strip()
            if not _DIGITS_RE.match(token):
                raise NpuConfigError(option, dim_text, "a positive integer dim",
                                     detail=f"in gear {_q(gear_text)} of {_q(text)}")
            value = check_int64(option, int(token), "a positive integer dim",
                                detail=lambda g=gear_text: f"in gear {_q(g)} of {_q(text)}")
            if value < 1:
                raise NpuConfigError(option, dim_text, "a positive integer dim",
                                     detail=f"in gear {_q(gear_text)} of {_q(text)}")
            gear.append(value)
        gear = tuple(gear)
        if dynamic_count is not None and len(gear) != dynamic_count:
            raise NpuConfigError(
                option, gear_text,
                f"{dynamic_count} value(s) per gear, one per -1 in input_shape",
                detail=f"gear has {len(gear)} value(s)")
        if gear in gears:
            raise NpuConfigError(option, gear_text, "distinct gears",
                                 detail=f"duplicate gear in {_q(text)}")
        gears.append(gear)
    if not MIN_GEARS <= len(gears) <= MAX_GEARS:
        hint = ""
        if len(gears) == 1 and len(gears[0]) > 1:
            hint = ("; gears are separated by ';' and the dims of one gear by ',': "
                    f"{_q(text.replace(',', ';'))} is {len(gears[0])} gears of one dim each")
        raise NpuConfigError(option, text, f"between {MIN_GEARS} and {MAX_GEARS} gears",
                             detail=f"got {len(gears)}{hint}")
    return gears


class DimsTrio(NamedTuple):
    """The parsed whole-graph dynamic-dims configuration (docs/options.md)."""

    inputs: Tuple[Tuple[str, Tuple[int, ...]], ...]
    """``(name, dims)`` per input, in the (alphabetical) order given."""
    gears: Tuple[Tuple[int, ...], ...]
    """One tuple per gear, giving the values of the ``-1`` dims in order."""
    node_type: int
    """0: dataset (IteratorGetNext) inputs are dynamic; 1: placeholders are."""


def validate_dims_trio(input_shape, dynamic_dims, dynamic_node_type):
    """Parse and cross-check ``input_shape``, ``dynamic_dims`` and ``dynamic_node_type``.

    Checks, on top of the two parsers: names in ``input_shape`` follow the alphabetical order of
    the real input names (CANN's online-inference guide, dynamic dims; the adapter assigns
    entries positionally to name-sorted inputs, so any other order silently mismatches),
    ``input_shape`` has at least one ``-1``,
    every gear has one value per ``-1``, and ``dynamic_node_type`` is 0 or 1.
    Returns a :class:`DimsTrio`.
    """
    inputs = parse_input_shape(input_shape)
    names = [name for name, _ in inputs]
    for previous, name in zip(names, names[1:]):
        if name < previous:
            raise NpuConfigError(
                "input_shape", name,
                "input_shape order must follow the alphabetical order of the real input names",
                detail=f"{name!r} comes after {previous!r}; expected order "
                       f"{', '.join(sorted(names))}")
    dynamic_count = sum(dim == -1 for _, dims in inputs for dim in dims)
    if dynamic_count == 0:
        raise NpuConfigError("input_shape", _text("input_shape", input_shape),
                             "at least one -1 dim for dynamic_dims to fill")
    gears = parse_dynamic_dims(dynamic_dims, dynamic_count)
    if isinstance(dynamic_node_type, bool) or dynamic_node_type not in (0, 1):
        raise NpuConfigError("dynamic_node_type", dynamic_node_type,
                             "0 (dataset inputs are dynamic) or 1 (placeholders are dynamic)")
    return DimsTrio(tuple(inputs), tuple(gears), int(dynamic_node_type))


# --------------------------------------------------------------------------------------------
# dynamic_inputs_shape_range (docs/options.md)

_RANGE_TAGS = ("data", "getnext")


def parse_shape_range(text, enable_dp):
    """Route ``dynamic_inputs_shape_range`` like the original's ``ParseInputShapeRange``.

    Returns ``(data_inputs_shape_range, getnext_inputs_shape_range)``. Entries are split on
    ``;``, sorted lexicographically, and must each be ``data:<shapes>`` or ``getnext:<shapes>``
    with exactly one ``:``; there must be one or two. One entry goes to the getnext string when
    ``enable_dp`` (session ``enable_data_pre_proc`` and the graph has an IteratorGetNext), else to
    the data string, whatever its tag. Two entries: with ``enable_dp`` the data part and the
    getnext part go to their own strings; without it the data string is ``getnext part + "," +
    data part``. Stricter than the original: empty entries and a tag used twice are rejected.
    """
    option = "dynamic_inputs_shape_range"
    text = _text(option, text)
    if not text.strip():
        raise NpuConfigError(option, text, "one or two entries 'data:<shapes>;getnext:<shapes>'")
    entries = [entry.strip() for entry in text.split(";")]
    for entry in entries:
        if entry.count(":") != 1:
            raise NpuConfigError(option, entry, "'data:<shapes>' or 'getnext:<shapes>' "
                                 "with exactly one ':'", detail=f"in {_q(text)}")
        tag = entry.split(":")[0].strip()
        if tag not in _RANGE_TAGS:
            raise NpuConfigError(option, tag, "the tag 'data' or 'getnext'",
                                 detail=f"in entry {_q(entry)}")
    if len(entries) > 2:
        raise NpuConfigError(option, text, "one or two entries",
                             detail=f"got {len(entries)}")
    entries.sort()
    parts = [entry.split(":")[1].strip() for entry in entries]
    if len(entries) == 1:
        return ("", parts[0]) if enable_dp else (parts[0], "")
    tags = [entry.split(":")[0].strip() for entry in entries]
    if tags[0] == tags[1]:
        raise NpuConfigError(option, tags[0], "each tag at most once", detail=f"in {_q(text)}")
    data_part, getnext_part = parts
    if enable_dp:
        return data_part, getnext_part
    return getnext_part + "," + data_part, ""


def _parse_range_dim(fragment, group, whole):
    option = "dynamic_inputs_shape_range"
    token = fragment.strip()

    def detail():  # only on errors: formatting the whole text per dim made parsing quadratic
        return f"in {_q(group)} of {_q(whole)}"

    if "~" in token:
        low_text, _, high_text = token.partition("~")
        if not _DIGITS_RE.match(low_text.strip()):
            raise NpuConfigError(option, fragment, "'min~max' with min >= 0", detail=detail())
        low = check_int64(option, int(low_text.strip()), "'min~max' with min >= 0",
                          detail=detail)
        high = _int(option, high_text, whole, "'min~max' with an integer max (-1: unbounded)")
        if high == -1:
            return (low, None)
        if high < low:
            raise NpuConfigError(option, fragment, "'min~max' with min <= max", detail=detail())
        return (low, high)
    value = _int(option, token if token else fragment, whole,
                 "a dim: N, min~max, or -1 for unbounded")
    if value == -1:
        return (1, None)
    if value < 0:
        raise NpuConfigError(option, fragment, "a dim >= 0, min~max, or -1", detail=detail())
    return (value, value)


def parse_shape_range_list(text):
    """Parse the shapes of one range string, e.g. ``"[1~50, 1~50],[3,-1],[]"``.

    Returns one list per input of ``(min, max)`` per dim: ``N`` gives ``(N, N)``, ``a~b`` gives
    ``(a, b)``, ``-1`` gives ``(1, None)`` (unbounded, as in ATC), ``a~-1`` gives ``(a, None)``;
    ``[]`` is a scalar. Whitespace is allowed anywhere between tokens.
    """
    option = "dynamic_inputs_shape_range"
    text = _text(option, text)
    groups = []
    pos = 0
    length = len(text)

    def skip_ws(index):
        while index < length and text[index].isspace():
            index += 1
        return index

    pos = skip_ws(pos)
    if pos == length:
        raise NpuConfigError(option, text, "bracketed shapes like '[1~50,3],[]'")
    while True:
        if text[pos] != "[":
            raise NpuConfigError(option, text[pos:pos + 10], "'[' to open a shape",
                                 detail=f"at offset {pos} of {_q(text)}")
        close = text.find("]", pos)
        nested = text.find("[", pos + 1)
        if close == -1 or (nested != -1 and nested < close):
            raise NpuConfigError(option, text[pos:], "a shape closed by ']' (no nesting)",
                                 detail=f"unbalanced brackets at offset {pos} of {_q(text)}")
        group = text[pos:close + 1]
        content = text[pos + 1:close]
        if content.strip():
            dims = []
            for fragment in content.split(","):
                if not fragment.strip():
                    raise NpuConfigError(option, group, "comma-separated dims",
                                         detail=f"empty dim in {_q(text)}")
                dims.append(_parse_range_dim(fragment, group, text))
            groups.append(dims)
        else:
            groups.append([])
        pos = skip_ws(close + 1)
        if pos == length:
            return groups
        if text[pos] != ",":
            raise NpuConfigError(option, text[pos:pos + 10], "',' between shapes",
                                 detail=f"at offset {pos} of {_q(text)}")
        pos = skip_ws(pos + 1)
        if pos == length:
            raise NpuConfigError(option, text, "a shape after ','",
                                 detail="trailing ',' at the end")


# --------------------------------------------------------------------------------------------
# in_out_pair (docs/options.md)

_IOP_ALLOWED = "the str() of a list of [in_nodes, out_nodes] pairs, e.g. \"[[['in'], ['out']]]\""
_IOP_DELIMS = "[],"


class _Token(NamedTuple):
    kind: str  # "[", "]", ",", "name"
    value: str
    pos: int
    quoted: bool


def _iop_error(text, fragment, pos, problem):
    return NpuConfigError("in_out_pair", fragment, _IOP_ALLOWED,
                          detail=f"at offset {pos} of {_q(text)}: {problem}")


def _tokenize_in_out_pair(text):
    tokens = []
    pos = 0
    length = len(text)
    while pos < length:
        char = text[pos]
        if char.isspace():
            pos += 1
        elif char in _IOP_DELIMS:
            tokens.append(_Token(char, char, pos, False))
            pos += 1
        elif char in "'\"":
            end = text.find(char, pos + 1)
            if end == -1:
                raise _iop_error(text, text[pos:], pos, f"unterminated {char} quote")
            tokens.append(_Token("name", text[pos + 1:end], pos, True))
            pos = end + 1
        else:
            start = pos
            # Quotes stay inside a bare token so that "a'b" is reported as one bad name.
            while pos < length and not text[pos].isspace() and text[pos] not in _IOP_DELIMS:
                pos += 1
            tokens.append(_Token("name", text[start:pos], start, False))
    return tokens


class _InOutPairParser:
    """Recursive descent over the tokens: list of pairs, pair of two lists, list of names."""

    def __init__(self, text, tokens):
        self.text = text
        self.tokens = tokens
        self.index = 0

    def _peek(self):
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def _next(self, expected):
        token = self._peek()
        if token is None:
            raise _iop_error(self.text, "", len(self.text),
                             f"unbalanced brackets: input ends where {expected} was expected")
        self.index += 1
        return token

    def _fail(self, token, problem):
        return _iop_error(self.text, token.value, token.pos, problem)

    def parse(self):
        if not self.tokens:
            raise _iop_error(self.text, self.text, 0, "empty string, no entries")
        token = self._next("'['")
        if token.kind != "[":
            raise self._fail(token, "not a list: expected '[' to open the list of pairs")
        if self._peek() is not None and self._peek().kind == "]":
            raise self._fail(self._peek(), "empty list, no entries")
        pairs = []
        while True:
            pairs.append(self._pair())
            token = self._next("',' or ']'")
            if token.kind == "]":
                break
            if token.kind != ",":
                raise self._fail(token, "expected ',' or ']' after a pair")
        extra = self._peek()
        if extra is not None:
            problem = ("unbalanced brackets: extra ']'" if extra.kind == "]"
                       else "trailing garbage after the closing ']'")
            raise self._fail(extra, problem)
        return pairs

    def _pair(self):
        token = self._next("'[' opening an [in_nodes, out_nodes] pair")
        if token.kind == "name":
            raise self._fail(token, "expected '[' opening an [in_nodes, out_nodes] pair, "
                                    "found a node name (only one bracket level?)")
        if token.kind != "[":
            raise self._fail(token, "expected '[' opening an [in_nodes, out_nodes] pair")
        if self._peek() is not None and self._peek().kind == "]":
            raise self._fail(self._peek(), "empty pair: a pair needs exactly 2 lists "
                                           "[in_nodes, out_nodes], got 0")
        lists = []
        while True:
            lists.append(self._name_list())
            token = self._next("',' or ']'")
            if token.kind == "]":
                break
            if token.kind != ",":
                raise self._fail(token, "expected ',' or ']' after a node list")
        if len(lists) != 2:
            raise self._fail(token, f"a pair needs exactly 2 lists [in_nodes, out_nodes], "
                                    f"got {len(lists)}")
        return lists

    def _name_list(self):
        token = self._next("'[' opening a node list")
        if token.kind == "name":
            raise self._fail(token, "expected '[' opening a node list, found a node name: "
                                    "only two bracket levels, write [[['in'], ['out']]]")
        if token.kind != "[":
            raise self._fail(token, "expected '[' opening a node list")
        names = []
        if self._peek() is not None and self._peek().kind == "]":
            raise self._fail(self._peek(), "empty node list, no entries")
        while True:
            token = self._next("a node name")
            if token.kind == "[":
                raise self._fail(token, "too many bracket levels: expected a node name")
            if token.kind != "name":
                raise self._fail(token, "expected a node name")
            self._check_name(token)
            names.append(token.value)
            token = self._next("',' or ']'")
            if token.kind == "]":
                return names
            if token.kind != ",":
                raise self._fail(token, "expected ',' or ']' after a node name")

    def _check_name(self, token):
        name = token.value
        if "'" in name or '"' in name:
            raise self._fail(token, f"node name {name!r} contains a quote character")
        if not _NODE_NAME_RE.match(name):
            raise self._fail(token, f"{name!r} is not a valid TF node name "
                                    "([A-Za-z0-9.][A-Za-z0-9_.\\-/>]*)")


def parse_in_out_pair(text):
    """Parse ``in_out_pair`` into ``[(in_node, (sorted out nodes...)), ...]``.

    The format is the Python ``str()`` of a list of ``[in_nodes, out_nodes]`` pairs, e.g.
    ``"[[['import/conv2d_1/convolution'], ['import/conv2d_59/BiasAdd']]]"``; single or double
    quotes, bare (unquoted) names and whitespace anywhere are accepted. Each in-node gives one
    entry, in order of first appearance; an in-node listed in several pairs gets the union of
    their out-nodes. The original's bracket scanner silently mangles or drops malformed input; we
    reject it with the offset and the problem: empty input or no entries, only two bracket
    levels, unbalanced brackets, a pair without exactly two lists, an empty node list, a name that
    is not a TF node name (quotes included), an unterminated quote, trailing garbage.
    """
    text = _text("in_out_pair", text)
    pairs = _InOutPairParser(text, _tokenize_in_out_pair(text)).parse()
    outs_by_in = {}
    for in_nodes, out_nodes in pairs:
        for in_node in in_nodes:
            outs_by_in.setdefault(in_node, set()).update(out_nodes)
    return [(in_node, tuple(sorted(outs))) for in_node, outs in outs_by_in.items()]


# --------------------------------------------------------------------------------------------
# Smaller formats


def parse_dump_step(text):
    """Parse ``dump_step`` (``"0|5|10-20"``) into ``[(first, last), ...]`` (inclusive).

    At most :data:`MAX_DUMP_STEP_SETS` sets, each ``N`` or ``N-M`` with ``N < M`` (docs/options.md).
    """
    option = "dump_step"
    text = _text(option, text)
    sets = text.split("|")
    if len(sets) > MAX_DUMP_STEP_SETS:
        raise NpuConfigError(option, text, f"at most {MAX_DUMP_STEP_SETS} '|'-separated sets",
                             detail=f"got {len(sets)}")
    result = []
    for item in sets:
        token = item.strip()
        first, dash, last = token.partition("-")
        if not _DIGITS_RE.match(first) or (dash and not _DIGITS_RE.match(last)):
            raise NpuConfigError(option, item, "'N' or 'N-M' (digits), e.g. '0|5|10-20'",
                                 detail=f"in {_q(text)}")
        low = check_int64(option, int(first), "a step number", detail=f"in {_q(text)}")
        high = check_int64(option, int(last), "a step number",
                           detail=f"in {_q(text)}") if dash else low
        if dash and low >= high:
            raise NpuConfigError(option, item, "a range 'N-M' with N < M",
                                 detail=f"in {_q(text)}")
        result.append((low, high))
    return result


def parse_local_device_list(text):
    """Parse ``local_device_list`` (``"0,1,2"``, digits only) into a list of device ids."""
    option = "local_device_list"
    text = _text(option, text)
    devices = []
    for item in text.split(","):
        if not _DIGITS_RE.match(item):
            raise NpuConfigError(option, item, "comma-separated device ids, e.g. '1,2,3'",
                                 detail=f"in {_q(text)}")
        devices.append(check_int64(option, int(item), "a device id", detail=f"in {_q(text)}"))
    return devices


def _parse_number(option, fragment, whole):
    token = fragment.strip()
    if _INT_RE.match(token):
        return check_int64(option, int(token), "a number", detail=f"in {_q(whole)}")
    try:
        value = float(token)
    except ValueError:
        value = None
    if value is None or (math.isfinite(value) and not _FLOAT_RE.match(token)):
        raise NpuConfigError(option, fragment, "a number written with ASCII digits",
                             detail=f"in {_q(whole)}")
    if not math.isfinite(value):
        raise NpuConfigError(option, fragment, "a finite number", detail=f"in {_q(whole)}")
    return value


def parse_gear_pad_values(text):
    """Parse ``npu_adapter_gear_pad_values`` (``"name:value;name:value"``) into a dict.

    ``name`` is an input (or tensor) name and may carry an output index (``x:0:-1`` pads
    ``x:0`` with -1): the value follows the *last* ``:``. Values are ints or finite floats. An
    empty string gives ``{}``.
    """
    option = "npu_adapter_gear_pad_values"
    text = _text(option, text)
    result = {}
    if not text.strip():
        return result
    for entry in text.split(";"):
        name, colon, value_text = entry.rpartition(":")
        name = name.strip()
        if not colon or not name:
            raise NpuConfigError(option, entry, "'name:value' entries separated by ';'",
                                 detail=f"in {_q(text)}")
        if not _TENSOR_NAME_RE.match(name):
            raise NpuConfigError(option, name, "an input or tensor name", detail=f"in {_q(text)}")
        if name in result:
            raise NpuConfigError(option, name, "each name listed once", detail=f"in {_q(text)}")
        result[name] = _parse_number(option, value_text, text)
    return result


def parse_gear_unpad(text):
    """Parse ``npu_adapter_gear_unpad`` (``"out:0:0,1;other:1"``) into ``{tensor: (dims...)}``.

    Each entry names an output tensor and the axes to slice back after padding; the axes follow
    the *last* ``:`` (so tensor names keep their ``:index``). Axes are distinct non-negative
    integers. An empty string gives ``{}``.
    """
    option = "npu_adapter_gear_unpad"
    text = _text(option, text)
    result = {}
    if not text.strip():
        return result
    for entry in text.split(";"):
        name, colon, dims_text = entry.rpartition(":")
        name = name.strip()
        if not colon or not name or not dims_text.strip():
            raise NpuConfigError(option, entry, "'tensor_name:dim[,dim...]' entries "
                                 "separated by ';'", detail=f"in {_q(text)}")
        if not _TENSOR_NAME_RE.match(name):
            raise NpuConfigError(option, name, "an output tensor name", detail=f"in {_q(text)}")
        if name in result:
            raise NpuConfigError(option, name, "each tensor listed once", detail=f"in {_q(text)}")
        dims = []
        for dim_text in dims_text.split(","):
            if not _DIGITS_RE.match(dim_text.strip()):
                raise NpuConfigError(option, dim_text, "a non-negative axis index",
                                     detail=f"in entry {_q(entry)}")
            dim = check_int64(option, int(dim_text.strip()), "an axis index",
                              detail=f"in entry {_q(entry)}")
            if dim in dims:
                raise NpuConfigError(option, dim_text, "distinct axes",
                                     detail=f"in entry {_q(entry)}")
            dims.append(dim)
        result[name] = tuple(dims)
    return result


class AccelerateTrainMode(NamedTuple):
    """Parsed ``experimental_accelerate_train_mode`` (docs/options.md)."""

    type: str
    """``fast`` or ``fast1``."""
    mode: str
    """``step`` or ``loss``: what triggers the switch back to full precision."""
    ratio: float
    """step: fraction of steps in low precision; loss: loss ratio threshold."""


_ACCELERATE_RATIOS = {"step": (0.2, 0.9, 0.9), "loss": (1.01, 1.5, 1.05)}


def parse_accelerate_train_mode(text):
    """Parse ``experimental_accelerate_train_mode`` (``"fast|step|0.9"``).

    ``type|mode[|ratio]`` with type in {fast, fast1}, mode in {step, loss}; the ratio is in
    [0.2, 0.9] for step (default 0.9) and [1.01, 1.5] for loss (default 1.05). The original
    checks this lazily when the GeOp runs; we check it when the option is read.
    """
    option = "experimental_accelerate_train_mode"
    text = _text(option, text)
    fields = text.split("|")
    if len(fields) not in (2, 3):
        raise NpuConfigError(option, text, "'type|mode' or 'type|mode|ratio', e.g. 'fast|step|0.9'")
    kind, mode = fields[0].strip(), fields[1].strip()
    if kind not in ("fast", "fast1"):
        raise NpuConfigError(option, fields[0], "type 'fast' or 'fast1'", detail=f"in {_q(text)}")
    if mode not in _ACCELERATE_RATIOS:
        raise NpuConfigError(option, fields[1], "mode 'step' or 'loss'", detail=f"in {_q(text)}")
    low, high, default = _ACCELERATE_RATIOS[mode]
    ratio = default
    if len(fields) == 3:
        if not _FLOAT_RE.match(fields[2].strip()):
            raise NpuConfigError(option, fields[2], f"a ratio in [{low}, {high}] for {mode}",
                                 detail=f"in {_q(text)}")
        ratio = float(fields[2].strip())
        if not low <= ratio <= high:
            raise NpuConfigError(option, fields[2], f"a ratio in [{low}, {high}] for {mode}",
                                 detail=f"in {_q(text)}")
    return AccelerateTrainMode(kind, mode, ratio)
