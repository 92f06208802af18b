"""Timing, process and reporting utilities of the benchmark runner (``python -m bench``).

Nothing here imports TensorFlow, so the statistics, the table and the JSON schema can be used (and
tested) without it.

- :func:`measure` and :func:`interleave` time callables with warm-up calls and several
  repetitions. :func:`interleave` alternates its cases round by round (ABBA order), so machine
  noise hits every case alike; its samples are paired by round, and :func:`paired` turns two of
  them into per-round ratios or differences.
- :class:`Stats` is a sample: median, min, max, mean, and the values in measurement order.
- :func:`run_process` runs a fresh interpreter, polls its peak RSS (``VmHWM``) and returns what
  it printed; workers report their own final ``VmHWM`` (:func:`peak_rss_self_kb`).
- :func:`make_row`, :func:`format_table` and :func:`validate_report` define the rows every section
  returns, the printed table and the JSON document ``python -m bench`` writes.
"""

import dataclasses
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from npu_adapter.errors import NpuConfigError

__all__ = [
    "plain_session",
    "REPO_ROOT",
    "SCHEMA",
    "ProcessResult",
    "SectionResult",
    "Stats",
    "Target",
    "BenchContext",
    "autorange",
    "bench_env",
    "current_rss_kb",
    "fit_exponent",
    "format_table",
    "import_graph",
    "interleave",
    "machine_info",
    "make_row",
    "measure",
    "npu_config_proto",
    "paired",
    "pass_breakdown",
    "peak_rss_self_kb",
    "run_process",
    "summarize",
    "validate_report",
]

SCHEMA = "npu-adapter-bench/1"
"""Identifier of the JSON document layout (bump when a field changes meaning)."""

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The repository root (``bench`` and ``npu_adapter`` are importable from here)."""

# Variables every benchmark process gets. oneDNN's custom CPU ops are off as in the tests (their
# run-to-run differences would make the plain and the rewritten graph take different kernels).
_BENCH_ENV = {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
# Debug aids that would be timed as part of every rewrite: always off in benchmarks.
_DEBUG_ENV = ("NPU_ADAPTER_CHECK_PASSES",)


# --------------------------------------------------------------------------------------------
# Samples
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Stats:
    """A sample of one measurement, in measurement order (``values``), in one unit."""

    values: tuple

    @property
    def n(self) -> int:
        """Number of values."""
        return len(self.values)

    @property
    def median(self) -> float:
        """Median (mean of the two middle values for an even count)."""
        return float(statistics.median(self.values))

    @property
    def min(self) -> float:
        """Smallest value."""
        return float(min(self.values))

    @property
    def max(self) -> float:
        """Largest value."""
        return float(max(self.values))

    @property
    def mean(self) -> float:
        """Arithmetic mean."""
        return float(statistics.fmean(self.values))

    def scaled(self, factor: float) -> "Stats":
        """The same sample in another unit (every value times ``factor``)."""
        return Stats(tuple(v * factor for v in self.values))

    def to_json(self) -> dict:
        """``{"n", "median", "min", "max", "mean", "values"}`` (the JSON form)."""
        return {"n": self.n, "median": self.median, "min": self.min, "max": self.max,
                "mean": self.mean, "values": list(self.values)}

    @classmethod
    def from_json(cls, data: Mapping) -> "Stats":
        """Inverse of :meth:`to_json` (only ``values`` is read)."""
        return summarize(data["values"])


def summarize(values) -> Stats:
    """A :class:`Stats` of ``values`` (finite numbers, at least one)."""
    values = tuple(float(v) for v in values)
    if not values:
        raise NpuConfigError("values", [], "at least one measurement")
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise NpuConfigError("values", bad[0], "finite numbers")
    return Stats(values)


def paired(value: Stats, baseline: Stats, how: str = "ratio") -> Stats:
    """Per-round ``value / baseline`` (``how="ratio"``) or ``value - baseline`` (``"delta"``).

    Both samples must come from the same rounds of :func:`interleave` (same length, same order):
    pairing cancels slow drifts of the machine that a ratio of medians would keep.
    """
    if how not in ("ratio", "delta"):
        raise NpuConfigError("how", how, "'ratio' or 'delta'")
    if value.n != baseline.n:
        raise NpuConfigError("baseline", baseline.n, f"a sample of {value.n} values (paired)")
    if how == "delta":
        return summarize(v - b for v, b in zip(value.values, baseline.values))
    if any(b <= 0 for b in baseline.values):
        raise NpuConfigError("baseline", baseline.min, "positive values (divisors of a ratio)")
    return summarize(v / b for v, b in zip(value.values, baseline.values))


def pass_breakdown(timings_per_call, totals) -> Dict[str, float]:
    """Median seconds per pass over calls, plus ``(outside passes)``: total minus the passes."""
    names = list(dict.fromkeys(name for timings in timings_per_call for name, _ in timings))
    out = {}
    for name in names:
        out[name] = statistics.median(
            sum(t for n, t in timings if n == name) for timings in timings_per_call)
    outside = [total - sum(t for _, t in timings)
               for total, timings in zip(totals, timings_per_call)]
    out["(outside passes)"] = statistics.median(outside)
    return out


def fit_exponent(sizes: Sequence[float], times: Sequence[float]) -> float:
    """Least-squares slope of ``log(time)`` over ``log(size)``: 1.0 is linear scaling."""
    if len(sizes) != len(times) or len(sizes) < 2:
        raise NpuConfigError("sizes", list(sizes), "two or more sizes, one time per size")
    if any(s <= 0 for s in sizes) or any(t <= 0 for t in times):
        raise NpuConfigError("times", list(times), "positive sizes and times")
    xs = [math.log(s) for s in sizes]
    ys = [math.log(t) for t in times]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    if den == 0:
        raise NpuConfigError("sizes", list(sizes), "at least two different sizes")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def _check_counts(warmup, repeat, number):
    for option, value, low in (("warmup", warmup, 0), ("repeat", repeat, 1), ("number", number, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise NpuConfigError(option, value, f"an integer >= {low}")


def _timed_block(fn, number, collect):
    if collect:
        # Garbage left by earlier calls is collected here, outside the timed region, so one
        # case does not pay for another's; collections triggered inside the call still count.
        gc.collect()
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def measure(fn: Callable[[], object], *, warmup: int = 1, repeat: int = 5, number: int = 1,
            collect: bool = True) -> Stats:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeat`` samples of ``number`` calls.

    Each value is seconds per call (the block's time divided by ``number``).
    """
    _check_counts(warmup, repeat, number)
    for _ in range(warmup):
        fn()
    return summarize(_timed_block(fn, number, collect) for _ in range(repeat))


