"""Gears on the CPU reference: every gear runs the cluster's one shape-polymorphic body.

``insert_gears`` makes a cluster with gears a dispatcher (rank and gear checks, the choice of
the gear, padding under ``pad_up``) whose ``Case`` calls one static-shape copy per gear,
``<cluster>_gear_<g>``: backends that compile per shape need them. On the CPU a static shape
computes nothing differently, but each copy is a function of its own, and TensorFlow keeps a
random op's state per kernel: batches alternating between gears would draw from one sequence
per gear, where plain TensorFlow draws from one.

So the CPU lowering gives each dispatcher's ``Case`` one branch, whatever the gear: gear 0's
copy with its arguments' shapes unpinned, the user's own nodes again, kept under its name
``<cluster>_gear_0`` (reports, data dumps and profiles find a cluster's nodes there for every
backend). The other copies, which nothing calls any more, are dropped. The dispatcher keeps its
checks, and the ``Case`` reads the gear index they guard: a batch whose shapes match no gear
fails with the same named error before any op of the body runs. Under ``pad_up`` the body
computes the padded inputs, as each gear's copy did. The body stays a function the ``Case``
calls, as each copy was: TensorFlow optimises it as a function body, which gives plain
TensorFlow's rounding where inlining it into the session's graph sometimes does not.

The session calls the same body directly, inlined, when it sees the gear inputs' shapes
(:meth:`npu_adapter.backends.cpu.runtime.CpuReferenceRuntime.call_gears`).
"""

from npu_adapter.backends.runtime import cluster_function
from npu_adapter.graph.functions import unpin_arg_shapes
from npu_adapter.vocabulary import CLUSTER_GEARS_ATTR, GEAR_FUNCTION_SUFFIX

__all__ = ["body_name", "call_one_body"]


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
        body = body_name(name)
        (case,) = [n for n in functions[name].node_def if n.op == "Case" and
                   n.attr["branches"].list.func[0].name == body]
        branches = case.attr["branches"].list.func
        dropped.update(f.name for f in branches[1:])
        del branches[1:]
        functions[body].CopyFrom(unpin_arg_shapes(functions[body]))
    if dropped:
        kept = [f for f in graph_def.library.function if f.signature.name not in dropped]
        del graph_def.library.function[:]
        graph_def.library.function.extend(kept)
    return graph_def
