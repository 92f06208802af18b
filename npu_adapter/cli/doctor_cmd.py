"""``npu-adapter doctor``: what of CANN this machine has, and what the ``cann`` backend lacks.

Reports the toolkit home, ``atc``, pyACL (``acl``), the operator package (``ASCEND_OPP_PATH``
and its layout), the op-support list the partitioner would use, the SoC (``soc_config`` or
``$SOC_VERSION``) and the device; ``--probe-device`` opens the device with pyACL
(``acl.init``, ``set_device``, ``reset_device``, ``finalize``), which nothing else here does.
Exit status 0 when the ``cann`` backend can run, 2 when something it needs is missing.
"""

import json
import sys

from npu_adapter.cli.common import EXIT_INVALID, EXIT_OK, common_parent, config_from_args
from npu_adapter.cli.soc_versions import soc_problem

__all__ = ["add_doctor_command", "collect_report"]


def _op_list_entry(toolkit):
    from npu_adapter.op_support import load_op_support_list

    ops = load_op_support_list(toolkit.opp_path) if toolkit.opp_path else \
        load_op_support_list("")
    where = ", ".join(ops.sources) if ops.sources else f"the {ops.origin} default list"
    return {"ops": len(ops), "gray": len(ops.gray_names()), "origin": ops.origin,
            "sources": list(ops.sources), "text": f"{len(ops)} op types "
                                                  f"({len(ops.gray_names())} gray) from {where}"}


def _probe_device(toolkit, device_id):
    """Open ``device_id`` with pyACL and close it again; returns ``(ok, text)``."""
    from npu_adapter.backends.cann.errors import AclError, CannNotAvailableError, acl_error_name
    from npu_adapter.backends.cann.toolkit import import_acl

    try:
        acl = import_acl(toolkit)
    except CannNotAvailableError as exc:
        return False, exc.reason  # str(exc) ends with "run `npu-adapter doctor`"
    ret = acl.init()
    if ret != 0:
        return False, f"acl.init returned {ret} {acl_error_name(ret)}"
    try:
        ret = acl.rt.set_device(device_id)
        if ret != 0:
            return False, f"acl.rt.set_device({device_id}) returned {ret} {acl_error_name(ret)}"
        ret = acl.rt.reset_device(device_id)
        if ret != 0:
            raise AclError("acl.rt.reset_device", ret)
        return True, f"device {device_id} opens"
    finally:
        acl.finalize()


def collect_report(config=None, *, probe_device=False, environ=None):
    """The doctor's findings as a dict (``ready``, ``missing`` and one entry per item)."""
    import os

    from npu_adapter.backends.cann.toolkit import detect

    env = os.environ if environ is None else environ
    toolkit = detect(config, env)
    device = getattr(config, "session_device_id", -1) if config is not None else -1
    if device is None or device < 0:
        text = env.get("ASCEND_DEVICE_ID", "").strip()
        device = int(text) if text.isdigit() else 0
    items = {
        "toolkit home": (toolkit.home, toolkit.home_source,
                         "ASCEND_TOOLKIT_HOME unset and no default install found"),
        "atc": (toolkit.atc, toolkit.atc_source, "not on PATH nor in the toolkit home"),
        "pyACL (acl)": (toolkit.acl, toolkit.acl_source, "`import acl` would fail"),
        "opp path": (toolkit.opp_path and f"{toolkit.opp_path} ({toolkit.opp_layout} layout)",
                     toolkit.opp_source, "ASCEND_OPP_PATH unset: the bundled op list is used"),
        "soc": (toolkit.soc, toolkit.soc_source,
                "set the soc_config option or SOC_VERSION (e.g. Ascend310P3)"),
    }
    required = ("atc", "pyACL (acl)", "soc")
    report = {}
    for name, (value, source, hint) in items.items():
        report[name] = {"found": bool(value), "value": value, "source": source, "hint": hint,
                        "required": name in required}
    problem = soc_problem(toolkit.soc, toolkit.home) if toolkit.soc else None
    if problem:
        report["soc"].update(found=False, invalid=True,
                             hint=f"{toolkit.soc} ({toolkit.soc_source}) is not a SoC version "
                                  f"CANN knows; {problem}")
    report["op list"] = _op_list_entry(toolkit)
    if probe_device:
        ok, text = _probe_device(toolkit, device)
        report["device"] = {"found": ok, "value": text, "source": None, "hint": text}
    else:
        report["device"] = {"found": None, "value": f"device {device} (not probed; "
                                                    "--probe-device opens it)",
                            "source": None, "hint": ""}
    missing = [name for name in required if not report[name]["found"]]
    if probe_device and not report["device"]["found"]:
        missing.append("device")
    report["ready"] = not missing
    report["missing"] = missing
    return report


def _print(report, out):
    out.write("npu-adapter doctor: CANN\n")
    for name, entry in report.items():
        if name in ("ready", "missing"):
            continue
        if name == "op list":
            out.write(f"  {name:<14} {entry['text']}\n")
            continue
        if entry["found"] is False:
            label = "INVALID" if entry.get("invalid") else \
                "MISSING" if entry.get("required", True) else "not set"
            out.write(f"  {name:<14} {label}: {entry['hint']}\n")
        else:
            source = f" ({entry['source']})" if entry["source"] else ""
            out.write(f"  {name:<14} {entry['value']}{source}\n")
    if report["ready"]:
        out.write("  cann backend   ready\n")
    else:
        invalid = [name for name in report["missing"] if report[name].get("invalid")]
        missing = [name for name in report["missing"] if name not in invalid]
        problems = "; ".join(f"{what} {', '.join(names)}" for what, names in
                             (("missing", missing), ("invalid", invalid)) if names)
        out.write(f"  cann backend   NOT READY: {problems}; install the CANN toolkit and source "
                  "its set_env.sh\n")


def _run_doctor(args):
    config = config_from_args(args)
    report = collect_report(config, probe_device=args.probe_device)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=1, sort_keys=True) + "\n")
    else:
        _print(report, sys.stdout)
    return EXIT_OK if report["ready"] else EXIT_INVALID


def add_doctor_command(subparsers):
    """``npu-adapter doctor [--probe-device] [--json] [--option k=v ...]``."""
    parser = subparsers.add_parser(
        "doctor", parents=[common_parent()],
        help="report what of CANN (atc, pyACL, operator package, SoC) is found",
        description="Report what the cann backend finds of CANN: toolkit home, atc, pyACL, the "
                    "operator package and its op list, the SoC and the device. Exit 0 when the "
                    "cann backend can run, 2 when something it needs is missing.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--config", metavar="FILE.json", help="JSON object of options")
    group.add_argument("--config-proto", metavar="FILE.pbtxt",
                       help="text ConfigProto with an NpuOptimizer entry")
    parser.add_argument("--option", action="append", metavar="KEY=VALUE",
                        help="set an option (soc_config, session_device_id, ...)")
    parser.add_argument("--probe-device", action="store_true",
                        help="open the device with pyACL (acl.init, set_device) and close it")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=_run_doctor)
