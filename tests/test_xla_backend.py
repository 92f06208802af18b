"""The xla backend: compilability check, fallback per cluster, equivalence with plain TensorFlow
in both forms of a cluster (compiled and on TensorFlow's kernels), one executable per gear, the
persistent-cache bookkeeping and the report's compile status. The per-cluster decision and the
depthwise rewrite have their own files (tests/test_xla_decisions.py, tests/test_xla_depthwise.py).
"""

import os
import warnings

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import node_def_pb2, types_pb2

from npu_adapter import rewrite
from npu_adapter.backends import get_backend
from npu_adapter.backends.xla import XlaBackend, XlaCacheWarning
from npu_adapter.backends.xla.compilability import check_functions, check_node
from npu_adapter.backends.xla.decisions import forget_decisions
from npu_adapter.backends.xla.persistent_cache import PersistentCache, framing_problem
from npu_adapter.backends.xla.trial import PAIRS
from npu_adapter.config import NpuConfig
from npu_adapter.errors import NpuConfigError
from npu_adapter.report.placement import placement_report
from npu_adapter.session import NpuSession, plain_session_class, runner_of
from npu_adapter.testing import assert_rewrite_equivalent

tf1 = tf.compat.v1
PlainSession = plain_session_class()
RTOL, ATOL = 1e-4, 1e-5  # float32: XLA fuses and reorders arithmetic
# Runs until a signature with one compiled cluster has decided it: the first on TensorFlow's
# kernels (its replay builds the executable in the background), then the timed pairs; one more
# for a signature whose executables compile in the foreground (a training step).
DECIDED_AFTER = 2 + 2 * PAIRS


def run_built(sess, fetches, feeds):
    """``sess.run``, then wait for the executables its replay builds in the background: the
    runs a test makes see them built from the next run on, whatever the machine's speed."""
    out = sess.run(fetches, feeds)
    assert runner_of(sess).runtime.wait_for_builds(timeout=300)
    return out


@pytest.fixture(autouse=True)
def measure_afresh():
    """Each test measures its own decisions (the process remembers them across sessions)."""
    forget_decisions()
    yield
    forget_decisions()


def xla_config(**options):
    return NpuConfig.from_dict(dict(npu_adapter_backend="xla", **options)).to_config_proto()


def node(op, name="n", **types):
    n = node_def_pb2.NodeDef(name=name, op=op)
    for key, value in types.items():
        n.attr[key].type = value
    return n


# --------------------------------------------------------------------------- check
def test_registry_gives_the_xla_backend():
    backend = get_backend("xla")
    assert isinstance(backend, XlaBackend) and backend.name == "xla"
    ok, why = backend.available()
    assert ok, why


@pytest.mark.parametrize("op, types, ok, reason", [
    ("MatMul", {"T": types_pb2.DT_FLOAT}, True, ""),
    ("MatMul", {"T": types_pb2.DT_INT8}, False, "xla_dtype"),
    ("Unique", {"T": types_pb2.DT_FLOAT, "out_idx": types_pb2.DT_INT32}, False,
     "xla_value_dependent_shape"),
    ("Where", {"T": types_pb2.DT_BOOL}, False, "xla_value_dependent_shape"),
    ("ResizeBicubic", {"T": types_pb2.DT_FLOAT}, False, "xla_no_kernel"),
    ("StringJoin", {}, False, "xla_unsupported_tensor"),
    ("LookupTableFindV2", {"Tin": types_pb2.DT_INT64, "Tout": types_pb2.DT_FLOAT}, False,
     "xla_unsupported_tensor"),
    ("ReadVariableOp", {"dtype": types_pb2.DT_FLOAT}, True, ""),
])
def test_check_node(op, types, ok, reason):
    verdict = check_node(node(op, **types))
    assert verdict.ok is ok and verdict.reason == reason, verdict
    if not ok:
        assert op in verdict.detail


