"""TensorFlow's non-public names, all reached through ``npu_adapter.tf_compat``.

Every name of ``tf_compat.INTERNALS`` is used here once the way the project relies on it; a
TensorFlow that moved, removed or changed it fails with "TensorFlow <version> moved or removed
<name>, used for <purpose>". CI runs this on TensorFlow 2.15 and 2.21.

The sources are also read: outside the files of :data:`TF_INTERNALS_ALLOWED`, no module imports
``tensorflow.python`` or TensorFlow's C API, and no attribute named with one leading underscore
is read unless the project defines that name itself (so a TensorFlow object's ``_private``
member cannot be reached by accident).
"""

import ast
import pathlib
import re
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, variable_pb2

from npu_adapter import tf_compat
from tests.npu_cpu_helpers import keras2

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Files that may still reach TensorFlow internals directly, with why. The session rewrite
# (issue 32) moves the session layer's names into tf_compat and deletes graph/serialized.py:
# shrink this as it lands.
TF_INTERNALS_ALLOWED = {
    "npu_adapter/tf_compat.py": "the one module for TensorFlow's non-public names",
    "tests/test_tf_compat.py": "names the internals it checks",
}

# Members with one leading underscore that are public API of Python itself, and the two
# argparse keeps its options in (the standard library's, stable since Python 3.2; the CLI's
# near-miss suggestions read them): this scan is about TensorFlow's.
PYTHON_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults",
                        "_getframe", "_exit", "_actions", "_option_string_actions"})

SOURCE_DIRS = ("npu_adapter", "npu_bridge", "passes", "hccl", "bench", "examples", "tests",
               "third_party", ".ci")


# ---- every name, used as the project uses it -------------------------------------------------

CHECKS = {}


def check(name):
    def register(func):
        CHECKS[name] = func
        return func
    return register


def _needs_estimator():
    if not hasattr(tf, "estimator"):
        pytest.skip(f"TensorFlow {tf.__version__} has no tf.estimator (removed in 2.16)")


@check("tensorflow.python.framework.kernels.get_registered_kernels_for_op")
def check_kernels():
    kernels = tf_compat.registered_kernels("MatMul").kernel
    cpu = [k for k in kernels if k.device_type == "CPU"]
    assert cpu and any(tf.float32.as_datatype_enum in c.allowed_values.list.type
                       for k in cpu for c in k.constraint if c.name == "T")
    assert any(k.device_type == "CPU" for k in tf_compat.registered_kernels("XlaLaunch").kernel)
    assert len(tf_compat.registered_kernels("NpuAdapterNoSuchOp").kernel) == 0


@check("tensorflow.python.ops.script_ops._py_funcs")
def check_py_funcs():
    token = "npu_adapter_tf_compat_test"

    def double(x):
        return x * 2

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2])
        (y,) = tf.raw_ops.PyFunc(input=[x], token=token, Tout=[tf.float32])
    tf_compat.register_py_func(token, double)
    try:
        assert tf_compat.registered_py_func(token) is double
        with tf.compat.v1.Session(graph=graph) as sess:
            np.testing.assert_array_equal(sess.run(y, {x: [1.5, 2.0]}), [3.0, 4.0])
    finally:
        tf_compat.unregister_py_func(token)
    assert tf_compat.registered_py_func(token) is None
    with tf.compat.v1.Session(graph=graph) as sess, pytest.raises(tf.errors.OpError):
        sess.run(y, {x: [1.0, 1.0]})


@check("tensorflow.python.framework.ops.Operation._set_attr")
def check_set_attr():
    with tf.Graph().as_default() as graph:
        op = tf.constant(1.0, name="c").op
        tf_compat.set_op_attr(op, "_npu_test", attr_value_pb2.AttrValue(s=b"on"))
    assert op.get_attr("_npu_test") == b"on"
    (node,) = graph.as_graph_def().node
    assert node.attr["_npu_test"].s == b"on"


