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

Instruments observe: they never change a graph, and they may keep any graph they are given
(passes never mutate their input; docs/architecture.md, "The pass contract").
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
        """Called when ``pass_`` failed on ``graph_def`` with ``exc``."""


class VerifyInstrument(PassInstrument):
    """Checks graph invariants (``verify_graph``) on the input and after every pass, and that
    the index a pass hands on (``PassResult.view``) is the index of its output."""

    def __init__(self, check_input=True):
        self.check_input = check_input
        self._checked_input = False

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
        if result.view is not None and _index_differs(result.view, result.graph_def):
            raise GraphInvariantError(
                [f"pass {pass_.name!r} handed on an index that is not its output's"],
                context="index check")


def _index_differs(view, graph_def):
    """Whether ``view`` is not an index of ``graph_def`` (compared with a fresh one)."""
    from npu_adapter.graph.view import GraphView

    if view.graph_def is not graph_def:
        return True
    fresh = GraphView(graph_def)
    if any(getattr(view, key) != getattr(fresh, key)
           for key in ("names", "ops", "data_inputs", "control_inputs", "nodes")):
        return True
    # (A rebound index shares what was worked out so far: the dtypes and the graph's
    # settings must still hold.)
    if "node_settings" in view.cache:
        from npu_adapter.pipeline.graph_config import node_settings

        if view.cache["node_settings"] != node_settings(fresh):
            return True
    return any(view.output_types(i) != fresh.output_types(i) for i in range(len(fresh)))


class TimingInstrument(PassInstrument):
    """Records wall time per pass in ``timings`` (list of ``(pass name, seconds)``)."""

    def __init__(self):
        self.timings = []
        self._start = None

    def before_pass(self, index, pass_, graph_def, ctx):
        self._start = time.perf_counter()

    def after_pass(self, index, pass_, graph_def, result, ctx):
        self.timings.append((pass_.name, time.perf_counter() - self._start))

    def total(self):
        """Sum of the recorded pass times in seconds."""
        return sum(t for _, t in self.timings)


class InputUnchangedInstrument(PassInstrument):
    """Fails a pass that mutated its input GraphDef, or that misreported ``modified``
    (compares deterministic serialisations of the input before the pass, of the input after
    it and of its output)."""

    def __init__(self):
        self._before = None

    def before_pass(self, index, pass_, graph_def, ctx):
        self._before = to_bytes(graph_def)

    def after_pass(self, index, pass_, graph_def, result, ctx):
        if to_bytes(graph_def) != self._before:
            raise GraphInvariantError(
                [f"pass {pass_.name!r} modified its input GraphDef in place"],
                context="input-unchanged check")
        changed = to_bytes(result.graph_def) != self._before
        if result.modified != changed:
            said = "modified=True but its output equals its input" if result.modified else \
                "modified=False but its output differs"
            raise GraphInvariantError([f"pass {pass_.name!r} reported {said}"],
                                      context="modified-flag check")


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

    def should_run(self, index, pass_, graph_def, ctx):
        return pass_.name not in self.names


def is_user_error(exc):
    """Errors about the user's input keep their type when they cross the pass manager."""
    return isinstance(exc, NpuAdapterError)
