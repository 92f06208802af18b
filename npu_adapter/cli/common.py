"""What every ``npu-adapter`` subcommand shares: exit codes, option and config parsing, progress.

A subcommand module defines ``add_<name>_command(subparsers)``, which creates its sub-parser with
``parents=[common_parent()]`` and sets ``handler`` to ``handler(args) -> exit code``. Errors about
the user's input are ``NpuAdapterError``s; :func:`npu_adapter.cli.main` prints them on one line
and exits with :data:`EXIT_INVALID`.
"""

import argparse
import json
import re
import sys

from npu_adapter.cli.parser import CliParser
from npu_adapter.config import OPTIONS_BY_NAME, NpuConfig
from npu_adapter.config.options import unknown_option_hint
from npu_adapter.errors import NpuConfigError, UnknownOptionError, UsageError, excerpt

__all__ = ["EXIT_OK", "EXIT_ERROR", "EXIT_INVALID", "PROG", "ProgressPrinter", "common_parent",
           "config_from_args", "option_values", "parse_option_value", "warn"]

EXIT_OK = 0
EXIT_ERROR = 1
"""Unexpected failure (a bug): please report it."""
EXIT_INVALID = 2
"""Invalid command line or invalid input (options, files)."""

PROG = "npu-adapter"
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_TRUE = ("true", "1")
_FALSE = ("false", "0")


def common_parent():
    # default=SUPPRESS so `--verbose` given before the subcommand is not reset by the sub-parser.
    parent = CliParser(add_help=False)
    parent.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="print a traceback on errors")
    return parent


def parse_option_value(spec, text):
    """Convert command-line ``text`` to the Python type of option ``spec``.

    bool accepts true/false/1/0 (any case); int and float use Python's literals; str is taken as
    is. Raises :class:`~npu_adapter.errors.NpuConfigError` on a bad literal.
    """
    if spec.kind == "b":
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise NpuConfigError(spec.name, text, "a bool: true, false, 1 or 0")
    if spec.kind == "i":
        # ASCII digits only: int() would also take "١٢" or "1_000".
        if not _INT_RE.match(text.strip()):
            raise NpuConfigError(spec.name, text, "an integer (ASCII digits, e.g. 4 or -1)")
        return int(text.strip())
    if spec.kind == "f":
        if not _FLOAT_RE.match(text.strip()):
            raise NpuConfigError(spec.name, text, "a number (ASCII digits, e.g. 0.5)")
        return float(text.strip())
    return text


def _read_config_file(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        detail = getattr(exc, "strerror", None) or str(exc)
        raise NpuConfigError(what, path, "a readable UTF-8 file", detail=detail) from None


def _unknown_option_error(key, value, where):
    return UnknownOptionError(key, value, unknown_option_hint(key), detail=where)


def _config_from_json(path):
    text = _read_config_file(path, "--config")
    try:
        options = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NpuConfigError("--config", path, "a JSON object of NpuOptimizer options",
                             detail=f"line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(options, dict):
        raise NpuConfigError("--config", path, "a JSON object of NpuOptimizer options",
                             detail=f"the file holds a JSON {type(options).__name__}")
    for key, value in options.items():
        if key not in OPTIONS_BY_NAME:
            raise _unknown_option_error(key, value, f"in {path}")
    return NpuConfig.from_dict(options)


def _config_from_proto(path):
    from google.protobuf import text_format
    from tensorflow.core.protobuf import config_pb2

    text = _read_config_file(path, "--config-proto")
    proto = config_pb2.ConfigProto()
    try:
        text_format.Parse(text, proto)
    except text_format.ParseError as exc:
        raise NpuConfigError("--config-proto", path, "a text-format tf.compat.v1.ConfigProto",
                             detail=str(exc)) from None
    config = NpuConfig.from_config_proto(proto)
    for key in config.unknown_keys():
        raise _unknown_option_error(key, config.get(key), f"in {path}")
    if not config.present:
        sys.stderr.write(f"{PROG}: warning: {path} has no custom optimizer named "
                         "'NpuOptimizer': the graph is left as it is, as the original adapter "
                         "does\n")
    return config


def option_values(assignments, where="given with --option"):
    """``["key=value", ...]`` → ``{key: typed value}``; unknown, repeated or malformed entries
    are NpuConfigErrors naming them."""
    values = {}
    flag = where.split()[-1] if where.startswith("given with") else "--option"
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            example = f"{key}=VALUE" if key in OPTIONS_BY_NAME else "precision_mode=force_fp16"
            raise UsageError(f"{flag} {excerpt(item)}: expected KEY=VALUE (no '=' found), e.g. "
                             f"{flag} {example}")
        if not key:
            raise UsageError(f"{flag} {excerpt(item)}: expected KEY=VALUE (the key before '=' "
                             "is empty)")
        spec = OPTIONS_BY_NAME.get(key)
        if spec is None:
            raise _unknown_option_error(key, text, where)
        if key in values:
            raise NpuConfigError(key, text, "each option given once")
        values[key] = parse_option_value(spec, text)
    return values


def config_from_args(args):
    if args.config:
        config = _config_from_json(args.config)
    elif args.config_proto:
        config = _config_from_proto(args.config_proto)
    else:
        config = NpuConfig.from_dict({})
    overrides = option_values(args.option or ())
    return config.replace(**overrides) if overrides else config


class ProgressPrinter:
    """Progress lines on stderr, each with the time since the command started
    (``npu-adapter: [   2.4s] loading model.pb``), and the closing ``done in`` line.

    ``started`` is the command's start (:func:`time.monotonic`; :func:`npu_adapter.cli.main`
    records it before anything is imported), so the times include TensorFlow's import and the
    model's load.
    """

    def __init__(self, enabled, started=None):
        import time

        self.enabled = enabled
        self.started = time.monotonic() if started is None else started

    def elapsed(self):
        import time

        return time.monotonic() - self.started

    def __call__(self, message):
        if self.enabled:
            sys.stderr.write(f"{PROG}: [{self.elapsed():7.1f}s] {message}\n")
            sys.stderr.flush()

    def done(self):
        """The last line: the whole command's time."""
        self(f"done in {self.elapsed():.1f} s")


def warn(message):
    """Print a warning line on stderr."""
    sys.stderr.write(f"{PROG}: warning: {message}\n")
