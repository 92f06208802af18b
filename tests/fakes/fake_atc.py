"""A fake ``atc`` (CANN's model compiler) that checks its arguments as ATC does.

Run as ``python fake_atc.py <atc arguments>``; the test fixture puts a shell wrapper named
``atc`` first on ``PATH`` (the real ``atc`` is a shell wrapper too). Behaviour, as documented for
ATC:

* flags as ``--name=value`` or ``--name value``; ``-name`` means ``--name`` and ``-`` in a
  name means ``_``; an unknown flag is rejected as gflags does (``ERROR: unknown command line
  flag``, status 1);
* the first line is ``ATC start working now, please wait for a moment.``; success prints
  ``ATC run success, welcome to the next use.`` and exits 0; a failure prints
  ``ATC run failed, Please check the detail log, Try 'atc --help' for more information`` then
  ``E#####: text`` and exits 255;
* parameter checks with their codes (E10001 invalid value, E10002 bad ``--input_shape``,
  E10003/E10035/E10036/E10037/E10038/E10039/E10058 bad ``--dynamic_dims``, E10007 missing
  required flag, E10009 two dynamic modes, E10010 bad ``--log``, E10016 unknown node in
  ``--input_shape``/``--out_nodes``, E10056 both precision flags), then the model: a frozen
  GraphDef whose every op has a parser plugin (the op list of ``$ASCEND_OPP_PATH`` or the
  bundled list, plus the natively parsed ops) else E13010; TF v1 control flow cannot be
  converted (E19999);
* writes ``fusion_result.json`` into the current directory (as ATC does unless
  ``--export_compile_stat=0``) and ``<output>.om`` (the fake container of ``fake_om.py``).

Test knobs: ``FAKE_ATC_LOG`` (append one JSON line per run: arguments, directory, status),
``FAKE_ATC_FAIL`` = ``crash`` (killed by SIGSEGV), ``no_om`` (success without a model),
``internal`` (E19999), ``silent`` (failure line, no code).
"""

import importlib.util
import json
import os
import re
import signal
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from fake_om import write_om  # noqa: E402

SUCCESS = "ATC run success, welcome to the next use."
FAILURE = "ATC run failed, Please check the detail log, Try 'atc --help' for more information"

KNOWN_FLAGS = {
    "mode", "model", "framework", "output", "soc_version", "input_shape", "input_format",
    "dynamic_dims", "dynamic_batch_size", "dynamic_image_size", "input_shape_range",
    "out_nodes", "precision_mode", "precision_mode_v2", "keep_dtype", "modify_mixlist",
    "customize_dtypes", "op_select_implmode", "optypelist_for_implmode", "fusion_switch_file",
    "buffer_optimize", "enable_small_channel", "op_debug_level", "log", "input_fp16_nodes",
    "is_input_adjust_hw_layout", "output_type", "op_precision_mode", "allow_hf32",
    "deterministic", "oo_level", "op_compiler_cache_mode", "op_compiler_cache_dir",
    "insert_op_conf", "external_weight", "enable_scope_fusion_passes", "op_debug_config",
    "debug_dir", "atomic_clean_policy", "aicore_num", "export_compile_stat",
}
PRECISION = {"force_fp16", "force_fp32", "cube_fp16in_fp32out", "allow_fp32_to_fp16",
             "must_keep_origin_dtype", "allow_mix_precision", "allow_mix_precision_fp16",
             "allow_mix_precision_bf16", "allow_fp32_to_bf16"}
PRECISION_V2 = {"fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16",
                "cube_hif8", "mixed_hif8"}
MIXED = {"allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16"}
MIXED_V2 = {"mixed_float16", "mixed_bfloat16", "mixed_hif8"}
IMPLMODES = {"high_performance", "high_precision", "high_performance_for_all",
             "high_precision_for_all", "enable_float_32_execution",
             "enable_hi_float_32_execution"}
CHOICES = {
    "buffer_optimize": {"l2_optimize", "off_optimize", "l1_optimize", "l1_and_l2_optimize"},
    "enable_small_channel": {"0", "1"},
    "deterministic": {"0", "1"},
    "op_debug_level": {"0", "1", "2", "3", "4"},
    "oo_level": {"O1", "O3"},
    "external_weight": {"0", "1", "2"},
    "allow_hf32": {"true", "false"},
    "op_compiler_cache_mode": {"enable", "force", "disable"},
    "export_compile_stat": {"0", "1", "2"},
    "atomic_clean_policy": {"0", "1"},
    "input_format": {"NCHW", "NHWC", "ND", "NCDHW", "NDHWC"},
}
FILE_FLAGS = ("modify_mixlist", "customize_dtypes", "fusion_switch_file", "op_precision_mode",
              "insert_op_conf", "op_debug_config")
