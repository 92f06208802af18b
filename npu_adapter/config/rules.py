"""Cross-option rules: checks and derived values that involve more than one option.

Each rule is a small function ``rule(view) -> dict | None`` over a read-only :class:`RuleView` of
the explicitly set options. It raises :class:`~npu_adapter.errors.NpuConfigError` naming every
option involved (joined by ``" + "``) with their values, or returns updated values: normalised
explicit values (e.g. ``dump_path`` → its realpath) or derived effective ones (e.g. ``aoe_mode``
from the environment). :func:`apply_rules` runs them in the order of :data:`RULES`.

"Set" means present in the parameter_map, as the original tests ``params.count(key)``; the
"value" of an unset option is its default.
"""

import os

from npu_adapter.config import parsers
from npu_adapter.config.options import OPTIONS_BY_NAME, PROFILING_DEFAULT_OPTIONS
from npu_adapter.config.warnings import warn_once
from npu_adapter.errors import NpuConfigError

__all__ = [
    "RULES",
    "RuleView",
    "apply_rules",
    "check_aoe_mode",
    "check_compile_dynamic_mode",
    "check_compile_hybrid_mode",
    "check_compress_weight",
    "check_dims_trio",
    "check_dims_trio_without_mix",
    "check_dump_exclusive",
    "check_dump_path",
    "check_in_out_pair_needs_mix",
    "check_lazy_recompile_iterations",
    "check_mix_single_iteration",
    "check_modify_mixlist",
    "check_option_files",
    "check_optypelist_needs_implmode",
    "check_precision_modes",
    "check_profiling_options",
    "check_variable_placement_host",
    "default_profiling_options",
    "emulate_precision_from_environment",
]

MIXED_PRECISION_MODES = ("allow_mix_precision", "allow_mix_precision_fp16",
                         "allow_mix_precision_bf16")
MIXED_PRECISION_MODES_V2 = ("mixed_float16", "mixed_bfloat16", "mixed_hif8")
DIMS_TRIO = ("input_shape", "dynamic_dims", "dynamic_node_type")


class RuleView:
    """Read-only access to explicit option values (and the environment) for the rules."""

    def __init__(self, explicit, environ=None):
        self._explicit = dict(explicit)
        self.environ = os.environ if environ is None else environ

    def is_set(self, name):
        """True when ``name`` was given explicitly."""
        return name in self._explicit

    def value(self, name):
        """The explicit value of ``name``, else its default."""
        if name in self._explicit:
            return self._explicit[name]
        return OPTIONS_BY_NAME[name].default


def _error(names, view, allowed, detail=None, values=None):
    """An error naming every option of the combination and the value each one has."""
    if values is None:
        values = {name: view.value(name) for name in names}
    return NpuConfigError(" + ".join(names), values, allowed, detail=detail)


def check_precision_modes(view):
    """``precision_mode`` and ``precision_mode_v2`` are exclusive (original: error;
    docs/options.md, "Options that go together")."""
    if view.is_set("precision_mode") and view.is_set("precision_mode_v2"):
        raise _error(("precision_mode", "precision_mode_v2"), view,
                     "at most one of precision_mode and precision_mode_v2 (prefer _v2)")


def check_modify_mixlist(view):
    """``modify_mixlist`` needs a mixed precision mode (original: error, three messages;
    docs/options.md).

    With ``precision_mode`` set it must be allow_mix_precision(_fp16/_bf16); otherwise, with
    ``precision_mode_v2`` set it must be mixed_float16/mixed_bfloat16/mixed_hif8; with neither,
    no mixed mode is on at all.
    """
    if not view.is_set("modify_mixlist"):
        return
    if view.is_set("precision_mode"):
        if view.value("precision_mode") not in MIXED_PRECISION_MODES:
            raise _error(("modify_mixlist", "precision_mode"), view,
                         "modify_mixlist is set, so precision_mode must be one of "
                         + ", ".join(MIXED_PRECISION_MODES))
    elif view.is_set("precision_mode_v2"):
        if view.value("precision_mode_v2") not in MIXED_PRECISION_MODES_V2:
            raise _error(("modify_mixlist", "precision_mode_v2"), view,
                         "modify_mixlist is set, so precision_mode_v2 must be one of "
                         + ", ".join(MIXED_PRECISION_MODES_V2))
    else:
        raise _error(("modify_mixlist", "precision_mode", "precision_mode_v2"), view,
                     "modify_mixlist is set but no mixed precision mode is enabled: set "
                     "precision_mode to allow_mix_precision(_fp16/_bf16) or precision_mode_v2 "
                     "to mixed_float16/mixed_bfloat16/mixed_hif8")


