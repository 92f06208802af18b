"""OCR pre- and post-processing ops of :mod:`npu_bridge.npu_cpu.npu_cpu_ops`.

On the device these are AI CPU kernels of a text-detection pipeline (a DBNet-style detector
followed by a recogniser). The original documents their inputs and outputs, not their exact
algorithms; this module defines each one precisely (``docs/api-modules.md`` has the same text)
and computes it on the host. Geometry-free steps are TensorFlow ops; contour tracing, polygon
dilation and cropping are NumPy functions run through ``tf.numpy_function`` (host ops: a graph
that uses them runs in the process that built it).

Polygon sets use three int32 vectors: ``polys_data`` holds the ``(x, y)`` points of every
polygon one after another, ``polys_offset[i]`` is the index in ``polys_data`` where polygon
``i`` starts and ``polys_size[i]`` its number of points. Image sets likewise: ``imgs_data``
(uint8, flattened images), ``imgs_offset`` (start of each image) and ``imgs_size`` (``[n, 3]``:
height, width, channels). ``data_format`` ``NHWC`` (channels last) or ``NCHW`` (channels first)
describes each image.

* ``ocr_detection_pre_handle(img)``: the 3-channel image resized (bilinear, half-pixel centres)
  to a square whose side is 480 when its longer side is at most 720, 960 up to 1440, else 1920;
  returns ``(resized_img, h_scale, w_scale)`` with ``h_scale = side / height`` and
  ``w_scale = side / width``.
* ``ocr_find_contours(img, value_mode)``: the outer boundary of every 8-connected component of
  the foreground of the 2-D binary image (pixels equal to 1 with ``value_mode`` 0, to 255 with
  ``value_mode`` 1), traced clockwise from the component's first pixel in raster order, every
  boundary pixel once per visit; components in raster order of their first pixel.
* ``batch_dilate_polys(...)``: each polygon with area ``A`` (shoelace) and perimeter ``L`` is
  kept when ``A >= min_area_thr``, the shorter side of its bounding box is at least
  ``min_border`` and the mean of ``score`` (``[H, W]``) over the pixels inside it is at least
  ``score_thr``; a kept polygon is offset outwards by ``d = A * expand_scale / L`` with mitred
  corners and its points rounded to integers.
* ``resize_and_clip_polys(...)``: points mapped back to the original image
  (``x / w_scale``, ``y / h_scale``, rounded) and clipped to ``[0, img_w - 1]`` and
  ``[0, img_h - 1]``; returns the polygon set and the number of polygons.
* ``ocr_detection_post_handle(img, polys)``: for each polygon, the crop of ``img`` to the
  polygon's bounding box (clipped to the image), as an image set (in ``data_format``), and
  ``rect_points`` ``[n, 4, 2]``: the box corners top-left, top-right, bottom-right, bottom-left.
* ``ocr_identify_pre_handle(imgs, size)``: every image of the set resized to ``size`` =
  ``[height, width]`` (bilinear), stacked ``[n, height, width, 3]`` (``[n, 3, height, width]``
  for NCHW).
* ``ocr_recognition_pre_handle(imgs, langs, langs_score, batch_size)``: images grouped by
  language (stable, languages ascending) into batches of ``batch_size``; each batch is padded to
  the largest height and width in it (bottom/right, repeating the edge with ``REPLICATE`` or
  zeros with ``ZERO``) and a short last batch filled with copies of its last image (or zero
  images). Returns the flattened batches ``imgs``, ``imgs_relation`` (for every slot of every
  batch, the input image's index, -1 for a filler), ``imgs_lang`` (the language of each batch)
  and ``imgs_piece_fillers`` (fillers per batch). ``langs_score`` is checked for length and
  otherwise unused.
"""

import numpy as np
import tensorflow as tf

