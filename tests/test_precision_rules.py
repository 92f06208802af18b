"""The precision pass, rule by rule: which ops end up in which dtype on small graphs, checked
against hand-written expectations (docs/precision.md)."""

import json

import numpy as np
import pytest
import tensorflow as tf

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.errors import NpuConfigError, PrecisionEmulationError
from npu_adapter.passes import DEFAULT_PIPELINE
from npu_adapter.testing.equivalence import run_graph_def
from npu_bridge.estimator.npu import npu_scope

tf1 = tf.compat.v1
F32, F16, BF16 = "float32", "float16", "bfloat16"


def _graph(keep_exp=False):
    """x → mm=MatMul → add=AddV2(+b) → ex=Exp → sm=Sum; l2=L2Loss(mm) → mean=Mean."""
    rng = np.random.RandomState(0)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [4, 8], name="x")
        w = tf.constant(rng.randn(8, 16).astype(np.float32), name="w")
        b = tf.constant(rng.randn(16).astype(np.float32), name="b")
        mm = tf.matmul(x, w, name="mm")
        add = tf.add(mm, b, name="add")
        if keep_exp:
            with npu_scope.keep_dtype_scope():
                ex = tf.exp(add, name="ex")
        else:
            ex = tf.exp(add, name="ex")
        tf.reduce_sum(ex, axis=1, name="sm")
        l2 = tf.nn.l2_loss(mm, name="l2")
        tf.reduce_mean(l2, name="mean")
    return g.as_graph_def()


FETCHES = ["sm:0", "mean:0"]
OPS = ("mm", "add", "ex", "sm", "l2", "mean")


def _decisions(options, graph_def=None, fetches=FETCHES):
    options = dict(options, npu_adapter_emulate_precision="on")
    result = npu_adapter.rewrite(graph_def or _graph(), options, fetches=fetches)
    return result, result.pass_info["precision"]["decisions"]


def _dtypes(decisions, names=OPS):
    return {n: decisions[n]["dtype"] for n in names}


def _reasons(decisions, names=OPS):
    return {n: decisions[n]["reason"] for n in names}


@pytest.mark.parametrize("options, dtypes, reasons", [
    ({"precision_mode": "force_fp16"},
     {"mm": F16, "add": F16, "ex": F16, "sm": F16, "l2": F16, "mean": F16},
     dict.fromkeys(OPS, "mode_force_low")),
    ({"precision_mode_v2": "fp16"},
     {"mm": F16, "add": F16, "ex": F16, "sm": F16, "l2": F16, "mean": F16},
     dict.fromkeys(OPS, "mode_force_low")),
    ({"precision_mode": "allow_fp32_to_fp16"},
     {"mm": F16, "add": F32, "ex": F32, "sm": F32, "l2": F32, "mean": F32},
     {"mm": "cube_low", "add": "vector_keeps_fp32", "ex": "vector_keeps_fp32",
          "sm": "vector_keeps_fp32", "l2": "vector_keeps_fp32", "mean": "vector_keeps_fp32"}),
    ({"precision_mode": "allow_fp32_to_bf16"},
     {"mm": BF16, "add": F32, "ex": F32, "sm": F32, "l2": F32, "mean": F32}, None),
    ({"precision_mode": "must_keep_origin_dtype"},
     dict.fromkeys(OPS, F32), dict.fromkeys(OPS, "mode_origin")),
    ({"precision_mode_v2": "origin"}, dict.fromkeys(OPS, F32), dict.fromkeys(OPS, "mode_origin")),
    ({"precision_mode": "force_fp32"}, dict.fromkeys(OPS, F32),
     {"mm": "cube_fp16in_fp32out", "add": "force_fp32", "ex": "force_fp32", "sm": "force_fp32",
          "l2": "force_fp32", "mean": "force_fp32"}),
    ({"precision_mode_v2": "cube_fp16in_fp32out"}, dict.fromkeys(OPS, F32), None),
    # Mixed: MatMul white (TF allow list), AddV2/Exp white (CANN flag true), Sum gray following
    # Exp, L2Loss black (CANN flag false), Mean gray after a float32 op.
    ({"precision_mode": "allow_mix_precision"},
     {"mm": F16, "add": F16, "ex": F16, "sm": F16, "l2": F32, "mean": F32},
     {"mm": "white_list", "add": "white_list", "ex": "white_list", "sm": "gray_follows_low",
          "l2": "black_list", "mean": "gray_keeps"}),
    ({"precision_mode": "allow_mix_precision_fp16"},
     {"mm": F16, "add": F16, "ex": F16, "sm": F16, "l2": F32, "mean": F32}, None),
    ({"precision_mode_v2": "mixed_float16"},
     {"mm": F16, "add": F16, "ex": F16, "sm": F16, "l2": F32, "mean": F32}, None),
    ({"precision_mode": "allow_mix_precision_bf16"},
     {"mm": BF16, "add": BF16, "ex": BF16, "sm": BF16, "l2": F32, "mean": F32}, None),
    ({"precision_mode_v2": "mixed_bfloat16"},
     {"mm": BF16, "add": BF16, "ex": BF16, "sm": BF16, "l2": F32, "mean": F32}, None),
    # Defaults: training → allow_fp32_to_fp16; online inference → force_fp16; 910B → origin.
    ({}, {"mm": F16, "add": F32, "ex": F32, "sm": F32, "l2": F32, "mean": F32}, None),
    ({"graph_run_mode": 0}, dict.fromkeys(OPS, F16), None),
    ({"soc_config": "Ascend910B1"}, dict.fromkeys(OPS, F32), dict.fromkeys(OPS, "mode_origin")),
])
def test_each_mode_gives_the_expected_dtypes(options, dtypes, reasons):
    _, decisions = _decisions(options)
    assert _dtypes(decisions) == dtypes
    if reasons is not None:
        assert _reasons(decisions) == reasons
    assert decisions["w"]["reason"] == "not_reducible"  # constants convert where consumed


