"""The long run of the differential tester: random TF1 graphs under every option set, for a
number of minutes or examples, with the smallest reproducer of each kind of defect.

    python -m npu_adapter.testing.fuzz --minutes 10
    python -m npu_adapter.testing.fuzz --max-examples 200 --option-set mix --report fuzz.md
    python -m npu_adapter.testing.fuzz --import my_backend \\
        --options 'mine={"npu_adapter_backend": "my_backend"}' --option-set mine

Graphs come from :func:`npu_adapter.testing.strategies.graph_cases` in batches, each batch a
hypothesis run with its own seed (``--seed`` + batch number, so a run is reproducible). Every
graph runs under every option set that applies to it (:func:`compare_sessions`). The first time
a kind of defect shows (an error type and message with names and numbers blanked, or a
mismatch, per option set), hypothesis shrinks that graph to the smallest one that still shows
it, within ``--shrink-seconds``. The run prints, per option set, the graphs run, the values
compared, the mismatches and the failures, then each kind of defect with its reproducer: a
script that rebuilds the graph and calls ``assert_session_equivalent``. Exit status: 0 when
every graph matched plain TensorFlow, 1 when something differed or failed, 2 for bad arguments.
"""

import argparse
import importlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field

__all__ = ["main", "run_fuzz", "FuzzResult"]

_ONEDNN = "TF_ENABLE_ONEDNN_OPTS"


@dataclass
class _SetFigures:
    graphs: int = 0
    compared: int = 0
    mismatches: int = 0
    failures: int = 0
    refused: int = 0
    unreproducible: int = 0
    ignored_feeds: int = 0