# Ops the TensorFlow parser handles without a plugin.
NATIVE_OPS = {
    "Placeholder", "Const", "Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims",
    "Shape", "ShapeN", "Size", "Rank", "Fill", "StopGradient", "PreventGradient",
    "GuaranteeConst", "BroadcastGradientArgs", "BroadcastArgs", "Empty",
    "PlaceholderWithDefault", "Bitcast", "Snapshot", "_Arg", "_Retval", "NoOp",
}
V1_CONTROL_FLOW = {"Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter", "Exit",
                   "RefExit", "NextIteration", "RefNextIteration", "LoopCond"}


class Failure(Exception):
    def __init__(self, code, text):
        self.code = code
        self.text = text
        super().__init__(f"{code}: {text}")


def invalid(flag, value, reason):
    return Failure("E10001", f"Value [{value}] for parameter [--{flag}] is invalid. "
                             f"Reason: {reason}")


def graph_pb2():
    """``tensorflow.core.framework.graph_pb2`` without running TensorFlow's package init."""
    spec = importlib.util.find_spec("tensorflow")
    root = os.path.dirname(spec.origin)
    for name, path in (("tensorflow", root), ("tensorflow.core", os.path.join(root, "core")),
                       ("tensorflow.core.framework", os.path.join(root, "core", "framework"))):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [path]
            sys.modules[name] = module
    from tensorflow.core.framework import graph_pb2 as module

    return module


def parse_args(argv):
    flags = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            raise Failure("E10001", f"Unexpected argument [{arg}].")
        name = arg.lstrip("-")
        value = None
        if "=" in name:
            name, value = name.split("=", 1)
        name = name.replace("-", "_")
        if name not in KNOWN_FLAGS:
            print(f"ERROR: unknown command line flag '{name}'")
            sys.exit(1)
        if value is None:
            i += 1
            value = argv[i] if i < len(argv) else ""
        flags[name] = value
        i += 1
    return flags


def op_list():
    opp = os.environ.get("ASCEND_OPP_PATH", "")
    candidates = []
    if opp:
        candidates = [os.path.join(opp, "built-in", "framework", "tensorflow",
                                   "npu_supported_ops.json"),
                      os.path.join(opp, "framework", "built-in", "tensorflow",
                                   "npu_supported_ops.json")]
    candidates.append(os.path.join(HERE, "..", "..", "third_party", "npu_supported_ops.json"))
    for path in candidates:
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return set(json.load(f))
    return set()


def parse_input_shape(text):
    entries = []
    for entry in text.split(";"):
        if not entry:
            continue
        name, sep, dims = entry.rpartition(":")
        if not sep or not name:
            raise Failure("E10002", f"Input shape [{text}] is invalid. Reason: the format "
                                    "should be \"name1:n1,c1,h1,w1;name2:n2,c2,h2,w2\".")
        values = []
        for d in dims.split(",") if dims else []:
            if not re.fullmatch(r"-?\d+", d.strip()):
                raise Failure("E10002", f"Input shape [{text}] is invalid. Reason: dim [{d}] "
                                        "is not an integer.")
            values.append(int(d))
        entries.append((name, values))
    return entries


def check_dynamic_dims(text, shapes):
    if not text.strip():
        raise Failure("E10058", "The value of --dynamic_dims is empty.")
    unknown = sum(d == -1 for _, dims in shapes for d in dims)
    if unknown == 0:
        raise Failure("E10001", "Value [--dynamic_dims] is invalid. Reason: At least one dim "
                                "should be -1 when dynamic_dims is set.")
    gears = []
    for gear in text.split(";"):
        values = []
        for v in gear.split(","):
            v = v.strip()
            if v.startswith("-") and v[1:].isdigit():
                raise Failure("E10038", f"Dim [{v}] of --dynamic_dims is negative.")
            if not v.isdigit():
                raise Failure("E10001", f"Value [{text}] for parameter [--dynamic_dims] is "
                                        "invalid. Reason: Dynamic dims must be a positive "
                                        "integer.")
            values.append(int(v))
        gears.append(tuple(values))
    if len({len(g) for g in gears}) > 1:
        raise Failure("E10037", "Gears of --dynamic_dims have different lengths.")
    if len(gears[0]) != unknown:
        raise Failure("E10003", f"Value [{text}] for parameter [--dynamic_dims] is invalid. "
                                "Reason: Each setting needs to be consistent with the number "
                                "of -1 in the input shape.")
    if len(gears) < 2:
        raise Failure("E10035", "--dynamic_dims needs at least 2 gears.")
    if len(gears) > 100:
        raise Failure("E10036", "--dynamic_dims allows at most 100 gears.")
    if len(set(gears)) != len(gears):
        raise Failure("E10039", "--dynamic_dims has duplicate gears.")
    return gears