def interleave(cases: Mapping[str, Callable[[], object]], *, warmup: int = 1, repeat: int = 5,
               number: int = 1, collect: bool = True, budget: Optional[float] = None,
               min_repeat: int = 3) -> Dict[str, Stats]:
    """Time several cases round by round, alternating their order (ABBA).

    Every round runs each case once (a block of ``number`` calls); even rounds go in the given
    order, odd rounds in reverse, so a case is not always the one that runs right after another.
    ``warmup`` untimed rounds come first. With ``budget`` (seconds) and a warm-up, the number of
    timed rounds is cut so that they take about ``budget`` (estimated from the last warm-up
    round), but never below ``min_repeat`` nor above ``repeat``. Returns seconds per call per
    case; the values of all cases are paired by round (see :func:`paired`).
    """
    _check_counts(warmup, repeat, number)
    if not cases:
        raise NpuConfigError("cases", {}, "at least one case")
    names = list(cases)
    round_seconds = None
    for _ in range(warmup):
        start = time.perf_counter()
        for name in names:
            for _ in range(number):
                cases[name]()
        round_seconds = time.perf_counter() - start
    if budget is not None and round_seconds is not None:
        affordable = int(budget / max(round_seconds, 1e-9))
        repeat = max(min(min_repeat, repeat), min(repeat, affordable))
    samples = {name: [] for name in names}
    for r in range(repeat):
        for name in names if r % 2 == 0 else reversed(names):
            samples[name].append(_timed_block(cases[name], number, collect))
    return {name: summarize(samples[name]) for name in names}


def autorange(fn: Callable[[], object], *, min_time: float = 0.02, max_number: int = 10000) -> int:
    """Calls per sample so that one sample takes at least ``min_time`` seconds.

    Calls ``fn`` until the total time is known well enough (like ``timeit.Timer.autorange``, but
    with a cap, for callables whose first calls are slow).
    """
    number = 1
    while number < max_number:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - start >= min_time:
            break
        number *= 2
    return min(number, max_number)


# --------------------------------------------------------------------------------------------
# Run context and TensorFlow helpers (TensorFlow is imported on first use only)
# --------------------------------------------------------------------------------------------


