"""The ``npu-adapter`` command line.

Subcommands are added by functions ``add_<name>_command(subparsers)`` listed in
:data:`COMMANDS`: each creates its sub-parser and sets ``handler`` to a function
``handler(args) -> exit code``. :func:`main` parses, dispatches and turns npu-adapter errors into a
one-line message and exit code 2 (a traceback only with ``--verbose``).

Implemented here: ``options`` (list the NpuOptimizer options, or check values) and ``inspect``
(rewrite a model file and write its dumps and placement report). ``convert`` plugs in the same
way.
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

__all__ = ["COMMANDS", "EXIT_ERROR", "EXIT_INVALID", "EXIT_OK", "add_convert_command",
           "add_inspect_command",
           "add_options_command", "build_parser", "main", "parse_option_value"]

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
    return NpuConfig.from_dict(_option_values(assignments, "given with --check"))


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


# --------------------------------------------------------------------------------------------
# inspect


def _read_config_file(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        detail = getattr(exc, "strerror", None) or str(exc)
        raise NpuConfigError(what, path, "a readable UTF-8 file", detail=detail) from None


def _unknown_option_error(key, value, where):
    match = suggest_option(key)
    hint = f"did you mean {match!r}?" if match else "see `npu-adapter options`"
    return NpuConfigError(key, value, "a known option name", detail=f"{where}; {hint}")


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
        sys.stderr.write(f"{_PROG}: warning: {path} has no custom optimizer named "
                         "'NpuOptimizer': the graph is left as it is, as the original adapter "
                         "does\n")
    return config


def _option_values(assignments, where="given with --option"):
    """``["key=value", ...]`` → ``{key: typed value}``; unknown, repeated or malformed entries
    are NpuConfigErrors naming them."""
    values = {}
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise NpuConfigError(item, item, "key=value")
        spec = OPTIONS_BY_NAME.get(key)
        if spec is None:
            raise _unknown_option_error(key, text, where)
        if key in values:
            raise NpuConfigError(key, text, "each option given once")
        values[key] = parse_option_value(spec, text)
    return values


def _inspect_config(args):
    if args.config:
        config = _config_from_json(args.config)
    elif args.config_proto:
        config = _config_from_proto(args.config_proto)
    else:
        config = NpuConfig.from_dict({})
    overrides = _option_values(args.option or ())
    return config.replace(**overrides) if overrides else config


def _progress_printer(enabled):
    import time

    start = time.perf_counter()

    def report(message):
        if enabled:
            sys.stderr.write(f"{_PROG}: [{time.perf_counter() - start:7.1f}s] {message}\n")
            sys.stderr.flush()

    return report


def _run_inspect(args):
    import os

    from npu_adapter import model_io
    from npu_adapter.dump import dump_graphs

    out_dir = args.out
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise NpuConfigError("--out", out_dir, "a directory", detail="a file of that name exists")
    show = args.progress or (sys.stderr.isatty() and not args.quiet)
    say = _progress_printer(show and not args.quiet)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = _inspect_config(args)
    for warning in caught:
        sys.stderr.write(f"{_PROG}: warning: {warning.message}\n")
    say(f"loading {args.model}")
    model = model_io.load_model(args.model, signature=args.signature,
                                tags=args.tags.split(",") if args.tags else None)
    say(f"loaded {model.kind}: {len(model.graph_def.node)} nodes"
        + (f", signature {model.signature!r}" if model.signature else ""))
    fetches, feeds = args.fetch, args.feed
    if fetches is None and feeds is None and args.target is None:
        fetches, feeds = model.fetches or None, model.feeds or None
    backend = args.backend or config.get("npu_adapter_backend") or "cpu"
    outcome = dump_graphs(model, config, out_dir, fetches=fetches, feeds=feeds,
                          targets=args.target, backend=backend, run_name=args.run_name,
                          html=not args.no_html, dot=not args.no_drawings,
                          tensorboard=not args.no_tensorboard, renderer=args.renderer,
                          timings=args.timings, progress=say, model_name=model.name)
    summary = outcome.report["summary"]
    out = sys.stdout
    main_file = "report.html" if not args.no_html else "placement.json"
    out.write(f"{os.path.join(out_dir, main_file)}\n")
    out.write(f"  nodes: {summary['nodes']} ({summary['npu']} on the device in "
              f"{summary['clusters']} cluster(s), {summary['host']} on the host)\n")
    blockers = ", ".join(f"{b['reason']} {b['count']}" for b in summary["host_blockers"][:3])
    if blockers:
        out.write(f"  top host reasons: {blockers}\n")
    if outcome.report["skip_reason"]:
        out.write(f"  not rewritten: {outcome.report['skip_reason']}\n")
    out.write(f"  {len(outcome.files)} files in {out_dir}\n")
    return EXIT_OK


def add_inspect_command(subparsers):
    """``npu-adapter inspect MODEL [--config FILE.json|--config-proto FILE.pbtxt]
    [--option k=v ...] [--backend NAME] [--fetch NAME ...] --out DIR``."""
    parser = subparsers.add_parser(
        "inspect", parents=[_common_parent()],
        help="rewrite a model and write its per-pass graphs and placement report",
        description="Rewrite MODEL (.pb, .pbtxt, .meta or a SavedModel directory) as a session "
                    "would and write into DIR: every pass's input and output graph, "
                    "final.pbtxt, placement.json (where each node runs and why), report.html, "
                    "Graphviz drawings and TensorBoard runs. Exit 0 on success, 2 on invalid "
                    "input (one-line error), 1 on an internal error.")
    parser.add_argument("model", metavar="MODEL", help="model file or SavedModel directory")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", metavar="FILE.json",
                        help="JSON object of NpuOptimizer options, e.g. "
                             '{"mix_compile_mode": true}')
    source.add_argument("--config-proto", metavar="FILE.pbtxt",
                        help="text tf.compat.v1.ConfigProto with an NpuOptimizer entry")
    parser.add_argument("--option", action="append", metavar="KEY=VALUE",
                        help="set an option (repeatable; overrides --config)")
    parser.add_argument("--backend", help="backend name (default: npu_adapter_backend, cpu)")
    parser.add_argument("--fetch", action="extend", nargs="+", metavar="NAME",
                        help="tensor to fetch (default: the model signature's outputs, else "
                             "every sink)")
    parser.add_argument("--feed", action="extend", nargs="+", metavar="NAME",
                        help="tensor that is fed")
    parser.add_argument("--target", action="extend", nargs="+", metavar="NAME",
                        help="op to run")
    parser.add_argument("--signature", help="SignatureDef key of a SavedModel or .meta")
    parser.add_argument("--tags", help="SavedModel tag set, comma-separated (default: serve)")
    parser.add_argument("--run-name", help="directory of the per-pass dumps (default graph_1)")
    parser.add_argument("--renderer", choices=("auto", "dot", "builtin"), default="auto",
                        help="graph layout: Graphviz dot when installed (auto), or built-in")
    parser.add_argument("--no-html", action="store_true", help="do not write report.html")
    parser.add_argument("--no-drawings", action="store_true",
                        help="do not write graph/*.dot and *.svg")
    parser.add_argument("--no-tensorboard", action="store_true",
                        help="do not write the TensorBoard runs")
    parser.add_argument("--timings", action="store_true",
                        help="also write timings.json (wall times; not deterministic)")
    parser.add_argument("--progress", action="store_true",
                        help="print progress lines to stderr (default when stderr is a terminal)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(handler=_run_inspect)
    return parser


def _run_convert(args):
    import os

    from npu_adapter import model_io
    from npu_adapter.api import rewrite
    from npu_adapter.graph.serialize import to_bytes, to_text

    if not args.out.endswith((".pb", ".pbtxt")):
        raise NpuConfigError("--out", args.out, "a file name ending in .pb or .pbtxt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = _inspect_config(args)
    for warning in caught:
        sys.stderr.write(f"{_PROG}: warning: {warning.message}\n")
    model = model_io.load_model(args.model, signature=args.signature,
                                tags=args.tags.split(",") if args.tags else None)
    fetches, feeds = args.fetch, args.feed
    if fetches is None and feeds is None and args.target is None:
        fetches, feeds = model.fetches or None, model.feeds or None
    backend = args.backend or config.get("npu_adapter_backend") or "cpu"
    result = rewrite(model.graph_def, config, fetches=fetches, feeds=feeds, targets=args.target,
                     backend=backend)
    data = to_text(result.graph_def).encode() if args.out.endswith(".pbtxt") else \
        to_bytes(result.graph_def)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:  # write-then-rename: never a half-written model file
        f.write(data)
    os.replace(tmp, args.out)
    sys.stdout.write(f"{args.out}\n  {len(result.clusters)} cluster(s): "
                     + ", ".join(f"{c.name} ({c.size} nodes)" for c in result.clusters) + "\n")
    for name, mapped in sorted(result.tensor_map.items()):
        sys.stdout.write(f"  fetch {name} -> {mapped}\n")
    if result.skip_reason:
        sys.stdout.write(f"  not rewritten: {result.skip_reason}\n")
    return EXIT_OK


def add_convert_command(subparsers):
    """``npu-adapter convert MODEL --out FILE.pb [--option k=v ...] [--fetch NAME ...]``."""
    parser = subparsers.add_parser(
        "convert", parents=[_common_parent()],
        help="rewrite a model offline and write the rewritten GraphDef",
        description="Rewrite MODEL (.pb, .pbtxt, .meta or a SavedModel directory) as a session "
                    "would and write the rewritten GraphDef (binary .pb or text .pbtxt; plain "
                    "TensorFlow with the CPU reference backend). Prints where each fetch went. "
                    "Exit 0 on success, 2 on invalid input, 1 on an internal error.")
    parser.add_argument("model", metavar="MODEL", help="model file or SavedModel directory")
    parser.add_argument("--out", required=True, metavar="FILE", help="output .pb or .pbtxt")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--config", metavar="FILE.json", help="JSON object of options")
    group.add_argument("--config-proto", metavar="FILE.pbtxt",
                       help="text ConfigProto with an NpuOptimizer entry")
    parser.add_argument("--option", action="append", metavar="KEY=VALUE",
                        help="set an option (repeatable; overrides --config)")
    parser.add_argument("--backend", help="backend name (default: npu_adapter_backend, cpu)")
    parser.add_argument("--fetch", nargs="+", metavar="NAME", help="tensors to fetch")
    parser.add_argument("--feed", nargs="+", metavar="NAME", help="tensors that are fed")
    parser.add_argument("--target", nargs="+", metavar="NAME", help="ops to run")
    parser.add_argument("--signature", help="SignatureDef key of a SavedModel or .meta")
    parser.add_argument("--tags", help="SavedModel tags, comma-separated (default: serve)")
    parser.set_defaults(handler=_run_convert)


COMMANDS = [add_options_command, add_inspect_command, add_convert_command]
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
