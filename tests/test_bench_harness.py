"""The benchmark runner: harness statistics, timing loops, process runner, report and CLI.

Timing loops run against a fake clock (no wall-clock assertions); the end-to-end test runs
``python -m bench --quick`` in a fresh process and checks the report it writes.
"""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

from bench import harness
from bench.harness import (
    SCHEMA,
    Stats,
    Target,
    fit_exponent,
    format_table,
    interleave,
    make_row,
    measure,
    paired,
    summarize,
    validate_report,
)
from bench.run import ON_REQUEST, SECTIONS, build_report, parse_args
from npu_adapter.errors import NpuConfigError


class FakeClock:
    """Stands in for ``time.perf_counter``; cases advance it by what they "cost"."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def spend(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(harness.time, "perf_counter", fake)
    return fake


# --------------------------------------------------------------------------- statistics
def test_summarize_gives_median_min_max_mean_in_order():
    s = summarize([3, 1, 4, 1, 5, 9])
    assert s.values == (3.0, 1.0, 4.0, 1.0, 5.0, 9.0)
    assert (s.n, s.median, s.min, s.max) == (6, 3.5, 1.0, 9.0)
    assert s.mean == pytest.approx(23 / 6)
    assert summarize([2, 7, 5]).median == 5.0


@pytest.mark.parametrize("values", [[], [1.0, math.nan], [math.inf]])
def test_summarize_rejects_empty_and_non_finite_samples(values):
    with pytest.raises(NpuConfigError) as info:
        summarize(values)
    assert info.value.option == "values"


def test_stats_json_round_trip_and_scaling():
    s = summarize([0.001, 0.003, 0.002])
    data = s.to_json()
    assert data == {"n": 3, "median": 0.002, "min": 0.001, "max": 0.003,
                    "mean": pytest.approx(0.002), "values": [0.001, 0.003, 0.002]}
    assert Stats.from_json(data) == s
    assert s.scaled(1e3).values == pytest.approx((1.0, 3.0, 2.0))


def test_paired_ratio_and_delta_are_per_round():
    value = summarize([2.0, 6.0, 3.0])
    baseline = summarize([1.0, 2.0, 3.0])
    assert paired(value, baseline).values == (2.0, 3.0, 1.0)
    assert paired(value, baseline, "delta").values == (1.0, 4.0, 0.0)
    # The median of per-round ratios differs from the ratio of medians (3/2): it is paired.
    assert paired(value, baseline).median == 2.0


def test_paired_rejects_unpaired_samples_and_bad_modes():
    with pytest.raises(NpuConfigError, match="paired"):
        paired(summarize([1, 2]), summarize([1]))
    with pytest.raises(NpuConfigError, match="'ratio' or 'delta'"):
        paired(summarize([1]), summarize([1]), "quotient")
    with pytest.raises(NpuConfigError, match="positive"):
        paired(summarize([1]), summarize([0]))


def test_fit_exponent_recovers_power_laws():
    sizes = [10_000, 30_000, 100_000]
    assert fit_exponent(sizes, [2e-6 * n for n in sizes]) == pytest.approx(1.0)
    assert fit_exponent(sizes, [1e-9 * n * n for n in sizes]) == pytest.approx(2.0)
    assert fit_exponent(sizes, [n * math.log(n) for n in sizes]) == pytest.approx(1.10, abs=0.01)
    with pytest.raises(NpuConfigError):
        fit_exponent([10], [1.0])
    with pytest.raises(NpuConfigError):
        fit_exponent([10, 10], [1.0, 2.0])


def test_pass_breakdown_takes_medians_and_the_time_outside_passes():
    timings = [[("a", 1.0), ("b", 2.0)], [("a", 3.0), ("b", 2.0)], [("a", 2.0), ("b", 4.0)]]
    out = harness.pass_breakdown(timings, [4.0, 6.0, 7.0])
    assert out == {"a": 2.0, "b": 2.0, "(outside passes)": 1.0}


# --------------------------------------------------------------------------- timing loops
def test_measure_excludes_warmup_and_divides_blocks(clock):
    costs = iter([9.0, 9.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0])
    calls = []

    def fn():
        calls.append(1)
        clock.spend(next(costs))

    s = measure(fn, warmup=2, repeat=3, number=2, collect=False)
    assert len(calls) == 8
    assert s.values == (1.0, 2.0, 3.0)  # per call: each block of 2 calls divided by 2


def test_interleave_alternates_the_order_round_by_round(clock):
    order = []
    cases = {name: (lambda name=name, cost=cost: (order.append(name), clock.spend(cost)))
             for name, cost in (("a", 1.0), ("b", 2.0), ("c", 4.0))}
    stats = interleave(cases, warmup=1, repeat=4, collect=False)
    assert order == list("abc") + list("abc") + list("cba") + list("abc") + list("cba")
    assert stats["a"].values == (1.0,) * 4 and stats["c"].values == (4.0,) * 4
    assert paired(stats["b"], stats["a"]).values == (2.0,) * 4


def test_interleave_budget_cuts_rounds_within_bounds(clock):
    cases = {"a": lambda: clock.spend(1.0), "b": lambda: clock.spend(1.0)}  # 2 s a round
    assert interleave(cases, warmup=1, repeat=50, budget=10.0, collect=False)["a"].n == 5
    assert interleave(cases, warmup=1, repeat=50, budget=0.1, min_repeat=3,
                      collect=False)["a"].n == 3
    assert interleave(cases, warmup=1, repeat=4, budget=100.0, collect=False)["a"].n == 4
    # Without a warm-up round there is nothing to estimate from: all rounds run.
    assert interleave(cases, warmup=0, repeat=6, budget=1.0, collect=False)["a"].n == 6


@pytest.mark.parametrize("kwargs, option", [({"repeat": 0}, "repeat"), ({"warmup": -1}, "warmup"),
                                            ({"number": 1.5}, "number")])
def test_timing_loops_reject_bad_counts(kwargs, option):
    with pytest.raises(NpuConfigError) as info:
        measure(lambda: None, **kwargs)
    assert info.value.option == option


def test_autorange_doubles_until_the_minimum_time(clock):
    cost = 0.003
    assert harness.autorange(lambda: clock.spend(cost), min_time=0.02) == 8
    assert harness.autorange(lambda: clock.spend(cost), min_time=10.0, max_number=64) == 64


# --------------------------------------------------------------------------- processes
CHILD = textwrap.dedent("""
    import json, sys, time
    from bench.harness import peak_rss_self_kb
    block = bytearray(int(sys.argv[1]) * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    del block
    time.sleep(0.3)
    print(json.dumps({"own_hwm_kb": peak_rss_self_kb()}))
""")


def test_run_process_sees_the_peak_rss_of_that_child_only():
    # This process (TensorFlow imported) is bigger than the small child: the figures must be
    # the child's own, not inherited from the parent at exec (as ru_maxrss would be).
    small = harness.run_process([sys.executable, "-c", CHILD, "1"]).check()
    big = harness.run_process([sys.executable, "-c", CHILD, "300"]).check()
    assert big.peak_rss_kb - small.peak_rss_kb > 250 * 1024
    assert small.peak_rss_kb < harness.current_rss_kb()
    # VmHWM keeps the peak after the memory is freed; the child's own reading agrees.
    assert big.json()["own_hwm_kb"] == pytest.approx(big.peak_rss_kb, rel=0.05)
    assert small.wall_seconds > 0.3


def test_run_process_failure_names_the_command_and_stderr():
    proc = harness.run_process([sys.executable, "-c", "import sys; sys.exit('boom here')"])
    assert proc.returncode == 1
    with pytest.raises(RuntimeError, match="boom here"):
        proc.check()


def test_run_process_kills_after_the_timeout():
    proc = harness.run_process([sys.executable, "-c", "import time; time.sleep(30)"],
                               timeout=0.5)
    assert proc.returncode < 0 and proc.wall_seconds < 20


def test_bench_env_sets_tensorflow_variables_and_drops_debug_checks():
    env = harness.bench_env({"NPU_ADAPTER_CHECK_PASSES": "1", "PYTHONPATH": "/x",
                             "TF_ENABLE_ONEDNN_OPTS": "1", "KEEP": "me"})
    assert env["TF_ENABLE_ONEDNN_OPTS"] == "0" and env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert "NPU_ADAPTER_CHECK_PASSES" not in env and env["KEEP"] == "me"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(harness.REPO_ROOT), "/x"]


def test_peak_rss_self_is_at_least_the_current_rss():
    assert harness.peak_rss_self_kb() >= harness.current_rss_kb() > 0


# --------------------------------------------------------------------------- rows and report
def _rows():
    value, baseline = summarize([1.1, 1.3, 1.2]), summarize([1.0, 1.0, 1.0])
    return [
        make_row("m1", "steady", "ms", value, baseline=baseline,
                 target=Target("<= 1.02x", "ratio", 1.02)),
        make_row("m2", "steady", "ms", baseline, baseline=value,
                 target=Target("<= 1.02x", "ratio", 1.02)),
        make_row("tiny", "per call", "us", value, baseline=baseline,
                 target=Target("<= +20 us", "delta", 20.0)),
        make_row("10k", "exponent", "exponent", summarize([1.3]),
                 target=Target("<= 1.15", "value", 1.15)),
        make_row("10k", "import", "ms", value),
    ]


def test_make_row_derives_paired_figures_and_judges_targets():
    rows = _rows()
    assert rows[0]["ratio"]["values"] == pytest.approx([1.1, 1.3, 1.2])
    assert rows[0]["delta"]["median"] == pytest.approx(0.2)
    assert [r["met"] for r in rows] == [False, True, True, False, None]
    assert rows[4]["ratio"] is None and rows[4]["target"] is None


def test_make_row_needs_the_figure_its_target_is_on():
    with pytest.raises(NpuConfigError, match="ratio figure"):
        make_row("x", "y", "ms", summarize([1.0]), target=Target("<= 1x", "ratio", 1.0))
    with pytest.raises(NpuConfigError):
        Target("<= 1", "median", 1.0)


def _report(rows=None):
    sections = {"steady": {"title": "t", "seconds": 1.0, "rows": _rows() if rows is None else rows,
                           "notes": [], "details": {}}}
    return build_report(command="python -m bench", quick=True, machine={}, environment={},
                        noise={}, setup={}, sections=sections, total_seconds=1.0)


def test_report_lists_targets_and_validates():
    doc = _report()
    assert doc["schema"] == SCHEMA
    assert [(t["case"], t["met"]) for t in doc["targets"]] == [
        ("m1", False), ("m2", True), ("tiny", True), ("10k", False)]
    validate_report(json.loads(json.dumps(doc)))  # what is written to disk


@pytest.mark.parametrize("corrupt, field", [
    (lambda d: d.pop("machine"), "report"),
    (lambda d: d.update(schema="other/1"), "schema"),
    (lambda d: d["sections"]["steady"]["rows"][0]["value"].update(median=99.0),
     "sections.steady.rows[0].value"),
    (lambda d: d["sections"]["steady"]["rows"][0].update(met=True), "sections.steady.rows[0].met"),
    (lambda d: d["sections"]["steady"]["rows"][4].update(met=False),
     "sections.steady.rows[4].met"),
    (lambda d: d["sections"]["steady"]["rows"][1].pop("details"), "sections.steady.rows[1]"),
    (lambda d: d["targets"].pop(), "targets"),
    (lambda d: d["sections"]["steady"].pop("title"), "sections.steady"),
])
def test_validate_report_names_the_bad_field(corrupt, field):
    doc = json.loads(json.dumps(_report()))
    corrupt(doc)
    with pytest.raises(NpuConfigError) as info:
        validate_report(doc)
    assert info.value.option == field


def test_format_table_shows_every_row_with_its_status():
    text = format_table({"steady": {"rows": _rows()}})
    lines = text.splitlines()
    assert len(lines) == 2 + 5
    assert lines[2].startswith("| steady  | m1 ") and "| 1.20x [1.10, 1.30] " in lines[2]
    assert lines[2].rstrip(" |").endswith("MISSED") and lines[3].rstrip(" |").endswith("met")
    assert "| +0.200 us [0.100, 0.300] " in lines[4]  # the tiny row's target is on the delta
    assert len({len(line) for line in lines}) == 1  # aligned columns


def test_cli_rejects_unknown_sections_and_keeps_section_order(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--only", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err
    args = parse_args(["--quick", "--only", "tiny", "rewrite", "--json", "x.json"])
    assert args.quick and args.only == ["tiny", "rewrite"] and args.json == "x.json"
    assert list(SECTIONS) == ["rewrite", "scaling", "steady", "tiny", "gears", "fresh",
                              "fresh_bert", "precision", "dump", "loop_sinking", "sessions",
                              "xla", "scripts"]
    assert ON_REQUEST == ("fresh_bert", "xla", "scripts") and not parse_args([]).all
    assert parse_args(["--all"]).all


# --------------------------------------------------------------------------- end to end
def test_quick_run_end_to_end(tmp_path):
    """``python -m bench --quick``: every section runs and the JSON report is valid."""
    out = tmp_path / "report.json"
    env = dict(os.environ, NPU_ADAPTER_MODEL_CACHE=str(tmp_path / "models"),
               NPU_ADAPTER_CHECK_PASSES="1")
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--json", str(out)],
                          cwd=harness.REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    validate_report(doc)
    assert doc["quick"] is True and doc["command"] == f"python -m bench --quick --json {out}"
    assert list(doc["sections"]) == list(SECTIONS)
    for name, section in doc["sections"].items():
        assert "error" not in section, name
        assert section["rows"], name
    # The runner turns the debug checks off for honest timings, and sets TensorFlow's variables.
    assert doc["environment"]["variables"] == {
        "TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "2",
        "NPU_ADAPTER_CHECK_PASSES": None}
    assert doc["setup"] and not any(s["was_cached"] for s in doc["setup"].values())
    steady = doc["sections"]["steady"]["details"]
    assert all(d["clusters"] >= 1 and d["first_outputs_equal"] for d in steady.values())
    gears = doc["sections"]["gears"]["details"]["small_mlp"]
    (counts,) = gears["gear_counts"].values()  # one cluster; batch 4 always picks gear 1 (1;4;8)
    assert gears["outputs_equal"] and list(counts) == ["1"] and counts["1"] > 0
    fresh = doc["sections"]["fresh"]["rows"]
    assert [r["unit"] for r in fresh] == ["s", "s", "MB"] and fresh[2]["value"]["median"] > 100
    assert "warm disk cache" in fresh[1]["metric"]
    # The warm side took its rewrite from the disk cache the priming process filled; the cold
    # side had no disk cache.
    assert fresh[1]["details"]["warm_disk_hits"] == [1]
    assert doc["sections"]["fresh"]["details"]["small_mlp"]["npu_disk_hits"] == [None]
    dump = doc["sections"]["dump"]["details"]["small_mlp"]
    assert not dump["off"]["instrumented"] and dump["off"]["outputs_equal"]
    on = dump["tensor dump, every op, every step"]
    assert on["instrumented"] and on["outputs_equal"]
    assert "| section" in proc.stdout and "Targets:" in proc.stdout
