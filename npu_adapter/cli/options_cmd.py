"""``npu-adapter options``: list the NpuOptimizer options, or check values together."""

import json
import shutil
import sys
import textwrap
import warnings

from npu_adapter.cli.common import EXIT_OK, PROG, common_parent, option_values
from npu_adapter.config import OPTION_SPECS, NpuConfig
from npu_adapter.config.effects import EFFECT_CLASSES, effect_of
from npu_adapter.config.options import CATEGORIES

__all__ = ["add_options_command"]


def _check_assignments(assignments):
    return NpuConfig.from_dict(option_values(assignments, "given with --check"))


def _display_default(spec):
    if spec.default is None:
        return "(unset)"
    if spec.kind == "s":
        return spec.default or "(empty)"
    return str(spec.default)


CATEGORY_TITLES = {
    "partition": "Partitioning and pass control",
    "dynamic_shape": "Dynamic shapes and gears",
    "precision": "Precision, operator selection and compilation",
    "memory_runtime": "Memory, devices and runtime",
    "debug": "Dumps, profiling, debugging and tuning",
    "compat": "Written by NPUEstimator, read by no one",
    "npu_adapter": "npu-adapter's own options",
}
"""Heading of each option category in the table."""

_GENERIC_ALLOWED = ("any value", "true or false", "any integer", "any string", "any number")
_HEADER = ("NAME", "TYPE", "DEFAULT", "EFFECT", "DESCRIPTION")


def describe(spec):
    """One option's description for the table: what it does, what is allowed, deprecation and
    what it does here (the effect note)."""
    effect, note = effect_of(spec.name)
    parts = [spec.doc.rstrip(".")]
    if spec.allowed not in _GENERIC_ALLOWED:
        parts.append(f"allowed: {spec.allowed}")
    if spec.deprecated:
        parts.append("deprecated" + (f": {spec.deprecation_hint}" if spec.deprecation_hint
                                     else ""))
    if note:
        parts.append(f"here: {note}")
    if spec.severity:
        parts.append(f"original: {_SEVERITY[spec.severity]}")
    return "; ".join(parts) + "."


_SEVERITY = {"E": "error", "F": "aborts the process", "W": "warns and fixes the value"}


def terminal_width(requested=None):
    """The width to wrap the table to: ``requested``, else the terminal's (``COLUMNS``), else
    100; at least 60."""
    width = requested or shutil.get_terminal_size(fallback=(100, 24)).columns
    return max(60, int(width))


def _print_table(specs, out, width):
    rows = [(s.name, s.type_name, _display_default(s), effect_of(s.name)[0], describe(s))
            for s in specs]
    caps = (28, 5, 12, 8)  # widest column before a cell spills over (then the text goes below)
    widths = [max([len(_HEADER[i])] + [len(r[i]) for r in rows if len(r[i]) <= caps[i]])
              for i in range(4)]
    indent = sum(widths) + 2 * len(widths)
    text_width = width - indent
    below = text_width < 30  # too narrow for a column: every description goes below its row
    if below:
        indent, text_width = 4, width - 4

    def cells(row):
        return "  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths))

    out.write((cells(_HEADER) + "  " + _HEADER[-1]).rstrip() + "\n")
    by_category = {}
    for spec, row in zip(specs, rows):
        by_category.setdefault(spec.category, []).append(row)
    for category in [c for c in CATEGORIES if c in by_category]:
        out.write(f"\n{CATEGORY_TITLES.get(category, category)} ({category})\n")
        for row in by_category[category]:
            lines = textwrap.wrap(row[-1], text_width) or [""]
            if len(row[0]) > widths[0]:  # a long name gets a line of its own
                out.write(row[0] + "\n")
                row = ("",) + row[1:]
            spills = any(len(cell) > w for cell, w in zip(row[:4], widths))
            if below or spills:
                out.write(cells(row).rstrip() + "\n")
                out.writelines(" " * indent + line + "\n" for line in lines)
            else:
                out.write(cells(row) + "  " + lines[0] + "\n")
                out.writelines(" " * indent + line + "\n" for line in lines[1:])
    legend = "EFFECT: " + "; ".join(f"{name} = {text}" for name, text in
                                    EFFECT_CLASSES.items()) + "."
    out.write("\n" + "\n".join(textwrap.wrap(legend, width, subsequent_indent="  ")) + "\n")


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
    specs = [s for s in OPTION_SPECS
             if (args.category is None or s.category == args.category)
             and (args.effect is None or effect_of(s.name)[0] == args.effect)]
    if args.json:
        json.dump([dict(spec.to_json(), effect=effect_of(spec.name)[0],
                        effect_note=effect_of(spec.name)[1]) for spec in specs],
                  out, indent=1, sort_keys=True)
        out.write("\n")
    else:
        _print_table(specs, out, terminal_width(args.width))
    return EXIT_OK


def add_options_command(subparsers):
    """``npu-adapter options [--json] [--category C] [--check key=value ...]``."""
    parser = subparsers.add_parser(
        "options", parents=[common_parent()],
        help="list the NpuOptimizer options or check values",
        description="List every NpuOptimizer option by category (type, default, what it does "
                    "on this installation, description with the allowed values), wrapped to "
                    "the terminal; or check option values together: --check prints 'ok' "
                    "(exit 0) or a one-line error (exit 2).")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--category", choices=CATEGORIES, help="list only this category")
    parser.add_argument("--effect", choices=tuple(EFFECT_CLASSES),
                        help="list only the options with this effect here (e.g. compat: "
                             "accepted for compatibility only)")
    parser.add_argument("--width", type=int, metavar="COLUMNS",
                        help="wrap the table to this width (default: the terminal's)")
    parser.add_argument("--check", nargs="+", metavar="KEY=VALUE",
                        help="validate these option values together (bool: true/false/1/0)")
    parser.set_defaults(handler=_run_options)
    return parser
