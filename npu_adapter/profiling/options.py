"""``profiling_options``: the JSON object that says what is profiled and where, validated.

The keys and their values follow the Ascend profiling documentation (the TF Adapter's
``profiling_options`` session option and the ``PROFILING_OPTIONS`` environment variable):

===========================  ================================================================
``output``                    result directory (relative to the working directory); default ``./``
``storage_limit``             ``"<n>MB"`` with n in [200, 4294967296]
``training_trace``            ``on``/``off``: the iteration trace (fp_point → bp_point)
``task_trace``, ``aicpu``     ``on``/``off``; any other value counts as ``off`` (as documented)
``hccl``, ``l2``, ``msproftx``, ``runtime_api``, ``op_trace``   ``on``/``off``
``task_time``                 ``on``/``off``/``l0``/``l1``
``fp_point``, ``bp_point``    op names (empty: found automatically)
``aic_metrics``               ArithmeticUtilization, PipeUtilization, Memory, MemoryL0, MemoryUB,
                              ResourceConflictRatio, L2Cache, or ``Custom:<r1>,...`` with at most
                              8 registers in [0x1, 0x6E] (hex or decimal)
``*_freq``                    integers in the documented ranges (see :data:`FREQUENCIES`)
``llc_profiling``             read, write, capacity or bandwidth
``host_sys``, ``host_sys_usage``  comma-separated cpu/mem
===========================  ================================================================

Older CANN releases took a plain string instead: the switches ``training_trace``,
``task_trace``, ``task_time`` and ``op_trace`` joined by ``:`` (``"task_trace"``,
``"training_trace:task_trace"``; the TF Adapter's ``util.check_profiling_options`` builds it).
That form is deprecated: :func:`normalize_profiling_options` reads it as the JSON object that
turns the same switches on (``{"output": "./", "task_trace": "on"}``) and warns once.

``instr_profiling_freq`` cannot be combined with ``training_trace``, ``task_trace``, ``hccl``,
``aicpu``, ``fp_point``, ``bp_point``, ``aic_metrics``, ``l2``, ``task_time`` or ``runtime_api``.
Unknown keys are warned about once and ignored. Every other problem raises
:class:`~npu_adapter.errors.NpuConfigError` on ``profiling_options`` naming the key.

On the CPU reference ``output``, ``training_trace``, ``fp_point`` and ``bp_point`` shape what is
written; the hardware collectors (``aic_metrics``, ``l2``, frequencies, ...) are validated and
recorded in the profile's ``README.txt``, since a CPU has no such counters.
"""

import dataclasses
import json
import re

from npu_adapter.config.warnings import warn_once
from npu_adapter.errors import NpuConfigError, user_text

__all__ = ["AIC_METRICS", "FREQUENCIES", "LEGACY_SWITCHES", "ProfilingOptions",
           "normalize_profiling_options", "parse_profiling_options"]

OPTION = "profiling_options"

AIC_METRICS = ("ArithmeticUtilization", "PipeUtilization", "Memory", "MemoryL0", "MemoryUB",
               "ResourceConflictRatio", "L2Cache")
FREQUENCIES = {
    "sys_hardware_mem_freq": (1, 100),
    "sys_io_sampling_freq": (1, 100),
    "sys_interconnection_freq": (1, 50),
    "dvpp_freq": (1, 100),
    "instr_profiling_freq": (300, 30000),
    "host_sys_usage_freq": (1, 50),
}
_SWITCHES = ("training_trace", "hccl", "l2", "msproftx", "runtime_api", "op_trace")
_LENIENT_SWITCHES = ("task_trace", "aicpu")  # documented: anything but on/off means off
_EXCLUSIVE_WITH_INSTR = ("training_trace", "task_trace", "hccl", "aicpu", "fp_point", "bp_point",
                         "aic_metrics", "l2", "task_time", "runtime_api")
_KNOWN = frozenset({"output", "storage_limit", "fp_point", "bp_point", "aic_metrics",
                    "task_time", "llc_profiling", "host_sys", "host_sys_usage",
                    *_SWITCHES, *_LENIENT_SWITCHES, *FREQUENCIES})
LEGACY_SWITCHES = ("training_trace", "task_trace", "task_time", "op_trace")
"""The switches of the older plain-string form (see the module doc)."""
_STORAGE_RE = re.compile(r"(\d+)MB\Z")
_STORAGE_RANGE = (200, 4294967296)
_CUSTOM_PREFIX = "Custom:"


@dataclasses.dataclass(frozen=True)
class ProfilingOptions:
    """The validated options. ``values`` holds every known key as given (normalised strings)."""

    output: str = "./"
    training_trace: bool = False
    task_trace: bool = False
    fp_point: str = ""
    bp_point: str = ""
    aic_metrics: str = "PipeUtilization"
    storage_limit_mb: object = None
    values: tuple = ()

    def as_dict(self):
        """The given keys and values."""
        return dict(self.values)


def _error(text, key, value, allowed):
    return NpuConfigError(OPTION, text, allowed, detail=f"key {key!r} is {user_text(value)}")


def _string(text, key, value):
    if not isinstance(value, str):
        raise _error(text, key, value, f"{key} must be a JSON string")
    return value


def _switch(text, key, value, choices=("on", "off")):
    value = _string(text, key, value)
    if value not in choices:
        raise _error(text, key, value, f"{key} must be one of " + ", ".join(choices))
    return value


def _frequency(text, key, value):
    low, high = FREQUENCIES[key]
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise _error(text, key, value, f"{key} must be an integer in [{low}, {high}]")
    if not low <= number <= high:
        raise _error(text, key, value, f"{key} must be an integer in [{low}, {high}]")
    return str(number)