__all__ = [
    "batch_dilate_polys",
    "find_contours_np",
    "ocr_detection_post_handle",
    "ocr_detection_pre_handle",
    "ocr_find_contours",
    "ocr_identify_pre_handle",
    "ocr_recognition_pre_handle",
    "resize_and_clip_polys",
]

_FORMATS = ("NHWC", "NCHW")
# The 8 neighbours, clockwise on screen (y down), starting west.
_DIRS = ((0, -1), (-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1))


def _check_format(data_format, api):
    if data_format not in _FORMATS:
        raise ValueError(f"{api}: data_format must be one of {list(_FORMATS)}, got "
                         f"{data_format!r}")


def _resize_uint8(image, size):
    resized = tf.image.resize(tf.cast(image, tf.float32), size, method="bilinear")
    return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)


def ocr_detection_pre_handle(img, data_format="NHWC", name=None):
    """``(resized_img, h_scale, w_scale)`` (see the module doc)."""
    api = "ocr_detection_pre_handle"
    _check_format(data_format, api)
    with tf.name_scope(name or "OCRDetectionPreHandle"):
        img = tf.convert_to_tensor(img, name="img")
        if img.dtype != tf.uint8 or img.shape.rank not in (None, 3):
            raise ValueError(f"{api}: img must be a 3-D uint8 image, got {img.dtype.name} "
                             f"{img.shape}")
        hwc = img if data_format == "NHWC" else tf.transpose(img, [1, 2, 0])
        check = tf.debugging.assert_equal(tf.shape(hwc)[2], 3,
                                          message=f"{api}: the image must have 3 channels")
        with tf.control_dependencies([check]):
            height, width = tf.shape(hwc)[0], tf.shape(hwc)[1]
        longer = tf.maximum(height, width)
        side = tf.where(longer <= 720, 480, tf.where(longer <= 1440, 960, 1920))
        resized = _resize_uint8(hwc, tf.stack([side, side]))
        if data_format == "NCHW":
            resized = tf.transpose(resized, [2, 0, 1])
        side_f = tf.cast(side, tf.float32)
        return (resized, side_f / tf.cast(height, tf.float32),
                side_f / tf.cast(width, tf.float32))


def _trace(mask, start):
    """Clockwise outer boundary of the component of ``mask`` containing ``start``."""
    height, width = mask.shape

    def inside(y, x):
        return 0 <= y < height and 0 <= x < width and mask[y, x]

    points = [start]
    cur = start
    search = 0  # the west neighbour of the first pixel in raster order is background
    first_move = None
    while True:
        for k in range(8):
            d = (search + k) % 8
            ny, nx = cur[0] + _DIRS[d][0], cur[1] + _DIRS[d][1]
            if inside(ny, nx):
                break
        else:
            return points  # an isolated pixel
        if cur == start and first_move is not None and d == first_move:
            return points[:-1]
        if first_move is None:
            first_move = d
        cur = (ny, nx)
        points.append(cur)
        search = (d + 6) % 8  # resume just after the background pixel seen before the move


def find_contours_np(img, value_mode):
    """NumPy contour tracing (see the module doc): ``(polys_data, polys_offset, polys_size)``."""
    img = np.asarray(img)
    foreground = img == (255 if value_mode == 1 else 1)
    labels = np.zeros(img.shape, dtype=np.int64)
    data, offsets, sizes = [], [], []
    current = 0
    for y, x in zip(*np.nonzero(foreground)):
        if labels[y, x]:
            continue
        current += 1
        stack = [(y, x)]
        labels[y, x] = current
        while stack:
            cy, cx = stack.pop()
            for dy, dx in _DIRS:
                ny, nx = cy + dy, cx + dx
                if 0 <= ny < img.shape[0] and 0 <= nx < img.shape[1] and \
                        foreground[ny, nx] and not labels[ny, nx]:
                    labels[ny, nx] = current
                    stack.append((ny, nx))
        boundary = _trace(labels == current, (int(y), int(x)))
        offsets.append(len(data))
        sizes.append(len(boundary))
        for py, px in boundary:
            data.extend((px, py))
    return (np.asarray(data, np.int32), np.asarray(offsets, np.int32),
            np.asarray(sizes, np.int32))