def test_the_function_body_computes_in_the_decided_dtypes():
    result, _ = _decisions({"precision_mode": "allow_mix_precision"})
    fdef = {f.signature.name: f for f in result.graph_def.library.function}["GeOp1_0"]
    body = {n.name: n for n in fdef.node_def}
    assert body["mm"].attr["T"].type == tf.float16.as_datatype_enum
    assert body["l2"].attr["T"].type == tf.float32.as_datatype_enum
    casts = [n for n in fdef.node_def if n.op == "Cast"]
    # x and w into float16; mm back to float32 for L2Loss; sm back to float32 for the output
    assert sorted((tf.as_dtype(c.attr["SrcT"].type).name, tf.as_dtype(c.attr["DstT"].type).name)
                  for c in casts) == [(F16, F32), (F16, F32), (F32, F16), (F32, F16), (F32, F16)]
    # the signature is unchanged: the host graph sees float32 tensors
    assert all(a.type == tf.float32.as_datatype_enum for a in fdef.signature.output_arg)


def test_off_by_default_and_bit_exact():
    plain = npu_adapter.rewrite(_graph(), {"precision_mode": "allow_mix_precision"},
                                fetches=FETCHES)
    assert plain.pass_info["precision"] == {"emulation": "off"}
    assert not any(n.op == "Cast" for f in plain.graph_def.library.function for n in f.node_def)


def test_environment_variable_switches_it_on(monkeypatch):
    monkeypatch.setenv("NPU_ADAPTER_EMULATE_PRECISION", "on")
    config = NpuConfig.from_dict({"precision_mode": "force_fp16"})
    assert config.npu_adapter_emulate_precision == "on"
    result = npu_adapter.rewrite(_graph(), config, fetches=FETCHES)
    assert result.pass_info["precision"]["decisions"]["mm"]["dtype"] == F16
    # an explicit option wins over the environment
    off = NpuConfig.from_dict({"npu_adapter_emulate_precision": "off"})
    assert off.npu_adapter_emulate_precision == "off"
    monkeypatch.setenv("NPU_ADAPTER_EMULATE_PRECISION", "yes")
    with pytest.raises(NpuConfigError, match="NPU_ADAPTER_EMULATE_PRECISION"):
        NpuConfig.from_dict({})


