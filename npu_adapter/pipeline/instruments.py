"""Pass instruments: code that runs around passes (dumps, verification, timing, purity checks).

An instrument subclasses :class:`PassInstrument` and overrides any of its hooks. The
:class:`~npu_adapter.pipeline.manager.PassManager` calls, for each pass, in this order:

1. ``should_run(index, pass_, graph_def, ctx)`` of every instrument (the pass is skipped when any
   returns False; ``after_pass`` is then not called),
2. ``before_pass(index, pass_, graph_def, ctx)`` of every instrument, in list order,
3. the pass,
4. ``after_pass(index, pass_, graph_def, result, ctx)`` of every instrument, in list order,
   or ``on_error(index, pass_, graph_def, ctx, exc)`` when the pass (or an ``after_pass``) raised.

``enter_pipeline(ctx)`` and ``exit_pipeline(ctx, ok)`` bracket the whole run; ``exit_pipeline`` is
called for every instrument whose ``enter_pipeline`` ran, even when the pipeline fails.
"""

import os
import time

from npu_adapter.errors import GraphInvariantError, NpuAdapterError
from npu_adapter.graph.names import sanitize_filename
from npu_adapter.graph.serialize import to_bytes, to_text
from npu_adapter.graph.verify import verify_graph

__all__ = [
    "PassInstrument",
    "VerifyInstrument",
    "TimingInstrument",
    "InputUnchangedInstrument",
    "FactsInstrument",
    "DumpInstrument",
    "CaptureInstrument",
    "SkipPassesInstrument",
]


class PassInstrument:
    """Base class with no-op hooks (see the module docstring for the calling order)."""

    def enter_pipeline(self, ctx):
        """Called once before the first pass."""

    def exit_pipeline(self, ctx, ok):
        """Called once after the last pass (``ok`` is False when the pipeline failed)."""

    def should_run(self, index, pass_, graph_def, ctx):
        """Return False to skip ``pass_``."""
        return True

    def before_pass(self, index, pass_, graph_def, ctx):
        """Called before ``pass_`` runs on ``graph_def``."""

    def after_pass(self, index, pass_, graph_def, result, ctx):
        """Called after ``pass_`` returned ``result`` for input ``graph_def``."""

    def on_error(self, index, pass_, graph_def, ctx, exc):
        """Called when ``pass_`` failed on ``graph_def`` with ``exc``.

        The graph may be half-edited when the pass was allowed to edit it in place
        (``ctx.may_edit(graph_def)``): an instrument that needs the input intact keeps it
        (:meth:`keeps`)."""

    def keeps(self, graph_def):
        """Whether this instrument holds ``graph_def`` (or needs it as it is) beyond the pass
        about to run on it; then that pass must not edit it in place. True unless an
        instrument says otherwise, so an instrument written without this in mind stays
        correct."""
        return True


class VerifyInstrument(PassInstrument):
    """Checks graph invariants (``verify_graph``) on the input and after every pass."""

    def __init__(self, check_input=True):
        self.check_input = check_input
        self._checked_input = False

    def keeps(self, graph_def):
        return False  # reads each graph when it gets it

    def enter_pipeline(self, ctx):
        self._checked_input = False  # check the input of every run, also when reused

    def before_pass(self, index, pass_, graph_def, ctx):
        if self.check_input and not self._checked_input:
            self._checked_input = True
            violations = verify_graph(graph_def)
            if violations:
                raise GraphInvariantError([str(v) for v in violations],
                                          context=f"input of pass {pass_.name!r}")

    def after_pass(self, index, pass_, graph_def, result, ctx):
        if result.modified:
            violations = verify_graph(result.graph_def)
            if violations:
                raise GraphInvariantError([str(v) for v in violations],
                                          context=f"output of pass {pass_.name!r}")


class TimingInstrument(PassInstrument):
    """Records wall time per pass in ``timings`` (list of ``(pass name, seconds)``)."""

    def __init__(self):
        self.timings = []
        self._start = None

    def keeps(self, graph_def):
        return False

    def before_pass(self, index, pass_, graph_def, ctx):
        self._start = time.perf_counter()

    def after_pass(self, index, pass_, graph_def, result, ctx):
        self.timings.append((pass_.name, time.perf_counter() - self._start))

    def total(self):
        """Sum of the recorded pass times in seconds."""
        return sum(t for _, t in self.timings)


class InputUnchangedInstrument(PassInstrument):
    """Fails a pass that mutated an input GraphDef it was not allowed to edit
    (``PassContext.may_edit``), or that misreported ``modified`` (compares deterministic
    serialisations of the input before the pass and of its output)."""

    def __init__(self):
        self._before = None

    def keeps(self, graph_def):
        return False  # it keeps a serialisation, which the pass cannot touch

    def before_pass(self, index, pass_, graph_def, ctx):
        self._before = to_bytes(graph_def)

    def after_pass(self, index, pass_, graph_def, result, ctx):
        if not ctx.may_edit(graph_def) and to_bytes(graph_def) != self._before:
            raise GraphInvariantError(
                [f"pass {pass_.name!r} modified its input GraphDef in place"],
                context="input-unchanged check")
        changed = to_bytes(result.graph_def) != self._before
        if result.modified != changed:
            said = "modified=True but its output equals its input" if result.modified else \
                "modified=False but its output differs"
            raise GraphInvariantError([f"pass {pass_.name!r} reported {said}"],
                                      context="modified-flag check")


