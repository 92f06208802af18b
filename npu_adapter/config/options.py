"""The option table: one :class:`OptionSpec` per ``NpuOptimizer`` ``parameter_map`` key.

How the original reads and checks each key (AttrValue field, default, severity) and the formats
are described in ``docs/options.md``; the descriptions follow CANN's TensorFlow online-inference
and training guides (session configuration options). ``default`` is what the
original uses when the key is absent; ``None`` means "unset without a default" (the original
passes nothing on). Per-option checks live here as ``validator``; checks that involve several
options live in :mod:`npu_adapter.config.rules`.

Severity (``severity``) records how the *original* reacts to a bad value: ``"E"`` returns an error
status, ``"F"`` aborts the process (``LOG(FATAL)``), ``"W"`` warns and fixes the value. We raise
:class:`~npu_adapter.errors.NpuConfigError` for both E and F.
"""

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Tuple

from npu_adapter.config import files, parsers
from npu_adapter.config.warnings import NpuAdapterWarning, user_stacklevel
from npu_adapter.errors import NpuConfigError, user_text

__all__ = [
    "CATEGORIES",
    "INPUT_FUSION_SIZE_MAX",
    "KIND_ARTICLES",
    "KIND_FIELDS",
    "KIND_NAMES",
    "OPTION_SPECS",
    "OPTIONS_BY_NAME",
    "OUR_PREFIX",
    "PROFILING_DEFAULT_OPTIONS",
    "OptionSpec",
    "STRICT_OPTIONS_ENV",
    "suggest_option",
    "unknown_option_hint",
]

OUR_PREFIX = "npu_adapter_"
STRICT_OPTIONS_ENV = "NPU_ADAPTER_STRICT_OPTIONS"
"""Environment variable: 1 makes unknown option keys errors in every session of the process."""

KIND_NAMES = {"b": "bool", "i": "int", "s": "str", "f": "float"}
"""Option kind → Python type name."""

KIND_FIELDS = {"b": ".b", "i": ".i", "s": ".s", "f": ".f"}
"""Option kind → the AttrValue field the original reads."""

KIND_ARTICLES = {"b": "a bool", "i": "an int", "s": "a str", "f": "a float"}
"""Option kind → how an error message asks for it."""

CATEGORIES = ("partition", "dynamic_shape", "precision", "memory_runtime", "debug", "compat",
              "npu_adapter")

INPUT_FUSION_SIZE_MAX = 32 * 1024 * 1024

# What the original passes to GE when profiling_mode is on and profiling_options is empty.
PROFILING_DEFAULT_OPTIONS = (
    '{"output":"./","training_trace":"on","task_time":"on","hccl":"on","aicpu":"on",'
    '"aic_metrics":"PipeUtilization","msproftx":"off"}'
)


@dataclass(frozen=True)
class OptionSpec:
    """Everything known about one option.

    ``validator(name, value) -> value`` checks an explicitly set value and may normalise it; it is
    never applied to defaults. ``strict_kind=False`` marks the options the original reads only
    when the AttrValue has the expected field (a value of another kind is ignored, with a
    warning, instead of raising). ``stamped`` says whether :meth:`NpuConfig.to_node_attrs`
    includes the option; ``attr_name`` is the node attribute it is stamped as. ``max_bytes``
    bounds a text option's value (UTF-8 bytes; :data:`~npu_adapter.config.parsers.MAX_TEXT_BYTES`,
    :data:`~npu_adapter.config.parsers.MAX_PATH_BYTES` for paths).
    """

    name: str
    kind: str
    default: Any
    category: str
    doc: str
    allowed: str = "any value"
    severity: Optional[str] = None
    deprecated: bool = False
    deprecation_hint: str = ""
    ours: bool = False
    compat_only: bool = False
    strict_kind: bool = True
    stamped: bool = True
    attr_name: str = ""
    validator: Optional[Callable[[str, Any], Any]] = None
    choices: Optional[Tuple[Any, ...]] = None
    max_bytes: Optional[int] = None

    @property
    def type_name(self):
        """``bool``, ``int``, ``str`` or ``float``."""
        return KIND_NAMES[self.kind]

    @property
    def node_attr_name(self):
        """The node attribute the original stamps this option as (``_`` + name by default)."""
        return self.attr_name or "_" + self.name

    def validate(self, value):
        """Check an explicitly set value (already of the right Python type); return it."""
        if self.max_bytes is not None:
            parsers.check_text_size(self.name, value, self.max_bytes)
        if self.choices is not None and value not in self.choices:
            raise NpuConfigError(self.name, value, self.allowed)
        if self.validator is not None:
            return self.validator(self.name, value)
        return value

    def to_json(self):
        """A JSON-serialisable description (used by ``npu-adapter options --json``)."""
        return {
            "name": self.name,
            "type": self.type_name,
            "field": KIND_FIELDS[self.kind],
            "default": self.default,
            "allowed": self.allowed,
            "category": self.category,
            "deprecated": self.deprecated,
            "ours": self.ours,
            "compat_only": self.compat_only,
            "severity": self.severity,
            "doc": self.doc,
        }


