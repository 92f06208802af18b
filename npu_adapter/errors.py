"""Exception hierarchy of npu-adapter.

Every error the library raises on purpose derives from :class:`NpuAdapterError`, so a caller can
catch them all at once. Messages name the option, node or pass involved and say what would be
valid: they are written for the person who has to fix the script, not for us.
"""

__all__ = [
    "NpuAdapterError",
    "NpuConfigError",
    "GraphError",
    "GraphInvariantError",
    "PassError",
    "PipelineParseError",
    "BackendError",
    "DeviceOnlyError",
    "RewriteError",
    "PrecisionFileError",
    "PrecisionEmulationError",
]


class NpuAdapterError(Exception):
    """Root of all npu-adapter errors."""


class NpuConfigError(NpuAdapterError, ValueError):
    """An option (or a combination of options) is invalid.

    The original TF Adapter either returns an error status or aborts the process (``LOG(FATAL)``)
    for these; we raise this in both cases. ``option`` names the offending key (or keys, joined by
    ``" + "``), ``value`` is what was given, ``allowed`` describes what is accepted.
    """

    def __init__(self, option, value, allowed, detail=None):
        self.option = option
        self.value = value
        self.allowed = allowed
        self.detail = detail
        msg = f"invalid value {value!r} for option {option!r}: {allowed}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class GraphError(NpuAdapterError, ValueError):
    """A GraphDef given by the user cannot be processed (bad names, missing nodes, ...)."""


class GraphInvariantError(GraphError):
    """A graph violates structural invariants; ``violations`` lists every problem found."""

    def __init__(self, violations, context=None):
        self.violations = list(violations)
        self.context = context
        head = f"{context}: " if context else ""
        lines = "\n".join(f"  - {v}" for v in self.violations)
        super().__init__(f"{head}graph has {len(self.violations)} invariant violation(s):\n{lines}")


class PassError(NpuAdapterError):
    """A pass failed; carries the pass name and the passes that ran before it."""

    def __init__(self, pass_name, previous_passes, cause):
        self.pass_name = pass_name
        self.previous_passes = list(previous_passes)
        self.cause = cause
        super().__init__(
            f"pass {pass_name!r} failed after passes {self.previous_passes}: "
            f"{type(cause).__name__}: {cause}"
        )


class PipelineParseError(NpuAdapterError, ValueError):
    """A textual pass pipeline is malformed; the message points at the bad token."""

    def __init__(self, text, position, message):
        self.text = text
        self.position = position
        pointer = " " * position + "^"
        super().__init__(f"{message} at column {position + 1}:\n  {text}\n  {pointer}")


class BackendError(NpuAdapterError):
    """A backend is unknown, unavailable, or cannot lower a cluster."""


class DeviceOnlyError(BackendError):
    """An ``npu_bridge`` API means the Ascend device itself (a device channel, RDMA, shared
    memory, a model that only the device runtime can load), so it cannot be built on the host.

    Raised when the graph is constructed, never later at run time. ``api`` names the function
    called and ``reason`` says what on the device it needs and what to use instead.
    """

    def __init__(self, api, reason):
        self.api = api
        self.reason = reason
        super().__init__(f"{api} needs the Ascend device: {reason}")


class RewriteError(NpuAdapterError, ValueError):
    """The rewrite cannot be done for this graph and configuration (as the original would fail).

    ``code`` is the TensorFlow error class the original reports for the same condition
    (``"InvalidArgument"``, ``"Internal"``, ``"Unimplemented"``); ``NpuSession`` raises the
    matching ``tf.errors`` exception so scripts that catch those keep working.
    """

    def __init__(self, message, code="InvalidArgument", node=None):
        self.code = code
        self.node = node
        super().__init__(message)


class PrecisionFileError(NpuConfigError):
    """A ``modify_mixlist`` or ``customize_dtypes`` file cannot be used.

    ``option`` is the option naming the file, ``path`` the file, ``line`` the 1-based line of
    the problem (None when it concerns the whole file).
    """

    def __init__(self, option, path, line, problem, allowed):
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line else str(path)
        super().__init__(option, path, allowed, detail=f"{where}: {problem}")


class PrecisionEmulationError(NpuAdapterError, ValueError):
    """The precision settings cannot be emulated on the CPU (e.g. HiFloat8 modes)."""
