"""The CPU reference backend: clusters run as TensorFlow functions on the host CPU.

``lowering`` makes each cluster a function call at graph time; ``runtime`` serves the calls at
run time (gear dispatch, shape specialisation).
"""

from npu_adapter.backends.cpu.lowering import (
    CpuReferenceBackend,
    is_state_owner,
    lower_to_function_calls,
)

__all__ = ["CpuReferenceBackend", "is_state_owner", "lower_to_function_calls"]