class BenchContext:
    """What a section's ``run(ctx)`` gets: the mode (``quick``), a progress logger, and models
    loaded once per run (:meth:`model`)."""

    def __init__(self, quick: bool = False, log: Optional[Callable[[str], None]] = None):
        self.quick = bool(quick)
        self._log = log
        self._models = {}
        self.start = time.perf_counter()

    def log(self, message: str) -> None:
        """Progress line (stderr by default), prefixed with the seconds since the run began."""
        line = f"[{time.perf_counter() - self.start:7.1f}s] {message}"
        if self._log is not None:
            self._log(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def model(self, name: str):
        """``bench.models.get_model(name)``, loaded (or built) once per run and shared."""
        if name not in self._models:
            from bench import models

            self._models[name] = models.get_model(name)
        return self._models[name]

    def release(self, name: str) -> None:
        """Forget a loaded model (large GraphDefs need not stay in memory)."""
        self._models.pop(name, None)


def import_graph(graph_def):
    """A new ``tf.Graph`` holding ``graph_def`` (``tf.import_graph_def``, no name prefix)."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    return graph


def plain_session(**kwargs):
    """TensorFlow's own ``tf.compat.v1.Session`` (``graph=``, ``config=``), whatever the process
    did before: once a section imports ``npu_bridge`` (loop sinking does, as a training script
    would), every ``tf.compat.v1.Session`` with an ``NpuOptimizer`` entry rewrites, and a
    "plain" baseline built that way would be an NPU session too."""
    from npu_adapter.session import plain_session_class

    return plain_session_class()(**kwargs)


def npu_config_proto(options: Optional[Mapping] = None):
    """A ``ConfigProto`` whose ``NpuOptimizer`` entry holds ``options`` (default options: an
    entry with no parameters, which is full offload)."""
    from npu_adapter.config import NpuConfig

    return NpuConfig.from_dict(dict(options or {})).to_config_proto()


# --------------------------------------------------------------------------------------------
# Fresh processes
# --------------------------------------------------------------------------------------------


def bench_env(base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Environment of a benchmark process: ``base`` (default ``os.environ``) with TensorFlow's
    oneDNN ops off and its C++ logging quiet, debug checks off, and the repository importable."""
    env = dict(os.environ if base is None else base)
    env.update(_BENCH_ENV)
    for name in _DEBUG_ENV:
        env.pop(name, None)
    paths = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


@dataclasses.dataclass
class ProcessResult:
    """What :func:`run_process` saw: exit code, the child's peak RSS in KiB as polled from its
    ``VmHWM`` (None where ``/proc`` is missing), wall time from start to exit, and its output."""

    argv: List[str]
    returncode: int
    peak_rss_kb: Optional[int]
    wall_seconds: float
    stdout: str
    stderr: str

    def check(self) -> "ProcessResult":
        """Raise ``RuntimeError`` with the end of stderr if the process failed."""
        if self.returncode != 0:
            tail = "\n".join(self.stderr.strip().splitlines()[-20:])
            raise RuntimeError(
                f"benchmark process {' '.join(self.argv)!r} exited with {self.returncode}:\n"
                f"{tail}")
        return self

    def json(self):
        """The last non-empty stdout line, parsed as JSON (workers report that way)."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if not lines:
            raise RuntimeError(f"benchmark process {' '.join(self.argv)!r} printed nothing")
        return json.loads(lines[-1])


def _read_status_kb(path, field):
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def run_process(argv: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
                cwd=None, timeout: float = 600.0, poll: float = 0.02) -> ProcessResult:
    """Run ``argv`` to completion, polling its peak RSS (``VmHWM``) every ``poll`` seconds.

    ``VmHWM`` is the high-water mark of the child's own address space, so it never moves down
    and a late poll still sees every earlier peak; only growth in the last ``poll`` seconds
    before exit can be missed. For an exact figure the child should print its own ``VmHWM``
    last (see :func:`peak_rss_self_kb`), as the benchmark workers do.

    ``ru_maxrss`` from ``wait4`` is *not* used: on Linux a child's ``ru_maxrss`` starts at the
    parent's peak RSS (``exec`` records the high-water mark of the address space it replaces,
    which after ``vfork`` is the parent's), so a large runner would hide every child's figure.
    The child is killed after ``timeout`` seconds (``returncode`` is then negative).
    """
    argv = [str(a) for a in argv]
    env = bench_env() if env is None else dict(env)
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env,
                                cwd=str(cwd or REPO_ROOT))
        status_path = f"/proc/{proc.pid}/status"
        peak = None
        deadline = start + timeout
        while proc.poll() is None:
            hwm = _read_status_kb(status_path, "VmHWM:")
            if hwm is not None:
                peak = hwm if peak is None else max(peak, hwm)
            if time.perf_counter() > deadline:
                proc.kill()
                proc.wait()
                break
            time.sleep(poll)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    return ProcessResult(argv, proc.returncode, peak, wall, stdout, stderr)


def peak_rss_self_kb() -> int:
    """This process's peak RSS in KiB: ``VmHWM`` of ``/proc/self/status``.

    Where ``/proc`` is missing, ``getrusage`` — which on Linux would also count the parent's
    peak inherited at ``exec`` (see :func:`run_process`), hence only the fallback.
    """
    hwm = _read_status_kb("/proc/self/status", "VmHWM:")
    if hwm is not None:
        return hwm
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def current_rss_kb() -> int:
    """This process's current RSS in KiB (``VmRSS``; 0 where /proc is missing)."""
    return _read_status_kb("/proc/self/status", "VmRSS:") or 0


def machine_info() -> dict:
    """CPU model, CPU count (and how many this process may use), memory, OS, Python, load."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                    break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "memory_gb": mem_gb,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg")
        else None,
    }


# --------------------------------------------------------------------------------------------
# Rows, table, JSON document
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    """A stated goal: the row's ``on`` figure (``"ratio"``, ``"delta"`` or ``"value"``, its
    median) must be at most ``max``. ``text`` is how the table states it."""

    text: str
    on: str
    max: float

    def __post_init__(self):
        if self.on not in _TARGET_ON:
            raise NpuConfigError("on", self.on, f"one of {list(_TARGET_ON)}")

    def to_json(self) -> dict:
        """``{"text", "on", "max"}``."""
        return {"text": self.text, "on": self.on, "max": self.max}


_TARGET_ON = ("ratio", "delta", "value")


@dataclasses.dataclass
class SectionResult:
    """What a section's ``run(ctx)`` returns: table rows (see :func:`make_row`), notes for the
    reader (what was measured, caveats) and free-form ``details`` for the JSON."""

    rows: List[dict]
    notes: List[str] = dataclasses.field(default_factory=list)
    details: Dict[str, object] = dataclasses.field(default_factory=dict)


def make_row(case: str, metric: str, unit: str, value: Stats, *, baseline: Optional[Stats] = None,
             ratio: Optional[Stats] = None, delta: Optional[Stats] = None,
             target: Optional[Target] = None, details: Optional[dict] = None) -> dict:
    """One table row (a JSON object).

    ``value`` is the measured figure (the NPU side), ``baseline`` what it is compared with (plain
    TensorFlow, ``tf.import_graph_def``, ...), both in ``unit``. ``ratio`` and ``delta`` are the
    per-round ``value / baseline`` and ``value - baseline`` (see :func:`paired`); when omitted
    they are derived from ``value`` and ``baseline`` if both have the same length (paired rounds).
    ``met`` is filled from ``target`` (None without one).
    """
    if baseline is not None and value.n == baseline.n:
        if ratio is None and all(b > 0 for b in baseline.values):
            ratio = paired(value, baseline, "ratio")
        if delta is None:
            delta = paired(value, baseline, "delta")
    figures = {"value": value, "ratio": ratio, "delta": delta}
    met = None
    if target is not None:
        figure = figures[target.on]
        if figure is None:
            raise NpuConfigError("target", target.text, f"a row with a {target.on} figure",
                                 detail=f"row {case!r} / {metric!r} has none")
        met = figure.median <= target.max
    return {
        "case": case,
        "metric": metric,
        "unit": unit,
        "value": value.to_json(),
        "baseline": baseline.to_json() if baseline is not None else None,
        "ratio": ratio.to_json() if ratio is not None else None,
        "delta": delta.to_json() if delta is not None else None,
        "target": target.to_json() if target is not None else None,
        "met": met,
        "details": dict(details or {}),
    }


def _num(x):
    """Compact number: 3 significant digits, no exponent for everyday magnitudes."""
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    if a >= 0.01:
        return f"{x:.3f}"
    return f"{x:.2g}"


def _cell(stats, suffix="", sign=False):
    if stats is None:
        return "-"
    median = _num(stats["median"])
    if sign and stats["median"] >= 0:
        median = "+" + median
    if stats["n"] == 1:
        return f"{median}{suffix}"
    return f"{median}{suffix} [{_num(stats['min'])}, {_num(stats['max'])}]"


def format_table(sections: Mapping[str, Mapping]) -> str:
    """The text table of a report's sections (a plain-text grid, also valid Markdown)."""
    header = ["section", "case", "metric", "unit", "measured (NPU) median [min, max]",
              "baseline median [min, max]", "ratio or delta (paired)", "target", "status"]
    lines = [header]
    for name, section in sections.items():
        for row in section.get("rows", ()):
            target = row.get("target")
            status = "-" if row.get("met") is None else ("met" if row["met"] else "MISSED")
            if target and target["on"] == "delta":
                ratio_cell = _cell(row["delta"], f" {row['unit']}", sign=True)
            else:
                ratio_cell = _cell(row["ratio"], "x")
            lines.append([name, row["case"], row["metric"], row["unit"], _cell(row["value"]),
                          _cell(row["baseline"]), ratio_cell,
                          target["text"] if target else "-", status])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    out = []
    for k, line in enumerate(lines):
        out.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths)) + " |")
        if k == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