@check("tensorflow.python.framework.ops.Graph._attr_scope")
def check_attr_scope():
    one, two = attr_value_pb2.AttrValue(i=1), attr_value_pb2.AttrValue(i=2)
    with tf.Graph().as_default():
        with tf_compat.attr_scope({"_a": one}):
            outer = tf.constant(1.0).op
            with tf_compat.attr_scope({"_a": two, "_b": one}):
                inner = tf.constant(2.0).op
        after = tf.constant(3.0).op
    assert outer.get_attr("_a") == 1 and "_b" not in outer.node_def.attr
    assert inner.get_attr("_a") == 2 and inner.get_attr("_b") == 1
    assert "_a" not in after.node_def.attr


@check("tensorflow.python.framework.ops.register_proto_function")
def check_proto_function():
    collection = "npu_adapter_tf_compat_test_variables"

    def from_proto(variable_def, import_scope=None):
        return tf.compat.v1.Variable(variable_def=variable_def, import_scope=import_scope,
                                     use_resource=variable_def.is_resource)

    for _ in range(2):  # registering again is a no-op
        tf_compat.register_proto_function(
            collection, proto_type=variable_pb2.VariableDef,
            to_proto=lambda v, export_scope=None: v.to_proto(export_scope=export_scope),
            from_proto=from_proto)
    with tf.Graph().as_default():
        var = tf.compat.v1.get_variable("v", shape=[], use_resource=True)
        tf.compat.v1.add_to_collection(collection, var)
        meta = tf.compat.v1.train.export_meta_graph()
    assert len(meta.collection_def[collection].bytes_list.value) == 1
    with tf.Graph().as_default() as graph:
        tf.compat.v1.train.import_meta_graph(meta)
        (restored,) = graph.get_collection(collection)
    assert isinstance(restored, tf.Variable) and restored.name == "v:0"


@check("tensorflow.python.training.saver.BulkSaverBuilder")
def check_saver_builder():
    seen = []

    def wait_for(saveables):
        seen.append(len(saveables))
        return [tf.no_op(name="waited")]

    builder_class = tf_compat.saver_builder_waiting_for(wait_for)
    for sharded in (False, True):
        seen.clear()
        with tf.Graph().as_default() as graph:
            tf.compat.v1.get_variable("w", shape=[2], use_resource=True)
            saver = tf.compat.v1.train.Saver(sharded=sharded, builder=builder_class())
        assert seen and seen[0] >= 1
        save_op = saver.saver_def.save_tensor_name.split(":")[0]
        needed = tf.compat.v1.graph_util.extract_sub_graph(graph.as_graph_def(), [save_op])
        assert any(n.name.endswith("waited") for n in needed.node), sharded


@check("tensorflow.python.distribute.one_device_strategy.OneDeviceExtended")
def check_one_device_extended():
    extended_class = tf_compat.one_device_extended(lambda: 3, lambda dataset: dataset.take(2))

    class Strategy(tf.compat.v1.distribute.Strategy):
        def __init__(self):
            super().__init__(extended_class(self, "/cpu:0"))

    strategy = Strategy()
    assert strategy.num_replicas_in_sync == 3
    dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.range(5))
    assert [int(v) for v in dataset] == [0, 1]


@check("tensorflow.python.framework.convert_to_constants.convert_variables_to_constants_v2")
def check_freeze():
    weight = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32, name="x")])
    def scaled(x):
        return tf.cond(x > 0, lambda: x * weight, lambda: -x)

    frozen = tf_compat.freeze_function(scaled.get_concrete_function())
    ops = {n.op for n in frozen.graph.as_graph_def().node}
    assert not ops & {"VarHandleOp", "ReadVariableOp"}
    assert ops & {"If", "StatelessIf"}  # functional control flow is kept
    assert [t.name for t in frozen.inputs] == ["x:0"]
    assert float(tf.nest.flatten(frozen(tf.constant(3.0)))[0]) == 6.0


@check("tensorflow_estimator.python.estimator.estimator.Estimator._warm_start_settings")
def check_warm_start():
    _needs_estimator()

    def model_fn(features, labels, mode):
        return tf.estimator.EstimatorSpec(mode, loss=tf.constant(0.0), train_op=tf.no_op())

    with tempfile.TemporaryDirectory() as directory:
        estimator = tf.estimator.Estimator(model_fn, model_dir=directory,
                                           warm_start_from=directory + "/start")
        settings = tf_compat.warm_start_settings(estimator)
    assert settings.ckpt_to_initialize_from == directory + "/start"


