"""Worker of tests/test_xla_subprocess.py: runs an NpuSession on the xla backend in a fresh
process (XLA and TensorFlow read their flags once per process) and prints one JSON line.

Usage: ``python xla_worker.py steady`` or ``python xla_worker.py cache DIR SCALE STEPS`` or
``python xla_worker.py late DIR``. XLA compilations are counted from the XLA dump directory
(``XLA_FLAGS=--xla_dump_to=...``, set by the test): one ``*.before_optimizations.txt`` per
compiled module, whatever compiled it (the session's clusters or anything else).
"""

import glob
import json
import os
import sys
import warnings

import numpy as np

from npu_adapter.session import runner_of


def compiled_modules():
    flags = os.environ.get("XLA_FLAGS", "")
    directory = flags.split("--xla_dump_to=")[1].split()[0]
    return sorted(os.path.basename(p).split(".")[1]
                  for p in glob.glob(os.path.join(directory, "*.before_optimizations.txt")))


def run_built(sess, fetches, feeds):
    """``sess.run``, then wait for the executables its replay builds in the background."""
    out = sess.run(fetches, feeds)
    assert runner_of(sess).runtime.wait_for_builds(timeout=120)
    return out


def gear_graph(scale):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8], name="x")
        tf.reduce_sum(tf.nn.relu(x - 0.5) * scale, axis=1, name="y")
    return graph


def config(**options):
    from npu_adapter.config import NpuConfig

    options = dict(npu_adapter_backend="xla", input_shape="x:-1,8", dynamic_dims="2;4;8",
                   dynamic_node_type=1, **options)
    return NpuConfig.from_dict(options).to_config_proto()


def steady():
    from npu_adapter.session import NpuSession

    rng = np.random.RandomState(0)
    modules, compiles, errors = [], [], 0
    with NpuSession(graph=gear_graph(3.0), config=config()) as sess:
        for step in range(3 * 14):
            v = rng.rand([2, 4, 8][step % 3], 8).astype(np.float32)
            got = run_built(sess, "y:0", {"x:0": v})
            errors += not np.allclose(got, (np.maximum(v - 0.5, 0) * 3.0).sum(1), rtol=1e-4)
            modules.append(len(compiled_modules()))
            compiles.append(runner_of(sess).runtime_stats().compiles)
        background = runner_of(sess).runtime_stats().background_compiles
    return {"modules": modules, "compiles": compiles, "errors": errors,
            "names": compiled_modules(), "background_compiles": background}


def _cpu_global_jit(tf_compat):
    """The parsed value of the flag the cache's marker uses, left as it is."""
    value = tf_compat.swap_xla_cpu_global_jit(False)
    tf_compat.swap_xla_cpu_global_jit(value)
    return value


def cache(directory, scale, steps=3 * 14):
    from npu_adapter import tf_compat
    from npu_adapter.session import NpuSession

    scale = float(scale)
    rng = np.random.RandomState(1)
    errors = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with NpuSession(graph=gear_graph(scale),
                        config=config(graph_compiler_cache_dir=directory)) as sess:
            for step in range(int(steps)):
                v = rng.rand([2, 4, 8][step % 3], 8).astype(np.float32)
                got = run_built(sess, "y:0", {"x:0": v})
                errors += not np.allclose(got, (np.maximum(v - 0.5, 0) * scale).sum(1),
                                          rtol=1e-4)
            stats = runner_of(sess).runtime_stats()
    (cluster,) = stats.clusters.values()
    return {"modules": len(compiled_modules()), "written": stats.cache_misses,
            "compiles": stats.compiles, "background_compiles": stats.background_compiles,
            "read": stats.cache_hits, "errors": errors,
            "measured": stats.decisions_measured, "remembered": stats.decisions_remembered,
            "compiled_gears": sorted(label for label, why in cluster.decisions.items()
                                     if why.startswith("compiled")),
            "cpu_global_jit": _cpu_global_jit(tf_compat),
            "tf_xla_flags": os.environ.get("TF_XLA_FLAGS", ""),
            "warnings": [str(w.message) for w in caught]}


def late(directory):
    import tensorflow as tf

    tf.constant(1.0) + 1.0  # an eager op creates the devices: TF_XLA_FLAGS is read now
    tf.compat.v1.disable_eager_execution()
    return cache(directory, 3.0, 6)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    result = {"steady": steady, "cache": cache, "late": late}[mode](*args)
    print("RESULT " + json.dumps(result))
