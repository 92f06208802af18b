"""The original adapter's partition acceptance scenarios.

Each scenario is checked with ``original_like`` (a test backend whose device runs every member of
its GeOps, with the original's 37-op test list) and, where variables are involved, with the CPU
reference too: it must give the same membership (the original's), run the variables and the ops
on their ref edges in the outer graph (``executes``), and compute what plain TensorFlow computes,
bit for bit.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import (
    build_geop_graph,
    chain_with_branch,
    control_flow_v1,
    mix_compile_graph,
    while_loop_v1_graph,
    without_npu_compile,
)

from npu_adapter import rewrite
from npu_adapter.errors import NpuConfigError, RewriteError
from npu_adapter.op_support import OpSupportList, original_test_fixture_list
from npu_adapter.testing import GraphBuilder, assert_rewrite_equivalent, canonical_edges

tf1 = tf.compat.v1


BACKENDS = ["original_like", "cpu"]


def members(result):
    """Cluster name → set of node names as the original places them (the normalised membership
    the tests compare)."""
    return {name: set(nodes) for name, nodes in result.membership().items()}


def reason(result, name):
    p = result.placement[name]
    return p["device"], p["reason"]


def executes(result, name):
    p = result.placement[name]
    return p["executes"], p.get("executes_reason")


def original(graph_def, options=None, ops=None, backend="original_like", **kwargs):
    return rewrite(graph_def, options or {}, backend=backend,
                   op_support=ops or original_test_fixture_list(), **kwargs)


# --------------------------------------------------------------------------- 1: single cluster
@pytest.mark.parametrize("backend", BACKENDS)
def test_1_full_offload_single_cluster_original_membership(backend):
    res = original(build_geop_graph(), backend=backend)
    assert members(res) == {"GeOp1_0": {"Const_1", "Variable", "Variable/read", "Add"}}
    assert reason(res, "Variable") == ("npu", "supported")
    geop = res.cluster("GeOp1_0")
    assert geop.device_inputs == () and geop.device_outputs == ("Add:0",)
    assert reason(res, "ret") == ("host", "arg_retval")


def test_1_full_offload_single_cluster_original_geop():
    gd = build_geop_graph()
    res = original(gd)
    geop = res.cluster("GeOp1_0")
    assert geop.inputs == () and geop.outputs == ("Add:0",)
    assert executes(res, "Variable") == ("npu", None)
    assert canonical_edges(res.graph_def) == ["GeOp1_0->ret"]
    node = next(n for n in res.graph_def.node if n.name == "GeOp1_0")
    assert node.attr["f"].func.name == "GeOp1_0"
    assert list(node.attr["Tin"].list.type) == []
    assert list(node.attr["Tout"].list.type) == [tf.float32.as_datatype_enum]
    assert node.attr["_data_format"].s == b"ND"
    assert node.attr["_NpuOptimizer"].s == b"NpuOptimizer"
    assert node.attr["_job"].s == b"localhost"
    assert node.attr["_mix_compile_mode"].s == b"0"
    assert reason(res, "ret") == ("host", "arg_retval")


def test_1_under_xla_the_ref_variable_runs_outside_and_its_value_is_passed_in():
    """XLA compiles no ref variable: it runs in the outer graph, its value is an argument (the
    CPU reference, like the original, keeps it in the cluster)."""
    res = original(build_geop_graph(), backend="xla")
    assert executes(res, "Variable") == ("host", "ref_edge_cpu_reference")
    for name in ("Const_1", "Variable/read", "Add"):
        assert executes(res, name) == ("npu", None)
    geop = res.cluster("GeOp1_0")
    assert geop.outer_nodes == ("Variable",)
    assert set(geop.nodes) == {"Const_1", "Variable/read", "Add"}
    assert geop.inputs == ("Variable:0",) and geop.outputs == ("Add:0",)
    # The session's own VariableV2 node stays, unchanged, in the outer graph.
    outer = {n.name: n for n in res.graph_def.node}
    assert outer["Variable"] == next(n for n in build_geop_graph().node if n.name == "Variable")
    assert canonical_edges(res.graph_def) == ["GeOp1_0->ret", "Variable->GeOp1_0"]


def test_1_runs_bit_for_bit_on_cpu():
    b = GraphBuilder()
    b.const("Const_1", np.array([1.5, -2.0], np.float32))
    b.op("VariableV2", "Variable", dtype=tf.float32, shape=[2], container="", shared_name="")
    b.const("init_value", np.array([0.25, 4.0], np.float32))
    b.op("Assign", "init", ["Variable", "init_value"], T=tf.float32)
    b.op("Identity", "Variable/read", ["Variable"], T=tf.float32)
    b.binary("Add", "Add", "Const_1", "Variable/read")
    res = assert_rewrite_equivalent(b.graph_def(), {}, {}, ["Add:0"], init=["init"],
                                    op_support=original_test_fixture_list())
    assert members(res) == {"GeOp1_0": {"Const_1", "Variable", "Variable/read", "Add"}}
    assert len(res.clusters) == 1


def test_1_init_graph_runs_bit_for_bit_on_cpu():
    """The variable's initialisation (Assign on its ref edge) is in the cluster as in the
    original, and runs there on the CPU reference: one call of one cluster."""
    b = GraphBuilder()
    b.op("VariableV2", "Variable", dtype=tf.float32, shape=[2], container="", shared_name="")
    b.const("a", np.array([0.25, 4.0], np.float32))
    b.const("b", np.array([1.5, -2.0], np.float32))
    b.binary("Add", "init_value", "a", "b")
    b.op("Assign", "init", ["Variable", "init_value"], T=tf.float32)
    b.op("Identity", "Variable/read", ["Variable", "^init"], T=tf.float32)
    res = assert_rewrite_equivalent(b.graph_def(), {}, {}, ["Variable/read:0"])
    assert members(res) == {"GeOp1_0": {"Variable", "a", "b", "init_value", "init",
                                        "Variable/read"}}
    assert executes(res, "init") == ("npu", None)
    assert [(c.name, c.part_of) for c in res.clusters] == [("GeOp1_0", None)]


# --------------------------------------------------------------------------- 2, 3: scopes
def test_2_mix_mode_without_npu_compile_scope():
    res = original(mix_compile_graph(), {"mix_compile_mode": True})
    assert members(res) == {
        "GeOp1_0": {"RandomUniformInt/shape", "RandomUniformInt/min", "RandomUniformInt/max",
                    "RandomUniformInt"},
        "GeOp1_1": {"ArgMax", "ArgMax/dimension"},
    }
    assert reason(res, "Unique") == ("host", "without_npu_compile_scope")
    # The ArgMax alias (an Identity keeping the fetched name) reads GeOp1_1.
    assert canonical_edges(res.graph_def) == ["GeOp1_0->Unique", "GeOp1_1->ArgMax",
                                              "Unique->GeOp1_1"]
    assert res.aliases == {"ArgMax": ["GeOp1_1:0"]}


def test_3_same_graph_full_offload_keeps_only_the_largest_cluster():
    res = original(mix_compile_graph(), {"mix_compile_mode": False})
    assert members(res) == {"GeOp1_0": {"RandomUniformInt/shape", "RandomUniformInt/min",
                                        "RandomUniformInt/max", "RandomUniformInt"}}
    assert reason(res, "ArgMax") == ("host", "not_in_largest_cluster")
    assert reason(res, "ArgMax/dimension") == ("host", "not_in_largest_cluster")


@pytest.mark.parametrize("mix", [False, True])
def test_2_3_run_bit_for_bit_on_cpu(mix):
    gd = mix_compile_graph()
    res = assert_rewrite_equivalent(gd, {"mix_compile_mode": mix}, {}, ["ArgMax:0"],
                                    op_support=original_test_fixture_list())
    assert len(res.clusters) == (2 if mix else 1)


# --------------------------------------------------------------------------- 4-10: in_out_pair
@pytest.mark.parametrize("backend", BACKENDS)
def test_4_in_out_pair_flag_true_offloads_the_region(backend):
    res = original(build_geop_graph(), {"mix_compile_mode": True,
                                        "in_out_pair": "[[['Variable', 'Const_1'],['Add']]]"},
                   backend=backend)
    assert members(res) == {"GeOp1_0": {"Variable", "Variable/read", "Const_1", "Add"}}
    assert canonical_edges(res.graph_def) == ["GeOp1_0->ret"]
    assert reason(res, "Add") == ("npu", "in_out_pair_region")
    assert reason(res, "ret") == ("host", "in_out_pair_excluded")


@pytest.mark.parametrize("backend", BACKENDS)
def test_5_in_out_pair_flag_false_keeps_the_region_on_host(backend):
    res = original(build_geop_graph(), {"mix_compile_mode": True, "in_out_pair_flag": False,
                                        "in_out_pair": "[[['Variable'],['Add']]]"},
                   backend=backend)
    assert members(res) == {"GeOp1_0": {"Const_1"}}
    assert canonical_edges(res.graph_def) == sorted(
        ["Variable->Variable/read", "GeOp1_0->Add", "Variable/read->Add:1", "Add->ret"])
    for name in ("Variable", "Variable/read", "Add"):
        assert reason(res, name) == ("host", "in_out_pair_region")


def test_6_in_out_pair_needs_mix_compile_mode():
    with pytest.raises(NpuConfigError, match="mix_compile_mode"):
        original(build_geop_graph(), {"in_out_pair": "[[['Variable'],['Add']]]"})


@pytest.mark.parametrize("text", ["[['Variable'],['Add']]", "[]", "[[[],[]]]"])
def test_7_in_out_pair_malformed(text):
    with pytest.raises(NpuConfigError, match="in_out_pair"):
        original(build_geop_graph(), {"mix_compile_mode": True, "in_out_pair": text})


def test_8_in_out_pair_unknown_head_falls_back_to_default():
    options = {"mix_compile_mode": True, "in_out_pair": "[[['Nope'],['Add']]]"}
    with pytest.warns(UserWarning, match="Nope"):
        res = original(build_geop_graph(), options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = original(build_geop_graph(), {"mix_compile_mode": True})
    assert members(res) == members(plain) == {
        "GeOp1_0": {"Const_1", "Variable", "Variable/read", "Add"}}


def test_9_in_out_pair_region_with_unsupported_op():
    b = GraphBuilder()
    b.placeholder("in", shape=[3])
    b.unary("Abs", "A", "in")
    b.unary("Tan", "B", "A")  # not in the test list
    b.unary("Abs", "C", "B")
    with pytest.raises(RewriteError, match="B is not supported npu node."):
        original(b.graph_def(), {"mix_compile_mode": True, "in_out_pair": "[[['A'],['C']]]"})


def test_10_in_out_pair_path_semantics():
    ops = OpSupportList.from_names(["Abs", "Floor"])
    res = original(chain_with_branch(), {"mix_compile_mode": True,
                                         "in_out_pair": "[[['A'],['C']]]"}, ops=ops)
    assert members(res) == {"GeOp1_0": {"A", "B", "C"}}
    assert reason(res, "D") == ("host", "in_out_pair_excluded")
    assert reason(res, "E") == ("host", "in_out_pair_excluded")


def test_10_runs_bit_for_bit_on_cpu():
    feeds = {"in:0": np.array([1.5, -2.25, 3.75], np.float32)}
    res = assert_rewrite_equivalent(chain_with_branch(),
                                    {"mix_compile_mode": True, "in_out_pair": "[[['A'],['C']]]"},
                                    feeds, ["D:0", "E:0"])
    assert members(res) == {"GeOp1_0": {"A", "B", "C"}}


# --------------------------------------------------------------------------- 13-17
def test_13_nothing_supported_leaves_the_graph_unchanged():
    b = GraphBuilder()
    b.op("_Arg", "arg", T=tf.string, index=0)
    b.op("DecodeJpeg", "decode", ["arg"], _op_max_size=1000)
    b.op("_Retval", "ret", ["decode"], T=tf.uint8, index=0)
    gd = b.graph_def()
    res = original(gd)
    assert res.clusters == [] and not res.modified
    assert reason(res, "decode") == ("host", "unsupported_op")


def test_14_v1_while_loop_goes_into_one_cluster():
    gd = while_loop_v1_graph()
    res = original(gd, ops=original_test_fixture_list())
    loop_nodes = {n.name for n in gd.node if n.name.startswith("while/")}
    assert len(res.clusters) == 1
    assert loop_nodes | {"start", "out"} == set(res.clusters[0].nodes)
    assert res.cluster("GeOp1_0").outputs == ("out:0",)


@pytest.mark.parametrize("mix", [False, True])
def test_14_v1_while_loop_runs_on_cpu(mix):
    res = assert_rewrite_equivalent(while_loop_v1_graph(), {"mix_compile_mode": mix}, {},
                                    ["out:0"])
    assert len(res.clusters) == 1


def test_v1_while_loop_with_a_host_node_stays_wholly_on_host():
    g = tf.Graph()
    with g.as_default(), control_flow_v1():
        x = tf1.placeholder(tf.float32, [3], name="x")

        def body(i, acc):
            # Tan is absent from the list: the loop must not be split.
            return i + 1, acc + tf.math.tan(acc) * 0.01

        tf1.while_loop(lambda i, acc: i < 5, body, [tf.constant(0), x], name="loop")
        out = g.get_tensor_by_name("loop/Exit_1:0")
        tf.identity(out * 2.0, name="out")
    gd = g.as_graph_def()
    ops = OpSupportList.from_names(
        ["Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond", "Less", "Add", "AddV2",
         "Mul", "Identity", "Const"])
    res = assert_rewrite_equivalent(gd, {}, {"x:0": np.array([0.1, 0.2, 0.3], np.float32)},
                                    ["out:0"], op_support=ops)
    loop = [n.name for n in gd.node if n.name.startswith("loop/") and n.op != "Const"
            and n.name in res.placement]
    assert len(loop) > 8
    assert all(res.placement[n]["device"] == "host" for n in loop)
    assert reason(res, "loop/add") == ("host", "host_while_frame")
    assert {"mul", "out"} <= set(res.clusters[0].nodes)


def test_a_training_step_through_a_v1_while_loop_and_a_host_op_matches_plain_tensorflow():
    """The loss reads a loop's result through Lgamma (not on the device list); its gradient runs
    back through the loop into the update. The cluster feeds the gradient loop and the update
    after it, and must not also hold the train NoOp that waits for that update."""
    from npu_adapter.config import NpuConfig
    from npu_adapter.session import NpuSession, plain_session_class

    def losses(session_class):
        g = tf.Graph()
        with g.as_default(), control_flow_v1():
            x = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
            v = tf1.Variable(np.linspace(0.5, 1.5, 4, dtype=np.float32), use_resource=True)
            w = tf1.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, tf.math.tanh(a + v)),
                               [0, x], name="loop")[1]
            loss = tf.reduce_mean(tf.square(tf.math.lgamma(w)))
            train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
            init = tf1.global_variables_initializer()
        with session_class(graph=g, config=NpuConfig.from_dict({}).to_config_proto()) as sess:
            sess.run(init)
            return [sess.run([loss, train])[0] for _ in range(3)] + [sess.run(v)]

    for ours, plain in zip(losses(NpuSession), losses(plain_session_class())):
        np.testing.assert_array_equal(ours, plain)


def _if_graph(branch_op="Greater"):
    """A scenario of the original's tests: _Arg → Greater(·, Const) → If(Greater, _Arg) →
    _Retval with branches that use Const/Greater (and an If in the else branch)."""
    from tensorflow.core.framework import function_pb2

    def branch(name, op):
        f = function_pb2.FunctionDef()
        f.signature.name = name
        a = f.signature.input_arg.add()
        a.name = "x"
        a.type = tf.float32.as_datatype_enum
        o = f.signature.output_arg.add()
        o.name = "y"
        o.type = tf.bool.as_datatype_enum
        c = f.node_def.add()
        c.name = "c"
        c.op = "Const"
        c.attr["dtype"].type = tf.float32.as_datatype_enum
        c.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.float32(1.0)))
        g = f.node_def.add()
        g.name = "g"
        g.op = op
        g.input.extend(["x", "c:output:0"])
        g.attr["T"].type = tf.float32.as_datatype_enum
        f.ret["y"] = "g:z:0"
        return f

    b = GraphBuilder()
    b.add_function(branch("then_fn", "Greater"))
    b.add_function(branch("else_fn", branch_op))
    b.op("_Arg", "arg", T=tf.float32, index=0)
    b.const("zero", np.float32(0.0))
    b.binary("Greater", "cond", "arg", "zero")
    b.op("If", "if", ["cond", "arg"], Tcond=tf.bool, Tin=[tf.float32], Tout=[tf.bool],
         then_branch=_func("then_fn"), else_branch=_func("else_fn"))
    b.op("_Retval", "ret", ["if"], T=tf.bool, index=0)
    return b.graph_def()


def _func(name):
    from tensorflow.core.framework import attr_value_pb2

    av = attr_value_pb2.AttrValue()
    av.func.name = name
    return av


def test_15_functional_if_with_supported_branches():
    res = original(_if_graph())
    assert members(res) == {"GeOp1_0": {"zero", "cond", "if"}}
    assert canonical_edges(res.graph_def) == ["GeOp1_0->ret", "arg->GeOp1_0"]
    fdef = next(f for f in res.graph_def.library.function if f.signature.name == "GeOp1_0")
    if_node = next(n for n in fdef.node_def if n.name == "if")
    assert if_node.attr["then_branch"].func.name == "then_fn"
    assert {f.signature.name for f in res.graph_def.library.function} >= {"then_fn", "else_fn"}


def test_16_if_with_an_unsupported_op_in_a_branch():
    res = original(_if_graph(branch_op="Less"), ops=OpSupportList.from_names(
        [n for n in original_test_fixture_list().names() if n != "Less"]))
    assert reason(res, "if") == ("host", "function_not_supported")
    assert members(res) == {"GeOp1_0": {"zero", "cond"}}


def test_15_functional_cond_runs_on_cpu():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2], name="x")
        y = tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0, name="cond")
        tf.identity(y, name="out")
    for value in ([1.0, 2.0], [-1.0, -2.0]):
        res = assert_rewrite_equivalent(g.as_graph_def(), {}, {"x:0": np.array(value, np.float32)},
                                        ["out:0"])
        assert len(res.clusters) == 1


def test_17_unary_ops_composition_is_expanded():
    b = GraphBuilder()
    b.placeholder("x", shape=[4])
    b.binary("Mul", "Mul", "x", "x")
    b.op("_UnaryOpsComposition", "comp", ["Mul"], T=tf.float32, op_names=["Floor", "Abs"])
    b.unary("Abs", "Abs_1", "comp")
    res = original(b.graph_def())
    fdef = next(f for f in res.graph_def.library.function if f.signature.name == "GeOp1_0")
    names = {n.name for n in fdef.node_def}
    assert {"comp_0_Floor", "comp_1_Abs", "Abs_1"} <= names
    assert not any(n.op == "_UnaryOpsComposition" for n in fdef.node_def)


def test_17_unary_ops_composition_runs_on_cpu():
    b = GraphBuilder()
    b.placeholder("x", shape=[4])
    b.binary("Mul", "Mul", "x", "x")
    b.op("_UnaryOpsComposition", "comp", ["Mul"], T=tf.float32, op_names=["Floor", "Neg"])
    b.unary("Abs", "Abs_1", "comp")
    feeds = {"x:0": np.array([1.5, -2.5, 0.3, 7.0], np.float32)}
    expected = np.abs(-np.floor(feeds["x:0"] ** 2))
    res = rewrite(b.graph_def(), {}, fetches=["Abs_1:0"], feeds=["x:0"])
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(res.graph_def, name="")
    with tf1.Session(graph=g) as sess:
        out = sess.run(res.tensor_map["Abs_1:0"], feeds)
    np.testing.assert_array_equal(out, expected)


# --------------------------------------------------------------------------- 20-25
def _save_graph():
    """A scenario of the original's tests: three variables saved by SaveV2 (unsupported); the
    filename chain; a control_dependency Identity after SaveV2."""
    b = GraphBuilder()
    for v in ("v1", "v2", "v3"):
        b.op("VariableV2", v, dtype=tf.float32, shape=[2], container="", shared_name="")
    b.const("save/filename/input", np.array(b"model", object), dtype=tf.string)
    b.op("PlaceholderWithDefault", "save/filename", ["save/filename/input"], dtype=tf.string,
         shape=[])
    b.op("Identity", "save/Const", ["save/filename"], T=tf.string)
    b.const("save/names", np.array([b"v1", b"v2", b"v3"], object), dtype=tf.string)
    b.const("save/slices", np.array([b"", b"", b""], object), dtype=tf.string)
    b.op("SaveV2", "save/SaveV2", ["save/Const", "save/names", "save/slices", "v1", "v2", "v3"],
         dtypes=[tf.float32] * 3)
    b.op("Identity", "save/control_dependency", ["save/Const", "^save/SaveV2"], T=tf.string)
    return b.graph_def()


@pytest.mark.parametrize("backend", BACKENDS)
def test_20_full_offload_merges_independent_clusters(backend):
    res = original(_save_graph(), backend=backend)
    assert members(res) == {"GeOp1_0": {"v1", "v2", "v3", "save/filename/input",
                                        "save/filename", "save/Const"}}
    assert reason(res, "save/control_dependency") == ("host", "not_in_largest_cluster")
    assert reason(res, "save/SaveV2") == ("host", "unsupported_op")
    cluster = res.cluster("GeOp1_0")
    assert cluster.device_outputs == ("save/Const:0", "v1:0", "v2:0", "v3:0")
    fdef = next(f for f in res.graph_def.library.function if f.signature.name == cluster.name)
    dummies = {n.name for n in fdef.node_def if n.name.endswith("_dummyIdentity")}
    assert dummies == {"v1_dummyIdentity", "v2_dummyIdentity", "v3_dummyIdentity"}


def _momentum_graph(without_middle=True):
    """A scenario of the original's tests: a MatMul/Momentum training step; the middle AddV2 under
    without_npu_compile_scope splits it into two clusters in mix mode."""
    g = tf.Graph()
    with g.as_default():
        tf1.set_random_seed(7)
        x = tf1.placeholder(tf.float32, [4, 3], name="x")
        w = tf1.get_variable("Variable_1", [3, 3], use_resource=False)
        h = tf.matmul(x, w, name="mm1")
        if without_middle:
            with without_npu_compile(g):
                h = tf.add(h, 1.0, name="middle")
        else:
            h = tf.add(h, 1.0, name="middle")
        y = tf.matmul(h, w, name="mm2")
        loss = tf.reduce_sum(y * y, name="loss")
        tf1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, name="train")
        tf1.global_variables_initializer()
    return g.as_graph_def()


def test_21_mix_mode_copies_variables_into_each_cluster(tmp_path):
    gd = _momentum_graph()
    res = original(gd, {"mix_compile_mode": True}, ops=None, fetches=["loss:0"],
                   feeds=["x:0"], targets=["train"])
    assert len(res.clusters) >= 2
    functions = {f.signature.name: f for f in res.graph_def.library.function}
    readers = 0
    for c in res.clusters:
        body = functions[c.name].node_def
        reads_var = any(n.op in ("Identity", "ApplyMomentum") and any(
            i.split(":")[0] == "Variable_1" for i in n.input) for n in body)
        if reads_var:
            readers += 1
            assert any(n.name == "Variable_1" and n.op == "VariableV2" for n in body)
    assert readers >= 2


def test_21_cpu_gives_the_original_membership_with_variable_copies():
    gd = _momentum_graph()
    signature = {"fetches": ["loss:0"], "feeds": ["x:0"], "targets": ["train"]}
    like = original(gd, {"mix_compile_mode": True}, ops=None, **signature)
    cpu = original(gd, {"mix_compile_mode": True}, ops=None, backend="cpu", **signature)
    expected = members(like)
    # original_like offers the Placeholder to the device; a real session feeds it as an _Arg,
    # which never goes into a cluster (the CPU reference says graph_input).
    for names in expected.values():
        names.discard("x")
    assert reason(cpu, "x") == ("host", "graph_input")
    assert members(cpu) == expected
    assert len(expected) >= 2
    copied = cpu.placement["Variable_1"]["copied_into"]
    assert copied == like.placement["Variable_1"]["copied_into"]
    assert copied and cpu.placement["Variable_1"]["cluster"] not in copied
    for name in copied:  # each cluster reading it through a ref edge holds a copy
        assert "Variable_1" in members(cpu)[name]
        assert "Variable_1" in cpu.cluster(name).nodes  # and runs it, as the original does
    assert executes(cpu, "train/update_Variable_1/ApplyMomentum") == ("npu", None)


def test_21_mix_mode_momentum_step_runs_bit_for_bit_on_cpu():
    gd = _momentum_graph()
    feeds = {"x:0": np.random.RandomState(0).randn(4, 3).astype(np.float32)}
    res = assert_rewrite_equivalent(gd, {"mix_compile_mode": True}, feeds, ["loss:0"],
                                    targets=["train"], init=["init"], steps=4)
    assert reason(res, "middle") == ("host", "without_npu_compile_scope")
    assert reason(res, "Variable_1") == ("npu", "supported")
    assert len(res.membership()) >= 2


def test_22_const_shared_across_clusters_is_copied():
    b = GraphBuilder()
    b.placeholder("x", shape=[2])
    b.const("C", np.array([2.0, 3.0], np.float32))
    b.binary("Mul", "X", "x", "C")
    b.unary("Tan", "host_op", "X")  # unsupported: separates the two clusters
    b.binary("Add", "Y", "host_op", "C")
    gd = b.graph_def()
    ops = OpSupportList.from_names(["Mul", "Add", "Const"])
    res = original(gd, {"mix_compile_mode": True}, ops=ops)
    assert members(res) == {"GeOp1_0": {"C", "X"}, "GeOp1_1": {"Y"}}
    functions = {f.signature.name: f for f in res.graph_def.library.function}
    assert any(n.name == "C_copied" for n in functions["GeOp1_1"].node_def)
    assert "GeOp1_0:control->GeOp1_1:control" in canonical_edges(res.graph_def)
    res = assert_rewrite_equivalent(gd, {"mix_compile_mode": True},
                                    {"x:0": np.array([0.5, 1.0], np.float32)}, ["Y:0"],
                                    op_support=ops)
    assert members(res) == {"GeOp1_0": {"C", "X"}, "GeOp1_1": {"Y"}}


def test_22b_large_const_shared_across_clusters_is_passed_not_copied():
    """On the CPU reference a large Const stays in the outer graph (hoisted): in mix mode it is
    read by both clusters as an argument, never copied back into a cluster as ``C_copied``."""
    b = GraphBuilder()
    b.placeholder("x", shape=[2, 512])
    b.const("C", np.linspace(-1.0, 1.0, 2 * 512, dtype=np.float32).reshape(2, 512))
    b.binary("Mul", "X", "x", "C")
    b.unary("Tan", "host_op", "X")
    b.binary("Add", "Y", "host_op", "C")
    gd = b.graph_def()
    ops = OpSupportList.from_names(["Mul", "Add", "Const"])
    feeds = {"x:0": np.random.RandomState(1).rand(2, 512).astype(np.float32)}
    res = assert_rewrite_equivalent(gd, {"mix_compile_mode": True}, feeds, ["Y:0"],
                                    op_support=ops)
    assert members(res) == {"GeOp1_0": {"C", "X"}, "GeOp1_1": {"Y"}}
    bodies = [n.name for f in res.graph_def.library.function for n in f.node_def]
    assert not any(name.startswith("C") for name in bodies), bodies
    outer = {n.name: n for n in res.graph_def.node}
    assert outer["C"].op == "Const"
    assert "C" in [t.split(":")[0] for t in outer["GeOp1_1"].input]


def _resource_matmul_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 2], name="x")
        v = tf1.get_variable("v", initializer=np.arange(4, dtype=np.float32).reshape(2, 2),
                             use_resource=True)
        tf.matmul(x, v.read_value(), name="mm")
        tf1.global_variables_initializer()
    return g.as_graph_def()


_OPS_23 = OpSupportList.from_names(["MatMul", "ReadVariableOp", "VarHandleOp", "Identity"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_23_resource_variable_on_host_feeds_the_cluster_by_value(backend):
    res = original(_resource_matmul_graph(), {"mix_compile_mode": True,
                                              "variable_placement": "Host"},
                   ops=_OPS_23, fetches=["mm:0"], feeds=["x:0"], backend=backend)
    assert reason(res, "v") == ("host", "variable_placement_host")
    (read,) = [name for name in res.placement if name.endswith("ReadVariableOp")]
    assert reason(res, read) == ("host", "resource_edge")
    assert reason(res, "mm")[0] == "npu"
    assert members(res) == {"GeOp1_0": {"Identity", "mm"}}
    geop = next(n for n in res.graph_def.node if n.name == res.clusters[0].name)
    assert list(geop.attr["Tin"].list.type) == [tf.float32.as_datatype_enum] * 2  # x, the read


@pytest.mark.parametrize("backend", BACKENDS)
def test_23_resource_variable_on_the_device_takes_its_reads_along(backend):
    res = original(_resource_matmul_graph(), {"mix_compile_mode": True}, ops=_OPS_23,
                   fetches=["mm:0"], feeds=["x:0"], backend=backend)
    (read,) = [name for name in res.placement if name.endswith("ReadVariableOp")]
    assert members(res) == {"GeOp1_0": {"v", read, "Identity", "mm"}}
    assert res.cluster("GeOp1_0").device_inputs == ("x:0",)
    if backend == "cpu":
        # The VarHandleOp runs in the cluster (the session's resource, found by its name).
        assert executes(res, "v") == executes(res, read) == ("npu", None)
        geop = next(n for n in res.graph_def.node if n.name == "GeOp1_0")
        assert list(geop.attr["Tin"].list.type) == [tf.float32.as_datatype_enum]


@pytest.mark.parametrize("placement", ["Device", "Host"])
def test_23_runs_bit_for_bit_on_cpu(placement):
    feeds = {"x:0": np.array([[1.5, -2.0], [0.25, 3.0]], np.float32)}
    res = assert_rewrite_equivalent(_resource_matmul_graph(),
                                    {"mix_compile_mode": True, "variable_placement": placement},
                                    feeds, ["mm:0"], init=["init"], op_support=_OPS_23)
    assert reason(res, "v")[0] == ("npu" if placement == "Device" else "host")


def _assign_graph():
    b = GraphBuilder()
    b.op("VariableV2", "Variable", dtype=tf.float32, shape=[2], container="", shared_name="")
    b.const("value", np.ones([2], np.float32))
    b.op("Assign", "Assign", ["Variable", "value"], T=tf.float32, _without_npu_compile=True)
    b.op("Identity", "Variable/read", ["Variable"], T=tf.float32)
    b.const("two", np.full([2], 2.0, np.float32))
    b.binary("Mul", "Mul", "Variable/read", "two")
    return b.graph_def()


@pytest.mark.parametrize("backend", BACKENDS)
def test_24_ref_consumer_on_host_with_device_owned_variables_is_an_error(backend):
    with pytest.raises(RewriteError, match="Ref Tensors .* Assign is not in white list") as info:
        original(_assign_graph(), {"mix_compile_mode": True}, backend=backend)
    assert info.value.code == "InvalidArgument"
    res = original(_assign_graph(), {"mix_compile_mode": True, "variable_placement": "Host"},
                   backend=backend)
    assert members(res) == {"GeOp1_0": {"Variable/read", "Mul", "two"}}
    assert reason(res, "Variable") == ("host", "variable_placement_host")


def test_25_string_edges_cross_only_without_loop_sinking():
    b = GraphBuilder()
    b.placeholder("x", shape=[3])
    b.op("AsString", "host_string", ["x"], T=tf.float32)
    b.op("Identity", "consumer", ["host_string"], T=tf.string)
    b.op("Identity", "after", ["consumer"], T=tf.string)
    gd = b.graph_def()
    ops = OpSupportList.from_names(["Identity"])
    res = original(gd, {"iterations_per_loop": 1}, ops=ops)
    assert reason(res, "consumer") == ("npu", "supported")
    res = original(gd, {"iterations_per_loop": 2}, ops=ops)
    assert reason(res, "consumer") == ("host", "string_edge_with_loop_sinking")
    assert reason(res, "after") == ("host", "string_edge_with_loop_sinking")


# --------------------------------------------------------------------------- 32-34
def test_32_cycle_is_an_unimplemented_error():
    b = GraphBuilder()
    b.placeholder("x", shape=[1])
    b.binary("Add", "a", "x", "b")
    b.unary("Abs", "b", "a")
    with pytest.raises(RewriteError, match="Input graph has a cycle") as info:
        original(b.graph_def())
    assert info.value.code == "Unimplemented"


def test_33_lone_noop_gets_no_cluster():
    b = GraphBuilder()
    b.op("_Arg", "x", T=tf.float32, index=0)
    b.op("NoOp", "init", ["^x"])
    res = original(b.graph_def())
    assert res.clusters == []
    assert reason(res, "init") == ("host", "singleton_noop_identity")


def test_33_const_feeding_only_host_nodes_stays_on_host():
    b = GraphBuilder()
    b.const("c", np.ones([2], np.float32))
    b.unary("Tan", "t", "c")
    res = original(b.graph_def())
    assert res.clusters == []
    assert reason(res, "c") == ("host", "const_without_device_consumer")


@pytest.mark.parametrize("options, why", [
    ({"job": "ps"}, "job_ps"),
    ({"use_off_line": False}, "use_off_line_false"),
])
def test_34_gating_by_options(options, why):
    gd = build_geop_graph()
    res = original(gd, options)
    assert res.skip_reason == why and not res.modified and res.clusters == []
    assert res.graph_def == gd


def test_34_gating_by_graph_attrs_and_missing_optimizer():
    gd = build_geop_graph()
    gd.node[0].attr["_NoNeedOptimize"].b = True
    res = original(gd)
    assert res.skip_reason == "no_need_optimize" and res.graph_def == gd
    proto = tf1.ConfigProto()
    res = rewrite(build_geop_graph(), proto, backend="original_like")
    assert res.skip_reason == "no_npu_optimizer" and not res.modified