_STATS_KEYS = ("n", "median", "min", "max", "mean", "values")
_ROW_KEYS = ("case", "metric", "unit", "value", "baseline", "ratio", "delta", "target", "met",
             "details")
_TOP_KEYS = ("schema", "created", "command", "quick", "machine", "environment", "noise",
             "setup", "sections", "targets", "total_seconds")


def _check_stats(where, stats, optional):
    if stats is None:
        if optional:
            return
        raise NpuConfigError(where, None, "a statistics object")
    if not isinstance(stats, Mapping) or sorted(stats) != sorted(_STATS_KEYS):
        raise NpuConfigError(where, stats, f"an object with keys {list(_STATS_KEYS)}")
    values = stats["values"]
    if not isinstance(values, list) or len(values) != stats["n"] or not values:
        raise NpuConfigError(f"{where}.values", values, f"a non-empty list of n={stats['n']}")
    if not math.isclose(stats["median"], statistics.median(values), rel_tol=1e-9, abs_tol=1e-12) \
            or stats["min"] != min(values) or stats["max"] != max(values) \
            or not stats["min"] <= stats["median"] <= stats["max"]:
        raise NpuConfigError(where, {k: stats[k] for k in ("median", "min", "max")},
                             "median, min and max of its values")


def validate_report(doc: Mapping) -> None:
    """Check a report against the :data:`SCHEMA` layout; raise ``NpuConfigError`` naming the
    first bad field. Returns None when the document is valid."""
    if not isinstance(doc, Mapping):
        raise NpuConfigError("report", type(doc).__name__, "a JSON object")
    missing = [k for k in _TOP_KEYS if k not in doc]
    if missing:
        raise NpuConfigError("report", missing, f"an object with keys {list(_TOP_KEYS)}")
    if doc["schema"] != SCHEMA:
        raise NpuConfigError("schema", doc["schema"], SCHEMA)
    if not isinstance(doc["sections"], Mapping):
        raise NpuConfigError("sections", doc["sections"], "an object of sections")
    expected_targets = []
    for name, section in doc["sections"].items():
        for key in ("title", "seconds", "rows", "notes", "details"):
            if key not in section:
                raise NpuConfigError(f"sections.{name}", sorted(section), f"a '{key}' field")
        for i, row in enumerate(section["rows"]):
            where = f"sections.{name}.rows[{i}]"
            if sorted(row) != sorted(_ROW_KEYS):
                raise NpuConfigError(where, sorted(row), f"keys {list(_ROW_KEYS)}")
            _check_stats(f"{where}.value", row["value"], optional=False)
            for key in ("baseline", "ratio", "delta"):
                _check_stats(f"{where}.{key}", row[key], optional=True)
            target = row["target"]
            if target is None:
                if row["met"] is not None:
                    raise NpuConfigError(f"{where}.met", row["met"], "null without a target")
                continue
            if target.get("on") not in _TARGET_ON or row[target["on"]] is None:
                raise NpuConfigError(f"{where}.target", target, "a target on a figure of the row")
            if row["met"] is not (row[target["on"]]["median"] <= target["max"]):
                raise NpuConfigError(f"{where}.met", row["met"], "median <= target max")
            expected_targets.append((name, row["case"], row["metric"]))
    listed = [(t["section"], t["case"], t["metric"]) for t in doc["targets"]]
    if listed != expected_targets:
        raise NpuConfigError("targets", listed, "one entry per row with a target, in order")
