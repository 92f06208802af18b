"""``npu-adapter inspect``: rewrite a model and write its per-pass graphs and placement report."""

import sys
import warnings

from npu_adapter.cli.common import (
    EXIT_OK,
    PROG,
    ProgressPrinter,
    common_parent,
    config_from_args,
)
from npu_adapter.cli.outputs import OutputDirectory

__all__ = ["add_inspect_command"]


def _run_inspect(args):
    # Written into a temporary sibling, created now (so --out is checked before any work) and
    # put in place only when complete: a run that fails half-way never leaves a tree in --out
    # that looks like a finished one.
    show = args.progress or (sys.stderr.isatty() and not args.quiet)
    say = ProgressPrinter(show and not args.quiet, getattr(args, "started", None))
    with OutputDirectory(args.out) as work_dir:
        outcome = _inspect(args, work_dir, say)
    say.done()
    return _print_summary(args, outcome)


def _inspect(args, work_dir, say):
    if "tensorflow" not in sys.modules:
        say("importing TensorFlow")
    from npu_adapter import model_io
    from npu_adapter.report import dump_graphs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = config_from_args(args)
    for warning in caught:
        sys.stderr.write(f"{PROG}: warning: {warning.message}\n")
    say(f"loading {args.model}")
    model = model_io.load_model(args.model, signature=args.signature,
                                tags=args.tags.split(",") if args.tags else None)
    say(f"loaded {model.kind}: {len(model.graph_def.node)} nodes"
        + (f", signature {model.signature!r}" if model.signature else ""))
    fetches, feeds = args.fetch, args.feed
    if fetches is None and feeds is None and args.target is None:
        fetches, feeds = model.fetches or None, model.feeds or None
    backend = args.backend or config.get("npu_adapter_backend") or "cpu"
    return dump_graphs(model, config, work_dir, fetches=fetches, feeds=feeds,
                       targets=args.target, backend=backend, run_name=args.run_name,
                       html=not args.no_html, dot=not args.no_drawings,
                       tensorboard=not args.no_tensorboard, renderer=args.renderer,
                       timings=args.timings, progress=lambda message: _stage(say, message),
                       model_name=model.name)


def _stage(say, message):
    # dump_graphs ends with its own "done in", timed from its start (after TensorFlow's import
    # and the model's load); the command's own total (ProgressPrinter.done) replaces it.
    if not message.startswith("done in "):
        say(message)


def _print_summary(args, outcome):
    import os

    out_dir = args.out
    summary = outcome.report["summary"]
    out = sys.stdout
    main_file = "report.html" if not args.no_html else "placement.json"
    out.write(f"{os.path.join(out_dir, main_file)}\n")
    out.write(f"  nodes: {summary['nodes']} ({summary['npu']} on the device in "
              f"{summary['clusters']} cluster(s), {summary['host']} on the host)\n")
    blockers = ", ".join(f"{b['reason']} {b['count']}" for b in summary["host_blockers"][:3])
    if blockers:
        out.write(f"  top host reasons: {blockers}\n")
    compile_lines = _compile_lines(outcome.report)
    for line in compile_lines:
        out.write(line)
    if outcome.report["skip_reason"]:
        out.write(f"  not rewritten: {outcome.report['skip_reason']}\n")
    out.write(f"  {len(outcome.files)} files in {out_dir}\n")
    return EXIT_OK


def _compile_lines(report):
    """Lines naming the backend's compile status per cluster (backends that record one): on
    the xla backend, compiled or kept on TensorFlow's kernels and why, for the clusters runs
    decided (with ``graph_compiler_cache_dir``, in earlier processes)."""
    records = [(c["name"], c["compile"]) for c in report["clusters"] if "compile" in c]
    if not records:
        return []
    fallbacks = [(name, rec) for name, rec in records if "reason" in rec]
    compilable = [(name, rec) for name, rec in records if "reason" not in rec]
    decided = [(name, rec) for name, rec in compilable if rec.get("decisions")]
    kept = [name for name, rec in decided
            if all(d["runs_on"] == "tensorflow" for d in rec["decisions"])]
    undecided = len(compilable) - len(decided)
    lines = [f"  backend {report['backend']}: {len(decided) - len(kept)} cluster(s) compiled, "
             f"{len(kept)} kept on TensorFlow's kernels, {undecided} not measured yet, "
             f"{len(fallbacks)} on the CPU reference\n"]
    for name, rec in decided:
        lines.extend(f"    cluster {name} ({d['executable']}): {d['why']}\n"
                     for d in rec["decisions"])
    if undecided:
        lines.append("    (a compilable cluster runs compiled or on TensorFlow's kernels as its "
                     "first runs measure; with graph_compiler_cache_dir, the decisions of "
                     "earlier runs are shown)\n")
    lines.extend(f"    {rec['detail']}\n" for _, rec in fallbacks)
    return lines


def add_inspect_command(subparsers):
    """``npu-adapter inspect MODEL [--config FILE.json|--config-proto FILE.pbtxt]
    [--option k=v ...] [--backend NAME] [--fetch NAME ...] --out DIR``."""
    parser = subparsers.add_parser(
        "inspect", parents=[common_parent()],
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