class FactsInstrument(PassInstrument):
    """Fails a pass whose recorded facts about its output (``PassContext.graph_facts``)
    disagree with the output graph itself: facts are shortcuts, never a second truth."""

    def keeps(self, graph_def):
        return False

    def after_pass(self, index, pass_, graph_def, result, ctx):
        from npu_adapter.vocabulary import PLACEMENT_ATTR, SUBGRAPH_MULTI_DIMS_SHAPE_ATTR

        facts = ctx.known_facts(result.graph_def) or {}
        out = result.graph_def
        wrong = []
        if "ops" in facts and list(facts["ops"]) != [node.op for node in out.node]:
            wrong.append("ops")
        if "names" in facts and list(facts["names"]) != [node.name for node in out.node]:
            wrong.append("names")
        if "body_names" in facts:
            functions = {f.signature.name: f for f in out.library.function}
            for fname, names in facts["body_names"].items():
                fdef = functions.get(fname)
                if fdef is None or list(names) != [node.name for node in fdef.node_def]:
                    wrong.append(f"body_names of {fname}")
                elif "scoped_functions" in facts and (fname in facts["scoped_functions"]) != any(
                        SUBGRAPH_MULTI_DIMS_SHAPE_ATTR in node.attr for node in fdef.node_def):
                    wrong.append(f"scoped_functions: {fname}")
        if facts.get("annotation_free") and (
                any(PLACEMENT_ATTR in node.attr for node in out.node)
                or any(PLACEMENT_ATTR in node.attr for f in out.library.function
                       for node in f.node_def)):
            wrong.append("annotation_free")
        if wrong:
            raise GraphInvariantError(
                [f"pass {pass_.name!r} recorded facts its output contradicts: "
                 + ", ".join(wrong)], context="graph-facts check")


class DumpInstrument(PassInstrument):
    """Writes ``<out_dir>/<run>/<NNN>_<pass>_before.pbtxt`` and ``..._after.pbtxt``.

    Text is deterministic (sorted attrs); names are sanitised so nothing escapes ``out_dir``.
    ``only_modified`` skips the after-dump of passes that changed nothing. When a pass fails, its
    input is still written (``..._before.pbtxt``) so the failure can be reproduced.
    """

    def __init__(self, out_dir, run_name="run", only_modified=False, transform=None):
        self.out_dir = out_dir
        self.run_name = sanitize_filename(run_name)
        self.only_modified = only_modified
        self.transform = transform  # optional GraphDef → GraphDef (e.g. strip Const contents)
        self.files = []

    def _dir(self):
        path = os.path.join(self.out_dir, self.run_name)
        os.makedirs(path, exist_ok=True)
        return path

    def _write(self, index, pass_, stage, graph_def):
        if self.transform is not None:
            graph_def = self.transform(graph_def)
        stem = f"{index:03d}_{sanitize_filename(pass_.name)}_{stage}"
        path = os.path.join(self._dir(), stem + ".pbtxt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(to_text(graph_def))
        self.files.append(path)

    def before_pass(self, index, pass_, graph_def, ctx):
        self._write(index, pass_, "before", graph_def)

    def after_pass(self, index, pass_, graph_def, result, ctx):
        if result.modified or not self.only_modified:
            self._write(index, pass_, "after", result.graph_def)


class CaptureInstrument(PassInstrument):
    """Keeps the input (``stage="before"``) or output (``"after"``) GraphDef of the named passes
    in ``graphs`` (pass name → GraphDef)."""

    def __init__(self, pass_names, stage="after"):
        if stage not in ("before", "after"):
            raise ValueError(f"stage must be 'before' or 'after', got {stage!r}")
        self.pass_names = set(pass_names)
        self.stage = stage
        self.graphs = {}

    def keeps(self, graph_def):
        # An output captured ("after") becomes the next pass's input: kept too.
        return any(g is graph_def for g in self.graphs.values())

    def before_pass(self, index, pass_, graph_def, ctx):
        if self.stage == "before" and pass_.name in self.pass_names:
            self.graphs[pass_.name] = graph_def

    def after_pass(self, index, pass_, graph_def, result, ctx):
        if self.stage == "after" and pass_.name in self.pass_names:
            self.graphs[pass_.name] = result.graph_def


class SkipPassesInstrument(PassInstrument):
    """Skips passes by name (to bisect a bad pass without editing the pipeline)."""

    def __init__(self, names):
        self.names = frozenset(names)

    def keeps(self, graph_def):
        return False

    def should_run(self, index, pass_, graph_def, ctx):
        return pass_.name not in self.names


def is_user_error(exc):
    """Errors about the user's input keep their type when they cross the pass manager."""
    return isinstance(exc, NpuAdapterError)
