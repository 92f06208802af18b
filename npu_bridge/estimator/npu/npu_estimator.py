"""``NPUEstimator`` (``npu_bridge.estimator.npu.npu_estimator``).

On TensorFlow 2.15, ``NPUEstimator`` is a ``tf.estimator.Estimator`` whose session config comes
from its :class:`~npu_bridge.estimator.npu.npu_config.NPURunConfig`
(:func:`~npu_bridge.estimator.npu.npu_config.npu_run_config_to_config_proto`: the Grappler
optimizer list and the ``NpuOptimizer`` entry), and whose ``model_fn`` is wrapped to add the
training hooks of the original: an
:class:`~npu_bridge.estimator.npu.npu_hook.NPUCheckpointSaverHook` when checkpoints are saved
by steps or seconds, and, for ``iterations_per_loop`` > 1, a
:class:`~npu_bridge.estimator.npu.npu_hook.SetIterationsVarHook` with the train op grouped as
``IterationOp``, and, with more than one rank, an
:class:`~npu_bridge.estimator.npu.npu_hook.NPUBroadcastGlobalVariablesHook` from rank 0 (ranks
start from rank 0's initial variables). The estimator's sessions connect to the rank's server
like every session of a rank (:mod:`npu_adapter.distributed`). (The host-call outfeed of
``NPUEstimatorSpec(host_call=...)`` needs the device and raises ``NotImplementedError``; the CSA
job file ``job_start_file`` is not read.)

TensorFlow 2.16 removed ``tf.estimator``: there ``NPUEstimator`` and ``NPUEstimatorSpec`` exist
but raise ``ImportError`` when used, saying what to do instead.
"""

import inspect

import tensorflow as tf

from npu_adapter import tf_compat
from npu_bridge import _env
from npu_bridge.estimator.npu.npu_config import (
    HAS_TF_ESTIMATOR,
    NPURunConfig,
    npu_run_config_to_config_proto,
)
from npu_bridge.estimator.npu.npu_hook import (
    NPUBroadcastGlobalVariablesHook,
    NPUCheckpointSaverHook,
    SetIterationsVarHook,
)
from npu_bridge.estimator.npu.npu_saver import NPUSaver

__all__ = ["NO_ESTIMATOR_MESSAGE", "NPUEstimator", "NPUEstimatorSpec", "no_check_override"]

NO_ESTIMATOR_MESSAGE = (
    "{name} needs tf.estimator, which TensorFlow 2.16 removed (this is TensorFlow "
    f"{tf.__version__}). Run the script on TensorFlow 2.15, or replace the estimator by a "
    "tf.compat.v1.Session training loop whose config is npu_config_proto(...) (from "
    "npu_bridge.npu_init) or npu_run_config_to_config_proto(NPURunConfig(...)) (from "
    "npu_bridge.estimator.npu.npu_config).")


class _NoOverrideCheck:
    """Context in which ``tf.estimator.Estimator`` subclasses may override its methods."""

    def __init__(self):
        self._saved = None

    def __enter__(self):
        if HAS_TF_ESTIMATOR:
            self._saved = tf_compat.set_estimator_override_check(lambda estimator: None)
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        if self._saved is not None:
            tf_compat.set_estimator_override_check(self._saved)
            self._saved = None


def no_check_override():
    """A context manager that lets ``Estimator`` subclasses override its methods (it disables
    ``Estimator``'s check while open; nothing to disable without ``tf.estimator``)."""
    return _NoOverrideCheck()


