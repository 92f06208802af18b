"""Text pipelines: ``"mark_candidates,cluster(min_size=2),encapsulate"``.

Grammar (whitespace allowed between tokens)::

    pipeline := pass ("," pass)*
    pass     := NAME ["(" [option ("," option)*] ")"]
    option   := NAME "=" value
    value    := "true" | "false" | INT | FLOAT | STRING | BARE
    STRING   := '"' (any char except '"' and '\\', or '\\' any char)* '"'
    BARE     := [A-Za-z0-9_.+/-]+

Values are converted to the option's declared type; a string option takes a quoted STRING or a
BARE word. :func:`format_pipeline` prints the canonical form (no spaces, options sorted), and
``parse_pipeline(format_pipeline(p))`` gives back the same passes. Errors are
:class:`~npu_adapter.errors.PipelineParseError` with a caret under the bad token.
"""

import re

from npu_adapter.errors import PipelineParseError
from npu_adapter.pipeline.registry import get_pass_class, list_passes

__all__ = ["parse_pipeline", "format_pipeline"]

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BARE_RE = re.compile(r"[A-Za-z0-9_.+/\-]+")
_INT_RE = re.compile(r"[+-]?\d+\Z")
_FLOAT_RE = re.compile(r"[+-]?((\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?|inf|nan)\Z")


class _Scanner:
    def __init__(self, text):
        self.text = text
        self.pos = 0

    def skip_ws(self):
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self):
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def error(self, message, pos=None):
        raise PipelineParseError(self.text, self.pos if pos is None else pos, message)

    def expect(self, char):
        if self.peek() != char:
            found = self.peek() or "end of text"
            self.error(f"expected {char!r}, found {found!r}")
        self.pos += 1

    def name(self, what):
        self.skip_ws()
        m = _NAME_RE.match(self.text, self.pos)
        if not m:
            found = self.text[self.pos:self.pos + 1] or "end of text"
            article = "an" if what[0] in "aeiou" else "a"
            self.error(f"expected {article} {what} name, found {found!r}")
        self.pos = m.end()
        return m.group(0)

    def value(self):
        """Returns (raw text, kind) where kind is 'string' or 'bare'."""
        self.skip_ws()
        start = self.pos
        if self.pos < len(self.text) and self.text[self.pos] == '"':
            self.pos += 1
            out = []
            while True:
                if self.pos >= len(self.text):
                    self.error("unterminated string", start)
                c = self.text[self.pos]
                if c == "\\":
                    if self.pos + 1 >= len(self.text):
                        self.error("unterminated string", start)
                    out.append(self.text[self.pos + 1])
                    self.pos += 2
                    continue
                if c == '"':
                    self.pos += 1
                    return "".join(out), "string", start
                out.append(c)
                self.pos += 1
        m = _BARE_RE.match(self.text, self.pos)
        if not m:
            found = self.text[self.pos:self.pos + 1] or "end of text"
            self.error(f"expected an option value, found {found!r}")
        self.pos = m.end()
        return m.group(0), "bare", start


def _convert(scanner, pass_name, key, spec, raw, kind, pos):
    if spec.type is str:
        return raw
    if kind == "string":
        scanner.error(
            f"option {key!r} of pass {pass_name!r} expects {spec.type.__name__}, got a string", pos)
    if spec.type is bool:
        if raw in ("true", "false"):
            return raw == "true"
        scanner.error(f"option {key!r} of pass {pass_name!r} expects true or false, got {raw!r}",
                      pos)
    if spec.type is int:
        if _INT_RE.match(raw):
            return int(raw)
        scanner.error(f"option {key!r} of pass {pass_name!r} expects an integer, got {raw!r}", pos)
    if spec.type is float:
        if _FLOAT_RE.match(raw):
            return float(raw)
        scanner.error(f"option {key!r} of pass {pass_name!r} expects a number, got {raw!r}", pos)
    scanner.error(f"option {key!r} of pass {pass_name!r} cannot be given in a pipeline", pos)


def parse_pipeline(text):
    """Parse pipeline text into a list of pass instances (see module docstring)."""
    scanner = _Scanner(text)
    passes = []
    if not scanner.peek():
        scanner.error("empty pipeline; expected a pass name")
    while True:
        scanner.skip_ws()
        name_pos = scanner.pos
        name = scanner.name("pass")
        try:
            cls = get_pass_class(name)
        except KeyError:
            scanner.error(f"unknown pass {name!r}; registered passes: {list_passes()}", name_pos)
        options = {}
        if scanner.peek() == "(":
            scanner.expect("(")
            if scanner.peek() != ")":
                while True:
                    scanner.skip_ws()
                    key_pos = scanner.pos
                    key = scanner.name("option")
                    if key not in cls.options:
                        scanner.error(
                            f"pass {name!r} has no option {key!r}; valid options: "
                            f"{sorted(cls.options) or 'none'}", key_pos)
                    if key in options:
                        scanner.error(f"option {key!r} given twice", key_pos)
                    scanner.expect("=")
                    raw, kind, vpos = scanner.value()
                    options[key] = _convert(scanner, name, key, cls.options[key], raw, kind, vpos)
                    if scanner.peek() == ",":
                        scanner.expect(",")
                        continue
                    break
            scanner.expect(")")
        try:
            passes.append(cls(**options))
        except ValueError as e:
            scanner.error(str(e), name_pos)
        nxt = scanner.peek()
        if nxt == "":
            return passes
        if nxt != ",":
            scanner.error(f"expected ',' or end of pipeline, found {nxt!r}")
        scanner.expect(",")


def format_pipeline(passes):
    """Canonical text of a list of passes (inverse of :func:`parse_pipeline`)."""
    return ",".join(p.describe() for p in passes)