# --------------------------------------------------------------------------------------------
# Validators (explicit values only)


def _at_least(minimum, what=None):
    def check(name, value):
        if value < minimum:
            raise NpuConfigError(name, value, what or f"an integer >= {minimum}")
        return value

    return check


def _in_range(low, high):
    def check(name, value):
        if not low <= value <= high:
            raise NpuConfigError(name, value, f"an integer in [{low}, {high}]")
        return value

    return check


def _parsed_when_non_empty(parser):
    def check(name, value):
        if value:
            parser(value)
        return value

    return check


def _check_shape_range(name, value):
    if value:
        # The tag routing is graph-dependent (enable_dp); either way both parts must parse.
        for part in parsers.parse_shape_range(value, True):
            if part:
                parsers.parse_shape_range_list(part)
    return value


def _check_input_fusion_size(name, value):
    import warnings

    clamped = min(max(value, 0), INPUT_FUSION_SIZE_MAX)
    if clamped != value:
        warnings.warn(
            f"option {name!r}: {value} is outside [0, {INPUT_FUSION_SIZE_MAX}] and was clamped "
            f"to {clamped}", NpuAdapterWarning, stacklevel=user_stacklevel())
    return clamped


def _check_backend(name, value):
    if not value.strip():
        raise NpuConfigError(name, value, "a backend name such as 'cpu', 'xla' or 'cann'")
    return value


def _parses(parser):
    def check(name, value):
        parser(value)
        return value

    return check


def _choice_text(values):
    return "one of " + ", ".join(user_text(v) for v in values)


# --------------------------------------------------------------------------------------------
# The table


def _opt(name, kind, default, category, doc, choices=None, allowed=None, **kwargs):
    if choices is not None:
        choices = tuple(choices)
        allowed = allowed or _choice_text(choices)
    if kind == "s":
        kwargs.setdefault("max_bytes", parsers.MAX_TEXT_BYTES)
    return OptionSpec(name=name, kind=kind, default=default, category=category, doc=doc,
                      choices=choices, allowed=allowed or _ANY[kind], **kwargs)


_ANY = {"b": "true or false", "i": "any integer", "s": "any string", "f": "any number"}


_DEPRECATED_DYNAMIC = "use set_graph_exec_config on the fetch instead"
_PRECISION_MODES = ("force_fp32", "allow_fp32_to_fp16", "force_fp16", "must_keep_origin_dtype",
                    "allow_mix_precision", "cube_fp16in_fp32out", "allow_mix_precision_fp16",
                    "allow_mix_precision_bf16", "allow_fp32_to_bf16")
_PRECISION_MODES_V2 = ("fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16",
                       "cube_hif8", "mixed_hif8")

_P, _D, _PR, _M, _G = "partition", "dynamic_shape", "precision", "memory_runtime", "debug"

