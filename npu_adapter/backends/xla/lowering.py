"""The ``xla`` backend: clusters compiled by XLA on the host CPU, one executable per static shape.

Partitioning and state are the CPU reference's (same op list, variables in the outer graph with
their resource handles passed into the cluster functions, large constants passed as arguments);
see :mod:`npu_adapter.backends.cpu.lowering`. Lowering makes every ``GeOp`` a
``StatefulPartitionedCall`` of its function, as the CPU reference does, and then, per cluster:

* **Check** (:mod:`~npu_adapter.backends.xla.compilability`): every op of the function (and of
  the functions it calls) has an ``XLA_CPU_JIT`` kernel for its dtypes, and none has a
  value-dependent output shape or touches strings, variants or non-variable resources.
* **Compiled** cluster ``F``: the call node calls the form XLA compiles — ``F`` itself, or
  ``F_xla``, a copy whose depthwise convolutions are written as XLA compiles them well
  (:mod:`~npu_adapter.backends.xla.depthwise`) — with ``_XlaMustCompile=True``; TensorFlow then
  compiles the call with XLA, once per distinct set of input shapes, and runs the executable.
  ``F`` stays in the library unchanged: it is the cluster on TensorFlow's kernels
  (``_npu_adapter_xla_tf_function`` on the node names it), which the runtime runs instead where
  it measures TensorFlow's kernels faster (:mod:`~npu_adapter.backends.xla.runtime`).
* **Cluster with gears**: the call node calls ``F_xla``, a copy of the dispatcher (shape checks,
  padding, ``Case``) whose branches call ``F_xla_gear_<g>``, one-node wrappers that call the
  gear's static-shape body (``F_gear_<g>``, or its rewritten copy ``F_gear_<g>_xla``) with
  ``_XlaMustCompile``: one executable per gear, whether the session calls the gear directly or
  through the dispatcher. ``F`` and its ``F_gear_<g>`` are the gears on TensorFlow's kernels.
* **Fallback**: a cluster that fails the check runs on the CPU reference, unchanged.

Each lowered cluster node says what happened: ``_npu_adapter_xla_status`` (``xla`` or
``fallback``), and for a fallback ``_npu_adapter_xla_reason`` (a code of
:data:`~npu_adapter.vocabulary.XLA_FALLBACK_REASONS`) and ``_npu_adapter_xla_detail``
("cluster GeOp1_0: op Unique (value-dependent shape) not compilable by XLA; runs on the CPU
reference"). The placement report copies them into each cluster's ``compile`` record.
"""

import logging

from tensorflow.core.framework import function_pb2

from npu_adapter import tf_compat
from npu_adapter.backends.cpu.lowering import (
    CpuReferenceBackend,
    is_state_owner,
    lower_to_function_calls,
)
from npu_adapter.backends.xla.compilability import check_functions
from npu_adapter.backends.xla.depthwise import decompose_depthwise
from npu_adapter.graph.names import parse_input
from npu_adapter.vocabulary import (
    CLUSTER_GEARS_ATTR,
    GEAR_FUNCTION_SUFFIX,
    GEOP_OP,
    XLA_DETAIL_ATTR,
    XLA_MUST_COMPILE_ATTR,
    XLA_REASON_ATTR,
    XLA_STATUS_ATTR,
    XLA_STATUS_COMPILED,
    XLA_STATUS_FALLBACK,
    XLA_TF_FUNCTION_ATTR,
)

__all__ = ["COMPILED_SUFFIX", "XlaBackend", "cluster_verdicts", "lower_for_xla"]

logger = logging.getLogger(__name__)

COMPILED_SUFFIX = "_xla"
"""``F_xla``: the form of cluster function ``F`` that XLA compiles (or, with gears, the
dispatcher calling the compiled gears ``F_xla_gear_<g>``); ``F_gear_<g>_xla``: a gear body
rewritten for XLA."""


def _gear_functions(fname, functions):
    names = []
    while f"{fname}{GEAR_FUNCTION_SUFFIX}{len(names)}" in functions:
        names.append(f"{fname}{GEAR_FUNCTION_SUFFIX}{len(names)}")
    return names


