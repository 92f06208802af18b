"""TensorFlow's non-public API, reached from this one module.

The adapter uses TensorFlow's public API (``tf.*``, ``tf.compat.v1.*``, the protobuf messages)
everywhere else. The few things it needs that TensorFlow 2.15-2.21 offers only under
``tensorflow.python`` or as ``_private`` attributes are reached here, one function per name, each
with a comment saying what it is used for and why no public API serves. :data:`INTERNALS` lists
them with their purpose; ``tests/test_tf_compat.py`` checks every one on the installed TensorFlow
(CI runs 2.15 and 2.21) and fails with "TensorFlow <version> moved or removed <name>, used for
<purpose>", and checks that no other module of the project reaches into TensorFlow.

At run time a missing name raises :class:`TensorFlowInternalsError` with the same sentence.
Modules are imported when first needed: importing this module costs nothing.
"""

import contextlib
import functools
import importlib

from npu_adapter.errors import NpuAdapterError

__all__ = [
    "INTERNALS",
    "SESSION_METHODS",
    "TensorFlowInternalsError",
    "attr_scope",
    "base_session",
    "fetch_mapper",
    "find",
    "freeze_function",
    "keras_noise_shape",
    "legacy_keras_backend",
    "mark_session_refused",
    "one_device_extended",
    "op_def",
    "register_proto_function",
    "register_py_func",
    "registered_kernels",
    "registered_py_func",
    "saver_builder_waiting_for",
    "set_estimator_override_check",
    "set_op_attr",
    "set_xla_constant_folding_disabled",
    "tf_session_method",
    "unregister_py_func",
    "warm_start_settings",
    "while_context",
    "xla_constant_folding_disabled",
]

_OP_DEF_GET = "tensorflow.python.framework.op_def_registry.get"
_KERNELS_FOR_OP = "tensorflow.python.framework.kernels.get_registered_kernels_for_op"
_PY_FUNCS = "tensorflow.python.ops.script_ops._py_funcs"
_SET_ATTR = "tensorflow.python.framework.ops.Operation._set_attr"
_ATTR_SCOPE = "tensorflow.python.framework.ops.Graph._attr_scope"
_PROTO_FUNCTION = "tensorflow.python.framework.ops.register_proto_function"
_BULK_SAVER_BUILDER = "tensorflow.python.training.saver.BulkSaverBuilder"
_ONE_DEVICE_EXTENDED = "tensorflow.python.distribute.one_device_strategy.OneDeviceExtended"
_FREEZE = "tensorflow.python.framework.convert_to_constants.convert_variables_to_constants_v2"
_WARM_START = "tensorflow_estimator.python.estimator.estimator.Estimator._warm_start_settings"
_OVERRIDE_CHECK = ("tensorflow_estimator.python.estimator.estimator.Estimator."
                   "_assert_members_are_not_overridden")
_NOISE_SHAPE = "Keras 2 (tf_keras) Dropout._get_noise_shape"
_BASE_SESSION = "tensorflow.python.client.session.BaseSession"
_CALLABLE_FROM_OPTIONS = "tensorflow.python.client.session.BaseSession._make_callable_from_options"
_WHILE_CONTEXT = "tensorflow.python.ops.control_flow_ops.WhileContext"
_LEGACY_KERAS_BACKEND = "tensorflow.python.keras.backend"
_GET_XLA_FOLDING = "tensorflow.python.pywrap_tfe.TF_GetXlaConstantFoldingDisabled"
_SET_XLA_FOLDING = "tensorflow.python.pywrap_tfe.TF_SetXlaConstantFoldingDisabled"
_FETCH_MAPPER = "tensorflow.python.client.session._FetchMapper"
_SESSION_HANDLE = "BaseSession._session (an instance attribute its __init__ sets)"

