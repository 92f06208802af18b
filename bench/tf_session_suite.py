"""``python -m bench.tf_session_suite``: TensorFlow's own TF1 session tests, run plain and with
every session forced through ``NpuOptimizer``.

TensorFlow's session tests are the most complete description of what a ``tf.compat.v1.Session``
does: fetch and feed structures, errors, callables, partial runs, traces, threads,
``MonitoredSession``. Running them with every session of the process rewritten by npu-adapter
(full offload, and ``mix_compile_mode``) shows where an NPU session behaves differently from
TensorFlow's; running them plain on the same TensorFlow gives the reference, since some fail on
plain TensorFlow too.

The test files are not in TensorFlow's wheel and are not copied into this repository: clone
TensorFlow's sources at the tag of a supported release and name the folder::

    git clone --depth 1 --branch v2.15.0 https://github.com/tensorflow/tensorflow tf-src
    python -m bench.tf_session_suite --tf-src tf-src                 # TF2 behaviour
    python -m bench.tf_session_suite --tf-src tf-src --tf1           # disable_v2_behavior()
    python -m bench.tf_session_suite --tf-src tf-src --mode full --files session -k Fetch

For each test file (:data:`TEST_FILES`) and mode (``plain`` always, as the reference, then the
modes asked for) the suite runs pytest in a fresh process, one file at a time, in a work folder
holding a copy of the file and a ``sitecustomize.py`` (:mod:`bench.tf_suite_site`) that switches
TF1 behaviour on and forces the mode. Where the installed TensorFlow has moved a name the test
file uses, the copy is adapted (:data:`RENAMES`). Outcomes come from pytest's JUnit XML report; a
test that kills its process (a crash, or the per-test timeout of
:mod:`bench.tf_suite_progress`) is recorded as an error and the file is run again without it.

The suite prints a table (file × mode → passed / failed / skipped / error) and every test whose
outcome under a mode differs from its plain outcome, with its first error line; ``--report``
writes all of it as JSON. Exit status: 0, or 1 when a test that passes plain does not pass under
a mode; 2 for bad arguments (nothing run, nothing written).
"""

import argparse
import dataclasses
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from bench import tf_suite_progress, tf_suite_site

__all__ = ["TEST_FILES", "RENAMES", "MODES", "STATUSES", "Outcome", "FileRun", "Rename",
           "adapt_source", "probe_tensorflow", "parse_junit", "differences", "regressions",
           "format_table", "format_differences", "build_report", "run_suite", "main",
           "parse_args"]

TEST_FILES = {
    "session": "tensorflow/python/client/session_test.py",
    "partial_run": "tensorflow/python/client/session_partial_run_test.py",
    "timeline": "tensorflow/python/client/timeline_test.py",
    "monitored_session": "tensorflow/python/training/monitored_session_test.py",
}
"""Short name → path of the test file in TensorFlow's sources, in the order they run."""

MODES = tf_suite_site.MODES
STATUSES = ("passed", "failed", "skipped", "error")
TEST_TIMEOUT = 300.0
FILE_TIMEOUT = 3600.0
MAX_ATTEMPTS = 6
"""Runs of one file at most: the first, and one more after each test that killed the process."""


@dataclasses.dataclass(frozen=True)
class Rename:
    """A name a test file uses that TensorFlow has moved since: the copy uses ``new`` (and
    imports ``new_import`` after ``old_import``) when ``old`` no longer resolves on the
    installed TensorFlow, which a fresh process checks by running ``old_import`` and ``old``."""

    old: str          # the use in the test file, e.g. ``variables.VariableV1``
    new: str          # what replaces it
    old_import: str   # the file's import line that ``old`` relies on
    new_import: str   # the import line ``new`` needs

    @property
    def pattern(self):
        return r"\b" + re.escape(self.old) + r"\b"


RENAMES = (
    Rename("variables.VariableV1", "variable_v1.VariableV1",
           "from tensorflow.python.ops import variables",
           "from tensorflow.python.ops import variable_v1"),
    Rename("ops.Tensor", "tensor.Tensor",
           "from tensorflow.python.framework import ops",
           "from tensorflow.python.framework import tensor"),
    Rename("control_flow_ops.Assert", "control_flow_assert.Assert",
           "from tensorflow.python.ops import control_flow_ops",
           "from tensorflow.python.ops import control_flow_assert"),
)
"""The renames ``monitored_session_test.py`` of the 2.14–2.16 era needs on TensorFlow 2.15+: the
first two let the file import; without the third, ``test_propagates_exception_trace`` fails on
an ``AttributeError`` before it runs a session."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One test's result: ``status`` (one of :data:`STATUSES`) and, unless it passed, the first
    line of its error or skip reason."""

    status: str
    message: str = ""