def test_option_value_is_checked():
    with pytest.raises(NpuConfigError, match="npu_adapter_emulate_precision"):
        NpuConfig.from_dict({"npu_adapter_emulate_precision": "true"})


def test_hif8_modes_cannot_be_emulated():
    with pytest.raises(PrecisionEmulationError, match="HiFloat8"):
        _decisions({"precision_mode_v2": "mixed_hif8"})


def test_keep_dtype_scope_keeps_float32_and_the_gray_op_follows():
    _, decisions = _decisions({"precision_mode": "allow_mix_precision"}, _graph(keep_exp=True))
    assert decisions["ex"]["dtype"] == F32 and decisions["ex"]["reason"] == "keep_dtype"
    assert decisions["sm"]["dtype"] == F32 and decisions["sm"]["reason"] == "gray_keeps"
    _, forced = _decisions({"precision_mode": "force_fp16"}, _graph(keep_exp=True))
    assert forced["ex"]["dtype"] == F32 and forced["mm"]["dtype"] == F16


def test_keep_tensors_dtypes_is_honoured():
    from npu_bridge.estimator.npu import util

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(_graph(), name="")
        util.keep_tensors_dtypes(g, ["mm:0"])
    _, decisions = _decisions({"precision_mode": "force_fp16"}, g.as_graph_def())
    assert decisions["mm"]["reason"] == "keep_dtype" and decisions["mm"]["dtype"] == F32
    assert decisions["add"]["dtype"] == F16


# ---- modify_mixlist: the documented forms ----------------------------------------------------

def _mixlist(tmp_path, content):
    path = tmp_path / "ops_info.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def _mixed(tmp_path, content):
    return _decisions({"precision_mode": "allow_mix_precision",
                       "modify_mixlist": _mixlist(tmp_path, content)})


def test_mixlist_black_list_to_add_moves_a_white_op_to_black(tmp_path):
    result, decisions = _mixed(tmp_path, {"black-list": {"to-add": ["Exp"]}})
    assert decisions["ex"]["dtype"] == F32 and decisions["ex"]["reason"] == "black_list"
    assert decisions["ex"]["list_source"] == "modify_mixlist"
    assert decisions["sm"]["dtype"] == F32 and decisions["sm"]["reason"] == "gray_keeps"
    changes = result.pass_info["precision"]["mixlist_changes"]
    assert {k: (v["before"], v["after"]) for k, v in changes.items()} == {
        "ex": (F16, F32), "sm": (F16, F32)}


def test_mixlist_black_add_with_white_remove_is_black(tmp_path):
    _, decisions = _mixed(tmp_path, {"black-list": {"to-add": ["Exp"]},
                                     "white-list": {"to-remove": ["Exp"]}})
    assert decisions["ex"]["reason"] == "black_list"


def test_mixlist_white_remove_alone_leaves_the_op_gray(tmp_path):
    # MatMul out of the white list: gray, and nothing before it is in float16 → float32; then
    # AddV2 (white) is float16 again.
    _, decisions = _mixed(tmp_path, {"white-list": {"to-remove": ["MatMulV2"]}})
    assert decisions["mm"]["reason"] == "gray_keeps" and decisions["mm"]["dtype"] == F32
    assert decisions["add"]["dtype"] == F16


def test_mixlist_to_add_white_and_gray_and_tf_names(tmp_path):
    # L2Loss (black) to white; Sum (gray) to black, named by its TensorFlow type
    _, decisions = _mixed(tmp_path, {"white-list": {"to-add": ["L2Loss"]},
                                     "black-list": {"to-add": ["Sum"]}})
    assert decisions["l2"]["dtype"] == F16 and decisions["l2"]["reason"] == "white_list"
    assert decisions["mean"]["dtype"] == F16 and decisions["mean"]["reason"] == \
        "gray_follows_low"
    assert decisions["sm"]["dtype"] == F32 and decisions["sm"]["reason"] == "black_list"
    _, gray = _mixed(tmp_path, {"gray-list": {"to-add": ["AddV2"]}})
    assert gray["add"]["reason"] == "gray_follows_low"


def test_mixlist_comments_as_in_the_product_samples(tmp_path):
    text = ('{\n  "black-list": {\n    "to-add": [ // white or gray ops to black\n'
            '      "Exp"\n    ]\n  }\n}\n')
    _, decisions = _mixed(tmp_path, text)
    assert decisions["ex"]["reason"] == "black_list"


