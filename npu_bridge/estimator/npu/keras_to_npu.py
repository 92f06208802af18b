"""Keras model to ``NPUEstimator`` (``npu_bridge.estimator.npu.keras_to_npu``).

:func:`model_to_npu_estimator` converts a compiled Keras model (functional or sequential), or
one saved in HDF5, into an :class:`~npu_bridge.estimator.npu.npu_estimator.NPUEstimator`: Keras's
``model_to_estimator`` builds the estimator's ``model_fn`` and warm-start settings, and the
``NPUEstimator`` runs them with the given ``NPURunConfig``.

``tf.estimator`` (and Keras's ``model_to_estimator``) exist only up to TensorFlow 2.15; on newer
TensorFlow the call raises :class:`EstimatorUnavailableError`, an ``ImportError``.
"""

from npu_adapter import tf_compat
from npu_adapter.errors import NpuAdapterError
from npu_bridge.estimator.npu.npu_config import HAS_TF_ESTIMATOR
from npu_bridge.estimator.npu.npu_estimator import NO_ESTIMATOR_MESSAGE, NPUEstimator

__all__ = ["EstimatorUnavailableError", "NPUEstimator", "model_to_estimator",
           "model_to_npu_estimator"]


class EstimatorUnavailableError(NpuAdapterError, ImportError):
    """``tf.estimator`` is not part of this TensorFlow (it was removed in 2.16)."""


def _keras_model_to_estimator():
    """The ``model_to_estimator`` of ``tf.keras`` (the Keras ``tf.estimator`` clones models
    with: TensorFlow's own Keras 2, or ``tf_keras`` when ``TF_USE_LEGACY_KERAS`` is set), or
    None."""
    if not HAS_TF_ESTIMATOR:
        return None
    import tensorflow as tf

    try:
        return tf.compat.v1.keras.estimator.model_to_estimator
    except AttributeError:
        return None


def model_to_estimator(*args, **kwargs):
    """Keras's ``model_to_estimator`` (re-exported as the original does)."""
    keras_fn = _keras_model_to_estimator()
    if keras_fn is None:
        raise EstimatorUnavailableError(NO_ESTIMATOR_MESSAGE.format(name="model_to_estimator"))
    return keras_fn(*args, **kwargs)


def model_to_npu_estimator(keras_model=None, keras_model_path=None, custom_objects=None,
                           model_dir=None, checkpoint_format="saver", config=None,
                           job_start_file=""):
    """An ``NPUEstimator`` running ``keras_model`` (or the model saved at
    ``keras_model_path``; give exactly one). ``config`` must be an ``NPURunConfig``;
    ``checkpoint_format`` is ``"saver"`` or ``"checkpoint"``."""
    keras_fn = _keras_model_to_estimator()
    if keras_fn is None:
        raise EstimatorUnavailableError(
            NO_ESTIMATOR_MESSAGE.format(name="model_to_npu_estimator"))
    if checkpoint_format not in ("saver", "checkpoint"):
        raise ValueError(f"checkpoint_format must be 'saver' or 'checkpoint', got "
                         f"{checkpoint_format!r}")
    import tensorflow as tf

    tf_estimator = keras_fn(keras_model=keras_model, keras_model_path=keras_model_path,
                            custom_objects=custom_objects, model_dir=model_dir,
                            config=tf.estimator.RunConfig(model_dir=model_dir),
                            checkpoint_format=checkpoint_format)
    return NPUEstimator(model_fn=tf_estimator.model_fn, model_dir=model_dir, config=config,
                        job_start_file=job_start_file,
                        warm_start_from=tf_compat.warm_start_settings(tf_estimator))
