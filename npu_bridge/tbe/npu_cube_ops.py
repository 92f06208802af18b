"""Cube-unit ops (``npu_bridge.tbe.npu_cube_ops``): the deformable convolution.

:func:`deformable_conv2d` is ``DeformableOffsets`` (bilinear sampling of ``x`` at the offset
kernel taps, times the modulation mask) followed by a ``VALID`` ``Conv2D`` whose strides are the
filter size, as in the original; :func:`deformable_offsets_grad` is the gradient the original
registers for ``DeformableOffsets``. Layout of ``offsets`` and formulas in ``docs/api-ops.md``.
"""

from npu_bridge._kernels import deformable as _deformable
from npu_bridge._kernels.common import check_graph_mode
from npu_bridge._kernels.gen import gen_npu_ops

__all__ = ["deformable_conv2d", "deformable_offsets_grad", "gen_npu_ops"]


def deformable_conv2d(x, filter, offsets, strides=None, pads=None,
                      data_format="NHWC", dilations=(1, 1, 1, 1), groups=1, deformable_groups=1,
                      modulated=True, name=None):
    """A 2-D deformable convolution (v2) of ``x`` with ``filter`` ``[kh, kw, in, out]`` and
    ``offsets`` (``NHWC``: ``[batch, out_h, out_w, deformable_groups * kh * kw * 3]``: the x
    offsets, then the y offsets, then the masks).

    ``strides``/``dilations`` are 4 ints in ``data_format`` order (``N`` and ``C`` 1), ``pads``
    ``(top, bottom, left, right)``. Output ``[batch, out_h, out_w, out]`` with ``out_h = (in_h +
    top + bottom - (dilation_h * (kh - 1) + 1)) // stride_h + 1``. As in the original: graph
    mode only, ``modulated`` must be True and ``groups`` 1 (``RuntimeError``).
    """
    check_graph_mode("tf.deformable_conv2d")
    return _deformable.deformable_conv2d(x, filter, offsets, strides=strides, pads=pads,
                                         data_format=data_format, dilations=dilations,
                                         groups=groups, deformable_groups=deformable_groups,
                                         modulated=modulated, name=name)


deformable_offsets_grad = _deformable.deformable_offsets_grad
