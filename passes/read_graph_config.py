"""``read_graph_config``: gating, graph-level checks and pre-partition rewrites
(docs/original-adapter.md, 1–3).

* Gating: when the graph must be left alone (no ``NpuOptimizer``, ``use_off_line`` false,
  ``_NoNeedOptimize`` on a node, job ps/default, already rewritten) this pass and every later
  gated pass return their input (``PassBase.gated``: the pass framework checks the gate).
* Graph-level checks the original makes at partition time raise ``RewriteError`` here, before
  anything is rewritten: lazy_recompile with ``iterations_per_loop > 1``, a ``OneShotIterator``
  with ``iterations_per_loop != 1``, more than one ``IteratorGetNext`` with the dynamic-dims trio,
  an invalid shape range.
* ``_UnaryOpsComposition`` (made by Grappler on CPU) is expanded into one node per entry of its
  ``op_names``, named ``<node>_<i>_<op>``; consumers are rewired to the last one
  (docs/original-adapter.md, 2).
"""

from npu_adapter.graph.names import parse_input
from npu_adapter.pipeline.base import PassBase, PassResult
from npu_adapter.pipeline.graph_config import read_graph_config
from npu_adapter.pipeline.registry import register_pass

from ._common import copy_graph

__all__ = ["ReadGraphConfigPass"]


def _expand_unary_compositions(graph_def, view):
    comps = [i for i, op in enumerate(view.ops) if op == "_UnaryOpsComposition"]
    if not comps:
        return graph_def, 0
    out = copy_graph(graph_def)
    del out.node[:]
    renamed = {}
    taken = set(view.index)
    expanded = {}
    for i in comps:
        node = view.nodes[i]
        chain = []
        prev = node.input[0]
        for k, op in enumerate(node.attr["op_names"].list.s):
            op = op.decode()
            name = f"{node.name}_{k}_{op}"
            while name in taken:
                name += "_"
            taken.add(name)
            chain.append((name, op, prev))
            prev = name
        expanded[i] = chain
        renamed[node.name] = prev
    for i, node in enumerate(view.nodes):
        if i in expanded:
            src = view.nodes[i]
            for name, op, prev in expanded[i]:
                step = out.node.add()
                step.name = name
                step.op = op
                step.input.append(prev)
                step.input.extend(t for t in src.input[1:] if t.startswith("^"))
                step.attr["T"].CopyFrom(src.attr["T"])
                if src.device:
                    step.device = src.device
            continue
        copy = out.node.add()
        copy.CopyFrom(node)
        if any(parse_input(t)[0] in renamed for t in node.input):
            new_inputs = []
            for t in node.input:
                name, port, is_control = parse_input(t)
                if name in renamed:
                    t = ("^" if is_control else "") + renamed[name] + \
                        (f":{port}" if port > 0 else "")
                new_inputs.append(t)
            del copy.input[:]
            copy.input.extend(new_inputs)
    return out, len(comps)


@register_pass
class ReadGraphConfigPass(PassBase):
    """Check the graph-level configuration and apply the original's pre-partition rewrites."""

    name = "read_graph_config"
    gated = True

    def run(self, graph_def, ctx, view):
        graph_config = read_graph_config(view, ctx.config)
        out, expanded = _expand_unary_compositions(graph_def, view)
        return PassResult(out, expanded > 0, {
            "unary_compositions_expanded": expanded,
            "data_format": graph_config.data_format,
            "dynamic_input": graph_config.dynamic_input,
        })
