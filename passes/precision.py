"""``precision``: run each cluster in the dtypes the NPU would use (precision emulation).

Off unless ``npu_adapter_emulate_precision`` is ``on`` (or the environment variable
``NPU_ADAPTER_EMULATE_PRECISION`` was ``on`` when the config was built): then the pass returns
its input unchanged, so the CPU reference stays bit-exact with plain TensorFlow.

When on, every cluster function (``GeOp<N>_<k>``) and every gear copy of it
(``GeOp<N>_<k>_gear_<g>``) is rewritten by :func:`npu_adapter.precision.engine.emulate_function`
under the session's :class:`~npu_adapter.precision.policy.PrecisionPolicy`: each op computes in
the dtype ``precision_mode`` / ``precision_mode_v2``, the mixed-precision lists (edited by
``modify_mixlist``), ``customize_dtypes`` and ``_keep_dtype`` give it, with ``Cast`` nodes where
dtypes change. Function signatures do not change, so the host graph is untouched. Runs after
``insert_gears`` (so gear copies exist) and before ``lower``.

``info``: ``mode``, ``setting``, ``low``, ``decisions`` (node name → decision record, first
occurrence), ``casts`` (per function), ``mixlist_changes`` (ops whose dtype a ``modify_mixlist``
edit changed), ``customize_ignored``.
"""

from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.pipeline.registry import register_pass
from npu_adapter.precision.engine import emulate_function
from npu_adapter.precision.policy import emulation_enabled, policy_from_config
from npu_adapter.vocabulary import GEAR_FUNCTION_SUFFIX, GEOP_OP

from ._common import copy_graph

__all__ = ["PrecisionPass", "emulated_functions"]


def scalar_arguments(graph_def):
    """Function name → names of its arguments fed by a statically scalar tensor."""
    from npu_adapter.graph.names import parse_input
    from npu_adapter.precision.engine import is_scalar_source

    producers = {n.name: n for n in graph_def.node}
    functions = {f.signature.name: f for f in graph_def.library.function}
    found = {}
    for node in graph_def.node:
        if node.op != GEOP_OP:
            continue
        fname = node.attr["function"].func.name
        fdef = functions.get(fname)
        if fdef is None:
            continue
        data = [t for t in node.input if not t.startswith("^")]
        names = set()
        for arg, text in zip(fdef.signature.input_arg, data):
            source, port, _ = parse_input(text)
            producer = producers.get(source)
            if producer is not None and port == 0 and is_scalar_source(producer, producers):
                names.add(arg.name)
        found[fname] = names
    return found


def emulated_functions(graph_def):
    """Names of the functions the pass rewrites: cluster functions and their gear copies."""
    clusters = {n.attr["function"].func.name for n in graph_def.node if n.op == GEOP_OP}
    names = []
    for fdef in graph_def.library.function:
        name = fdef.signature.name
        base = name.rpartition(GEAR_FUNCTION_SUFFIX)[0]
        if name in clusters or base in clusters:
            names.append(name)
    return names


@register_pass
class PrecisionPass(PassBase):
    """Rewrite cluster functions with the NPU's dtypes when emulation is on."""

    name = "precision"

    def run(self, graph_def, ctx, view):
        config = ctx.config
        if not emulation_enabled(config):
            return PassResult(graph_def, False, {"emulation": "off"})
        targets = emulated_functions(graph_def)
        if not targets:
            return PassResult(graph_def, False, {"emulation": "on", "functions": 0})
        policy = policy_from_config(config)
        out = copy_graph(graph_def)
        functions = {f.signature.name: f for f in graph_def.library.function}
        wanted = set(targets)
        decisions, casts = {}, {}
        base_policy = None
        if policy.mixlist_changes:
            import dataclasses

            base_policy = dataclasses.replace(policy, lists=policy.base_lists)
        changed = {}
        modified = False
        scalar_args = scalar_arguments(graph_def)
        for k, fdef in enumerate(out.library.function):
            name = fdef.signature.name
            if name not in wanted:
                continue
            original = functions[name]
            args = scalar_args.get(name.rpartition(GEAR_FUNCTION_SUFFIX)[0] or name, ())
            rewritten, result = emulate_function(original, policy, functions, args)
            if rewritten != original:
                out.library.function[k].CopyFrom(rewritten)
                modified = True
            casts[name] = result.casts
            cluster = name.rpartition("_gear_")[0] or name
            for node_name, decision in result.decisions.items():
                if node_name not in decisions:
                    record = decision.to_json()
                    record["cluster"] = cluster
                    decisions[node_name] = record
            if base_policy is not None:
                _, before = emulate_function(original, base_policy, functions, args)
                for node_name, decision in before.decisions.items():
                    now = result.decisions.get(node_name)
                    if now is not None and now.dtype != decision.dtype \
                            and node_name not in changed:
                        changed[node_name] = {"op": now.op,
                                              "before": _name(decision.dtype),
                                              "after": _name(now.dtype),
                                              "edit": now.detail}
        info = {"emulation": "on", "mode": policy.mode, "setting": policy.setting,
                "low": policy.low_name, "decisions": decisions, "casts": casts,
                "mixlist_changes": changed, "customize_ignored": policy.customize_ignored}
        return PassResult(out if modified else graph_def, modified, info)


def _name(dtype):
    from npu_adapter.graph.types import dtype_name

    return dtype_name(dtype)