def check_dims_trio(view):
    """``input_shape``, ``dynamic_dims`` and ``dynamic_node_type`` come all together or not at all
    (original: abort, "should use together"); when all are set they must agree (docs/options.md; see
    :func:`~npu_adapter.config.parsers.validate_dims_trio`).
    """
    given = [name for name in DIMS_TRIO if view.is_set(name)]
    if not given:
        return
    if len(given) != len(DIMS_TRIO):
        missing = [name for name in DIMS_TRIO if name not in given]
        raise _error(DIMS_TRIO, view,
                     "input_shape, dynamic_dims and dynamic_node_type should use together",
                     detail=f"missing {', '.join(missing)}",
                     values={name: view.value(name) for name in given})
    parsers.validate_dims_trio(*(view.value(name) for name in DIMS_TRIO))


def check_compile_hybrid_mode(view):
    """``compile_hybrid_mode`` (original: error; docs/options.md): with the dims trio it must be
    0 or 1, and 1 needs ``dynamic_node_type`` 1; without the trio the value 1 is an error.
    """
    if not view.is_set("compile_hybrid_mode"):
        return
    mode = view.value("compile_hybrid_mode")
    if all(view.is_set(name) for name in DIMS_TRIO):
        if mode not in (0, 1):
            raise NpuConfigError("compile_hybrid_mode", mode, "0 or 1")
        if mode == 1 and view.value("dynamic_node_type") != 1:
            raise _error(("compile_hybrid_mode", "dynamic_node_type"), view,
                         "compile_hybrid_mode 1 requires dynamic_node_type 1")
    elif mode == 1:
        raise _error(("compile_hybrid_mode",) + DIMS_TRIO, view,
                     "compile_hybrid_mode 1 requires input_shape, dynamic_dims and "
                     "dynamic_node_type", values={"compile_hybrid_mode": mode})


def check_compile_dynamic_mode(view):
    """``compile_dynamic_mode`` True cannot be combined with the dims trio (docs/options.md; an
    error at run time in the original's GeOp, which we move to configuration time). The other
    GeOp-time conflict, with ``dynamic_input``, is left to the GeOp because fetch-level
    ``set_graph_exec_config`` attributes may override the session's ``dynamic_input``.
    """
    if view.value("compile_dynamic_mode") and all(view.is_set(n) for n in DIMS_TRIO):
        raise _error(("compile_dynamic_mode", "input_shape", "dynamic_dims"), view,
                     "compile_dynamic_mode cannot be true together with the dynamic dims "
                     "(input_shape/dynamic_dims/dynamic_node_type)")


def check_dims_trio_without_mix(view):
    """Dynamic dims cannot be used in mixed computing (original: abort; docs/options.md)."""
    if view.value("input_shape") and view.value("dynamic_dims") and view.value("mix_compile_mode"):
        raise _error(("input_shape", "dynamic_dims", "mix_compile_mode"), view,
                     "dynamic config can not use with mix compile.")


def check_in_out_pair_needs_mix(view):
    """A non-empty ``in_out_pair`` requires ``mix_compile_mode`` (original: error;
    docs/options.md)."""
    if view.value("in_out_pair") and not view.value("mix_compile_mode"):
        raise _error(("in_out_pair", "mix_compile_mode"), view,
                     "mix_compile_mode must be true when use in_out_pair.")


def check_mix_single_iteration(view):
    """``mix_compile_mode`` True requires ``iterations_per_loop`` == 1 (docs/options.md: the
    Python-side NPURunConfig check, which the C++ side does not repeat; we apply it always).
    """
    if view.value("mix_compile_mode") and view.value("iterations_per_loop") != 1:
        raise _error(("mix_compile_mode", "iterations_per_loop"), view,
                     "iterations_per_loop must be 1 when mix_compile_mode is true")


