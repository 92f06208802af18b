"""The xla backend in fresh processes: XLA compilations counted from XLA's dump directory (one
module per gear, on its second run, none in the steady state), and graph_compiler_cache_dir on
TensorFlow's persistent XLA cache with the compiled-or-TensorFlow decisions next to it (cold,
warm — nothing compiled, nothing measured —, changed graph, corrupted entry, set too late).

Each case runs ``tests/xla_worker.py`` in a new interpreter: XLA and TensorFlow read their
flags once per process.
"""

import glob
import json
import os
import subprocess
import sys

import pytest

from npu_adapter.backends.xla.persistent_cache import persistent_cache_supported

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla_worker.py")


def run_worker(tmp_path, *args):
    dump = tmp_path / f"dump_{len(list(tmp_path.glob('dump_*')))}"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", XLA_FLAGS=f"--xla_dump_to={dump}")
    env.pop("TF_XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, WORKER, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=240)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_one_compilation_per_gear_and_none_in_the_steady_state(tmp_path):
    result = run_worker(tmp_path, "steady")
    assert result["errors"] == 0
    # 42 runs over 3 gears: each gear's first run is on TensorFlow's kernels and its replay
    # compiles the gear's executable in the background (the worker waits for it after each
    # run); XLA compiles nothing else, ever.
    assert result["modules"] == [1, 2, 3] + [3] * 39
    assert result["names"] == [f"GeOp1_0_gear_{g}__" for g in range(3)]
    # The runtime's count agrees with XLA's, and none compiled in the foreground.
    assert result["compiles"] == result["modules"]
    assert result["background_compiles"] == 3


@pytest.fixture
def cache_dir(tmp_path):
    path = tmp_path / "cache"
    path.mkdir()
    return path


def entries(cache_dir):
    return sorted(glob.glob(str(cache_dir / "npu_adapter_xla" / "*.pb")))


def decision_files(cache_dir):
    return sorted(glob.glob(str(cache_dir / "npu_adapter_xla" / "decisions" / "*.json")))


def atime_tracked(directory):
    """Whether reading a file moves its access time past its write time here (not on file
    systems mounted noatime): the cache's read count relies on it."""
    path = directory / "atime_probe"
    path.write_bytes(b"x")
    st = os.stat(path)
    os.utime(path, ns=(st.st_mtime_ns - 10**9, st.st_mtime_ns))
    path.read_bytes()
    tracked = os.stat(path).st_atime_ns > st.st_mtime_ns - 10**9
    path.unlink()
    return tracked


@pytest.mark.skipif(not persistent_cache_supported(),
                    reason="this TensorFlow cannot persist XLA CPU executables")
def test_persistent_cache_cold_warm_changed_and_corrupted(tmp_path, cache_dir):
    cold = run_worker(tmp_path, "cache", cache_dir, 3.0)
    assert cold["errors"] == 0 and cold["warnings"] == []
    assert cold["modules"] == 3 and cold["written"] == 3 and cold["read"] == 0
    assert cold["measured"] == 3 and cold["remembered"] == 0  # one decision per gear
    assert len(entries(cache_dir)) == 3 and len(decision_files(cache_dir)) == 3
    # Reading the flags left them as the user's, and no marker in the environment.
    assert cold["cpu_global_jit"] is False
    assert "cpu_global_jit" not in cold["tf_xla_flags"]

    # A warm process compiles nothing (not even to check the cache) and measures nothing;
    # the executables of the gears decided compiled are loaded from the cache in the
    # background (the runtime counts them as built), while the runs go on.
    warm = run_worker(tmp_path, "cache", cache_dir, 3.0)
    assert warm["errors"] == 0 and warm["warnings"] == []
    assert warm["modules"] == 0 and warm["written"] == 0
    assert warm["compiles"] == warm["background_compiles"] == len(warm["compiled_gears"])
    assert warm["measured"] == 0 and warm["remembered"] == 3
    assert warm["compiled_gears"] == cold["compiled_gears"]
    if atime_tracked(tmp_path):  # the executables of the gears decided compiled are loaded
        assert warm["read"] == len(warm["compiled_gears"])

    changed = run_worker(tmp_path, "cache", cache_dir, 5.0)  # another constant: a miss
    assert changed["errors"] == 0
    assert changed["modules"] == 3 and changed["written"] == 3 and changed["measured"] == 3
    assert len(entries(cache_dir)) == 6 and len(decision_files(cache_dir)) == 6

    victim = entries(cache_dir)[0]
    with open(victim, "r+b") as f:
        f.truncate(100)
    again = run_worker(tmp_path, "cache", cache_dir, 3.0)
    assert again["errors"] == 0  # TensorFlow alone would fail the run on the truncated entry
    assert any("is corrupted" in w and os.path.basename(victim) in w for w in again["warnings"])
    rebuilt = again["written"]
    assert again["modules"] == rebuilt and rebuilt <= 1  # only a scale-3.0 entry is rebuilt
    assert again["measured"] == 0  # the decisions stand
    assert len(entries(cache_dir)) == 5 + rebuilt


@pytest.mark.skipif(persistent_cache_supported(), reason="this TensorFlow persists them")
def test_unsupported_tensorflow_warns_and_compiles_uncached(tmp_path, cache_dir):
    result = run_worker(tmp_path, "cache", cache_dir, 3.0, 6)
    assert result["errors"] == 0 and result["modules"] == 3 and result["written"] == 0
    assert any("cannot keep XLA CPU executables" in w for w in result["warnings"])
    assert entries(cache_dir) == []


@pytest.mark.skipif(not persistent_cache_supported(),
                    reason="this TensorFlow cannot persist XLA CPU executables")
def test_cache_named_too_late_warns_and_runs_uncached(tmp_path, cache_dir):
    result = run_worker(tmp_path, "late", cache_dir)
    assert result["errors"] == 0 and result["modules"] == 3
    assert any("read TF_XLA_FLAGS before" in w for w in result["warnings"])
    assert entries(cache_dir) == []