def check_flags(flags):
    for flag in ("framework", "model", "soc_version", "output"):
        if not flags.get(flag):
            raise Failure("E10007", f"Argument [--{flag}] is required.")
    if flags.get("mode", "0") != "0":
        raise SystemExit(f"FAKE ATC CONTRACT VIOLATION: only --mode=0 is modelled, got "
                         f"{flags['mode']!r}")
    if flags["framework"] != "3":
        raise invalid("framework", flags["framework"], "this model is a TensorFlow .pb (3)")
    if "precision_mode" in flags and "precision_mode_v2" in flags:
        raise Failure("E10056", "--precision_mode and --precision_mode_v2 cannot be set at the "
                                "same time.")
    if "precision_mode" in flags and flags["precision_mode"] not in PRECISION:
        raise invalid("precision_mode", flags["precision_mode"],
                      "must be one of " + ", ".join(sorted(PRECISION)))
    if "precision_mode_v2" in flags and flags["precision_mode_v2"] not in PRECISION_V2:
        raise invalid("precision_mode_v2", flags["precision_mode_v2"],
                      "must be one of " + ", ".join(sorted(PRECISION_V2)))
    if "modify_mixlist" in flags and flags.get("precision_mode") not in MIXED and \
            flags.get("precision_mode_v2") not in MIXED_V2:
        raise invalid("modify_mixlist", flags["modify_mixlist"],
                      "modify_mixlist is only valid in allow_mix_precision mode")
    if "op_select_implmode" in flags and flags["op_select_implmode"] not in IMPLMODES:
        raise invalid("op_select_implmode", flags["op_select_implmode"],
                      "must be one of " + ", ".join(sorted(IMPLMODES)))
    if "optypelist_for_implmode" in flags and "op_select_implmode" not in flags:
        raise invalid("optypelist_for_implmode", flags["optypelist_for_implmode"],
                      "--op_select_implmode and --optypelist_for_implmode must be set at the "
                      "same time")
    if "log" in flags and flags["log"] not in {"debug", "info", "warning", "error", "null"}:
        raise Failure("E10010", f"Value [{flags['log']}] for parameter [--log] is invalid. "
                                "Reason: must be debug, info, warning, error or null.")
    for flag, allowed in CHOICES.items():
        if flag in flags and flags[flag] not in allowed:
            raise invalid(flag, flags[flag], "must be one of " + ", ".join(sorted(allowed)))
    for flag in FILE_FLAGS:
        if flag in flags and not os.path.isfile(flags[flag]):
            raise invalid(flag, flags[flag], "the file does not exist")
    if "keep_dtype" in flags and not os.path.isfile(flags["keep_dtype"]):
        raise invalid("keep_dtype", flags["keep_dtype"], "File defined by keep_dtype is not "
                                                         "found.")
    dynamic = [f for f in ("dynamic_batch_size", "dynamic_image_size", "dynamic_dims",
                           "input_shape_range") if f in flags]
    if len(dynamic) > 1:
        raise Failure("E10009", "Parameters " + " and ".join(f"[--{f}]" for f in dynamic)
                      + " cannot be used at the same time.")
    if dynamic and dynamic != ["dynamic_dims"]:
        raise SystemExit(f"FAKE ATC CONTRACT VIOLATION: --{dynamic[0]} is not modelled")


def load_graph(path):
    pb2 = graph_pb2()
    graph = pb2.GraphDef()
    try:
        with open(path, "rb") as f:
            graph.ParseFromString(f.read())
    except OSError as exc:
        raise invalid("model", path, f"cannot read the model file: {exc.strerror}") from None
    except Exception:
        raise Failure("E19999", f"Internal Error! Failed to parse the model file {path} as a "
                                "frozen GraphDef.") from None
    if not graph.node:
        raise Failure("E19999", f"Internal Error! The model file {path} has no nodes.")
    return graph