def test_check_follows_called_functions():
    @tf.function(autograph=False)
    def inner(x):
        return tf.unique(x)[0]

    @tf.function(autograph=False)
    def outer(x):
        return inner(x) * 2.0

    graph = tf.Graph()
    with graph.as_default():
        outer(tf1.placeholder(tf.float32, [None]))
    functions = {f.signature.name: f for f in graph.as_graph_def().library.function}
    (outer_name,) = [n for n in functions if "outer" in n]
    verdict = check_functions([outer_name], functions)
    assert not verdict.ok and verdict.reason == "xla_value_dependent_shape"
    assert check_functions(["missing_fn"], functions).reason == "xla_unknown_function"


# --------------------------------------------------------------------------- equivalence
def conv_net():
    graph = tf.Graph()
    rng = np.random.RandomState(1)
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 16, 16, 3], name="x")
        k1 = tf.constant(rng.randn(3, 3, 3, 8).astype(np.float32) * 0.3)
        k2 = tf.constant(rng.randn(3, 3, 8, 16).astype(np.float32) * 0.2)
        h = tf.nn.relu(tf.nn.conv2d(x, k1, 1, "SAME") + 0.1)
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.nn.relu(tf.nn.conv2d(h, k2, 1, "SAME"))
        h = tf.reduce_mean(h, axis=[1, 2])
        w = tf.constant(rng.randn(16, 10).astype(np.float32))
        tf.nn.softmax(tf.matmul(h, w), name="probs")
    return graph.as_graph_def(), {"x:0": rng.rand(4, 16, 16, 3).astype(np.float32)}


def test_conv_net_inference_matches_plain_tensorflow():
    graph_def, feeds = conv_net()
    result = assert_rewrite_equivalent(graph_def, {}, feeds, ["probs:0"], backend="xla",
                                       rtol=RTOL, atol=ATOL)
    calls = [n for n in result.graph_def.node if n.op == "StatefulPartitionedCall"]
    assert calls and all(n.attr["_XlaMustCompile"].b for n in calls)
    assert all(n.attr["_npu_adapter_xla_status"].s == b"xla" for n in calls)
    # The form on TensorFlow's kernels is named on the node: here the same function (nothing in
    # it is rewritten for XLA).
    assert all(n.attr["_npu_adapter_xla_tf_function"].s.decode() == n.attr["f"].func.name
               for n in calls)


def lenet_train(use_resource):
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(7)
        x = tf1.placeholder(tf.float32, [8, 12, 12, 1], name="x")
        y = tf1.placeholder(tf.float32, [8, 4], name="y")
        k = tf1.get_variable("k", [5, 5, 1, 6], use_resource=use_resource)
        w = tf1.get_variable("w", [4 * 4 * 6, 4], use_resource=use_resource)
        b = tf1.get_variable("b", [4], initializer=tf1.zeros_initializer(),
                             use_resource=use_resource)
        h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(x, k, 1, "VALID")), 2, 2, "VALID")
        logits = tf.matmul(tf.reshape(h, [8, -1]), w) + b
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits),
                              name="loss")
        train = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(loss, name="train")
        init = tf1.global_variables_initializer()
    return graph, x, y, loss, train, init, [k, w, b]


@pytest.mark.parametrize("use_resource", [True, False])
def test_lenet_training_steps_match_plain_tensorflow(use_resource):
    rng = np.random.RandomState(0)
    xs = rng.rand(8, 12, 12, 1).astype(np.float32)
    ys = np.eye(4, dtype=np.float32)[rng.randint(0, 4, 8)]
    runs = {}
    # Enough steps to decide every compiled cluster: the steps alternate the compiled form and
    # TensorFlow's kernels cluster by cluster, on the same variables.
    steps = 1 + 2 * (1 + 2 * PAIRS) + 2
    for cls, config in ((PlainSession, None), (NpuSession, xla_config())):
        graph, x, y, loss, train, init, variables = lenet_train(use_resource)
        with cls(graph=graph, config=config) as sess:
            sess.run(init)
            losses = [sess.run([loss, train], {x: xs, y: ys})[0] for _ in range(steps)]
            if cls is NpuSession:
                stats = runner_of(sess).runtime_stats()
                step = runner_of(sess).rewrite_result([loss, train], {x: xs, y: ys})
            runs[cls] = losses, sess.run(variables)
    (plain_losses, plain_vars), (xla_losses, xla_vars) = runs[PlainSession], runs[NpuSession]
    np.testing.assert_allclose(xla_losses, plain_losses, rtol=RTOL, atol=ATOL)
    for a, b in zip(xla_vars, plain_vars):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    assert plain_losses[-1] < plain_losses[0]  # it trains
    # The initialisers draw random numbers: their cluster stays on the CPU reference (same
    # numbers as TensorFlow). Every cluster of the training step is decided, after running in
    # both forms; the step ran `steps` times.
    (fallback,) = [st for st in stats.clusters.values() if st.status == "fallback"]
    assert stats.fallbacks == 1 and "draws random numbers" in fallback.reason
    decided = [(c.name, stats.clusters[c.name]) for c in step.clusters]
    assert decided and all(st.status in ("compiled", "tensorflow") for _, st in decided)
    assert stats.decisions_measured == len(decided)
    for name, st in decided:
        assert st.runs_compiled + st.runs_tensorflow == steps, name
        assert st.runs_compiled > PAIRS and st.runs_tensorflow > PAIRS, name
        assert st.compiles == 1, name
        (why,) = st.decisions.values()
        assert "on TensorFlow's kernels" in why and f"over {PAIRS} pairs of runs" in why


