"""What a pass is: ``PassBase``, ``PassResult`` and the ``PassContext`` it runs in.

The pass contract (docs/architecture.md, "The pass contract"): a pass is a pure function of
(GraphDef, PassContext). It never mutates its input; it returns a new GraphDef, or the input
object itself when it changes nothing. What a later pass needs travels in the graph (node
attributes such as ``_npu_adapter_placement`` and the original's ``_subgraphs``), so every pass
also runs on its own on any GraphDef that carries them. The context holds only read-only inputs.
The one thing handed on besides the graph is its index (a ``GraphView``, see ``PassResult.view``),
which a later pass would otherwise build again. Dumps, timing and invariant checks are
instruments around passes (``npu_adapter.pipeline.instruments``), never code inside them.
"""

import collections
import dataclasses
import typing

from npu_adapter.errors import GraphInvariantError

__all__ = ["PassResult", "PassContext", "PassBase", "PassOption", "FACTS"]


class PassResult(collections.namedtuple("PassResult", ["graph_def", "modified", "info",
                                                       "view"])):
    """Result of one pass.

    Attributes:
        graph_def: the output GraphDef: a new one, or the input object itself when the pass
            changed nothing. The pass keeps no reference to it.
        modified: True exactly when the output differs from the input.
        info: small dict of artifacts for logs and reports (counts, tables). Later passes must
            never depend on it.
        view: the index (:class:`~npu_adapter.graph.view.GraphView`) of ``graph_def`` that
            the next pass gets instead of building it again, or None. A pass sets it when its
            output has its input's structure (``view.rebind(out)``: it only annotated nodes);
            for an output that is the input, the input's index is handed on.
    """

    __slots__ = ()

    def __new__(cls, graph_def, modified, info=None, view=None):
        return super().__new__(cls, graph_def, bool(modified), dict(info or {}), view)


