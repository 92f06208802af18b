"""Helpers of the NPU estimator API (``npu_bridge.estimator.npu.util``).

Argument checks, loop-sinking variables, gradient sharding helpers, a process-wide key/value
store, and the functions that put graph-level settings on ops as node attributes:

==============================  ===========================================  ==================
function                        attribute(s) on the op                       type
==============================  ===========================================  ==================
set_graph_exec_config           ``_graph_dynamic_input``                     bool
                                ``_graph_dynamic_graph_execute_mode``        string
                                ``_graph_dynamic_inputs_shape_range``        string ("" = None)
                                ``_is_train_graph``                          bool
                                ``_recompute_mode`` (only with recompute)    string
keep_tensors_dtypes             ``_keep_dtype`` = 1                          int
set_op_tensor_max_range         ``_op_max_shape``                            string
set_op_input_tensor_multi_dims  ``_subgraph_multi_dims_input_shape``         string
                                ``_subgraph_multi_dims_input_dims``          string
set_op_tensor_max_size          ``_op_max_size``                             int
==============================  ===========================================  ==================

Attributes are set on the existing op (TensorFlow's ``Operation._set_attr``, through
:mod:`npu_adapter.tf_compat`), as the original does. Where the
original passes bad input on to the C++ side (or to protobuf), these functions check it and
raise an error naming the argument: bools and ints must have those types, the shape-range string
must parse, and ``set_op_input_tensor_multi_dims`` validates its gear strings
(:func:`parse_op_input_multi_dims`).
"""

import os
import re

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, variable_pb2

from npu_adapter import tf_compat
from npu_adapter.config import OPTIONS_BY_NAME
from npu_adapter.config.parsers import INT64_MAX, MAX_GEARS, MIN_GEARS
from npu_adapter.errors import NpuConfigError
from npu_bridge import _env

__all__ = [
    "GradDivisionItem",
    "IterationPerLoop",
    "add_grads_and_vars",
    "check_aoe_mode",
    "check_bool_type",
    "check_nonnegative_integer",
    "check_not_none",
    "check_path",
    "check_positive_integer",
    "check_profiling_options",
    "convert_bool_to_int",
    "create_or_get_var",
    "fair_division",
    "format_string",
    "get_all_grad_item",
    "get_gid_by_grad",
    "get_gid_by_weight",
    "get_ranksize",
    "get_value",
    "global_dict_init",
    "keep_tensors_dtypes",
    "npu_compile",
    "parse_op_input_multi_dims",
    "register_func",
    "set_graph_exec_config",
    "set_iteration_per_loop",
    "set_op_input_tensor_multi_dims",
    "set_op_tensor_max_range",
    "set_op_tensor_max_size",
    "set_value",
    "variable_initializer_in_host",
]

_NPU_RUNCONFIG = "npu_runconfig"
_ITERATIONS_PER_LOOP_VAR = "iterations_per_loop"
_LOOP_COND_VAR = "loop_cond"
_CONST_ZERO = "zero"
_CONST_ONE = "one"

PROFILING_TYPES = ("training_trace", "task_time", "op_trace")
"""Profiling options accepted by :func:`check_profiling_options`."""

AOE_MODES = ("1", "2", "4")
"""AOE modes accepted by :func:`check_aoe_mode`."""

_INT_RE = re.compile(r"[+-]?[0-9]+\Z")  # ASCII digits only


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# --------------------------------------------------------------------------------------------
# Checks


def check_not_none(value, name):
    """``ValueError`` when ``value`` is None."""
    if value is None:
        raise ValueError(f"{name} must not be None")


def _check_int64(value, name):
    if value > INT64_MAX:
        raise ValueError(f"{name} must be at most {INT64_MAX} (it is stored as an int64), "
                         f"got {value}")