_SPECS = [
    # ---- pass / partition control
    _opt("use_off_line", "b", True, _P, "false: the partition and data-preprocessing passes skip"),
    _opt("mix_compile_mode", "b", False, _P,
         "mixed computing: unsupported ops stay on the host, several GeOps per graph",
         allowed="true or false; true requires iterations_per_loop=1", severity="E"),
    _opt("iterations_per_loop", "i", 1, _P, "device-side loop count per session.run",
         allowed="an integer >= 1", severity="F", validator=_at_least(1)),
    # Read by the original like any other option (CANN's guide lists it among the options to be
    # retired in a later release): no deprecation warning.
    _opt("enable_data_pre_proc", "b", False, _P,
         "sink the dataset (GetNext) to the device; pass key enable_dp"),
    _opt("job", "s", "localhost", _P,
         "job name of this process; ps/default make every pass inert "
         "(default 'default' when there is no NpuOptimizer entry)"),
    _opt("task_index", "i", 0, _P, "task index used in the assigned device string",
         allowed="an integer >= 0", severity="F", validator=_at_least(0)),
    _opt("lower_functional_ops", "b", False, _P, "true: ControlFlowConversionPass is skipped"),
    _opt("in_out_pair", "s", "", _P,
         "[[in_nodes, out_nodes], ...] regions to offload (or keep, see in_out_pair_flag)",
         allowed="the str() of a list of [in_nodes, out_nodes] pairs; requires "
                 "mix_compile_mode",
         severity="E", validator=_parsed_when_non_empty(parsers.parse_in_out_pair)),
    _opt("in_out_pair_flag", "b", True, _P,
         "true: offload the in_out_pair region; false: keep it on the host"),
    _opt("variable_placement", "s", "Device", _P,
         "where variables live; Host requires mix_compile_mode",
         choices=("Host", "Device"), severity="F", attr_name="_variable_location"),
    _opt("frozen_variable", "b", False, _P, "convert variables to constants (inference)"),
    _opt("const_input", "s", "", _P,
         "read only by SetVarMaxSizePass from the session options", stamped=False),
    _opt("local_rank_id", "i", -1, _P, "rank of this process on its server (data parallel DP)",
         allowed="an integer in [0, 7]", severity="E", validator=_in_range(0, 7)),
    _opt("local_device_list", "s", "", _P, "devices the main process feeds, e.g. '0,1'",
         allowed="comma-separated device ids, e.g. '1,2,3'", severity="E",
         validator=_parses(parsers.parse_local_device_list)),
    _opt("graph_max_parallel_model_num", "i", 1, _P,
         "number of parallel executions of each graph (inference)",
         allowed="an integer >= 1", severity="E", validator=_at_least(1)),
    # ---- dynamic shape
    _opt("dynamic_input", "b", False, _D, "session-level dynamic input switch",
         deprecated=True, deprecation_hint=_DEPRECATED_DYNAMIC),
    _opt("dynamic_graph_execute_mode", "s", "dynamic_execute", _D,
         "execution mode for dynamic inputs", choices=("lazy_recompile", "dynamic_execute"),
         severity="E", deprecated=True, deprecation_hint=_DEPRECATED_DYNAMIC),
    _opt("dynamic_inputs_shape_range", "s", "", _D,
         "shape ranges, e.g. 'getnext:[1~50,3];data:[-1]'",
         allowed="one or two entries 'data:<shapes>' / 'getnext:<shapes>', shapes like "
                 "[1~50,3],[]", severity="F", validator=_check_shape_range,
         deprecated=True, deprecation_hint=_DEPRECATED_DYNAMIC),
    _opt("input_shape", "s", "", _D, "gear inputs, e.g. 'data:1,-1;label:-1' (with the trio)",
         allowed="'name:d1,d2;...' in alphabetical name order, -1 for a dynamic dim; "
                 "requires dynamic_dims and dynamic_node_type", severity="F",
         validator=_parses(parsers.parse_input_shape)),
    _opt("dynamic_dims", "s", "", _D, "gears: values of the -1 dims, e.g. '20,20;40,40'",
         allowed="2..100 ';'-separated gears of positive ints; requires input_shape and "
                 "dynamic_node_type", severity="F",
         validator=_parses(parsers.parse_dynamic_dims)),
    _opt("dynamic_node_type", "i", -1, _D, "0: dataset inputs are dynamic; 1: placeholders",
         choices=(0, 1), allowed="0 or 1; requires input_shape and dynamic_dims",
         severity="F"),
    _opt("compile_hybrid_mode", "i", None, _D, "hybrid compile of the gear graph",
         allowed="0 or 1 with the dims trio (1 requires dynamic_node_type 1); "
                 "not 1 without the trio", severity="E"),
    _opt("compile_dynamic_mode", "b", False, _D,
         "generalise every input shape; incompatible with the dims trio", severity="E"),
    _opt("shape_generalization_mode", "s", "STRICT", _D,
         "how the GeOp generalises shapes on recompile",
         choices=("STRICT", "FULL", "ADAPTIVE"), severity="E"),
    _opt("jit_compile", "s", "auto", _D, "compile ops online (true) or use binaries (false)",
         choices=("true", "false", "auto"), severity="E"),
    _opt("ac_parallel_enable", "s", "", _D, "run AI CPU and AI Core ops in parallel ('1')"),
    _opt("all_tensor_not_empty", "b", False, _D, "promise that no tensor is empty"),
    # ---- precision / operator selection
    _opt("precision_mode", "s", None, _PR, "operator precision mode (exclusive with _v2)",
         choices=_PRECISION_MODES, severity="E"),
    _opt("precision_mode_v2", "s", None, _PR, "operator precision mode, new names",
         choices=_PRECISION_MODES_V2, severity="E"),
    _opt("modify_mixlist", "s", "", _PR, "JSON file editing the mixed-precision lists",
         allowed="a path; requires a mixed precision mode", severity="E"),
    _opt("op_precision_mode", "s", "", _PR, "ini file with per-op precision/performance modes"),
    _opt("op_select_implmode", "s", "", _PR, "high precision or high performance op variants",
         choices=("high_precision", "high_performance", "high_precision_for_all",
                  "high_performance_for_all"),
         severity="F", deprecated=True, deprecation_hint="use op_precision_mode"),
    _opt("optypelist_for_implmode", "s", "", _PR, "op types op_select_implmode applies to",
         allowed="op types, comma-separated; requires op_select_implmode", severity="F",
         deprecated=True, deprecation_hint="use op_precision_mode",
         validator=_parsed_when_non_empty(files.parse_op_type_list)),
    _opt("customize_dtypes", "s", "", _PR, "file with per-op dtype overrides"),
    _opt("fusion_switch_file", "s", "", _PR, "file switching fusion passes on/off"),
    _opt("enable_scope_fusion_passes", "s", "", _PR, "scope fusion passes to enable"),
    _opt("buffer_optimize", "s", "l2_optimize", _M, "buffer (L2) optimisation",
         choices=("l2_optimize", "off_optimize"), severity="F"),
    _opt("enable_small_channel", "i", 0, _PR, "small-channel convolution optimisation"),
    _opt("enable_compress_weight", "b", False, _PR, "compress all weights",
         allowed="bool; cannot be given together with compress_weight_conf", severity="F"),
    _opt("compress_weight_conf", "s", "", _PR, "file listing the nodes to compress",
         allowed="a path; cannot be given together with enable_compress_weight", severity="F"),
    _opt("deterministic", "i", 0, _PR, "deterministic computation (1)"),
    _opt("oo_level", "s", "O3", _PR, "graph optimisation level"),
    _opt("oo_constant_folding", "b", True, _PR,
         "GE constant folding (read only when the .b field is set)", strict_kind=False),
    _opt("optimization_switch", "s", "", _PR, "GE pass switches (forbidden_close_pass:on added)"),
    _opt("topo_sorting_mode", "i", None, _PR, "GE topological sorting mode"),
    _opt("insert_op_file", "s", "", _PR, "AIPP configuration file"),
    _opt("auto_multistream_parallel_mode", "s", "", _M, "automatic multi-stream parallelism"),
    _opt("aicore_num", "s", "", _M, "number of AI cores to use"),
    _opt("auto_tune_mode", "s", "", _G, "legacy auto tuning mode"),
    # ---- memory / runtime
    _opt("graph_run_mode", "i", 1, _M, "0: online inference, 1: training",
         choices=(0, 1), severity="F"),
    _opt("hcom_parallel", "b", True, _M, "overlap AllReduce with computation"),
    _opt("hcom_multi_mode", "b", False, _M, "HCCL multi mode"),
    _opt("graph_memory_max_size", "s", None, _M, "no longer effective",
         deprecated=True, deprecation_hint="GE sizes memory dynamically; remove the option"),
    _opt("variable_memory_max_size", "s", None, _M, "no longer effective",
         deprecated=True, deprecation_hint="GE sizes memory dynamically; remove the option"),
    _opt("variable_format_optimize", "b", None, _M, "convert variable formats at init",
         deprecated=True, deprecation_hint="no replacement"),
    _opt("stream_max_parallel_num", "s", "", _M, "engine parallelism, e.g. 'DNN_VM_AICPU:10'"),
    _opt("is_tailing_optimization", "b", False, _M, "AllReduce tailing optimisation (Bert)"),
    _opt("atomic_clean_policy", "i", 0, _M, "0: clean atomic memory centrally, 1: per op"),
    _opt("static_memory_policy", "i", 0, _M, "0: dynamic memory, 2: dynamic expansion"),
    _opt("memory_optimization_policy", "s", "", _M, "GE memory optimisation policy"),
    _opt("variable_use_1g_huge_page", "i", 0, _M, "1 GB huge pages for variables",
         choices=(0, 1, 2), severity="E"),
    _opt("external_weight", "b", False, _M, "store Const weights in files"),
    _opt("input_fusion_size", "i", 131072, _M, "input fusion threshold in bytes",
         allowed=f"an integer in [0, {INPUT_FUSION_SIZE_MAX}] (clamped with a warning)",
         severity="W", validator=_check_input_fusion_size),
    _opt("input_batch_cpy", "b", False, _M, "batch the input copies"),
    _opt("session_device_id", "i", -1, _M, "logical device of this session",
         allowed="an integer >= 0", severity="F",
         validator=_at_least(0, "a non-negative integer")),
    _opt("hccl_timeout", "i", None, _M, "collective communication timeout (s)"),
    _opt("op_wait_timeout", "i", None, _M, "op wait timeout (s)"),
    _opt("op_execute_timeout", "i", None, _M, "op execution timeout (s)"),
    _opt("HCCL_algorithm", "s", "", _M, "HCCL algorithm selection"),
    _opt("graph_exec_timeout", "i", 600000, _M, "graph execution timeout (ms)"),
    _opt("stream_sync_timeout", "i", -1, _M, "stream synchronisation timeout (ms)"),
    _opt("event_sync_timeout", "i", -1, _M, "event synchronisation timeout (ms)"),
    _opt("device_type", "s", "default_device_type", _M, "GE device type"),
    _opt("soc_config", "s", "", _M, "SoC version (GE ge.socVersion)"),
    _opt("resource_config_path", "s", "", _M, "resource configuration file"),
    _opt("graph_parallel_option_path", "s", "", _M, "graph parallel options file"),
    _opt("enable_graph_parallel", "b", False, _M, "graph parallelism"),
    _opt("graph_compiler_cache_dir", "s", None, _M, "directory for compiled-graph caches"),
    _opt("graph_slice", "s", "", _M, "graph slicing mode",
         choices=("", "auto", "manual"), allowed="'auto' or 'manual' (or empty)", severity="E"),
    _opt("export_compile_stat", "i", 1, _M,
         "export compile statistics (checked only when the .i field is set)",
         choices=(0, 1, 2), severity="E", strict_kind=False),
    _opt("experimental_logical_device_cluster_deploy_mode", "s", "LB", _M,
         "logical device deployment mode"),
    _opt("experimental_logical_device_id", "s", "", _M, "logical device id"),
    _opt("experimental_model_deploy_mode", "s", "", _M, "model deployment mode"),
    _opt("experimental_model_deploy_devicelist", "s", "", _M, "model deployment devices"),
    _opt("experimental_accelerate_train_mode", "s", "", _M,
         "low-precision training acceleration, e.g. 'fast|step|0.9'",
         allowed="'type|mode[|ratio]', type fast/fast1, mode step (ratio 0.2..0.9) or loss "
                 "(ratio 1.01..1.5)", severity="E",
         validator=_parsed_when_non_empty(parsers.parse_accelerate_train_mode)),
    # ---- debug / dump / profiling / tuning
    _opt("enable_dump", "b", False, _G, "data dump; requires dump_path", severity="E"),
    _opt("enable_dump_debug", "b", False, _G, "overflow dump; requires dump_path", severity="E"),
    _opt("dump_path", "s", "", _G, "dump directory (stored as its realpath when dumping)",
         allowed="an existing directory with read/write access", severity="E"),
    _opt("dump_step", "s", "", _G, "steps to dump, e.g. '0|5|10-20'",
         allowed="'|'-separated N or N-M (N < M), at most 100 sets", severity="E",
         validator=_parsed_when_non_empty(parsers.parse_dump_step)),
    _opt("dump_mode", "s", "output", _G, "dump op inputs, outputs or both",
         choices=("input", "output", "all"), severity="F"),
    _opt("dump_debug_mode", "s", "all", _G, "overflow detection mode",
         choices=("aicore_overflow", "atomic_overflow", "all"), severity="F"),
    _opt("dump_data", "s", "tensor", _G, "dump tensors or statistics",
         choices=("tensor", "stats"), severity="E"),
    _opt("dump_layer", "s", "", _G, "space-separated op names to dump"),
    _opt("quant_dumpable", "s", None, _G, "dump data before AMCT quantisation ('1')"),
    _opt("enable_exception_dump", "i", 2, _G, "dump inputs/outputs of failing ops",
         allowed="an integer in [0, 2]", severity="E", validator=_in_range(0, 2)),
    _opt("op_debug_level", "i", None, _G, "operator debug level (0..4)",
         allowed="an integer in [0, 4]", severity="E", validator=_in_range(0, 4),
         deprecated=True, deprecation_hint="use op_debug_config"),
    _opt("op_debug_config", "s", "", _G, "operator debug configuration file"),
    _opt("debug_dir", "s", "", _G, "directory for operator debug files"),
    _opt("op_compiler_cache_mode", "s", "", _G, "operator compile cache mode"),
    _opt("op_compiler_cache_dir", "s", "", _G, "operator compile cache directory"),
    _opt("profiling_mode", "b", False, _G, "profiling; empty profiling_options get a default"),
    # Checked with profiling_mode (config.rules.check_profiling_options): an option of a
    # feature that is off never stops a script.
    _opt("profiling_options", "s", "", _G, "profiling options (JSON)",
         allowed="a JSON object of profiling options, e.g. "
                 "'{\"output\":\"/tmp/profiling\",\"training_trace\":\"on\"}'",
         severity="E"),
    _opt("aoe_mode", "s", None, _G, "AOE tuning mode; falls back to env AOE_MODE",
         choices=("", "1", "2", "4"), allowed="'1', '2' or '4'", severity="E"),
    _opt("work_path", "s", "./", _G, "AOE working directory (checked when AOE is on)",
         allowed="an existing directory with read/write access", severity="F"),
    _opt("distribute_config", "s", "", _G, "AOE distribution configuration"),
    _opt("aoe_config_file", "s", "", _G, "AOE configuration file"),
    # ---- written by NPUEstimator, never read by the original
    _opt("enable_reduce_precision", "b", None, "compat",
         "accepted for compatibility only (written by NPUEstimator, never read)",
         compat_only=True, strict_kind=False, stamped=False),
    _opt("min_group_size", "b", None, "compat",
         "accepted for compatibility only (written by NPUEstimator, never read)",
         compat_only=True, strict_kind=False, stamped=False),
    # ---- ours (ignored by the original)
    _opt(OUR_PREFIX + "min_cluster_size", "i", 1, "npu_adapter",
         "smallest cluster that becomes a GeOp", allowed="an integer >= 1",
         validator=_at_least(1), ours=True, stamped=False),
    _opt(OUR_PREFIX + "max_clusters", "i", 0, "npu_adapter",
         "keep at most this many clusters (largest first); 0 = unlimited",
         allowed="an integer >= 0", validator=_at_least(0), ours=True, stamped=False),
    _opt(OUR_PREFIX + "gear_policy", "s", "exact", "npu_adapter",
         "runtime shape in no gear: exact raises, pad_up pads to the smallest covering gear",
         choices=("exact", "pad_up"), ours=True, stamped=False),
    _opt(OUR_PREFIX + "gear_pad_values", "s", "", "npu_adapter",
         "pad value per input for pad_up, e.g. 'ids:0;mask:-1'",
         allowed="'name:number' entries separated by ';'",
         validator=_parsed_when_non_empty(parsers.parse_gear_pad_values),
         ours=True, stamped=False),
    _opt(OUR_PREFIX + "gear_unpad", "s", "", "npu_adapter",
         "axes of each output to slice back after pad_up, e.g. 'logits:0:0,1'",
         allowed="'tensor_name:dim[,dim...]' entries separated by ';'",
         validator=_parsed_when_non_empty(parsers.parse_gear_unpad),
         ours=True, stamped=False),
    _opt(OUR_PREFIX + "dump_dir", "s", "", "npu_adapter",
         "directory for per-pass graph dumps ('' = no dumps)", ours=True, stamped=False),
    _opt(OUR_PREFIX + "cache_dir", "s", "", "npu_adapter",
         "existing directory where rewrites are cached for other processes ('' = "
         "graph_compiler_cache_dir when set, else no disk cache)", ours=True, stamped=False),
    _opt(OUR_PREFIX + "reuse_sessions", "b", True, "npu_adapter",
         "keep a closed session's TensorFlow session for the next session on the same graph "
         "and options when what it ran keeps no state between runs (false: close it, freeing "
         "its memory, as TensorFlow does)", ours=True, stamped=False),
    _opt(OUR_PREFIX + "isolate_clusters", "b", False, "npu_adapter",
         "CPU reference: never inline cluster functions (keeps the device boundary at run time; "
         "numbers may then differ from plain TF by rounding, and each signature's random ops "
         "keep a state of their own)", ours=True, stamped=False),
    _opt(OUR_PREFIX + "emulate_precision", "s", "off", "npu_adapter",
         "CPU reference: run every cluster in the dtypes the NPU would use under the precision "
         "options (default from env NPU_ADAPTER_EMULATE_PRECISION, else off)",
         choices=("off", "on"), ours=True, stamped=False),
    _opt(OUR_PREFIX + "compile_cache_max_mb", "i", 10240, "npu_adapter",
         "size bound of the graph_compiler_cache_dir entries of a backend, in MiB (least "
         "recently used entries are removed); 0 = unbounded",
         allowed="an integer >= 0", validator=_at_least(0), ours=True, stamped=False),
    _opt(OUR_PREFIX + "strict_options", "b", False, "npu_adapter",
         "true: an unknown option key is an error (NpuConfigError) instead of a warning, as on "
         "the command line (also env NPU_ADAPTER_STRICT_OPTIONS=1)", ours=True, stamped=False),
    _opt(OUR_PREFIX + "backend", "s", "cpu", "npu_adapter",
         "backend that runs the clusters (cpu, xla, cann or a registered one)",
         allowed="a registered backend name", validator=_check_backend,
         ours=True, stamped=False),
]

