"""Tensor and node names: the one place where ``node:port`` and ``^ctrl`` strings are parsed.

GraphDef encodes an input as ``"node"`` (output 0), ``"node:3"`` (output 3) or ``"^node"`` (a
control dependency). Function bodies use ``"node:out_arg:2"``; those are handled where function
bodies are built, not here. Everything in the library that reads or writes an input string goes
through :func:`parse_input` / :func:`format_input` so that the rules live in one place.
"""

import re

__all__ = [
    "parse_input",
    "format_input",
    "tensor_name",
    "parse_tensor_name",
    "node_name_of",
    "is_control_input",
    "is_valid_node_name",
    "invalid_node_names",
    "sanitize_filename",
    "unique_name",
    "function_arg_name",
]

# TF's own rule for node names (tensorflow/core/graph/graph_constructor.cc, IsValidNodeName):
# first char [A-Za-z0-9.], then [A-Za-z0-9_./\-]; `>` is allowed for names made by some passes.
_NODE_NAME_RE = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/>]*\Z")
_NODE_NAMES_RE = re.compile(r"(?:[A-Za-z0-9.][A-Za-z0-9_.\-/>]*\n)*\Z")
_UNSAFE_FILE_CHARS_RE = re.compile(r"[^A-Za-z0-9_\-]+")
_ARG_NAME_RE = re.compile(r"[^a-z0-9_]")


def parse_input(text):
    """Parse one NodeDef input string.

    Returns:
        ``(node_name, port, is_control)``; ``port`` is -1 for a control input.

    Example: ``parse_input("a/b:2") == ("a/b", 2, False)``;
    ``parse_input("^c") == ("c", -1, True)``.
    """
    if text.startswith("^"):
        return text[1:], -1, True
    name, sep, port = text.rpartition(":")
    if sep and port.isdigit():
        return name, int(port), False
    return text, 0, False


def format_input(node_name, port=0, is_control=False):
    """Inverse of :func:`parse_input` in canonical form (port 0 is written without ``:0``)."""
    if is_control or port < 0:
        return "^" + node_name
    return node_name if port == 0 else f"{node_name}:{port}"


def tensor_name(node_name, port=0):
    """Fully qualified tensor name as users write it for fetches and feeds (``"node:0"``)."""
    return f"{node_name}:{port}"


def parse_tensor_name(text):
    """Parse a user-given tensor name (``"x"`` or ``"x:1"``) into ``(node, port)``.

    A leading ``^`` is rejected: it names an operation, not a tensor.
    """
    node, port, is_control = parse_input(text)
    if is_control:
        raise ValueError(f"{text!r} names an operation (control input), not a tensor")
    return node, port


def node_name_of(text):
    """The node part of an input or tensor name (``"^a"``, ``"a:1"``, ``"a"`` all give ``"a"``)."""
    return parse_input(text)[0]


def is_control_input(text):
    """True for ``"^node"`` inputs."""
    return text.startswith("^")


def is_valid_node_name(name):
    """True when TensorFlow would accept ``name`` as a node name."""
    return bool(_NODE_NAME_RE.match(name))


def invalid_node_names(names):
    """The names of ``names`` that TensorFlow would not accept as node names, in order.

    All the names are matched at once, joined by newlines (a newline is never part of a valid
    name): when they are all valid, as they nearly always are, that is one match instead of one
    per name (8 ms against 19 ms for 100k names)."""
    if _NODE_NAMES_RE.match("\n".join(names) + "\n") is not None:
        return []
    return [name for name in names if not _NODE_NAME_RE.match(name)]


def sanitize_filename(name, max_length=120):
    """Turn a node/pass/run name into a safe file-name stem.

    Every run of characters outside ``[A-Za-z0-9_-]`` (``.``, ``/``, ``\\``, spaces, ...)
    becomes one ``_``, so a name can never escape the dump directory (``../x`` → ``_x``).
    """
    safe = _UNSAFE_FILE_CHARS_RE.sub("_", name) or "_"
    return safe[:max_length]


def unique_name(base, taken):
    """Return ``base`` or ``base_<n>`` (smallest n ≥ 1) not in ``taken``; adds it to ``taken``.

    ``taken`` is a set that the caller keeps for the whole rewrite so names stay unique and the
    result depends only on the order of calls (deterministic).
    """
    name = base
    n = 0
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def function_arg_name(text, taken):
    """A FunctionDef argument name (``[a-z][a-z0-9_]*``) derived from ``text``, unique in
    ``taken`` (which it extends)."""
    name = _ARG_NAME_RE.sub("_", text.lower())
    if not name or not name[0].isalpha():
        name = "a_" + name
    return unique_name(name, taken)