INTERNALS = {
    _OP_DEF_GET: "the OpDef of an op type (edge dtypes, stateful ops, attr defaults)",
    _KERNELS_FOR_OP: "the kernels registered for an op (XLA compilability, CPU kernel dtypes, "
                     "whether this build has XLA)",
    _PY_FUNCS: "registering the callables of PyFunc nodes under our own tokens (cann cluster "
               "calls, data dump reporters)",
    _SET_ATTR: "setting an attribute on an existing op (npu_bridge.util, colocation of spliced "
               "ops)",
    _ATTR_SCOPE: "tagging every op created inside a block with attributes (npu_scope)",
    _PROTO_FUNCTION: "meta-graph export of the npu_runconfig_* variable collections "
                     "(npu_bridge util.register_func)",
    _BULK_SAVER_BUILDER: "NPUSaver's builder, whose save ops wait for the sharded-weight "
                         "broadcasts",
    _ONE_DEVICE_EXTENDED: "NPUStrategy's NPUExtended (replica count and per-rank dataset "
                          "shards)",
    _FREEZE: "freezing a SavedModel signature for npu-adapter convert --to om|savedmodel",
    _WARM_START: "model_to_npu_estimator: the warm start of the Keras estimator it wraps "
                 "(TensorFlow 2.15, the last with tf.estimator)",
    _OVERRIDE_CHECK: "npu_estimator.no_check_override (TensorFlow 2.15, the last with "
                     "tf.estimator)",
    _NOISE_SHAPE: "the noise shape of a Keras Dropout layer (SpatialDropout's included) in "
                  "npu_convert_dropout",
    _BASE_SESSION: "making every TF1 session of the process an NPU session (npu_adapter.install)",
    _CALLABLE_FROM_OPTIONS: "serving the callables the Keras backend makes from an NPU session",
    _WHILE_CONTEXT: "loop sinking: iterations_per_loop steps in one TF1 while loop",
    _LEGACY_KERAS_BACKEND: "forwarding the TF 1.15 way of handing a session to Keras "
                           "(its set_session) to the Keras that models use",
    _GET_XLA_FOLDING: "telling whether TensorFlow reads TF_XLA_FLAGS now or did before "
                      "(graph_compiler_cache_dir on the xla backend)",
    _SET_XLA_FOLDING: "restoring the TF_XLA_FLAGS value read to tell when TensorFlow reads "
                      "TF_XLA_FLAGS (graph_compiler_cache_dir on the xla backend)",
    _FETCH_MAPPER: "taking a run's fetch structure apart and building its results, by "
                   "TensorFlow's own rules (registered fetch conversions included)",
    _SESSION_HANDLE: "a session refused for its NPU options is deleted without an "
                     "AttributeError from BaseSession.__del__",
}
"""Every non-public TensorFlow name the project uses -> what it is used for."""


class TensorFlowInternalsError(NpuAdapterError, RuntimeError):
    """The installed TensorFlow lacks a non-public name the adapter relies on."""


def _moved(name):
    import tensorflow as tf

    return TensorFlowInternalsError(f"TensorFlow {tf.__version__} moved or removed {name}, "
                                    f"used for {INTERNALS[name]}")


@functools.cache
def find(name):
    """The object at ``name``, a key of :data:`INTERNALS` naming a module then attributes of
    module-level objects (not an instance attribute, such as the estimator's warm start).

    Raises:
        TensorFlowInternalsError: this TensorFlow has no such module or attribute.
    """
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):  # the longest importable module path
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    raise _moved(name)


# ---- ops and kernels -----------------------------------------------------------------------

# No public API returns the OpDef of an op type: tf.raw_ops gives the Python wrappers only, and
# tf.Operation.op_def needs an op built with valid inputs. Checked on 2.15 and 2.21.
def op_def(op_type):
    """The registered ``OpDef`` of ``op_type``, or None for an op this process does not know."""
    return find(_OP_DEF_GET)(op_type)


# No public API lists the kernels of an op with their device and dtype constraints
# (tf.test.is_built_with_xla says whether XLA was compiled in, not which XLA_CPU_JIT kernels are
# registered). Checked on 2.15 and 2.21.
def registered_kernels(op_type):
    """The ``KernelList`` of the kernels registered for ``op_type`` (empty for unknown ops)."""
    return find(_KERNELS_FOR_OP)(op_type)


# ---- TF_XLA_FLAGS ---------------------------------------------------------------------------

