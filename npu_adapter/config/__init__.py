"""Session options of the ``NpuOptimizer`` custom optimizer: parsing, validation, typed access.

``NpuConfig`` is the entry point; ``OPTION_SPECS`` is the option table, ``parsers`` holds the
parsers of the structured string options and ``rules`` the checks that involve several options.
"""

from npu_adapter.config.npu_config import NPU_OPTIMIZER_NAME, NpuConfig
from npu_adapter.config.options import OPTION_SPECS, OPTIONS_BY_NAME, OUR_PREFIX, OptionSpec
from npu_adapter.config.parsers import (
    AccelerateTrainMode,
    DimsTrio,
    parse_accelerate_train_mode,
    parse_dump_step,
    parse_dynamic_dims,
    parse_gear_pad_values,
    parse_gear_unpad,
    parse_in_out_pair,
    parse_input_shape,
    parse_local_device_list,
    parse_shape_range,
    parse_shape_range_list,
    validate_dims_trio,
)
from npu_adapter.config.warnings import NpuAdapterWarning, reset_warn_once, warn_once

__all__ = [
    "NPU_OPTIMIZER_NAME",
    "OPTIONS_BY_NAME",
    "OPTION_SPECS",
    "OUR_PREFIX",
    "AccelerateTrainMode",
    "DimsTrio",
    "NpuAdapterWarning",
    "NpuConfig",
    "OptionSpec",
    "parse_accelerate_train_mode",
    "parse_dump_step",
    "parse_dynamic_dims",
    "parse_gear_pad_values",
    "parse_gear_unpad",
    "parse_in_out_pair",
    "parse_input_shape",
    "parse_local_device_list",
    "parse_shape_range",
    "parse_shape_range_list",
    "reset_warn_once",
    "validate_dims_trio",
    "warn_once",
]