def check_graph(graph, flags):
    nodes = {n.name: n for n in graph.node}
    functions = {f.signature.name for f in graph.library.function}
    known = op_list() | NATIVE_OPS | functions
    bodies = [(n.name, n.op) for n in graph.node]
    for fdef in graph.library.function:
        bodies += [(n.name, n.op) for n in fdef.node_def]
    for name, op in bodies:
        if op in V1_CONTROL_FLOW:
            raise Failure("E19999", f"Internal Error! Op {name} ({op}) is TensorFlow v1 control "
                                    "flow; convert the model to functional control flow.")
        if op in ("VariableV2", "VarHandleOp", "Variable"):
            raise Failure("E19999", f"Internal Error! Op {name} ({op}): the model is not "
                                    "frozen.")
        if op not in known:
            raise Failure("E13010", f"No operator plugin is registered for Op: {name}, "
                                    f"optype: {op}.")
    shapes = parse_input_shape(flags.get("input_shape", ""))
    for name, _ in shapes:
        if name not in nodes or nodes[name].op != "Placeholder":
            raise Failure("E10016", f"Input parameter [--input_shape]'s opname [{name}] is not "
                                    "found in model.")
    given = dict(shapes)
    inputs = []
    for node in graph.node:
        if node.op != "Placeholder":
            continue
        if node.name in given:
            dims = given[node.name]
        else:
            shape = node.attr["shape"].shape
            if shape.unknown_rank or any(d.size < 0 for d in shape.dim):
                raise invalid("input_shape", flags.get("input_shape", ""),
                              f"input [{node.name}] has unknown dims; give its shape in "
                              "--input_shape")
            dims = [d.size for d in shape.dim]
        inputs.append({"name": node.name, "dtype": node.attr["dtype"].type, "shape": dims})
    order = [name for name, _ in shapes] + [i["name"] for i in inputs if i["name"] not in given]
    inputs.sort(key=lambda i: order.index(i["name"]))
    gears = None
    if "dynamic_dims" in flags:
        gears = check_dynamic_dims(flags["dynamic_dims"], shapes)
    elif any(d == -1 for i in inputs for d in i["shape"]):
        raise SystemExit("FAKE ATC CONTRACT VIOLATION: -1 without --dynamic_dims makes a "
                         "shape-range model, which the fake does not model")
    outputs = []
    for entry in (flags.get("out_nodes") or "").split(";"):
        if not entry:
            continue
        name, _, port = entry.rpartition(":")
        if name not in nodes or not port.isdigit():
            raise Failure("E10016", f"Input parameter [--out_nodes]'s opname [{entry}] is not "
                                    "found in model.")
        outputs.append({"name": name, "port": int(port)})
    if not outputs:
        consumed = {i.split(":")[0].lstrip("^") for n in graph.node for i in n.input}
        outputs = [{"name": n.name, "port": 0} for n in graph.node
                   if n.name not in consumed and n.op not in ("NoOp", "Placeholder")]
    return inputs, gears, outputs


def main(argv):
    print("ATC start working now, please wait for a moment.", flush=True)
    mode = os.environ.get("FAKE_ATC_FAIL", "")
    log = os.environ.get("FAKE_ATC_LOG", "")
    status = 0
    try:
        if mode == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        flags = parse_args(argv)
        check_flags(flags)
        if mode == "internal":
            raise Failure("E19999", "Internal Error!")
        graph = load_graph(flags["model"])
        inputs, gears, outputs = check_graph(graph, flags)
        if flags.get("export_compile_stat", "1") != "0":
            with open("fusion_result.json", "w", encoding="utf-8") as f:
                json.dump({"graph_fusion": {}, "ub_fusion": {}}, f)
        if mode != "no_om":
            header = {"soc_version": flags["soc_version"], "flags": flags, "inputs": inputs,
                      "gears": gears, "outputs": outputs,
                      "input_format": flags.get("input_format", "NHWC")}
            write_om(flags["output"] + ".om", header, graph.SerializeToString())
        if mode == "silent":
            print(FAILURE)
            status = 255
        else:
            print(SUCCESS)
    except Failure as failure:
        print(FAILURE)
        print(f"{failure.code}: {failure.text}")
        print("        TraceBack (most recent call last):")
        status = 255
    except SystemExit as exc:  # gflags' unknown flag (1) or a contract violation (3)
        if isinstance(exc.code, int):
            status = exc.code
        else:
            print(exc.code)
            status = 3
    finally:
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"argv": argv, "cwd": os.getcwd(), "status": status}) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
