"""TF1 names on the ``tensorflow`` module, for TF1.15 scripts run on TensorFlow 2.

Ascend TF1.15 scripts are written against ``import tensorflow as tf`` and call ``tf.Session``,
``tf.placeholder``, ``tf.train.AdamOptimizer``, ``tf.layers.dense``... TensorFlow 2 keeps those
objects only under ``tf.compat.v1``. :func:`install` (called when :mod:`npu_bridge` is imported)
makes them reachable on ``tf`` again. Every alias is the very object ``tf.compat.v1.<same name>``;
nothing is wrapped or reimplemented. Three kinds:

1. **Top-level names TF2 lacks** (:data:`TOP_LEVEL_ALIASES`, an explicit list):
   ``tf.X = tf.compat.v1.X`` when ``tf`` has no ``X``. This includes whole TF1 modules that TF2
   dropped (``tf.layers``, ``tf.gfile``, ``tf.app``, ``tf.logging``, ``tf.flags``,
   ``tf.python_io``, ...). ``tf.Session``/``tf.InteractiveSession`` are first TensorFlow's
   classes; :mod:`npu_bridge` then installs the NPU sessions over them
   (:func:`npu_adapter.install`).
2. **TF2 modules that lost TF1 members** (:data:`EXTENDED_MODULES`): ``tf.train``,
   ``tf.summary``, ``tf.nn``, ``tf.image``, ``tf.io``, ``tf.random``, ``tf.data``,
   ``tf.saved_model``, ``tf.sparse``, ``tf.linalg``, ``tf.debugging``, ``tf.errors``,
   ``tf.graph_util``, ``tf.feature_column``, ``tf.sets``, ``tf.dtypes``, ``tf.test``,
   ``tf.ragged``, ``tf.distribute``. Each gets every public member of its ``tf.compat.v1``
   counterpart that it lacks (e.g. ``tf.train.Saver``, ``tf.train.AdamOptimizer``,
   ``tf.train.MonitoredTrainingSession``, ``tf.summary.FileWriter``, ``tf.summary.merge_all``,
   ``tf.nn.rnn_cell``, ``tf.image.resize_images``, ``tf.saved_model.loader``,
   ``tf.graph_util.convert_variables_to_constants``). Members TF2 has are not touched.
3. **Keras-backed modules** (:data:`KERAS_BACKED_MODULES`): in TF2, ``tf.losses``,
   ``tf.metrics`` and ``tf.initializers`` are the Keras modules themselves (``tf.losses is
   tf.keras.losses``), so adding TF1 functions to them would change ``tf.keras``. Instead
   ``tf.losses`` etc. become a read-only view (:class:`TF1View`) that returns the TF2 member
   when there is one and the TF1 member otherwise (``tf.losses.softmax_cross_entropy``,
   ``tf.losses.get_total_loss``, ``tf.metrics.accuracy``,
   ``tf.initializers.global_variables``).

**Never overwritten**: a name TF2 already defines keeps its TF2 meaning, also where TF1's
differs. Scripts relying on the TF1 meaning of these must say ``tf.compat.v1``
(:func:`conflicts` lists them all); the notable ones are ``tf.nn.dropout`` (TF2 takes ``rate``:
a positional ``tf.nn.dropout(x, 0.9)`` drops 90%, not 10%), ``tf.summary.scalar``/
``histogram``/``image``/``audio``/``text`` (TF2 summary ops: they write to a default writer
and ``tf.summary.merge_all()`` does not see them), ``tf.losses.mean_squared_error`` and
``tf.metrics.mean_squared_error``/``mean_absolute_error`` (Keras functions: per-example values,
no ``update_op``), ``tf.train.Checkpoint`` and the many ``tf.nn``/``tf.math`` functions whose
TF1 keyword names differ (``keep_dims``, ``dim``, ...; those fail loudly).

Eager mode is not changed here: TF1 scripts build graphs under ``tf.Graph().as_default()`` or
call ``tf.compat.v1.disable_eager_execution()``; :mod:`npu_bridge.npu_init` does the latter.

``tf.compat.v1.layers`` needs Keras 2 on TensorFlow >= 2.16: :mod:`npu_bridge` sets
``TF_USE_LEGACY_KERAS=1`` (``os.environ.setdefault``) before it imports TensorFlow, which takes
effect as long as nothing touched ``tf.keras`` before (``tf_keras`` must be installed). On
TensorFlow 2.15, whose own Keras is Keras 2, it is left alone.
"""

import threading
import types

