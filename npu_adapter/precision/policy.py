"""The precision policy of a session: which mode, which low-precision dtype, which lists.

:func:`policy_from_config` reads ``precision_mode`` / ``precision_mode_v2`` (or the default the
original uses when neither is set), ``modify_mixlist`` and ``customize_dtypes`` into one
:class:`PrecisionPolicy`; :func:`emulation_enabled` says whether the ``precision`` pass applies it
(option ``npu_adapter_emulate_precision``, environment variable
``NPU_ADAPTER_EMULATE_PRECISION``).
"""

import dataclasses
import typing

from tensorflow.core.framework import types_pb2

from npu_adapter.errors import PrecisionEmulationError

__all__ = ["MODES", "PrecisionPolicy", "emulation_enabled", "policy_from_config",
           "resolve_mode", "EMULATE_OPTION", "EMULATE_ENV"]

EMULATE_OPTION = "npu_adapter_emulate_precision"
EMULATE_ENV = "NPU_ADAPTER_EMULATE_PRECISION"

DT_FLOAT = types_pb2.DT_FLOAT
DT_HALF = types_pb2.DT_HALF
DT_BFLOAT16 = types_pb2.DT_BFLOAT16

# Canonical modes of the emulation.
FORCE_LOW = "force_low"          # force_fp16 / fp16
FP32_TO_LOW = "fp32_to_low"      # allow_fp32_to_fp16 / allow_fp32_to_bf16
FORCE_FP32 = "force_fp32"        # force_fp32 / cube_fp16in_fp32out
ORIGIN = "origin"                # must_keep_origin_dtype / origin
MIXED = "mixed"                  # allow_mix_precision(_fp16/_bf16) / mixed_float16 / _bfloat16
MODES = (FORCE_LOW, FP32_TO_LOW, FORCE_FP32, ORIGIN, MIXED)

_V1 = {
    "force_fp16": (FORCE_LOW, DT_HALF),
    "allow_fp32_to_fp16": (FP32_TO_LOW, DT_HALF),
    "allow_fp32_to_bf16": (FP32_TO_LOW, DT_BFLOAT16),
    "force_fp32": (FORCE_FP32, DT_HALF),
    "cube_fp16in_fp32out": (FORCE_FP32, DT_HALF),
    "must_keep_origin_dtype": (ORIGIN, DT_HALF),
    "allow_mix_precision": (MIXED, DT_HALF),
    "allow_mix_precision_fp16": (MIXED, DT_HALF),
    "allow_mix_precision_bf16": (MIXED, DT_BFLOAT16),
}
_V2 = {
    "fp16": (FORCE_LOW, DT_HALF),
    "origin": (ORIGIN, DT_HALF),
    "cube_fp16in_fp32out": (FORCE_FP32, DT_HALF),
    "mixed_float16": (MIXED, DT_HALF),
    "mixed_bfloat16": (MIXED, DT_BFLOAT16),
}
# SoCs whose training default is must_keep_origin_dtype (precision_mode) / origin (_v2).
_ORIGIN_DEFAULT_SOCS = ("ascend910b", "ascend910_93")


@dataclasses.dataclass(frozen=True)
class PrecisionPolicy:
    """Everything the ``precision`` pass needs to decide each op's dtype.

    Attributes:
        mode: one of :data:`MODES`.
        setting: the option as the user sees it, e.g. ``"precision_mode=allow_mix_precision"``
            or ``"precision_mode=allow_fp32_to_fp16 (default for training)"``.
        low: the low-precision dtype enum (``DT_HALF`` or ``DT_BFLOAT16``).
        lists: the :class:`~npu_adapter.precision.lists.PrecisionLists` in force.
        base_lists: the lists before the ``modify_mixlist`` edits.
        mixlist_changes: edited name → ``(list before, list after, ref)``.
        customize: the parsed ``customize_dtypes`` file (None when not set or not applied).
        customize_ignored: why a set ``customize_dtypes`` is not applied ("" when it is).
    """

    mode: str
    setting: str
    low: int = DT_HALF
    lists: typing.Any = None
    base_lists: typing.Any = None
    mixlist_changes: dict = dataclasses.field(default_factory=dict)
    customize: typing.Any = None
    customize_ignored: str = ""

    @property
    def low_name(self):
        """``"float16"`` or ``"bfloat16"``."""
        return "bfloat16" if self.low == DT_BFLOAT16 else "float16"


def resolve_mode(config):
    """``(mode, low dtype, setting text)`` for ``config``.

    Raises:
        PrecisionEmulationError: a HiFloat8 mode (no TensorFlow dtype can emulate it).
    """
    if config.is_set("precision_mode_v2"):
        value = config.precision_mode_v2
        if value not in _V2:
            raise PrecisionEmulationError(
                f"precision_mode_v2={value!r} cannot be emulated on the CPU: HiFloat8 has no "
                f"TensorFlow dtype; emulation supports precision_mode_v2 in {sorted(_V2)}")
        mode, low = _V2[value]
        return mode, low, f"precision_mode_v2={value}"
    if config.is_set("precision_mode"):
        value = config.precision_mode
        mode, low = _V1[value]
        return mode, low, f"precision_mode={value}"
    if int(config.graph_run_mode) == 0:
        return FORCE_LOW, DT_HALF, "precision_mode=force_fp16 (default for online inference)"
    soc = (config.get("soc_config") or "").lower()
    if soc.startswith(_ORIGIN_DEFAULT_SOCS):
        return ORIGIN, DT_HALF, (f"precision_mode=must_keep_origin_dtype (default for training "
                                 f"on {config.soc_config})")
    return FP32_TO_LOW, DT_HALF, "precision_mode=allow_fp32_to_fp16 (default for training)"


def emulation_enabled(config):
    """Whether ``npu_adapter_emulate_precision`` is ``on`` for ``config`` (the option, else the
    environment variable, read when the config was built)."""
    return config is not None and config.get(EMULATE_OPTION, "off") == "on"


def policy_from_config(config):
    """The :class:`PrecisionPolicy` of ``config`` (files are read and checked here).

    Raises:
        PrecisionFileError: the modify_mixlist or customize_dtypes file is unreadable or
            malformed (the message names the file and line).
        PrecisionEmulationError: a mode that cannot be emulated.
    """
    from npu_adapter.precision.customize import load_customize_dtypes
    from npu_adapter.precision.lists import default_precision_lists
    from npu_adapter.precision.mixlist import load_mixlist

    mode, low, setting = resolve_mode(config)
    base = default_precision_lists()
    lists, changes = base, {}
    if config.modify_mixlist:
        lists, changes = base.with_edits(load_mixlist(config.modify_mixlist))
    customize, ignored = None, ""
    if config.customize_dtypes:
        customize = load_customize_dtypes(config.customize_dtypes)
        if mode == ORIGIN:
            # The documented rule: customize_dtypes has no effect with must_keep_origin_dtype.
            customize, ignored = None, f"customize_dtypes has no effect with {setting}"
    return PrecisionPolicy(mode=mode, setting=setting, low=low, lists=lists, base_lists=base,
                           mixlist_changes=changes, customize=customize,
                           customize_ignored=ignored)