def check_positive_integer(value, name):
    """``TypeError`` unless ``value`` is an int (bool is not), ``ValueError`` unless
    0 < value <= 2**63 - 1 (TensorFlow stores it as an int64)."""
    if not _is_int(value):
        raise TypeError(f"{name} must be int, got {type(value).__name__}: {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    _check_int64(value, name)


def check_nonnegative_integer(value, name):
    """``TypeError`` unless ``value`` is an int (bool is not), ``ValueError`` unless
    0 <= value <= 2**63 - 1."""
    if not _is_int(value):
        raise TypeError(f"{name} must be int, got {type(value).__name__}: {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be nonnegative, got {value}")
    _check_int64(value, name)


def check_bool_type(value, name):
    """``TypeError`` unless ``value`` is True or False."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def convert_bool_to_int(value):
    """True -> 1, False -> 0, anything else -> -1."""
    if value is True:
        return 1
    if value is False:
        return 0
    return -1


def format_string(value, name):
    """None -> ``""``; a string -> itself; anything else -> ``TypeError``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be string, got {type(value).__name__}: {value!r}")
    return str(value)


def check_profiling_options(profiling_options=()):
    """Join a non-empty list of profiling options (each one of :data:`PROFILING_TYPES`) with
    ``":"``; ``ValueError`` otherwise."""
    allowed = ", ".join(f"`{option}`" for option in PROFILING_TYPES)
    if isinstance(profiling_options, str) or not profiling_options:
        raise ValueError(f"profiling options must be a non-empty list of {allowed}, got "
                         f"{profiling_options!r}")
    for option in profiling_options:
        if option not in PROFILING_TYPES:
            raise ValueError(f"profiling option {option!r} is invalid; profiling options must "
                             f"be in {allowed}")
    return ":".join(profiling_options)


def check_path(path):
    """The realpath of ``path``, which must be an existing directory with read and write
    permission (``ValueError`` otherwise)."""
    if not isinstance(path, (str, bytes, os.PathLike)) or not os.path.exists(path):
        raise ValueError(f"path:{path} is not exists.")
    real_path = os.path.realpath(path)
    if not os.path.isdir(real_path):
        raise ValueError(f"path:{path} is not directory.")
    if not os.access(real_path, os.R_OK | os.W_OK):
        raise ValueError(f"path:{path} is not read and write permissions.")
    return real_path


def check_aoe_mode(aoe_mode):
    """``ValueError`` unless ``aoe_mode`` is one of :data:`AOE_MODES` ('1', '2', '4')."""
    if aoe_mode not in AOE_MODES:
        raise ValueError(f"aoe_mode:{aoe_mode} is invalid, should be in {list(AOE_MODES)}")


# --------------------------------------------------------------------------------------------
# Loop sinking


def _to_proto_fn(variable, export_scope=None):
    return variable.to_proto(export_scope=export_scope)


def _from_proto_fn(variable_def, import_scope=None):
    # A resource VariableDef gives a ResourceVariable, a ref one a RefVariable, as TensorFlow's
    # own variable collections do.
    return tf.compat.v1.Variable(variable_def=variable_def, import_scope=import_scope,
                                 use_resource=variable_def.is_resource)


def register_func(var_name):
    """Register the ``npu_runconfig_<var_name>`` collection for meta-graph export/import (as
    the variable collections are). Registering the same name again is a no-op."""
    tf_compat.register_proto_function(f"{_NPU_RUNCONFIG}_{var_name}",
                                      proto_type=variable_pb2.VariableDef,
                                      to_proto=_to_proto_fn, from_proto=_from_proto_fn)


def create_or_get_var(var_name):
    """The int64 scalar resource variable ``npu_runconfig/<var_name>`` of the default graph.

    Created (zero-initialised, not trainable, colocated with the global step when there is one)
    in the collections ``npu_runconfig_<var_name>`` and ``LOCAL_VARIABLES``, or returned from
    the collection when it exists.
    """
    graph = tf.compat.v1.get_default_graph()
    collection = f"{_NPU_RUNCONFIG}_{var_name}"
    found = graph.get_collection(collection)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise RuntimeError(f"Multiple var in collection {collection!r}.")
    global_step = tf.compat.v1.train.get_global_step()
    with tf.compat.v1.colocate_with(global_step, ignore_existing=global_step is None), \
            tf.compat.v1.variable_scope(_NPU_RUNCONFIG, reuse=tf.compat.v1.AUTO_REUSE):
        return tf.compat.v1.get_variable(
            var_name, initializer=tf.compat.v1.zeros_initializer(), shape=[], dtype=tf.int64,
            trainable=False, collections=[collection, tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
            use_resource=True)


def _check_train_op(train_op):
    if not isinstance(train_op, tf.Operation):
        kind = getattr(getattr(train_op, "dtype", None), "name", type(train_op).__name__)
        raise ValueError(f"The incoming 'train_op' type is '{kind}', and the need type is "
                         "'Operation'")


def _load_loop_vars(sess, variables, iterations_per_loop):
    # What Variable.load does (it is deprecated): run each initializer with its initial value
    # fed, in one run and without adding ops to the graph.
    values = (iterations_per_loop - 1, 0, 0, 1)
    sess.run([v.initializer for v in variables],
             {v.initializer.inputs[1]: value for v, value in zip(variables, values)})


def _loop_vars():
    return tuple(create_or_get_var(name) for name in
                 (_ITERATIONS_PER_LOOP_VAR, _LOOP_COND_VAR, _CONST_ZERO, _CONST_ONE))


def set_iteration_per_loop(sess, train_op, iterations_per_loop=1):
    """Loop sinking: with ``iterations_per_loop`` > 1, load the loop variables
    (``iterations_per_loop`` = n - 1, ``loop_cond`` = 0, ``zero`` = 0, ``one`` = 1) in ``sess``
    and return ``tf.group(train_op, name="IterationOp")``; with 1 return ``train_op``.

    ``train_op`` must be an Operation (``ValueError``); the loop variables must be initialised
    in ``sess`` first (they are local variables).
    """
    _check_train_op(train_op)
    check_positive_integer(iterations_per_loop, "iterations_per_loop")
    if iterations_per_loop == 1:
        return train_op
    _load_loop_vars(sess, _loop_vars(), iterations_per_loop)
    return tf.group(train_op, name="IterationOp")


class IterationPerLoop:
    """Loop sinking in two steps: build the variables and ``IterationOp``, then load them."""

    def __init__(self):
        self._variables = None

    def create_iteration_per_loop_var(self, train_op):
        """Create the loop variables and return ``tf.group(train_op, name="IterationOp")``."""
        _check_train_op(train_op)
        self._variables = _loop_vars()
        return tf.group(train_op, name="IterationOp")

    def load_iteration_per_loop_var(self, sess, iterations_per_loop=1):
        """Load the loop variables for ``iterations_per_loop`` steps per ``Session.run``."""
        check_positive_integer(iterations_per_loop, "iterations_per_loop")
        if self._variables is None:
            raise RuntimeError("call create_iteration_per_loop_var before "
                               "load_iteration_per_loop_var")
        _load_loop_vars(sess, self._variables, iterations_per_loop)


def get_ranksize():
    """The rank size as the string the original returns: ``RANK_SIZE``, else
    ``CM_WORKER_SIZE``, else ``"1"``; ``ValueError`` when both are set or the value is not a
    positive integer."""
    size = _env.rank_size()
    raw = os.environ.get("RANK_SIZE", os.environ.get("CM_WORKER_SIZE"))
    return raw.strip() if raw is not None and raw.strip() else str(size)


def variable_initializer_in_host(var_list):
    """An initializer of ``var_list`` named ``var_in_host`` (the GeOp runs it on the host)."""
    return tf.compat.v1.variables_initializer(var_list, name="var_in_host")


# --------------------------------------------------------------------------------------------
# Gradient sharding helpers (weight-update sharding over ranks)


def fair_division(inputs, number):
    """Assign consecutive ``GradDivisionItem``s to ``number`` ranks with balanced sizes.

    Sets ``root_rank_id`` on each item (in place) and returns ``inputs``; ``ValueError`` when
    ``number`` is negative or larger than the number of items.
    """
    if not _is_int(number) or number < 0 or number > len(inputs):
        raise ValueError(f"'number' ({number!r}) is greater than the number of inputs "
                         f"({len(inputs)}) or less than 0.")
    if number == len(inputs):
        for index, item in enumerate(inputs):
            item.root_rank_id = index
        return inputs

    def unassigned_total(exclude=()):
        return sum(item.size for item in inputs
                   if item.root_rank_id < 0 and not any(item is ex for ex in exclude))

    def average(ranks_left):
        if ranks_left == 1:
            return unassigned_total()
        large = []
        while True:
            total = unassigned_total(large)
            avg = total // (ranks_left - len(large))
            found = False
            for item in inputs:
                if (item.root_rank_id < 0 and not any(item is ex for ex in large)
                        and item.size > total - item.size):
                    large.append(item)
                    found = True
            if not found:
                return avg

    start = 0
    for rank in range(number):
        ranks_left = number - rank
        avg = average(ranks_left)
        assigned = 0
        count = 0
        for index in range(start, len(inputs) - ranks_left + 1):
            item = inputs[index]
            fits = assigned + item.size <= avg
            closer = assigned + item.size - avg <= avg - assigned
            if fits or count == 0 or closer:
                item.root_rank_id = rank
                assigned += item.size
                count += 1
                start = index + 1
            if not fits:
                break
    return inputs


class GradDivisionItem:
    """A (gradient, variable) pair with the gradient's byte size and its owner rank (-1)."""

    def __init__(self, grad, var):
        self.grad = grad
        self.var = var
        self.size = self._get_size()
        self.root_rank_id = -1

    def _get_size(self):
        shape = self.grad.shape
        if shape.rank is None or shape.rank == 0:
            return 0
        size = 1
        for dim in shape.as_list():
            if dim is None:
                raise ValueError(f"gradient {self.grad.name} has an unknown dimension; "
                                 "weight-update sharding needs static gradient shapes")
            size *= int(dim)
        return size * self.grad.dtype.size


_GRADIENTS_AND_VARS = []


def add_grads_and_vars(grads_and_vars, rank_size):
    """Record the non-None gradients and divide them over ``rank_size`` ranks
    (:func:`fair_division`)."""
    items = [GradDivisionItem(grad, var) for grad, var in grads_and_vars if grad is not None]
    _GRADIENTS_AND_VARS[:] = fair_division(items, rank_size)


def get_gid_by_grad(grad):
    """The owner rank recorded for gradient ``grad`` (by tensor name), or -1."""
    gid = -1
    for item in _GRADIENTS_AND_VARS:
        if item.grad.name == grad.name:
            gid = item.root_rank_id
    return gid


def get_gid_by_weight(weight):
    """The owner rank recorded for variable ``weight`` (by name), or -1."""
    gid = -1
    for item in _GRADIENTS_AND_VARS:
        if item.var.name == weight.name:
            gid = item.root_rank_id
    return gid


def get_all_grad_item():
    """The recorded :class:`GradDivisionItem` list."""
    return _GRADIENTS_AND_VARS


# --------------------------------------------------------------------------------------------
# Graph-level settings as node attributes


def _op_of(tensor_or_op, function):
    if isinstance(tensor_or_op, tf.Operation):
        return tensor_or_op
    op = getattr(tensor_or_op, "op", None)
    if isinstance(op, tf.Operation):
        return op
    raise TypeError(f"{function}: expected a tf.Operation or a tensor/variable of a graph, got "
                    f"{type(tensor_or_op).__name__}")


def _set_attrs(op, attrs):
    for name, value in attrs.items():
        tf_compat.set_op_attr(op, name, value)


def _recompute_attr(experimental_config):
    from npu_bridge.estimator.npu.npu_config import ExperimentalConfig

    if experimental_config is None:
        return None
    if not isinstance(experimental_config, ExperimentalConfig):
        raise ValueError("experimental_config type must be ExperimentalConfig, got "
                         f"{type(experimental_config).__name__}")
    memory = experimental_config._graph_memory_optimize_config
    if memory is None or memory._recompute is None:
        return None
    return attr_value_pb2.AttrValue(s=memory._recompute.encode("utf-8"))


def _tensor_by_name(graph, name, function):
    try:
        return graph.get_tensor_by_name(name)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{function}: {name!r} is not the name of a tensor of the graph "
                         f"(expected 'op_name:index'): {exc}") from None


def set_graph_exec_config(fetch, dynamic_input=False,
                          dynamic_graph_execute_mode="dynamic_execute",
                          dynamic_inputs_shape_range=None, is_train_graph=False,
                          experimental_config=None):
    """Put graph-level execution settings on the op of ``fetch`` (docs/options.md).

    ``fetch`` is an Operation, a Tensor (attributes go on its op), a list/tuple of these
    (recursively) or a tensor name looked up in the default graph; anything else is a
    ``ValueError``. Attributes: ``_graph_dynamic_input`` (bool),
    ``_graph_dynamic_graph_execute_mode`` (string, ``lazy_recompile`` or ``dynamic_execute``,
    else ``ValueError``), ``_graph_dynamic_inputs_shape_range`` (string, "" for None; it must
    parse like the session option), ``_is_train_graph`` (bool) and, only when
    ``experimental_config.graph_memory_optimize_config.recompute`` is set, ``_recompute_mode``
    (string). ``experimental_config`` must be an ``ExperimentalConfig`` (``ValueError``).
    Fetch-level settings override the session's dynamic options.

    Returns ``fetch``; for a tensor name, the tensor (as the original).
    """
    if dynamic_graph_execute_mode not in ("lazy_recompile", "dynamic_execute"):
        raise ValueError("dynamic_graph_execute_mode should be lazy_recompile or "
                         f"dynamic_execute, got {dynamic_graph_execute_mode!r}")
    check_bool_type(dynamic_input, "dynamic_input")
    check_bool_type(is_train_graph, "is_train_graph")
    shape_range = format_string(dynamic_inputs_shape_range, "dynamic_inputs_shape_range")
    OPTIONS_BY_NAME["dynamic_inputs_shape_range"].validate(shape_range)
    attrs = {
        "_graph_dynamic_input": attr_value_pb2.AttrValue(b=dynamic_input),
        "_graph_dynamic_graph_execute_mode": attr_value_pb2.AttrValue(
            s=dynamic_graph_execute_mode.encode("utf-8")),
        "_graph_dynamic_inputs_shape_range": attr_value_pb2.AttrValue(
            s=shape_range.encode("utf-8")),
        "_is_train_graph": attr_value_pb2.AttrValue(b=is_train_graph),
    }
    recompute = _recompute_attr(experimental_config)
    if recompute is not None:
        attrs["_recompute_mode"] = recompute

    def resolve(item, found):
        """The ops to tag for ``item`` (appended to ``found``) and what to return for it."""
        if isinstance(item, tf.Operation):
            found.append(item)
        elif isinstance(item, tf.Tensor) and isinstance(getattr(item, "op", None),
                                                        tf.Operation):
            found.append(item.op)
        elif isinstance(item, (list, tuple)):
            for element in item:
                resolve(element, found)
        elif isinstance(item, str):
            tensor = _tensor_by_name(tf.compat.v1.get_default_graph(), item,
                                     "set_graph_exec_config")
            found.append(tensor.op)
            return tensor
        else:
            raise ValueError("fetch is invalid, should be op, tensor, list, tuple or tensor "
                             f"name; got {type(item).__name__}: {item!r}")
        return item

    # Every element is checked before any op is tagged: a bad one leaves the graph unchanged.
    found = []
    returned = resolve(fetch, found)
    for op in found:
        _set_attrs(op, attrs)
    return returned


def npu_compile(sess, *fetches):
    """Compile (and run once) the graph for ``fetches``: ``sess.run(fetches)``."""
    sess.run(fetches)


_global_dict = {}


def global_dict_init():
    """Reset the process-wide key/value store of :func:`set_value` / :func:`get_value`."""
    _global_dict.clear()


def set_value(key, value):
    """Store ``value`` under ``key``."""
    _global_dict[key] = value


def get_value(key, def_value=None):
    """The value stored under ``key``, or ``def_value``."""
    return _global_dict.get(key, def_value)


def keep_tensors_dtypes(graph, input_tensors):
    """Keep the original precision of the ops producing ``input_tensors`` (int attribute
    ``_keep_dtype`` = 1). ``graph`` must be a ``tf.Graph`` and ``input_tensors`` a list/tuple of
    tensor names of it (``ValueError`` otherwise, naming the unknown tensor)."""
    if not isinstance(graph, tf.Graph):
        raise ValueError(f"graph param must be ops.Graph class, got {type(graph).__name__}")
    if not isinstance(input_tensors, (tuple, list)):
        raise ValueError(f"input_tensors must be list or tuple, got "
                         f"{type(input_tensors).__name__}")
    tensors = []
    for name in input_tensors:
        if not isinstance(name, str):
            raise ValueError(f"keep_tensors_dtypes: tensor names must be strings, got {name!r}")
        tensors.append(_tensor_by_name(graph, name, "keep_tensors_dtypes"))
    for tensor in tensors:
        tf_compat.set_op_attr(tensor.op, "_keep_dtype", attr_value_pb2.AttrValue(i=1))


def set_op_tensor_max_range(tensor, max_shape):
    """String attribute ``_op_max_shape`` = ``max_shape`` on the op (or the tensor's op)."""
    op = _op_of(tensor, "set_op_tensor_max_range")
    if not isinstance(max_shape, str):
        raise TypeError(f"set_op_tensor_max_range: max_shape must be a string, got "
                        f"{type(max_shape).__name__}")
    tf_compat.set_op_attr(op, "_op_max_shape",
                          attr_value_pb2.AttrValue(s=max_shape.encode("utf-8")))


def set_op_tensor_max_size(tensor, max_size):
    """Int attribute ``_op_max_size`` = ``max_size`` (a positive int) on the op."""
    op = _op_of(tensor, "set_op_tensor_max_size")
    check_positive_integer(max_size, "max_size")
    tf_compat.set_op_attr(op, "_op_max_size", attr_value_pb2.AttrValue(i=max_size))


def _multi_dims_error(argument, fragment, allowed, whole):
    return NpuConfigError(f"set_op_input_tensor_multi_dims({argument})", fragment, allowed,
                          detail=f"in {whole!r}")


def _strict_int(text):
    """The int written in ``text`` (ASCII digits, within int64), else None."""
    token = text.strip()
    if not _INT_RE.match(token):
        return None
    value = int(token)
    return value if -INT64_MAX - 1 <= value <= INT64_MAX else None


def parse_op_input_multi_dims(input_shape, input_dims):
    """Parse the gear strings of :func:`set_op_input_tensor_multi_dims`.

    ``input_shape`` is ``"index:d1,d2,...;index:..."``: distinct non-negative input indexes,
    integer dims >= -1, at least one ``-1`` overall. ``input_dims`` is ``"g1;g2;..."``, each
    gear a comma-separated list of positive ints with one value per ``-1``; 2 to 100 distinct
    gears. Returns ``([(index, dims), ...], [gear, ...])``. Errors are
    :class:`~npu_adapter.errors.NpuConfigError` (a ``ValueError``) naming the bad fragment.
    """
    for argument, value in (("input_shape", input_shape), ("input_dims", input_dims)):
        if not isinstance(value, str):
            raise NpuConfigError(f"set_op_input_tensor_multi_dims({argument})", value,
                                 "a string", detail=f"got {type(value).__name__}")
    if not input_shape.strip():
        raise _multi_dims_error("input_shape", input_shape,
                                "'index:d1,d2;...' with at least one input", input_shape)
    entries = []
    seen = set()
    for entry in input_shape.split(";"):
        if entry.count(":") != 1:
            raise _multi_dims_error("input_shape", entry,
                                    "'index:d1,d2,...' with exactly one ':'", input_shape)
        index_text, dims_text = entry.split(":")
        index = _strict_int(index_text)
        if index is None or index < 0:
            raise _multi_dims_error("input_shape", index_text.strip() or entry,
                                    "a non-negative input index before ':'", input_shape)
        if index in seen:
            raise _multi_dims_error("input_shape", entry, "each input index listed once",
                                    input_shape)
        seen.add(index)
        dims = []
        for dim_text in dims_text.split(","):
            dim = _strict_int(dim_text)
            if dim is None or dim < -1:
                raise _multi_dims_error("input_shape", dim_text.strip() or entry,
                                        "comma-separated integer dims >= 0, or -1 for a "
                                        "dynamic dim", input_shape)
            dims.append(dim)
        entries.append((index, tuple(dims)))
    dynamic = sum(dim == -1 for _, dims in entries for dim in dims)
    if dynamic == 0:
        raise _multi_dims_error("input_shape", input_shape,
                                "at least one -1 dim for the gears to fill", input_shape)
    if not input_dims.strip():
        raise _multi_dims_error("input_dims", input_dims,
                                f"{MIN_GEARS}..{MAX_GEARS} ';'-separated gears", input_dims)
    gears = []
    for gear_text in input_dims.split(";"):
        gear = []
        for value_text in gear_text.split(","):
            value = _strict_int(value_text)
            if value is None or value < 1:
                raise _multi_dims_error("input_dims", value_text.strip() or gear_text,
                                        "positive integer dims", input_dims)
            gear.append(value)
        if len(gear) != dynamic:
            raise _multi_dims_error(
                "input_dims", gear_text,
                f"{dynamic} value(s) per gear, one per -1 in input_shape {input_shape!r}",
                input_dims)
        if tuple(gear) in gears:
            raise _multi_dims_error("input_dims", gear_text, "distinct gears", input_dims)
        gears.append(tuple(gear))
    if not MIN_GEARS <= len(gears) <= MAX_GEARS:
        raise _multi_dims_error("input_dims", input_dims,
                                f"between {MIN_GEARS} and {MAX_GEARS} gears "
                                f"(got {len(gears)})", input_dims)
    return entries, gears


def set_op_input_tensor_multi_dims(tensor, input_shape, input_dims):
    """Gears of a ``subgraph_multi_dims_scope`` input op: string attributes
    ``_subgraph_multi_dims_input_shape`` = ``input_shape`` and
    ``_subgraph_multi_dims_input_dims`` = ``input_dims`` on the op (or the tensor's op).

    Unlike the original, the strings are validated (:func:`parse_op_input_multi_dims`), and
    against the op: each index must be an input of the op and, where the input's static shape
    is known, the dims must have its rank and agree with its fixed dims.
    """
    op = _op_of(tensor, "set_op_input_tensor_multi_dims")
    entries, _ = parse_op_input_multi_dims(input_shape, input_dims)
    for index, dims in entries:
        if index >= len(op.inputs):
            raise _multi_dims_error("input_shape", f"{index}:{','.join(map(str, dims))}",
                                    f"an input index of op {op.name!r}, which has "
                                    f"{len(op.inputs)} input(s)", input_shape)
        static = op.inputs[index].shape
        if static.rank is None:
            continue
        known = static.as_list()
        compatible = len(known) == len(dims) and all(
            want == -1 or have is None or want == have for want, have in zip(dims, known))
        if not compatible:
            raise _multi_dims_error("input_shape", f"{index}:{','.join(map(str, dims))}",
                                    f"dims compatible with input {index} of op {op.name!r}, "
                                    f"whose shape is {static}", input_shape)
    tf_compat.set_op_attr(op, "_subgraph_multi_dims_input_shape",
                          attr_value_pb2.AttrValue(s=input_shape.encode("utf-8")))
    tf_compat.set_op_attr(op, "_subgraph_multi_dims_input_dims",
                          attr_value_pb2.AttrValue(s=input_dims.encode("utf-8")))
