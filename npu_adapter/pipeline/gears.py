"""Gears: the fixed input shapes a cluster is compiled for (``dynamic_dims``, subgraph dims).

A :class:`GearTable` lists, for the dynamic inputs of one cluster, the shape of every input in
every gear. Two policies pick the gear for the runtime shapes:

* ``exact`` (the original's): the gear whose shapes equal the runtime shapes;
* ``pad_up`` (ours, opt-in): among the gears that cover the runtime shapes (static dims equal,
  dynamic dims at least as large), the one with the fewest padded elements, ties going to the
  first in the table.

The same rules are compiled into the graph by the ``insert_gears`` pass; this module is the Python
reference used for padding-waste accounting and tests.
"""

import dataclasses

from npu_adapter.errors import RewriteError

__all__ = ["GRAPH_INPUT_OPS", "GearTable", "POLICIES", "gear_table_from_trio", "not_a_graph_input",
           "parse_subgraph_gears", "wrong_getnext_count"]

POLICIES = ("exact", "pad_up")
GRAPH_INPUT_OPS = ("Placeholder", "PlaceholderWithDefault")
"""The ops ``input_shape`` may name with ``dynamic_node_type=1``."""


def not_a_graph_input(view, name):
    """The error for ``input_shape`` naming ``name``, which is no graph input of ``view``'s
    graph (``dynamic_node_type=1``); it lists the graph's inputs."""
    placeholders = sorted(view.names[j] for j, op in enumerate(view.ops)
                          if op in GRAPH_INPUT_OPS)
    return RewriteError(
        f"input_shape names {name!r}, which is not a Placeholder of the graph "
        f"(dynamic_node_type=1); placeholders: {', '.join(placeholders) or 'none'}",
        code="InvalidArgument", node=name)


def wrong_getnext_count(count):
    """The error for a graph with ``count`` (not one) ``IteratorGetNext`` under
    ``dynamic_node_type=0``."""
    return RewriteError(f"dynamic_node_type=0 needs exactly one IteratorGetNext, the graph has "
                        f"{count}", code="InvalidArgument")


@dataclasses.dataclass(frozen=True)
class GearTable:
    """Gear shapes of the dynamic inputs of one cluster.

    Attributes:
        names: the dynamic inputs (tensor names), in table order.
        patterns: per input, its declared dims with ``-1`` for dynamic ones.
        gears: per gear, a tuple of per-input shapes (tuples of ints).
    """

    names: tuple
    patterns: tuple
    gears: tuple

    def __post_init__(self):
        for shapes in self.gears:
            if len(shapes) != len(self.names):
                raise ValueError("every gear needs one shape per input")

    @property
    def flat_patterns(self):
        """All input dims concatenated, ``-1`` marking dynamic ones."""
        return tuple(d for dims in self.patterns for d in dims)

    def flat_gear(self, g):
        """All input dims of gear ``g`` concatenated."""
        return tuple(d for shape in self.gears[g] for d in shape)

    def elements(self, g):
        """Number of elements of all inputs in gear ``g``."""
        total = 0
        for shape in self.gears[g]:
            size = 1
            for d in shape:
                size *= d
            total += size
        return total

    def select(self, shapes, policy="exact"):
        """Index of the gear for ``shapes`` (one tuple per input) under ``policy``, or None."""
        shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        if policy == "exact":
            for g, gear in enumerate(self.gears):
                if gear == shapes:
                    return g
            return None
        if policy != "pad_up":
            raise ValueError(f"unknown gear policy {policy!r}; allowed: {POLICIES}")
        best = None
        for g, gear in enumerate(self.gears):
            if not self._covers(gear, shapes):
                continue
            cost = self.elements(g)
            if best is None or cost < best[0]:
                best = (cost, g)
        return None if best is None else best[1]

    def _covers(self, gear, shapes):
        for pattern, target, actual in zip(self.patterns, gear, shapes):
            if len(actual) != len(target):
                return False
            for p, t, a in zip(pattern, target, actual):
                if (p == -1 and a > t) or (p != -1 and a != t):
                    return False
        return True

    def describe(self, g):
        """``"data:1,1,40,20;label:1,20"``: gear ``g`` as text."""
        return ";".join(f"{name}:{','.join(str(d) for d in shape)}"
                        for name, shape in zip(self.names, self.gears[g]))

    def describe_all(self):
        """Every gear, numbered, as one line of text (used in error messages)."""
        return " | ".join(f"gear {g}: {self.describe(g)}" for g in range(len(self.gears)))


def gear_table_from_trio(trio, tensor_names):
    """The table of the whole-graph trio (``NpuConfig.dims_trio()``) for the given tensors.

    ``tensor_names`` lists, in the order of ``trio.inputs``, the tensor each entry stands for.
    """
    patterns = tuple(tuple(dims) for _, dims in trio.inputs)
    gears = []
    for values in trio.gears:
        it = iter(values)
        gears.append(tuple(tuple(next(it) if d == -1 else d for d in dims) for dims in patterns))
    return GearTable(tuple(tensor_names), patterns, tuple(gears))


def _parse_dims(text, what):
    try:
        return tuple(int(d) for d in text.split(","))
    except ValueError:
        raise RewriteError(f"{what}: {text!r} is not a comma-separated list of integers") \
            from None


def parse_subgraph_gears(input_shape, input_dims, node_name):
    """Parse the attrs set by ``util.set_op_input_tensor_multi_dims`` on ``node_name``.

    ``input_shape`` = ``"0:-1,-1,3;1:..."`` (input index: dims), ``input_dims`` =
    ``"480,480;960,960"`` (one gear per ``;``, one value per ``-1`` across all indexes).
    Returns ``(indexes, patterns, gears)``.
    """
    what = f"set_op_input_tensor_multi_dims on {node_name!r}"
    indexes = []
    patterns = []
    for entry in input_shape.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        index_text, sep, dims_text = entry.partition(":")
        if not sep or not index_text.strip().isdigit():
            raise RewriteError(f"{what}: input_shape entry {entry!r} must be "
                               "'<input index>:<dims>'")
        dims = _parse_dims(dims_text, what)
        if any(d < -1 for d in dims):
            raise RewriteError(f"{what}: dims {dims_text!r} may use -1 only for dynamic dims")
        indexes.append(int(index_text))
        patterns.append(dims)
    if not patterns:
        raise RewriteError(f"{what}: input_shape {input_shape!r} names no input")
    dynamic = sum(d == -1 for dims in patterns for d in dims)
    gears = []
    for gear_text in input_dims.split(";"):
        gear_text = gear_text.strip()
        if not gear_text:
            continue
        values = _parse_dims(gear_text, what)
        if len(values) != dynamic:
            raise RewriteError(
                f"{what}: gear {gear_text!r} has {len(values)} value(s) but input_shape has "
                f"{dynamic} -1 dim(s)")
        if any(v < 1 for v in values):
            raise RewriteError(f"{what}: gear {gear_text!r} has a dim below 1")
        it = iter(values)
        gears.append(tuple(tuple(next(it) if d == -1 else d for d in dims) for dims in patterns))
    if len(gears) < 2:
        raise RewriteError(f"{what}: input_dims {input_dims!r} needs at least 2 gears")
    return tuple(indexes), tuple(patterns), tuple(gears)
