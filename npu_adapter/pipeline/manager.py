"""``PassManager``: runs an ordered list of passes with instruments around each.

Failure reporting: an error about the user's input (any ``NpuAdapterError``: bad options, bad
graphs, rewrite refusals) keeps its type so callers can catch it as documented, and gains the
attributes ``pass_name`` and ``previous_passes`` plus a note naming them. Any other exception is a
bug in a pass and is wrapped in :class:`~npu_adapter.errors.PassError` (chained to the cause)
naming the pass and the passes that ran before it.
"""

import collections
import contextlib

from npu_adapter.errors import NpuAdapterError, PassError
from npu_adapter.pipeline.base import PassBase, PassContext
from npu_adapter.pipeline.instruments import PassInstrument
from npu_adapter.pipeline.text import format_pipeline, parse_pipeline

__all__ = ["PassManager", "PipelineResult"]


class PipelineResult(collections.namedtuple(
        "PipelineResult", ["graph_def", "modified", "results"])):
    """Outcome of a pipeline: final GraphDef, whether any pass changed it, and per-pass results
    as a list of ``(pass name, PassResult)`` (skipped passes are absent). The results keep no
    ``view``: the index a pass hands on goes to the next pass only."""

    __slots__ = ()

    def info(self, pass_name):
        """The ``info`` dict of the first run of ``pass_name`` (empty dict if it did not run)."""
        for name, result in self.results:
            if name == pass_name:
                return result.info
        return {}


class PassManager:
    """An ordered list of passes plus instruments.

    Example::

        pm = PassManager.from_pipeline("mark_candidates,cluster,encapsulate")
        out = pm.run(graph_def, PassContext(config=cfg))
    """

    def __init__(self, passes, instruments=()):
        passes = list(passes)
        for p in passes:
            if not isinstance(p, PassBase):
                raise TypeError(f"PassManager takes PassBase instances, got {type(p).__name__}")
        for inst in instruments:
            if not isinstance(inst, PassInstrument):
                raise TypeError(
                    f"instruments must be PassInstrument instances, got {type(inst).__name__}")
        self.passes = passes
        self.instruments = list(instruments)

    @classmethod
    def from_pipeline(cls, text, instruments=()):
        """Build from pipeline text (see :mod:`npu_adapter.pipeline.text`)."""
        return cls(parse_pipeline(text), instruments)

    def pipeline_text(self):
        """Canonical pipeline text of this manager's passes."""
        return format_pipeline(self.passes)

    __str__ = pipeline_text

    def run(self, graph_def, ctx=None, view=None):
        """Run every pass in order, each on the previous one's output; returns a
        :class:`PipelineResult`. ``graph_def`` is never modified (the pass contract).

        ``view``: the index of ``graph_def`` when the caller has one. Each pass gets the index
        its predecessor handed on (``PassResult.view``), or builds its own.
        """
        ctx = ctx if ctx is not None else PassContext()
        entered = []
        ok = False
        results = []
        current = graph_def
        try:
            for inst in self.instruments:
                inst.enter_pipeline(ctx)
                entered.append(inst)
            for index, pass_ in enumerate(self.passes):
                wanted = [i.should_run(index, pass_, current, ctx) for i in self.instruments]
                if not all(wanted):
                    continue
                try:
                    for inst in self.instruments:
                        inst.before_pass(index, pass_, current, ctx)
                    result = pass_(current, ctx, view)
                    for inst in self.instruments:
                        inst.after_pass(index, pass_, current, result, ctx)
                except Exception as exc:
                    for inst in self.instruments:
                        # An instrument failing here must never mask the pass's own error.
                        with contextlib.suppress(Exception):
                            inst.on_error(index, pass_, current, ctx, exc)
                    previous = [name for name, _ in results]
                    if isinstance(exc, NpuAdapterError):
                        exc.pass_name = getattr(exc, "pass_name", None) or pass_.name
                        exc.previous_passes = getattr(exc, "previous_passes", None) or previous
                        if hasattr(exc, "add_note"):
                            exc.add_note(f"(in pass {pass_.name!r}, after passes {previous})")
                        raise
                    raise PassError(pass_.name, previous, exc) from exc
                current, view = result.graph_def, result.view
                # Kept without the index: only the next pass reads it, and an index holds one
                # Python object per node of its graph.
                results.append((pass_.name, result._replace(view=None)))
            ok = True
        finally:
            for inst in entered:
                inst.exit_pipeline(ctx, ok)
        modified = any(r.modified for _, r in results)
        return PipelineResult(current, modified, results)