import tensorflow as tf

__all__ = [
    "EXTENDED_MODULES",
    "KERAS_BACKED_MODULES",
    "TOP_LEVEL_ALIASES",
    "TF1View",
    "conflicts",
    "install",
    "installed",
    "uninstall",
]

TOP_LEVEL_ALIASES = (
    # Sessions and the protos scripts build configs, run options and graphs with.
    "Session", "InteractiveSession", "get_default_session", "ConfigProto", "GPUOptions",
    "GraphOptions", "OptimizerOptions", "RunOptions", "RunMetadata", "GraphDef", "NodeDef",
    "AttrValue", "NameAttrList", "MetaGraphDef", "TensorInfo", "Summary", "SummaryMetadata",
    "HistogramProto", "Event", "LogMessage", "SessionLog", "SparseTensorValue", "OpError",
    # Graphs and collections.
    "get_default_graph", "reset_default_graph", "GraphKeys", "get_collection",
    "get_collection_ref", "add_to_collection", "add_to_collections", "colocate_with",
    "container", "NoGradient", "NotDifferentiable", "AUTO_REUSE", "op_scope",
    "variable_op_scope", "get_session_handle", "get_session_tensor", "delete_session_tensor",
    "load_file_system_library",
    # Graph inputs.
    "placeholder", "placeholder_with_default", "sparse_placeholder",
    # Variables, scopes and initialisers.
    "get_variable", "get_local_variable", "variable_scope", "get_variable_scope",
    "global_variables", "local_variables", "trainable_variables", "model_variables",
    "moving_average_variables", "all_variables", "global_variables_initializer",
    "local_variables_initializer", "variables_initializer", "initialize_all_variables",
    "tables_initializer", "report_uninitialized_variables", "is_variable_initialized",
    "assert_variables_initialized", "assign", "assign_add", "assign_sub", "count_up_to",
    "scatter_update", "scatter_add", "scatter_sub", "scatter_mul", "scatter_div",
    "scatter_max", "scatter_min", "scatter_nd_update", "scatter_nd_add", "scatter_nd_sub",
    "batch_scatter_update", "min_max_variable_partitioner", "fixed_size_partitioner",
    "variable_axis_size_partitioner", "create_partitioned_variables", "make_template",
    "enable_resource_variables", "disable_resource_variables", "resource_variables_enabled",
    "glorot_uniform_initializer", "truncated_normal_initializer", "orthogonal_initializer",
    "variance_scaling_initializer", "uniform_unit_scaling_initializer",
    # Casts, math and random ops renamed or moved in TF2.
    "to_float", "to_double", "to_int32", "to_int64", "to_bfloat16", "to_complex64", "log",
    "div", "floordiv", "floor_div", "mod", "floormod", "random_normal", "truncated_normal",
    "random_uniform", "random_shuffle", "random_crop", "random_gamma", "random_poisson",
    "multinomial", "set_random_seed", "get_seed", "arg_max", "count_nonzero",
    "squared_difference", "rsqrt", "reciprocal", "ceil", "erf", "erfc", "lgamma", "digamma",
    "igamma", "igammac", "zeta", "polygamma", "betainc", "expm1", "log1p", "log_sigmoid",
    "is_finite", "is_inf", "is_nan", "logical_xor", "angle", "conj", "imag", "real",
    "setdiff1d", "segment_sum", "segment_mean", "segment_max", "segment_min", "segment_prod",
    "unsorted_segment_sum", "unsorted_segment_mean", "unsorted_segment_max",
    "unsorted_segment_min", "unsorted_segment_prod", "unsorted_segment_sqrt_n", "diag",
    "diag_part", "trace", "matrix_band_part", "matrix_diag", "matrix_inverse",
    "matrix_determinant", "cholesky", "qr", "svd", "self_adjoint_eig", "global_norm",
    "accumulate_n", "lin_space", "batch_gather", "reverse_v2", "space_to_depth",
    "depth_to_space", "extract_image_patches", "div_no_nan", "bincount", "confusion_matrix",
    "quantize_v2", "fake_quant_with_min_max_args",
    # Sparse tensors.
    "sparse_add", "sparse_concat", "sparse_fill_empty_rows", "sparse_mask", "sparse_matmul",
    "sparse_maximum", "sparse_merge", "sparse_minimum", "sparse_reduce_sum", "sparse_reorder",
    "sparse_reset_shape", "sparse_reshape", "sparse_retain", "sparse_segment_mean",
    "sparse_segment_sqrt_n", "sparse_segment_sum", "sparse_slice", "sparse_softmax",
    "sparse_split", "sparse_tensor_dense_matmul", "sparse_tensor_to_dense", "sparse_to_dense",
    "sparse_to_indicator", "sparse_transpose",
    # Strings, parsing and file I/O.
    "string_split", "string_join", "string_strip", "string_to_number",
    "string_to_hash_bucket", "string_to_hash_bucket_fast", "string_to_hash_bucket_strong",
    "substr", "reduce_join", "regex_replace", "decode_raw", "decode_csv", "decode_base64",
    "encode_base64", "decode_compressed", "decode_json_example", "parse_example",
    "parse_single_example", "parse_tensor", "serialize_tensor", "FixedLenFeature",
    "VarLenFeature", "read_file", "write_file", "matching_files", "py_func",
    # Debugging and assertions.
    "Print", "check_numerics", "verify_tensor_all_finite", "add_check_numerics_ops",
    "assert_greater_equal", "assert_integer", "assert_less_equal", "assert_near",
    "assert_negative", "assert_non_negative", "assert_non_positive", "assert_none_equal",
    "assert_positive", "assert_proper_iterable", "assert_rank_at_least", "assert_rank_in",
    "assert_same_float_dtype", "assert_scalar", "assert_type", "is_non_decreasing",
    "is_numeric_tensor", "is_strictly_increasing",
    # Behaviour switches and shapes.
    "enable_eager_execution", "disable_eager_execution", "enable_v2_behavior",
    "disable_v2_behavior", "enable_control_flow_v2", "disable_control_flow_v2",
    "control_flow_v2_enabled", "enable_v2_tensorshape", "disable_v2_tensorshape",
    "enable_tensor_equality", "disable_tensor_equality", "Dimension", "dimension_value",
    "dimension_at_index", "VERSION", "GIT_VERSION", "COMPILER_VERSION", "GRAPH_DEF_VERSION",
    "GRAPH_DEF_VERSION_MIN_CONSUMER", "GRAPH_DEF_VERSION_MIN_PRODUCER",
    # Queues and readers.
    "FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue", "QueueBase", "ReaderBase",
    "TextLineReader", "TFRecordReader", "WholeFileReader", "FixedLengthRecordReader",
    "IdentityReader", "LMDBReader",
    # Whole TF1 modules TF2 dropped from the top level.
    "layers", "gfile", "app", "logging", "flags", "python_io", "resource_loader", "user_ops",
    "manip", "spectral",
)
"""Top-level TF1 names aliased to ``tf.compat.v1.<name>`` when ``tf`` lacks them."""

