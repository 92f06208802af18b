"""Distributed benchmark: TensorFlow collective all-reduce throughput between processes on
loopback, and the step time of a small model at 1, 2 and 4 processes.

Usage (from the repository root; about 3 minutes on 2 cores)::

    python -m bench.bench_distributed                  # everything
    python -m bench.bench_distributed --quick          # 2 processes, 1 and 4 MB, fewer steps
    python -m bench.bench_distributed --json out.json  # default bench/results/distributed.json

Each job is started with :func:`npu_adapter.distributed.launcher.launch`, exactly as
``npu-adapter launch`` starts a script; every rank runs this module with ``--worker`` and rank 0
writes its timings. **All-reduce**: a float32 variable of 1-64 MB is all-reduced (sum) in a
session of each rank; the time per all-reduce is the median over repetitions after two warm-up
runs. ``algbw`` = size / time; ``busbw`` = algbw * 2 (N - 1) / N, the bytes each rank sends and
receives in a ring, comparable across N. **Scaling**: an MLP (784-512-512-10, 670k parameters)
trained with ``NPUDistributedOptimizer`` on a global batch of 256 split over the N ranks; step
time is the median of 30 steps after 5 warm-up steps. The processes share this machine's cores,
so N processes on 2 cores cannot run N times faster: the figures show the cost of the
collectives, not the speed-up a cluster gives (see ``docs/distributed.md``).
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = REPO_ROOT / "bench" / "results" / "distributed.json"
SIZES_MB = (1, 4, 16, 64)
GLOBAL_BATCH = 256
LAYERS = (784, 512, 512, 10)


def _median_time(run, repetitions, warmup=2):
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


def _worker_allreduce(out_dir, sizes):
    from npu_bridge.npu_init import get_rank_id, get_rank_size, hccl_ops, tf

    rank, size = get_rank_id(), get_rank_size()
    results = []
    for megabytes in sizes:
        elements = megabytes * (1 << 20) // 4
        with tf.Graph().as_default():
            value = tf.compat.v1.get_variable(
                "value", initializer=tf.fill([elements], 1.0 + rank), use_resource=True)
            reduced = hccl_ops.allreduce(value.read_value(), "sum")
            check = tf.reduce_max(tf.abs(reduced - float(size * (size + 1) / 2)))
            with tf.compat.v1.Session() as sess:
                sess.run(value.initializer)
                if sess.run(check) != 0:
                    raise AssertionError("all-reduce result is wrong")
                repetitions = 10 if megabytes <= 4 else 5
                op = reduced.op
                median, low, high = _median_time(lambda op=op: sess.run(op), repetitions)
        results.append({"megabytes": megabytes, "ranks": size, "seconds": median,
                        "min": low, "max": high})
    if rank == 0:
        Path(out_dir, "allreduce.json").write_text(json.dumps(results))


def _mlp(tf, x, y):
    rng = __import__("numpy").random.RandomState(0)
    hidden = x
    for index, (fan_in, fan_out) in enumerate(zip(LAYERS, LAYERS[1:])):
        kernel = tf.compat.v1.get_variable(
            f"w{index}", initializer=(rng.randn(fan_in, fan_out) * 0.05).astype("float32"))
        bias = tf.compat.v1.get_variable(f"b{index}", initializer=[0.0] * fan_out)
        hidden = tf.matmul(hidden, kernel) + bias
        if index < len(LAYERS) - 2:
            hidden = tf.nn.relu(hidden)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=hidden))


def _worker_steps(out_dir, steps):
    import numpy as np

    from npu_bridge.npu_init import NPUDistributedOptimizer, get_rank_id, get_rank_size, tf

    rank, size = get_rank_id(), get_rank_size()
    batch = GLOBAL_BATCH // size
    rng = np.random.RandomState(rank)
    with tf.Graph().as_default():
        x = tf.constant(rng.rand(batch, LAYERS[0]).astype(np.float32))
        y = tf.constant(rng.randint(0, LAYERS[-1], size=(batch,)).astype(np.int32))
        loss = _mlp(tf, x, y)
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.01)
        if size > 1:
            optimizer = NPUDistributedOptimizer(optimizer)
        train = optimizer.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            median, low, high = _median_time(lambda: sess.run(train), steps, warmup=5)
    if rank == 0:
        Path(out_dir, "steps.json").write_text(json.dumps(
            {"ranks": size, "seconds": median, "min": low, "max": high,
             "batch_per_rank": batch}))


def _launch(ranks, kind, out_dir, extra):
    from npu_adapter.distributed import launcher

    specs = launcher.plan_ranks(ranks, collective_timeout=300)
    command = launcher.build_command(["-m", "bench.bench_distributed", "--worker", kind,
                                      str(out_dir), *extra])
    status = launcher.launch(specs, command, prefix=True, grace=5, timeout=900)
    if status != 0:
        raise RuntimeError(f"{kind} job with {ranks} ranks failed with status {status}")
    return json.loads(Path(out_dir, f"{kind}.json").read_text())


def _single_process_steps(steps):
    import subprocess

    with tempfile.TemporaryDirectory() as out_dir:
        env = {key: value for key, value in os.environ.items()
               if key not in ("RANK_SIZE", "RANK_ID", "RANK_TABLE_FILE")}
        subprocess.run([sys.executable, "-m", "bench.bench_distributed", "--worker", "steps",
                        out_dir, str(steps)], check=True, env=env, cwd=REPO_ROOT)
        return json.loads(Path(out_dir, "steps.json").read_text())


def _table(rows, header):
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["| " + " | ".join(str(cell).ljust(width) for cell, width in zip(row, widths)) + " |"
             for row in [header, *rows]]
    lines.insert(1, "|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return "\n".join(lines)


def run(quick=False):
    """Run the benchmark; returns the report (a dict)."""
    rank_counts = (2,) if quick else (2, 4)
    sizes = (1, 4) if quick else SIZES_MB
    steps = 10 if quick else 30
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
              "cpus": os.cpu_count(), "allreduce": [], "steps": []}
    for ranks in rank_counts:
        with tempfile.TemporaryDirectory() as out_dir:
            report["allreduce"].extend(
                _launch(ranks, "allreduce", out_dir, [",".join(map(str, sizes))]))
    report["steps"].append(_single_process_steps(steps))
    for ranks in rank_counts:
        with tempfile.TemporaryDirectory() as out_dir:
            report["steps"].append(_launch(ranks, "steps", out_dir, [str(steps)]))
    import tensorflow as tf

    report["tensorflow"] = tf.__version__
    return report


def format_report(report):
    """The two Markdown tables of a report."""
    rows = []
    for item in report["allreduce"]:
        ranks, seconds = item["ranks"], item["seconds"]
        algbw = item["megabytes"] / seconds
        rows.append((ranks, item["megabytes"], f"{seconds * 1000:.1f}",
                     f"{item['min'] * 1000:.1f}-{item['max'] * 1000:.1f}", f"{algbw:.0f}",
                     f"{algbw * 2 * (ranks - 1) / ranks:.0f}"))
    first = _table(rows, ("processes", "MB", "ms (median)", "ms (min-max)", "algbw MB/s",
                          "busbw MB/s"))
    base = report["steps"][0]["seconds"]
    rows = []
    for item in report["steps"]:
        seconds = item["seconds"]
        rows.append((item["ranks"], item["batch_per_rank"], f"{seconds * 1000:.1f}",
                     f"{item['min'] * 1000:.1f}-{item['max'] * 1000:.1f}",
                     f"{GLOBAL_BATCH / seconds:.0f}", f"{base / seconds:.2f}x"))
    second = _table(rows, ("processes", "batch/rank", "step ms (median)", "ms (min-max)",
                           "samples/s", "speed-up vs 1"))
    return f"{first}\n\n{second}"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.bench_distributed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 processes, small sizes")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="report file")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        kind, out_dir, *rest = args.worker
        if kind == "allreduce":
            _worker_allreduce(out_dir, [int(size) for size in rest[0].split(",")])
        else:
            _worker_steps(out_dir, int(rest[0]))
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    report = run(args.quick)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(f"TensorFlow {report['tensorflow']}, {report['cpus']} CPUs, {report['date']}")
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