@check("tensorflow_estimator.python.estimator.estimator.Estimator."
       "_assert_members_are_not_overridden")
def check_override_check():
    _needs_estimator()

    def model_fn(features, labels, mode):
        return tf.estimator.EstimatorSpec(mode, loss=tf.constant(0.0), train_op=tf.no_op())

    class Overriding(tf.estimator.Estimator):
        def train(self, *args, **kwargs):
            return super().train(*args, **kwargs)

    with tempfile.TemporaryDirectory() as directory:
        with pytest.raises(ValueError, match="train"):
            Overriding(model_fn, model_dir=directory)
        saved = tf_compat.set_estimator_override_check(lambda estimator: None)
        try:
            Overriding(model_fn, model_dir=directory)
        finally:
            tf_compat.set_estimator_override_check(saved)
        with pytest.raises(ValueError, match="train"):
            Overriding(model_fn, model_dir=directory)


@check("Keras 2 (tf_keras) Dropout._get_noise_shape")
def check_noise_shape():
    keras = keras2()
    inputs = tf.ones([4, 5, 3])
    assert tf_compat.keras_noise_shape(keras.layers.Dropout(0.5), inputs) is None
    shaped = tf_compat.keras_noise_shape(keras.layers.Dropout(0.5, noise_shape=[None, 1, 3]),
                                         inputs)
    assert [int(d) for d in shaped] == [4, 1, 3]
    spatial = tf_compat.keras_noise_shape(keras.layers.SpatialDropout1D(0.5), inputs)
    assert [int(d) for d in spatial] == [4, 1, 3]


@check("tensorflow.python.client.session.BaseSession._make_callable_from_options")
def check_callable_from_options():
    from tensorflow.core.protobuf import config_pb2

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        tf.multiply(x, 3.0, name="y")
    with tf.compat.v1.Session(graph=graph) as sess:
        options = config_pb2.CallableOptions(feed=["x:0"], fetch=["y:0"])
        call = tf_compat.tf_session_method("_make_callable_from_options")(sess, options)
        np.testing.assert_array_equal(call(np.array([1.0, 2.0], np.float32))[0], [3.0, 6.0])


@check("tensorflow.python.ops.control_flow_ops.WhileContext")
def check_while_context():
    graph = tf.Graph()
    with graph.as_default():
        context = tf_compat.while_context()(parallel_iterations=1, back_prop=False,
                                           swap_memory=False)
        (_, total) = context.BuildLoop(lambda i, acc: i < 3, lambda i, acc: (i + 1, acc + 2.0),
                                       [tf.constant(0), tf.constant(0.0)],
                                       [tf.TensorShape([]), tf.TensorShape([])], True)
        assert {op.type for op in graph.get_operations()} >= {"Enter", "Exit", "Merge"}
    with tf.compat.v1.Session(graph=graph) as sess:
        assert sess.run(total) == 6.0


@check("tensorflow.python.keras.backend")
def check_legacy_keras_backend():
    backend = tf_compat.legacy_keras_backend()
    if backend is None:
        pytest.skip(f"TensorFlow {tf.__version__} bundles no legacy Keras")
    for name in ("set_session", "get_session", "clear_session"):
        assert callable(getattr(backend, name)), name


@check("tensorflow.python.pywrap_tfe.TF_SetTfXlaCpuGlobalJit")
def check_xla_flag_swap():
    before = tf_compat.swap_xla_cpu_global_jit(False)
    try:
        assert tf_compat.swap_xla_cpu_global_jit(True) is False
        assert tf_compat.swap_xla_cpu_global_jit(True) is True
    finally:
        tf_compat.swap_xla_cpu_global_jit(before)


def test_every_internal_has_a_check():
    assert sorted(CHECKS) == sorted(tf_compat.INTERNALS)


