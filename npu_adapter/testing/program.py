"""Graph programs: a small tree of Python statements that builds a TensorFlow graph, and prints as
the Python code that does the same.

A random graph must be rebuilt in a fresh ``tf.Graph`` for every session that runs it, and a
graph that fails must be shown to its reader as code to paste. Both readings come from one tree:
:meth:`Program.build` walks it calling TensorFlow, :meth:`Program.source` prints it. Nothing is
parsed or evaluated from text: names resolve to what the program bound, a lambda's parameters,
or attributes under the roots ``tf``, ``np`` and ``seeded_array``.

Example::

    program = Program((
        Assign("x", call("tf.compat.v1.placeholder", ref("tf.float32"), [None, 4], name="x")),
        Assign("y", call("tf.nn.relu", ref("x"), name="y")),
    ))
    print(program.source())        # x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    with tf.Graph().as_default():  # y = tf.nn.relu(x, name="y")
        names = program.build()    # {"x": <tf.Tensor 'x:0'>, "y": <tf.Tensor 'y:0'>}
"""

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Tuple

import numpy as np
import tensorflow as tf

from npu_adapter.testing.values import seeded_array

__all__ = [
    "Assign", "Attr", "Call", "Do", "Index", "Lambda", "Literal", "Program", "Ref", "Seq", "With",
    "call", "literal_source", "ref",
]

ROOTS = {"tf": tf, "np": np, "seeded_array": seeded_array}
"""What a dotted name may start with besides the program's own names."""

INDENT = "    "


# ---------------------------------------------------------------------------------- expressions

@dataclass(frozen=True)
class Ref:
    """A name: one the program bound, a lambda parameter, or a dotted path under :data:`ROOTS`."""

    path: str


@dataclass(frozen=True)
class Literal:
    """A Python literal: None, bool, int, float, str, or a list or tuple of literals."""

    value: Any


@dataclass(frozen=True)
class Call:
    """``func(*args, **kwargs)``; ``kwargs`` is a tuple of (name, expression) pairs."""

    func: Any
    args: Tuple = ()
    kwargs: Tuple = ()


@dataclass(frozen=True)
class Attr:
    """``obj.name``."""

    obj: Any
    name: str


@dataclass(frozen=True)
class Index:
    """``obj[index]`` with an integer index."""

    obj: Any
    index: int


@dataclass(frozen=True)
class Seq:
    """A list display, or a tuple display when ``is_tuple``."""

    items: Tuple
    is_tuple: bool = False


@dataclass(frozen=True)
class Lambda:
    """``lambda params: body``."""

    params: Tuple[str, ...]
    body: Any


def ref(path):
    """A :class:`Ref` (``ref("tf.float32")``, ``ref("t3")``)."""
    return Ref(path)


def _expr(value):
    """An expression node for ``value``: nodes stay, lists and tuples become :class:`Seq` (their
    items converted), anything else a :class:`Literal`."""
    if isinstance(value, (Ref, Literal, Call, Attr, Index, Seq, Lambda)):
        return value
    if isinstance(value, (list, tuple)):
        return Seq(tuple(_expr(v) for v in value), isinstance(value, tuple))
    return Literal(value)


def call(func, *args, **kwargs):
    """A :class:`Call` of ``func`` (a dotted name or an expression); arguments that are not
    expression nodes are literals (lists and tuples may mix both)."""
    func = Ref(func) if isinstance(func, str) else func
    return Call(func, tuple(_expr(a) for a in args),
                tuple((k, _expr(v)) for k, v in kwargs.items()))


# ---------------------------------------------------------------------------------- statements

@dataclass(frozen=True)
class Assign:
    """``name = value`` (``a, b = value`` when ``name`` holds commas)."""

    name: str
    value: Any


@dataclass(frozen=True)
class Do:
    """An expression statement."""

    value: Any


@dataclass(frozen=True)
class With:
    """``with context: body``."""

    context: Any
    body: Tuple


@dataclass(frozen=True)
class Program:
    """A sequence of statements (see the module docstring)."""

    body: Tuple

    def build(self, names=None):
        """Run the statements in the current default graph; return the names they bound."""
        scope = dict(names or {})
        _run(self.body, scope)
        return scope

    def source(self, indent=""):
        """The statements as Python source, one statement per line, each line ``indent``-ed."""
        return "".join(_statement_source(s, indent) for s in self.body)