# TensorFlow parses TF_XLA_FLAGS once per process, all its flags at once, the first time any of
# them is read (a session creating its devices reads them); no public API says whether that
# happened, nor reads a flag back. These two read and set the parsed value of one of them,
# --tf_xla_disable_constant_folding: reading it parses the flags if nothing did before.
# Checked on 2.15 and 2.21.
def xla_constant_folding_disabled():
    """The parsed value of ``--tf_xla_disable_constant_folding`` (parsing ``TF_XLA_FLAGS``
    now when TensorFlow has not yet)."""
    return bool(find(_GET_XLA_FOLDING)())


def set_xla_constant_folding_disabled(value):
    """Set the parsed value of ``--tf_xla_disable_constant_folding``."""
    find(_SET_XLA_FOLDING)(bool(value))


# ---- PyFunc tokens -------------------------------------------------------------------------

# The PyFunc kernel finds its callable by the node's ``token`` in this registry. The public
# tf.compat.v1.py_func / tf.numpy_function register a callable under a process counter
# ("pyfunc_7") while building a node; the PyFunc nodes here are written into rewritten GraphDefs,
# which must be byte-identical for the same input, so the token is ours and is written into the
# registry's mapping (``_funcs``, a WeakValueDictionary: the caller keeps the callable alive).
# FuncRegistry's get and remove are its own public methods. Checked on 2.15 and 2.21.
def register_py_func(token, func):
    """Make the PyFunc nodes whose ``token`` attr is ``token`` call ``func`` (held weakly: the
    caller keeps a reference as long as the nodes may run)."""
    try:
        funcs = find(_PY_FUNCS)._funcs
    except AttributeError:
        raise _moved(_PY_FUNCS) from None
    funcs[token] = func


def unregister_py_func(token):
    """Forget ``token`` (its PyFunc nodes fail from now on). Unknown tokens are ignored."""
    find(_PY_FUNCS).remove(token)


def registered_py_func(token):
    """The callable registered under ``token``, or None."""
    return find(_PY_FUNCS).get(token)


# ---- graph building ------------------------------------------------------------------------

# tf.Operation has get_attr but no setter, and the graph-building API sets attributes only when
# an op is created. Checked on 2.15 and 2.21.
def set_op_attr(op, name, attr_value):
    """Set attribute ``name`` of the ``tf.Operation`` ``op`` to ``attr_value`` (an
    ``AttrValue``)."""
    find(_SET_ATTR)(op, name, attr_value)


# No public API adds attributes to the ops created inside a block. Setting them afterwards with
# set_op_attr is not the same: a session run inside the block would run the ops without them.
# Like TensorFlow's own scope, an attribute an op already has is kept, so inner scopes win.
# Checked on 2.15 and 2.21.
def attr_scope(attrs):
    """A context manager: every op created in the default graph inside it gets ``attrs``
    (``{name: AttrValue}``)."""
    import tensorflow as tf

    return find(_ATTR_SCOPE)(tf.compat.v1.get_default_graph(), attrs)


# export_meta_graph serializes a collection only when a proto function is registered for its
# name, and registering one is not public. Checked on 2.15 and 2.21.
def register_proto_function(collection, proto_type, to_proto, from_proto):
    """Register how the items of ``collection`` are written to and read from a MetaGraphDef.
    Registering a name again is a no-op (TensorFlow would raise ``KeyError``)."""
    with contextlib.suppress(KeyError):
        find(_PROTO_FUNCTION)(collection, proto_type=proto_type, to_proto=to_proto,
                              from_proto=from_proto)


# ---- training classes the original subclasses ----------------------------------------------