def _with_path_check(spec):
    """``spec`` whose validator also rejects a NUL character in the path, and whose value is
    at most a path long."""
    inner = spec.validator

    def check(name, value):
        files.check_path_text(name, value)
        return inner(name, value) if inner is not None else value

    return replace(spec, validator=check, max_bytes=parsers.MAX_PATH_BYTES)


_SPECS = [_with_path_check(spec) if spec.name in files.PATH_OPTIONS else spec for spec in _SPECS]

OPTION_SPECS = tuple(sorted(_SPECS, key=lambda spec: spec.name))
"""Every option, sorted by name."""

OPTIONS_BY_NAME = {spec.name: spec for spec in OPTION_SPECS}
"""Option name → :class:`OptionSpec`."""



def unknown_option_hint(name):
    """What to say about an unknown option ``name``, the same in a warning and in an error:
    ``did you mean 'mix_compile_mode'?``, else where the list is."""
    match = suggest_option(name)
    return f"did you mean {match!r}?" if match else "see `npu-adapter options` for the list"


def suggest_option(name):
    """The option name a misspelt ``name`` most likely meant, or None."""
    import difflib

    prefixed = [option for option in OPTIONS_BY_NAME if option.startswith(name)]
    if len(name) >= 4 and prefixed:
        return min(prefixed, key=len)
    matches = difflib.get_close_matches(name, list(OPTIONS_BY_NAME), n=1)
    return matches[0] if matches else None


if len(OPTIONS_BY_NAME) != len(_SPECS):  # pragma: no cover - guards edits of the table
    raise RuntimeError("duplicate option in the NpuOptimizer option table")
