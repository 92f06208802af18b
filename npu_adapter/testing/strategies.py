"""Hypothesis strategies for random, valid TF1 graphs: :func:`graph_cases`.

A case is a TF1 script's graph in miniature: an input (a placeholder, a placeholder with a
default, a ``tf.data`` pipeline with a one-shot or initialisable iterator, or a constant), a
chain of ops drawn from the families of :data:`FAMILIES` (elementwise, MatMul, Conv2D in NHWC,
reductions, reshapes, transposes, concat, slices, seeded random ops and dropout, string and int64
ops that mix mode keeps on the host, an op no device takes, TF1 ``cond``/``while_loop`` in v1 or
v2 control flow, control dependencies, placeholders with defaults), TF1 ref and resource
variables, update steps (``assign_add``, a moving average, an update inside a ``cond``, a
GradientDescent/Momentum/Adam step on a loss), feeds of tensors in the middle of the graph, and
the dynamic-dims set-ups it supports. Every random op is seeded.

Valid means plain TensorFlow computes the same numbers on every run: a fetched tensor that reads
a variable updated in the same step is computed before that update (it is an input of the
update), or after it (under ``control_dependencies``); each variable has at most one update per
step. Anything else would race in plain TensorFlow too.

Hypothesis shrinks a failing case to fewer ops, earlier (simpler) choices in each list below and
smaller numbers; ``repr(case)`` is a script that reproduces it.
"""

from dataclasses import dataclass, field
from typing import FrozenSet, Optional, Tuple

try:
    from hypothesis import strategies as st
except ImportError as error:  # hypothesis is only needed to generate graphs
    raise ImportError("npu_adapter.testing.strategies needs hypothesis: pip install hypothesis "
                      "(or the project's test extra)") from error

from npu_adapter.testing.cases import FeedValue, GraphCase
from npu_adapter.testing.program import (
    Assign,
    Attr,
    Do,
    Index,
    Lambda,
    Program,
    Seq,
    With,
    call,
    ref,
)

__all__ = ["FAMILIES", "graph_cases"]

FAMILIES = (
    "elementwise", "matmul", "conv2d", "reduction", "reshape", "transpose", "concat", "slice",
    "random", "dropout", "string", "int64", "host_op", "cond", "while_loop",
    "control_dependency", "placeholder_with_default",
)
"""The op families :func:`graph_cases` draws from (all by default)."""

INPUTS = ("placeholder", "dataset_one_shot", "dataset_initializable", "placeholder_with_default",
          "constant")
"""The kinds of graph input."""

UPDATES = ("assign_add", "optimizer", "moving_average", "cond_update")
"""The kinds of update step."""

_UNARY = ("tf.math.tanh", "tf.nn.relu", "tf.math.sigmoid", "tf.math.abs", "tf.math.negative",
          "tf.math.square", "tf.math.sin", "tf.nn.softplus", "tf.nn.elu")
_BINARY = ("tf.math.add", "tf.math.subtract", "tf.math.multiply", "tf.math.maximum",
           "tf.math.minimum", "tf.math.squared_difference", "tf.math.divide_no_nan")
_REDUCE = ("tf.math.reduce_sum", "tf.math.reduce_mean", "tf.math.reduce_max",
           "tf.math.reduce_min")
_RANDOM = ("tf.random.normal", "tf.random.uniform", "tf.random.truncated_normal")
_INT64 = ("tf.math.floormod", "tf.math.add", "tf.math.multiply", "tf.math.maximum")
_OPTIMIZERS = (("GradientDescentOptimizer", (0.1,)), ("MomentumOptimizer", (0.1, 0.9)),
               ("AdamOptimizer", (0.01,)))
# Conv2D input layouts (height, width, channels) for a row of k features.
_IMAGE = {2: (1, 2, 1), 3: (1, 3, 1), 4: (2, 2, 1), 6: (2, 3, 1), 8: (2, 2, 2), 9: (3, 3, 1),
          12: (2, 2, 3), 16: (2, 2, 4)}
_WIDTHS = (4, 2, 3, 8)
_BATCHES = (2, 4)  # placeholder batch per step, cycled; the gears are these sizes
_DATASET_ROWS, _DATASET_BATCH = 10, 4  # batches of 4, 4, 2, ...: the same gears