# tf.compat.v1.train.Saver takes a ``builder``, but the builder classes and the hooks that build
# the save ops (_AddSaveOps, _AddShardedSaveOps, which dispatches to the V2 form) are not public.
# Checked on 2.15 and 2.21.
def saver_builder_waiting_for(dependencies):
    """A subclass of TensorFlow's ``BulkSaverBuilder`` whose save ops run after the ops
    ``dependencies(saveables)`` returns for the saveables being saved."""
    import tensorflow as tf

    base = find(_BULK_SAVER_BUILDER)

    class SaverBuilderWaiting(base):
        def _AddSaveOps(self, filename_tensor, saveables):
            with tf.control_dependencies(dependencies(saveables)):
                return super()._AddSaveOps(filename_tensor, saveables)

        def _AddShardedSaveOps(self, filename_tensor, per_device):
            saveables = [s for _, device_saveables in per_device for s in device_saveables]
            with tf.control_dependencies(dependencies(saveables)):
                return super()._AddShardedSaveOps(filename_tensor, per_device)

    return SaverBuilderWaiting


# tf.compat.v1.distribute.OneDeviceStrategy is public, but the class of its ``extended`` and the
# hooks a strategy overrides (_num_replicas_in_sync, _experimental_distribute_dataset) are not;
# the original's NPUExtended is that class. Checked on 2.15 and 2.21.
def one_device_extended(num_replicas_in_sync, distribute_dataset):
    """A subclass of TensorFlow's one-device ``StrategyExtended`` whose replica count is
    ``num_replicas_in_sync()`` and whose ``experimental_distribute_dataset(dataset)`` is
    ``distribute_dataset(dataset)``."""
    base = find(_ONE_DEVICE_EXTENDED)

    class OneDeviceExtended(base):
        @property
        def _num_replicas_in_sync(self):
            return num_replicas_in_sync()

        def _experimental_distribute_dataset(self, dataset, options=None):
            return distribute_dataset(dataset)

    return OneDeviceExtended


# ---- SavedModel ----------------------------------------------------------------------------

# The public tf.compat.v1.graph_util.convert_variables_to_constants freezes a TF1 session's
# graph: for a SavedModel that is the MetaGraph (inputs serving_default_<key>, outputs
# StatefulPartitionedCall:k, the signature function kept as a call). The v2 converter freezes the
# signature's ConcreteFunction itself, its call inlined, with its own tensor names (the names
# users give to --input-shape and ATC's out_nodes). Checked on 2.15 and 2.21.
def freeze_function(concrete_function):
    """``concrete_function`` with its variables folded into constants and its functional control
    flow (If/While) kept, as a ConcreteFunction."""
    return find(_FREEZE)(concrete_function, lower_control_flow=False)


# ---- tf.estimator (TensorFlow 2.15; removed in 2.16) ---------------------------------------

# Estimator keeps the warm start it was built with only in this attribute (Keras'
# model_to_estimator computes it from the model's first checkpoint).
def warm_start_settings(estimator):
    """The ``WarmStartSettings`` (or None) ``estimator`` was built with."""
    try:
        return estimator._warm_start_settings
    except AttributeError:
        raise _moved(_WARM_START) from None


# Estimator.__init__ calls this method to refuse subclasses that override its members; the
# original's no_check_override lets them, and there is no public switch.
def set_estimator_override_check(check):
    """Make ``check`` (a function of the estimator) ``tf.estimator.Estimator``'s check that a
    subclass overrides none of its members; returns the check it replaces."""
    import tensorflow as tf

    find(_OVERRIDE_CHECK)  # raises the clear error when TensorFlow renamed it
    cls = tf.estimator.Estimator
    previous = cls._assert_members_are_not_overridden
    cls._assert_members_are_not_overridden = check
    return previous


# ---- Keras 2 -------------------------------------------------------------------------------

# Keras 2's Dropout.call asks this method for the noise shape, and its SpatialDropout1D/2D/3D
# override it (the method's own comment invites subclasses to); npu_convert_dropout replaces
# Dropout.call, so it asks the same method. Keras has no public form of it. Checked with Keras
# 2.15 (TensorFlow 2.15's tf.keras) and tf_keras 2.21.
def keras_noise_shape(layer, inputs):
    """The noise shape Keras 2's ``Dropout`` layer ``layer`` uses for ``inputs`` (None when the
    mask is as large as the inputs)."""
    try:
        method = layer._get_noise_shape
    except AttributeError:
        raise _moved(_NOISE_SHAPE) from None
    return method(inputs)