@dataclasses.dataclass(frozen=True)
class PassContext:
    """The read-only inputs of a pass besides the GraphDef (frozen: it carries nothing from
    one pass to the next).

    Attributes:
        config: the ``NpuConfig`` of the session (or of ``rewrite``); None gives the defaults
            with an ``NpuOptimizer`` entry present.
        backend: the ``Backend`` instance the graph is partitioned for, or a backend name;
            None gives the CPU reference.
        fetches: fetched tensor names of the run signature (``node:port``).
        targets: target op names of the run signature.
        feeds: fed tensor names of the run signature.
        graph_num: the ``<N>`` of the ``GeOp<N>_<k>`` names this rewrite creates. The original
            uses a process-wide counter; we take it from the caller so names are deterministic.
        op_support: the op support list to use; None gives the backend's for ``config``.

    The defaults are resolved when the context is made: ``config``, ``backend`` and
    ``op_support`` are never None afterwards.
    """

    config: typing.Any = None
    backend: typing.Any = None
    fetches: tuple = ()
    targets: tuple = ()
    feeds: tuple = ()
    graph_num: int = 1
    op_support: typing.Any = None

    def __post_init__(self):
        # (object.__setattr__: the one way to fill in a frozen dataclass's own fields.)
        if self.config is None:
            from npu_adapter.config import NpuConfig

            object.__setattr__(self, "config", NpuConfig.from_dict({}))
        if self.backend is None or isinstance(self.backend, str):
            from npu_adapter.backends import get_backend

            object.__setattr__(self, "backend", get_backend(self.backend or "cpu"))
        if self.op_support is None:
            object.__setattr__(self, "op_support", self.backend.op_support(self.config))
        for name in ("fetches", "targets", "feeds"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


@dataclasses.dataclass(frozen=True)
class PassOption:
    """Declaration of one pass option: its Python type, default and a one-line description."""

    type: type
    default: typing.Any
    doc: str
    choices: tuple = ()


class PassBase:
    """Base class of all passes.

    Subclasses set ``name`` (unique, snake_case) and ``options`` (dict option name →
    :class:`PassOption`), and implement :meth:`run`. Construct with keyword options; unknown
    options and values of the wrong type raise ``ValueError`` showing a correct call.

    The contract every pass follows (docs/architecture.md, "The pass contract"):

    * ``run(graph_def, ctx, view)`` is a pure function of its arguments: it never mutates
      ``graph_def`` (nor the context), and returns ``PassResult(out, modified, info)`` where
      ``out`` is a new GraphDef, or ``graph_def`` itself when nothing changes.
    * ``view`` is the index of ``graph_def`` (a :class:`~npu_adapter.graph.view.GraphView`:
      names, op types, edges, dtypes), built from it or handed on by the previous pass. A pass
      whose output only annotates its input returns ``PassResult(out, ..., view=view.rebind(out))``
      so the next pass does not index 100k nodes again.
    * What a later pass needs travels in ``out`` (node attributes, function bodies), never in
      the context, in ``info`` or in a cache: a pass reads its input graph and nothing else
      besides the context's read-only inputs.
    * Same input, same context: byte-identical output.
    """

    name: typing.ClassVar[str] = ""
    options: typing.ClassVar[dict] = {}
    # Leave alone the graphs the original adapter leaves alone (no NpuOptimizer, use_off_line
    # false, job ps/default, _NoNeedOptimize, already rewritten): such a pass returns its input
    # with ``info["skipped"]`` set to the reason, without running.
    gated: typing.ClassVar[bool] = False
    # Facts the input graph must carry (keys of FACTS), checked before the pass runs, so a pass
    # run alone on a graph that lacks them says which pass to run first.
    needs: typing.ClassVar[tuple] = ()

    def __init__(self, **options):
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError(
                f"pass {self.name!r} has no option(s) {unknown}; valid options: "
                f"{sorted(self.options) or 'none'} (e.g. {self._example()})")
        values = {}
        for key, spec in self.options.items():
            if key in options:
                values[key] = self._coerce(key, spec, options[key])
            else:
                values[key] = spec.default
        self.option_values = values
        self.explicit_options = {k: values[k] for k in sorted(options)}

    def _example(self):
        parts = [f"{k}={_format_value(s.default)}" for k, s in sorted(self.options.items())]
        return f"{self.name}({', '.join(parts)})" if parts else self.name

    def _coerce(self, key, spec, value):
        if spec.type is bool:
            ok = isinstance(value, bool)
        elif spec.type is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif spec.type is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        else:
            ok = isinstance(value, spec.type) or value is None
        if not ok:
            raise ValueError(
                f"pass {self.name!r} option {key!r} expects {spec.type.__name__}, got "
                f"{type(value).__name__} {value!r} (e.g. {self._example()})")
        if spec.choices and value not in spec.choices:
            raise ValueError(
                f"pass {self.name!r} option {key!r} must be one of {list(spec.choices)}, "
                f"got {value!r}")
        return value

    def option(self, key):
        """Value of option ``key`` (explicit or default)."""
        return self.option_values[key]

    def describe(self):
        """Canonical pipeline text of this pass with its explicit options (sorted)."""
        if not self.explicit_options:
            return self.name
        parts = [f"{k}={_format_value(v)}" for k, v in self.explicit_options.items()]
        return f"{self.name}({','.join(parts)})"

    def __repr__(self):
        return f"<pass {self.describe()}>"

    def requires(self, graph_def, ctx):
        """Precondition hook; raise GraphInvariantError to refuse the input.

        The default checks :attr:`needs`; subclasses that override it call ``super()``.
        """
        for fact in self.needs:
            describe, provider, present = FACTS[fact]
            if not present(graph_def):
                raise GraphInvariantError(
                    [f"the input graph has no {describe}: run {provider!r} before it"],
                    context=f"input of pass {self.name!r}")

    def ensures(self, graph_def, ctx):
        """Postcondition hook; raise GraphInvariantError when the output is wrong."""

    def run(self, graph_def, ctx, view):  # pragma: no cover - abstract
        """Rewrite ``graph_def`` (indexed by ``view``) without mutating it and return a
        :class:`PassResult`."""
        raise NotImplementedError

    def __call__(self, graph_def, ctx=None, view=None):
        """Run the pass alone: gate → requires → run → result type check → ensures.

        ``view``: the index of ``graph_def`` when the caller has one (the pass manager hands on
        the previous pass's ``PassResult.view``); None builds it.
        """
        ctx = ctx if ctx is not None else PassContext()
        if view is not None and view.graph_def is not graph_def:
            raise ValueError(f"pass {self.name!r} was given the index of another graph")
        if view is None:
            from npu_adapter.graph.view import GraphView

            view = GraphView(graph_def)
        if self.gated:
            from npu_adapter.pipeline.graph_config import gate_reason

            reason = gate_reason(view, ctx.config)
            if reason is not None:
                return PassResult(graph_def, False, {"skipped": reason}, view)
        self.requires(graph_def, ctx)
        result = self.run(graph_def, ctx, view)
        if not isinstance(result, PassResult):
            raise TypeError(
                f"pass {self.name!r} returned {type(result).__name__}; passes must return "
                "PassResult(graph_def, modified, info)")
        if result.view is None and result.graph_def is graph_def:
            result = result._replace(view=view)  # an unchanged graph keeps its index
        self.ensures(result.graph_def, ctx)
        return result


def _has_placements(graph_def):
    from npu_adapter.vocabulary import PLACEMENT_ATTR

    nodes = graph_def.node
    return not nodes or any(PLACEMENT_ATTR in node.attr for node in nodes)


# fact → (what it is, the pass that provides it, predicate on a GraphDef)
FACTS = {
    "placement": ("placement annotations (_npu_adapter_placement)", "mark_candidates",
                  _has_placements),
}


def _format_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if value and all(c.isascii() and (c.isalnum() or c in "_.-/") for c in value):
            return value
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return repr(value)


def require_no_violations(violations, pass_name, stage):
    """Raise GraphInvariantError for a non-empty violation list, naming the pass and stage."""
    if violations:
        raise GraphInvariantError([str(v) for v in violations], context=f"{stage} {pass_name!r}")
