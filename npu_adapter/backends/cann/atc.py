"""ATC: the flags a session's options become, running ``atc``, and reading its failures.

:data:`OPTION_FLAGS` is the table from ``NpuOptimizer`` options to ATC flags (the README and
``docs/cann.md`` show it). An option is passed only when the session sets it explicitly, so
ATC's own defaults apply otherwise (as with the original, which leaves unset options to GE).
Files named by options (``modify_mixlist``, ``fusion_switch_file``, ...) are passed as absolute
paths, because ATC runs in a scratch directory, and their contents are part of the
compile-cache key, so editing one recompiles.

Per cluster the backend adds what the cluster decides: ``--input_shape`` (every input, by its
Placeholder name), for gears ``--dynamic_dims`` and ``--input_format=ND``, ``--out_nodes`` (the
output order), and ``--keep_dtype`` (a file listing the ``_keep_dtype`` nodes). From the
environment: ``--allow_hf32`` from ``ENABLE_HF32_EXECUTION`` and ``--log`` from
``ASCEND_GLOBAL_LOG_LEVEL``.

``atc`` succeeds when it exits with 0 and the ``.om`` exists; it fails with a non-zero status,
after the line ``ATC run failed, ...`` and ``E#####: text`` lines. :func:`run_atc` raises
:class:`~npu_adapter.backends.cann.errors.AtcError` carrying the codes and text.
"""

import dataclasses
import hashlib
import os
import re
import subprocess

from npu_adapter.backends.cann.errors import AtcError, CannConfigError

__all__ = [
    "ATC_FAILURE_LINE",
    "ATC_SUCCESS_LINE",
    "AtcOptions",
    "FlagRule",
    "OPTION_FLAGS",
    "atc_options_from_config",
    "build_atc_command",
    "format_input_shape",
    "parse_atc_failure",
    "require_soc",
    "run_atc",
]

ATC_SUCCESS_LINE = "ATC run success, welcome to the next use."
ATC_FAILURE_LINE = ("ATC run failed, Please check the detail log, Try 'atc --help' for more "
                    "information")
_CODE_LINE = re.compile(r"^\s*(E[0-9A-Z]\d{4})\s*:\s?(.*)$")


@dataclasses.dataclass(frozen=True)
class FlagRule:
    """One option → flag row.

    ``kind``: ``value`` (the text as given), ``int``, ``bool01`` (a bool passed as 1/0),
    ``file`` (an existing file: absolute path, content hashed into the cache key) or ``dir``
    (a directory: absolute path).
    """

    option: str
    flag: str
    kind: str = "value"


OPTION_FLAGS = (
    FlagRule("precision_mode", "precision_mode"),
    FlagRule("precision_mode_v2", "precision_mode_v2"),
    FlagRule("modify_mixlist", "modify_mixlist", "file"),
    FlagRule("customize_dtypes", "customize_dtypes", "file"),
    FlagRule("op_select_implmode", "op_select_implmode"),
    FlagRule("optypelist_for_implmode", "optypelist_for_implmode"),
    FlagRule("op_precision_mode", "op_precision_mode", "file"),
    FlagRule("fusion_switch_file", "fusion_switch_file", "file"),
    FlagRule("enable_scope_fusion_passes", "enable_scope_fusion_passes"),
    FlagRule("buffer_optimize", "buffer_optimize"),
    FlagRule("enable_small_channel", "enable_small_channel", "int"),
    FlagRule("deterministic", "deterministic", "int"),
    FlagRule("oo_level", "oo_level"),
    FlagRule("insert_op_file", "insert_op_conf", "file"),
    FlagRule("aicore_num", "aicore_num"),
    FlagRule("atomic_clean_policy", "atomic_clean_policy", "int"),
    FlagRule("external_weight", "external_weight", "bool01"),
    FlagRule("export_compile_stat", "export_compile_stat", "int"),
    FlagRule("op_debug_level", "op_debug_level", "int"),
    FlagRule("op_debug_config", "op_debug_config", "file"),
    FlagRule("debug_dir", "debug_dir", "dir"),
    FlagRule("op_compiler_cache_mode", "op_compiler_cache_mode"),
    FlagRule("op_compiler_cache_dir", "op_compiler_cache_dir", "dir"),
)
"""Options passed to ATC, in the order their flags are written."""