def ocr_find_contours(img, value_mode=0, name=None):
    """``(polys_data, polys_offset, polys_size)`` of the contours of ``img``."""
    if value_mode not in (0, 1):
        raise ValueError(f"ocr_find_contours: value_mode must be 0 or 1, got {value_mode!r}")
    with tf.name_scope(name or "OCRFindContours"):
        img = tf.convert_to_tensor(img, name="img")
        if img.dtype != tf.uint8 or img.shape.rank not in (None, 2):
            raise ValueError(f"ocr_find_contours: img must be a 2-D uint8 image, got "
                             f"{img.dtype.name} {img.shape}")
        outs = tf.numpy_function(lambda i: find_contours_np(i, value_mode), [img],
                                 [tf.int32] * 3, stateful=False)
        for out in outs:
            out.set_shape([None])
        return tuple(outs)


def _polygons(data, offsets, sizes):
    data, offsets, sizes = (np.asarray(a, np.int64).reshape(-1) for a in (data, offsets, sizes))
    if offsets.shape != sizes.shape:
        raise ValueError("polys_offset and polys_size must have the same length")
    polys = []
    for offset, size in zip(offsets, sizes):
        if offset < 0 or size < 0 or offset + 2 * size > data.size:
            raise ValueError(f"polygon at offset {offset} with {size} points is outside "
                             f"polys_data ({data.size} values)")
        polys.append(data[offset:offset + 2 * size].reshape(size, 2).astype(np.float64))
    return polys


def _pack(polys):
    data, offsets, sizes = [], [], []
    for poly in polys:
        offsets.append(len(data))
        sizes.append(len(poly))
        data.extend(np.asarray(poly, np.int64).reshape(-1).tolist())
    return (np.asarray(data, np.int32), np.asarray(offsets, np.int32),
            np.asarray(sizes, np.int32))


def _signed_area(poly):
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))


def _inside_mask(poly, height, width):
    """Pixels whose centre is inside ``poly`` or on its boundary pixels (even-odd rule)."""
    ys, xs = np.mgrid[0:height, 0:width]
    inside = np.zeros((height, width), dtype=bool)
    n = len(poly)
    for i in range(n):
        x1, y1 = poly[i]
        x2, y2 = poly[(i + 1) % n]
        crosses = (y1 > ys) != (y2 > ys)
        with np.errstate(divide="ignore", invalid="ignore"):
            x_at = x1 + (ys - y1) * (x2 - x1) / (y2 - y1)
        inside ^= crosses & (xs < x_at)
    for x, y in poly.astype(np.int64):
        if 0 <= y < height and 0 <= x < width:
            inside[y, x] = True
    return inside


def dilate_polygon(poly, distance):
    """``poly`` offset outwards by ``distance`` with mitred corners (float points)."""
    if len(poly) < 3 or distance == 0:
        return poly.copy()
    orientation = 1.0 if _signed_area(poly) > 0 else -1.0
    edges = np.roll(poly, -1, axis=0) - poly
    lengths = np.linalg.norm(edges, axis=1)
    lengths[lengths == 0] = 1.0
    # Outward normal: with y down and positive signed area the polygon runs clockwise on
    # screen, and the outward side of edge (dx, dy) is (dy, -dx).
    normals = orientation * np.stack([edges[:, 1], -edges[:, 0]], axis=1) / lengths[:, None]
    prev_normals = np.roll(normals, 1, axis=0)
    bisector = normals + prev_normals
    cos = np.sum(normals * prev_normals, axis=1)
    scale = distance / np.maximum(1.0 + cos, 1e-6)
    return poly + bisector * scale[:, None]


