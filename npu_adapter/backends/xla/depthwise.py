"""Depthwise convolutions as XLA compiles them well: a sum of shifted, per-channel products.

XLA's CPU code turns a depthwise convolution (``DepthwiseConv2dNative``, a convolution with one
feature group per channel) into a dense convolution over all channels, C times the work:
measured here with TensorFlow 2.21, a 3x3 depthwise layer of MobileNetV2 takes 25-195 ms
compiled against 0.5-4 ms on TensorFlow's kernel, and the whole of MobileNetV2 runs 6-7x slower
compiled than on TensorFlow's kernels. Written as what it computes — for each of the kh x kw
filter taps, the padded input sliced at that tap's offset (with the stride), times that tap's
per-channel weights, all summed — XLA fuses the taps into one elementwise loop with the
neighbouring batch norm and activation: the same layers take 0.3-8 ms, and MobileNetV2 runs
faster compiled than on TensorFlow's kernels (figures: ``docs/xla.md``).

:func:`decompose_depthwise` rewrites the ``DepthwiseConv2dNative`` nodes of one function body
(the copy XLA compiles; TensorFlow's kernels keep the original op). A node is rewritten when its
filter's shape is known at graph time (a constant, or a constant passed in as an argument), its
channel multiplier is 1 (MobileNet, EfficientNet, Xception) and its dtype is float32 or float64;
others are left as they are (the backend's per-cluster measurement then keeps a cluster that
loses on TensorFlow's kernels). The sums run in another order than TensorFlow's kernel: results
differ by float rounding, as every XLA result does.
"""

from tensorflow.core.framework import function_pb2, node_def_pb2, types_pb2

__all__ = ["DEPTHWISE_OP", "decompose_depthwise"]

DEPTHWISE_OP = "DepthwiseConv2dNative"
_FLOATS = (types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE)
_INT32 = types_pb2.DT_INT32
_SCOPE = "npu_adapter_taps"


def _const(name, values, dtype=_INT32, shape=None):
    node = node_def_pb2.NodeDef(name=name, op="Const")
    node.attr["dtype"].type = dtype
    tensor = node.attr["value"].tensor
    tensor.dtype = dtype
    values = list(values)
    for d in (shape if shape is not None else [len(values)]):
        tensor.tensor_shape.dim.add(size=d)
    tensor.int_val.extend(values)
    return node


_TYPE_ATTRS = frozenset({"T", "Index", "Tpaddings", "out_type", "Tidx", "Tshape", "Tparams",
                         "Tindices", "Taxis"})


def _node(name, op, inputs, **attrs):
    """A NodeDef; attrs named in ``_TYPE_ATTRS`` are dtypes, the others ints."""
    node = node_def_pb2.NodeDef(name=name, op=op, input=list(inputs))
    for key, value in attrs.items():
        if key in _TYPE_ATTRS:
            node.attr[key].type = value
        else:
            node.attr[key].i = value
    return node


def _strided_slice(name, source, begin, end, strides, dtype, nodes, begin_mask=0, end_mask=0,
                   shrink=0):
    nodes.append(_const(f"{name}/begin", begin))
    nodes.append(_const(f"{name}/end", end))
    nodes.append(_const(f"{name}/strides", strides))
    nodes.append(_node(name, "StridedSlice",
                       [source, f"{name}/begin:output:0", f"{name}/end:output:0",
                        f"{name}/strides:output:0"], T=dtype, Index=_INT32,
                       begin_mask=begin_mask, end_mask=end_mask, ellipsis_mask=0,
                       new_axis_mask=0, shrink_axis_mask=shrink))
    return f"{name}:output:0"


def _producer(ref):
    """The node or argument name of a FunctionDef input reference (``n:out:0`` or ``arg``)."""
    return ref.lstrip("^").split(":")[0]


def _filter_shape(ref, nodes, arg_shapes):
    """The static shape of the tensor ``ref`` names, following Identity nodes to a Const or a
    function argument (None when unknown)."""
    seen = set()
    while True:
        name = _producer(ref)
        if name in seen:
            return None
        seen.add(name)
        node = nodes.get(name)
        if node is None:
            return arg_shapes.get(name)
        if node.op == "Const":
            shape = node.attr["value"].tensor.tensor_shape
            return None if shape.unknown_rank else tuple(d.size for d in shape.dim)
        if node.op != "Identity" or not node.input:
            return None
        ref = node.input[0]


