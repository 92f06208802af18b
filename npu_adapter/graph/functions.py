"""Building FunctionDefs from GraphDefs.

Passes that need a helper function (the gear dispatcher, for instance) write its body as an
ordinary ``tf.Graph`` with placeholders for the arguments, then convert the GraphDef here: every
input ``"node:port"`` becomes the FunctionDef form ``"node:<output arg>:<index>"`` and the
placeholders become the function's arguments. Node names are the graph's, so the result is as
deterministic as the graph it came from.
"""

from tensorflow.core.framework import function_pb2

from npu_adapter.errors import GraphError
from npu_adapter.graph.names import parse_input
from npu_adapter.graph.types import output_port_names

__all__ = ["graph_to_function_def", "rename_function", "pin_arg_shapes", "unpin_arg_shapes"]


def graph_to_function_def(graph_def, name, inputs, outputs, *, is_stateful=False,
                          control_outputs=()):
    """Convert ``graph_def`` into a FunctionDef.

    Args:
        graph_def: the body; placeholders named in ``inputs`` are the arguments.
        name: the function name.
        inputs: list of ``(placeholder node name, arg name, dtype enum)``.
        outputs: list of ``(tensor name "node:port", output arg name, dtype enum)``.
        is_stateful: the signature's ``is_stateful``.
        control_outputs: node names that must run whenever the function runs.
    """
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = name
    fdef.signature.is_stateful = is_stateful
    arg_of = {}
    for node_name, arg_name, dtype in inputs:
        arg = fdef.signature.input_arg.add()
        arg.name = arg_name
        arg.type = dtype
        arg_of[node_name] = arg_name
    nodes = {n.name: n for n in graph_def.node}
    port_names = {}

    def ref(text):
        node, port, is_control = parse_input(text)
        if is_control:
            return "^" + node
        if node in arg_of:
            if port != 0:
                raise GraphError(f"argument placeholder {node!r} has a single output")
            return arg_of[node]
        names = port_names.get(node)
        if names is None:
            if node not in nodes:
                raise GraphError(f"function {name!r}: input {text!r} names no node of the body")
            names = port_names[node] = output_port_names(nodes[node], None)
            if names is None:
                raise GraphError(f"function {name!r}: cannot map outputs of op "
                                 f"{nodes[node].op!r} (not registered)")
        return f"{node}:{names[port]}"

    for node in graph_def.node:
        if node.name in arg_of:
            continue
        body = fdef.node_def.add()
        body.CopyFrom(node)
        del body.input[:]
        body.input.extend(ref(t) for t in node.input)
    for tensor, out_name, dtype in outputs:
        arg = fdef.signature.output_arg.add()
        arg.name = out_name
        arg.type = dtype
        fdef.ret[out_name] = ref(tensor)
    for node_name in control_outputs:
        fdef.signature.control_output.append(node_name.replace("/", "_").lower())
        fdef.control_ret[node_name.replace("/", "_").lower()] = node_name
    return fdef


def rename_function(fdef, new_name):
    """A copy of ``fdef`` named ``new_name``."""
    out = function_pb2.FunctionDef()
    out.CopyFrom(fdef)
    out.signature.name = new_name
    return out


def pin_arg_shapes(fdef, shapes):
    """A copy of ``fdef`` whose arguments ``shapes`` (arg index → tuple of ints) are static.

    Each such argument gets its shape as the ``_output_shapes`` arg attr (what shape inference
    inside the function sees) and goes through an ``EnsureShape`` node (a runtime check), and
    the body reads the checked value.
    """
    import tensorflow as tf

    out = function_pb2.FunctionDef()
    out.CopyFrom(fdef)
    renames = {}
    for k in sorted(shapes):
        arg = out.signature.input_arg[k]
        proto = tf.TensorShape(list(shapes[k])).as_proto()
        out.arg_attr[k].attr["_output_shapes"].list.shape.add().CopyFrom(proto)
        ensure = out.node_def.add()
        ensure.name = f"{arg.name}_pinned_shape"
        ensure.op = "EnsureShape"
        ensure.input.append(arg.name)
        ensure.attr["T"].type = arg.type
        ensure.attr["shape"].shape.CopyFrom(proto)
        renames[arg.name] = f"{ensure.name}:output:0"
    ensures = {f"{a}_pinned_shape" for a in renames}
    for node in out.node_def:
        if node.name in ensures:
            continue
        for pos, text in enumerate(node.input):
            if text in renames:
                node.input[pos] = renames[text]
    for key, value in list(out.ret.items()):
        if value in renames:
            out.ret[key] = renames[value]
    return out


def unpin_arg_shapes(fdef):
    """The inverse of :func:`pin_arg_shapes`: a copy of ``fdef`` without the ``EnsureShape``
    nodes and ``_output_shapes`` arg attrs that pinned its arguments' shapes (a gear copy of a
    cluster becomes the cluster's shape-polymorphic body again)."""
    out = function_pb2.FunctionDef()
    out.CopyFrom(fdef)
    args = {a.name for a in out.signature.input_arg}
    renames = {}
    keep = []
    for node in out.node_def:
        arg = node.name[:-len("_pinned_shape")] if node.name.endswith("_pinned_shape") else None
        if node.op == "EnsureShape" and arg in args and list(node.input) == [arg]:
            renames[f"{node.name}:output:0"] = arg
            continue
        keep.append(node)
    if not renames:
        return out
    del out.node_def[:]
    for node in keep:
        copy = out.node_def.add()
        copy.CopyFrom(node)
        for pos, text in enumerate(copy.input):
            if text in renames:
                copy.input[pos] = renames[text]
    for key, value in list(out.ret.items()):
        if value in renames:
            out.ret[key] = renames[value]
    pinned = {renames[k] for k in renames}
    for k, arg in enumerate(out.signature.input_arg):
        if arg.name in pinned and k in out.arg_attr:
            attrs = out.arg_attr[k].attr
            if "_output_shapes" in attrs:
                del attrs["_output_shapes"]
            if not attrs:
                del out.arg_attr[k]
    return out