@dataclass(frozen=True)
class _Tensor:
    """A float32 tensor of the program, with what the generator must know about it."""

    name: str
    shape: Tuple  # ints, or "B" (the batch), "2B" (twice the batch) for dynamic dims
    reads: FrozenSet[str] = frozenset()  # variables it reads
    deps: FrozenSet[str] = frozenset()  # tensors it is computed from (transitively)
    diff: FrozenSet[str] = frozenset()  # variables it has a gradient for
    feedable: bool = False  # a top-level op whose output is "<name>:0"


@dataclass
class _Update:
    name: str
    variables: FrozenSet[str]
    ancestors: FrozenSet[str]  # tensors computed before the update (its inputs, transitively)
    source: str


@dataclass
class _State:
    """What the program has bound so far."""

    seed: int
    control_flow: str
    statements: list = field(default_factory=list)
    pool: list = field(default_factory=list)
    variables: dict = field(default_factory=dict)  # name -> shape
    ref_variables: set = field(default_factory=set)
    updates: list = field(default_factory=list)
    features: set = field(default_factory=set)
    feeds: dict = field(default_factory=dict)  # tensor -> (shape, steps it is fed, dtype)
    init: list = field(default_factory=list)
    counter: int = 0
    flag: Optional[str] = None
    dataset: bool = False

    def next_seed(self):
        self.counter += 1
        return self.seed * 1000 + self.counter

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"