@dataclass
class Defect:
    """One kind of defect: where it showed, how often, and its smallest graph."""

    key: str
    status: str  # "mismatch" or "failure"
    option_sets: dict = field(default_factory=dict)  # name -> count
    first_message: str = ""
    reproducer: str = ""
    shrinking: str = "not shrunk"  # or "the smallest found", "shrinking stopped at ..."
    shrunk_message: str = ""
    graphs: int = 0
    features: dict = field(default_factory=dict)  # feature -> graphs showing the defect

    def common_features(self, limit=6):
        """The features most of its graphs have, as text: a hint at the cause."""
        ranked = sorted(self.features.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return ", ".join(f"{name} ({count} of {self.graphs})" for name, count in ranked)


@dataclass
class FuzzResult:
    """What a run found (see :func:`run_fuzz`)."""

    seed: int
    option_sets: dict
    graphs: int = 0
    invalid: int = 0
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)  # option set -> _SetFigures
    defects: dict = field(default_factory=dict)  # key -> Defect
    invalid_examples: dict = field(default_factory=dict)  # message -> reproducer
    features: dict = field(default_factory=dict)  # feature -> graphs
    refusals: dict = field(default_factory=dict)  # expected refusal -> {option set: runs}

    def record(self, case, comparison):
        """Count the outcomes of one graph ``case`` (its ``comparison`` under the option
        sets) into the figures and the defects; returns ``(key, option set, message)`` for
        each kind of defect it shows that was not known before, in the order found."""
        self.graphs += 1
        for feature in case.features:
            self.features[feature] = self.features.get(feature, 0) + 1
        new = []
        keys = set()
        for outcome in comparison.outcomes:
            figures = self.figures.setdefault(outcome.option_set, _SetFigures())
            figures.graphs += 1
            figures.compared += outcome.compared
            status = outcome.status
            if status == "unreproducible":
                figures.unreproducible += 1
                continue
            if status == "plain_ignores_feed":
                figures.ignored_feeds += 1
                continue
            if status == "refused":
                figures.refused += 1
                runs = self.refusals.setdefault(outcome.refusal.name, {})
                runs[outcome.option_set] = runs.get(outcome.option_set, 0) + 1
                continue
            if status == "equal":
                continue
            if status == "mismatch":
                figures.mismatches += 1
            else:
                figures.failures += 1
            key = defect_key(outcome)
            defect = self.defects.get(key)
            if defect is None:
                defect = self.defects[key] = Defect(key, status,
                                                    first_message=outcome.describe())
                defect.reproducer = case.reproducer({outcome.option_set: outcome.options},
                                                    comment=key)
                new.append((key, outcome.option_set, outcome.describe()))
            defect.option_sets[outcome.option_set] = \
                defect.option_sets.get(outcome.option_set, 0) + 1
            if key not in keys:
                keys.add(key)
                defect.graphs += 1
                for feature in case.features:
                    defect.features[feature] = defect.features.get(feature, 0) + 1
        return new

    @property
    def runs(self):
        """Graph x option-set runs."""
        return sum(f.graphs for f in self.figures.values())

    @property
    def mismatches(self):
        """Runs that gave other values than plain TensorFlow."""
        return sum(f.mismatches for f in self.figures.values())

    @property
    def failures(self):
        """Runs that raised where plain TensorFlow ran."""
        return sum(f.failures for f in self.figures.values())

    @property
    def refused(self):
        """Runs refused by design (an expected refusal whose remedy gave plain TensorFlow's
        values); neither mismatches nor failures."""
        return sum(f.refused for f in self.figures.values())

    def table(self):
        """The figures per option set, as a Markdown table."""
        rows = [("option set", "graphs run", "values compared", "mismatches", "failures",
                 "expected refusals", "plain not reproducible", "plain ignores a feed")]
        for name in self.option_sets:
            f = self.figures.get(name, _SetFigures())
            rows.append((name, f.graphs, f.compared, f.mismatches, f.failures, f.refused,
                         f.unreproducible, f.ignored_feeds))
        total = ("total", self.runs, sum(f.compared for f in self.figures.values()),
                 self.mismatches, self.failures, self.refused,
                 sum(f.unreproducible for f in self.figures.values()),
                 sum(f.ignored_feeds for f in self.figures.values()))
        rows.append(total)
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]

        def line(row):
            cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w)
                     for i, (c, w) in enumerate(zip(row, widths))]
            return "| " + " | ".join(cells) + " |"

        separator = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line(rows[0]), separator] + [line(r) for r in rows[1:]])

    def summary(self):
        """One line of figures."""
        return (f"{self.graphs} graphs ({self.invalid} invalid), {self.runs} graph x option-set "
                f"runs, {sum(f.compared for f in self.figures.values())} values compared, "
                f"{self.mismatches} mismatches, {self.failures} failures, "
                f"{self.refused} expected refusals, "
                f"{len(self.defects)} kinds of defect, in {self.seconds:.0f} s (seed "
                f"{self.seed})")

    def report(self):
        """The whole run as Markdown: the summary, the table, each defect with its
        reproducer, and the invalid graphs (a defect of the generator)."""
        parts = [f"# Differential tester run\n\n{self.summary()}.\n\n{self.table()}\n"]
        features = ", ".join(f"{k} {v}" for k, v in sorted(self.features.items()))
        parts.append(f"\nGraphs per feature: {features}.\n")
        for name, runs in sorted(self.refusals.items()):
            where = ", ".join(f"{k} ({v})" for k, v in runs.items())
            parts.append(f"\nExpected refusal {name} (its remedy gave plain TensorFlow's "
                         f"values): {where}.\n")
        for i, defect in enumerate(self.defects.values(), 1):
            where = ", ".join(f"{k} ({v})" for k, v in defect.option_sets.items())
            parts.append(f"\n## {i}. {defect.key}\n\nOption sets (runs): {where}.\n\n"
                         f"Features of its graphs: {defect.common_features()}.\n\n"
                         f"First seen:\n\n```\n{defect.first_message}\n```\n\n"
                         f"Reproducer ({defect.shrinking}):\n\n```python\n"
                         f"{defect.reproducer}```\n")
            if defect.shrunk_message:
                parts.append(f"\nIt gives:\n\n```\n{defect.shrunk_message}\n```\n")
        for message, reproducer in self.invalid_examples.items():
            parts.append(f"\n## Invalid graph (fails in plain TensorFlow): {message}\n\n"
                         f"```python\n{reproducer}```\n")
        return "".join(parts)


def _blank(text):
    """The line of a message that says what went wrong, with quoted names and numbers
    blanked, so that one defect gives one key."""
    from npu_adapter.testing.differential import error_summary

    text = error_summary(text)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r'"[^"]*"', '"…"', text)
    text = re.sub(r"\d+", "N", text)
    return text[:160]


def defect_key(outcome):
    """The kind of defect an outcome shows, whatever the option set (None when it matched):
    the error type and its message with names and numbers blanked, or the kind of mismatch."""
    if outcome.status == "failure":
        return f"{outcome.failure.error_type}: {_blank(outcome.failure.message)}"
    if outcome.status == "mismatch":
        first = outcome.mismatches[0]
        if first.difference.expected_type != first.difference.actual_type:
            size = "dtype or shape"
        elif first.difference.max_ulp is not None and first.difference.max_ulp <= 4:
            size = "rounding (at most 4 ulp)"
        else:
            size = "values"
        when = "at the first step" if first.step == 0 else "after the first step"
        return f"mismatch: {first.kind} {size} {when}"
    return None


