"""A generated catalogue of bad inputs: every one must be a named error, never a crash.

The cases cover option values (free text that is not UTF-8, integers beyond int64, digits of
other scripts, malformed structured strings, files that are missing, directories or malformed),
graphs and run signatures, the command line, sessions, dump paths and the ``npu_bridge`` helpers.
Each case says which error it expects and what the message must name (the option, node, file or
argument); a case passes only when exactly that error is raised — anything else (an
``AttributeError``, ``OverflowError``, ``RecursionError``, "internal error", a value accepted
that should not be) fails it. Where a case could leave something behind (a half-written file,
a tagged op, a dump directory), it also checks that nothing was.
"""

import collections
import os
import re
import warnings

import numpy as np
import pytest
import tensorflow as tf
from graph_cases import mix_cnn_graph
from tensorflow.core.framework import attr_value_pb2, graph_pb2, types_pb2

import npu_adapter
from npu_adapter import cli
from npu_adapter.config import OPTION_SPECS, OPTIONS_BY_NAME, NpuConfig, reset_warn_once
from npu_adapter.config.files import PATH_OPTIONS
from npu_adapter.errors import (
    GraphError,
    NpuConfigError,
    RewriteError,
    UnknownOptionError,
)

Case = collections.namedtuple("Case", ["id", "action", "error", "names", "after"])
"""``action(env)`` must raise ``error`` (or, for ``error == "cli"``, exit 2 with one line) whose
message contains every string of ``names``; ``after(env)``, when given, checks what is left."""

CASES = []


def case(case_id, action, error, names=(), after=None):
    CASES.append(Case(case_id, action, error, tuple(names), after))


