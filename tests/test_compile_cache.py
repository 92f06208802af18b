"""The content-addressed compile cache (``npu_adapter/backends/compile_cache.py``) and the
cann backend's use of it: a second process reuses the ``.om``; a changed option recompiles."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.backends.compile_cache import (
    CompileCache,
    CompileCacheDirError,
    CompileCacheWarning,
    cache_key,
)

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)


def _artefact(tmp_path, name, size, fill=b"x"):
    path = tmp_path / name
    path.write_bytes(fill * size)
    return str(path)


def test_key_is_content_addressed():
    a = cache_key({"program": "abc", "shapes": [[2, 3]], "options": {"x": 1, "y": 2}})
    b = cache_key({"options": {"y": 2, "x": 1}, "shapes": [[2, 3]], "program": "abc"})
    assert a == b and len(a) == 64
    assert a != cache_key({"program": "abc", "shapes": [[2, 4]], "options": {"x": 1, "y": 2}})


def test_store_and_lookup(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    cache = CompileCache(str(root), "cann", suffix=".om")
    key = cache_key("k1")
    assert cache.lookup(key) is None
    path = cache.store(key, _artefact(tmp_path, "a.om", 100), meta={"cluster": "GeOp1_0"})
    assert path == os.path.join(str(root), "npu_adapter_cann", key[:2], key + ".om")
    assert cache.lookup(key) == path
    record = cache.record(key)
    assert record["size"] == 100 and record["meta"] == {"cluster": "GeOp1_0"}
    assert cache.stats.as_dict() == {"hits": 1, "misses": 1, "stores": 1, "evictions": 0,
                                     "corrupt": 0}
    leftovers = [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".tmp-")]
    assert leftovers == []


def test_entries_get_the_mode_the_umask_gives(tmp_path):
    """An executable cache shared with a serving process or a colleague must be readable."""
    old = os.umask(0o022)
    try:
        cache = CompileCache(str(tmp_path), "cann", suffix=".om")
        key = cache_key("k-mode")
        path = cache.store_bytes(key, b"model")
    finally:
        os.umask(old)
    record = [os.path.join(os.path.dirname(path), n) for n in os.listdir(os.path.dirname(path))
              if n != os.path.basename(path)]
    assert [oct(os.stat(p).st_mode & 0o777) for p in [path, *record]] == ["0o644"] * 2


def test_missing_directory_is_a_named_error(tmp_path):
    with pytest.raises(CompileCacheDirError, match="graph_compiler_cache_dir.*existing "
                                                   "directory"):
        CompileCache(str(tmp_path / "nope"), "cann")


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupted_entry_is_rebuilt_with_a_warning(tmp_path, damage):
    cache = CompileCache(str(tmp_path), "cann", suffix=".om")
    key = cache_key("k")
    path = cache.store(key, _artefact(tmp_path, "a.om", 64))
    with open(path, "r+b") as f:
        if damage == "truncate":
            f.truncate(10)
        else:
            f.seek(5)
            f.write(b"y")
    fresh = CompileCache(str(tmp_path), "cann", suffix=".om")  # another process
    with pytest.warns(CompileCacheWarning, match="corrupted.*removed and rebuilt"):
        assert fresh.lookup(key) is None
    assert not os.path.exists(path) and fresh.stats.corrupt == 1
    fresh.store(key, _artefact(tmp_path, "b.om", 64))
    assert fresh.lookup(key) == path


def test_lru_eviction_keeps_the_recent_entries(tmp_path):
    cache = CompileCache(str(tmp_path), "cann", suffix=".om", max_bytes=250)
    keys = [cache_key(f"k{i}") for i in range(3)]
    for i, key in enumerate(keys[:2]):
        cache.store(key, _artefact(tmp_path, f"{i}.om", 100))
        os.utime(cache.path_of(key), (1000 + i, 1000 + i))
    assert cache.lookup(keys[0])  # a hit makes k0 the most recently used
    cache.store(keys[2], _artefact(tmp_path, "2.om", 100))
    assert cache.lookup(keys[1]) is None  # the least recently used one went
    assert cache.lookup(keys[0]) and cache.lookup(keys[2])
    assert cache.total_bytes() == 200 and cache.stats.evictions == 1
    # An entry larger than the bound is kept (it is the one just stored).
    big = cache_key("big")
    cache.store(big, _artefact(tmp_path, "big.om", 300))
    assert cache.lookup(big) and cache.total_bytes() == 300


def test_concurrent_writers_leave_one_complete_entry(tmp_path):
    """Threads here and processes below store the same key at once."""
    key = cache_key("same")
    source = _artefact(tmp_path, "src.om", 4096, b"z")
    errors = []

    def store():
        try:
            CompileCache(str(tmp_path), "cann", suffix=".om").store(key, source)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=store) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {REPO!r})
        from npu_adapter.backends.compile_cache import CompileCache
        for _ in range(20):
            CompileCache({str(tmp_path)!r}, "cann", suffix=".om").store({key!r}, {source!r})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert not errors
    cache = CompileCache(str(tmp_path), "cann", suffix=".om")
    with open(cache.lookup(key), "rb") as f:
        assert f.read() == b"z" * 4096
    folder = os.path.dirname(cache.path_of(key))
    assert sorted(os.listdir(folder)) == [key + ".json", key + ".om"]


# ------------------------------------------------------------------- the cann backend's use
def _graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        w = tf.constant(np.linspace(-2, 2, 8, dtype=np.float32).reshape(4, 2), name="w")
        tf.nn.tanh(tf.matmul(x, w), name="y")
    return graph


def _run_session(cache_dir, **options):
    from npu_adapter.session import NpuSession

    config = tf.compat.v1.ConfigProto()
    opt = config.graph_options.rewrite_options.custom_optimizers.add()
    opt.name = "NpuOptimizer"
    opt.parameter_map["npu_adapter_backend"].s = b"cann"
    opt.parameter_map["graph_compiler_cache_dir"].s = cache_dir.encode()
    for key, value in options.items():
        opt.parameter_map[key].s = value.encode()
    with NpuSession(graph=_graph(), config=config) as sess:
        return sess.run("y:0", {"x:0": np.arange(12, dtype=np.float32).reshape(3, 4)})


SECOND_PROCESS = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
sys.path.insert(0, {tests!r})
import cann_fakes
cann_fakes.install({fakes_root!r})
import test_compile_cache
from npu_adapter.backends.cann import runtimes
out = test_compile_cache._run_session({cache_dir!r})
stats = runtimes()[0].stats()
print(json.dumps({{"out": out.tolist(), "compiles": stats.compiles,
                  "disk_hits": stats.disk_hits}}))
"""