class _Found(Exception):
    """Raised inside a hypothesis run to make it shrink a case showing ``key``."""

    def __init__(self, key, case):
        super().__init__(key)
        self.key = key
        self.case = case


def _found(key, case):
    # One place raises: hypothesis tells failures apart by where they are raised.
    raise _Found(key, case)


def run_fuzz(option_sets, *, seed=0, minutes=None, max_examples=None, max_ops=8, steps=3,
             shrink_seconds=120, batch_size=20, log=print):
    """Run random graphs under ``option_sets`` (:class:`OptionSet` entries) until ``minutes``
    or ``max_examples`` run out; returns a :class:`FuzzResult`.

    Each new kind of defect is shrunk for at most ``shrink_seconds``; with 0 nothing is shrunk
    and the graphs drawn depend on the seed alone (not on what failed), as CI wants."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from npu_adapter.testing.differential import InvalidGraphError
    from npu_adapter.testing.strategies import graph_cases

    if minutes is None and max_examples is None:
        raise ValueError("give minutes or max_examples")
    start = time.monotonic()
    deadline = start + minutes * 60 if minutes is not None else None
    result = FuzzResult(seed, {s.name: s for s in option_sets})
    strategy = graph_cases(max_ops=max_ops, steps=steps)
    by_name = {s.name: s for s in option_sets}
    # While a case is shrunk: its key, option set, the end of its time budget, whether the
    # budget ran out, and the cases seen failing (hypothesis replays the smallest at the end).
    target = {}
    # Hypothesis draws the same graph again now and then (a variation of a choice the graph
    # does not use): each graph is run once, so the figures count distinct graphs.
    seen = set()

    def out_of_time():
        return deadline is not None and time.monotonic() > deadline

    def explore(case):
        if out_of_time() or (max_examples is not None and result.graphs >= max_examples) \
                or case in seen:
            return
        seen.add(case)
        sets = case.option_sets(option_sets)
        try:
            comparison = case.compare(sets)
        except InvalidGraphError as error:
            result.graphs += 1
            result.invalid += 1
            result.invalid_examples.setdefault(_blank(str(error)), case.reproducer())
            return
        new = result.record(case, comparison)
        for key, _, _ in new:
            log(f"[{time.monotonic() - start:6.0f} s] new: {key}")
        if new and shrink_seconds > 0:
            key, option_set, message = new[0]
            target.update(key=key, option_set=option_set, expired=False,
                          failing={case: message}, budget=time.monotonic() + shrink_seconds)
            _found(key, case)

    def shrink(case):
        if case in target["failing"]:
            _found(target["key"], case)
        if time.monotonic() > target["budget"] or out_of_time():
            target["expired"] = True
            return
        sets = case.option_sets([by_name[target["option_set"]]])
        if not sets:
            return
        try:
            comparison = case.compare(sets)
        except InvalidGraphError:
            return
        outcome = comparison.outcomes[0]
        if defect_key(outcome) == target["key"]:
            target["failing"][case] = outcome.describe()
            _found(target["key"], case)

    def body(case):
        if target:
            shrink(case)
        else:
            explore(case)

    batch = 0
    while not out_of_time() and (max_examples is None or result.graphs < max_examples):
        run = settings(max_examples=batch_size, deadline=None, database=None,
                       phases=(Phase.generate, Phase.shrink), report_multiple_bugs=False,
                       suppress_health_check=list(HealthCheck), print_blob=False)(
            hypothesis_seed(seed * 100003 + batch)(given(strategy)(body)))
        try:
            run()
        except _Found as found:
            defect = result.defects[found.key]
            defect.reproducer = found.case.reproducer(
                found.case.option_sets([by_name[target["option_set"]]]), comment=found.key)
            defect.shrinking = "shrinking stopped at its time budget" if target["expired"] \
                else "the smallest found"
            defect.shrunk_message = target["failing"].get(found.case, "")
            target.clear()
        batch += 1
    result.seconds = time.monotonic() - start
    return result


def _parse_args(argv):
    from npu_adapter.testing.differential import OPTION_SETS

    parser = argparse.ArgumentParser(
        prog="python -m npu_adapter.testing.fuzz",
        description="Run random TF1 graphs in plain TensorFlow and in NPU sessions under "
                    "each option set, compare every fetch and variable bit for bit, and print "
                    "the smallest reproducer of each kind of defect.")
    parser.add_argument("--minutes", type=float, help="stop after this many minutes")
    parser.add_argument("--max-examples", type=int, help="stop after this many graphs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the graphs (default 0)")
    parser.add_argument("--option-set", action="append", dest="option_set", metavar="NAME",
                        help="run only this option set (repeatable); built in: "
                             + ", ".join(s.name for s in OPTION_SETS))
    parser.add_argument("--options", action="append", default=[], metavar="NAME=JSON",
                        help="add an option set NAME with these NpuOptimizer options, a JSON "
                             "object (repeatable)")
    parser.add_argument("--import", action="append", default=[], dest="imports",
                        metavar="MODULE", help="import MODULE first (e.g. one that registers "
                                               "a backend; repeatable)")
    parser.add_argument("--max-ops", type=int, default=8, help="most ops per graph (default 8)")
    parser.add_argument("--steps", type=int, default=3, help="steps per graph (default 3)")
    parser.add_argument("--shrink-seconds", type=float, default=120,
                        help="time to shrink each kind of defect (default 120; 0: no "
                             "shrinking)")
    parser.add_argument("--report", metavar="FILE", help="also write the report (Markdown)")
    return parser, parser.parse_args(argv)


def _option_sets(parser, args):
    from npu_adapter.config import NpuConfig
    from npu_adapter.errors import NpuConfigError
    from npu_adapter.testing.differential import OPTION_SETS, OptionSet

    custom = []
    for text in args.options:
        name, sep, body = text.partition("=")
        if not sep or not name:
            parser.error(f"--options takes NAME=JSON, got {text!r}")
        try:
            options = json.loads(body)
        except ValueError as error:
            parser.error(f"--options {name}: not JSON ({error})")
        if not isinstance(options, dict):
            parser.error(f"--options {name}: a JSON object of NpuOptimizer options is needed")
        try:
            NpuConfig.from_dict(options)
        except NpuConfigError as error:
            parser.error(f"--options {name}: {error}")
        custom.append(OptionSet(name, options))
    known = {s.name: s for s in (*OPTION_SETS, *custom)}
    if args.option_set:
        missing = [n for n in args.option_set if n not in known]
        if missing:
            parser.error(f"unknown option set {missing[0]!r}; known: {', '.join(known)}")
        return [known[n] for n in dict.fromkeys(args.option_set)]
    return list(OPTION_SETS) + custom


def main(argv=None):
    """The command line (see the module docstring); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, args = _parse_args(argv)
    if args.minutes is None and args.max_examples is None:
        parser.error("give --minutes or --max-examples")
    if (args.minutes is not None and args.minutes <= 0) or \
            (args.max_examples is not None and args.max_examples < 1):
        parser.error("--minutes and --max-examples must be positive")
    if args.max_ops < 1 or args.steps < 1 or args.shrink_seconds < 0:
        parser.error("--max-ops and --steps must be at least 1, --shrink-seconds at least 0")
    if args.report:
        folder = os.path.dirname(os.path.abspath(args.report))
        if not os.path.isdir(folder):
            parser.error(f"--report {args.report}: the folder {folder} does not exist")
    if os.environ.get(_ONEDNN) != "0":
        # oneDNN's CPU kernels are not reproducible run to run: plain TensorFlow would differ
        # from itself. The variable is read when TensorFlow loads, so start again with it.
        os.environ[_ONEDNN] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "npu_adapter.testing.fuzz", *argv])
    for module in args.imports:
        try:
            importlib.import_module(module)
        except ImportError as error:
            parser.error(f"--import {module}: {error}")
    option_sets = _option_sets(parser, args)
    names = ", ".join(s.name for s in option_sets)
    limit = " and ".join(p for p in (
        f"{args.minutes:g} minutes" if args.minutes is not None else "",
        f"{args.max_examples} graphs" if args.max_examples is not None else "") if p)
    print(f"differential tester: seed {args.seed}, option sets {names}, up to {limit}",
          flush=True)
    result = run_fuzz(option_sets, seed=args.seed, minutes=args.minutes,
                      max_examples=args.max_examples, max_ops=args.max_ops, steps=args.steps,
                      shrink_seconds=args.shrink_seconds,
                      log=lambda text: print(text, flush=True))
    print()
    print(result.report())
    if args.report:
        with open(args.report, "w", encoding="utf-8") as handle:
            handle.write(result.report())
    return 0 if not result.mismatches and not result.failures else 1


if __name__ == "__main__":
    sys.exit(main())
