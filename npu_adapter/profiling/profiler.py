"""``SessionProfiler``: profiles the runs of one TensorFlow session and writes the results.

The session calls it around every run::

    profiler = SessionProfiler(npu_config)          # once per session (cheap when off)
    profiler.register_graph(result.graph_def)       # each rewritten graph it installs
    options, run_metadata = profiler.before_run()   # (None, None) when not profiling
    sess.run(..., options=options, run_metadata=run_metadata)
    profiler.after_run(run_metadata)                # writes this step's files
    profiler.close()                                # when the session closes

Output, one directory per profiling period (as the device's profiler names them)::

    {output}/PROF_{NNNNNN}_{YYYYMMDDhhmmssmmm}_{XXXXXXXX}/
        device_{id}/data/step_{N}.step_stats.pb      TensorFlow's StepStats of each step
        mindstudio_profiler_output/
            timeline/msprof_step_{N}.json            Chrome trace of each step
            step_trace_{stamp}.csv / .json           training trace, one row per step
            op_summary_{stamp}.csv                   every op execution
            op_statistic_{stamp}.csv                 time per op type (host / cluster)
            top_ops_{stamp}.csv                      ops by total time
            host_vs_cluster_{stamp}.csv              op time on the host and in clusters
            report.html                              all of it on one page
            README.txt                               what the files are, and the options

Per-step files are written after each run; the aggregates every 50 steps and at
:meth:`SessionProfiler.close`. With ``storage_limit`` the oldest per-step files are deleted when
the directory would grow beyond it.
"""

import contextlib
import csv
import hashlib
import io
import itertools
import json
import os
import threading
import time

from npu_adapter.datadump.writer import write_atomic
from npu_adapter.errors import NpuConfigError
from npu_adapter.profiling import analysis
from npu_adapter.profiling.html import render_profile_html
from npu_adapter.profiling.settings import (
    ProfilingSettings,
    active_api_profiler,
    static_profiling_settings,
)
from npu_adapter.profiling.trace import (
    CLUSTER_OP,
    HOST,
    ClusterIndex,
    chrome_trace,
    events_from_step_stats,
)
from npu_adapter.progress import ProgressLog

__all__ = ["FLUSH_EVERY", "ProfileWriter", "SessionProfiler"]

FLUSH_EVERY = 50
_SEQUENCE = itertools.count(1)
_TOP_OPS = 100


