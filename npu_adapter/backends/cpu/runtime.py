"""Run-time half of the CPU reference: clusters are TensorFlow functions the session runs.

Nothing is compiled ahead of TensorFlow: the executable of a cluster (or of one of its gears) is
its FunctionDef, which TensorFlow instantiates on the first run. What the runtime decides is
which variant of a signature a run executes (see :mod:`npu_adapter.backends.runtime`).
"""

from npu_adapter.backends.runtime import BackendRuntime

__all__ = ["CpuReferenceRuntime"]


class CpuReferenceRuntime(BackendRuntime):
    """Clusters run as TensorFlow functions on the host CPU (status ``"function"``)."""
