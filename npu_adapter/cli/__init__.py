"""The ``npu-adapter`` command line.

Each subcommand is one module of this package defining ``add_<name>_command(subparsers)`` (see
:mod:`npu_adapter.cli.common`); :data:`COMMANDS` lists them. :func:`main` parses, dispatches and
turns npu-adapter errors into a one-line message and exit code 2 (a traceback only with
``--verbose``); anything else is a bug in npu-adapter and exits 1 as an "internal error".
"""

import sys
import traceback

from npu_adapter import __version__
from npu_adapter.cli import quiet
from npu_adapter.cli.common import (
    EXIT_ERROR,
    EXIT_INVALID,
    EXIT_OK,
    PROG,
    common_parent,
    parse_option_value,
)
from npu_adapter.cli.convert_cmd import add_convert_command
from npu_adapter.cli.doctor_cmd import add_doctor_command
from npu_adapter.cli.dump_cmd import add_dump_command
from npu_adapter.cli.inspect_cmd import add_inspect_command
from npu_adapter.cli.launch_cmd import add_launch_command
from npu_adapter.cli.numerics_cmd import add_numerics_command
from npu_adapter.cli.options_cmd import add_options_command
from npu_adapter.cli.parser import CliParser
from npu_adapter.errors import NpuAdapterError

__all__ = ["COMMANDS", "EXIT_ERROR", "EXIT_INVALID", "EXIT_OK", "build_parser", "main",
           "parse_option_value"]

COMMANDS = [add_options_command, add_inspect_command, add_convert_command,
            add_numerics_command, add_doctor_command, add_dump_command, add_launch_command]
"""Functions that each add one subcommand to the sub-parsers of :func:`build_parser`."""


def build_parser():
    """The argparse parser with every subcommand of :data:`COMMANDS`."""
    parser = CliParser(
        prog=PROG, parents=[common_parent()],
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


def _kept(exc):
    """Where a failed run kept its partial output (see ``common.OutputDirectory``)."""
    failed_dir = getattr(exc, "failed_dir", None)
    return f"; partial output kept in {failed_dir}" if failed_dir else ""


def main(argv=None):
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    import time

    started = time.monotonic()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_INVALID
    args.started = started  # progress lines count from here (common.ProgressPrinter)
    verbose = getattr(args, "verbose", False)
    quiet.install(verbose=verbose)
    try:
        return handler(args)
    except BrokenPipeError:  # e.g. `npu-adapter options | head`: stop quietly
        _silence_stdout()
        return EXIT_ERROR
    except NpuAdapterError as exc:
        if verbose:
            traceback.print_exc()
        sys.stderr.write(f"{PROG}: error: {_one_line(exc)}{_kept(exc)}\n")
        return EXIT_INVALID
    except OSError as exc:  # the file system refused (permissions, disk full, ...): not a bug
        if verbose:
            traceback.print_exc()
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        sys.stderr.write(f"{PROG}: error: {exc.strerror or _one_line(exc)}{where}"
                         f"{_kept(exc)}\n")
        return EXIT_INVALID
    except Exception as exc:  # a bug: say so, keep the traceback behind --verbose
        if verbose:
            traceback.print_exc()
        sys.stderr.write(f"{PROG}: internal error: {type(exc).__name__}: {_one_line(exc)} "
                         f"(run with --verbose for a traceback){_kept(exc)}\n")
        return EXIT_ERROR
    finally:
        quiet.uninstall()  # a caller of main() in its own process imports TensorFlow as usual