def _aic_metrics(text, value):
    value = _string(text, "aic_metrics", value)
    if value in AIC_METRICS:
        return value
    if value.startswith(_CUSTOM_PREFIX):
        registers = [r.strip() for r in value[len(_CUSTOM_PREFIX):].split(",")]
        allowed = "Custom: followed by 1 to 8 comma-separated registers in [0x1, 0x6E]"
        if not registers or registers == [""] or len(registers) > 8:
            raise _error(text, "aic_metrics", value, allowed)
        for register in registers:
            try:
                number = int(register, 16) if register.lower().startswith("0x") else int(
                    register)
            except ValueError:
                raise _error(text, "aic_metrics", value, allowed) from None
            if not 0x1 <= number <= 0x6E:
                raise _error(text, "aic_metrics", value, allowed)
        return value
    raise _error(text, "aic_metrics", value,
                 "aic_metrics must be one of " + ", ".join(AIC_METRICS) + " or Custom:<registers>")


def _storage_limit(text, value):
    value = _string(text, "storage_limit", value)
    match = _STORAGE_RE.match(value)
    low, high = _STORAGE_RANGE
    if not match or not low <= int(match.group(1)) <= high:
        raise _error(text, "storage_limit", value,
                     f"storage_limit must be '<n>MB' with n in [{low}, {high}]")
    return int(match.group(1))


def _cpu_mem(text, key, value):
    value = _string(text, key, value)
    items = [item.strip() for item in value.split(",")]
    if not items or any(item not in ("cpu", "mem") for item in items):
        raise _error(text, key, value, f"{key} must be cpu, mem or cpu,mem")
    return value


def normalize_profiling_options(text):
    """``text`` in the JSON form: the older plain-string form (``"training_trace:task_trace"``,
    see the module doc) becomes the JSON object with those switches on and output ``./``, with
    a deprecation warning (once per text); any other text is returned as it is."""
    if not isinstance(text, str):
        return text
    switches = [switch.strip() for switch in text.split(":")]
    if not all(switch in LEGACY_SWITCHES for switch in switches):
        return text
    converted = json.dumps({"output": "./", **dict.fromkeys(switches, "on")})
    warn_once(("legacy-profiling-options", text),
              f"profiling_options {text!r} is the plain-string form of older CANN releases, "
              f"which is deprecated; it is read as {converted}: give that JSON object instead")
    return converted


def parse_profiling_options(text):
    """Validate ``profiling_options`` text (JSON, or the older plain-string form, see
    :func:`normalize_profiling_options`); return :class:`ProfilingOptions`.

    Raises:
        NpuConfigError: not a JSON object, or a key with a value the documentation does not
            allow (the message names the key and what is allowed).
    """
    text = normalize_profiling_options(text)
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise NpuConfigError(OPTION, text, "a JSON object such as "
                             '{"output":"/tmp/profiling","training_trace":"on"}',
                             detail=str(exc)) from None
    if not isinstance(data, dict):
        raise NpuConfigError(OPTION, text, "a JSON object",
                             detail=f"got a JSON {type(data).__name__}")
    values = {}
    for key in sorted(data):
        value = data[key]
        if value is None or isinstance(value, (list, dict)):
            # Every value of the original's options is a string, number or switch.
            raise NpuConfigError(OPTION, text, "string, number or boolean values",
                                 detail=f"the value of {key!r} is a JSON "
                                        f"{'null' if value is None else type(value).__name__}")
        if key not in _KNOWN:
            warn_once(("unknown-profiling-option", key),
                      f"profiling_options: unknown key {key!r} is ignored")
            continue
        if key in _SWITCHES:
            values[key] = _switch(text, key, value)
        elif key in _LENIENT_SWITCHES:
            values[key] = "on" if _string(text, key, value) == "on" else "off"
        elif key == "task_time":
            values[key] = _switch(text, key, value, ("on", "off", "l0", "l1"))
        elif key in FREQUENCIES:
            values[key] = _frequency(text, key, value)
        elif key == "aic_metrics":
            values[key] = _aic_metrics(text, value)
        elif key == "storage_limit":
            values[key] = f"{_storage_limit(text, value)}MB"
        elif key == "llc_profiling":
            values[key] = _switch(text, key, value, ("read", "write", "capacity", "bandwidth"))
        elif key in ("host_sys", "host_sys_usage"):
            values[key] = _cpu_mem(text, key, value)
        else:  # output, fp_point, bp_point
            values[key] = _string(text, key, value)
    if "output" in values and not values["output"].strip():
        raise _error(text, "output", values["output"], "output must name a directory")
    if "\0" in values.get("output", ""):
        raise _error(text, "output", values["output"], "a directory path without NUL")
    if "instr_profiling_freq" in values:
        clash = [key for key in _EXCLUSIVE_WITH_INSTR if key in values]
        if clash:
            raise NpuConfigError(OPTION, text, "instr_profiling_freq cannot be combined with "
                                 + ", ".join(_EXCLUSIVE_WITH_INSTR),
                                 detail="also given: " + ", ".join(clash))
    storage = values.get("storage_limit")
    return ProfilingOptions(
        output=values.get("output", "./"),
        training_trace=values.get("training_trace") == "on",
        task_trace=values.get("task_trace") == "on",
        fp_point=values.get("fp_point", "").strip(),
        bp_point=values.get("bp_point", "").strip(),
        aic_metrics=values.get("aic_metrics", "PipeUtilization"),
        storage_limit_mb=int(storage[:-2]) if storage else None,
        values=tuple(sorted(values.items())),
    )