def check_lazy_recompile_iterations(view):
    """``dynamic_input`` with ``lazy_recompile`` needs ``iterations_per_loop`` 1 (original: error;
    docs/options.md). The original checks after fetch-level overrides; we check the session values.
    """
    iterations = view.value("iterations_per_loop")
    if (view.value("dynamic_input")
            and view.value("dynamic_graph_execute_mode") == "lazy_recompile"
            and iterations > 1):
        raise _error(("dynamic_input", "dynamic_graph_execute_mode", "iterations_per_loop"), view,
                     "iterations_per_loop only support 1 in lazy_recompile mode. "
                     f"Current is:{iterations}")


def check_variable_placement_host(view):
    """``variable_placement`` Host requires ``mix_compile_mode`` (a constraint the product guide
    states; the original does not check it and fails later; docs/options.md).
    """
    if view.value("variable_placement") == "Host" and not view.value("mix_compile_mode"):
        raise _error(("variable_placement", "mix_compile_mode"), view,
                     "variable_placement 'Host' requires mix_compile_mode=true")


def _readable_writable_dir(option, path, detail=None):
    """Realpath of ``path`` if it is a directory we can read and write (the original's
    ``CheckPath``), else an error on ``option``."""
    allowed = "an existing directory with read and write permission"
    if not os.path.isdir(path):
        raise NpuConfigError(option, path, allowed, detail=detail or "not a directory")
    real = os.path.realpath(path)
    if not os.access(real, os.R_OK | os.W_OK):
        raise NpuConfigError(option, path, allowed, detail=detail or "no read/write permission")
    return real


def check_dump_path(view):
    """``enable_dump``/``enable_dump_debug`` require ``dump_path``, an existing directory with
    read/write access; it is stored as its realpath (original: error; docs/options.md).
    """
    if not (view.value("enable_dump") or view.value("enable_dump_debug")):
        return None
    if not view.is_set("dump_path"):
        raise _error(("enable_dump", "enable_dump_debug", "dump_path"), view,
                     "if use dump function, dump_path must be set.",
                     values={"enable_dump": view.value("enable_dump"),
                             "enable_dump_debug": view.value("enable_dump_debug")})
    return {"dump_path": _readable_writable_dir("dump_path", view.value("dump_path"))}


def check_dump_exclusive(view):
    """Data dump and overflow dump cannot both be on (the TF Adapter's session options
    documentation: ``enable_dump`` and ``enable_dump_debug`` are never both True)."""
    if view.value("enable_dump") and view.value("enable_dump_debug"):
        raise _error(("enable_dump", "enable_dump_debug"), view,
                     "at most one of enable_dump (data dump) and enable_dump_debug (overflow "
                     "detection) can be true")


def check_compress_weight(view):
    """``enable_compress_weight`` and ``compress_weight_conf`` cannot both be given (original:
    abort; docs/options.md). Like the original, presence counts, whatever the values.
    """
    if view.is_set("enable_compress_weight") and view.is_set("compress_weight_conf"):
        raise _error(("enable_compress_weight", "compress_weight_conf"), view,
                     "enable_compress_weight can not be used with compress_weight_conf; "
                     "give only one of them")


def check_optypelist_needs_implmode(view):
    """``optypelist_for_implmode`` requires ``op_select_implmode`` (original: abort;
    docs/options.md)."""
    if view.is_set("optypelist_for_implmode") and not view.is_set("op_select_implmode"):
        raise _error(("optypelist_for_implmode", "op_select_implmode"), view,
                     "when use optypelist_for_implmode, op_select_implmode must be set.",
                     values={"optypelist_for_implmode": view.value("optypelist_for_implmode")})


def check_aoe_mode(view):
    """AOE tuning (docs/options.md): unset ``aoe_mode`` falls back to env ``AOE_MODE``; the value
    must be '1', '2' or '4' (E); when tuning is on, ``work_path`` (default "./") must be a
    directory with read/write access (F) and is stored as its realpath.
    """
    if view.is_set("aoe_mode"):
        mode = view.value("aoe_mode")
        source = None
    else:
        mode = view.environ.get("AOE_MODE", "")
        source = "from environment variable AOE_MODE"
    if not mode:
        return None
    spec = OPTIONS_BY_NAME["aoe_mode"]
    if mode not in spec.choices:
        raise NpuConfigError("aoe_mode", mode, spec.allowed, detail=source)
    work_path = _readable_writable_dir(
        "work_path", view.value("work_path"),
        detail=None if view.is_set("work_path") else "default './' used because AOE is on")
    return {"aoe_mode": mode, "work_path": work_path}


