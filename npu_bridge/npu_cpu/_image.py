"""Image warps of :mod:`npu_bridge.npu_cpu.npu_cpu_ops`: dense flow warp (with its gradient),
resize and affine warp, built from TensorFlow ops.

``dense_image_warp(image, flow)``: ``image`` ``[B, H, W, C]``, ``flow`` ``[B, H, W, 2]``;
``out[b, y, x] = image[b, y - flow[b, y, x, 0], x - flow[b, y, x, 1]]`` sampled bilinearly. The
sample point is clamped as the reference implementation of this op does (TensorFlow Addons'
``dense_image_warp``): the top-left neighbour index is clipped to ``[0, size - 2]`` and the
fraction to ``[0, 1]``, so points outside the image take the edge values. ``H`` and ``W`` must be
at least 2. The gradient (``DenseImageWarpGrad``) is the exact derivative of that: the output
gradient is scattered onto the four neighbours with the bilinear weights, and the flow gradient is
minus the interpolation slope wherever the fraction was not clipped.

``resize_v2(x, dst_size)``: ``x`` ``[H, W, C]`` (uint8 or float32) to ``[dst_h, dst_w, C]``,
bilinear with half-pixel centres (``INTEL_BILINEAR``/``BILINEAR``) or nearest neighbour
(``NEAREST``); uint8 results are rounded and saturated.

``warp_affine_v2(x, matrix, dst_size)``: ``matrix`` (2x3, float32) maps source pixel coordinates
to destination ones (``dst = M @ [x, y, 1]``, OpenCV's convention); each destination pixel takes
the source value at the inverse map, bilinear or nearest, with ``BORDER_CONSTANT`` (the value
``border_value``), ``BORDER_REPLICATE``, ``BORDER_REFLECT`` or ``BORDER_WRAP`` outside.
"""

import tensorflow as tf

__all__ = ["dense_image_warp", "dense_image_warp_backward", "resize_v2", "warp_affine_v2"]

_WARP_DTYPES = (tf.float16, tf.float32)


def _corners(image, flow):
    """Bilinear sample geometry: corner values, fractions and the unclipped masks."""
    shape = tf.shape(image)
    batch, height, width = shape[0], shape[1], shape[2]
    flow = tf.cast(flow, tf.float32)
    grid_y, grid_x = tf.meshgrid(tf.range(height), tf.range(width), indexing="ij")
    qy = tf.cast(grid_y, tf.float32)[None] - flow[..., 0]
    qx = tf.cast(grid_x, tf.float32)[None] - flow[..., 1]

    def axis(q, size):
        top = tf.clip_by_value(tf.floor(q), 0.0, tf.cast(size - 2, tf.float32))
        raw = q - top
        alpha = tf.clip_by_value(raw, 0.0, 1.0)
        inside = tf.cast((raw >= 0.0) & (raw <= 1.0), tf.float32)
        return tf.cast(top, tf.int32), alpha, inside

    y0, ay, my = axis(qy, height)
    x0, ax, mx = axis(qx, width)
    b = tf.broadcast_to(tf.range(batch)[:, None, None], tf.shape(y0))

    def index(dy, dx):
        return tf.stack([b, y0 + dy, x0 + dx], axis=-1)

    idx = {key: index(*key) for key in ((0, 0), (0, 1), (1, 0), (1, 1))}
    return idx, ay[..., None], ax[..., None], my[..., None], mx[..., None]