def cluster_verdicts(graph_def):
    """Cluster node name → :class:`~npu_adapter.backends.xla.compilability.Verdict` for every
    ``GeOp`` of ``graph_def`` (what XLA would compile: the function, or its gear copies)."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    verdicts = {}
    for node in graph_def.node:
        if node.op != GEOP_OP:
            continue
        fname = node.attr["function"].func.name
        gears = _gear_functions(fname, functions) if CLUSTER_GEARS_ATTR in node.attr else []
        verdicts[node.name] = check_functions(gears or [fname], functions)
    return verdicts


def _compile_wrapper(name, body):
    """A function ``name`` with ``body``'s signature whose only node calls ``body`` with
    ``_XlaMustCompile``."""
    wrapper = function_pb2.FunctionDef()
    wrapper.signature.name = name
    wrapper.signature.is_stateful = body.signature.is_stateful
    wrapper.signature.input_arg.extend(body.signature.input_arg)
    wrapper.signature.output_arg.extend(body.signature.output_arg)
    for index, attrs in body.arg_attr.items():
        wrapper.arg_attr[index].CopyFrom(attrs)
    call = wrapper.node_def.add(name="xla_call", op="StatefulPartitionedCall")
    call.input.extend(arg.name for arg in body.signature.input_arg)
    call.attr["f"].func.name = body.signature.name
    call.attr["Tin"].list.type.extend(arg.type for arg in body.signature.input_arg)
    call.attr["Tout"].list.type.extend(arg.type for arg in body.signature.output_arg)
    for key in ("config", "config_proto", "executor_type"):
        call.attr[key].s = b""
    call.attr[XLA_MUST_COMPILE_ATTR].b = True
    for j, arg in enumerate(body.signature.output_arg):
        wrapper.ret[arg.name] = f"xla_call:output:{j}"
    return wrapper


def _renamed_calls(fdef, name, renames):
    """A copy of ``fdef`` called ``name`` whose nodes call ``renames[f]`` instead of ``f``."""
    copy = function_pb2.FunctionDef()
    copy.CopyFrom(fdef)
    copy.signature.name = name
    for node in copy.node_def:
        for value in node.attr.values():
            kind = value.WhichOneof("value")
            if kind == "func" and value.func.name in renames:
                value.func.name = renames[value.func.name]
            elif kind == "list":
                for func in value.list.func:
                    if func.name in renames:
                        func.name = renames[func.name]
    return copy


def _constant_arg_shapes(call, fdef, outer):
    """Argument name → static shape of ``fdef``'s arguments that ``call`` (its call node in
    the outer graph ``outer``: name → NodeDef) feeds from a constant (the hoisted weights)."""
    data = [text for text in call.input if not text.startswith("^")]
    shapes = {}
    for arg, text in zip(fdef.signature.input_arg, data):
        source = outer.get(parse_input(text)[0])
        while source is not None and source.op == "Identity" and source.input:
            source = outer.get(parse_input(source.input[0])[0])
        if source is not None and source.op == "Const":
            shape = source.attr["value"].tensor.tensor_shape
            if not shape.unknown_rank:
                shapes[arg.name] = tuple(d.size for d in shape.dim)
    return shapes


def _compiled_form(fdef, name, arg_shapes):
    """``fdef`` rewritten for XLA under ``name``, or None when XLA compiles it as it is."""
    rewritten, _ = decompose_depthwise(fdef, arg_shapes)
    if rewritten is not None:
        rewritten.signature.name = name
        rewritten.attr.pop("_noinline", None)  # compiled as one unit; nothing to inline
    return rewritten


def lower_for_xla(graph_def, config=None):
    """Lower every ``GeOp`` of ``graph_def`` for XLA (see the module docstring); returns the new
    GraphDef. Deterministic: the same input gives the same output."""
    verdicts = cluster_verdicts(graph_def)
    isolate = bool(getattr(config, "npu_adapter_isolate_clusters", False))
    out = lower_to_function_calls(graph_def, isolate=isolate)
    functions = {f.signature.name: f for f in out.library.function}
    outer = {node.name: node for node in out.node}
    added = []
    for node in out.node:
        verdict = verdicts.get(node.name)
        if verdict is None:
            continue
        if not verdict.ok:
            detail = (f"cluster {node.name}: {verdict.detail}; runs on the CPU reference")
            node.attr[XLA_STATUS_ATTR].s = XLA_STATUS_FALLBACK.encode()
            node.attr[XLA_REASON_ATTR].s = verdict.reason.encode()
            node.attr[XLA_DETAIL_ATTR].s = detail.encode()
            logger.info("%s", detail)
            continue
        node.attr[XLA_STATUS_ATTR].s = XLA_STATUS_COMPILED.encode()
        fname = node.attr["f"].func.name
        node.attr[XLA_TF_FUNCTION_ATTR].s = fname.encode()
        arg_shapes = _constant_arg_shapes(node, functions[fname], outer)
        gears = _gear_functions(fname, functions) if CLUSTER_GEARS_ATTR in node.attr else []
        compiled = fname + COMPILED_SUFFIX
        if not gears:
            form = _compiled_form(functions[fname], compiled, arg_shapes)
            if form is not None:
                added.append(form)
                node.attr["f"].func.name = compiled
            node.attr[XLA_MUST_COMPILE_ATTR].b = True
            continue
        renames = {}
        for g, gear_name in enumerate(gears):
            body = _compiled_form(functions[gear_name], gear_name + COMPILED_SUFFIX,
                                  arg_shapes)
            if body is not None:
                added.append(body)
            wrapper = f"{compiled}{GEAR_FUNCTION_SUFFIX}{g}"
            added.append(_compile_wrapper(wrapper, body if body is not None
                                          else functions[gear_name]))
            renames[gear_name] = wrapper
        added.append(_renamed_calls(functions[fname], compiled, renames))
        node.attr["f"].func.name = compiled
    out.library.function.extend(added)
    return out


class XlaBackend(CpuReferenceBackend):
    """Clusters compiled by XLA for the host CPU; clusters XLA cannot compile fall back, one by
    one, to the CPU reference."""

    name = "xla"
    runtime_class = "npu_adapter.backends.xla.runtime:XlaRuntime"
    # The runtime counts the executables its TensorFlow session compiled: an adopted session
    # would hold executables its counts do not know.
    reuses_tf_sessions = False
    # Clusters on TensorFlow's kernels (a fallback, or a cluster measured faster there) are
    # installed inlined, as the CPU reference installs them: then they run as the user's own
    # graph does. Compiled calls (_XlaMustCompile) stay calls (graph/inline.py).
    inlines_calls_at_install = True

    def outside_cluster_reason(self, node_def, op_def):
        """Why cluster member ``node_def`` runs in the outer graph here, or None. XLA compiles
        no state owner and no ref edge: an op with a ref input or output
        (``ref_edge_cpu_reference``) and an op that owns session state, whose resource handle
        then enters the compiled function as an argument (``resource_handle_cpu_reference``),
        run outside; decided by the op type alone."""
        del node_def
        if op_def is None:
            return None
        if any(arg.is_ref for arg in op_def.input_arg) or \
                any(arg.is_ref for arg in op_def.output_arg):
            return "ref_edge_cpu_reference"
        if is_state_owner(op_def):
            return "resource_handle_cpu_reference"
        return None

    def lower(self, graph_def, clusters, ctx):
        config = ctx.config if ctx is not None else None
        directory = getattr(config, "graph_compiler_cache_dir", None)
        if directory:
            from npu_adapter.backends.xla.persistent_cache import check_cache_dir

            check_cache_dir(directory)
        return lower_for_xla(graph_def, config)

    def cluster_decisions(self, graph_def, config):
        """Cluster node name → {executable label: :class:`~npu_adapter.backends.xla.decisions.
        Decision`} for the compiled clusters of ``graph_def`` (a graph this backend lowered):
        what runs of them decided, in this process or, with ``graph_compiler_cache_dir`` in
        ``config``, in earlier ones. Reads only; clusters not decided yet are absent."""
        import os

        from npu_adapter.backends.xla.decisions import (
            DECISIONS_SUBDIR,
            DecisionStore,
            cluster_digest,
        )
        from npu_adapter.backends.xla.persistent_cache import SUBDIR

        directory = getattr(config, "graph_compiler_cache_dir", None)
        store = DecisionStore(os.path.join(os.path.abspath(os.path.expanduser(directory)),
                                           SUBDIR, DECISIONS_SUBDIR) if directory else None)
        functions = {f.signature.name: f for f in graph_def.library.function}
        found = {}
        for node in graph_def.node:
            if XLA_STATUS_ATTR in node.attr and \
                    node.attr[XLA_STATUS_ATTR].s.decode() == XLA_STATUS_COMPILED:
                decisions = store.for_cluster(cluster_digest(node, functions))
                if decisions:
                    found[node.name] = decisions
        return found

    def available(self):
        # XlaLaunch's CPU kernel is registered at import when TensorFlow is built with XLA; the
        # XLA_CPU_JIT kernels only once a session exists, which would read TF_XLA_FLAGS early.
        launch = tf_compat.registered_kernels("XlaLaunch").kernel
        if not any(k.device_type == "CPU" for k in launch):
            return False, ("this TensorFlow build has no XLA (no XlaLaunch CPU kernel); install "
                           "the standard tensorflow or tensorflow-cpu wheel")
        return True, "TensorFlow's XLA CPU JIT"