class Env:
    """What the cases share: a scratch directory, the small CNN and its .pb file."""

    def __init__(self, root):
        self.root = str(root)
        self.graph = mix_cnn_graph()
        self.graph_def = self.graph.as_graph_def()
        self.model = os.path.join(self.root, "cnn.pb")
        with open(self.model, "wb") as f:
            f.write(self.graph_def.SerializeToString())

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def write(self, name, text):
        path = self.path(name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path


def _config(options):
    return lambda env: NpuConfig.from_dict(options)


# ---- 1. free-text options: strings that are not UTF-8 ------------------------------------

STRING_OPTIONS = [s for s in OPTION_SPECS if s.kind == "s"]
INT_OPTIONS = [s for s in OPTION_SPECS if s.kind == "i"]

for spec in STRING_OPTIONS:
    # A str decoded from non-UTF-8 bytes (argv, file names) holds lone surrogates.
    case(f"surrogate-{spec.name}", _config({spec.name: "ab\udcffcd"}), NpuConfigError,
         [repr(spec.name), "UTF-8"])
    case(f"bytes-{spec.name}",
         lambda env, n=spec.name: NpuConfig.from_parameter_map(
             {n: attr_value_pb2.AttrValue(s=b"\xff\xfe")}), NpuConfigError,
         [repr(spec.name), "UTF-8"])
case("surrogate-unknown-key-value", _config({"my_key": "\udc80"}), NpuConfigError,
     ["my_key", "UTF-8"])
case("surrogate-key", _config({"mix\udcffmode": True}), NpuConfigError, ["UTF-8"])

# ---- 2. integers beyond int64 --------------------------------------------------------------

for spec in INT_OPTIONS:
    for label, value in (("above", 2**63), ("below", -(2**63) - 1)):
        case(f"int64-{label}-{spec.name}", _config({spec.name: value}), NpuConfigError,
             [repr(spec.name), "int64"])
case("int64-unknown-key", _config({"my_int": 2**64}), NpuConfigError, ["my_int", "int64"])

# ---- 3. structured strings ------------------------------------------------------------------

TRIO = {"input_shape": "images:-1,8,8,3", "dynamic_node_type": 1}
STRUCTURED = {
    "dynamic_dims": ["١;٢", "1;２", "1,2", "", "1;1", "0;1", f"{2**63};1", "1;;2", "a;b",
                     ";".join(str(i) for i in range(1, 103))],
    "input_shape": ["images:-1,٨", "images:", ":1", "images:-2,1", f"images:{2**64}",
                    "a:1;a:-1", "b:-1;a:-1", "images:1,2"],
    "dump_step": ["١", "1|２", "5-3", f"{2**63}", "1-", "x", "|".join("1" * 101)],
    "dynamic_inputs_shape_range": ["data:[1~٥]", "data:[1~2", "foo:[1]", "data:[5~1]",
                                   f"data:[1~{2**63}]", "data:[1],", "data:[1];data:[2]",
                                   "data:[[1]]"],
    "in_out_pair": ["[", "[[['a']]]", "[[['a'], ['b']]", "[[['a b'], ['c']]]", "x",
                    "[[['a'], []]]"],
    "local_device_list": ["١", "0,,1", "0,x", f"{2**63}"],
    "experimental_accelerate_train_mode": ["fast", "slow|step", "fast|step|٠.٥",
                                           "fast|step|2", "fast|loss|0.5|1"],
    "npu_adapter_gear_pad_values": ["x", "images:١", "images:inf", f"images:{2**70}"],
    "npu_adapter_gear_unpad": ["probs:0:١", "probs:0:-1", "probs:0:0,0", "probs:0:"],
    "profiling_options": ["{", "[1]", '{"output": [1]}', '{"output": "/tmp/a\\u0000b"}',
                          "not json", '{"a": null}'],
    "optypelist_for_implmode": ["Pooling,,Relu", "Pool ing", "1Relu", ","],
}
for name, values in STRUCTURED.items():
    for k, value in enumerate(values):
        options = {name: value}
        if name == "dynamic_dims" or name == "input_shape":
            options = {**TRIO, "dynamic_dims": "1;2", name: value}
        if name == "optypelist_for_implmode":
            options["op_select_implmode"] = "high_precision"
        if name == "profiling_options":  # checked while profiling is on
            options["profiling_mode"] = True
        if name == "in_out_pair":
            options["mix_compile_mode"] = True
        case(f"structured-{name}-{k}", _config(options), NpuConfigError, [name])

# ---- 4. files named by options ---------------------------------------------------------------


def _file_case(option, content, kind="file", extra=None, name=None):
    def action(env):
        if kind == "missing":
            path = env.path("no", "such.json")
        elif kind == "dir":
            path = env.root
        elif kind == "nul":
            path = env.path("a\0b.json")
        else:
            path = env.write(name, content)
        return NpuConfig.from_dict({option: path, **(extra or {})})

    return action


MIX = {"precision_mode": "allow_mix_precision"}
MIXLIST = [("missing", None), ("dir", None), ("nul", None), ("file", "{"),
           ("file", '["black-list"]'), ("file", '{"blacklist": {}}'),
           ("file", '{"black-list": {"add": []}}'), ("file", '{"black-list": {"to-add": "Cast"}}'),
           ("file", '{"black-list": {"to-add": ["Ca st"]}}'),
           ("file", '{"white-list": {"to-remove": [1]}}')]
for k, (kind, content) in enumerate(MIXLIST):
    file_name = f"mixlist-{k}.json"
    names = ["'modify_mixlist'"] + ([file_name] if kind == "file" else [])
    case(f"file-modify_mixlist-{k}", _file_case("modify_mixlist", content, kind, MIX, file_name),
         NpuConfigError, names)
DTYPES = [("missing", None), ("dir", None), ("nul", None), ("file", "Relu"),
          ("file", "OpType::Relu"), ("file", "OpType::Re lu:InputDtype:float16"),
          ("file", "a::InputDtype:,OutputDtype:float16"), ("file", "a::Dtype:float16"),
          ("file", "a::InputDtype:float16 OutputDtype:float16"),
          ("file", "# ok\nRelu::InputDtype:float16\nbad line\n"),
          ("file", "a::InputDtype:Float-16")]
for k, (kind, content) in enumerate(DTYPES):
    file_name = f"dtypes-{k}.cfg"
    names = ["'customize_dtypes'"] + ([file_name] if kind == "file" else [])
    case(f"file-customize_dtypes-{k}", _file_case("customize_dtypes", content, kind, None,
                                                  file_name), NpuConfigError, names)
for name in PATH_OPTIONS:
    extra = {"enable_dump": True} if name == "dump_path" else {}
    case(f"nul-path-{name}", _config({name: "/tmp/a\0b", **extra}), NpuConfigError,
         [repr(name), "NUL"])

# ---- 5. graphs and run signatures -----------------------------------------------------------


def _rewrite(options=None, **kwargs):
    def action(env):
        graph_def = kwargs.pop("graph_def", None) or env.graph_def
        return npu_adapter.rewrite(graph_def, options or {}, **kwargs)

    return action


for k, fetches in enumerate([[None], [5], [3.5], [""], ["a\0b"], [["probs:0"]], 7, {"a": 1}]):
    case(f"graph-fetches-{k}", _rewrite(fetches=fetches), GraphError, ["fetches"])
case("graph-feeds-none", _rewrite(fetches=["probs:0"], feeds=[None]), GraphError, ["feeds"])
case("graph-targets-int", _rewrite(targets=[1]), GraphError, ["targets"])
case("graph-fetch-missing-node", _rewrite(fetches=["nope:0"]), GraphError, ["'nope'"])
case("graph-fetch-bad-port", _rewrite(fetches=["probs:7"]), GraphError, ["'probs'", "0..0"])
case("graph-feed-missing-node", _rewrite(fetches=["probs:0"], feeds=["nope:0"]), GraphError,
     ["'nope'"])
case("graph-target-missing", _rewrite(targets=["nope"]), GraphError, ["'nope'"])
case("graph-fetch-control", _rewrite(fetches=["^probs"]), GraphError, ["'^probs'", "target"])
case("graph-feeds-without-fetches", _rewrite(feeds=["images:0"]), GraphError, ["feeds"])
case("graph-not-a-graphdef", lambda env: npu_adapter.rewrite(b"x", {}), TypeError, ["GraphDef"])
case("graph-config-not-options", lambda env: npu_adapter.rewrite(env.graph_def, 5), TypeError,
     ["config"])

GEAR_MISMATCH = [
    ("rank", "images:-1,8,8", "1;2"),
    ("static-dim", "images:-1,8,8,4", "1;2"),
    ("gear-on-static-dim", "images:-1,-1,8,3", "1,8;2,9"),
    ("scalar", "images:0", "1;2"),
]
for label, shape, dims in GEAR_MISMATCH:
    case(f"graph-input_shape-{label}",
         _rewrite({"input_shape": shape, "dynamic_dims": dims, "dynamic_node_type": 1},
                  fetches=["probs:0"]),
         RewriteError if label != "scalar" else NpuConfigError,
         ["images"])
case("graph-input_shape-not-a-placeholder",
     _rewrite({"input_shape": "pool:-1,2", "dynamic_dims": "1;2", "dynamic_node_type": 1},
              fetches=["probs:0"]), RewriteError, ["'pool'"])


def _cycle_graph():
    graph_def = graph_pb2.GraphDef()
    for name, source in (("a", "b"), ("b", "a")):
        node = graph_def.node.add()
        node.name, node.op = name, "Neg"
        node.input.append(source)
        node.attr["T"].type = types_pb2.DT_FLOAT
    return graph_def


case("graph-cycle", lambda env: npu_adapter.rewrite(_cycle_graph(), {}), RewriteError, ["cycle"])


def _nested_functions(depth):
    graph_def = graph_pb2.GraphDef()
    x = graph_def.node.add()
    x.name, x.op = "x", "Placeholder"
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    for i in range(depth):
        fdef = graph_def.library.function.add()
        fdef.signature.name = f"f{i}"
        arg = fdef.signature.input_arg.add()
        arg.name, arg.type = "a", types_pb2.DT_FLOAT
        out = fdef.signature.output_arg.add()
        out.name, out.type = "o", types_pb2.DT_FLOAT
        body = fdef.node_def.add()
        body.name = "n"
        body.input.append("a")
        if i + 1 < depth:
            body.op = f"f{i + 1}"
            fdef.ret["o"] = "n:o:0"
        else:
            body.op = "Neg"
            body.attr["T"].type = types_pb2.DT_FLOAT
            fdef.ret["o"] = "n:y:0"
    call = graph_def.node.add()
    call.name, call.op = "call", "f0"
    call.input.append("x")
    return graph_def


def _deep_functions_rewrite(env):
    result = npu_adapter.rewrite(_nested_functions(400), {}, fetches=["call:0"])
    assert [c.name for c in result.clusters] == ["GeOp1_0"]
    # Not an error: the deep call chain is decided without recursion. Signal success.
    raise _Fine("400 nested function calls rewritten")


class _Fine(Exception):
    """Raised by a case whose input is valid and must simply not crash."""


case("graph-functions-400-deep", _deep_functions_rewrite, _Fine, ["400"])

# ---- 6. dump paths ---------------------------------------------------------------------------


def _dump_case(value, via="option"):
    def action(env):
        path = value(env) if callable(value) else value
        if via == "option":
            return npu_adapter.rewrite(env.graph_def, {"npu_adapter_dump_dir": path},
                                       fetches=["probs:0"])
        return npu_adapter.rewrite(env.graph_def, {}, fetches=["probs:0"], dump_dir=path)

    return action


for via, option in (("option", "npu_adapter_dump_dir"), ("argument", "dump_dir")):
    case(f"dump-{via}-nul", _dump_case("/tmp/x\0y", via), NpuConfigError, [option, "NUL"])
    case(f"dump-{via}-is-a-file", _dump_case(lambda env: env.model, via), NpuConfigError,
         [option, "cnn.pb"])
    case(f"dump-{via}-under-a-file", _dump_case(lambda env: os.path.join(env.model, "d"), via),
         NpuConfigError, [option])
    case(f"dump-{via}-proc", _dump_case("/proc/npu_adapter_dump", via), NpuConfigError,
         [option, "/proc/npu_adapter_dump"])
case("dump-option-surrogate", _dump_case("/tmp/\udcff", "option"), NpuConfigError,
     ["npu_adapter_dump_dir", "UTF-8"])

# ---- 7. the command line ---------------------------------------------------------------------


def _cli(*argv):
    def action(env):
        args = [a(env) if callable(a) else a for a in argv]
        return cli.main([str(a) for a in args])

    return action


def _model(env):
    return env.model


def _no_tmp_left(env):
    leftovers = [n for n in os.listdir(env.root) if n.endswith(".tmp") or any(
        part in n for part in (".partial-", ".tmp-", ".atc-", ".staging-"))]
    assert leftovers == [], leftovers


CLI = [
    ("out-missing-folder", ("convert", _model, "--out", lambda e: e.path("no", "x.pb")),
     ["--out", "no folder"]),
    ("out-is-a-directory", ("convert", _model, "--out", lambda e: e.root + "/"),
     ["--out"]),
    ("out-directory-named-pb", ("convert", _model, "--out", lambda e: e.path("d.pb")),
     ["--out", "directory"]),
    ("out-proc", ("convert", _model, "--out", "/proc/npu_adapter_x.pb"), ["--out"]),
    ("out-wrong-suffix", ("convert", _model, "--out", lambda e: e.path("x.txt")), ["--out"]),
    ("option-no-equals", ("convert", _model, "--out", lambda e: e.path("o.pb"), "--option",
                          "precision_mode"), ["expected KEY=VALUE", "precision_mode"]),
    ("option-empty-key", ("convert", _model, "--out", lambda e: e.path("o.pb"), "--option",
                          "=1"), ["expected KEY=VALUE"]),
    ("option-unknown-key", ("convert", _model, "--out", lambda e: e.path("o.pb"), "--option",
                            "no_such_option=1"), ["unknown option 'no_such_option'"]),
    ("option-typo", ("options", "--check", "mix_compile_mod=1"),
     ["unknown option", "mix_compile_mode"]),
    ("option-repeated", ("options", "--check", "job=a", "job=b"), ["'job'"]),
    ("option-bad-bool", ("options", "--check", "mix_compile_mode=maybe"), ["mix_compile_mode"]),
    ("option-arabic-int", ("options", "--check", "iterations_per_loop=٣"),
     ["iterations_per_loop", "ASCII"]),
    ("option-underscore-int", ("options", "--check", "iterations_per_loop=1_0"),
     ["iterations_per_loop"]),
    ("option-huge-int", ("options", "--check", f"iterations_per_loop={2**64}"),
     ["iterations_per_loop", "int64"]),
    ("option-surrogate", ("options", "--check", "soc_config=\udcff"), ["soc_config", "UTF-8"]),
    ("dims-comma-hint", ("options", "--check", "input_shape=x:-1", "dynamic_dims=1,2",
                         "dynamic_node_type=1"), ["dynamic_dims", "separated by ';'"]),
    ("long-value-cut", ("options", "--check", "dump_step=" + "|".join(["1"] * 50000)),
     ["dump_step", "characters"]),
    ("model-missing", ("convert", lambda e: e.path("none.pb"), "--out", lambda e: e.path("o.pb")),
     ["none.pb"]),
    ("model-garbage", ("convert", lambda e: e.write("bad.pb", "\x00garbage"), "--out",
                       lambda e: e.path("o.pb")), ["bad.pb"]),
    ("config-json-malformed", ("convert", _model, "--out", lambda e: e.path("o.pb"), "--config",
                               lambda e: e.write("c.json", "{")), ["--config", "line 1"]),
    ("config-json-list", ("convert", _model, "--out", lambda e: e.path("o.pb"), "--config",
                          lambda e: e.write("l.json", "[]")), ["--config", "list"]),
    ("fetch-missing", ("convert", _model, "--out", lambda e: e.path("o.pb"), "--fetch",
                       "nope:0"), ["'nope'"]),
    ("inspect-out-is-file", ("inspect", _model, "--out", _model, "-q"), ["--out", "file"]),
    ("inspect-gear-mismatch", ("inspect", _model, "--out", lambda e: e.path("insp"), "-q",
                               "--option", "input_shape=images:-1,8,8,4", "--option",
                               "dynamic_dims=1;2", "--option", "dynamic_node_type=1"),
     ["images", "partial output kept in"]),
    ("inspect-unknown-backend", ("inspect", _model, "--out", lambda e: e.path("insp2"), "-q",
                                 "--backend", "nope"), ["nope"]),
]
for label, argv, names in CLI:
    case(f"cli-{label}", _cli(*argv), "cli", names, after=_no_tmp_left)


def _inspect_failed_then_ok(env):
    out = env.path("insp3")
    bad = ["inspect", env.model, "--out", out, "-q", "--option", "input_shape=images:-1,8,8",
           "--option", "dynamic_dims=1;2", "--option", "dynamic_node_type=1"]
    code = cli.main(bad)
    assert code == 2 and not os.path.exists(out)  # nothing that looks like a finished run
    assert os.path.isfile(os.path.join(out + ".failed", "ERROR.txt"))
    assert cli.main(["inspect", env.model, "--out", out, "-q"]) == 0
    assert os.path.isfile(os.path.join(out, "report.html"))
    raise _Fine("a failed inspect leaves --out alone; the next run completes it")


case("cli-inspect-failed-run-leaves-no-tree", _inspect_failed_then_ok, _Fine, ["--out"])

# ---- 8. sessions -----------------------------------------------------------------------------


def _session(options):
    def action(env):
        from npu_adapter.session import NpuSession

        config = tf.compat.v1.ConfigProto()
        custom = config.graph_options.rewrite_options.custom_optimizers.add()
        custom.name = "NpuOptimizer"
        for key, value in options.items():
            attr = custom.parameter_map[key]
            if isinstance(value, bool):
                attr.b = value
            elif isinstance(value, int):
                attr.i = value
            else:
                attr.s = value
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            NpuSession(graph=env.graph, config=config)

    return action


SESSIONS = [
    ("precision", {"precision_mode": b"fp64"}, "precision_mode"),
    ("bytes", {"soc_config": b"\xff"}, "soc_config"),
    ("dims-arabic", {"input_shape": b"images:-1,8,8,3", "dynamic_dims": "١;٢".encode(),
                     "dynamic_node_type": 1}, "dynamic_dims"),
    ("dump-nul", {"npu_adapter_dump_dir": b"/tmp/a\x00b"}, "npu_adapter_dump_dir"),
    ("mixlist-missing", {"precision_mode": b"allow_mix_precision",
                         "modify_mixlist": b"/no/such/file.json"}, "modify_mixlist"),
    ("iterations-zero", {"iterations_per_loop": 0}, "iterations_per_loop"),
    ("shape-range", {"dynamic_inputs_shape_range": b"data:[1~"}, "dynamic_inputs_shape_range"),
    ("mix-and-loop", {"mix_compile_mode": True, "iterations_per_loop": 5}, "mix_compile_mode"),
]
for label, options, name in SESSIONS:
    case(f"session-{label}", _session(options), NpuConfigError, [name])


def _session_bad_fetch(env):
    from npu_adapter.session import NpuSession

    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.custom_optimizers.add().name = "NpuOptimizer"
    with NpuSession(graph=env.graph, config=config) as sess:
        sess.run("nope:0")


case("session-fetch-missing", _session_bad_fetch, (KeyError, ValueError), ["nope"])

# ---- 9. npu_bridge helpers -------------------------------------------------------------------


def _util(call):
    def action(env):
        from npu_bridge.estimator.npu import util

        with env.graph.as_default():
            return call(util, env.graph)

    return action


def _tag_then_fail(util, graph):
    op = graph.get_operation_by_name("probs")
    try:
        util.set_graph_exec_config([op, 5])
    finally:
        assert "_graph_dynamic_input" not in op.node_def.attr  # nothing half-done


case("util-exec-config-partly-bad", _util(_tag_then_fail), ValueError, ["fetch is invalid"])
case("util-exec-config-mode", _util(lambda u, g: u.set_graph_exec_config(
    g.get_operation_by_name("probs"), dynamic_graph_execute_mode="x")), ValueError,
    ["dynamic_graph_execute_mode"])
case("util-exec-config-range", _util(lambda u, g: u.set_graph_exec_config(
    g.get_operation_by_name("probs"), dynamic_inputs_shape_range="data:[1~")), NpuConfigError,
    ["dynamic_inputs_shape_range"])
case("util-exec-config-missing-tensor", _util(lambda u, g: u.set_graph_exec_config("nope:0")),
     ValueError, ["nope:0"])
case("util-iterations-overflow", _util(lambda u, g: u.set_iteration_per_loop(
    None, g.get_operation_by_name("probs"), 2**70)), ValueError, ["iterations_per_loop", "int64"])
case("util-iterations-zero", _util(lambda u, g: u.set_iteration_per_loop(
    None, g.get_operation_by_name("probs"), 0)), ValueError, ["iterations_per_loop"])
case("util-max-size-overflow", _util(lambda u, g: u.set_op_tensor_max_size(
    g.get_operation_by_name("probs"), 2**64)), ValueError, ["max_size"])
for k, (shape, dims) in enumerate([("0:-1,٨", "1;2"), (f"0:-1,{2**63}", "1;2"),
                                   ("0:-1", f"1;{2**64}"), ("0:-1", "1"), ("x:-1", "1;2"),
                                   ("0:-1", "1;1")]):
    case(f"util-multi-dims-{k}", _util(lambda u, g, s=shape, d=dims:
                                       u.set_op_input_tensor_multi_dims(
                                           g.get_operation_by_name("probs"), s, d)),
         NpuConfigError, ["set_op_input_tensor_multi_dims"])


# ---- the runner ----------------------------------------------------------------------------

def test_the_catalogue_has_at_least_300_cases():
    print(f"bad-input catalogue: {len(CASES)} cases")
    assert len(CASES) >= 300
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalogue")
    os.mkdir(root / "d.pb")
    return Env(root)


_CRASHES = (AttributeError, KeyError, IndexError, OverflowError, RecursionError,
            UnicodeError, TypeError, ZeroDivisionError, AssertionError)


@pytest.mark.parametrize("entry", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_a_named_error(entry, env, capsys, monkeypatch):
    monkeypatch.delenv("AOE_MODE", raising=False)
    reset_warn_once()
    if entry.error == "cli":
        code = entry.action(env)
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert code == 2, (code, err)
        # "npu-adapter: error:", or "npu-adapter options: error:" for a usage error
        assert len(lines) == 1 and re.match(r"npu-adapter( [a-z]+)*: error: ", lines[0]), err
        assert "internal error" not in err and "Traceback" not in err
        for name in entry.names:
            assert name in lines[0], (name, lines[0])
        assert len(lines[0]) < 1200, "a long value must be cut"
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(BaseException) as info:
                entry.action(env)
        error = info.value
        expected = entry.error if isinstance(entry.error, tuple) else (entry.error,)
        if not isinstance(error, expected) or (
                isinstance(error, _CRASHES) and not issubclass(type(error), expected)):
            raise AssertionError(f"{entry.id}: expected {entry.error}, got "
                                 f"{type(error).__name__}: {error}") from error
        message = str(error)
        for name in entry.names:
            assert name in message, (entry.id, name, message)
    if entry.after is not None:
        entry.after(env)


def test_every_option_kind_is_covered():
    covered = {c.id.split("-", 1)[1] for c in CASES if c.id.startswith(("surrogate-", "int64-"))}
    assert {s.name for s in STRING_OPTIONS} <= covered
    assert {f"above-{s.name}" for s in INT_OPTIONS} <= covered
    assert set(PATH_OPTIONS) <= set(OPTIONS_BY_NAME)


def test_valid_values_next_to_the_bad_ones_still_work(env, tmp_path):
    """The checks must not reject what is fine (a guard against over-eager validation)."""
    mixlist = tmp_path / "mix.json"
    mixlist.write_text('{"black-list": {"to-add": ["Cast"]}, "white-list": {"to-remove": []}}')
    dtypes = tmp_path / "dtypes.cfg"
    dtypes.write_text("# by name\nconv1/conv::InputDtype:float16,float16,OutputDtype:float16\n"
                      "OpType::Relu:InputDtype:float16,OutputDtype:float16\n\n")
    config = NpuConfig.from_dict({
        "precision_mode": "allow_mix_precision", "modify_mixlist": str(mixlist),
        "customize_dtypes": str(dtypes), "dump_step": "0|5|10-20",
        "profiling_options": '{"output": "/tmp/p", "training_trace": "on", "aicpu": "on"}',
        "op_select_implmode": "high_precision", "optypelist_for_implmode": "Pooling,SoftmaxV2",
        "local_device_list": "0,1", "npu_adapter_gear_pad_values": "images:-1.5e3",
        "input_fusion_size": 2**20, "soc_config": "Ascend910B", "job": "localhost",
    })
    assert config.dump_step == "0|5|10-20"
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        tf.nn.softmax(tf.matmul(x, tf.ones([4, 3])), name="probs")
    result = npu_adapter.rewrite(graph.as_graph_def(), {"input_shape": "x:-1,4",
                                                        "dynamic_dims": "1;4",
                                                        "dynamic_node_type": 1},
                                 fetches=["probs:0"])
    assert len(result.clusters) == 1 and len(result.clusters[0].gears) == 2
    data = np.arange(16, dtype=np.float32).reshape(4, 4)
    with tf.Graph().as_default() as rewritten:
        tf.compat.v1.import_graph_def(result.graph_def, name="")
        with tf.compat.v1.Session(graph=rewritten) as sess:
            probs = sess.run("probs:0", {"x:0": data})  # the user's names still work
    # Each row of x @ ones has three equal logits: softmax gives 1/3 everywhere.
    np.testing.assert_allclose(probs, np.full((4, 3), 1 / 3, np.float32), rtol=1e-6)
    assert UnknownOptionError.__mro__[1] is NpuConfigError