EXTENDED_MODULES = (
    "train", "summary", "nn", "image", "io", "random", "data", "saved_model", "sparse",
    "linalg", "debugging", "errors", "graph_util", "feature_column", "sets", "dtypes", "test",
    "ragged", "distribute",
)
"""TF2 modules that get the public members of their ``tf.compat.v1`` counterpart they lack."""

KERAS_BACKED_MODULES = ("losses", "metrics", "initializers")
"""TF2 modules that are Keras modules; they are replaced by a :class:`TF1View`."""

_LOCK = threading.Lock()
_STATE = {"installed": False, "top_level": {}, "members": {}, "views": {}}


class TF1View(types.ModuleType):
    """Read-only module view: the TF2 module's member when it has one, else the TF1 member.

    Neither module is modified; ``dir()`` lists both.
    """

    def __init__(self, name, tf2_module, tf1_module):
        super().__init__(f"tensorflow.{name}",
                         f"tf.{name} with the TF1 members of tf.compat.v1.{name} added "
                         "(npu_bridge)")
        object.__setattr__(self, "_npu_bridge_name", name)
        object.__setattr__(self, "_npu_bridge_tf2", tf2_module)
        object.__setattr__(self, "_npu_bridge_tf1", tf1_module)

    def _npu_bridge_reclaim(self):
        # TensorFlow's Keras lazy loaders replace ``tf.<name>`` by the loaded module the first
        # time they are used; keep the loaded module as the TF2 side and put the view back.
        current = getattr(tf, self._npu_bridge_name, None)
        if current is not self:
            if current is not None and not isinstance(current, TF1View):
                object.__setattr__(self, "_npu_bridge_tf2", current)
            setattr(tf, self._npu_bridge_name, self)

    def __getattr__(self, name):
        if name.startswith(("__", "_npu_bridge_")):
            raise AttributeError(name)
        try:
            return getattr(self._npu_bridge_tf2, name)
        except AttributeError:
            pass
        finally:
            self._npu_bridge_reclaim()
        try:
            return getattr(self._npu_bridge_tf1, name)
        except AttributeError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} (neither "
                                 "in TensorFlow 2 nor in tf.compat.v1)") from None

    def __dir__(self):
        try:
            names = set(dir(self._npu_bridge_tf2)) | set(dir(self._npu_bridge_tf1))
        finally:
            self._npu_bridge_reclaim()
        return sorted(names)