# --------------------------------------------------------------------------- fallback
def unique_graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [6], name="x")
        scaled = tf.identity(x * 3.0 + 1.0, name="scaled")
        tf.identity(tf.unique(tf.floor(scaled))[0], name="uniq")
        tf.reduce_sum(tf.square(x), name="total")
    return graph


def test_fallback_cluster_runs_on_the_cpu_reference_with_the_reason():
    feeds = {"x:0": np.array([0.1, 0.2, 0.1, 0.7, 0.9, 0.2], np.float32)}
    graph_def = unique_graph().as_graph_def()
    fetches = ["uniq:0", "total:0", "scaled:0"]
    result = assert_rewrite_equivalent(graph_def, {}, feeds, fetches, backend="xla",
                                       rtol=RTOL, atol=ATOL)
    status = {n.name: n.attr["_npu_adapter_xla_status"].s.decode()
              for n in result.graph_def.node if "_npu_adapter_xla_status" in n.attr}
    assert sorted(status.values()) == ["fallback"], status  # one cluster holds Unique
    (fallback,) = [n for n in result.graph_def.node if n.name in status]
    assert "_XlaMustCompile" not in fallback.attr
    detail = fallback.attr["_npu_adapter_xla_detail"].s.decode()
    assert detail == (f"cluster {fallback.name}: op Unique (value-dependent shape) not "
                      f"compilable by XLA; runs on the CPU reference")
    report = placement_report(result, graph_def, backend="xla", fetches=fetches)
    (record,) = report["clusters"]
    assert record["compile"] == {"status": "fallback", "reason": "xla_value_dependent_shape",
                                 "detail": detail}


def test_mixed_graph_compiles_one_cluster_and_falls_back_on_the_other():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 4], name="x")
        a = tf.matmul(x, x) + 1.0
        # A host op (a Python function) splits the device work into two clusters.
        n = tf.numpy_function(lambda v: v * 2.0, [a], tf.float32, stateful=False)
        b = tf.image.resize(tf.reshape(n, [1, 4, 4, 1]), [8, 8], method="bicubic")
        tf.identity(tf.reduce_sum(b) + 1.0, name="out")
    feeds = {"x:0": np.arange(16, dtype=np.float32).reshape(4, 4) / 16}
    with PlainSession(graph=graph) as sess:
        want = sess.run("out:0", feeds)
    with NpuSession(graph=graph, config=xla_config(mix_compile_mode=True)) as sess:
        got = run_built(sess, "out:0", feeds)
        assert sorted(st.status for st in runner_of(sess).runtime_stats().clusters.values()) \
            == ["fallback", "pending"]
        for _ in range(DECIDED_AFTER):
            np.testing.assert_allclose(run_built(sess, "out:0", feeds), want, rtol=RTOL)
        stats = runner_of(sess).runtime_stats()
    np.testing.assert_allclose(got, want, rtol=RTOL)
    statuses = sorted(st.status for st in stats.clusters.values())
    assert statuses in (["compiled", "fallback"], ["fallback", "tensorflow"]), stats.clusters
    assert stats.fallbacks == 1
    (fallback,) = [st for st in stats.clusters.values() if st.status == "fallback"]
    assert "ResizeBicubic" in fallback.reason and "no XLA kernel" in fallback.reason


