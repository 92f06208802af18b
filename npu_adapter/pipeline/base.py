"""What a pass is: ``PassBase``, ``PassResult`` and the ``PassContext`` it runs in.

The pass contract (docs/architecture.md, "The pass contract"): a pass is a pure function of
(GraphDef, PassContext). It never mutates its input; it returns a new GraphDef, or the input
object itself when it changes nothing. What a later pass needs travels in the graph (node
attributes such as ``_npu_adapter_placement`` and the original's ``_subgraphs``), so every pass
also runs on its own on any GraphDef that carries them. The context holds only read-only inputs.
Dumps, timing and invariant checks are instruments around passes
(``npu_adapter.pipeline.instruments``), never code inside them.
"""

import collections
import dataclasses
import typing

from npu_adapter.errors import GraphInvariantError

__all__ = ["PassResult", "PassContext", "PassBase", "PassOption", "FACTS"]


class PassResult(collections.namedtuple("PassResult", ["graph_def", "modified", "info"])):
    """Result of one pass.

    Attributes:
        graph_def: the output GraphDef (the input object itself when nothing changed, or when
            the pass edited an input the pipeline owns, see ``PassContext.may_edit``). A new
            graph belongs to the run from then on: the pass keeps no reference to it.
        modified: True exactly when the output differs from the input (as it was before the
            pass ran).
        info: small dict of artifacts for logs and reports (counts, tables). Later passes must
            never depend on it.
    """

    __slots__ = ()

    def __new__(cls, graph_def, modified, info=None):
        return super().__new__(cls, graph_def, bool(modified), dict(info or {}))


def _entry_of(entries, graph_def):
    """The value recorded for this very ``graph_def`` object in ``(graph, value)`` pairs."""
    for known, value in entries:
        if known is graph_def:
            return value
    return None