# ---- customize_dtypes ---------------------------------------------------------------------

def _customized(tmp_path, text, mode="force_fp16"):
    path = tmp_path / "customize_dtypes.cfg"
    path.write_text(text)
    return _decisions({"precision_mode": mode, "customize_dtypes": str(path)})


def test_customize_dtypes_by_name_and_by_type(tmp_path):
    result, decisions = _customized(
        tmp_path, "# keep these in float32\nmm::InputDtype:float32,float32,OutputDtype:float32\n"
                  "OpType::Exp:InputDtype:float32,OutputDtype:float32\n"
                  "OpType::ReduceSum:InputDtype:float32,int32,OutputDtype:float32\n")
    assert _dtypes(decisions) == {"mm": F32, "add": F16, "ex": F32, "sm": F32, "l2": F16,
                                  "mean": F16}
    assert decisions["mm"]["reason"] == "customize_dtypes"
    assert "customize_dtypes.cfg:2" in decisions["mm"]["detail"]
    assert "customize_dtypes.cfg:4" in decisions["sm"]["detail"]


def test_customize_dtypes_name_wins_over_type(tmp_path):
    _, decisions = _customized(tmp_path, "OpType::Exp:OutputDtype:float32\n"
                                         "ex::OutputDtype:float16\n")
    assert decisions["ex"]["dtype"] == F16 and "cfg:2" in decisions["ex"]["detail"]


def test_customize_dtypes_has_no_effect_with_must_keep_origin_dtype(tmp_path):
    result, decisions = _customized(tmp_path, "mm::OutputDtype:float16\n",
                                    mode="must_keep_origin_dtype")
    assert decisions["mm"]["dtype"] == F32
    assert "no effect" in result.pass_info["precision"]["customize_ignored"]


def test_customize_fp16_inputs_fp32_output_matches_rounded_inputs(tmp_path):
    _, decisions = _customized(tmp_path, "mm::InputDtype:float16,float16,OutputDtype:float32\n",
                               mode="must_keep_origin_dtype")
    # (under must_keep_origin_dtype customize_dtypes is ignored; use force_fp32's relative)
    result, decisions = _customized(
        tmp_path, "mm::InputDtype:float16,float16,OutputDtype:float32\n",
        mode="allow_fp32_to_fp16")
    assert decisions["mm"]["dtype"] == F32
    x = np.random.RandomState(3).randn(4, 8).astype(np.float32)
    got = run_graph_def(result.graph_def, [result.tensor_map["sm:0"]], {"x": x})[0]
    w = tf.make_ndarray(next(n for n in _graph().node if n.name == "w").attr["value"].tensor)
    b = tf.make_ndarray(next(n for n in _graph().node if n.name == "b").attr["value"].tensor)
    rounded = (tf.matmul(x.astype(np.float16).astype(np.float32),
                         w.astype(np.float16).astype(np.float32)) + b)
    expected = tf.reduce_sum(tf.exp(rounded), axis=1).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6)


# ---- what is never touched -----------------------------------------------------------------

