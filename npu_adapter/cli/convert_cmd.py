"""``npu-adapter convert``: rewrite a model offline and write the rewritten GraphDef."""

import sys
import warnings

from npu_adapter.cli.common import (
    EXIT_OK,
    PROG,
    common_parent,
    config_from_args,
)
from npu_adapter.cli.convert_targets import add_target_arguments, run_conversion_target
from npu_adapter.cli.outputs import OutputFile, check_not_input

__all__ = ["add_convert_command"]


def _rewrite(args):
    from npu_adapter import model_io
    from npu_adapter.api import rewrite

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = config_from_args(args)
    for warning in caught:
        sys.stderr.write(f"{PROG}: warning: {warning.message}\n")
    model = model_io.load_model(args.model, signature=args.signature,
                                tags=args.tags.split(",") if args.tags else None)
    fetches, feeds = args.fetch, args.feed
    if fetches is None and feeds is None and args.target is None:
        fetches, feeds = model.fetches or None, model.feeds or None
    backend = args.backend or config.get("npu_adapter_backend") or "cpu"
    return rewrite(model.graph_def, config, fetches=fetches, feeds=feeds, targets=args.target,
                   backend=backend)


def _run_convert(args):
    check_not_input(args.out, args.model)
    if args.to != "pb":  # --to om / savedmodel: npu_adapter/cli/convert_targets.py
        return run_conversion_target(args)
    with OutputFile(args.out, (".pb", ".pbtxt")) as output:  # checks --out before any work
        result = _rewrite(args)
        from npu_adapter.graph.serialize import to_bytes, to_text

        output.write(to_text(result.graph_def).encode() if args.out.endswith(".pbtxt") else
                     to_bytes(result.graph_def))
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
        "convert", parents=[common_parent()],
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
    add_target_arguments(parser)
    parser.set_defaults(handler=_run_convert)
