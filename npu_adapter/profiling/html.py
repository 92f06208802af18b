"""``report.html`` of a profile: one self-contained page.

Sections: summary cards (steps, the first step's time apart from the mean of the steady steps
after it, host and cluster time), the training trace per step, the op types and the ops that took
the most time (bar chart and sortable tables), host versus cluster time per step, and links to
the per-step Chrome traces.
"""

from npu_adapter.profiling.analysis import iteration_summary
from npu_adapter.report.sortable import bar_chart_svg, escape, page, sortable_table

__all__ = ["render_profile_html"]


def _ms(value):
    return "–" if value is None else f"{value / 1000:,.3f} ms"


def _us(value):
    return "" if value is None else (f"{value:,.1f}", repr(float(value)))


def render_profile_html(profile):
    """The page of a :class:`~npu_adapter.profiling.profiler.ProfileData` snapshot (a dict with
    ``title``, ``settings``, ``steps``, ``op_statistics``, ``top_ops``, ``splits``,
    ``traces``)."""
    steps = profile["steps"]
    splits = profile["splits"]
    times = iteration_summary(steps)
    host = sum(s["host"] for s in splits)
    cluster = sum(s["cluster"] for s in splits)
    parts = [f"<h1>{escape(profile['title'])}</h1>",
             f'<p class="muted">{escape(profile["settings"])}</p>',
             '<div class="cards">',
             f'<div class="card"><b>{len(steps)}</b><span>steps profiled</span></div>',
             f'<div class="card" id="first-step"><b>{_ms(times["first"])}</b>'
             "<span>first step (warm-up: graph optimisation, kernel creation)</span></div>",
             f'<div class="card" id="steady-step"><b>{_ms(times["steady_mean"])}</b>'
             f'<span>mean iteration time of the {times["steady_steps"]} steps after it '
             f'(median {_ms(times["steady_median"])})</span></div>',
             f'<div class="card"><b>{cluster / 1000:,.3f} ms</b>'
             "<span>op time in clusters</span></div>",
             f'<div class="card"><b>{host / 1000:,.3f} ms</b><span>op time on the host</span>'
             "</div></div>"]
    parts.append("<h2>Training trace</h2>")
    parts.append(sortable_table(
        "steps", ["step", "FP start (us)", "BP end (us)", "iteration end (us)",
                  "iteration time (us)", "FP to BP (us)", "refresh (us)", "data aug bound (us)",
                  "data wait (us)", "fp point", "bp point"],
        [[s.step, _us(s.fp_start), _us(s.bp_end), _us(s.iteration_end), _us(s.iteration_time),
          _us(s.fp_to_bp), _us(s.refresh), _us(s.data_aug_bound), _us(s.data_wait), s.fp_op,
          s.bp_op] for s in steps], numeric=range(9)))
    types = profile["op_statistics"]
    parts.append("<h2>Op types by total time</h2>")
    parts.append('<div class="svgbox">' + bar_chart_svg(
        [(f"{where}: {op_type}", row[1]) for (where, op_type), row in types[:20]],
        unit=" us") + "</div>")
    total = sum(row[1] for _, row in types) or 1.0
    parts.append(sortable_table(
        "op_types", ["where", "op type", "count", "total (us)", "min (us)", "avg (us)",
                     "max (us)", "ratio (%)"],
        [[where, op_type, row[0], _us(row[1]), _us(row[2]), _us(row[3]), _us(row[4]),
          (f"{100 * row[1] / total:.2f}", repr(100 * row[1] / total))]
         for (where, op_type), row in types], numeric=range(2, 8)))
    top = profile["top_ops"]
    parts.append("<h2>Ops by total time</h2>")
    parts.append(sortable_table(
        "top_ops", ["where", "op", "type", "count", "total (us)", "avg (us)", "max (us)"],
        [[where, op, op_type, row[0], _us(row[1]), _us(row[1] / row[0]), _us(row[3])]
         for (where, op, op_type), row in top], numeric=range(3, 7)))
    parts.append("<h2>Host and cluster time per step</h2>")
    parts.append(sortable_table(
        "split", ["step", "host ops (us)", "cluster ops (us)", "runtime (us)", "wall (us)"],
        [[s["step"], _us(s["host"]), _us(s["cluster"]), _us(s["runtime"]), _us(s["wall"])]
         for s in splits], numeric=range(5)))
    if profile["traces"]:
        links = " ".join(f'<a href="{escape(path)}">{escape(path)}</a>'
                         for path in profile["traces"][:50])
        more = len(profile["traces"]) - 50
        parts.append("<h2>Timelines</h2><p>Chrome traces, one per step: open them in "
                     "<code>ui.perfetto.dev</code> or <code>chrome://tracing</code>.</p>"
                     f"<p>{links}{f' and {more} more' if more > 0 else ''}</p>")
    return page(profile["title"], "".join(parts))