# --------------------------------------------------------------------------- gears
def gear_graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 8], name="x")
        tf.reduce_sum(tf.nn.relu(x - 0.5) * 3.0, axis=1, name="y")
    return graph


GEAR_OPTIONS = {"input_shape": "x:-1,8", "dynamic_dims": "2;4;8", "dynamic_node_type": 1}


@pytest.mark.parametrize("policy", ["exact", "pad_up"])
def test_one_executable_per_gear_and_none_in_the_steady_state(policy):
    options = dict(GEAR_OPTIONS)
    batches = [2, 4, 8]
    if policy == "pad_up":
        options.update(npu_adapter_gear_policy="pad_up", npu_adapter_gear_unpad="y:0:0")
        batches = [2, 3, 4, 7, 8]
    rng = np.random.RandomState(3)
    graph = gear_graph()
    compiles = []
    steps = len(batches) * (DECIDED_AFTER + 2)
    with NpuSession(graph=graph, config=xla_config(**options)) as sess:
        for step in range(steps):
            v = rng.rand(batches[step % len(batches)], 8).astype(np.float32)
            got = run_built(sess, "y:0", {"x:0": v})
            np.testing.assert_allclose(got, (np.maximum(v - 0.5, 0) * 3).sum(1), rtol=RTOL)
            compiles.append(runner_of(sess).runtime_stats().compiles)
        result = runner_of(sess).rewrite_result("y:0", {"x:0": v})
    # Each gear's first run is on TensorFlow's kernels and its replay builds the gear's
    # executable in the background; nothing compiles after, nothing in the foreground.
    assert compiles[len(batches) - 1] == 3 == compiles[-1] == max(compiles)
    if policy == "exact":
        assert compiles[:3] == [1, 2, 3]
    stats = runner_of(sess).runtime_stats()
    assert stats.background_compiles == 3
    (cluster,) = result.clusters
    decisions = stats.clusters[cluster.name].decisions
    assert sorted(decisions) == ["gear 0", "gear 1", "gear 2"]
    functions = {f.signature.name: f for f in result.graph_def.library.function}
    for g in range(3):
        wrapper = functions[f"{cluster.name}_xla_gear_{g}"]
        (call,) = wrapper.node_def
        assert call.attr["_XlaMustCompile"].b
        # The gear's body, the very function TensorFlow's kernels run for the gear.
        assert call.attr["f"].func.name == f"{cluster.name}_gear_{g}"
    (node,) = [n for n in result.graph_def.node if n.name == cluster.name]
    assert "_XlaMustCompile" not in node.attr  # the dispatcher stays a plain function
    assert node.attr["f"].func.name == f"{cluster.name}_xla"
    assert node.attr["_npu_adapter_xla_tf_function"].s.decode() == cluster.name


