"""Gears on the CPU reference: every gear runs the cluster's one shape-polymorphic body.

``insert_gears`` makes a cluster with gears a dispatcher (rank and gear checks, the choice of
the gear, padding under ``pad_up``) whose ``Case`` calls one static-shape copy per gear,
``<cluster>_gear_<g>``: backends that compile per shape need them. On the CPU a static shape
computes nothing differently, but each copy is a function of its own, and TensorFlow keeps a
random op's state per kernel: batches alternating between gears would draw from one sequence
per gear, where plain TensorFlow draws from one.

So the CPU lowering makes each dispatcher call one body whatever the gear: gear 0's copy with
its arguments' shapes unpinned, the user's own nodes again, kept under its name
``<cluster>_gear_0`` (reports, data dumps and profiles find a cluster's nodes there for every
backend). The other copies, which nothing calls any more, are dropped. The dispatcher keeps its
checks, and the body waits for them: a batch whose shapes match no gear fails with the same
named error before any op of the body runs. Under ``pad_up`` the body computes the padded
inputs, as each gear's copy did.

The session calls the same body directly when it sees the gear inputs' shapes
(:meth:`npu_adapter.backends.cpu.runtime.CpuReferenceRuntime.call_gears`).
"""

from npu_adapter.backends.runtime import cluster_function
from npu_adapter.graph.functions import unpin_arg_shapes
from npu_adapter.vocabulary import CLUSTER_GEARS_ATTR, GEAR_FUNCTION_SUFFIX

__all__ = ["BODY_CALL", "body_name", "call_one_body"]

BODY_CALL = "gear_body"
"""The node of a dispatcher that calls the body (it replaces the dispatcher's ``Case``)."""


def body_name(cluster_function_name):
    """The body every gear of cluster function ``cluster_function_name`` runs."""
    return f"{cluster_function_name}{GEAR_FUNCTION_SUFFIX}0"


def call_one_body(graph_def):
    """Make every gear dispatcher of the lowered ``graph_def`` (edited in place) call its
    cluster's one shape-polymorphic body instead of a static-shape copy per gear (see the
    module docstring). Returns ``graph_def``."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    dropped = set()
    for node in graph_def.node:
        if CLUSTER_GEARS_ATTR not in node.attr:
            continue
        _, name = cluster_function(node)
        dispatcher = functions[name]
        copies = f"{name}{GEAR_FUNCTION_SUFFIX}"
        (case,) = [n for n in dispatcher.node_def if n.op == "Case" and
                   n.attr["branches"].list.func[0].name.startswith(copies)]
        branches = [f.name for f in case.attr["branches"].list.func]
        body = functions[body_name(name)]
        body.CopyFrom(unpin_arg_shapes(body))
        _case_to_body_call(dispatcher, case, body.signature.name)
        dropped.update(b for b in branches if b != body.signature.name)
    if dropped:
        kept = [f for f in graph_def.library.function if f.signature.name not in dropped]
        del graph_def.library.function[:]
        graph_def.library.function.extend(kept)
    return graph_def


def _case_to_body_call(dispatcher, case, body):
    """Turn the dispatcher's ``Case`` into a call of ``body`` with the same inputs, which waits
    for the gear index (and so for the checks the index waits for)."""
    index, *data = [t for t in case.input if not t.startswith("^")]
    controls = [t for t in case.input if t.startswith("^")]
    old_name = case.name
    case.name = BODY_CALL
    case.op = "StatefulPartitionedCall"
    del case.input[:]
    # (FunctionDef inputs read "node:output_arg:index".)
    case.input.extend(data + controls + ["^" + index.split(":")[0]])
    for key in ("branches", "output_shapes"):
        del case.attr[key]
    case.attr["f"].func.name = body
    for key in ("config", "config_proto", "executor_type"):
        case.attr[key].s = b""
    old = old_name + ":"
    for node in dispatcher.node_def:
        for k, text in enumerate(node.input):
            if text.startswith(old) or text == "^" + old_name:
                node.input[k] = text.replace(old_name, BODY_CALL, 1)
    for key, value in dispatcher.ret.items():
        if value.startswith(old):
            dispatcher.ret[key] = BODY_CALL + value[len(old_name):]
