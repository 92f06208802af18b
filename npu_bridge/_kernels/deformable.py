"""``DeformableOffsets`` (the sampling half of a deformable convolution) and the deformable
convolution the original builds from it.

For every output position ``(oh, ow)`` and kernel tap ``(ky, kx)`` the op samples ``x`` at
``(oh * stride_h - pad_top + ky * dilation_h + dy, ow * stride_w - pad_left + kx * dilation_w +
dx)`` by bilinear interpolation (zero outside the image) and multiplies by the modulation mask
``m``, where ``dx, dy, m`` come from ``offsets`` (NHWC: ``[N, Ho, Wo, 3 * G * kh * kw]``, the
channels being all x offsets, then all y offsets, then all masks, each ordered by deformable group
``G``, ``ky``, ``kx``; input channel ``c`` uses group ``c // (C / G)``). The output,
``[N, Ho * kh, Wo * kw, C]``, holds tap ``(ky, kx)`` of position ``(oh, ow)`` at
``(oh * kh + ky, ow * kw + kx)``, so a ``VALID`` convolution with strides ``(kh, kw)`` over it is
the deformable convolution.
"""

import tensorflow as tf

from .common import finish_op, op_record

__all__ = [
    "deformable_conv2d",
    "deformable_offsets",
    "deformable_offsets_grad",
    "deformable_offsets_grad_kernel",
]

_FORMATS = ("NHWC", "NCHW")


def _four(values, what, op_type):
    values = [int(v) for v in values] if values is not None else None
    if values is None or len(values) != 4:
        raise ValueError(f"{op_type}: {what} must be a list of 4 ints, got {values!r}")
    return values


def _hw(values, data_format):
    return values[data_format.index("H")], values[data_format.index("W")]


def _bilinear_taps(x, pos_y, pos_x):
    """Sample ``x`` ``[N, H, W, G, Cg]`` at float positions ``[N, Ho, Wo, G, kh, kw]``; returns
    ``[N, Ho, Wo, G, kh, kw, Cg]``, zero where a corner lies outside the image."""
    shape = tf.shape(x)
    height, width = shape[1], shape[2]
    y0 = tf.floor(pos_y)
    x0 = tf.floor(pos_x)
    wy1 = pos_y - y0
    wx1 = pos_x - x0
    y0 = tf.cast(y0, tf.int32)
    x0 = tf.cast(x0, tf.int32)
    idx_shape = tf.shape(pos_y)
    batch = tf.broadcast_to(tf.reshape(tf.range(idx_shape[0]), [-1, 1, 1, 1, 1, 1]), idx_shape)
    group = tf.broadcast_to(tf.reshape(tf.range(idx_shape[3]), [1, 1, 1, -1, 1, 1]), idx_shape)
    total = None
    for dy, wy in ((0, 1.0 - wy1), (1, wy1)):
        for dx, wx in ((0, 1.0 - wx1), (1, wx1)):
            yy = y0 + dy
            xx = x0 + dx
            inside = (yy >= 0) & (yy < height) & (xx >= 0) & (xx < width)
            index = tf.stack([batch, tf.clip_by_value(yy, 0, height - 1),
                              tf.clip_by_value(xx, 0, width - 1), group], axis=-1)
            weight = wy * wx * tf.cast(inside, x.dtype)
            tap = tf.gather_nd(x, index) * tf.expand_dims(weight, -1)
            total = tap if total is None else total + tap
    return total


