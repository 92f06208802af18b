"""``npu-adapter numerics``: find the first tensors that overflow float16 or drift under the
NPU's precision, and the option that fixes them."""

import json
import os
import sys
import warnings

from npu_adapter.cli.common import EXIT_OK, PROG, common_parent, config_from_args
from npu_adapter.cli.feeds import check_feeds, load_feeds
from npu_adapter.cli.outputs import OutputDirectory
from npu_adapter.errors import UsageError

__all__ = ["add_numerics_command"]


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _run_numerics(args):
    # --out is checked (its temporary sibling created) before any work; numerics.json and
    # numerics.html appear in it together, when both are written.
    with OutputDirectory(args.out) as work_dir:
        report, data = _numerics(args)
        _write(os.path.join(work_dir, "numerics.json"),
               json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        from npu_adapter.precision.numerics_html import render_numerics_html

        _write(os.path.join(work_dir, "numerics.html"), render_numerics_html(data))
    page = os.path.join(args.out, "numerics.html")
    out = sys.stdout
    summary = data["summary"]
    out.write(f"{page}\n  {summary['tensors']} tensors compared under {data['setting']}: "
              f"{summary['issues']} issue(s), {len(summary['first_issues'])} first\n")
    for issue in report.first_issues:
        c = issue.comparison
        out.write(f"  first {c.status}: {c.tensor} ({c.op}, computes in {c.dtype}: {c.reason}): "
                  f"{c.summary()}\n")
        if issue.fix.get("text"):
            out.write(f"    fix: {issue.fix['text']}\n")
    if not report.consistent:
        out.write(f"  warning: {report.consistency_note}\n")
    return EXIT_OK


def _sinks(graph_def):
    """The first output of every node nothing consumes (what a frozen model computes)."""
    consumed = {i.lstrip("^").split(":")[0] for n in graph_def.node for i in n.input}
    return [f"{n.name}:0" for n in graph_def.node
            if n.name not in consumed and n.op not in ("NoOp", "Placeholder", "Assert", "Const")]


def _numerics(args):
    from npu_adapter import model_io

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = config_from_args(args)
    for warning in caught:
        sys.stderr.write(f"{PROG}: warning: {warning.message}\n")
    feeds = load_feeds(args.feed_value, args.feeds)
    model = model_io.load_model(args.model, signature=args.signature,
                                tags=args.tags.split(",") if args.tags else None)
    fetches = args.fetch or model.fetches or None
    if not fetches:
        sinks = _sinks(model.graph_def)
        example = f", e.g. --fetch {' '.join(sinks[:3])}" if sinks else ""
        raise UsageError(f"--fetch is needed: the model has no signature naming its outputs; "
                         f"name the tensors to compute{example}")
    check_feeds(model.graph_def, list(fetches), feeds)
    feeds = {feed.tensor: feed.array for feed in feeds}
    from npu_adapter.precision.numerics import find_numeric_issues

    backend = args.backend or config.get("npu_adapter_backend") or "cpu"
    report = find_numeric_issues(model.graph_def, config, feeds=feeds, fetches=list(fetches),
                                 max_relative_error=args.max_relative_error,
                                 min_cosine=args.min_cosine, backend=backend,
                                 model_name=model.name)
    return report, report.to_json()


def add_numerics_command(subparsers):
    """``npu-adapter numerics MODEL --feed NAME=FILE.npy ... [--option k=v ...] --out DIR``."""
    parser = subparsers.add_parser(
        "numerics", parents=[common_parent()],
        help="find the first tensors that overflow float16 or drift under the NPU's precision",
        description="Run MODEL twice on the CPU, in float32 and with the dtypes the NPU would "
                    "use under the precision options (precision_mode, modify_mixlist, "
                    "customize_dtypes, ...), compare every device tensor, and list in "
                    "topological order the first ones that overflow float16 (inf/nan) or drift "
                    "beyond the thresholds, with the option that keeps their op in float32. "
                    "Writes DIR/numerics.json and DIR/numerics.html.")
    parser.add_argument("model", metavar="MODEL", help="model file or SavedModel directory")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--feed", dest="feed_value", action="append", metavar="NAME=FILE.npy",
                        help="value of an input tensor (repeatable)")
    parser.add_argument("--feeds", metavar="FILE.npz", help="input values keyed by tensor name")
    parser.add_argument("--fetch", action="extend", nargs="+", metavar="NAME",
                        help="tensor to compute (default: the signature's outputs)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", metavar="FILE.json", help="JSON object of NpuOptimizer "
                        "options")
    source.add_argument("--config-proto", metavar="FILE.pbtxt",
                        help="text tf.compat.v1.ConfigProto with an NpuOptimizer entry")
    parser.add_argument("--option", action="append", metavar="KEY=VALUE",
                        help="set an option (repeatable), e.g. precision_mode=allow_mix_precision")
    parser.add_argument("--backend", help="backend whose placement is emulated (default cpu)")
    parser.add_argument("--max-relative-error", type=float, default=0.05, metavar="X",
                        help="drift threshold: max |emulated - float32| / max |float32| "
                             "(default 0.05)")
    parser.add_argument("--min-cosine", type=float, default=0.999, metavar="X",
                        help="drift threshold on the cosine similarity (default 0.999)")
    parser.add_argument("--signature", help="SignatureDef key of a SavedModel or .meta")
    parser.add_argument("--tags", help="SavedModel tag set, comma-separated (default: serve)")
    parser.set_defaults(handler=_run_numerics)
    return parser