def check_option_files(view):
    """The files named by ``modify_mixlist`` and ``customize_dtypes`` exist and parse (their
    formats: docs/options.md, "Files"; parsed by :mod:`npu_adapter.precision`, which uses
    them). The original leaves them
    to GE, which fails at the first compilation; we check them when the options are read, after
    the rules about which options go together, so a combination error is reported first.
    """
    # Imported only when a file is named: npu_adapter.precision imports TensorFlow, which
    # reading other options (npu-adapter options --check, doctor) does not need.
    if view.value("modify_mixlist"):
        from npu_adapter.precision.mixlist import load_mixlist

        load_mixlist(view.value("modify_mixlist"))
    if view.value("customize_dtypes"):
        from npu_adapter.precision.customize import load_customize_dtypes

        load_customize_dtypes(view.value("customize_dtypes"))


def check_profiling_options(view):
    """``profiling_options`` in the older plain-string form (``"task_trace"``) becomes its JSON
    form, with a deprecation warning (docs/profiling.md). The options are checked when
    ``profiling_mode`` is on (an error names the key and what is allowed); while it is off they
    are not used, so a value that is not valid is warned about and never stops the script.
    """
    text = view.value("profiling_options")
    if not text:
        return None
    # Imported here: the profiling package is not needed to read the other options.
    from npu_adapter.profiling.options import (
        normalize_profiling_options,
        parse_profiling_options,
    )

    normalized = normalize_profiling_options(text)
    if view.value("profiling_mode"):
        parse_profiling_options(normalized)
    else:
        try:
            parse_profiling_options(normalized)
        except NpuConfigError as exc:
            warn_once(("profiling-options-unused", text),
                      f"{exc} (profiling_mode is off, so profiling_options is not used)")
    return {"profiling_options": normalized} if normalized != text else None


def default_profiling_options(view):
    """``profiling_mode`` True with empty ``profiling_options`` uses the original's default JSON
    (docs/options.md).
    """
    if view.value("profiling_mode") and not view.value("profiling_options"):
        return {"profiling_options": PROFILING_DEFAULT_OPTIONS}
    return None


def emulate_precision_from_environment(view):
    """``npu_adapter_emulate_precision`` unset: take it from the environment variable
    ``NPU_ADAPTER_EMULATE_PRECISION`` (``off`` or ``on``), read when the config is built."""
    name = "npu_adapter_emulate_precision"
    if view.is_set(name):
        return None
    value = view.environ.get("NPU_ADAPTER_EMULATE_PRECISION", "")
    if not value:
        return None
    spec = OPTIONS_BY_NAME[name]
    if value not in spec.choices:
        raise NpuConfigError(name, value, spec.allowed,
                             detail="from environment variable NPU_ADAPTER_EMULATE_PRECISION")
    return {name: value}


RULES = (
    check_precision_modes,
    check_modify_mixlist,
    check_optypelist_needs_implmode,
    check_compress_weight,
    check_dims_trio,
    check_compile_hybrid_mode,
    check_compile_dynamic_mode,
    check_dims_trio_without_mix,
    check_mix_single_iteration,
    check_in_out_pair_needs_mix,
    check_lazy_recompile_iterations,
    check_variable_placement_host,
    check_dump_exclusive,
    check_dump_path,
    check_aoe_mode,
    check_option_files,
    check_profiling_options,
    default_profiling_options,
    emulate_precision_from_environment,
)
"""All rules, in the order they run."""


def apply_rules(explicit, environ=None):
    """Run every rule over ``explicit`` (name → value); return the values the rules set.

    ``environ`` defaults to ``os.environ``. Raises the first rule's error.
    """
    view = RuleView(explicit, environ)
    updates = {}
    for rule in RULES:
        result = rule(view)
        if result:
            updates.update(result)
    return updates