# ---- sessions ------------------------------------------------------------------------------

# TensorFlow's own modules (MonitoredTrainingSession, SessionManager, tf.estimator, the Keras
# backend) create their sessions through tensorflow.python.client.session, not through
# tf.compat.v1.Session: only the common base class reaches every session of the process, as the
# original adapter, a plugin of TensorFlow's runtime, does. The public classes' MRO names it.
# Checked on 2.15 and 2.21.
def base_session():
    """TensorFlow's ``BaseSession``, the base of ``tf.compat.v1.Session`` and
    ``InteractiveSession``."""
    import tensorflow as tf

    base = tf.compat.v1.Session.__mro__[1]
    if base.__name__ != "BaseSession" or not all(name in vars(base) for name in SESSION_METHODS):
        raise _moved(_BASE_SESSION)
    return base


# The BaseSession methods npu_adapter.install replaces. All are public but one: the Keras
# backend (tf_keras, and TensorFlow's legacy Keras) runs models through
# _make_callable_from_options, so a session that rewrites must serve it too.
SESSION_METHODS = ("__init__", "run", "close", "make_callable", "_make_callable_from_options",
                   "partial_run_setup", "partial_run")
_TF_SESSION_METHODS = {}


def tf_session_method(name):
    """TensorFlow's own ``BaseSession`` method ``name`` (one of :data:`SESSION_METHODS`), as it
    was before anything replaced it."""
    if not _TF_SESSION_METHODS:
        base = base_session()
        _TF_SESSION_METHODS.update((n, vars(base)[n]) for n in SESSION_METHODS)
    return _TF_SESSION_METHODS[name]


# Loop sinking runs iterations_per_loop steps in one TF1 while loop (Enter/Exit frames), whatever
# the process's control-flow setting: TF1 reference variables are loop invariants only in such a
# loop. tf.compat.v1.while_loop builds a functional While unless control flow v2 is switched off
# for the whole process. Checked on 2.15 and 2.21.
def while_context():
    """TensorFlow's TF1 while-loop builder class (``control_flow_ops.WhileContext``)."""
    return find(_WHILE_CONTEXT)


# BaseSession.__del__ reads self._session, which only BaseSession.__init__ sets. An NPU session
# whose options are refused raises before TensorFlow's __init__ runs (so that no TensorFlow
# session exists for it), and without this its deletion would print an AttributeError after
# the user's clear error. TensorFlow's own __del__ then finds nothing to close. Checked on 2.15
# and 2.21.
def mark_session_refused(session):
    """Make ``session``, whose ``BaseSession.__init__`` never ran, safe to delete."""
    session.__dict__.setdefault("_session", None)


# TF 1.15 scripts hand their session to Keras through tensorflow.python.keras.backend.set_session.
# In TensorFlow 2.x that module is a legacy copy of Keras that tf.keras models never read: the
# only way to make such a script's session reach its models is to forward that module's session
# functions. Checked on 2.15 and 2.21.
def legacy_keras_backend():
    """TensorFlow's bundled legacy Keras backend module, or None when this TensorFlow has
    none."""
    try:
        return importlib.import_module(_LEGACY_KERAS_BACKEND)
    except ImportError:
        return None


# Session.run takes any structure of fetches (lists, tuples, namedtuples, dicts, attrs classes,
# SparseTensor, IndexedSlices, RaggedTensor and every type registered with
# register_session_run_conversion_functions, such as get_variable's lazy regularization
# losses) and builds the results in that structure. An NPU session runs the elements of that
# structure on another graph, so it needs the structure taken apart and rebuilt exactly as
# TensorFlow does; no public API exposes that logic. Checked on 2.15 and 2.21.
def fetch_mapper(graph, fetches):
    """TensorFlow's fetch mapper of ``fetches`` in ``graph``: ``unique_fetches()`` gives the
    tensors and operations to run, ``build_results(values)`` the user's structure. Raises
    TensorFlow's own errors for a fetch it cannot interpret."""
    with graph.as_default():
        return find(_FETCH_MAPPER).for_fetch(fetches)
