"""npu_bridge: the TF Adapter's Python package, as a drop-in for TF1.15 scripts on TensorFlow 2.

Importing ``npu_bridge`` (or any of its modules) prepares TensorFlow for TF1.15 scripts:

1. When TensorFlow's own Keras is Keras 3 (TensorFlow >= 2.16) and ``tf_keras`` is installed,
   ``TF_USE_LEGACY_KERAS=1`` is set (``os.environ.setdefault``) before TensorFlow is imported,
   so ``tf.compat.v1.layers`` works (it needs Keras 2); this takes effect unless ``tf.keras``
   was used before. Otherwise the variable is left alone: without ``tf_keras``, set, it would
   make ``import tensorflow`` fail on the legacy-Keras path; where TensorFlow's Keras is Keras 2
   already (the ``keras`` 2.15 package of TensorFlow 2.15), ``tf.keras`` stays that Keras, as
   without npu_bridge (TensorFlow 2.15's autograph knows ``keras`` as a library but not
   ``tf_keras``, and would convert tf_keras's internals into every custom layer's graph).
2. The TF1 names scripts use are put back on ``tf`` (:mod:`npu_bridge._tf1_aliases`:
   ``tf.Session``, ``tf.placeholder``, ``tf.train.AdamOptimizer``, ``tf.layers``, ...).
3. The NPU session is installed (:func:`npu_adapter.install`): ``tf.Session`` and
   ``tf.compat.v1.Session`` create :class:`npu_adapter.NpuSession`, as the original patches
   ``tf.Session`` on import.

Eager execution is left alone; :mod:`npu_bridge.npu_init` (``from npu_bridge.npu_init import
*``) turns it off, because TF1.15 scripts assume graph mode.

Subpackages mirror the original: :mod:`npu_bridge.estimator` (``npu_ops``, ``npu_unary_ops``,
``npu.{npu_scope, util, npu_config, npu_hook, npu_optimizer, npu_estimator, ...}``) and
:mod:`npu_bridge.hccl` (``hccl_ops``, ``manage.api``). There is no ``_tf_adapter.so``: everything
is Python and TensorFlow ops. A process started as a rank of a multi-rank job (``RANK_SIZE`` > 1,
``npu-adapter launch``) runs its sessions on its TensorFlow server
(:mod:`npu_adapter.distributed`), including the sessions TensorFlow's own modules open.
"""

import contextlib
import importlib.metadata
import importlib.util
import os

# TENSORFLOW_KERAS_IS_KERAS2: whether TensorFlow's own Keras (the `keras` distribution) is
# Keras 2 (TensorFlow 2.15), read from its metadata since TensorFlow is not imported yet.
try:
    TENSORFLOW_KERAS_IS_KERAS2 = importlib.metadata.version("keras").startswith("2.")
except importlib.metadata.PackageNotFoundError:
    TENSORFLOW_KERAS_IS_KERAS2 = False
if importlib.util.find_spec("tf_keras") is not None and not TENSORFLOW_KERAS_IS_KERAS2:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import npu_adapter  # first of the project: it routes the project's TF imports
from npu_adapter import tensorflow_alias

if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    # tf_keras runs `import tensorflow.compat.v1`, which rebinds tf.compat.v1 to a new module
    # object; import it first so the aliases and the session see the final one. Under a TF1
    # alias launcher, that dotted import needs the compat modules registered by their names.
    tensorflow_alias.tensorflow_api()
    with contextlib.suppress(ImportError):
        import tf_keras  # noqa: F401

from npu_bridge import _keras_session, _tf1_aliases


def _install_npu_session():
    """``npu_adapter.install()``: every TF1 session class becomes the NPU session (it patches
    all ``tf.compat.v1`` module objects, which tf_keras can duplicate). Sessions of a rank of a
    multi-rank job connect to the rank's server, also those TensorFlow opens itself."""
    npu_adapter.install()  # BaseSession.__init__ also connects a rank's sessions to its server


_tf1_aliases.install()
_install_npu_session()
_keras_session.install()

# The original's package-level names: the op handle, `helper`, `hccl_ops`, `npu_close`
# (registered to run at exit, as the original does) and `atexit`.
import atexit  # noqa: E402

from npu_bridge import estimator, hccl  # noqa: E402
from npu_bridge.estimator.npu import npu_estimator  # noqa: E402 - imported as the original
from npu_bridge.estimator.npu.npu_plugin import npu_close  # noqa: E402
from npu_bridge.hccl import hccl_ops  # noqa: E402
from npu_bridge.helper import helper  # noqa: E402
from npu_bridge.helper.helper import npu_bridge_handle  # noqa: E402
from npu_bridge.helper.helper import version as __version__  # noqa: E402, F401

atexit.register(npu_close)

version = "v1.15.0"
"""The version of the original adapter this package stands in for."""

__all__ = ["atexit", "estimator", "hccl", "hccl_ops", "helper", "npu_bridge_handle",
           "npu_close", "npu_estimator", "version"]