# ASCEND_GLOBAL_LOG_LEVEL (0 debug .. 4 null) → --log.
_LOG_LEVELS = {"0": "debug", "1": "info", "2": "warning", "3": "error", "4": "null"}
_HF32 = {"1": "true", "true": "true", "0": "false", "false": "false"}


def _file_digest(option, path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as exc:
        raise CannConfigError(option, path, "a readable file (passed to ATC)",
                              detail=exc.strerror or str(exc)) from None


@dataclasses.dataclass(frozen=True)
class AtcOptions:
    """What of a session's options and environment goes into every ATC command.

    Attributes:
        soc_version: the ``--soc_version`` value.
        flags: ``(flag, value)`` pairs from :data:`OPTION_FLAGS` and the environment, in order.
        file_digests: ``(flag, sha256 of the file)`` for the flags naming files.
    """

    soc_version: str
    flags: tuple = ()
    file_digests: tuple = ()

    def cache_key_parts(self):
        """What of these options changes a compiled model (paths replaced by contents)."""
        files = dict(self.file_digests)
        return {"soc_version": self.soc_version,
                "flags": [[flag, files.get(flag, value)] for flag, value in self.flags]}


def require_soc(soc_version):
    """``soc_version``, or :class:`CannConfigError` saying how to set it when it is empty."""
    if not soc_version:
        raise CannConfigError(
            "soc_config", "", "the SoC the model is compiled for, e.g. 'Ascend310P3' or "
            "'Ascend910B1' (the Name of `npu-smi info` prefixed with 'Ascend'); or set the "
            "SOC_VERSION environment variable")
    return soc_version


def atc_options_from_config(config, environ=None, soc_version=None):
    """The :class:`AtcOptions` of ``config`` (an ``NpuConfig``).

    ``soc_version`` defaults to the ``soc_config`` option, then ``$SOC_VERSION``; it may stay
    empty here (a rewrite needs no SoC) — compiling then raises (:func:`require_soc`).

    Raises:
        CannConfigError: a file option names no readable file.
    """
    env = os.environ if environ is None else environ
    soc = soc_version or getattr(config, "soc_config", "") or env.get("SOC_VERSION", "")
    flags, digests = [], []
    for rule in OPTION_FLAGS:
        if not config.is_set(rule.option):
            continue
        value = getattr(config, rule.option)
        if value is None or (isinstance(value, str) and not value):
            continue
        if rule.kind == "int":
            text = str(int(value))
        elif rule.kind == "bool01":
            text = "1" if value else "0"
        elif rule.kind in ("file", "dir"):
            text = os.path.abspath(os.path.expanduser(value))
            if rule.kind == "file":
                if not os.path.isfile(text):
                    raise CannConfigError(rule.option, value, "an existing file (passed to ATC "
                                          f"as --{rule.flag})", detail=f"{text} is not a file")
                digests.append((rule.flag, _file_digest(rule.option, text)))
        else:
            text = str(value)
        flags.append((rule.flag, text))
    hf32 = env.get("ENABLE_HF32_EXECUTION", "").strip().lower()
    if hf32 in _HF32:
        flags.append(("allow_hf32", _HF32[hf32]))
    level = env.get("ASCEND_GLOBAL_LOG_LEVEL", "").strip()
    if level in _LOG_LEVELS:
        flags.append(("log", _LOG_LEVELS[level]))
    return AtcOptions(soc_version=soc, flags=tuple(flags), file_digests=tuple(digests))


def format_input_shape(inputs):
    """``--input_shape`` text: ``[(name, dims), ...]`` → ``"a:1,-1;b:"`` (a scalar is
    ``name:``)."""
    return ";".join(f"{name}:{','.join(str(int(d)) for d in dims)}" for name, dims in inputs)


def build_atc_command(atc, model, output, options, *, inputs, gears=None, out_nodes=(),
                      keep_dtype_file=None):
    """The argument list of one ATC run.

    Args:
        atc: path of ``atc``.
        model: the frozen ``.pb``.
        output: output path without ``.om``.
        options: :class:`AtcOptions`.
        inputs: ``[(placeholder name, dims)]`` for every model input, ``-1`` on gear axes.
        gears: for a multi-gear model, one tuple per gear with the values of the ``-1`` axes
            in ``inputs`` order; None for a static model.
        out_nodes: output tensors ``"node:port"``, in model output order.
        keep_dtype_file: the ``--keep_dtype`` file, or None.
    """
    command = [atc, "--mode=0", "--framework=3", f"--model={model}", f"--output={output}",
               f"--soc_version={require_soc(options.soc_version)}"]
    if inputs:
        command.append(f"--input_shape={format_input_shape(inputs)}")
    if gears:
        command.append("--input_format=ND")
        command.append("--dynamic_dims=" + ";".join(",".join(str(int(v)) for v in gear)
                                                     for gear in gears))
    if out_nodes:
        command.append("--out_nodes=" + ";".join(out_nodes))
    command.extend(f"--{flag}={value}" for flag, value in options.flags)
    if keep_dtype_file:
        command.append(f"--keep_dtype={keep_dtype_file}")
    return command


def parse_atc_failure(output):
    """``(codes, text)`` from ATC's output: the ``E#####`` codes, in order, and the error text
    (what follows the failure line, or every code line when that line is missing)."""
    lines = output.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.strip().startswith("ATC run failed"):
            start = i + 1
    body = lines[start:] if start is not None else lines
    codes = []
    for line in body:
        match = _CODE_LINE.match(line)
        if match and match.group(1) not in codes:
            codes.append(match.group(1))
    if start is not None:
        text = "\n".join(line.rstrip() for line in body).strip()
    else:
        text = "\n".join(line.strip() for line in body if _CODE_LINE.match(line))
    return codes, text


def _summary(text, limit=600):
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def run_atc(command, *, cwd, env, om_path, what, timeout=None):
    """Run ``command`` in ``cwd`` with ``env``; return ATC's output.

    Raises:
        AtcError: non-zero exit status, no ``om_path`` written, a timeout, or ``atc`` could not
            be started. ``what`` names the model in the message (``"cluster 'GeOp1_0'"``).
    """
    try:
        proc = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        output = (exc.output or b"").decode("utf-8", "replace")
        raise AtcError(f"atc did not finish within {timeout} s for {what}", command=command,
                       output=output) from None
    except OSError as exc:
        raise AtcError(f"atc could not be started for {what}: {exc.strerror or exc}",
                       command=command) from None
    output = proc.stdout.decode("utf-8", "replace")
    if proc.returncode == 0 and os.path.isfile(om_path):
        return output
    codes, text = parse_atc_failure(output)
    if proc.returncode == 0:
        message = (f"atc exited with status 0 but wrote no model {os.path.basename(om_path)} "
                   f"for {what}")
    elif proc.returncode < 0:
        message = f"atc was killed by signal {-proc.returncode} while compiling {what}"
    else:
        message = f"atc failed with exit status {proc.returncode} for {what}"
    if codes:
        message += f": {_summary(text)}"
    else:
        tail = _summary("\n".join(output.splitlines()[-8:])) if output.strip() else "no output"
        message += f" (no error code printed; last output: {tail})"
    raise AtcError(message, code=codes[0] if codes else None, codes=codes, text=text,
                   exit_status=proc.returncode, command=command, output=output)