def batch_dilate_polys_np(data, offsets, sizes, score, min_border, min_area_thr, score_thr,
                          expand_scale):
    """NumPy polygon filtering and dilation (see the module doc)."""
    score = np.asarray(score, np.float64)
    if score.ndim != 2:
        raise ValueError(f"score must be a 2-D map, got shape {score.shape}")
    kept = []
    for poly in _polygons(data, offsets, sizes):
        if len(poly) < 3:
            continue
        area = abs(_signed_area(poly))
        perimeter = float(np.sum(np.linalg.norm(np.roll(poly, -1, axis=0) - poly, axis=1)))
        box = poly.max(axis=0) - poly.min(axis=0) + 1
        if area < float(min_area_thr) or min(box) < float(min_border) or perimeter == 0:
            continue
        mask = _inside_mask(poly, *score.shape)
        if not mask.any() or score[mask].mean() < float(score_thr):
            continue
        kept.append(np.round(dilate_polygon(poly, area * float(expand_scale) / perimeter)))
    return _pack(kept)


def batch_dilate_polys(polys_data, polys_offset, polys_size, score, min_border, min_area_thr,
                       score_thr, expand_scale, name=None):
    """Filter and dilate polygons (see the module doc)."""
    with tf.name_scope(name or "BatchDilatePolys"):
        inputs = [tf.convert_to_tensor(t, dtype=d) for t, d in (
            (polys_data, tf.int32), (polys_offset, tf.int32), (polys_size, tf.int32),
            (score, tf.float32), (min_border, tf.int32), (min_area_thr, tf.int32),
            (score_thr, tf.float32), (expand_scale, tf.float32))]
        outs = tf.numpy_function(batch_dilate_polys_np, inputs, [tf.int32] * 3, stateful=False)
        for out in outs:
            out.set_shape([None])
        return tuple(outs)


def resize_and_clip_polys(polys_data, polys_offset, polys_size, h_scale, w_scale, img_h, img_w,
                          name=None):
    """Map polygons to the original image and clip them (see the module doc)."""
    with tf.name_scope(name or "ResizeAndClipPolys"):
        data = tf.reshape(tf.convert_to_tensor(polys_data, tf.int32), [-1, 2])
        offsets = tf.convert_to_tensor(polys_offset, tf.int32)
        sizes = tf.convert_to_tensor(polys_size, tf.int32)
        check = tf.debugging.assert_equal(tf.size(offsets), tf.size(sizes),
                                          message="polys_offset and polys_size differ")
        scale = tf.stack([tf.cast(w_scale, tf.float32), tf.cast(h_scale, tf.float32)])
        upper = tf.stack([tf.cast(img_w, tf.float32), tf.cast(img_h, tf.float32)]) - 1.0
        with tf.control_dependencies([check]):
            mapped = tf.round(tf.cast(data, tf.float32) / scale)
            offsets, sizes = tf.identity(offsets), tf.identity(sizes)
        clipped = tf.cast(tf.clip_by_value(mapped, 0.0, upper), tf.int32)
        return (tf.reshape(clipped, [-1]), offsets, sizes, tf.size(sizes, out_type=tf.int32))


def _to_hwc(image, data_format):
    return image if data_format == "NHWC" else np.transpose(image, (1, 2, 0))


def _from_hwc(image, data_format):
    return image if data_format == "NHWC" else np.transpose(image, (2, 0, 1))