if HAS_TF_ESTIMATOR:
    _Estimator = tf.estimator.Estimator
    _EstimatorSpec = tf.estimator.EstimatorSpec
    _ModeKeys = tf.estimator.ModeKeys

    class NPUEstimatorSpec(_EstimatorSpec):
        """``EstimatorSpec`` with the original's extra ``host_call`` argument, which needs the
        device outfeed: a ``host_call`` other than None raises ``NotImplementedError``."""

        def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None,
                    export_outputs=None, training_chief_hooks=None, training_hooks=None,
                    scaffold=None, evaluation_hooks=None, prediction_hooks=None,
                    host_call=None):
            if host_call is not None:
                raise NotImplementedError(
                    "NPUEstimatorSpec(host_call=...) sends tensors through the device outfeed "
                    "of _tf_adapter.so, which this build does not provide; compute the values "
                    "in the model_fn and log them with a LoggingTensorHook or summaries")
            return super().__new__(
                cls, mode=mode, predictions=predictions, loss=loss, train_op=train_op,
                eval_metric_ops=eval_metric_ops, export_outputs=export_outputs,
                training_chief_hooks=training_chief_hooks, training_hooks=training_hooks,
                scaffold=scaffold, evaluation_hooks=evaluation_hooks,
                prediction_hooks=prediction_hooks)

    class NPUEstimator(_Estimator):
        """``tf.estimator.Estimator`` configured for the NPU (see the module doc).

        ``config`` must be an ``NPURunConfig`` (``ValueError`` otherwise, as the original);
        ``model_dir`` given both here and in ``config`` must agree.
        """

        def __init__(self, model_fn, model_dir=None, config=None, params=None,
                     job_start_file="", warm_start_from=None):
            if not isinstance(config, NPURunConfig):
                raise ValueError(f"config must be an instance of NPURunConfig, but got "
                                 f"{type(config).__name__}")
            if model_dir is not None and config.model_dir is not None \
                    and model_dir != config.model_dir:
                raise ValueError(
                    "model_dir are set both in NPUEstimator and NPURunConfig, but with "
                    f"different values. In constructor: {model_dir!r}, in NPURunConfig: "
                    f"{config.model_dir!r}")
            self._job_start_file = job_start_file
            config = config.replace(session_config=npu_run_config_to_config_proto(config))
            super().__init__(model_fn=_augment_model_fn(model_fn, config),
                             model_dir=model_dir, config=config, params=params or {},
                             warm_start_from=warm_start_from)

    def _augment_model_fn(model_fn, run_config):
        accepted = set(inspect.signature(model_fn).parameters)

        def _model_fn(features, labels, mode, params, config):
            kwargs = {}
            for name, value in (("labels", labels), ("mode", mode), ("params", params),
                                ("config", config)):
                if name in accepted:
                    kwargs[name] = value
            spec = model_fn(features=features, **kwargs)
            if mode != _ModeKeys.TRAIN:
                return spec
            if not isinstance(spec, _EstimatorSpec):
                raise RuntimeError("estimator_spec used by NPU train must have type "
                                   f"`NPUEstimatorSpec` or `EstimatorSpec`. Got {type(spec)}")
            hooks = []
            env = _env.current()
            if env.rank_size > 1:
                hooks.append(NPUBroadcastGlobalVariablesHook(0, env.rank_id))
            if run_config.save_checkpoints_steps or run_config.save_checkpoints_secs:
                saver = None
                scaffold = spec.scaffold if spec.scaffold and spec.scaffold.saver else None
                if scaffold is None:
                    saver = NPUSaver(
                        sharded=True, max_to_keep=run_config.keep_checkpoint_max,
                        keep_checkpoint_every_n_hours=run_config.keep_checkpoint_every_n_hours,
                        save_relative_paths=True)
                hooks.append(NPUCheckpointSaverHook(
                    checkpoint_dir=config.model_dir,
                    save_secs=run_config.save_checkpoints_secs,
                    save_steps=run_config.save_checkpoints_steps, saver=saver,
                    scaffold=scaffold))
            if run_config.iterations_per_loop > 1:
                hooks.append(SetIterationsVarHook(run_config.iterations_per_loop))
                spec = spec._replace(train_op=tf.group(spec.train_op, name="IterationOp"))
            return spec._replace(training_hooks=tuple(hooks + list(spec.training_hooks or ())))

        return _model_fn

else:

    class NPUEstimator:
        """Placeholder: ``tf.estimator`` does not exist in this TensorFlow (``ImportError``)."""

        def __init__(self, *args, **kwargs):
            raise ImportError(NO_ESTIMATOR_MESSAGE.format(name="NPUEstimator"))

    class NPUEstimatorSpec:
        """Placeholder: ``tf.estimator`` does not exist in this TensorFlow (``ImportError``)."""

        def __new__(cls, *args, **kwargs):
            raise ImportError(NO_ESTIMATOR_MESSAGE.format(name="NPUEstimatorSpec"))