# ---------------------------------------------------------------------------------- building

def _resolve(path, scope):
    head, *rest = path.split(".")
    if head in scope:
        value = scope[head]
    elif head in ROOTS:
        value = ROOTS[head]
    else:
        raise NameError(f"program name {head!r} is not bound")
    for part in rest:
        value = getattr(value, part)
    return value


def _evaluate(node, scope):
    if isinstance(node, Ref):
        return _resolve(node.path, scope)
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Call):
        func = _evaluate(node.func, scope)
        args = [_evaluate(a, scope) for a in node.args]
        kwargs = {k: _evaluate(v, scope) for k, v in node.kwargs}
        return func(*args, **kwargs)
    if isinstance(node, Attr):
        return getattr(_evaluate(node.obj, scope), node.name)
    if isinstance(node, Index):
        return _evaluate(node.obj, scope)[node.index]
    if isinstance(node, Seq):
        items = [_evaluate(i, scope) for i in node.items]
        return tuple(items) if node.is_tuple else items
    if isinstance(node, Lambda):
        def function(*values):
            if len(values) != len(node.params):
                raise TypeError(f"lambda takes {len(node.params)} arguments, got {len(values)}")
            return _evaluate(node.body, {**scope, **dict(zip(node.params, values))})
        return function
    raise TypeError(f"not a program expression: {type(node).__name__}")


def _run(statements, scope):
    for statement in statements:
        if isinstance(statement, Assign):
            value = _evaluate(statement.value, scope)
            names = [n.strip() for n in statement.name.split(",")]
            if len(names) == 1:
                scope[names[0]] = value
            else:
                value = list(value)
                if len(value) != len(names):
                    raise ValueError(f"cannot unpack {len(value)} values into {statement.name}")
                scope.update(zip(names, value))
        elif isinstance(statement, Do):
            _evaluate(statement.value, scope)
        elif isinstance(statement, With):
            with contextlib.ExitStack() as stack:
                stack.enter_context(_evaluate(statement.context, scope))
                _run(statement.body, scope)
        else:
            raise TypeError(f"not a program statement: {type(statement).__name__}")


# ---------------------------------------------------------------------------------- printing

def literal_source(value):
    """Python source for a literal: ``None``, ``True``, ``3``, ``0.5``, ``"text"``, ``[1, 2]``,
    ``(1,)``; floats print as the shortest text that reads back as the same float."""
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            return f'float("{value}")'
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, tuple):
        inner = ", ".join(literal_source(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(literal_source(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal_source(k)}: {literal_source(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(f"no literal source for a {type(value).__name__}")


def expression_source(node):
    """Python source of an expression node."""
    if isinstance(node, Ref):
        return node.path
    if isinstance(node, Literal):
        return literal_source(node.value)
    if isinstance(node, Call):
        parts = [expression_source(a) for a in node.args]
        parts += [f"{k}={expression_source(v)}" for k, v in node.kwargs]
        return f"{_operand_source(node.func)}({', '.join(parts)})"
    if isinstance(node, Attr):
        return f"{_operand_source(node.obj)}.{node.name}"
    if isinstance(node, Index):
        return f"{_operand_source(node.obj)}[{node.index}]"
    if isinstance(node, Seq):
        inner = ", ".join(expression_source(i) for i in node.items)
        if node.is_tuple:
            return f"({inner},)" if len(node.items) == 1 else f"({inner})"
        return f"[{inner}]"
    if isinstance(node, Lambda):
        params = ", ".join(node.params)
        return f"lambda {params}: {expression_source(node.body)}" if params else \
            f"lambda: {expression_source(node.body)}"
    raise TypeError(f"not a program expression: {type(node).__name__}")


def _operand_source(node):
    text = expression_source(node)
    return f"({text})" if isinstance(node, Lambda) else text


def _statement_source(statement, indent):
    if isinstance(statement, Assign):
        return f"{indent}{statement.name} = {expression_source(statement.value)}\n"
    if isinstance(statement, Do):
        return f"{indent}{expression_source(statement.value)}\n"
    if isinstance(statement, With):
        body = "".join(_statement_source(s, indent + INDENT) for s in statement.body)
        return f"{indent}with {expression_source(statement.context)}:\n{body}"
    raise TypeError(f"not a program statement: {type(statement).__name__}")
