"""A TF1.15 script started by a TF1 alias launcher: ``sys.modules["tensorflow"]`` is a module
wrapping ``tf.compat.v1`` without ``__spec__``, and the script imports ``npu_bridge``.

The script trains a small model with the NPU session and the same model in a plain session
under the same launcher (before ``npu_bridge`` is imported); the numbers must be the same, and
the script's ``tensorflow`` must still be the launcher's module.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from npu_bridge import _env

_SCRIPT = textwrap.dedent('''
    import json
    import sys
    import types

    import numpy as np
    import tensorflow as real_tf

    # The launcher: a module wrapping tf.compat.v1 in place of the package, no __spec__.
    alias = types.ModuleType("tensorflow")
    alias.__getattr__ = lambda name: getattr(real_tf.compat.v1, name)
    alias.__spec__ = None
    sys.modules["tensorflow"] = alias

    # The script, as written for TF 1.15.
    import tensorflow as tf

    tf.disable_eager_execution()
    FEED = np.arange(24, dtype=np.float32).reshape(6, 4) / 10.0


    def dense(name, inputs, width, units):
        kernel = tf.get_variable(name + "_kernel", [width, units],
                                 initializer=tf.glorot_uniform_initializer(seed=3))
        bias = tf.get_variable(name + "_bias", [units], initializer=tf.zeros_initializer())
        return tf.matmul(inputs, kernel) + bias


    def train(config):
        graph = tf.Graph()
        with graph.as_default():
            tf.set_random_seed(7)
            x = tf.placeholder(tf.float32, [None, 4])
            keep_prob = tf.placeholder(tf.float32)
            hidden = tf.nn.dropout(tf.nn.relu(dense("hidden", x, 4, 8)), keep_prob)
            out = dense("out", hidden, 8, 1)
            loss = tf.reduce_mean(tf.square(out - 1.0))
            step = tf.train.AdamOptimizer(0.05).minimize(loss)
            with tf.Session(config=config) as sess:
                sess.run(tf.global_variables_initializer())
                losses = [float(sess.run([loss, step], {x: FEED, keep_prob: 1.0})[0])
                          for _ in range(3)]
                weights = [w.tolist() for w in sess.run(tf.trainable_variables())]
                runner = sys.modules['npu_adapter.session'].runner_of(sess) \
                    if 'npu_adapter.session' in sys.modules else None
                rewrites = runner.rewrite_count if runner else 0
        return {"losses": losses, "weights": weights, "rewrites": rewrites}


    result = {"plain": train(tf.ConfigProto())}

    import npu_bridge  # noqa: E402

    config = tf.ConfigProto()
    custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
    custom_op.name = "NpuOptimizer"
    result["npu"] = train(config)
    result["script_tf_is_alias"] = sys.modules["tensorflow"] is alias and tf is alias
    # npu_bridge's own modules keep TensorFlow 2's API (tf.nn.dropout takes `rate` there).
    from npu_bridge.estimator.npu import npu_convert_dropout  # noqa: E402
    result["bridge_dropout_is_v2"] = npu_convert_dropout.tf.nn.dropout is real_tf.nn.dropout
    result["npu_bridge_version"] = npu_bridge.version
    # The star import an Ascend script starts with leaves the script's tf the alias.
    from npu_bridge.npu_init import *  # noqa: E402,F403
    result["star_import_tf_is_alias"] = tf is alias
    print(json.dumps(result))
''')


def test_npu_bridge_under_a_tf1_alias_launcher_matches_plain_tensorflow(tmp_path):
    script = tmp_path / "launcher_and_script.py"
    script.write_text(_SCRIPT)
    env = {key: value for key, value in os.environ.items()
           if key not in _env.RANK_ENV_VARS + ("TF_USE_LEGACY_KERAS",)}
    completed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                               env=env, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])

    assert result["script_tf_is_alias"] and result["npu_bridge_version"] == "v1.15.0"
    assert result["bridge_dropout_is_v2"]
    assert result["star_import_tf_is_alias"]
    plain, npu = result["plain"], result["npu"]
    assert plain["rewrites"] == 0 and npu["rewrites"] >= 1  # the NPU session rewrote the step
    assert npu["losses"] == plain["losses"]  # bit for bit (the JSON floats round-trip)
    assert plain["losses"][2] < plain["losses"][0]
    for ours, theirs in zip(npu["weights"], plain["weights"], strict=True):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_only_the_project_modules_get_tensorflow_2_under_an_alias(monkeypatch):
    import types

    import tensorflow as tf

    from npu_adapter import tensorflow_alias

    alias = types.ModuleType("tensorflow")
    alias.__getattr__ = lambda name: getattr(tf.compat.v1, name)
    monkeypatch.setitem(sys.modules, "tensorflow", alias)
    code = compile("import tensorflow as tf_seen", "<module>", "exec")
    project_module = {"__name__": "npu_bridge.some_module"}
    script = {"__name__": "__main__"}
    exec(code, project_module)  # a fixed statement, run as two modules would
    exec(code, script)
    assert script["tf_seen"] is alias
    seen = project_module["tf_seen"]
    assert seen is sys.modules["tensorflow.compat.v2"] is tensorflow_alias.tensorflow_api()
    assert seen.nn.dropout is tf.nn.dropout  # TF2's (`rate`), not the alias's TF1 one
    assert seen.where is tf.where and seen.__version__ == tf.__version__
    assert tensorflow_alias.is_alias(alias) and not tensorflow_alias.is_alias(tf)