@dataclasses.dataclass
class FileRun:
    """The outcomes of one test file in one mode.

    Attributes:
        file: the file's short name (:data:`TEST_FILES`).
        mode: ``plain``, ``full`` or ``mix``.
        outcomes: test id (``Class::test``) → :class:`Outcome`.
        notes: what happened beyond the outcomes (tests that killed the process).
        seconds: wall time of its pytest processes.
    """

    file: str
    mode: str
    outcomes: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def counts(self):
        """``{status: number of tests}`` for every status of :data:`STATUSES`."""
        counts = dict.fromkeys(STATUSES, 0)
        for outcome in self.outcomes.values():
            counts[outcome.status] += 1
        return counts


# ---------------------------------------------------------------------------------- the files


def adapt_source(text, missing):
    """``text`` with each :data:`RENAMES` entry whose ``old`` use is in ``missing`` applied,
    when the text has it; returns ``(text, the old uses replaced)``."""
    applied = []
    for rename in RENAMES:
        if rename.old not in missing or not re.search(rename.pattern, text):
            continue
        text = re.sub(rename.pattern, rename.new, text)
        if rename.new_import not in text.splitlines():
            anchor = rename.old_import + "\n"
            if anchor not in text:
                raise ValueError(f"cannot rename {rename.old}: the file has no line "
                                 f"'{rename.old_import}'")
            text = text.replace(anchor, anchor + rename.new_import + "\n", 1)
        applied.append(rename.old)
    return text, applied


def _probe_program():
    """A program printing the TensorFlow version and the :data:`RENAMES` uses that fail."""
    lines = ["import json", "import tensorflow as tf", "missing = []"]
    for rename in RENAMES:
        lines += ["try:", f"    {rename.old_import}", f"    {rename.old}",
                  "except (ImportError, AttributeError):", f"    missing.append({rename.old!r})"]
    lines.append('print(json.dumps({"tensorflow": tf.__version__, "missing": missing}))')
    return "\n".join(lines) + "\n"


