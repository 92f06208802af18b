"""The rewrite cache's disk layer: shared between processes, atomic, checked, bounded."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.api import as_npu_config
from npu_adapter.backends import get_backend
from npu_adapter.backends.compile_cache import CompileCacheDirError, CompileCacheWarning
from npu_adapter.graph.payload import strip_payloads
from npu_adapter.session import rewrite_cache

tf1 = tf.compat.v1


def _graph_def(seed=0):
    rs = np.random.RandomState(seed)
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 1024], name="x")
        w = tf.constant(rs.randn(1024, 1024).astype(np.float32), name="w")  # 4 MB: set aside
        h = tf.nn.relu(tf.matmul(x, w), name="h")
        tf.strings.as_string(h, name="text")  # a host op: two placements
        tf.nn.softmax(h, name="probs")
    return graph.as_graph_def()


def _light(graph_def):
    """The graph as sessions rewrite it: large constants without their data."""
    return strip_payloads(graph_def)[0]


def _rewrite(graph_def, options, backend=None, fetches=("probs:0", "text:0")):
    """A session's rewrite of ``graph_def`` (through the cache)."""
    light = _light(graph_def)
    return rewrite_cache.cached_rewrite(
        light, rewrite_cache.graph_digest(light), as_npu_config(options), fetches=list(fetches),
        targets=[], feeds=["x:0"], backend=backend or get_backend("cpu"), graph_num=1)


def _same(a, b):
    assert a.graph_def.SerializeToString(deterministic=True) == \
        b.graph_def.SerializeToString(deterministic=True)
    for field in ("clusters", "placement", "modified", "skip_reason", "tensor_map", "op_map",
                  "feed_map", "pipeline", "aliases"):
        assert getattr(a, field) == getattr(b, field), field


def test_a_process_with_an_empty_memory_takes_the_rewrite_from_disk(tmp_path, counted_passes):
    options = {"npu_adapter_cache_dir": str(tmp_path)}
    first = _rewrite(_graph_def(), options)
    assert len(counted_passes) == 1
    entries = glob.glob(str(tmp_path / "npu_adapter_rewrite" / "*" / "*.pb"))
    assert len(entries) == 1
    rewrite_cache.MEMORY.clear()  # as a new process would start
    second = _rewrite(_graph_def(), options)
    assert len(counted_passes) == 1  # no pass ran
    _same(first, second)
    assert rewrite_cache.disk_cache(as_npu_config(options)).stats.hits == 1
    # Other weights, same structure: the entry serves too, with these weights.
    rewrite_cache.MEMORY.clear()
    third = _rewrite(_graph_def(seed=1), options)
    assert len(counted_passes) == 1
    fresh = npu_adapter.rewrite(_light(_graph_def(seed=1)), options,
                                fetches=["probs:0", "text:0"], feeds=["x:0"])
    _same(third, fresh)


def test_graph_compiler_cache_dir_is_the_fallback_location(tmp_path, counted_passes):
    _rewrite(_graph_def(), {"graph_compiler_cache_dir": str(tmp_path)})
    assert glob.glob(str(tmp_path / "npu_adapter_rewrite" / "*" / "*.pb"))
    rewrite_cache.MEMORY.clear()
    _rewrite(_graph_def(), {"graph_compiler_cache_dir": str(tmp_path)})
    assert len(counted_passes) == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "record"])
