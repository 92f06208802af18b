"""What a dumped graph contains: content levels and FunctionDef → GraphDef conversion.

Content levels follow GE's ``DUMP_GE_GRAPH`` (docs/original-adapter.md, 12):

1. full: the GraphDef as it is;
2. without weights: every tensor-valued attribute (``Const`` values, and any other ``tensor`` or
   ``list(tensor)`` attr) keeps its dtype and shape but loses its contents;
3. structure only: nodes keep ``name``, ``op``, ``input`` and ``device``; attributes are dropped.
   Function bodies are reduced the same way; signatures are kept so inputs still resolve.

Every function returns a new GraphDef; inputs are never modified.
"""

from tensorflow.core.framework import graph_pb2, tensor_pb2

from npu_adapter.graph.names import format_input
from npu_adapter.graph.types import output_port_names
from npu_adapter.pipeline.dump_settings import CONTENT_FULL, CONTENT_NO_WEIGHTS, CONTENT_STRUCTURE

__all__ = [
    "apply_content_level",
    "strip_tensor_contents",
    "structure_only",
    "function_graph_def",
    "functions_called",
]


def _empty_tensor(tensor):
    out = tensor_pb2.TensorProto(dtype=tensor.dtype)
    out.tensor_shape.CopyFrom(tensor.tensor_shape)
    return out


def _strip_node(node):
    for value in node.attr.values():
        field = value.WhichOneof("value")
        if field == "tensor":
            value.tensor.CopyFrom(_empty_tensor(value.tensor))
        elif field == "list" and len(value.list.tensor):
            stripped = [_empty_tensor(t) for t in value.list.tensor]
            del value.list.tensor[:]
            value.list.tensor.extend(stripped)


def strip_tensor_contents(graph_def):
    """Copy of ``graph_def`` whose tensor attrs keep only dtype and shape (level 2)."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    for node in out.node:
        _strip_node(node)
    for fdef in out.library.function:
        for node in fdef.node_def:
            _strip_node(node)
    return out


def _skeleton(node, target):
    target.name = node.name
    target.op = node.op
    target.input.extend(node.input)
    if node.device:
        target.device = node.device


def structure_only(graph_def):
    """Copy of ``graph_def`` with names, ops, inputs and devices only (level 3)."""
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    for node in graph_def.node:
        _skeleton(node, out.node.add())
    for fdef in graph_def.library.function:
        reduced = out.library.function.add()
        reduced.signature.CopyFrom(fdef.signature)
        for node in fdef.node_def:
            _skeleton(node, reduced.node_def.add())
        for key in sorted(fdef.ret):
            reduced.ret[key] = fdef.ret[key]
        for key in sorted(fdef.control_ret):
            reduced.control_ret[key] = fdef.control_ret[key]
    return out


def apply_content_level(graph_def, level):
    """``graph_def`` reduced to content ``level`` (1 returns it unchanged, not copied)."""
    if level == CONTENT_FULL:
        return graph_def
    if level == CONTENT_NO_WEIGHTS:
        return strip_tensor_contents(graph_def)
    if level == CONTENT_STRUCTURE:
        return structure_only(graph_def)
    raise ValueError(f"content level must be 1, 2 or 3, got {level!r}")


def _func_names(node):
    names = []
    for key in sorted(node.attr):
        value = node.attr[key]
        field = value.WhichOneof("value")
        if field == "func" and value.func.name:
            names.append(value.func.name)
        elif field == "list":
            names.extend(f.name for f in value.list.func if f.name)
    return names


def functions_called(fdef, functions):
    """Names of the library functions ``fdef`` calls, directly or not (first-use order)."""
    found = {}
    stack = [fdef]
    while stack:
        current = stack.pop()
        for node in current.node_def:
            for name in ([node.op] if node.op in functions else []) + _func_names(node):
                if name in functions and name not in found and name != fdef.signature.name:
                    found[name] = True
                    stack.append(functions[name])
    return list(found)


def function_graph_def(fdef, functions=None, include_library=True):
    """A GraphDef of ``fdef``'s body, as TensorFlow instantiates it for a runtime.

    Arguments become ``_Arg`` nodes (attrs ``T``, ``index``) named like the argument, results
    ``_Retval`` nodes named ``<output>_RetVal``, and body inputs use flat ``node:port`` names.
    With ``include_library``, the functions the body calls are copied into the library so the
    file stands alone. An input whose port cannot be resolved (an op unknown to this TensorFlow)
    is kept in its FunctionDef form.
    """
    functions = functions or {}
    out = graph_pb2.GraphDef()
    flat = {}
    for index, arg in enumerate(fdef.signature.input_arg):
        node = out.node.add(name=arg.name, op="_Arg")
        node.attr["T"].type = arg.type
        node.attr["index"].i = index
        flat[arg.name] = arg.name
    for node in fdef.node_def:
        ports = output_port_names(node, functions)
        for k, suffix in enumerate(ports or ()):
            flat[f"{node.name}:{suffix}"] = format_input(node.name, k)
    for body in fdef.node_def:
        node = out.node.add()
        node.CopyFrom(body)
        del node.input[:]
        for text in body.input:
            if text.startswith("^"):
                node.input.append(text)
            else:
                node.input.append(flat.get(text, text))
    for index, arg in enumerate(fdef.signature.output_arg):
        node = out.node.add(name=f"{arg.name}_RetVal", op="_Retval")
        source = fdef.ret.get(arg.name, "")
        node.input.append(flat.get(source, source))
        node.attr["T"].type = arg.type
        node.attr["index"].i = index
    if include_library:
        for name in functions_called(fdef, functions):
            out.library.function.add().CopyFrom(functions[name])
    return out