def test_resource_integer_and_string_tensors_are_never_cast():
    from npu_adapter.precision.engine import emulate_graph
    from npu_adapter.precision.policy import policy_from_config

    g = tf.Graph()
    with g.as_default():
        v = tf1.get_variable("v", initializer=np.ones([4, 4], np.float32), use_resource=True)
        x = tf1.placeholder(tf.float32, [4, 4], name="x")
        mm = tf.matmul(x, v.read_value(), name="mm")
        idx = tf.argmax(mm, axis=1, name="idx")
        tf.strings.as_string(idx, name="text")
        v.assign(mm * 0.5, name="assign")
    gd = g.as_graph_def()
    policy = policy_from_config(NpuConfig.from_dict({"precision_mode": "force_fp16"}))
    names = {n.name for n in gd.node}
    out, result = emulate_graph(gd, policy, names)
    casts = [n for n in out.node if n.op == "Cast"]
    producers = {n.name: n for n in out.node}
    for cast in casts:
        assert cast.attr["SrcT"].type in (1, 14, 19) and cast.attr["DstT"].type in (1, 14, 19)
        assert producers[cast.input[0].split(":")[0]].op not in ("VarHandleOp",)
    assert result.decisions["mm"].dtype == tf.float16.as_datatype_enum
    # ArgMax reads float16 values; its int64 output and the string op are not float ops
    assert result.decisions["idx"].dtype == tf.float16.as_datatype_enum
    assert "text" not in result.decisions
    assert next(n for n in out.node if n.name == "idx").attr["output_type"].type == \
        tf.int64.as_datatype_enum
    # the variable update keeps the variable's dtype: its value arrives through a cast back
    update = next(n for n in out.node if n.op == "AssignVariableOp" and n.name != "v/Assign")
    assert update.attr["dtype"].type == tf.float32.as_datatype_enum
    assert producers[update.input[1].split(":")[0]].op == "Cast"
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(out, name="")
    from npu_adapter.session import plain_session_class

    with plain_session_class()(graph=graph) as sess:
        sess.run("v/Assign")
        xv = np.full([4, 4], 1.0001, np.float32)
        sess.run("assign", {"x:0": xv})
        value, label = sess.run(["v/Read/ReadVariableOp:0", "text:0"], {"x:0": xv})
    assert value.dtype == np.float32
    # 4 * 1.0001 rounds to 4.0 in float16; halved: 2.0 exactly
    np.testing.assert_array_equal(value, np.full([4, 4], 2.0, np.float32))
    assert label.dtype == object


def test_gear_copies_are_emulated_too():
    rng = np.random.RandomState(0)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, 8], name="data")
        w = tf.constant(rng.randn(8, 4).astype(np.float32))
        tf.identity(tf.nn.relu(tf.matmul(x, w, name="mm")), name="out")
    options = {"input_shape": "data:-1,8", "dynamic_dims": "2;4", "dynamic_node_type": 1,
               "precision_mode": "force_fp16", "npu_adapter_emulate_precision": "on"}
    # Before the backend's lowering: the CPU reference then keeps one body for every gear.
    copies = npu_adapter.rewrite(g.as_graph_def(), options, fetches=["out:0"],
                                 pipeline=DEFAULT_PIPELINE.replace(",lower", ""))
    functions = {f.signature.name: f for f in copies.graph_def.library.function}
    gears = sorted(n for n in functions if "_gear_" in n)
    assert gears == ["GeOp1_0_gear_0", "GeOp1_0_gear_1"]
    for name in gears:
        mm = next(n for n in functions[name].node_def if n.name == "mm")
        assert mm.attr["T"].type == tf.float16.as_datatype_enum
    result = npu_adapter.rewrite(g.as_graph_def(), options, fetches=["out:0"])
    xv = rng.randn(4, 8).astype(np.float32)
    got = run_graph_def(result.graph_def, [result.tensor_map["out:0"]], {"data": xv})[0]
    w16 = tf.make_ndarray(next(n for n in g.as_graph_def().node if n.op == "Const")
                          .attr["value"].tensor).astype(np.float16)
    expected = tf.nn.relu(tf.matmul(xv.astype(np.float16), w16)).numpy().astype(np.float32)
    np.testing.assert_array_equal(got, expected)


def test_mix_mode_clusters_are_emulated():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [4, 8], name="x")
        w = tf.constant(np.ones([8, 8], np.float32))
        a = tf.matmul(x, w, name="mm1")
        from npu_bridge.estimator.npu.npu_scope import without_npu_compile_scope
        with without_npu_compile_scope():
            h = tf.identity(tf.nn.relu(a), name="host_relu")
        tf.identity(tf.matmul(h, w, name="mm2"), name="out")
    result, decisions = _decisions({"mix_compile_mode": True, "precision_mode": "force_fp16"},
                                   g.as_graph_def(), ["out:0"])
    assert len(result.clusters) == 2
    assert decisions["mm1"]["dtype"] == F16 and decisions["mm2"]["dtype"] == F16
    assert {decisions["mm1"]["cluster"], decisions["mm2"]["cluster"]} == {
        c.name for c in result.clusters}
    assert "host_relu" not in decisions