def test_a_damaged_entry_is_removed_with_a_warning_and_rebuilt(tmp_path, counted_passes, damage):
    options = {"npu_adapter_cache_dir": str(tmp_path)}
    good = _rewrite(_graph_def(), options)
    (artefact,) = glob.glob(str(tmp_path / "npu_adapter_rewrite" / "*" / "*.pb"))
    record = artefact[:-3] + ".json"
    if damage == "truncate":
        with open(artefact, "r+b") as f:
            f.truncate(os.path.getsize(artefact) // 2)
    elif damage == "flip":
        with open(artefact, "rb") as f:
            data = bytearray(f.read())
        data[len(data) // 2] ^= 0xFF
        with open(artefact, "wb") as f:
            f.write(bytes(data))
    else:  # a record from another format: complete bytes, unusable fields
        with open(record) as f:
            content = json.load(f)
        del content["meta"]["placement"]
        with open(record, "w") as f:
            json.dump(content, f)
    rewrite_cache.MEMORY.clear()
    with pytest.warns(CompileCacheWarning, match="rebuilt"):
        rebuilt = _rewrite(_graph_def(), options)
    assert len(counted_passes) == 2
    _same(good, rebuilt)
    # The rebuilt entry is complete again and serves the next process.
    rewrite_cache.MEMORY.clear()
    _rewrite(_graph_def(), options)
    assert len(counted_passes) == 2


def test_a_missing_cache_directory_is_a_named_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(CompileCacheDirError, match="npu_adapter_cache_dir"):
        _rewrite(_graph_def(), {"npu_adapter_cache_dir": str(missing)})
    assert not missing.exists()


def test_the_entries_are_bounded_by_the_compile_cache_size(tmp_path):
    config = as_npu_config({"npu_adapter_cache_dir": str(tmp_path),
                                        "npu_adapter_compile_cache_max_mb": 3})
    assert rewrite_cache.disk_cache(config).store.max_bytes == 3 << 20


def test_a_second_process_does_no_pass_work(tmp_path):
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        import tensorflow as tf
        from npu_adapter.session import NpuSession
        from npu_adapter.session import rewrite_cache
        from npu_adapter.pipeline.manager import PassManager
        runs = []
        real = PassManager.run
        PassManager.run = lambda self, g, ctx=None, **kw: runs.append(1) or real(self, g, ctx, **kw)
        config = tf.compat.v1.ConfigProto()
        opt = config.graph_options.rewrite_options.custom_optimizers.add()
        opt.name = "NpuOptimizer"
        opt.parameter_map["npu_adapter_cache_dir"].s = {str(tmp_path)!r}.encode()
        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
            w = tf.constant(np.arange(16, dtype=np.float32).reshape(4, 4), name="w")
            y = tf.nn.softmax(tf.matmul(x, w), name="y")
        with NpuSession(graph=graph, config=config) as sess:
            value = sess.run(y, {{x: np.ones((2, 4), np.float32)}})
        print(json.dumps({{"runs": len(runs), "value": value.tolist()}}))
    """)
    outputs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert [o["runs"] for o in outputs] == [1, 0]
    assert outputs[0]["value"] == outputs[1]["value"]


def test_a_backend_with_process_bound_rewrites_keeps_them_in_memory(tmp_path, counted_passes):
    from npu_adapter.backends.cpu.lowering import CpuReferenceBackend

    class ProcessBound(CpuReferenceBackend):
        portable_rewrites = False  # e.g. CANN: callback tokens registered in this process

    _rewrite(_graph_def(), {"npu_adapter_cache_dir": str(tmp_path)}, backend=ProcessBound())
    assert not glob.glob(str(tmp_path / "npu_adapter_rewrite" / "*" / "*"))
    assert len(counted_passes) == 1


def test_the_sources_stamp_follows_every_source_file_and_nothing_else(tmp_path):
    # Disk entries carry the stamp of our sources: an edited pass must not reuse old rewrites.
    root = tmp_path / "pkg"
    (root / "sub" / "__pycache__").mkdir(parents=True)
    (root / "a.py").write_text("x = 1\n")
    (root / "sub" / "b.py").write_text("y = 2\n")
    (root / "notes.txt").write_text("not a source")
    first = rewrite_cache.sources_stamp([str(root)])
    assert rewrite_cache.sources_stamp([str(root)]) == first
    (root / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0")
    (root / "notes.txt").write_text("still not a source")
    assert rewrite_cache.sources_stamp([str(root)]) == first
    stat = os.stat(root / "sub" / "b.py")
    os.utime(root / "sub" / "b.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    touched = rewrite_cache.sources_stamp([str(root)])
    assert touched != first
    (root / "sub" / "c.py").write_text("")
    assert rewrite_cache.sources_stamp([str(root)]) != touched