def _public_names(module):
    return sorted(name for name in dir(module) if not name.startswith("_"))


def install():
    """Install the aliases (idempotent); return :func:`installed`."""
    v1 = tf.compat.v1
    with _LOCK:
        if _STATE["installed"]:
            return installed()
        for name in TOP_LEVEL_ALIASES:
            if hasattr(tf, name):
                continue
            value = getattr(v1, name, None)
            if value is not None:
                setattr(tf, name, value)
                _STATE["top_level"][name] = value
        for module_name in EXTENDED_MODULES:
            tf2_module = getattr(tf, module_name, None)
            tf1_module = getattr(v1, module_name, None)
            if tf2_module is None or tf1_module is None:
                continue
            added = []
            for name in _public_names(tf1_module):
                if hasattr(tf2_module, name):
                    continue
                try:
                    value = getattr(tf1_module, name)
                except AttributeError:
                    continue
                setattr(tf2_module, name, value)
                added.append(name)
            _STATE["members"][module_name] = (tf2_module, tuple(added))
        for module_name in KERAS_BACKED_MODULES:
            tf2_module = getattr(tf, module_name, None)
            tf1_module = getattr(v1, module_name, None)
            if tf1_module is None:
                continue
            if tf2_module is None:
                setattr(tf, module_name, tf1_module)
                _STATE["top_level"][module_name] = tf1_module
                continue
            if isinstance(tf2_module, TF1View):
                continue
            try:
                # Resolve TensorFlow's lazy Keras loader now: on first use it replaces
                # tf.<module_name> by the loaded module, which would drop the view.
                dir(tf2_module)
                tf2_module = getattr(tf, module_name)
            except ImportError:
                pass  # no Keras installed: the view reclaims its place if it ever loads
            setattr(tf, module_name, TF1View(module_name, tf2_module, tf1_module))
            _STATE["views"][module_name] = tf2_module
        _STATE["installed"] = True
        return installed()


def uninstall():
    """Remove everything :func:`install` added and restore the Keras-backed modules."""
    with _LOCK:
        for name in _STATE["top_level"]:
            # These names did not exist before install(); the NPU session may have replaced
            # tf.Session since, which is still ours to remove.
            if hasattr(tf, name):
                delattr(tf, name)
        for module, names in _STATE["members"].values():
            for name in names:
                if hasattr(module, name):
                    delattr(module, name)
        for name, module in _STATE["views"].items():
            setattr(tf, name, module)
        _STATE.update(installed=False, top_level={}, members={}, views={})


def installed():
    """What :func:`install` added: ``{"top_level": [names], "modules": {module: [names]},
    "views": [modules]}`` (empty lists when not installed)."""
    return {
        "top_level": sorted(_STATE["top_level"]),
        "modules": {name: list(names) for name, (_, names) in sorted(_STATE["members"].items())},
        "views": sorted(_STATE["views"]),
    }


def conflicts():
    """The TF1 names that TF2 defines with a different object and that therefore keep their
    TF2 meaning (use ``tf.compat.v1`` for the TF1 one): a sorted list of ``"tf.<name>"`` and
    ``"tf.<module>.<name>"``."""
    v1 = tf.compat.v1
    result = []
    for name in TOP_LEVEL_ALIASES:
        if name in _STATE["top_level"] or not (hasattr(tf, name) and hasattr(v1, name)):
            continue
        if getattr(tf, name) is not getattr(v1, name):
            result.append(f"tf.{name}")
    for module_name in EXTENDED_MODULES + KERAS_BACKED_MODULES:
        tf1_module = getattr(v1, module_name, None)
        tf2_module = _STATE["views"].get(module_name, getattr(tf, module_name, None))
        if tf1_module is None or tf2_module is None:
            continue
        for name in _public_names(tf1_module):
            if hasattr(tf2_module, name) and getattr(tf2_module, name) is not getattr(
                    tf1_module, name):
                result.append(f"tf.{module_name}.{name}")
    return sorted(result)