def _check_warp_inputs(image, flow):
    if image.dtype not in _WARP_DTYPES or flow.dtype not in _WARP_DTYPES:
        raise TypeError(f"dense_image_warp: image and flow must be float16 or float32, got "
                        f"{image.dtype.name} and {flow.dtype.name}")
    if image.shape.rank not in (None, 4) or flow.shape.rank not in (None, 4):
        raise ValueError(f"dense_image_warp: image must be [B, H, W, C] and flow [B, H, W, 2], "
                         f"got shapes {image.shape} and {flow.shape}")
    if flow.shape.rank == 4 and flow.shape[-1] not in (None, 2):
        raise ValueError(f"dense_image_warp: the last dimension of flow must be 2, got "
                         f"{flow.shape}")
    shape = tf.shape(image)
    return [tf.debugging.assert_greater_equal(
                shape[1:3], 2, message="dense_image_warp: height and width must be >= 2"),
            tf.debugging.assert_equal(
                tf.shape(flow)[:3], shape[:3],
                message="dense_image_warp: flow must have the batch, height and width of "
                        "image")]


def _warp_forward(image, flow):
    idx, ay, ax, _, _ = _corners(image, flow)
    img = tf.cast(image, tf.float32)
    tl, tr = tf.gather_nd(img, idx[0, 0]), tf.gather_nd(img, idx[0, 1])
    bl, br = tf.gather_nd(img, idx[1, 0]), tf.gather_nd(img, idx[1, 1])
    top = tl + ax * (tr - tl)
    bottom = bl + ax * (br - bl)
    return tf.cast(top + ay * (bottom - top), image.dtype)


def dense_image_warp_backward(grad, image, flow):
    """``(grad_image, grad_flow)`` of :func:`dense_image_warp` for the output gradient
    ``grad`` (the ``DenseImageWarpGrad`` op)."""
    with tf.name_scope("DenseImageWarpGrad"):
        image = tf.convert_to_tensor(image)
        flow = tf.convert_to_tensor(flow)
        idx, ay, ax, my, mx = _corners(image, flow)
        g = tf.cast(grad, tf.float32)
        img = tf.cast(image, tf.float32)
        weights = {(0, 0): (1 - ay) * (1 - ax), (0, 1): (1 - ay) * ax,
                   (1, 0): ay * (1 - ax), (1, 1): ay * ax}
        grad_image = tf.zeros_like(img)
        for key, weight in weights.items():
            grad_image = tf.tensor_scatter_nd_add(grad_image, idx[key], g * weight)
        tl, tr = tf.gather_nd(img, idx[0, 0]), tf.gather_nd(img, idx[0, 1])
        bl, br = tf.gather_nd(img, idx[1, 0]), tf.gather_nd(img, idx[1, 1])
        d_ay = (bl - tl) * (1 - ax) + (br - tr) * ax
        d_ax = (tr - tl) * (1 - ay) + (br - bl) * ay
        # q = grid - flow, so d out / d flow = -(d out / d q), zero where the fraction clipped.
        grad_fy = -tf.reduce_sum(g * d_ay * my, axis=-1)
        grad_fx = -tf.reduce_sum(g * d_ax * mx, axis=-1)
        grad_flow = tf.stack([grad_fy, grad_fx], axis=-1)
        return tf.cast(grad_image, image.dtype), tf.cast(grad_flow, flow.dtype)


def dense_image_warp(image, flow, name=None):
    """Warp ``image`` by the dense ``flow`` (see the module doc); differentiable."""
    with tf.name_scope(name or "DenseImageWarp"):
        image = tf.convert_to_tensor(image, name="image")
        flow = tf.convert_to_tensor(flow, name="flow")
        checks = _check_warp_inputs(image, flow)

        @tf.custom_gradient
        def warp(image, flow):
            def grad_fn(upstream):
                return dense_image_warp_backward(upstream, image, flow)

            return _warp_forward(image, flow), grad_fn

        with tf.control_dependencies(checks):
            return warp(tf.identity(image), tf.identity(flow))


_RESIZE_METHODS = {"INTEL_BILINEAR": "bilinear", "BILINEAR": "bilinear", "NEAREST": "nearest"}
_RESIZE_DTYPES = (tf.uint8, tf.float32)


def _image_input(x, api):
    x = tf.convert_to_tensor(x, name="x")
    if x.dtype not in _RESIZE_DTYPES:
        raise TypeError(f"{api}: x must be uint8 or float32, got {x.dtype.name}")
    if x.shape.rank not in (None, 3):
        raise ValueError(f"{api}: x must be a [height, width, channels] image, got shape "
                         f"{x.shape}")
    return x


