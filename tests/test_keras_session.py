"""Keras scripts get the NPU session they hand to Keras, whatever the import order, or a loud
error; never a silent run without it.

Each scenario is a fresh process, since what Keras ``tensorflow.keras`` is depends on what the
process imported first.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from npu_bridge import _env


def _run_script(tmp_path, source):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    env = {key: value for key, value in os.environ.items()
           if key not in _env.RANK_ENV_VARS + ("TF_USE_LEGACY_KERAS",)}
    completed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                               env=env, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


_MEET = '''
    import json

    import numpy as np
    import tensorflow as tf  # TensorFlow first, as many scripts do

    from npu_bridge.npu_init import *  # noqa: F403
    from npu_adapter.session import runner_of
    from tensorflow.keras import initializers
    from tensorflow.keras.layers import Dense, Input
    from tensorflow.keras.models import Model
    from tensorflow.python.keras import backend as legacy_backend  # the TF 1.15 spelling

    X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    Y = np.sum(X, axis=1, keepdims=True) * 0.5


    def fit(hand_session_to_keras):
        tf.compat.v1.keras.backend.clear_session()
        sess = hand_session_to_keras()
        inputs = Input((4,))
        hidden = Dense(8, activation="relu",
                       kernel_initializer=initializers.GlorotUniform(seed=1))(inputs)
        model = Model(inputs, Dense(1, kernel_initializer=initializers.GlorotUniform(seed=2))(
            hidden))
        model.compile("sgd", "mse")
        history = model.fit(X, Y, epochs=3, batch_size=4, shuffle=False, verbose=0)
        return {"losses": history.history["loss"],
                "weights": [w.tolist() for w in model.get_weights()],
                "rewrites": runner_of(sess).rewrite_count if runner_of(sess) else 0,
                "keras_of_the_model": type(model).__module__.split(".")[0]}


    def plain_session():
        # The NPU session's ConfigProto without its NpuOptimizer entry: TensorFlow's session
        # with the same Grappler settings (npu_config_proto turns remapping off).
        config = npu_config_proto()  # noqa: F405
        del config.graph_options.rewrite_options.custom_optimizers[:]
        sess = tf.compat.v1.Session(config=config)
        tf.compat.v1.keras.backend.set_session(sess)
        return sess


    def npu_session_the_tf115_way():
        sess = tf.compat.v1.Session(config=npu_config_proto())  # noqa: F405
        legacy_backend.set_session(sess)
        assert legacy_backend.get_session() is sess
        return sess


    result = {"plain": fit(plain_session),
              "set_keras_session_npu_config": fit(set_keras_session_npu_config),  # noqa: F405
              "legacy_set_session": fit(npu_session_the_tf115_way),
              "keras_of_the_session": tf.compat.v1.keras.Model.__module__.split(".")[0]}
    print(json.dumps(result))
'''


def test_keras_models_run_in_the_npu_session_they_are_handed(tmp_path):
    """TensorFlow imported before npu_bridge, Keras imported by module path
    (``from tensorflow.keras.models import Model``); the session handed over by
    ``set_keras_session_npu_config`` or by ``tensorflow.python.keras.backend.set_session``."""
    result = _run_script(tmp_path, _MEET)
    plain = result["plain"]
    assert plain["rewrites"] == 0 and plain["losses"][2] < plain["losses"][0]
    for way in ("set_keras_session_npu_config", "legacy_set_session"):
        npu = result[way]
        assert npu["keras_of_the_model"] == result["keras_of_the_session"], way
        assert npu["rewrites"] >= 1, way  # the model's steps ran in the NPU session
        assert npu["losses"] == plain["losses"], way  # bit for bit (JSON floats round-trip)
        for ours, theirs in zip(npu["weights"], plain["weights"], strict=True):
            np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


_KERAS3_FIRST = '''
    import json

    import tensorflow as tf
    from tensorflow.keras.models import Model  # Keras 3: TensorFlow decided before npu_bridge

    from npu_bridge.npu_init import *  # noqa: F403
    from tensorflow.python.keras import backend as legacy_backend

    result = {}
    for name, hand_over in (
            ("set_keras_session_npu_config", set_keras_session_npu_config),  # noqa: F405
            ("npu_clear_session", npu_clear_session),  # noqa: F405
            ("legacy_set_session",
             lambda: legacy_backend.set_session(tf.compat.v1.Session(config=npu_config_proto())))):
        try:
            hand_over()
            result[name] = "no error"
        except RuntimeError as exc:
            result[name] = str(exc)
    print(json.dumps(result))
'''


def _keras_major():
    import keras

    return int(keras.__version__.split(".")[0])


@pytest.mark.skipif(_keras_major() < 3, reason="Keras 3 is not installed (TensorFlow 2.15)")
def test_a_keras_3_model_fails_loudly_instead_of_running_without_the_npu_session(tmp_path):
    result = _run_script(tmp_path, _KERAS3_FIRST)
    for name, message in result.items():
        assert "Keras 3" in message, (name, message)
        assert "without the NPU session" in message and "import npu_bridge" in message, name
        assert "\n" not in message


_CUSTOM_LAYERS_UNDER_A_TF1_LAUNCHER = '''
    import json
    import logging
    import sys
    import types

    import numpy as np
    import tensorflow as real_tf

    # The launcher: a module wrapping tf.compat.v1 in place of the package, no __spec__.
    alias = types.ModuleType("tensorflow")
    alias.__getattr__ = lambda name: getattr(real_tf.compat.v1, name)
    alias.__spec__ = None
    sys.modules["tensorflow"] = alias

    # Every function autograph converts (transforms) is logged at verbosity 1 with this message.
    converted = []


    class Conversions(logging.Handler):
        def emit(self, record):
            if record.msg == "%s is not cached for subkey %s":
                converted.append(getattr(record.args[0], "__module__", None))


    logger = real_tf.get_logger()
    logger.handlers, logger.propagate = [Conversions()], False
    logger.setLevel(logging.INFO)
    real_tf.autograph.set_verbosity(1)

    # The script, as written for TF 1.15.
    import tensorflow as tf
    from npu_bridge.npu_init import *  # noqa: F403
    from npu_adapter.session import runner_of


    class Residual(tf.keras.layers.Layer):
        """A custom layer: a residual block around a Keras layer."""

        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.inner = tf.keras.layers.Dense(units, activation="relu")

        def call(self, x):  # autograph converts it, and follows the calls it makes
            return x + self.inner(x)


    config = tf.ConfigProto()
    config.graph_options.rewrite_options.custom_optimizers.add().name = "NpuOptimizer"
    sess = set_keras_session_npu_config(config=config)  # noqa: F405
    inputs = tf.keras.Input([4])
    hidden = Residual(8)(tf.keras.layers.Dense(8, activation="relu")(inputs))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(hidden))
    model.compile("sgd", "mse")
    X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    model.fit(X, X.sum(axis=1, keepdims=True), epochs=2, batch_size=4, verbose=0)
    print(json.dumps({"converted_modules": sorted(set(map(str, converted))),
                      "converted": len(converted), "rewrites": runner_of(sess).rewrite_count,
                      "keras_of_the_model": type(model).__module__.split(".")[0],
                      "keras_of_tensorflow": real_tf.keras.Model.__module__.split(".")[0]}))
'''


def test_autograph_converts_only_the_script_s_own_keras_code(tmp_path):
    """A TF1 script under a TF1 alias launcher with a custom Keras layer (whose ``call`` Keras has
    autograph convert), trained in the session ``set_keras_session_npu_config`` gives Keras: the
    functions autograph converts are the script's own, never the Keras internals the layer calls
    (``Layer.__call__``, ``add_weight``, ...), and the model is TensorFlow's own Keras 2 where
    TensorFlow has one (2.15), as without npu_bridge."""
    result = _run_script(tmp_path, _CUSTOM_LAYERS_UNDER_A_TF1_LAUNCHER)
    assert result["converted"] >= 1  # Residual.call: the count sees conversions
    assert result["converted_modules"] == ["__main__"]
    assert result["rewrites"] >= 1  # the model's steps ran in the NPU session
    if _keras_major() < 3:
        assert result["keras_of_the_model"] == result["keras_of_tensorflow"] == "keras"
    else:
        assert result["keras_of_the_model"] == "tf_keras"
