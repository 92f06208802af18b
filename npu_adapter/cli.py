"""The ``npu-adapter`` command line.

Subcommands are added by functions ``add_<name>_command(subparsers)`` listed in
:data:`COMMANDS`: each creates its sub-parser and sets ``handler`` to a function
``handler(args) -> exit code``. :func:`main` parses, dispatches and turns npu-adapter errors into a
one-line message and exit code 2 (a traceback only with ``--verbose``).

Implemented here: ``options`` (list the NpuOptimizer options, or check values). ``inspect`` and
``convert`` plug in the same way.
"""

import argparse
import json
import sys
import traceback
import warnings

from npu_adapter import __version__
from npu_adapter.config import OPTION_SPECS, OPTIONS_BY_NAME, NpuConfig
from npu_adapter.config.options import CATEGORIES, suggest_option
from npu_adapter.errors import NpuAdapterError, NpuConfigError

__all__ = ["COMMANDS", "EXIT_ERROR", "EXIT_INVALID", "EXIT_OK", "add_options_command",
           "build_parser", "main", "parse_option_value"]

EXIT_OK = 0
EXIT_ERROR = 1
"""Unexpected failure (a bug): please report it."""
EXIT_INVALID = 2
"""Invalid command line or invalid input (options, files)."""

_PROG = "npu-adapter"
_TRUE = ("true", "1")
_FALSE = ("false", "0")


def _common_parent():
    # default=SUPPRESS so `--verbose` given before the subcommand is not reset by the sub-parser.
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="print a traceback on errors")
    return parent


# --------------------------------------------------------------------------------------------
# options


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
        try:
            return int(text.strip())
        except ValueError:
            raise NpuConfigError(spec.name, text, "an integer") from None
    if spec.kind == "f":
        try:
            return float(text.strip())
        except ValueError:
            raise NpuConfigError(spec.name, text, "a number") from None
    return text


def _check_assignments(assignments):
    options = {}
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise NpuConfigError(item, item, "key=value")
        spec = OPTIONS_BY_NAME.get(key)
        if spec is None:
            match = suggest_option(key)
            hint = f"did you mean {match!r}?" if match else "see `npu-adapter options`"
            raise NpuConfigError(key, text, "a known option name", detail=hint)
        if key in options:
            raise NpuConfigError(key, text, "each option given once")
        options[key] = parse_option_value(spec, text)
    return NpuConfig.from_dict(options)


def _display_default(spec):
    if spec.default is None:
        return "(unset)"
    if spec.kind == "s":
        return repr(spec.default)
    return str(spec.default)


def _flags(spec):
    flags = [name for name, on in (("deprecated", spec.deprecated), ("ours", spec.ours),
                                   ("compat", spec.compat_only)) if on]
    return ",".join(flags) or "-"


def _print_table(specs, out):
    header = ("NAME", "TYPE", "DEFAULT", "CATEGORY", "FLAGS", "ALLOWED")
    rows = [(s.name, s.type_name, _display_default(s), s.category, _flags(s), s.allowed)
            for s in specs]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        out.write("  ".join(cells + [row[-1]]).rstrip() + "\n")


def _run_options(args):
    out = sys.stdout
    if args.check:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            config = _check_assignments(args.check)
        for warning in caught:
            sys.stderr.write(f"{_PROG}: warning: {warning.message}\n")
        if args.json:
            json.dump({"ok": True, "options": config.to_dict()}, out, sort_keys=True)
            out.write("\n")
        else:
            out.write("ok\n")
        return EXIT_OK
    specs = [s for s in OPTION_SPECS if args.category is None or s.category == args.category]
    if args.json:
        json.dump([spec.to_json() for spec in specs], out, indent=1, sort_keys=True)
        out.write("\n")
    else:
        _print_table(specs, out)
    return EXIT_OK


def add_options_command(subparsers):
    """``npu-adapter options [--json] [--category C] [--check key=value ...]``."""
    parser = subparsers.add_parser(
        "options", parents=[_common_parent()],
        help="list the NpuOptimizer options or check values",
        description="List every NpuOptimizer option (type, default, allowed values, category, "
                    "flags), or check option values together: --check prints 'ok' (exit 0) "
                    "or a one-line error (exit 2).")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--category", choices=CATEGORIES, help="list only this category")
    parser.add_argument("--check", nargs="+", metavar="KEY=VALUE",
                        help="validate these option values together (bool: true/false/1/0)")
    parser.set_defaults(handler=_run_options)
    return parser


COMMANDS = [add_options_command]
"""Functions that each add one subcommand to the sub-parsers of :func:`build_parser`."""


# --------------------------------------------------------------------------------------------
# entry point


def build_parser():
    """The argparse parser with every subcommand of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog=_PROG, parents=[_common_parent()],
        description="npu-adapter: TF Adapter (npu_bridge) front end for TensorFlow 2.x")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(subparsers)
    return parser


def _silence_stdout():
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
        pass


def _one_line(exc):
    return " ".join(str(exc).split())


def main(argv=None):
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_INVALID
    verbose = getattr(args, "verbose", False)
    try:
        return handler(args)
    except BrokenPipeError:  # e.g. `npu-adapter options | head`: stop quietly
        _silence_stdout()
        return EXIT_ERROR
    except NpuAdapterError as exc:
        if verbose:
            traceback.print_exc()
        sys.stderr.write(f"{_PROG}: error: {_one_line(exc)}\n")
        return EXIT_INVALID
    except Exception as exc:  # a bug: say so, keep the traceback behind --verbose
        if verbose:
            traceback.print_exc()
        sys.stderr.write(f"{_PROG}: internal error: {type(exc).__name__}: {_one_line(exc)} "
                         "(run with --verbose for a traceback)\n")
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