def _dst_size(dst_size, api):
    size = tf.convert_to_tensor(dst_size, name="dst_size")
    if size.dtype not in (tf.int32, tf.int64):
        raise TypeError(f"{api}: dst_size must be int32 or int64, got {size.dtype.name}")
    check = tf.debugging.assert_equal(tf.size(size), 2,
                                      message=f"{api}: dst_size must be [height, width]")
    with tf.control_dependencies([check]):
        size = tf.cast(size, tf.int32)
    return size


def _to_dtype(values, dtype):
    if dtype == tf.uint8:
        return tf.cast(tf.clip_by_value(tf.round(values), 0.0, 255.0), tf.uint8)
    return tf.cast(values, dtype)


def _method(interpolation, api, allowed):
    method = allowed.get(interpolation)
    if method is None:
        raise ValueError(f"{api}: interpolation {interpolation!r} is not supported; use one of "
                         f"{sorted(allowed)}")
    return method


def resize_v2(x, dst_size, interpolation="INTEL_BILINEAR", name=None):
    """Resize the image ``x`` to ``dst_size`` = [height, width] (see the module doc)."""
    method = _method(interpolation, "resize_v2", _RESIZE_METHODS)
    with tf.name_scope(name or "ResizeV2"):
        x = _image_input(x, "resize_v2")
        size = _dst_size(dst_size, "resize_v2")
        resized = tf.image.resize(tf.cast(x, tf.float32), size, method=method)
        return _to_dtype(resized, x.dtype)


_BORDERS = {"BORDER_CONSTANT": "CONSTANT", "BORDER_REPLICATE": "NEAREST",
            "BORDER_REFLECT": "REFLECT", "BORDER_WRAP": "WRAP"}
_WARP_METHODS = {"INTEL_BILINEAR": "BILINEAR", "BILINEAR": "BILINEAR", "NEAREST": "NEAREST"}


def warp_affine_v2(x, matrix, dst_size, interpolation="INTEL_BILINEAR",
                   border_type="BORDER_CONSTANT", border_value=0, name=None):
    """Affine warp of the image ``x`` (see the module doc)."""
    method = _method(interpolation, "warp_affine_v2", _WARP_METHODS)
    fill_mode = _BORDERS.get(border_type)
    if fill_mode is None:
        raise ValueError(f"warp_affine_v2: border_type {border_type!r} is not supported; use "
                         f"one of {sorted(_BORDERS)}")
    if isinstance(border_value, bool) or not isinstance(border_value, (int, float)):
        raise TypeError(f"warp_affine_v2: border_value must be a number, got {border_value!r}")
    with tf.name_scope(name or "WarpAffineV2"):
        x = _image_input(x, "warp_affine_v2")
        size = _dst_size(dst_size, "warp_affine_v2")
        m = tf.reshape(tf.cast(tf.convert_to_tensor(matrix, name="matrix"), tf.float32), [2, 3])
        a, b, c = m[0, 0], m[0, 1], m[0, 2]
        d, e, f = m[1, 0], m[1, 1], m[1, 2]
        det = a * e - b * d
        check = tf.debugging.assert_none_equal(det, 0.0,
                                               message="warp_affine_v2: matrix is singular")
        with tf.control_dependencies([check]):
            inv = [e / det, -b / det, (b * f - c * e) / det,
                   -d / det, a / det, (c * d - a * f) / det, 0.0, 0.0]
        transform = tf.reshape(tf.stack(inv), [1, 8])
        warped = tf.raw_ops.ImageProjectiveTransformV3(
            images=tf.cast(x, tf.float32)[None], transforms=transform, output_shape=size,
            fill_value=float(border_value), interpolation=method, fill_mode=fill_mode)
        return _to_dtype(warped[0], x.dtype)