@pytest.mark.parametrize("name", sorted(tf_compat.INTERNALS))
def test_internal_is_there_and_behaves(name):
    try:
        CHECKS[name]()
    except (pytest.skip.Exception, pytest.fail.Exception):
        raise
    except Exception as exc:
        message = str(exc) if isinstance(exc, tf_compat.TensorFlowInternalsError) else \
            (f"TensorFlow {tf.__version__} moved or removed {name}, used for "
             f"{tf_compat.INTERNALS[name]} ({type(exc).__name__}: {exc})")
        pytest.fail(message, pytrace=False)


def _moved(name):
    return rf"^TensorFlow {re.escape(tf.__version__)} moved or removed {re.escape(name)}, used for "


@pytest.mark.parametrize("name", ["tensorflow.python.framework.ops.Graph._npu_no_such",
                                  "tensorflow.python.npu_no_such.module.thing"])
def test_a_missing_name_is_a_clear_error(monkeypatch, name):
    """What a user sees when TensorFlow renames one of them."""
    monkeypatch.setitem(tf_compat.INTERNALS, name, "a test")
    with pytest.raises(tf_compat.TensorFlowInternalsError, match=_moved(name) + "a test$"):
        tf_compat.find(name)
    assert tf_compat.find("tensorflow.python.framework.ops.Graph") is tf.Graph
    with pytest.raises(tf_compat.TensorFlowInternalsError, match=_moved(
            "Keras 2 (tf_keras) Dropout._get_noise_shape") + "the noise shape"):
        tf_compat.keras_noise_shape(object(), None)


# ---- what public API serves ------------------------------------------------------------------

def test_op_def_is_the_registered_one():
    """tf_compat.op_def reads the OpDef through an exported MetaGraphDef: the one an op built
    with that type reports, None for an unknown type."""
    graph = tf.Graph()
    with graph.as_default():
        product = tf.matmul(tf.ones([2, 2]), tf.ones([2, 2]))
        handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[])
    op_def = tf_compat.op_def("MatMul")
    assert op_def == product.op.op_def
    assert [a.name for a in op_def.input_arg] == ["a", "b"] and not op_def.is_stateful
    assert tf_compat.op_def("VarHandleOp") == handle.op.op_def and handle.op.op_def.is_stateful
    assert tf_compat.op_def("_Retval").name == "_Retval"  # an internal op type too
    assert tf_compat.op_def("NpuAdapterNoSuchOp") is None


def test_base_session_is_the_public_sessions_base():
    """npu_adapter.install replaces methods of the class every TF1 session derives from,
    reached through tf.compat.v1.Session: the sessions TensorFlow's own modules make too."""
    base = tf_compat.base_session()
    assert base.__name__ == "BaseSession" and base in tf.compat.v1.InteractiveSession.__mro__
    for name in tf_compat.SESSION_METHODS:
        assert callable(tf_compat.tf_session_method(name)), name
    graph = tf.Graph()
    with graph.as_default():
        init = tf.no_op()
    session = tf.compat.v1.train.SessionManager(graph=graph).prepare_session("", init_op=init)
    try:
        assert isinstance(session, base)
    finally:
        session.close()


# ---- nothing else reaches into TensorFlow ----------------------------------------------------

def _sources():
    files = sorted(ROOT.glob("*.py"))
    for folder in SOURCE_DIRS:
        files += sorted((ROOT / folder).rglob("*.py"))
    return [(f.relative_to(ROOT).as_posix(), ast.parse(f.read_text(encoding="utf-8")))
            for f in files]


def _allowed(path):
    return any(path == key or (key.endswith("/") and path.startswith(key))
               for key in TF_INTERNALS_ALLOWED)


def _private(name):
    return isinstance(name, str) and name.startswith("_") and not name.startswith("__")


