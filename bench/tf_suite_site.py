"""Start-up of every test process of :mod:`bench.tf_session_suite`.

The suite copies this file into its work folder as ``sitecustomize.py`` and puts that folder
first on ``PYTHONPATH``, so Python runs it when each pytest process starts, before TensorFlow's
test module is imported. Two environment variables say what to do:

- ``NPU_SUITE_TF1=1``: ``tf.compat.v1.disable_v2_behavior()``, what a TF1 script sees;
- ``NPU_SUITE_MODE``: ``plain`` leaves TensorFlow as it is; ``full`` and ``mix`` call
  :func:`npu_adapter.install` and then make every session of the process an NPU session
  (:func:`force_npu_optimizer`): full offload, or ``mix_compile_mode`` true.

Outside such a process (``NPU_SUITE_MODE`` unset, or the module imported under its own name)
nothing happens at import.
"""

import os

__all__ = ["MODE_VARIABLE", "TF1_VARIABLE", "MODES", "forced_config", "force_npu_optimizer",
           "start"]

MODE_VARIABLE = "NPU_SUITE_MODE"
TF1_VARIABLE = "NPU_SUITE_TF1"
MODES = ("plain", "full", "mix")
"""``plain``: TensorFlow alone; ``full``: every session rewritten, full offload; ``mix``: every
session rewritten with ``mix_compile_mode`` true."""


def forced_config(config, mix_compile_mode):
    """``config`` with an ``NpuOptimizer`` custom optimizer added (``use_off_line`` true,
    ``mix_compile_mode`` as given), as a copy; for None, a new ``ConfigProto`` with that entry
    only, what a TF1 script passes.

    A session given None by a test would otherwise run on TensorFlow's global default config
    (the ``tf.config`` settings: soft placement in TF2 behaviour, optimizer options); no public
    API returns that config, so such a session runs without those settings here, and
    ``testOptimizerOptions`` (``tf.config.optimizer`` options seen by a session made without a
    config) differs for the harness's sake. A config that already names ``NpuOptimizer`` is
    the test's own choice and is returned as it is; anything that is no ``ConfigProto`` is
    returned as it is for TensorFlow to refuse with its own error."""
    from tensorflow.core.protobuf import config_pb2

    from npu_adapter.config import NpuConfig

    if config is None:
        config = config_pb2.ConfigProto()
    if not isinstance(config, config_pb2.ConfigProto):
        return config
    if NpuConfig.from_config_proto(config).present:
        return config
    options = {"use_off_line": True, "mix_compile_mode": bool(mix_compile_mode)}
    return NpuConfig.from_dict(options).to_config_proto(base=config)


def force_npu_optimizer(mix_compile_mode):
    """Install npu-adapter's session hook, then wrap the installed ``BaseSession.__init__``
    so that every session created afterwards (``tf.compat.v1.Session``, ``InteractiveSession``
    and those TensorFlow's own modules open) gets :func:`forced_config`."""
    import npu_adapter
    from npu_adapter.tf_compat import base_session

    npu_adapter.install()
    base = base_session()
    installed_init = base.__init__

    def __init__(self, target="", graph=None, config=None):
        installed_init(self, target, graph, forced_config(config, mix_compile_mode))

    __init__.__doc__ = installed_init.__doc__
    base.__init__ = __init__


def start(environ=None):
    """Apply ``NPU_SUITE_TF1`` and ``NPU_SUITE_MODE`` from ``environ`` (default
    ``os.environ``); nothing when the mode is unset."""
    environ = os.environ if environ is None else environ
    mode = environ.get(MODE_VARIABLE)
    if mode is None:
        return
    if mode not in MODES:
        raise ValueError(f"{MODE_VARIABLE} must be one of {', '.join(MODES)}, not {mode}")
    if environ.get(TF1_VARIABLE) == "1":
        import tensorflow as tf

        tf.compat.v1.disable_v2_behavior()
    if mode != "plain":
        force_npu_optimizer(mix_compile_mode=mode == "mix")


if __name__ == "sitecustomize":
    start()
