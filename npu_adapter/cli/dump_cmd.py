"""``npu-adapter dump``: read data dumps (``show``) and compare two of them (``compare``).

Both work on dumps written here and on dumps laid out by an Ascend device; neither imports
TensorFlow.
"""

import json
import os
import sys

from npu_adapter.cli.common import EXIT_OK, common_parent
from npu_adapter.cli.outputs import OutputDirectory
from npu_adapter.errors import UsageError, float_text

__all__ = ["EXIT_DIVERGED", "add_dump_command"]

EXIT_DIVERGED = 3
"""``dump compare --check``: the dumps diverge."""


def _tensor_text(tensor):
    shape = "x".join(str(d) for d in tensor.shape) or "scalar"
    fmt = tensor.format[len("FORMAT_"):] if tensor.format.startswith("FORMAT_") else tensor.format
    return f"{tensor.dtype[3:] if tensor.dtype.startswith('DT_') else tensor.dtype}[{shape}] {fmt}"


def _describe(entries):
    """``[{step, model, model_id, ops: [...]}]`` of a tree's entries."""
    from npu_adapter.datadump.reader import read_dump_file, read_stats_file

    groups = {}
    for entry in entries:
        key = (entry.step, entry.model_id, entry.model_name)
        group = groups.setdefault(key, {"step": entry.step, "model": entry.model_name,
                                        "model_id": entry.model_id, "time": entry.time,
                                        "device_id": entry.device_id, "ops": []})
        op = {"op_type": entry.name.op_type, "op_name": entry.name.op_name,
              "task_id": entry.name.task_id, "kind": entry.kind,
              "file": os.path.basename(entry.path)}
        if entry.kind == "stats":
            op["tensors"] = [f"{row['Input/Output']} {row['Index']}: {row['Data Type']}"
                             f"[{row['Shape']}] max {row['Max Value']} min {row['Min Value']}"
                             for row in read_stats_file(entry.path)]
        else:
            record = read_dump_file(entry.path)
            op["op_name"] = record.op_name or op["op_name"]
            op["tensors"] = [f"{t.direction} {t.index}: {_tensor_text(t)}"
                             for t in record.tensors()]
            if record.attrs:
                op["attrs"] = record.attrs
        group["ops"].append(op)
    return list(groups.values())


def _steps_text(entries):
    steps = sorted({e.step for e in entries if e.step is not None})
    return ", ".join(map(str, steps)) or "none (the files are not in iteration folders)"


def _dump_entries(path):
    """The dump files under ``path``; a one-line error when there is no such folder or no
    dump in it."""
    from npu_adapter.datadump.reader import scan_dump_tree

    if not os.path.exists(path):
        raise UsageError(f"{path} does not exist")
    if not os.path.isdir(path):
        raise UsageError(f"{path} is a file: give the dump folder (dump_path, or a folder below "
                         "it)")
    entries = scan_dump_tree(path)
    if not entries:
        raise UsageError(f"{path} holds no dump files (enable_dump writes them under dump_path, "
                         "as {time}/{device_id}/{model_name}/{model_id}/{iteration}/"
                         "{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp})")
    return entries


def _check_steps(wanted, entries, where):
    found = {e.step for e in entries}
    missing = [step for step in wanted or () if step not in found]
    if missing:
        raise UsageError(f"--step {missing[0]}: {where} has no iteration {missing[0]}; "
                         f"iterations found: {_steps_text(entries)}")


