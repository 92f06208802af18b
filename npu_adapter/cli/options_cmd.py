"""``npu-adapter options``: list the NpuOptimizer options, or check values together."""

import json
import sys
import warnings

from npu_adapter.cli.common import EXIT_OK, PROG, common_parent, option_values
from npu_adapter.config import OPTION_SPECS, NpuConfig
from npu_adapter.config.options import CATEGORIES

__all__ = ["add_options_command"]


def _check_assignments(assignments):
    return NpuConfig.from_dict(option_values(assignments, "given with --check"))


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
            sys.stderr.write(f"{PROG}: warning: {warning.message}\n")
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
        "options", parents=[common_parent()],
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
