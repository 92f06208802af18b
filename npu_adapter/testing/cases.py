"""A generated graph case: the program that builds the graph, what each step runs and feeds, and
the dynamic-dims set-ups it supports; printed, it is a script that reproduces it.

Cases come from :func:`npu_adapter.testing.strategies.graph_cases`; they are plain data
(frozen, comparable), so hypothesis can shrink them and print the smallest one that fails.
"""

from dataclasses import dataclass
from typing import Tuple

from npu_adapter.testing.differential import OPTION_SETS, compare_sessions
from npu_adapter.testing.program import INDENT, Program, literal_source
from npu_adapter.testing.values import seeded_array

__all__ = ["FeedValue", "GraphCase"]


@dataclass(frozen=True)
class FeedValue:
    """A fed value, kept as the arguments of :func:`~npu_adapter.testing.seeded_array`."""

    seed: int
    shape: Tuple[int, ...]
    dtype: str = "float32"

    def value(self):
        """The array."""
        return seeded_array(self.seed, self.shape, self.dtype)

    def source(self):
        """The call that makes it, as Python source."""
        dtype = "" if self.dtype == "float32" else f", {literal_source(self.dtype)}"
        return f"seeded_array({self.seed}, {literal_source(list(self.shape))}{dtype})"


@dataclass(frozen=True)
class GraphCase:
    """One random graph and how to run it.

    Attributes:
        program: the statements of the build function (they bind every name below).
        fetches: names of the tensors compared at every step.
        targets: names of the operations run with them (updates, train ops).
        init: graph names of operations run once after the standard initialisers.
        feeds: per step, ``((tensor name, FeedValue), ...)``.
        gears: ``((kind, ((option, value), ...)), ...)``: the dynamic-dims options under which
            the graph is valid, per :attr:`~npu_adapter.testing.differential.OptionSet.gears`
            kind (``placeholder``, ``dataset``).
        features: the op families the graph holds (for statistics).
    """

    program: Program
    fetches: Tuple[str, ...]
    targets: Tuple[str, ...] = ()
    init: Tuple[str, ...] = ()
    feeds: Tuple[Tuple[Tuple[str, FeedValue], ...], ...] = ()
    gears: Tuple = ()
    features: Tuple[str, ...] = ()

    @property
    def steps(self):
        """The runs the case makes (one feed dict each)."""
        return len(self.feeds)

    def build(self):
        """Build the graph into the default graph; returns the fetches and the targets."""
        names = self.program.build()
        return [names[n] for n in self.fetches] + [names[n] for n in self.targets]

    def feed_dicts(self):
        """One ``{tensor name: value}`` per step."""
        return [{name: value.value() for name, value in step} for step in self.feeds]

    def option_sets(self, sets=OPTION_SETS):
        """``{name: options}`` of the sets of ``sets`` this graph can run under: a set with
        ``gears`` gets this graph's dynamic-dims options, or is left out when the graph has
        none of that kind."""
        gears = {kind: dict(options) for kind, options in self.gears}
        result = {}
        for option_set in sets:
            options = dict(option_set.options)
            if option_set.gears is not None:
                if option_set.gears not in gears:
                    continue
                options.update(gears[option_set.gears])
            result[option_set.name] = options
        return result

    def compare(self, option_sets):
        """:func:`~npu_adapter.testing.compare_sessions` of this graph under ``option_sets``
        (``{name: options}``)."""
        return compare_sessions(self.build, option_sets, steps=self.steps,
                                feeds=self.feed_dicts(), init=self.init)

    def build_source(self):
        """The build function as Python source."""
        returned = ", ".join(self.fetches + self.targets)
        return (f"def build():\n{self.program.source(INDENT)}"
                f"{INDENT}return [{returned}]\n")

    def reproducer(self, option_sets=None, comment=""):
        """A standalone script that runs this graph through ``assert_session_equivalent``
        under ``option_sets`` (``{name: options}``; default: every set it supports)."""
        option_sets = self.option_sets() if option_sets is None else option_sets
        sets = "".join(f"{INDENT * 2}{literal_source(name)}: {literal_source(options)},\n"
                       for name, options in option_sets.items())
        feeds = "".join(
            f"{INDENT * 2}{{" + ", ".join(f"{literal_source(name)}: {value.source()}"
                                          for name, value in step) + "},\n"
            for step in self.feeds)
        header = "".join(f"# {line}\n" for line in comment.splitlines())
        init = f"{INDENT}init={literal_source(list(self.init))},\n" if self.init else ""
        build = self.build_source()
        numpy = "import numpy as np\n" if "np." in build else ""
        return (
            f"{header}import os\n\n"
            'os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # reproducible CPU kernels\n\n'
            f"{numpy}import tensorflow as tf\n\n"
            "from npu_adapter.testing import assert_session_equivalent, seeded_array\n\n\n"
            f"{build}\n\n"
            "assert_session_equivalent(\n"
            f"{INDENT}build,\n"
            f"{INDENT}{{\n{sets}{INDENT}}},\n"
            f"{INDENT}steps={self.steps},\n"
            f"{INDENT}feeds=[\n{feeds}{INDENT}],\n"
            f"{init})\n")

    def __repr__(self):
        return self.reproducer()

    def _repr_pretty_(self, printer, cycle):
        """How hypothesis prints a falsifying case: the reproducer, not the fields."""
        for i, line in enumerate(self.reproducer().splitlines()):
            if i:
                printer.break_()
            printer.text(line)
