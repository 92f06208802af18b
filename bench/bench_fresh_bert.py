"""Section ``fresh_bert``: the fresh-process rows of BERT-base, on request.

The same measurement as section ``fresh`` (:mod:`bench.bench_fresh`: first run and peak RSS,
one fresh interpreter per measurement, 5 per side, alternating), for the corpus model whose
processes take ~20 s each: its 10 processes alone take three and a half minutes, so a plain
``python -m bench`` leaves them out to stay under 10 minutes; ``--only fresh_bert`` or ``--all``
runs them (``--quick`` runs the small BERT instead).
"""

from bench import bench_fresh

__all__ = ["NAME", "TITLE", "models_needed", "run"]

NAME = "fresh_bert"
TITLE = "First-run latency and peak RSS in fresh processes, BERT-base (on request)"

FULL_MODELS = ("bert_encoder",)
QUICK_MODELS = ("bert_tiny",)


def models_needed(quick):
    """Models this section needs in the cache (the workers load them)."""
    return list(QUICK_MODELS if quick else FULL_MODELS)


def run(ctx):
    """The ``fresh`` rows of :func:`models_needed`."""
    return bench_fresh.run(ctx, models_needed(ctx.quick))