def probe_tensorflow(python=sys.executable):
    """``{"tensorflow": version, "missing": [old use, ...]}``: the installed TensorFlow's
    version, and the uses of :data:`RENAMES` it no longer resolves (run in a fresh process)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([python, "-c", _probe_program()], capture_output=True, text=True,
                          env=env, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"cannot import TensorFlow in {python}: {last}")
    return json.loads(lines[-1])


def _prepare(work, tf_src, files, missing):
    """Copy the test files (adapted) and the two start-up modules into ``work``; return
    ``{file: the old names renamed in it}``."""
    tests = work / "tests"
    site = work / "site"
    tests.mkdir()
    site.mkdir()
    shutil.copyfile(tf_suite_site.__file__, site / "sitecustomize.py")
    shutil.copyfile(tf_suite_progress.__file__, site / "tf_suite_progress.py")
    (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    renamed = {}
    for name in files:
        source = tf_src / TEST_FILES[name]
        text, renamed[name] = adapt_source(source.read_text(encoding="utf-8"), missing)
        (tests / source.name).write_text(text, encoding="utf-8")
    return renamed


# ---------------------------------------------------------------------------------- outcomes


def _first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def parse_junit(path, module):
    """Test id (``Class::test``) → :class:`Outcome` from pytest's JUnit XML report of the test
    file whose module name is ``module``. A file that fails to import gives one error under
    the id ``(collection)``."""
    outcomes = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        if classname == module:
            classname = ""
        elif classname.startswith(module + "."):
            classname = classname[len(module) + 1:]
        name = case.get("name", "")
        test_id = f"{classname}::{name}" if classname else (
            "(collection)" if name == module else name)
        outcome = Outcome("passed")
        for status, tag in (("failed", "failure"), ("error", "error"), ("skipped", "skipped")):
            element = case.find(tag)
            if element is not None:
                message = _first_line(element.get("message")) or _first_line(element.text)
                outcome = Outcome(status, message)
                break
        if test_id in outcomes and outcome.status == "passed":
            continue  # a teardown error is reported as a second case of the same test
        outcomes[test_id] = outcome
    return outcomes


def _death(returncode, stderr_text, timed_out):
    """The one-line reason a pytest process ended without its report."""
    if timed_out:
        return "killed: the whole file ran past its timeout"
    for line in stderr_text.splitlines():
        if line.startswith(tf_suite_progress.TIMEOUT_BANNER):
            return f"timed out: {line.strip()}"
        if line.startswith("Fatal Python error:"):
            return f"crashed: {line.strip()}"
    if returncode < 0:
        try:
            return f"crashed: {signal.Signals(-returncode).name}"
        except ValueError:
            return f"crashed: signal {-returncode}"
    return f"exited with status {returncode}: {_first_line(stderr_text[-2000:]) or 'no output'}"


# ---------------------------------------------------------------------------------- running


@dataclasses.dataclass(frozen=True)
class _Settings:
    work: Path
    tf1: bool
    keyword: str
    test_timeout: float
    file_timeout: float
    python: str = sys.executable


def _pytest(settings, test_file, mode, attempt, deselected):
    """One pytest process on ``test_file``; returns ``(junit path or None, death reason)``."""
    tag = f"{test_file.stem}-{mode}-{attempt}"
    logs = settings.work / "logs"
    logs.mkdir(exist_ok=True)
    junit = logs / f"{tag}.xml"
    progress = logs / f"{tag}.progress"
    command = [settings.python, "-m", "pytest", "-p", "no:cacheprovider",
               "-p", "tf_suite_progress", "-c", str(settings.work / "pytest.ini"),
               "--rootdir", str(test_file.parent), "-q", f"--junitxml={junit}",
               str(test_file)]
    if settings.keyword:
        command += ["-k", settings.keyword]
    for nodeid in deselected:
        command += ["--deselect", nodeid]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(settings.work / "site")] + [p for p in [env.get("PYTHONPATH")] if p])
    env[tf_suite_site.MODE_VARIABLE] = mode
    env[tf_suite_site.TF1_VARIABLE] = "1" if settings.tf1 else "0"
    env[tf_suite_progress.PROGRESS_VARIABLE] = str(progress)
    env[tf_suite_progress.TEST_TIMEOUT_VARIABLE] = str(settings.test_timeout)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    with open(logs / f"{tag}.out", "w", encoding="utf-8") as out, \
            open(logs / f"{tag}.err", "w", encoding="utf-8") as err:
        process = subprocess.Popen(command, cwd=test_file.parent, env=env, stdout=out,
                                   stderr=err, start_new_session=True)
        timed_out = False
        try:
            process.wait(timeout=settings.file_timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if junit.exists() and not timed_out:
        return junit, None
    stderr_text = (logs / f"{tag}.err").read_text(encoding="utf-8", errors="replace")
    started = progress.read_text(encoding="utf-8").splitlines() if progress.exists() else []
    return None, (started[-1] if started else None,
                  _death(process.returncode, stderr_text, timed_out))


def _run_file(settings, name, mode):
    """Run one test file in one mode (again without each test that kills the process)."""
    test_file = settings.work / "tests" / Path(TEST_FILES[name]).name
    run = FileRun(name, mode)
    killers = {}
    started = time.monotonic()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        junit, death = _pytest(settings, test_file, mode, attempt, list(killers))
        if junit is not None:
            run.outcomes = parse_junit(junit, test_file.stem)
            break
        nodeid, reason = death
        if nodeid is None or nodeid in killers:
            run.notes.append(f"the pytest process died before its report: {reason}")
            run.outcomes = {"(process)": Outcome("error", reason)}
            break
        killers[nodeid] = reason
        run.notes.append(f"{nodeid.split('::', 1)[-1]} killed the process ({reason}); "
                         "the file ran again without it")
    else:
        run.notes.append(f"gave up after {MAX_ATTEMPTS} runs")
    for nodeid, reason in killers.items():
        run.outcomes[nodeid.split("::", 1)[-1]] = Outcome("error", reason)
    run.seconds = time.monotonic() - started
    return run


def run_suite(tf_src, files, modes, settings, probe, log=sys.stderr):
    """Run every file of ``files`` in ``plain`` and each of ``modes`` on the TensorFlow
    :func:`probe_tensorflow` described; returns the :class:`FileRun` list (file by file, plain
    first) and ``{file: old names renamed in it}``."""
    renamed = _prepare(settings.work, tf_src, files, set(probe["missing"]))
    runs = []
    for name in files:
        for mode in ["plain"] + [m for m in modes if m != "plain"]:
            run = _run_file(settings, name, mode)
            counts = run.counts()
            log.write(f"{name} {mode}: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES)
                      + f" ({run.seconds:.0f} s)\n")
            log.flush()
            runs.append(run)
    return runs, renamed


# ---------------------------------------------------------------------------------- reporting


def differences(runs):
    """Every test whose outcome under a mode differs from its plain outcome, as dicts (file,
    test, mode, plain, status, message) in file, test and mode order."""
    plain = {run.file: run.outcomes for run in runs if run.mode == "plain"}
    found = []
    for run in runs:
        if run.mode == "plain" or run.file not in plain:
            continue
        reference = plain[run.file]
        for test in sorted(set(run.outcomes) | set(reference)):
            ours = run.outcomes.get(test, Outcome("absent"))
            theirs = reference.get(test, Outcome("absent"))
            if ours.status != theirs.status:
                found.append({"file": run.file, "test": test, "mode": run.mode,
                              "plain": theirs.status, "status": ours.status,
                              "message": ours.message or theirs.message})
    order = {name: i for i, name in enumerate(TEST_FILES)}
    found.sort(key=lambda d: (order.get(d["file"], 0), d["test"], MODES.index(d["mode"])))
    return found


def regressions(found):
    """The entries of :func:`differences` that pass plain and not under their mode."""
    return [d for d in found if d["plain"] == "passed"]


def format_table(runs):
    """Markdown table: one row per file and mode, the count of each status."""
    lines = ["| file | mode | " + " | ".join(STATUSES) + " |",
             "| --- | --- |" + " ---: |" * len(STATUSES)]
    for run in runs:
        counts = run.counts()
        lines.append(f"| {Path(TEST_FILES[run.file]).name} | {run.mode} | "
                     + " | ".join(str(counts[s]) for s in STATUSES) + " |")
    return "\n".join(lines)


def format_differences(found):
    """One line per difference: test, mode, plain → ours, first error line."""
    if not found:
        return "No test differs from plain TensorFlow."
    lines = [f"{len(found)} outcome{'s differ' if len(found) > 1 else ' differs'} from plain "
             "TensorFlow:"]
    for d in found:
        file_name = Path(TEST_FILES.get(d["file"], d["file"])).name
        message = f": {d['message']}" if d["message"] else ""
        lines.append(f"- {file_name} {d['test']} [{d['mode']}]: plain {d['plain']}, "
                     f"{d['status']}{message}")
    return "\n".join(lines)


def build_report(runs, probe, renamed, tf1, tf_src):
    """The JSON document of ``--report``."""
    found = differences(runs)
    return {
        "suite": "tf_session_suite",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tensorflow": probe["tensorflow"],
        "python": sys.version.split()[0],
        "behaviour": "tf1" if tf1 else "tf2",
        "tf_src": str(tf_src),
        "renamed": {TEST_FILES[name]: names for name, names in renamed.items() if names},
        "runs": [{"file": TEST_FILES[r.file], "mode": r.mode, "counts": r.counts(),
                  "seconds": round(r.seconds, 1), "notes": r.notes,
                  "tests": {test: dataclasses.asdict(o) for test, o in sorted(r.outcomes.items())}}
                 for r in runs],
        "differences": found,
        "regressions": len(regressions(found)),
    }


# ---------------------------------------------------------------------------------- command line


def parse_args(argv=None):
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.tf_session_suite",
        description="Run TensorFlow's own TF1 session tests plain and with every session "
                    "forced through NpuOptimizer; print passed/failed/skipped/error per file and "
                    "mode and every outcome that differs from plain.",
        epilog="The test files come from TensorFlow's sources: clone "
               "https://github.com/tensorflow/tensorflow at the tag of a supported release "
               "(e.g. git clone --depth 1 --branch v2.15.0 ...) and pass that folder as "
               "--tf-src.")
    parser.add_argument("--tf-src", required=True, metavar="DIR",
                        help="a folder holding TensorFlow's sources (the test files are read "
                             "from it, nothing is written there)")
    parser.add_argument("--mode", nargs="+", choices=MODES, default=list(MODES),
                        help="modes to run (default: all); plain always runs, as the reference")
    parser.add_argument("--tf1", action="store_true",
                        help="call tf.compat.v1.disable_v2_behavior() before the tests "
                             "(default: TensorFlow 2 behaviour, as pytest runs them)")
    parser.add_argument("--files", nargs="+", choices=list(TEST_FILES), default=list(TEST_FILES),
                        help="test files to run (default: all)")
    parser.add_argument("-k", dest="keyword", default="", metavar="EXPRESSION",
                        help="only the tests pytest's -k EXPRESSION selects")
    parser.add_argument("--report", metavar="FILE", help="write the outcomes as JSON to FILE")
    parser.add_argument("--work-dir", metavar="DIR",
                        help="run in DIR (new or empty) and keep it: the adapted test files, "
                             "pytest's logs and reports (default: a temporary folder)")
    parser.add_argument("--test-timeout", type=float, default=TEST_TIMEOUT, metavar="SECONDS",
                        help="a test running longer is stopped and counted as an error "
                             "(default: %(default)s)")
    parser.add_argument("--file-timeout", type=float, default=FILE_TIMEOUT, metavar="SECONDS",
                        help="limit for one pytest process (default: %(default)s)")
    return parser.parse_args(argv)


def _check_args(args):
    """The one-line reason the arguments cannot run, or None."""
    tf_src = Path(args.tf_src)
    if not tf_src.is_dir():
        return f"--tf-src {tf_src}: no such folder"
    missing = [TEST_FILES[name] for name in args.files if not (tf_src / TEST_FILES[name]).is_file()]
    if missing:
        return (f"--tf-src {tf_src} lacks {', '.join(missing)}: name a clone of "
                "https://github.com/tensorflow/tensorflow at a release tag")
    if args.report and not Path(args.report).resolve().parent.is_dir():
        return f"--report {args.report}: its folder does not exist"
    if args.work_dir:
        work = Path(args.work_dir)
        if work.exists() and (not work.is_dir() or any(work.iterdir())):
            return f"--work-dir {work}: must be a new or empty folder"
    if args.test_timeout <= 0 or args.file_timeout <= 0:
        return "--test-timeout and --file-timeout must be positive numbers of seconds"
    return None


def _write_json(path, document):
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(path)


def main(argv=None):
    """Run the suite (see the module docstring); return the exit status."""
    args = parse_args(argv)
    problem = _check_args(args)
    if problem:
        sys.stderr.write(f"python -m bench.tf_session_suite: error: {problem}\n")
        return 2
    try:
        probe = probe_tensorflow()
    except RuntimeError as exc:
        sys.stderr.write(f"python -m bench.tf_session_suite: error: {exc}\n")
        return 2
    tf_src = Path(args.tf_src).resolve()
    with tempfile.TemporaryDirectory(prefix="tf-session-suite-") as temporary:
        work = Path(args.work_dir).resolve() if args.work_dir else Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        settings = _Settings(work, args.tf1, args.keyword, args.test_timeout, args.file_timeout)
        runs, renamed = run_suite(tf_src, args.files, args.mode, settings, probe)
    found = differences(runs)
    behaviour = "TF1 behaviour (disable_v2_behavior)" if args.tf1 else "TF2 behaviour"
    print(f"TensorFlow {probe['tensorflow']}, {behaviour}\n")
    print(format_table(runs))
    notes = [f"- {Path(TEST_FILES[name]).name}: renamed {', '.join(names)} (moved in this "
             "TensorFlow)" for name, names in renamed.items() if names]
    notes += [f"- {Path(TEST_FILES[r.file]).name} [{r.mode}]: {note}"
              for r in runs for note in r.notes]
    if notes:
        print("\n" + "\n".join(notes))
    print("\n" + format_differences(found))
    if args.report:
        _write_json(args.report, build_report(runs, probe, renamed, args.tf1, tf_src))
    return 1 if regressions(found) else 0


if __name__ == "__main__":
    sys.exit(main())