def deformable_offsets(x, offsets, strides, pads, ksize, dilations=(1, 1, 1, 1),
                       data_format="NHWC", deformable_groups=1, modulated=True, name=None):
    """The ``DeformableOffsets`` op (see the module doc); ``x`` and ``offsets`` in
    ``data_format``, the output too."""
    op_type = "DeformableOffsets"
    if data_format not in _FORMATS:
        raise ValueError(f"{op_type}: data_format must be one of {_FORMATS}, got {data_format!r}")
    strides = _four(strides, "strides", op_type)
    pads = _four(pads, "pads", op_type)
    dilations = _four(dilations, "dilations", op_type)
    ksize = [int(k) for k in ksize]
    if len(ksize) != 2 or min(ksize) < 1:
        raise ValueError(f"{op_type}: ksize must be 2 positive ints, got {ksize!r}")
    if not modulated:
        raise ValueError(f"{op_type}: only modulated=True (deformable convolution v2) is "
                         "supported")
    groups = int(deformable_groups)
    kh, kw = ksize
    stride_h, stride_w = _hw(strides, data_format)
    dil_h, dil_w = _hw(dilations, data_format)
    pad_top, _, pad_left, _ = pads
    attrs = {"strides": strides, "pads": pads, "ksize": ksize, "dilations": dilations,
             "data_format": data_format, "deformable_groups": groups, "modulated": True}
    with tf.name_scope(name or op_type):
        x = tf.convert_to_tensor(x, name="x")
        offsets = tf.convert_to_tensor(offsets, dtype=x.dtype, name="offsets")
        inputs = [x, offsets]
        if x.shape.rank not in (None, 4) or offsets.shape.rank not in (None, 4):
            raise ValueError(f"{op_type}: x and offsets must be 4-D, got {x.shape} and "
                             f"{offsets.shape}")
        if data_format == "NCHW":
            x = tf.transpose(x, [0, 2, 3, 1])
            offsets = tf.transpose(offsets, [0, 2, 3, 1])
        channels = tf.compat.dimension_value(x.shape[3])
        if channels is not None and channels % groups:
            raise ValueError(f"{op_type}: the {channels} input channels are not divisible by "
                             f"deformable_groups={groups}")
        off_channels = tf.compat.dimension_value(offsets.shape[3])
        if off_channels is not None and off_channels != 3 * groups * kh * kw:
            raise ValueError(f"{op_type}: offsets must have 3 * deformable_groups * kh * kw = "
                             f"{3 * groups * kh * kw} channels, got {off_channels}")
        x_shape = tf.shape(x)
        off_shape = tf.shape(offsets)
        n, out_h, out_w = off_shape[0], off_shape[1], off_shape[2]
        parts = tf.reshape(offsets, tf.stack([n, out_h, out_w, 3, groups, kh, kw]))
        base_y = (tf.reshape(tf.range(out_h) * stride_h - pad_top, [1, -1, 1, 1, 1, 1])
                  + tf.reshape(tf.range(kh) * dil_h, [1, 1, 1, 1, -1, 1]))
        base_x = (tf.reshape(tf.range(out_w) * stride_w - pad_left, [1, 1, -1, 1, 1, 1])
                  + tf.reshape(tf.range(kw) * dil_w, [1, 1, 1, 1, 1, -1]))
        pos_x = tf.cast(base_x, x.dtype) + parts[:, :, :, 0]
        pos_y = tf.cast(base_y, x.dtype) + parts[:, :, :, 1]
        grouped = tf.reshape(x, tf.stack([x_shape[0], x_shape[1], x_shape[2], groups, -1]))
        taps = _bilinear_taps(grouped, pos_y, pos_x) * tf.expand_dims(parts[:, :, :, 2], -1)
        # [N, Ho, Wo, G, kh, kw, Cg] -> [N, Ho, kh, Wo, kw, G, Cg] -> [N, Ho*kh, Wo*kw, C]
        taps = tf.transpose(taps, [0, 1, 4, 2, 5, 3, 6])
        y = tf.reshape(taps, tf.stack([n, out_h * kh, out_w * kw, x_shape[3]]))
        if channels is not None:
            y.set_shape([None, None, None, channels])
        if data_format == "NCHW":
            y = tf.transpose(y, [0, 3, 1, 2])
        return finish_op(op_type, inputs, [y], attrs)[0]


def deformable_offsets_grad(op, grad):
    """The original's gradient of ``DeformableOffsets``: ``[grad_x, grad_offsets]`` for an op
    made by :func:`deformable_offsets` and the upstream gradient ``grad``."""
    record = op_record(op, "DeformableOffsets")
    x, offsets = record.inputs
    grads = tf.gradients(record.inner_outputs[0], [x, offsets], grad_ys=grad)
    return [tf.zeros_like(t) if g is None else g for t, g in zip((x, offsets), grads)]


def deformable_conv2d(x, filter, offsets, strides=None, pads=None,
                      data_format="NHWC", dilations=(1, 1, 1, 1), groups=1, deformable_groups=1,
                      modulated=True, name=None):
    """A deformable convolution (v2): :func:`deformable_offsets` with the filter's size, then a
    ``VALID`` convolution with strides ``(kh, kw)``. ``filter`` is ``[kh, kw, C, Cout]``."""
    if not modulated:
        raise RuntimeError("tf.deformable_conv2d() only supports modulated is True currently")
    if groups != 1:
        raise RuntimeError("tf.deformable_conv2d() only supports groups is 1 currently")
    if strides is None or pads is None:
        raise ValueError("deformable_conv2d: strides and pads are required (lists of 4 ints)")
    filter = tf.convert_to_tensor(filter, name="filter")
    kh, kw = (tf.compat.dimension_value(d) for d in filter.shape[:2]) \
        if filter.shape.rank == 4 else (None, None)
    if kh is None or kw is None:
        raise ValueError(f"deformable_conv2d: the filter's height and width must be known, got "
                         f"shape {filter.shape}")
    with tf.name_scope(name or "deformable_conv2d"):
        sampled = deformable_offsets(x, offsets, strides, pads, [kh, kw], dilations=dilations,
                                     data_format=data_format,
                                     deformable_groups=deformable_groups, modulated=True)
        if data_format == "NCHW":
            sampled = tf.transpose(sampled, [0, 2, 3, 1])
        out = tf.nn.conv2d(sampled, tf.cast(filter, sampled.dtype), strides=[1, kh, kw, 1],
                           padding="VALID")
        return tf.transpose(out, [0, 3, 1, 2]) if data_format == "NCHW" else out


def deformable_offsets_grad_kernel(grad, x, offsets, strides, pads, ksize, dilations=(1, 1, 1, 1),
                                   data_format="NHWC", deformable_groups=1, modulated=True,
                                   name=None):
    """The ``DeformableOffsetsGrad`` kernel op: ``(grad_x, grad_offsets)`` of
    :func:`deformable_offsets` at ``x``/``offsets`` for the upstream gradient ``grad``."""
    with tf.name_scope(name or "DeformableOffsetsGrad"):
        x = tf.convert_to_tensor(x, name="x")
        offsets = tf.convert_to_tensor(offsets, dtype=x.dtype, name="offsets")
        with tf.GradientTape() as tape:
            tape.watch([x, offsets])
            y = deformable_offsets(x, offsets, strides, pads, ksize, dilations=dilations,
                                   data_format=data_format, deformable_groups=deformable_groups,
                                   modulated=modulated)
        grad_x, grad_offsets = tape.gradient(y, [x, offsets],
                                             output_gradients=tf.convert_to_tensor(grad, x.dtype))
        return grad_x, grad_offsets
