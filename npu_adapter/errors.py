"""Exception hierarchy of npu-adapter.

Every error the library raises on purpose derives from :class:`NpuAdapterError`, so a caller can
catch them all at once. Messages name the option, node or pass involved and say what would be
valid: they are written for the person who has to fix the script, not for us.
"""

__all__ = [
    "MAX_ECHO",
    "excerpt",
    "float_text",
    "user_text",
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


def float_text(value, digits=6):
    """``value`` with about ``digits`` significant digits (``0.00236106``, ``1e-05``), more
    when fewer would round it to a whole number it is not (a cosine of 0.99999989 is not 1)."""
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    text = f"{value:.{digits}g}"
    while digits < 12 and value != round(value) and float(text) == round(value):
        digits += 1
        text = f"{value:.{digits}g}"
    return text


def _bare_text(value):
    """A value inside a list or a ``key=value`` pair: strings without quotes."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    if isinstance(value, str):
        return value if value and not any(c in value for c in " ,=;()'\"") else repr(value)
    return user_text(value)


def user_text(value):
    """``value`` as a user writes it on a command line or in a configuration file.

    ``true``/``false``; numbers with about 6 significant digits (:func:`float_text`); a shape
    or other sequence of numbers as ``(1,16,16,3)``; other sequences as ``a, b``; a dict as
    ``key=value, ...``; a string quoted (``'input:0'``), so that spaces and empty strings show.
    Never a Python repr of a container, ``None`` or ``True``.
    """
    import numbers

    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "item") and callable(value.item) and getattr(value, "shape", None) == ():
        value = value.item()  # a numpy scalar
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return float_text(value)
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "backslashreplace"))
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return ", ".join(f"{_bare_text(k)}={_bare_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else list(value)
        if items and all(isinstance(v, numbers.Number) and not isinstance(v, bool)
                         for v in items):
            return "(" + ",".join(user_text(v) for v in items) + ")"
        return ", ".join(_bare_text(v) for v in items)
    return str(value)


def excerpt(value, limit=MAX_ECHO):
    """:func:`user_text` of ``value``, cut to about ``limit`` characters with the full length
    said.

    A 100 KB option value must not be echoed in full (or twice) in a one-line error: the start
    is enough to recognise it, and the length tells the rest.
    """
    text = user_text(value)
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
        if isinstance(value, dict):  # a combination: every option of it with its value
            msg = (f"invalid combination of options {option}"
                   + (f" ({excerpt(value)})" if value else "") + f": {allowed}")
        elif value is None:
            msg = f"missing value for option {excerpt(option)}: {allowed}"
        else:
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
    value given with it, ``allowed`` a hint (the closest option name, or where to look),
    ``detail`` where it was given: ``unknown option 'mix_compile_mod' (did you mean
    'mix_compile_mode'?), given with --option``.
    """

    def __init__(self, option, value, allowed, detail=None):
        super().__init__(option, value, allowed, detail)
        where = f", {detail}" if detail else ""
        self.args = (f"unknown option {excerpt(option)} ({allowed}){where}",)

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
        after = ", ".join(self.previous_passes) or "none"
        super().__init__(f"pass {pass_name!r} failed (passes run before it: {after}): "
                         f"{type(cause).__name__}: {cause}")


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
