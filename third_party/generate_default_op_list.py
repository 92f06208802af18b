"""Regenerate the bundled default op-support list ``npu_supported_ops.json`` from the txt.

Usage::

    python third_party/generate_default_op_list.py PATH/TO/npu_supported_ops.txt
    python third_party/generate_default_op_list.py PATH/TO/npu_supported_ops.txt --check

The txt holds one TensorFlow op type per line; lines starting with ``#`` are comments, and the
section headers ``# ---- Section N: ... (COUNT) ...`` say which flags the following ops get:

* section 1 (in source [A], ``isGray`` false) → ``{"isGray": false, "isHeavy": false}``
* section 2 (in source [A], ``isGray`` true)  → ``{"isGray": true, "isHeavy": false}``
* section 3 (only in source [B], newer CANN)  → ``{"isGray": false, "isHeavy": false}``

``isHeavy`` is false everywhere, as in source [A]. The output is the original's JSON format
(``{OpType: {"isGray": bool, "isHeavy": bool}}``) with sorted keys, two-space indentation and a
final newline, so the same txt always gives byte-identical output. The script refuses input it
does not understand (an op before the first section, an unknown section, a duplicate op, a name
that is not an op type, a section whose size disagrees with the count in its header) instead of
guessing. See ``SOURCES.md`` next to this file.
"""

import argparse
import json
import os
import re
import sys

__all__ = [
    "SECTION_GRAY",
    "OpListFormatError",
    "parse_op_txt",
    "render_json",
    "main",
]

# Section number → isGray. Any other section number is an error, so a new section in the txt
# forces a decision here rather than silently getting a default flag.
SECTION_GRAY = {1: False, 2: True, 3: False}

_SECTION_RE = re.compile(r"^#\s*-+\s*Section\s+(\d+)\b(.*)$")
_COUNT_RE = re.compile(r"\((\d+)\)")
_OP_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

DEFAULT_OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npu_supported_ops.json")


class OpListFormatError(ValueError):
    """The txt does not follow the expected format; the message names the file and the line."""


def parse_op_txt(text, source="<string>"):
    """Parse the txt's content into ``{op_type: {"isGray": bool, "isHeavy": bool}}``.

    Args:
        text: the content of ``npu_supported_ops.txt``.
        source: the file name used in error messages.

    Returns:
        A dict with one entry per op type (insertion order = order in the txt).

    Raises:
        OpListFormatError: an op before any section, an unknown section number, a duplicate op
            type, an invalid op type, or a section whose number of ops differs from the count
            written in its header.
    """
    ops = {}
    section = None
    expected = {}
    counted = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            match = _SECTION_RE.match(line)
            if match is None:
                continue
            section = int(match.group(1))
            if section not in SECTION_GRAY:
                raise OpListFormatError(
                    f"{source}:{lineno}: unknown section {section}; known sections are "
                    f"{sorted(SECTION_GRAY)} (add the new one to SECTION_GRAY with its gray flag)"
                )
            if section in counted:
                raise OpListFormatError(f"{source}:{lineno}: section {section} appears twice")
            counted[section] = 0
            count = _COUNT_RE.search(match.group(2))
            if count is not None:
                expected[section] = (int(count.group(1)), lineno)
            continue
        if section is None:
            raise OpListFormatError(
                f"{source}:{lineno}: op type {line!r} appears before the first section header"
            )
        if not _OP_RE.match(line):
            raise OpListFormatError(
                f"{source}:{lineno}: {line!r} is not an op type (expected letters, digits and "
                f"underscores, one op type per line)"
            )
        if line in ops:
            raise OpListFormatError(f"{source}:{lineno}: op type {line!r} is listed twice")
        ops[line] = {"isGray": SECTION_GRAY[section], "isHeavy": False}
        counted[section] += 1
    for sec, (want, lineno) in sorted(expected.items()):
        if counted[sec] != want:
            raise OpListFormatError(
                f"{source}:{lineno}: section {sec} announces {want} ops but lists {counted[sec]}"
            )
    return ops


def render_json(ops):
    """Serialize the op dict deterministically (sorted keys, 2-space indent, final newline)."""
    return json.dumps(ops, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def main(argv=None):
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(
        description="Regenerate the bundled npu_supported_ops.json from npu_supported_ops.txt."
    )
    parser.add_argument("txt", help="path to npu_supported_ops.txt")
    parser.add_argument(
        "-o",
        "--output",
        default=DEFAULT_OUTPUT,
        help="where to write the JSON (default: npu_supported_ops.json next to this script)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit with status 1 if the output file is not up to date",
    )
    args = parser.parse_args(argv)
    try:
        with open(args.txt, encoding="utf-8") as f:
            text = f.read()
        ops = parse_op_txt(text, source=args.txt)
    except (OSError, OpListFormatError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rendered = render_json(ops)
    gray = sum(1 for info in ops.values() if info["isGray"])
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as f:
                current = f.read()
        except OSError as e:
            print(f"error: cannot read {args.output}: {e}", file=sys.stderr)
            return 1
        if current != rendered:
            print(f"{args.output} is out of date; rerun without --check", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date ({len(ops)} ops, {gray} gray)")
        return 0
    with open(args.output, "w", encoding="utf-8", newline="\n") as f:
        f.write(rendered)
    print(f"wrote {args.output} ({len(ops)} ops, {gray} gray)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