def _constant_string(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _defined_names(tree):
    """The ``_private`` names a file defines: functions, classes, variables, arguments, imports,
    attributes it assigns (also through ``setattr``, ``__dict__[...]`` and ``__slots__``), and
    ``_<parameter>`` where attributes are set as ``setattr(obj, "_" + name, ...)``."""
    names = set()
    dynamic = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[-1])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            names.add(_constant_string(node.slice))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(
                node.func, "attr", None)) in ("setattr", "__setattr__") and len(node.args) > 1:
            key = node.args[1]
            names.add(_constant_string(key))
            dynamic |= isinstance(key, ast.BinOp) and _constant_string(key.left) == "_"
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__slots__"
                                                  for t in node.targets):
            names.update(_constant_string(c) for c in ast.walk(node.value))
    if dynamic:
        names.update("_" + a.arg for a in ast.walk(tree) if isinstance(a, ast.arg))
    return {n for n in names if _private(n)}


def _docstrings(tree):
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and _constant_string(node.value) is not None}


def _internal_module(name):
    return bool(name) and re.fullmatch(r"tensorflow\.python(\.[\w.]*)?|[\w.]*pywrap[\w.]*",
                                       name) is not None


def _reaches_into_tensorflow(path, tree, defined):
    found = []
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [(line, a.name) for a in node.names if _internal_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [f"{module}.{a.name}" for a in node.names]
            found += [(line, n) for n in names if _internal_module(n)]
        elif isinstance(node, ast.Attribute):
            if node.attr == "__internal__":
                found.append((line, "tf.__internal__"))
            elif _private(node.attr) and node.attr not in defined | PYTHON_API:
                found.append((line, f"._{node.attr[1:]}"))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                "getattr", "hasattr", "setattr", "delattr") and len(node.args) > 1:
            key = _constant_string(node.args[1])
            if _private(key) and key not in defined | PYTHON_API:
                found.append((line, f"{node.func.id}(..., {key!r})"))
        elif id(node) not in docstrings and _internal_module(_constant_string(node)):
            found.append((line, f"the string {node.value!r}"))
    return [f"{path}:{line}: {what}" for line, what in sorted(found)]


def test_only_tf_compat_reaches_into_tensorflow():
    sources = _sources()
    assert {"npu_adapter/tf_compat.py", "npu_bridge/npu_init.py", "passes/cluster.py",
            "tests/test_tf_compat.py"} <= {path for path, _ in sources}
    defined = set()
    for path, tree in sources:
        # tf_compat defines the hooks TensorFlow calls, this file names the internals.
        if path not in ("npu_adapter/tf_compat.py", "tests/test_tf_compat.py"):
            defined |= _defined_names(tree)
    found = []
    for path, tree in sources:
        if not _allowed(path):
            found += _reaches_into_tensorflow(path, tree, defined)
    assert not found, ("TensorFlow internals outside npu_adapter/tf_compat.py (add a function "
                       "there, with why no public API serves, and a check in this file):\n"
                       + "\n".join(found))


def test_the_scan_finds_what_it_must():
    """The scan flags internal imports, C API modules, private members and tf.__internal__,
    and leaves the project's own private names and docstrings alone."""
    source = '''"""Mentions tensorflow.python.framework in a docstring."""
import importlib
from tensorflow.python.framework import ops
import tensorflow.python.client.pywrap_tf_session
from tensorflow.python import pywrap_tfe

class Mine:
    def __init__(self):
        self._own = 1

def use(graph, op, mine):
    graph._c_graph
    op._set_attr("x", None)
    mine._own
    getattr(op, "_node_def")
    importlib.import_module("tensorflow.python.ops.script_ops")
    return graph.__internal__
'''
    tree = ast.parse(source)
    found = _reaches_into_tensorflow("x.py", tree, _defined_names(tree))
    assert [f.split(": ", 1)[1] for f in found] == [
        "tensorflow.python.framework.ops", "tensorflow.python.client.pywrap_tf_session",
        "tensorflow.python.pywrap_tfe", "._c_graph", "._set_attr", "getattr(..., '_node_def')",
        "the string 'tensorflow.python.ops.script_ops'", "tf.__internal__"]


def test_allowed_entries_exist():
    for key in TF_INTERNALS_ALLOWED:
        assert (ROOT / key).exists(), f"{key} is gone: remove it from TF_INTERNALS_ALLOWED"