def test_second_process_reuses_the_om(cann_fakes, tmp_path):
    cache_dir = tmp_path / "graph_cache"
    cache_dir.mkdir()
    first = _run_session(str(cache_dir))
    assert len(cann_fakes.atc_calls()) == 1
    script = SECOND_PROCESS.format(tests=TESTS, fakes_root=os.path.dirname(cann_fakes.bin),
                                   cache_dir=str(cache_dir))
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["compiles"] == 0 and report["disk_hits"] == 1
    assert len(cann_fakes.atc_calls()) == 1  # the fake atc was not called again
    np.testing.assert_array_equal(np.asarray(report["out"], np.float32), first)


def test_changed_option_recompiles_and_corrupt_om_is_rebuilt(cann_fakes, tmp_path):
    from npu_adapter.backends.cann import shutdown

    cache_dir = tmp_path / "graph_cache"
    cache_dir.mkdir()
    base = _run_session(str(cache_dir))
    _run_session(str(cache_dir))
    assert len(cann_fakes.atc_calls()) == 1
    shutdown()  # a fresh runtime: only the disk cache remains
    _run_session(str(cache_dir))
    assert len(cann_fakes.atc_calls()) == 1
    changed = _run_session(str(cache_dir), precision_mode="allow_fp32_to_fp16")
    assert len(cann_fakes.atc_calls()) == 2
    assert cann_fakes.atc_flags()["precision_mode"] == "allow_fp32_to_fp16"
    np.testing.assert_array_equal(base, changed)  # the fake does not emulate precision
    shutdown()
    oms = [os.path.join(root, name) for root, _, names in os.walk(cache_dir) for name in names
           if name.endswith(".om")]
    assert len(oms) == 2
    for path in oms:
        with open(path, "r+b") as f:
            f.truncate(20)
    with pytest.warns(CompileCacheWarning):
        rebuilt = _run_session(str(cache_dir))
    assert len(cann_fakes.atc_calls()) == 3
    np.testing.assert_array_equal(rebuilt, base)


def test_missing_cache_dir_fails_the_rewrite(cann_fakes, tmp_path):
    with pytest.raises(CompileCacheDirError, match="graph_compiler_cache_dir"):
        _run_session(str(tmp_path / "absent"))