@dataclasses.dataclass
class PassContext:
    """Everything a pass may read besides the GraphDef. Passes treat it as read-only.

    Attributes:
        config: the ``NpuConfig`` of the session (or of ``rewrite``); None means defaults with an
            ``NpuOptimizer`` entry present.
        backend: the ``Backend`` instance the graph is partitioned for.
        fetches: fetched tensor names of the run signature (``node:port``).
        targets: target op names of the run signature.
        feeds: fed tensor names of the run signature.
        graph_num: the ``<N>`` of the ``GeOp<N>_<k>`` names this rewrite creates. The original
            uses a process-wide counter; we take it from the caller so names are deterministic.
        op_support: the op support list to use (None: ask the backend).
    """

    config: typing.Any = None
    backend: typing.Any = None
    fetches: tuple = ()
    targets: tuple = ()
    feeds: tuple = ()
    graph_num: int = 1
    op_support: typing.Any = None
    _views: list = dataclasses.field(default_factory=list, repr=False, compare=False)
    _facts: list = dataclasses.field(default_factory=list, repr=False, compare=False)
    _owned: typing.Any = dataclasses.field(default=None, repr=False, compare=False)

    def may_edit(self, graph_def):
        """Whether the pass running now may edit ``graph_def``, its input, in place.

        True only while a :class:`~npu_adapter.pipeline.manager.PassManager` runs a pass on a
        graph the pipeline owns: one an earlier pass of the run made (or the caller handed over
        as its own copy), which no instrument keeps. Such a graph is read by nobody after the
        pass, so a pass that would copy it whole to change some attributes (a tenth of a second
        at 100k nodes) edits it instead. A pass that edits in place returns the input object with
        ``modified=True``, and calls :meth:`forget` first when its edit changes what a view or
        a recorded fact says of the graph (node ops, names or inputs).
        """
        return self._owned is not None and self._owned is graph_def

    def forget(self, graph_def):
        """Drop the view and the facts recorded for ``graph_def`` (edited in place since)."""
        self._views = [e for e in self._views if e[0] is not graph_def]
        self._facts = [e for e in self._facts if e[0] is not graph_def]

    def graph_view(self, graph_def):
        """A :class:`~npu_adapter.graph.GraphView` of ``graph_def``, reused across passes.

        Passes that only change attributes register a rebound view of their output
        (:meth:`register_view`), so the next pass does not index the graph again.
        """
        view = _entry_of(self._views, graph_def)
        if view is not None:
            return view
        from npu_adapter.graph.view import GraphView

        view = GraphView(graph_def)
        self.register_view(graph_def, view)
        return view

    def cached_view(self, graph_def):
        """The registered view of ``graph_def``, or None (never builds one)."""
        return _entry_of(self._views, graph_def)

    def register_view(self, graph_def, view):
        """Remember ``view`` as the view of ``graph_def`` (keeps the two most recent)."""
        self._views = [(graph_def, view)] + [e for e in self._views if e[0] is not graph_def][:1]

    def graph_facts(self, graph_def):
        """A dict of facts about ``graph_def`` (this very object) that the pass which wrote it
        recorded, for the next passes: ``"ops"``, the op type of every node in order,
        ``"names"``, the name of every node in order, ``"body_names"``, function name → the
        names of its body's nodes in order (for some functions of the library),
        ``"scoped_functions"``, those of them whose body carries a ``subgraph_multi_dims_scope``
        shape, and ``"annotation_free"``, True when no node or function body carries a
        placement annotation (what ``finalize`` removes).
        Empty for a graph nobody described; facts are only ever a shortcut for what the graph
        itself says (keeps the three most recent graphs)."""
        facts = self.known_facts(graph_def)
        if facts is None:
            facts = {}
            self._facts = [(graph_def, facts)] + self._facts[:2]
        return facts

    def known_facts(self, graph_def):
        """The facts recorded about ``graph_def``, or None (never records an empty entry)."""
        return _entry_of(self._facts, graph_def)

    def node_ops(self, graph_def):
        """The op type of every node of ``graph_def``, in order: from the recorded facts or a
        registered view when there is one, else read once from the NodeDefs and recorded."""
        return self._node_fact(graph_def, "ops", "op")

    def node_names(self, graph_def):
        """The name of every node of ``graph_def``, in order (as :meth:`node_ops`)."""
        return self._node_fact(graph_def, "names", "name")

    def _node_fact(self, graph_def, fact, field):
        """The fact ``fact`` (the view's list of the same name), each node's ``field``."""
        facts = self.graph_facts(graph_def)
        values = facts.get(fact)
        if values is None:
            view = self.cached_view(graph_def)
            values = facts[fact] = getattr(view, fact) if view is not None \
                else [getattr(node, field) for node in graph_def.node]
        return values

    def get_config(self):
        """The NpuConfig, building a default one (NpuOptimizer present) when none was given."""
        if self.config is None:
            from npu_adapter.config import NpuConfig

            self.config = NpuConfig.from_dict({})
        return self.config

    def get_backend(self):
        """The Backend instance (the CPU reference when none was given)."""
        if self.backend is None or isinstance(self.backend, str):
            from npu_adapter.backends import get_backend

            self.backend = get_backend(self.backend or "cpu")
        return self.backend

    def get_op_support(self):
        """The op support list: an explicit one, else the backend's for this config."""
        if self.op_support is None:
            self.op_support = self.get_backend().op_support(self.get_config())
        return self.op_support


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

    * ``run(graph_def, ctx)`` is a pure function of its arguments: it never mutates
      ``graph_def`` (nor the context), and returns ``PassResult(out, modified, info)`` where
      ``out`` is a new GraphDef, or ``graph_def`` itself when nothing changes.
    * What a later pass needs travels in ``out`` (node attributes, function bodies), never in
      the context, in ``info`` or in a cache: a pass reads its input graph and nothing else
      besides the context's read-only inputs.
    * A pass may index its input (``GraphView(graph_def)``) for itself; the index dies with it.
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

    def run(self, graph_def, ctx):  # pragma: no cover - abstract
        """Rewrite ``graph_def`` (not mutating it unless ``ctx.may_edit(graph_def)``) and
        return a :class:`PassResult`."""
        raise NotImplementedError

    def __call__(self, graph_def, ctx=None):
        """Run the pass alone: requires → run → result type check → ensures."""
        ctx = ctx if ctx is not None else PassContext()
        if self.gated:
            from npu_adapter.pipeline.graph_config import gate_reason

            reason = gate_reason(graph_def, ctx.get_config())
            if reason is not None:
                return PassResult(graph_def, False, {"skipped": reason})
        self.requires(graph_def, ctx)
        result = self.run(graph_def, ctx)
        if not isinstance(result, PassResult):
            raise TypeError(
                f"pass {self.name!r} returned {type(result).__name__}; passes must return "
                "PassResult(graph_def, modified, info)")
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