def _rewrite_node(node, filter_shape, new_nodes):
    """Append to ``new_nodes`` the nodes computing ``node`` (a DepthwiseConv2dNative) as shifted
    products; the last one is an Identity with the node's name, so references stay valid."""
    nchw = node.attr["data_format"].s == b"NCHW" if "data_format" in node.attr else False
    h_axis, w_axis, c_axis = (2, 3, 1) if nchw else (1, 2, 3)
    strides = list(node.attr["strides"].list.i)
    dilations = list(node.attr["dilations"].list.i) if "dilations" in node.attr else [1] * 4
    if not dilations:
        dilations = [1] * 4
    kh, kw = filter_shape[0], filter_shape[1]
    sh, sw = strides[h_axis], strides[w_axis]
    dh, dw = dilations[h_axis], dilations[w_axis]
    eff_h, eff_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    padding = node.attr["padding"].s
    base = f"{node.name}/{_SCOPE}"
    x, w = node.input[0], node.input[1]
    controls = [ref for ref in node.input if ref.startswith("^")]
    t = node.attr["T"].type
    out = []
    paddings = None
    if padding == b"EXPLICIT":
        flat = list(node.attr["explicit_paddings"].list.i)
        paddings = [flat[2 * k:2 * k + 2] for k in range(4)]
    elif padding == b"SAME" and sh == 1 and sw == 1:
        paddings = [[0, 0]] * 4
        paddings[h_axis] = [(eff_h - 1) // 2, eff_h - 1 - (eff_h - 1) // 2]
        paddings[w_axis] = [(eff_w - 1) // 2, eff_w - 1 - (eff_w - 1) // 2]
    padded = x
    if paddings is not None and any(p for pair in paddings for p in pair):
        out.append(_const(f"{base}/paddings", [p for pair in paddings for p in pair],
                          shape=[4, 2]))
        out.append(_node(f"{base}/pad", "Pad", [x, f"{base}/paddings:output:0"], T=t,
                         Tpaddings=_INT32))
        padded = f"{base}/pad:output:0"
    elif paddings is None and padding == b"SAME":
        padded = _dynamic_same_pad(base, x, t, (h_axis, w_axis), (sh, sw), (eff_h, eff_w),
                                   out)
    terms = []
    for i in range(kh):
        for j in range(kw):
            tap = f"{base}/tap_{i}_{j}"
            begin, end, step = [0] * 4, [0] * 4, [1] * 4
            begin_mask = end_mask = 0
            for axis, offset, k, d, s in ((h_axis, i, kh, dh, sh), (w_axis, j, kw, dw, sw)):
                begin[axis] = offset * d
                step[axis] = s
                if offset == k - 1:
                    end_mask |= 1 << axis
                else:
                    end[axis] = -(k - 1 - offset) * d
            for axis in (0, c_axis):
                begin_mask |= 1 << axis
                end_mask |= 1 << axis
            window = _strided_slice(f"{tap}/window", padded, begin, end, step, t, out,
                                    begin_mask=begin_mask, end_mask=end_mask)
            # Filter [kh, kw, C, 1] -> the tap's per-channel weights [C].
            weights = _strided_slice(f"{tap}/weights", w, [i, j, 0, 0], [i + 1, j + 1, 0, 1],
                                     [1, 1, 1, 1], t, out, begin_mask=1 << 2,
                                     end_mask=1 << 2, shrink=0b1011)
            if nchw:  # [C] -> [C, 1, 1] to broadcast over H and W
                out.append(_const(f"{tap}/channel_shape", [-1, 1, 1]))
                out.append(_node(f"{tap}/channel", "Reshape",
                                 [weights, f"{tap}/channel_shape:output:0"], T=t,
                                 Tshape=_INT32))
                weights = f"{tap}/channel:output:0"
            out.append(_node(f"{tap}/product", "Mul", [window, weights], T=t))
            terms.append(f"{tap}/product:z:0")
    total = _node(f"{base}/sum", "AddN", terms, T=t, N=len(terms))
    out.append(total)
    result = _node(node.name, "Identity", [f"{base}/sum:sum:0"] + controls, T=t)
    out.append(result)
    for new in out:
        if node.device:
            new.device = node.device
    new_nodes.extend(out)


def _dynamic_same_pad(base, x, t, axes, strides, extents, out):
    """``x`` padded as TensorFlow pads for ``SAME`` with a stride above 1, where the paddings
    depend on the spatial size: computed from ``Shape(x)``, which XLA folds to constants."""
    h_axis, w_axis = axes
    out.append(_node(f"{base}/shape", "Shape", [x], T=t, out_type=_INT32))
    out.append(_const(f"{base}/axes", [h_axis, w_axis]))
    out.append(_const(f"{base}/axis0", [0], shape=[]))
    out.append(_node(f"{base}/size", "GatherV2",
                     [f"{base}/shape:output:0", f"{base}/axes:output:0",
                      f"{base}/axis0:output:0"],
                     batch_dims=0, Tparams=_INT32, Tindices=_INT32, Taxis=_INT32))
    size = f"{base}/size:output:0"
    out.append(_const(f"{base}/stride", list(strides)))
    out.append(_const(f"{base}/extent", list(extents)))
    out.append(_const(f"{base}/one", [1, 1]))
    out.append(_const(f"{base}/zero", [0, 0]))
    out.append(_const(f"{base}/two", [2, 2]))

    def binary(name, op, a, b):
        out.append(_node(f"{base}/{name}", op, [a, b], T=_INT32))
        return f"{base}/{name}:z:0"

    # out = ceil(size / stride); total = max((out - 1) * stride + extent - size, 0)
    stride, extent = f"{base}/stride:output:0", f"{base}/extent:output:0"
    one, zero, two = f"{base}/one:output:0", f"{base}/zero:output:0", f"{base}/two:output:0"
    rounded = binary("rounded", "AddV2", size, binary("stride_less_one", "Sub", stride, one))
    count = binary("count", "FloorDiv", rounded, stride)
    span = binary("span", "Mul", binary("count_less_one", "Sub", count, one), stride)
    needed = binary("needed", "Sub", binary("reach", "AddV2", span, extent), size)
    total = binary("total", "Maximum", needed, zero)
    before = binary("before", "FloorDiv", total, two)
    after = binary("after", "Sub", total, before)
    # paddings [4, 2]: zero rows, with (before, after) of H and W at their axes.
    pack = _node(f"{base}/spatial", "Pack", [before, after], T=_INT32, N=2, axis=1)
    out.append(pack)
    spatial = f"{base}/spatial:output:0"  # [2, 2]: rows H, W
    out.append(_const(f"{base}/zero_row", [0, 0], shape=[1, 2]))
    zero_row = f"{base}/zero_row:output:0"
    if (h_axis, w_axis) == (1, 2):
        rows = [zero_row, spatial, zero_row]
    else:
        rows = [zero_row, zero_row, spatial]
    out.append(_const(f"{base}/concat_axis", [0], shape=[]))
    concat = _node(f"{base}/paddings", "ConcatV2", rows + [f"{base}/concat_axis:output:0"],
                   T=_INT32, N=3, Tidx=_INT32)
    out.append(concat)
    out.append(_node(f"{base}/pad", "Pad", [x, f"{base}/paddings:output:0"], T=t,
                     Tpaddings=_INT32))
    return f"{base}/pad:output:0"


def decompose_depthwise(fdef, arg_shapes):
    """A copy of ``fdef`` whose rewritable ``DepthwiseConv2dNative`` nodes (see the module
    docstring) are shifted products, and how many were rewritten; ``(None, 0)`` when none is.

    Args:
        fdef: a ``FunctionDef`` (not modified).
        arg_shapes: argument name → static shape tuple, for the arguments whose shape the
            caller knows (constants passed in).
    """
    nodes = {node.name: node for node in fdef.node_def}
    chosen = {}
    for node in fdef.node_def:
        if node.op != DEPTHWISE_OP or len(node.input) < 2:
            continue
        if node.attr["T"].type not in _FLOATS:
            continue
        shape = _filter_shape(node.input[1], nodes, arg_shapes)
        if shape is None or len(shape) != 4 or shape[3] != 1 or min(shape) < 1:
            continue
        chosen[node.name] = shape
    if not chosen:
        return None, 0
    out = function_pb2.FunctionDef()
    out.CopyFrom(fdef)
    del out.node_def[:]
    for node in fdef.node_def:
        if node.name in chosen:
            _rewrite_node(node, chosen[node.name], out.node_def)
        else:
            out.node_def.add().CopyFrom(node)
    return out, len(chosen)