def _run_show(args):
    entries = _dump_entries(args.dir)
    if args.step is not None:
        _check_steps(args.step, entries, args.dir)
        entries = [e for e in entries if e.step in set(args.step)]
    groups = _describe(entries)
    if args.json:
        json.dump({"dir": os.path.abspath(args.dir), "files": len(entries), "iterations": groups},
                  sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
        return EXIT_OK
    out = sys.stdout
    steps = sorted({e.step for e in entries if e.step is not None})
    models = sorted({e.model_name for e in entries if e.model_name})
    out.write(f"{os.path.abspath(args.dir)}: {len(entries)} dump files, "
              f"{len(steps)} iteration(s), {len(models)} model(s)\n")
    for group in groups:
        where = f"iteration {group['step']}" if group["step"] is not None else "no iteration"
        model = f"model {group['model']} (id {group['model_id']})" if group["model"] else ""
        out.write(f"\n{where} {model}: {len(group['ops'])} file(s)\n")
        for op in group["ops"]:
            out.write(f"  [{op['task_id']:>4}] {op['op_type']} {op['op_name']}"
                      f"{'' if op['kind'] == 'tensor' else ' (' + op['kind'] + ')'}\n")
            for line in op["tensors"]:
                out.write(f"         {line}\n")
            for key, value in sorted(op.get("attrs", {}).items()):
                out.write(f"         {key} = {value}\n")
    return EXIT_OK


def _metric(value):
    """A comparison figure as a person reads it (JSON holds no inf/nan: None stands for them)."""
    return "inf/nan" if value is None else float_text(value)


def _run_compare(args):
    import contextlib

    # --out is checked (its temporary sibling created) before the dumps are read.
    output = OutputDirectory(args.out) if args.out else contextlib.nullcontext()
    with output as work_dir:
        diverged = _compare(args, work_dir)
    if args.out:
        sys.stdout.write(f"{os.path.join(args.out, 'comparison.json')}\n"
                         f"{os.path.join(args.out, 'comparison.html')}\n")
    return EXIT_DIVERGED if (args.check and diverged) else EXIT_OK


def _compare(args, work_dir):
    """Compare, print one line per iteration, write the files into ``work_dir`` (when given);
    True when an op diverges."""
    from npu_adapter.datadump.compare import compare_dumps
    from npu_adapter.datadump.compare_html import render_comparison_html
    from npu_adapter.datadump.writer import write_atomic

    golden, other = _dump_entries(args.golden), _dump_entries(args.other)
    common = [e for e in golden if e.step in {o.step for o in other}]
    if not common:
        raise UsageError(f"{args.golden} and {args.other} have no iteration in common "
                         f"(iterations found: {_steps_text(golden)} and {_steps_text(other)})")
    _check_steps(args.step, golden, args.golden)
    _check_steps(args.step, other, args.other)
    result = compare_dumps(args.golden, args.other, steps=args.step, min_cosine=args.min_cosine,
                           rtol=args.rtol, atol=args.atol)
    out = sys.stdout
    summary = result.to_json()
    diverged = False
    for note in result.notes:
        out.write(f"note: {note}\n")
    for step in summary["steps"]:
        first, nonfinite = step["first_divergence"], step["first_nonfinite"]
        diverged = diverged or first is not None
        out.write(f"iteration {step['step']}: {step['ops_compared']} ops compared, "
                  f"{step['ops_diverged']} diverged"
                  + ("" if first else "; no divergence") + "\n")
        # The first inf/nan is named first: it is what turns a loss into nan.
        lines = [("first op with inf/nan in its output", nonfinite),
                 ("first diverging op", first)]
        if nonfinite is not None and nonfinite["order"] == first["order"]:
            lines = [("first diverging op, the first with inf/nan in its output", first)]
        for label, op in lines:
            if op is not None:
                inputs = {True: "; its inputs agree", False: "; its inputs differ too",
                          None: ""}[op["inputs_agree"]]
                out.write(f"  {label}: {op['op_name']} ({op['op_type']}), "
                          f"{op['figures']}{inputs}\n")
    if work_dir is not None:
        result.write_json(os.path.join(work_dir, "comparison.json"))
        write_atomic(os.path.join(work_dir, "comparison.html"), render_comparison_html(result))
    return diverged


def add_dump_command(subparsers):
    """``npu-adapter dump show DIR`` and ``npu-adapter dump compare GOLDEN_DIR OTHER_DIR``."""
    parser = subparsers.add_parser(
        "dump", parents=[common_parent()], help="read and compare data dumps",
        description="Read data dumps written by npu-adapter (enable_dump) or by an Ascend "
                    "device, and compare two of them op by op.")
    commands = parser.add_subparsers(title="dump commands", metavar="ACTION")
    show = commands.add_parser(
        "show", parents=[common_parent()], help="what was dumped, per iteration and op",
        description="List every dump file under DIR by iteration, model and op, with each "
                    "tensor's type, shape and format (statistics files: their values).")
    show.add_argument("dir", metavar="DIR", help="dump directory (dump_path or below)")
    show.add_argument("--step", type=int, action="append", help="only this iteration "
                      "(repeatable)")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.set_defaults(handler=_run_show)
    compare = commands.add_parser(
        "compare", parents=[common_parent()], help="compare a golden dump with another one",
        description="Match the ops of two dumps by name in each iteration and compare every "
                    "tensor: cosine similarity, max absolute and relative error; report the "
                    "first diverging op in topological order. With --out, write "
                    "comparison.json and comparison.html (sortable table, error-by-op chart).")
    compare.add_argument("golden", metavar="GOLDEN_DIR", help="the reference dump")
    compare.add_argument("other", metavar="OTHER_DIR", help="the dump to check")
    compare.add_argument("--out", metavar="DIR", help="write comparison.json and .html here")
    compare.add_argument("--step", type=int, action="append",
                         help="only this iteration (repeatable; default: all common ones)")
    compare.add_argument("--min-cosine", type=float, default=0.99,
                         help="a tensor diverges below this cosine similarity (default 0.99)")
    compare.add_argument("--rtol", type=float, default=1e-3,
                         help="relative tolerance on the max abs error (default 1e-3)")
    compare.add_argument("--atol", type=float, default=1e-5,
                         help="absolute tolerance on the max abs error (default 1e-5)")
    compare.add_argument("--check", action="store_true",
                         help=f"exit {EXIT_DIVERGED} when an op diverges")
    compare.set_defaults(handler=_run_compare)
    parser.set_defaults(handler=lambda args: (parser.print_help(sys.stderr), 2)[1])
    return parser
