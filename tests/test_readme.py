"""The README runs as written: its code, its commands and the output it shows.

* every ``python`` block runs in a fresh interpreter; when a ``text`` block follows it, that is
  what the code prints;
* every ``diff`` block is a port of a script: the script after the change (its context and added
  lines) runs;
* every ``console`` block is a session: its ``$`` commands run one after the other in an
  empty folder (``examples/`` at hand) and print the lines shown below each, where ``…`` stands
  for text left out;
* the README is a guide, not a log: at most 300 lines, none wider than 120 characters but table
  rows.

``sh`` blocks (installation, the test command) are not run here: CI runs them (``.ci/run``).
"""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.M | re.S)


def blocks():
    """``(language, body, line number)`` of every fenced block of the README, in order."""
    text = README.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
            for m in _BLOCK.finditer(text)]


def _python_cases():
    found = blocks()
    cases = []
    for i, (language, body, line) in enumerate(found):
        if language == "python":
            following = found[i + 1] if i + 1 < len(found) else None
            shown = following[1] if following and following[0] == "text" else None
            cases.append(pytest.param(body, shown, id=f"line{line}"))
        elif language == "diff":
            after = "\n".join(row[1:] for row in body.splitlines() if row[:1] in ("", " ", "+"))
            cases.append(pytest.param(after, None, id=f"line{line}-after"))
    return cases


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0")


@pytest.mark.parametrize("source, shown", _python_cases())
def test_python_code_runs_as_written(source, shown, tmp_path):
    proc = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if shown is not None:
        assert proc.stdout == shown


def matches(shown, printed):
    """True when the printed lines are the shown ones, ``…`` in a shown line standing for any
    text."""
    if len(shown) != len(printed):
        return False
    for want, got in zip(shown, printed):
        pattern = ".*".join(re.escape(part) for part in want.split("…"))
        if not re.fullmatch(pattern, got):
            return False
    return True


def test_matches():
    assert matches(["a (…)", "b"], ["a (anything at all)", "b"])
    assert not matches(["a (…)"], ["a [x]"])
    assert not matches(["a"], ["a", "b"])


def _sessions():
    """Per ``console`` block: its ``(command, shown output lines)`` pairs."""
    sessions = []
    for language, body, line in blocks():
        if language != "console":
            continue
        steps = []
        for row in body.splitlines():
            if row.startswith("$ "):
                steps.append((row[2:], []))
            else:
                assert steps, f"README line {line}: output before a command"
                steps[-1][1].append(row)
        sessions.append(pytest.param(steps, id=f"line{line}"))
    return sessions


def _argv(command):
    """The command as the user's shell runs it, in this environment."""
    argv = shlex.split(command)
    if argv[0] == "python":
        return [sys.executable] + argv[1:]
    if argv[0] == "npu-adapter":
        script = pathlib.Path(sys.executable).with_name("npu-adapter")
        if script.exists():
            return [str(script)] + argv[1:]
        return [sys.executable, "-m", "npu_adapter.cli"] + argv[1:]
    raise AssertionError(f"the README runs {argv[0]}: teach this test how")


@pytest.mark.parametrize("steps", _sessions())
def test_console_sessions_print_what_the_readme_shows(steps, tmp_path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    for command, shown in steps:
        proc = subprocess.run(_argv(command), cwd=tmp_path, env=_env(), capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, f"{command}: {proc.stderr[-3000:]}"
        assert matches(shown, proc.stdout.splitlines()), f"{command} printed:\n{proc.stdout}"


def test_the_readme_is_a_short_guide():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300
    wide = [f"{number}: {len(line)}" for number, line in enumerate(lines, 1)
            if len(line) > 120 and not line.startswith("|")]
    assert wide == []


def test_the_setup_commands_are_those_ci_runs():
    text = README.read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci = ci.replace("pip install -q ", "pip install ")
    for command in ('pip install -e ".[tf,test]"', 'pip install -e ".[test]"', "pytest -q",
                    "python examples/quickstart.py"):
        assert command in text and command in ci, command
