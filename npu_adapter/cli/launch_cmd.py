"""``npu-adapter launch``: start the ranks of a distributed job on this host.

``npu-adapter launch -n N [--rank-table FILE] script.py args...`` starts N processes with the
original's rank environment (``RANK_SIZE``, ``RANK_ID``, ``DEVICE_ID``, ``RANK_TABLE_FILE``),
as ``horovodrun`` or ``torchrun`` do, and exits with the job's status; see
:mod:`npu_adapter.distributed.launcher` and ``docs/distributed.md``.
"""

import argparse
import shlex
import sys

from npu_adapter.cli.common import EXIT_OK, common_parent

__all__ = ["add_launch_command"]


def _run_launch(args):
    from npu_adapter.distributed import launcher

    specs = launcher.plan_ranks(args.nprocs, args.rank_table, args.server_id, args.base_port,
                                args.collective_timeout)
    command = launcher.build_command(args.command)
    if args.dry_run:
        addresses = launcher.cluster_addresses(specs[0])
        sys.stdout.write(f"# cluster (one worker task per rank): {', '.join(addresses)}\n")
        for spec in specs:
            variables = " ".join(f"{key}={shlex.quote(value)}"
                                 for key, value in sorted(spec.env.items()))
            sys.stdout.write(f"{variables} {shlex.join(command)}\n")
        return EXIT_OK
    return launcher.launch(specs, command, prefix=not args.no_prefix, grace=args.grace,
                           timeout=args.timeout)


def add_launch_command(subparsers):
    """Add ``launch`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "launch", parents=[common_parent()],
        help="start the ranks of a distributed training script",
        description="Start N ranks of a training script written for HCCL (npu_bridge hccl_ops, "
                    "NPUDistributedOptimizer, ...) as N processes running TensorFlow's "
                    "collectives over gRPC. Each rank gets RANK_SIZE, RANK_ID, DEVICE_ID (and "
                    "RANK_TABLE_FILE); its output lines are prefixed with [rank]. When a rank "
                    "fails the others are stopped.")
    parser.add_argument("-n", "--nprocs", type=int, required=True, metavar="N",
                        help="number of ranks to start on this host")
    parser.add_argument("--rank-table", metavar="FILE",
                        help="the Ascend rank table (server_list or group_list form); validated "
                             "before any rank starts")
    parser.add_argument("--server-id", metavar="IP",
                        help="with a multi-server rank table: the server whose ranks this "
                             "launcher starts (run one launcher per server)")
    parser.add_argument("--base-port", type=int, metavar="PORT",
                        help="derive the ranks' ports as PORT + device id (needed on several "
                             "servers; by default free ports are picked on 127.0.0.1)")
    parser.add_argument("--collective-timeout", type=float, metavar="SECONDS",
                        help="how long a collective waits for the other ranks "
                             "(NPU_ADAPTER_COLLECTIVE_TIMEOUT; default 600)")
    parser.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                        help="after a failure or a signal, how long the ranks get to stop "
                             "before SIGKILL (default 10)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="stop every rank after this long (exit code 124)")
    parser.add_argument("--no-prefix", action="store_true",
                        help="do not prefix the ranks' output lines with [rank]")
    parser.add_argument("--dry-run", action="store_true",
                        help="print each rank's environment and command instead of running")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="script.py args...",
                        help="the training script and its arguments (or -m module, or a "
                             "command)")
    parser.set_defaults(handler=_run_launch)