def post_handle_np(img, data, offsets, sizes, data_format):
    """NumPy crops of the polygons' bounding boxes (see the module doc)."""
    data_format = data_format.decode() if isinstance(data_format, bytes) else data_format
    image = _to_hwc(np.asarray(img), data_format)
    height, width = image.shape[:2]
    flat, offs, shapes, rects = [], [], [], []
    for poly in _polygons(data, offsets, sizes):
        if len(poly) == 0:
            raise ValueError("a polygon without points cannot be cropped")
        x0, y0 = np.clip(poly.min(axis=0), 0, [width - 1, height - 1]).astype(np.int64)
        x1, y1 = np.clip(poly.max(axis=0), 0, [width - 1, height - 1]).astype(np.int64)
        crop = image[y0:y1 + 1, x0:x1 + 1]
        offs.append(sum(a.size for a in flat))
        shapes.append(crop.shape)
        flat.append(_from_hwc(crop, data_format).reshape(-1))
        rects.append([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
    imgs = np.concatenate(flat) if flat else np.zeros([0], np.uint8)
    return (imgs.astype(np.uint8), np.asarray(offs, np.int32),
            np.asarray(shapes, np.int32).reshape(-1, 3), np.asarray(rects, np.int32).reshape(
                -1, 4, 2))


def ocr_detection_post_handle(img, polys_data, polys_offset, polys_size, data_format="NHWC",
                              name=None):
    """Crops of the detected polygons (see the module doc)."""
    _check_format(data_format, "ocr_detection_post_handle")
    with tf.name_scope(name or "OCRDetectionPostHandle"):
        inputs = [tf.convert_to_tensor(img, tf.uint8)] + [
            tf.convert_to_tensor(t, tf.int32) for t in (polys_data, polys_offset, polys_size)]
        outs = tf.numpy_function(lambda *a: post_handle_np(*a, data_format), inputs,
                                 [tf.uint8, tf.int32, tf.int32, tf.int32], stateful=False)
        outs[0].set_shape([None])
        outs[1].set_shape([None])
        outs[2].set_shape([None, 3])
        outs[3].set_shape([None, 4, 2])
        return tuple(outs)


def _images(data, offsets, sizes, data_format):
    data = np.asarray(data).reshape(-1)
    sizes = np.asarray(sizes, np.int64).reshape(-1, 3)
    images = []
    for offset, (h, w, c) in zip(np.asarray(offsets, np.int64).reshape(-1), sizes):
        count = h * w * c
        if offset < 0 or offset + count > data.size:
            raise ValueError(f"image at offset {offset} of size {(h, w, c)} is outside "
                             f"imgs_data ({data.size} values)")
        shape = (h, w, c) if data_format == "NHWC" else (c, h, w)
        images.append(_to_hwc(data[offset:offset + count].reshape(shape), data_format))
    return images


def _bilinear_np(image, out_h, out_w):
    """Bilinear resize with half-pixel centres (TensorFlow's ``resize`` without antialias)."""
    h, w = image.shape[:2]
    ys = np.clip((np.arange(out_h) + 0.5) * h / out_h - 0.5, 0, h - 1)
    xs = np.clip((np.arange(out_w) + 0.5) * w / out_w - 0.5, 0, w - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    img = image.astype(np.float64)
    top = img[y0][:, x0] * (1 - fx) + img[y0][:, x1] * fx
    bottom = img[y1][:, x0] * (1 - fx) + img[y1][:, x1] * fx
    return np.clip(np.round(top * (1 - fy) + bottom * fy), 0, 255).astype(np.uint8)


def identify_np(data, offsets, sizes, out_h, out_w, data_format):
    """NumPy resize of an image set (see the module doc)."""
    data_format = data_format.decode() if isinstance(data_format, bytes) else data_format
    images = [_bilinear_np(i, int(out_h), int(out_w))
              for i in _images(data, offsets, sizes, data_format)]
    out = np.stack(images) if images else np.zeros([0, int(out_h), int(out_w), 3], np.uint8)
    return out if data_format == "NHWC" else np.transpose(out, (0, 3, 1, 2))


def ocr_identify_pre_handle(imgs_data, imgs_offset, imgs_size, size, data_format="NHWC",
                            name=None):
    """Every image resized to ``size`` (see the module doc)."""
    api = "ocr_identify_pre_handle"
    _check_format(data_format, api)
    if not isinstance(size, (list, tuple)) or len(size) != 2 or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size):
        raise ValueError(f"{api}: size must be [height, width] of positive ints, got {size!r}")
    with tf.name_scope(name or "OCRIdentifyPreHandle"):
        inputs = [tf.convert_to_tensor(imgs_data, tf.uint8),
                  tf.convert_to_tensor(imgs_offset, tf.int32),
                  tf.convert_to_tensor(imgs_size, tf.int32)]
        out = tf.numpy_function(lambda d, o, s: identify_np(d, o, s, size[0], size[1],
                                                            data_format),
                                inputs, tf.uint8, stateful=False)
        shape = [None, size[0], size[1], 3] if data_format == "NHWC" else \
            [None, 3, size[0], size[1]]
        out.set_shape(shape)
        return out


def recognition_np(data, offsets, sizes, langs, langs_score, batch_size, data_format,
                   pad_mode):
    """NumPy language batching (see the module doc)."""
    data_format = data_format.decode() if isinstance(data_format, bytes) else data_format
    images = _images(data, offsets, sizes, data_format)
    langs = np.asarray(langs, np.int64).reshape(-1)
    if len(langs) != len(images) or np.asarray(langs_score).reshape(-1).size != len(images):
        raise ValueError("langs and langs_score must give one value per image")
    flat, relation, batch_langs, fillers = [], [], [], []
    order = np.argsort(langs, kind="stable")
    for lang in np.unique(langs):
        members = [int(i) for i in order if langs[i] == lang]
        for start in range(0, len(members), batch_size):
            chosen = members[start:start + batch_size]
            fill = batch_size - len(chosen)
            batch = [images[i] for i in chosen]
            h = max(b.shape[0] for b in batch)
            w = max(b.shape[1] for b in batch)
            mode = "edge" if pad_mode in ("REPLICATE", b"REPLICATE") else "constant"
            padded = [np.pad(b, ((0, h - b.shape[0]), (0, w - b.shape[1]), (0, 0)), mode=mode)
                      for b in batch]
            filler = padded[-1] if mode == "edge" else np.zeros_like(padded[-1])
            padded += [filler] * fill
            stacked = np.stack(padded)
            if data_format == "NCHW":
                stacked = np.transpose(stacked, (0, 3, 1, 2))
            flat.append(stacked.reshape(-1))
            relation += chosen + [-1] * fill
            batch_langs.append(int(lang))
            fillers.append(fill)
    imgs = np.concatenate(flat) if flat else np.zeros([0], np.uint8)
    return (imgs.astype(np.uint8), np.asarray(relation, np.int32),
            np.asarray(batch_langs, np.int32), np.asarray(fillers, np.int32))


def ocr_recognition_pre_handle(imgs_data, imgs_offset, imgs_size, langs, langs_score,
                               batch_size=8, data_format="NHWC", pad_mode="REPLICATE",
                               name=None):
    """Images batched by language (see the module doc)."""
    api = "ocr_recognition_pre_handle"
    _check_format(data_format, api)
    if pad_mode not in ("REPLICATE", "ZERO"):
        raise ValueError(f"{api}: pad_mode must be 'REPLICATE' or 'ZERO', got {pad_mode!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{api}: batch_size must be an int >= 1, got {batch_size!r}")
    with tf.name_scope(name or "OCRRecognitionPreHandle"):
        inputs = [tf.convert_to_tensor(imgs_data, tf.uint8),
                  tf.convert_to_tensor(imgs_offset, tf.int32),
                  tf.convert_to_tensor(imgs_size, tf.int32),
                  tf.convert_to_tensor(langs, tf.int32),
                  tf.convert_to_tensor(langs_score)]
        outs = tf.numpy_function(
            lambda d, o, s, la, sc: recognition_np(d, o, s, la, sc, batch_size, data_format,
                                                   pad_mode),
            inputs, [tf.uint8, tf.int32, tf.int32, tf.int32], stateful=False)
        for out in outs:
            out.set_shape([None])
        return tuple(outs)