# --------------------------------------------------------------------------- options, cache
def test_cache_dir_must_exist(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(NpuConfigError, match="graph_compiler_cache_dir"):
        NpuSession(graph=gear_graph(), config=xla_config(graph_compiler_cache_dir=missing))
    with pytest.raises(NpuConfigError, match="graph_compiler_cache_dir"):
        rewrite(gear_graph().as_graph_def(), {"graph_compiler_cache_dir": missing},
                fetches=["y:0"], backend="xla")


def fake_entry(payload=4000):
    """Bytes framed like TensorFlow's cache entry: key (1), HLO module (2), executable (3)."""
    def field(number, data):
        return bytes([number << 3 | 2]) + _varint(len(data)) + data
    return field(1, b"k" * 40) + field(2, b"h" * 300) + field(3, os.urandom(payload))


def _varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def test_framing_check(tmp_path):
    path = tmp_path / "e.pb"
    data = fake_entry()
    path.write_bytes(data)
    assert framing_problem(path) is None
    path.write_bytes(data[:-10])
    assert "not a complete protobuf message" in framing_problem(path)
    path.write_bytes(data[:40 + 2 + 300 + 3])  # cut between the HLO module and the executable
    assert "missing" in framing_problem(path)


def test_truncated_entry_is_removed_with_a_warning(tmp_path):
    cache = PersistentCache(tmp_path)
    entry = os.path.join(cache.root, "xla_compile_cache__1__2__XLA_CPU_JIT.pb")
    with open(entry, "wb") as f:
        f.write(fake_entry())
    cache.sync()
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(entry + ".record.json").st_mode & 0o777 == 0o666 & ~umask
    with open(entry, "r+b") as f:
        f.truncate(1000)
    with pytest.warns(XlaCacheWarning, match="corrupted"):
        PersistentCache(tmp_path).sync()
    assert not os.path.exists(entry) and not os.path.exists(entry + ".record.json")


def test_unrecorded_truncated_entry_is_removed(tmp_path):
    cache = PersistentCache(tmp_path)
    entry = os.path.join(cache.root, "xla_compile_cache__3__4__XLA_CPU_JIT.pb")
    with open(entry, "wb") as f:
        f.write(fake_entry()[:2000])
    with pytest.warns(XlaCacheWarning, match="not a complete protobuf message"):
        cache.sync()
    assert not os.path.exists(entry)


def test_size_bound_evicts_the_least_recently_used(tmp_path):
    cache = PersistentCache(tmp_path, max_bytes=10_000)
    names = [f"xla_compile_cache__{k}__0__XLA_CPU_JIT.pb" for k in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k, name in enumerate(names[:2]):
            path = os.path.join(cache.root, name)
            with open(path, "wb") as f:
                f.write(fake_entry())
            os.utime(path, (1000 + k, 1000 + k))
        cache.sync()
        assert cache.entry_names() == names[:2]
        # The older entry is read (loaded by TensorFlow) after the newer one was written.
        old = os.path.join(cache.root, names[0])
        os.utime(old, ns=(5_000 * 10**9, 1000 * 10**9))
        with open(os.path.join(cache.root, names[2]), "wb") as f:
            f.write(fake_entry())
        os.utime(os.path.join(cache.root, names[2]), (3000, 3000))
        created, read = cache.sync()
    assert (created, read) == (1, 1)
    assert cache.entry_names() == [names[0], names[2]]  # names[1]: least recently used
    assert cache.evicted == 1 and cache.total_bytes() <= 10_000


# --------------------------------------------------------------------------- report, inspect
def test_inspect_names_the_backend_and_fallbacks(tmp_path, capsys):
    from npu_adapter import cli

    model = tmp_path / "m.pb"
    model.write_bytes(unique_graph().as_graph_def().SerializeToString())
    out = tmp_path / "out"
    code = cli.main(["inspect", str(model), "--backend", "xla", "--fetch", "uniq:0",
                     "--fetch", "total:0", "--out", str(out), "--no-html", "--no-drawings",
                     "--no-tensorboard"])
    text = capsys.readouterr().out
    assert code == 0
    assert ("backend xla: 0 cluster(s) compiled, 0 kept on TensorFlow's kernels, "
            "0 not measured yet, 1 on the CPU reference") in text
    assert "op Unique (value-dependent shape) not compilable by XLA" in text


def test_isolated_clusters_with_gears_compile_per_gear():
    graph = gear_graph()
    options = dict(GEAR_OPTIONS, npu_adapter_isolate_clusters=True)
    with NpuSession(graph=graph, config=xla_config(**options)) as sess:
        for batch in (2, 4, 8) * 2 + (4,):
            v = np.full((batch, 8), 0.75, np.float32)
            np.testing.assert_allclose(run_built(sess, "y:0", {"x:0": v}), np.full(batch, 6.0),
                                       rtol=RTOL)
        result = runner_of(sess).rewrite_result("y:0", {"x:0": v})
        assert runner_of(sess).runtime_stats().compiles == 3
    functions = {f.signature.name: f for f in result.graph_def.library.function}
    (cluster,) = result.clusters
    # The dispatchers stay calls, in both forms.
    assert functions[cluster.name].attr["_noinline"].b
    assert functions[f"{cluster.name}_xla"].attr["_noinline"].b