def _csv(header, rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def _f(value):
    return "" if value is None else f"{value:.3f}"


class ProfileWriter:
    """The files of one profiling period (one ``PROF_...`` directory)."""

    def __init__(self, settings, epoch=None, progress=None):
        self.settings = settings
        now = time.gmtime(epoch) if epoch is not None else time.localtime()
        millis = 0 if epoch is not None else int(time.time() * 1000) % 1000
        self.stamp = time.strftime("%Y%m%d%H%M%S", now) + f"{millis:03d}"
        sequence = next(_SEQUENCE)
        seed = f"{os.getpid() if epoch is None else 0}:{self.stamp}:{sequence}".encode()
        letters = "".join(chr(ord("A") + b % 26) for b in hashlib.sha256(seed).digest()[:8])
        self.root = os.path.join(settings.output, f"PROF_{sequence:06d}_{self.stamp}_{letters}")
        self.out_dir = os.path.join(self.root, "mindstudio_profiler_output")
        self.raw_dir = os.path.join(self.root, f"device_{settings.device_id}", "data")
        self.steps = []
        self.splits = []
        self.op_rows = []
        self.totals = {}
        self.traces = []
        self._per_step_files = []
        self._bytes = 0
        self._on_disk = {}  # path -> size of every file written and not aged out
        self.progress = progress or ProgressLog("profiling", self.root, interval=0)
        os.makedirs(self.out_dir, exist_ok=True)
        os.makedirs(self.raw_dir, exist_ok=True)

    def _write(self, path, content, per_step=False):
        data = content if isinstance(content, bytes) else content.encode("utf-8")
        write_atomic(path, [data])
        self._count(path, len(data))
        self._bytes += len(data)
        if per_step:
            self._per_step_files.append((path, len(data)))
            self._enforce_storage_limit()
        return len(data)

    def _enforce_storage_limit(self):
        limit = self.settings.options.storage_limit_mb
        if not limit:
            return
        while self._bytes > limit * 1024 * 1024 and len(self._per_step_files) > 2:
            path, size = self._per_step_files.pop(0)
            with contextlib.suppress(OSError):
                os.unlink(path)
            self._bytes -= size
            self._count(path, None)

    def _count(self, path, size):
        """Keep the progress line's counts to the files on disk: ``size`` of a file (re)written
        at ``path``, or None when it was removed. The aggregates are rewritten in place."""
        before = self._on_disk.pop(path, None)
        if size is not None:
            self._on_disk[path] = size
        self.progress.add(files=(size is not None) - (before is not None),
                          nbytes=(size or 0) - (before or 0))

    def add_step(self, step, events, step_stats, previous_end):
        """Record one step; returns the step's end time (µs since the epoch)."""
        origin = self.steps_origin(events)
        options = self.settings.options
        trace = analysis.step_trace(events, step, origin, previous_end, options.fp_point,
                                    options.bp_point)
        self.steps.append(trace)
        split = analysis.time_split(events)
        split["step"] = step
        self.splits.append(split)
        for (key, value) in analysis.op_totals(events).items():
            entry = self.totals.get(key)
            if entry is None:
                self.totals[key] = list(value)
            else:
                entry[0] += value[0]
                entry[1] += value[1]
                entry[2] = min(entry[2], value[2])
                entry[3] = max(entry[3], value[3])
        for e in events:
            if e.kind in (CLUSTER_OP, HOST):
                self.op_rows.append([self.settings.device_id, e.cluster or "host", step, e.op,
                                     e.op_type, "AI_CORE" if e.kind == CLUSTER_OP else "HOST_CPU",
                                     _f(e.start - origin), _f(e.duration), e.thread, e.node])
        name = f"msprof_step_{step}.json"
        text = json.dumps(chrome_trace(events, step, origin), separators=(",", ":"))
        self._write(os.path.join(self.out_dir, "timeline", name), text, per_step=True)
        self._write(os.path.join(self.raw_dir, f"step_{step}.step_stats.pb"),
                    step_stats.SerializeToString(deterministic=True), per_step=True)
        self.traces.append(f"timeline/{name}")
        self.progress.add(step=step)
        return trace.iteration_end + origin

    def steps_origin(self, events):
        """The time origin of the profile: its first event."""
        if not hasattr(self, "_origin"):
            self._origin = min((e.start for e in events), default=0.0)
        return self._origin

    def flush(self):
        """(Re)write every aggregate file and the HTML report."""
        stamp = self.stamp
        out = self.out_dir
        self._write(os.path.join(out, f"step_trace_{stamp}.csv"),
                    _csv(analysis.StepTrace.CSV_HEADER, [s.csv_row() for s in self.steps]))
        self._write(os.path.join(out, f"step_trace_{stamp}.json"),
                    json.dumps({"steps": [s.to_json() for s in self.steps],
                                "iteration_time": analysis.iteration_summary(self.steps)},
                               indent=1))
        self._write(os.path.join(out, f"op_summary_{stamp}.csv"), _csv(
            ("Device_id", "Model Name", "Iteration ID", "Op Name", "OP Type", "Task Type",
             "Task Start Time(us)", "Task Duration(us)", "Thread ID", "Node Name"),
            self.op_rows))
        statistics = self.op_statistics()
        total = sum(row[1] for _, row in statistics) or 1.0
        self._write(os.path.join(out, f"op_statistic_{stamp}.csv"), _csv(
            ("Core Type", "OP Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
             "Max Time(us)", "Ratio(%)"),
            [["AI_CORE" if where == "cluster" else "HOST_CPU", op_type, row[0], _f(row[1]),
              _f(row[2]), _f(row[3]), _f(row[4]), f"{100 * row[1] / total:.3f}"]
             for (where, op_type), row in statistics]))
        top = self.top_ops()
        total_ops = sum(row[1] for row in self.totals.values()) or 1.0
        self._write(os.path.join(out, f"top_ops_{stamp}.csv"), _csv(
            ("Model Name", "Op Name", "OP Type", "Count", "Total Time(us)", "Avg Time(us)",
             "Max Time(us)", "Ratio(%)"),
            [[where, op, op_type, row[0], _f(row[1]), _f(row[1] / row[0]), _f(row[3]),
              f"{100 * row[1] / total_ops:.3f}"] for (where, op, op_type), row in top]))
        rows = [[s["step"], _f(s["host"]), _f(s["cluster"]), _f(s["runtime"]), _f(s["wall"])]
                for s in self.splits]
        rows.append(["total"] + [_f(sum(s[key] for s in self.splits))
                                 for key in ("host", "cluster", "runtime", "wall")])
        self._write(os.path.join(out, f"host_vs_cluster_{stamp}.csv"), _csv(
            ("Iteration ID", "Host Op Time(us)", "Cluster Op Time(us)", "Runtime Time(us)",
             "Wall Time(us)"), rows))
        self._write(os.path.join(out, "report.html"), render_profile_html(self.snapshot()))
        self._write(os.path.join(out, "README.txt"), self.readme())

    def op_statistics(self):
        """Op types by total time: ``[((where, op type), [count, total, min, avg, max])]``."""
        stats = analysis.op_statistics(self.totals)
        return sorted(stats.items(), key=lambda kv: (-kv[1][1], kv[0]))

    def top_ops(self):
        """The ops with the most total time: ``[((where, op, type), [count, total, min, max])]``."""
        return sorted(self.totals.items(), key=lambda kv: (-kv[1][1], kv[0]))[:_TOP_OPS]

    def snapshot(self):
        """The data :func:`~npu_adapter.profiling.html.render_profile_html` renders."""
        return {"title": f"Profile {os.path.basename(self.root)}",
                "settings": self.describe_settings(), "steps": list(self.steps),
                "op_statistics": self.op_statistics(), "top_ops": self.top_ops(),
                "splits": list(self.splits), "traces": list(self.traces)}

    def describe_settings(self):
        """One line: where the options came from and what they are."""
        options = json.dumps(self.settings.options.as_dict(), sort_keys=True)
        level = f", level {self.settings.level}" if self.settings.level else ""
        return f"profiling options from {self.settings.source}{level}: {options}"

    def readme(self):
        """The text of ``README.txt``."""
        return "\n".join([
            "npu-adapter profile (CPU reference)", "",
            self.describe_settings(), "",
            "timeline/msprof_step_N.json   Chrome trace of step N (Perfetto, chrome://tracing)",
            "step_trace_*.csv/.json        training trace: FP start, BP end, iteration time",
            "                              (.json: the first step apart, the steady mean)",
            "op_summary_*.csv              every op execution (AI_CORE: in a cluster)",
            "op_statistic_*.csv            time per op type",
            "top_ops_*.csv                 ops by total time",
            "host_vs_cluster_*.csv         op time on the host and in clusters per step",
            "report.html                   all of the above on one page",
            "../device_*/data/*.pb         TensorFlow StepStats of each step", "",
            "The CPU has no AI Core counters: aic_metrics, l2 and the sampling frequencies are",
            "validated and recorded here, but collect nothing.", ""])


def _split_iterations(events, iterations):
    """Split one run's events into ``iterations`` consecutive iterations (loop sinking): at the
    occurrences of the earliest cluster op that ran exactly ``iterations`` times."""
    if iterations <= 1:
        return [events]
    counts = {}
    for e in events:
        if e.kind == CLUSTER_OP:
            counts.setdefault((e.cluster, e.op), []).append(e)
    candidates = [runs for runs in counts.values() if len(runs) == iterations]
    if not candidates:
        return [events]
    marker = min(candidates, key=lambda runs: runs[0].start)
    bounds = [e.start for e in sorted(marker, key=lambda e: e.start)][1:]
    parts = [[] for _ in range(iterations)]
    for e in events:
        k = sum(e.start >= b for b in bounds)
        parts[k].append(e)
    return parts


class SessionProfiler:
    """Profiling for one TensorFlow session (see the module docstring).

    Args:
        config: the session's :class:`~npu_adapter.config.NpuConfig` (or None).
        environ: the environment (default ``os.environ``), read once, here.
        device_id: the device id of ``device_{id}`` (default from the dump settings' rule:
            ``session_device_id``, ``ASCEND_DEVICE_ID``, ``DEVICE_ID``, 0).
        stream: where progress lines go (default stderr).
        progress_interval: seconds between progress lines (default: the environment's).
    """

    def __init__(self, config=None, environ=None, device_id=None, stream=None,
                 progress_interval=None):
        from npu_adapter.datadump.settings import device_id_from

        environ = os.environ if environ is None else environ
        if device_id is None:
            device_id = device_id_from(config, environ) if config is not None else 0
        self.device_id = device_id
        self._static = static_profiling_settings(config, environ, device_id)
        epoch = environ.get("SOURCE_DATE_EPOCH", "")
        self._epoch = int(epoch) if epoch.strip().isdigit() else None
        self._stream = stream
        self._interval = progress_interval
        self._lock = threading.Lock()
        self.index = ClusterIndex()
        self._writer = None
        self._writer_key = None
        self._writers = []
        self._step = 0
        self._previous_end = None
        self._closed = False

    @property
    def statically_enabled(self):
        """True when the session options or ``PROFILING_MODE`` turned profiling on."""
        return self._static is not None

    def register_graph(self, graph_def):
        """Learn the cluster functions of a rewritten graph the session runs (needed to place
        the ops of clusters that run as functions, e.g. with ``npu_adapter_isolate_clusters``)."""
        with self._lock:
            self.index.add_graph(graph_def)

    def settings(self):
        """The :class:`ProfilingSettings` in force now, or None.

        Raises:
            NpuConfigError: a ``Profiler`` is started while the session options or
                ``PROFILING_MODE`` profile too.
        """
        api = active_api_profiler()
        if api is None:
            return self._static
        if self._static is not None:
            raise NpuConfigError(
                "profiling_mode + Profiler", self._static.source,
                "profile with either the session option profiling_mode / environment variable "
                "PROFILING_MODE or npu_bridge.profiler.profiler.Profiler, not both")
        return ProfilingSettings.from_api_profiler(api, self.device_id)

    def before_run(self):
        """``(RunOptions, RunMetadata)`` asking TensorFlow for a full trace of the next run, or
        ``(None, None)`` when not profiling."""
        settings = self.settings()
        if settings is None:
            return None, None
        from tensorflow.core.protobuf import config_pb2

        options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
        return options, config_pb2.RunMetadata()

    def _writer_for(self, settings):
        key = (settings.output, settings.source, settings.options)
        if self._writer is None or self._writer_key != key:
            if self._writer is not None:
                self._writer.flush()
                self._writer.progress.close()
            progress = ProgressLog("profiling", "", interval=self._interval, stream=self._stream)
            self._writer = ProfileWriter(settings, self._epoch, progress)
            progress.where = self._writer.root
            self._writer_key = key
            self._writers.append(self._writer)
        return self._writer

    def after_run(self, run_metadata, step=None, iterations=1):
        """Record the run whose ``run_metadata`` :meth:`before_run` handed out (or the caller's
        own, filled by the same run). ``step`` numbers it (default: runs profiled so far);
        with loop sinking, ``iterations`` splits the run into that many steps."""
        if run_metadata is None or not run_metadata.HasField("step_stats"):
            return
        settings = self.settings()
        if settings is None:
            return
        with self._lock:
            writer = self._writer_for(settings)
            events = events_from_step_stats(run_metadata.step_stats, self.index)
            first = self._step if step is None else int(step)
            parts = _split_iterations(events, int(iterations))
            for k, part in enumerate(parts):
                self._previous_end = writer.add_step(first + k, part, run_metadata.step_stats
                                                     if k == 0 else _empty_stats(),
                                                     self._previous_end)
            self._step = first + len(parts)
            if len(writer.steps) % FLUSH_EVERY == 0:
                writer.flush()

    @property
    def output_dirs(self):
        """The ``PROF_...`` directories written so far."""
        return [w.root for w in self._writers]

    def close(self):
        """Write the aggregate files of the current period. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._writer.flush()
                self._writer.progress.close()


def _empty_stats():
    from tensorflow.core.framework import step_stats_pb2

    return step_stats_pb2.StepStats()
