"""Exception hierarchy of npu-adapter.

Every error the library raises on purpose derives from :class:`NpuAdapterError`, so a caller can
catch them all at once. Messages name the option, node or pass involved and say what would be
valid: they are written for the person who has to fix the script, not for us.
"""

__all__ = [
    "MAX_ECHO",
    "excerpt",
    "NpuAdapterError",
    "NpuConfigError",
    "UnknownOptionError",
    "UsageError",
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


MAX_ECHO = 120
"""Longest echo of a user value in an error message (longer ones are cut, with their length)."""


def excerpt(value, limit=MAX_ECHO):
    """``repr(value)``, cut to about ``limit`` characters with the full length said.

    A 100 KB option value must not be echoed in full (or twice) in a one-line error: the start
    is enough to recognise it, and the length tells the rest.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, (str, bytes)) else \
        f"{len(text)} characters as text"
    return f"{text[:limit]}... ({size})"


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
        msg = f"invalid value {excerpt(value)} for option {excerpt(option)}: {allowed}"
        if detail:
            detail = str(detail)
            if len(detail) > 4 * MAX_ECHO:
                detail = detail[:4 * MAX_ECHO] + "..."
            msg += f" ({detail})"
        super().__init__(msg)


class UnknownOptionError(NpuConfigError):
    """An option name that is not an option (a typo, or an option of another tool).

    The message blames the key, not the value: ``option`` is the unknown name, ``value`` the
    value given with it, ``allowed`` a hint (the closest option name, or where to look).
    """

    def __init__(self, option, value, allowed, detail=None):
        super().__init__(option, value, allowed, detail)
        where = f" ({detail})" if detail else ""
        self.args = (f"unknown option {excerpt(option)}{where}: {allowed}",)

    def __str__(self):
        return self.args[0]


class UsageError(NpuAdapterError, ValueError):
    """A command line or call that is malformed as a whole (e.g. ``--option`` without ``=``)."""


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