def _broadcast(a, b):
    """The broadcast shape of two shapes, or None."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def _static_shape(shape):
    """The shape as a placeholder declares it: dynamic dims are None."""
    return [d if isinstance(d, int) else None for d in shape]


def _merge(*tensors):
    reads = frozenset().union(*(t.reads for t in tensors))
    deps = frozenset().union(*(t.deps | {t.name} for t in tensors))
    diff = frozenset().union(*(t.diff for t in tensors))
    return reads, deps, diff


class _Generator:
    """Draws one case; every choice goes through ``draw`` so hypothesis can shrink it."""

    def __init__(self, draw, families, max_ops, steps):
        self.draw = draw
        self.families = families
        self.max_ops = max_ops
        self.steps = steps

    # ---- drawing helpers -------------------------------------------------------------------

    def number(self, low, high):
        """An integer of ``[low, high]`` made of drawn bits, shrinking towards ``low``.

        Not ``st.integers`` or ``st.sampled_from``: hypothesis (6.131 and later) draws some
        integers from the constants it finds in the source of every loaded module outside
        site-packages, so the graphs of a seed would change with any edit of the library and
        with the modules a test run happened to import before. Bits have no such pool."""
        count = high - low + 1
        value = 0
        for _ in range((count - 1).bit_length()):
            value = 2 * value + self.draw(st.booleans())
        return low + value % count

    def pick(self, options):
        return options[self.number(0, len(options) - 1)]

    def chance(self):
        return self.draw(st.booleans())

    def recent(self, candidates):
        """One of ``candidates``, the latest first (hypothesis shrinks towards index 0)."""
        return candidates[-1 - self.number(0, len(candidates) - 1)]

    # ---- emitting --------------------------------------------------------------------------

    def emit(self, statement):
        self.state.statements.append(statement)

    def tensor(self, expr, shape, inputs, *, diff=None, feedable=False, reads=frozenset(),
               name=None, named=True):
        """Bind a new tensor ``name = expr`` (``expr`` is a function of the name when the
        tensor is ``named``) computed from ``inputs``."""
        name = name or self.state.fresh("t")
        in_reads, deps, in_diff = _merge(*inputs)
        t = _Tensor(name, tuple(shape), in_reads | reads, deps,
                    in_diff if diff is None else diff, feedable)
        self.emit(Assign(name, expr(name) if named else expr))
        self.state.pool.append(t)
        return t

    def variable(self, shape, resource=None):
        """A new variable (TF1 ref or resource, drawn unless given) of ``shape``, seeded."""
        state = self.state
        name = state.fresh("v")
        resource = self.chance() if resource is None else resource
        if not resource:
            state.ref_variables.add(name)
        state.features.add("resource_variable" if resource else "ref_variable")
        self.emit(Assign(name, call("tf.compat.v1.Variable",
                                    call("seeded_array", state.next_seed(), list(shape)),
                                    name=name, use_resource=resource)))
        state.variables[name] = tuple(shape)
        return _Tensor(name, tuple(shape), frozenset({name}), frozenset(), frozenset({name}))

    def weight(self, shape):
        """An existing variable of ``shape`` or a new one."""
        same = [n for n, s in self.state.variables.items() if s == tuple(shape)]
        if same and self.chance():
            name = self.pick(sorted(same))
            return _Tensor(name, tuple(shape), frozenset({name}), frozenset(),
                           frozenset({name}))
        return self.variable(shape)

    def constant(self, shape):
        """A constant of ``shape`` (an operand, not part of the pool)."""
        return call("tf.constant", call("seeded_array", self.state.next_seed(), list(shape)))

    # ---- inputs ----------------------------------------------------------------------------

    def add_input(self):
        state = self.state
        kind = self.pick(INPUTS)
        width = self.pick(_WIDTHS)
        state.features.add(f"input_{kind}")
        shape = ("B", width)
        gears = ()
        if kind in ("placeholder", "placeholder_with_default"):
            if kind == "placeholder":
                self.emit(Assign("x", call("tf.compat.v1.placeholder", ref("tf.float32"),
                                           [None, width], name="x")))
                fed = tuple(range(self.steps))
            else:
                default = call("seeded_array", state.next_seed(), [_BATCHES[0], width])
                self.emit(Assign("x", call("tf.compat.v1.placeholder_with_default", default,
                                           [None, width], name="x")))
                fed = self.feed_pattern()
            if fed:
                state.feeds["x:0"] = (shape, fed, "float32")
            if fed == tuple(range(self.steps)):
                gears = (("placeholder", (
                    ("dynamic_dims", ";".join(str(b) for b in _BATCHES)),
                    ("dynamic_node_type", 1),
                    ("input_shape", f"x:-1,{width}"),
                )),)
        elif kind.startswith("dataset"):
            state.dataset = True
            data = call("seeded_array", state.next_seed(), [_DATASET_ROWS, width])
            dataset = call(Attr(call(Attr(call("tf.data.Dataset.from_tensor_slices", data),
                                          "batch"), _DATASET_BATCH), "repeat"))
            self.emit(Assign("dataset", dataset))
            if kind == "dataset_one_shot":
                self.emit(Assign("iterator", call("tf.compat.v1.data.make_one_shot_iterator",
                                                  ref("dataset"))))
            else:
                self.emit(Assign("iterator",
                                 call("tf.compat.v1.data.make_initializable_iterator",
                                      ref("dataset"))))
                self.emit(Assign("iterator_init", call(
                    "tf.group", Attr(ref("iterator"), "initializer"), name="iterator_init")))
                state.init.append("iterator_init")
            self.emit(Assign("x", call(Attr(ref("iterator"), "get_next"), name="batch")))
            gears = (("dataset", (
                ("dynamic_dims", ";".join(str(b) for b in _BATCHES)),
                ("dynamic_node_type", 0),
                ("input_shape", f"batch:-1,{width}"),
            )),)
        else:
            self.emit(Assign("x", call("tf.constant",
                                       call("seeded_array", state.next_seed(), [3, width]),
                                       name="x")))
            shape = (3, width)
        state.pool.append(_Tensor("x", shape))
        return gears

    def feed_pattern(self):
        """The steps a placeholder with a default is fed at: never, at step 1, or always
        (never with a dataset input, whose batch size at a step depends on what ran)."""
        if self.state.dataset:
            return ()
        return self.pick(((), (1,) if self.steps > 1 else (0,), tuple(range(self.steps))))

    # ---- ops -------------------------------------------------------------------------------

    def add_op(self):
        family = self.pick(self.families)
        made = getattr(self, "op_" + family)(self.recent(self.state.pool))
        if made is None:  # not applicable to that operand: an elementwise op instead
            family = "elementwise"
            self.op_elementwise(self.recent(self.state.pool))
        self.state.features.add(family)

    def op_elementwise(self, a):
        if self.chance():
            fn = self.pick(_UNARY)
            return self.tensor(lambda n: call(fn, ref(a.name), name=n), a.shape, [a],
                               feedable=True)
        fn = self.pick(_BINARY)
        partners = [t for t in self.state.pool if _broadcast(a.shape, t.shape) is not None]
        kind = self.pick(("tensor", "variable", "constant"))
        if kind == "variable" and a.shape and isinstance(a.shape[-1], int):
            b = self.weight((a.shape[-1],))
            return self.tensor(lambda n: call(fn, ref(a.name), ref(b.name), name=n),
                               a.shape, [a, b], feedable=True)
        if kind == "tensor" and partners:
            b = self.recent(partners)
            return self.tensor(lambda n: call(fn, ref(a.name), ref(b.name), name=n),
                               _broadcast(a.shape, b.shape), [a, b], feedable=True)
        value = self.pick((0.5, 2.0, -1.0))
        return self.tensor(lambda n: call(fn, ref(a.name), value, name=n), a.shape, [a],
                           feedable=True)

    def op_matmul(self, a):
        if len(a.shape) != 2:
            return None
        rows, k = a.shape
        kind = self.pick(("weight", "constant", "tensor", "gram"))
        if kind == "tensor":
            partners = [t for t in self.state.pool if len(t.shape) == 2 and t.shape[0] == k]
            if partners:
                b = self.recent(partners)
                return self.tensor(lambda n: call("tf.linalg.matmul", ref(a.name),
                                                  ref(b.name), name=n),
                                   (rows, b.shape[1]), [a, b], feedable=True)
        if kind == "gram":
            partners = [t for t in self.state.pool if len(t.shape) == 2 and t.shape[0] == rows]
            b = self.recent(partners)
            return self.tensor(lambda n: call("tf.linalg.matmul", ref(a.name), ref(b.name),
                                              transpose_a=True, name=n),
                               (k, b.shape[1]), [a, b], feedable=True)
        if not isinstance(k, int):
            return None
        width = self.pick(_WIDTHS)
        if kind == "constant":
            const = self.constant((k, width))
            return self.tensor(lambda n: call("tf.linalg.matmul", ref(a.name), const, name=n),
                               (rows, width), [a], feedable=True)
        w = self.weight((k, width))
        return self.tensor(lambda n: call("tf.linalg.matmul", ref(a.name), ref(w.name),
                                          name=n),
                           (rows, width), [a, w], feedable=True)

    def op_conv2d(self, a):
        if len(a.shape) != 2 or a.shape[1] not in _IMAGE:
            return None
        h, w, c = _IMAGE[a.shape[1]]
        kh, kw = self.pick((1, 2)), self.pick((1, 2))
        padding = self.pick(("SAME", "VALID"))
        if padding == "VALID" and (kh > h or kw > w):
            padding = "SAME"
        out_c = self.pick((1, 2, 3))
        oh, ow = (h, w) if padding == "SAME" else (h - kh + 1, w - kw + 1)
        f = self.weight((kh, kw, c, out_c))
        strides = self.pick((1, 2)) if padding == "SAME" else 1
        if strides == 2:
            oh, ow = (oh + 1) // 2, (ow + 1) // 2
        width = oh * ow * out_c

        def expr(n):
            image = call("tf.reshape", ref(a.name), [-1, h, w, c])
            conv = call("tf.nn.conv2d", image, ref(f.name), strides=strides, padding=padding)
            return call("tf.reshape", conv, [-1, width], name=n)

        return self.tensor(expr, (a.shape[0], width), [a, f], feedable=True)

    def op_reduction(self, a):
        fn = self.pick(_REDUCE)
        if len(a.shape) != 2:
            return self.tensor(lambda n: call(fn, ref(a.name), name=n), (), [a], feedable=True)
        axis = self.pick((1, 0, None))
        if axis == 1:
            return self.tensor(lambda n: call(fn, ref(a.name), axis=1, keepdims=True, name=n),
                               (a.shape[0], 1), [a], feedable=True)
        if axis == 0:
            return self.tensor(lambda n: call(fn, ref(a.name), axis=0, name=n), (a.shape[1],),
                               [a], feedable=True)
        return self.tensor(lambda n: call(fn, ref(a.name), name=n), (), [a], feedable=True)

    def op_reshape(self, a):
        if len(a.shape) != 2 or not isinstance(a.shape[1], int) or a.shape[1] % 2:
            return None
        rows = a.shape[0]
        doubled = 2 * rows if isinstance(rows, int) else "2" + rows
        if doubled == "22B":
            return None
        half = a.shape[1] // 2
        return self.tensor(lambda n: call("tf.reshape", ref(a.name), [-1, half], name=n),
                           (doubled, half), [a], feedable=True)

    def op_transpose(self, a):
        if len(a.shape) != 2:
            return None
        return self.tensor(lambda n: call("tf.transpose", ref(a.name), name=n),
                           (a.shape[1], a.shape[0]), [a], feedable=True)

    def op_concat(self, a):
        if len(a.shape) != 2 or not isinstance(a.shape[1], int):
            return None
        partners = [t for t in self.state.pool if len(t.shape) == 2 and t.shape[0] == a.shape[0]
                    and isinstance(t.shape[1], int)]
        b = self.recent(partners)
        return self.tensor(lambda n: call("tf.concat", [ref(a.name), ref(b.name)], axis=1,
                                          name=n),
                           (a.shape[0], a.shape[1] + b.shape[1]), [a, b], feedable=True)

    def op_slice(self, a):
        if len(a.shape) != 2 or not isinstance(a.shape[1], int) or a.shape[1] < 2:
            return None
        k = a.shape[1]
        if self.chance():
            return self.tensor(lambda n: call("tf.slice", ref(a.name), [0, 1], [-1, k - 1],
                                              name=n),
                               (a.shape[0], k - 1), [a], feedable=True)
        return self.tensor(lambda n: call("tf.gather", ref(a.name), [k - 1, 0], axis=1,
                                          name=n),
                           (a.shape[0], 2), [a], feedable=True)

    def op_random(self, a):
        fn = self.pick(_RANDOM)
        seed = self.state.next_seed() % 10007
        return self.tensor(
            lambda n: call("tf.math.add", ref(a.name),
                           call(fn, call("tf.shape", ref(a.name)), seed=seed), name=n),
            a.shape, [a], feedable=True)

    def op_dropout(self, a):
        seed = self.state.next_seed() % 10007
        rate = self.pick((0.5, 0.2))
        return self.tensor(call("tf.nn.dropout", ref(a.name), rate=rate, seed=seed), a.shape,
                           [a], named=False)

    def op_string(self, a):
        text = call("tf.strings.as_string", ref(a.name))
        if self.chance():
            return self.tensor(lambda n: call("tf.strings.to_number", text, name=n), a.shape,
                               [a], diff=frozenset(), feedable=True)
        return self.tensor(lambda n: call("tf.cast", call("tf.strings.length", text),
                                          ref("tf.float32"), name=n),
                           a.shape, [a], diff=frozenset(), feedable=True)

    def op_int64(self, a):
        fn = self.pick(_INT64)
        ints = call("tf.cast", call("tf.math.floor", call("tf.math.multiply", ref(a.name), 4.0)),
                    ref("tf.int64"))
        five = call("tf.constant", 5, ref("tf.int64"))
        return self.tensor(lambda n: call("tf.cast", call(fn, ints, five), ref("tf.float32"),
                                          name=n),
                           a.shape, [a], diff=frozenset(), feedable=True)

    def op_host_op(self, a):
        # lgamma has no device kernel in the op list: the graph is split in every mode.
        positive = call("tf.math.add", call("tf.math.abs", ref(a.name)), 1.0)
        return self.tensor(lambda n: call("tf.math.lgamma", positive, name=n), a.shape, [a],
                           feedable=True)

    def branch(self, a):
        """A branch body on ``a``: an elementwise op, or one with a variable or a tensor."""
        kind = self.pick(("unary", "variable", "tensor"))
        if kind == "variable" and a.shape and isinstance(a.shape[-1], int):
            v = self.weight((a.shape[-1],))
            return call("tf.math.multiply", ref(a.name), ref(v.name)), [v]
        partners = [t for t in self.state.pool if t.shape == a.shape and t.name != a.name]
        if kind == "tensor" and partners:
            b = self.recent(partners)
            return call("tf.math.subtract", ref(a.name), ref(b.name)), [b]
        return call(self.pick(_UNARY), ref(a.name)), []

    def predicate(self, a):
        """A cond predicate: from the data, or a boolean placeholder with a default."""
        if self.chance():
            state = self.state
            if state.flag is None:
                state.flag = "flag"
                self.emit(Assign("flag", call("tf.compat.v1.placeholder_with_default", True, [],
                                              name="flag")))
                fed = self.feed_pattern()
                if fed:
                    state.feeds["flag:0"] = ((), fed, "bool")
            return ref("flag"), []
        return call("tf.math.greater", call("tf.math.reduce_sum", ref(a.name)), 0.0), []

    def op_cond(self, a):
        pred, _ = self.predicate(a)
        true_body, true_in = self.branch(a)
        false_body, false_in = self.branch(a)
        return self.tensor(lambda n: call("tf.compat.v1.cond", pred, Lambda((), true_body),
                                          Lambda((), false_body), name=n),
                           a.shape, [a, *true_in, *false_in])

    def op_while_loop(self, a):
        times = self.pick((1, 2, 3))
        kind = self.pick(("unary", "variable", "tensor"))
        extra = []
        if kind == "variable" and a.shape and isinstance(a.shape[-1], int):
            v = self.weight((a.shape[-1],))
            extra.append(v)
            step = call("tf.math.tanh", call("tf.math.add", ref("acc"), ref(v.name)))
        else:
            partners = [t for t in self.state.pool if t.shape == a.shape and t.name != a.name]
            if kind == "tensor" and partners:
                b = self.recent(partners)
                extra.append(b)
                step = call("tf.math.tanh", call("tf.math.add", ref("acc"), ref(b.name)))
            else:
                step = call(self.pick(_UNARY), call("tf.math.multiply", ref("acc"), 0.5))
        cond = Lambda(("i", "acc"), call("tf.math.less", ref("i"), times))
        body = Lambda(("i", "acc"), Seq((call("tf.math.add", ref("i"), 1), step), is_tuple=True))
        return self.tensor(lambda n: Index(call("tf.compat.v1.while_loop", cond, body,
                                                [call("tf.constant", 0), ref(a.name)], name=n),
                                           1),
                           a.shape, [a, *extra])

    def op_control_dependency(self, a):
        others = [t for t in self.state.pool if t.name != a.name]
        if not others:
            return None
        before = self.recent(others)
        fn = self.pick(_UNARY)
        name = self.state.fresh("t")
        # Its value (and gradient) comes from ``a`` alone; ``before`` only runs first.
        t = _Tensor(name, a.shape, a.reads, _merge(a, before)[1], a.diff, feedable=True)
        self.emit(With(call("tf.control_dependencies", [ref(before.name)]),
                       (Assign(name, call(fn, ref(a.name), name=name)),)))
        self.state.pool.append(t)
        return t

    def op_placeholder_with_default(self, a):
        fed = self.feed_pattern()
        t = self.tensor(lambda n: call("tf.compat.v1.placeholder_with_default", ref(a.name),
                                       _static_shape(a.shape), name=n),
                        a.shape, [a])
        if fed:
            self.state.feeds[f"{t.name}:0"] = (a.shape, fed, "float32")
        return t

    # ---- updates ---------------------------------------------------------------------------

    def safe(self, tensor, updates):
        """Whether ``tensor`` reads no variable updated by ``updates``, except as an input of
        that update (then it is computed before the update)."""
        return all(not (tensor.reads & u.variables) or tensor.name in u.ancestors
                   for u in updates)

    def add_update(self):
        state = self.state
        # Training steps are what TF1 scripts run most: drawn twice as often as each other kind.
        kind = self.pick(UPDATES[:2] + UPDATES[1:])
        updated = frozenset().union(*(u.variables for u in state.updates))
        sources = [t for t in state.pool if self.safe(t, state.updates)]
        if kind == "optimizer":
            trainable = [t for t in sources if t.diff - updated]
            if trainable:
                a = self.recent(trainable)
            else:  # nothing to train yet: a layer with a new weight
                a = self.dense(self.recent(sources))
            return self.optimizer_step(a, sorted(a.diff - updated))
        return self.assign_add(self.recent(sources), kind, updated)

    def dense(self, a):
        """``a`` through a new variable: a MatMul, or a product with a bias-shaped one."""
        if len(a.shape) == 2 and isinstance(a.shape[1], int):
            w = self.variable((a.shape[1], self.pick(_WIDTHS)))
            return self.tensor(lambda n: call("tf.linalg.matmul", ref(a.name), ref(w.name),
                                              name=n),
                               (a.shape[0], w.shape[1]), [a, w], feedable=True)
        shape = (a.shape[-1],) if a.shape and isinstance(a.shape[-1], int) else ()
        v = self.variable(shape)
        return self.tensor(lambda n: call("tf.math.multiply", ref(a.name), ref(v.name), name=n),
                           a.shape, [a, v], feedable=True)

    def commit(self, update):
        """Keep ``update`` if every earlier update's source stays valid with it."""
        state = self.state
        by_name = {t.name: t for t in state.pool}
        for other in state.updates:
            if not self.safe(by_name[other.source], [update]):
                return False
        state.updates.append(update)
        return True

    def optimizer_step(self, a, var_list):
        """A training step on ``mean(square(a))``: ``minimize``, or, as a loss-scale optimizer
        does, gradients computed outside a ``cond`` that applies them. The loss may go through
        an op no device takes first (so the step is split between host and device)."""
        state = self.state
        if "host_op" in self.families and self.chance():
            a = self.op_host_op(a)
            state.features.add("host_op")
        loss = self.tensor(lambda n: call("tf.math.reduce_mean", call("tf.math.square",
                                                                      ref(a.name)), name=n),
                           (), [a], name=state.fresh("loss"))
        optimizer, args = self.pick(_OPTIMIZERS)
        name = state.fresh("train")
        update = _Update(name, frozenset(var_list), loss.deps | {loss.name}, a.name)
        if not self.commit(update):
            return
        state.features.add("optimizer")
        make = call(f"tf.compat.v1.train.{optimizer}", *args)
        variables = [ref(v) for v in var_list]
        # A v2 cond captures its inputs by value: only resource variables update inside it.
        in_cond = "cond" in self.families and (
            state.control_flow == "v1" or not set(var_list) & state.ref_variables) and \
            self.chance()
        if not in_cond:
            self.emit(Assign(name, call(Attr(make, "minimize"), ref(loss.name),
                                        var_list=variables, name=name)))
        else:
            state.features.add("optimizer_in_cond")
            optimizer_name, grads = name.replace("train", "optimizer"), \
                name.replace("train", "grads")
            self.emit(Assign(optimizer_name, make))
            self.emit(Assign(grads, call(Attr(ref(optimizer_name), "compute_gradients"),
                                         ref(loss.name), var_list=variables)))
            pred, _ = self.predicate(a)
            apply = call(Attr(ref(optimizer_name), "apply_gradients"), ref(grads))
            self.emit(Assign(name, call("tf.compat.v1.cond", pred, Lambda((), apply),
                                        Lambda((), call("tf.no_op")), name=name)))
        self.read_after(update)

    def assign_add(self, a, kind, updated):
        state = self.state
        if len(a.shape) == 2 and isinstance(a.shape[1], int):
            shape, delta = (a.shape[1],), call("tf.math.reduce_mean", ref(a.name), axis=0)
        elif len(a.shape) == 1 and isinstance(a.shape[0], int):
            shape, delta = a.shape, ref(a.name)
        else:
            shape, delta = (), call("tf.math.reduce_mean", ref(a.name))
        # A v2 cond captures its inputs by value: a ref variable cannot be updated inside it.
        resource_only = kind == "cond_update" and state.control_flow == "v2"
        existing = [n for n, s in state.variables.items() if s == shape and n not in updated
                    and not (resource_only and n in state.ref_variables)]
        if existing and self.chance():
            var = self.pick(sorted(existing))
        else:
            var = self.variable(shape, resource=True if resource_only else None).name
        if kind == "moving_average":
            delta = call("tf.math.multiply", call("tf.math.subtract", delta, ref(var)), 0.1)
        name = state.fresh("u")
        update = _Update(name, frozenset({var}), a.deps | {a.name}, a.name)
        if not self.commit(update):
            return
        state.features.add(kind)
        assign = call("tf.group", call("tf.compat.v1.assign_add", ref(var), delta))
        if kind == "cond_update":
            pred, _ = self.predicate(a)
            self.emit(Assign(name, call("tf.compat.v1.cond", pred, Lambda((), assign),
                                        Lambda((), call("tf.no_op")), name=name)))
        else:
            self.emit(Assign(name, call("tf.group", call("tf.compat.v1.assign_add", ref(var),
                                                         delta), name=name)))
        self.read_after(update)

    def read_after(self, update):
        """Maybe read an updated variable after the update, under control_dependencies."""
        if "control_dependency" not in self.families or not self.chance():
            return
        var = self.pick(sorted(update.variables))
        name = self.state.fresh("t")
        self.emit(With(call("tf.control_dependencies", [ref(update.name)]),
                       (Assign(name, call("tf.math.multiply", call(Attr(ref(var), "read_value")),
                                          2.0, name=name)),)))
        t = _Tensor(name, self.state.variables[var], frozenset({var}), frozenset(),
                    frozenset())
        # Computed after the update: its read is ordered, so it counts as safe for it.
        update.ancestors = update.ancestors | {name}
        self.state.pool.append(t)
        self.state.features.add("control_dependency")

    # ---- the case --------------------------------------------------------------------------

    def mid_graph_feed(self):
        """Maybe feed an intermediate tensor (not with a dataset: its batch is not known)."""
        if self.state.dataset or not self.chance():
            return
        candidates = [t for t in self.state.pool if t.feedable and t.name != "x"
                      and f"{t.name}:0" not in self.state.feeds]
        if not candidates:
            return
        t = self.recent(candidates)
        fed = self.pick((tuple(range(self.steps)), (1,) if self.steps > 1 else (0,)))
        self.state.feeds[f"{t.name}:0"] = (t.shape, fed, "float32")
        self.state.features.add("mid_graph_feed")

    def case(self):
        seed = self.number(0, 999)
        control_flow = self.pick(("v2", "v1"))
        self.state = state = _State(seed, control_flow)
        self.emit(Do(call("tf.compat.v1.set_random_seed", seed)))
        if control_flow == "v1":
            self.emit(Do(call("tf.compat.v1.disable_control_flow_v2")))
        gears = self.add_input()
        for _ in range(self.number(1, self.max_ops)):
            self.add_op()
        for _ in range(self.number(0, 2)):
            self.add_update()
        self.mid_graph_feed()
        fetches = self.fetches()
        feeds = self.feed_values()
        fed_inputs = {name for step in feeds for name, _ in step}
        if gears and gears[0][0] == "placeholder" and fed_inputs != {"x:0"}:
            gears = ()  # the original counts every fed tensor as an input of the gears
        if state.variables:
            state.features.add("variables")
        if state.features & {"cond", "while_loop", "cond_update", "optimizer_in_cond"}:
            state.features.add(f"control_flow_{control_flow}")
        return GraphCase(Program(tuple(state.statements)), tuple(fetches),
                         tuple(u.name for u in state.updates), tuple(state.init), feeds,
                         gears, tuple(sorted(state.features)))

    def fetches(self):
        """The sinks and a few more tensors, among those safe to fetch with the updates."""
        state = self.state
        safe = [t for t in state.pool if self.safe(t, state.updates)]
        used = frozenset().union(*(t.deps for t in state.pool))
        chosen = [t.name for t in safe if t.name not in used]
        extra = [t.name for t in safe if t.name not in chosen]
        if extra:
            for _ in range(2):
                if extra and self.chance():
                    chosen.append(extra.pop(self.number(0, len(extra) - 1)))
        if not chosen and not state.updates:
            chosen = [safe[-1].name]
        order = {t.name: i for i, t in enumerate(state.pool)}
        return sorted(set(chosen), key=order.get)

    def feed_values(self):
        state = self.state
        steps = []
        for step in range(self.steps):
            # The batch of the step: the fed input's, else the default's (the first batch).
            x_fed = step in state.feeds.get("x:0", ((), ()))[1]
            batch = _BATCHES[step % len(_BATCHES)] if x_fed else _BATCHES[0]
            values = []
            for name, (shape, fed, dtype) in sorted(state.feeds.items()):
                if step not in fed:
                    continue
                dims = tuple(batch if d == "B" else 2 * batch if d == "2B" else d
                             for d in shape)
                values.append((name, FeedValue(state.seed * 1000 + 500 + len(values) * 10
                                               + step, dims, dtype)))
            steps.append(tuple(values))
        return tuple(steps)


@st.composite
def _cases(draw, families, max_ops, steps):
    return _Generator(draw, families, max_ops, steps).case()


def graph_cases(families=FAMILIES, max_ops=8, steps=3):
    """A strategy of :class:`~npu_adapter.testing.cases.GraphCase`: random, valid TF1 graphs.

    Args:
        families: the op families to draw from (a subset of :data:`FAMILIES`).
        max_ops: the most ops after the input (updates and their losses come on top).
        steps: the runs each case makes; placeholders are fed batches of 2 and 4 in turn.
    """
    families = tuple(families)
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown or not families:
        raise ValueError(f"unknown op family {unknown[0]!r}; known: {', '.join(FAMILIES)}"
                         if unknown else "families is empty")
    if max_ops < 1 or steps < 1:
        raise ValueError("max_ops and steps must be at least 1")
    return _cases(families, max_ops, steps)
