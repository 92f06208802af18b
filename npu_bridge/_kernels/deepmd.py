"""The DeePMD-kit ops of the NPU: ``ProdEnvMatA``, ``ProdForceSeA``, ``ProdVirialSeA``,
``TabulateFusionSeA``/``TabulateFusion`` and their gradient ops, with DeePMD-kit's semantics
(``docs/api-ops.md`` has the formulas).

Shapes follow DeePMD-kit: ``nloc`` local atoms (``natoms[0]``) out of ``nall`` (``natoms[1]``),
``nnei = sum(sel_a)`` neighbour slots per atom, sectioned by neighbour type, and 4 environment
values per neighbour (``ndescrpt = 4 * nnei``).
"""

import collections

import tensorflow as tf

from .common import device_only

__all__ = [
    "lru_cache_v2",
    "prod_env_mat_a",
    "prod_force_se_a",
    "prod_virial_se_a",
    "tabulate_fusion",
    "tabulate_fusion_grad",
    "tabulate_fusion_se_a",
    "tabulate_fusion_se_a_grad",
]

ProdEnvMatA = collections.namedtuple("ProdEnvMatA", ["descrpt", "descrpt_deriv", "rij", "nlist"])
ProdVirialSeA = collections.namedtuple("ProdVirialSeA", ["virial", "atom_virial"])
TabulateFusionGrad = collections.namedtuple("TabulateFusionGrad", ["dy_dem_x", "dy_dem"])

_PBC_MESH_SIZE = 6  # DeePMD-kit's default mesh: periodic box, neighbours searched here
_NO_PBC_MESH_SIZE = 0


# ---- ProdEnvMatA --------------------------------------------------------------------------------


def _switch(r, rmin, rmax):
    """DeePMD-kit's quintic switch and its derivative: 1 below ``rmin``, 0 from ``rmax``."""
    uu = (r - rmin) / (rmax - rmin)
    inside = (r > rmin) & (r < rmax)
    vv = uu * uu * uu * (-6.0 * uu * uu + 15.0 * uu - 10.0) + 1.0
    dvv = (3.0 * uu * uu * (-6.0 * uu * uu + 15.0 * uu - 10.0)
           + uu * uu * uu * (-12.0 * uu + 15.0)) / (rmax - rmin)
    one = tf.ones_like(r)
    sw = tf.where(inside, vv, tf.where(r <= rmin, one, tf.zeros_like(r)))
    dsw = tf.where(inside, dvv, tf.zeros_like(r))
    return sw, dsw


def _images(box, dtype):
    """The 27 periodic shifts ``n @ box`` (``n`` in {-1, 0, 1}^3), the unshifted one first."""
    cells = [(0, 0, 0)] + [(a, b, c) for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)
                           if (a, b, c) != (0, 0, 0)]
    n = tf.constant(cells, dtype=dtype)  # [27, 3]
    return tf.matmul(tf.broadcast_to(n, tf.stack([tf.shape(box)[0], 27, 3])), box)


def prod_env_mat_a(coord, type, natoms, box, mesh, davg, dstd, rcut_a=0.0,
                   rcut_r=0.0, rcut_r_smth=0.0, sel_a=None, sel_r=None, name=None):
    """``ProdEnvMatA``: the smooth environment matrix of every local atom (DeePMD-kit ``se_a``).

    ``coord`` ``[F, nall*3]``, ``type`` ``[F, nall]``, ``natoms`` ``[2 + ntypes]``, ``box``
    ``[F, 9]`` (rows are the cell vectors), ``mesh`` selects the neighbour search: empty — no
    periodic boundary; 6 elements — periodic ``box``, images up to one cell away (``rcut_r``
    must not exceed the smallest cell height). ``davg``/``dstd`` ``[ntypes, nnei*4]``.

    For atom ``i`` the neighbours ``j`` with ``|r_ij| < rcut_r`` fill the section of their type
    (``sel_a[t]`` slots) in order of distance, then index; unused slots are -1. With ``d = r_j -
    r_i``, ``r = |d|`` and the switch ``s(r)`` (1 below ``rcut_r_smth``, 0 from ``rcut_r``), the
    four values ``(s/r, s d/r^2)`` are normalised as ``(value - davg[type_i]) / dstd[type_i]``
    (empty slots: 0 before normalising). Returns ``(descrpt [F, nloc*nnei*4], descrpt_deriv
    [F, nloc*nnei*12] = -d value / d d / dstd, rij [F, nloc*nnei*3], nlist [F, nloc*nnei])``.
    ``rcut_a`` and ``sel_r`` are recorded, as in DeePMD-kit (the ``a`` descriptor uses
    ``rcut_r``).
    """
    sel_a = [int(s) for s in (sel_a or [])]
    if not sel_a or min(sel_a) < 0:
        raise ValueError(f"ProdEnvMatA: sel_a must list the neighbour count of every type, got "
                         f"{sel_a!r}")
    if not 0 <= rcut_r_smth < rcut_r:
        raise ValueError(f"ProdEnvMatA: need 0 <= rcut_r_smth < rcut_r, got rcut_r_smth="
                         f"{rcut_r_smth!r}, rcut_r={rcut_r!r}")
    with tf.name_scope(name or "ProdEnvMatA"):
        coord = tf.convert_to_tensor(coord, name="coord")
        dtype = coord.dtype
        types = tf.convert_to_tensor(type, dtype=tf.int32, name="type")
        natoms = tf.convert_to_tensor(natoms, dtype=tf.int32, name="natoms")
        box = tf.reshape(tf.convert_to_tensor(box, dtype=dtype, name="box"), [-1, 3, 3])
        mesh = tf.convert_to_tensor(mesh, dtype=tf.int32, name="mesh")
        davg = tf.convert_to_tensor(davg, dtype=dtype, name="davg")
        dstd = tf.convert_to_tensor(dstd, dtype=dtype, name="dstd")
        mesh_size = mesh.shape.num_elements()
        if mesh_size not in (_NO_PBC_MESH_SIZE, _PBC_MESH_SIZE):
            raise ValueError(
                f"ProdEnvMatA: mesh must be empty (no periodic boundary) or have 6 elements "
                f"(periodic box), got {mesh.shape}; DeePMD-kit's 16-element mesh carries host "
                "pointers to an external neighbour list, which a graph cannot hold")
        nloc, nall = natoms[0], natoms[1]
        frames = tf.shape(coord)[0]
        xyz = tf.reshape(coord, tf.stack([frames, nall, 3]))
        centre = xyz[:, :nloc]  # [F, nloc, 3]
        if mesh_size == _PBC_MESH_SIZE:
            shifts = _images(box, dtype)  # [F, S, 3]
        else:
            shifts = tf.zeros(tf.stack([frames, 1, 3]), dtype=dtype)
        images = tf.shape(shifts)[1]
        # candidates j over (image, atom): [F, S*nall, 3], the unshifted atoms first
        cand = tf.reshape(xyz[:, None] + shifts[:, :, None], tf.stack([frames, -1, 3]))
        cand_index = tf.tile(tf.range(nall), [images])
        cand_type = tf.tile(types, tf.stack([1, images]))
        diff = cand[:, None] - centre[:, :, None]  # [F, nloc, S*nall, 3]
        dist2 = tf.reduce_sum(tf.square(diff), axis=-1)
        is_self = tf.equal(cand_index[None, :], tf.range(nloc)[:, None])  # image 0 only
        is_self = is_self & (tf.range(images * nall)[None, :] < nall)
        within = (dist2 < rcut_r * rcut_r) & ~is_self[None]
        big = tf.constant(float("inf"), dtype=dtype)
        sections_idx, sections_valid = [], []
        for t, count in enumerate(sel_a):
            if count == 0:
                continue
            key = tf.where(within & tf.equal(cand_type, t)[:, None, :], dist2, big)
            width = tf.shape(key)[2]
            key = tf.pad(key, tf.stack([[0, 0], [0, 0], [0, tf.maximum(count - width, 0)]]),
                         constant_values=float("inf"))
            neg, idx = tf.math.top_k(-key, k=count)  # nearest first, lower index on ties
            sections_idx.append(idx)
            sections_valid.append(tf.math.is_finite(neg))
        slot = tf.concat(sections_idx, axis=-1)  # [F, nloc, nnei] candidate positions
        valid = tf.concat(sections_valid, axis=-1)
        slot = tf.where(valid, slot, tf.zeros_like(slot))
        rij = tf.gather(diff, slot, axis=2, batch_dims=2)  # [F, nloc, nnei, 3]
        rij = tf.where(valid[..., None], rij, tf.zeros_like(rij))
        nlist = tf.where(valid, tf.gather(cand_index, slot), -tf.ones_like(slot))

        r2 = tf.reduce_sum(tf.square(rij), axis=-1)
        r = tf.sqrt(tf.where(valid, r2, tf.ones_like(r2)))
        sw, dsw = _switch(r, rcut_r_smth, rcut_r)
        inv_r = 1.0 / r
        inv_r2 = inv_r * inv_r
        value = tf.concat([(sw * inv_r)[..., None], (sw * inv_r2)[..., None] * rij], axis=-1)
        # -d value / d rij (DeePMD-kit's sign: the derivative with respect to the centre atom)
        eye = tf.constant([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=dtype)
        d0 = (sw * inv_r2 * inv_r - dsw * inv_r2)[..., None] * rij  # [.., 3]
        outer = rij[..., :, None] * rij[..., None, :]
        dk = ((2.0 * outer * (inv_r2 * inv_r2)[..., None, None] - eye * inv_r2[..., None, None])
              * sw[..., None, None]
              - (dsw * inv_r2 * inv_r)[..., None, None] * outer)
        deriv = tf.concat([d0[..., None, :], dk], axis=-2)  # [F, nloc, nnei, 4, 3]
        mask = tf.cast(valid, dtype)
        value = value * mask[..., None]
        deriv = deriv * mask[..., None, None]

        nnei = sum(sel_a)
        avg = tf.reshape(tf.gather(davg, types[:, :nloc]), tf.stack([frames, nloc, nnei, 4]))
        std = tf.reshape(tf.gather(dstd, types[:, :nloc]), tf.stack([frames, nloc, nnei, 4]))
        descrpt = (value - avg) / std
        descrpt_deriv = deriv / std[..., None]
        return ProdEnvMatA(tf.reshape(descrpt, tf.stack([frames, -1])),
                           tf.reshape(descrpt_deriv, tf.stack([frames, -1])),
                           tf.reshape(rij, tf.stack([frames, -1])),
                           tf.reshape(tf.cast(nlist, tf.int32), tf.stack([frames, -1])))


# ---- ProdForceSeA, ProdVirialSeA ----------------------------------------------------------------


def _force_inputs(net_deriv, in_deriv, nlist, natoms, n_a_sel, n_r_sel):
    net_deriv = tf.convert_to_tensor(net_deriv, name="net_deriv")
    in_deriv = tf.convert_to_tensor(in_deriv, dtype=net_deriv.dtype, name="in_deriv")
    nlist = tf.convert_to_tensor(nlist, dtype=tf.int32, name="nlist")
    natoms = tf.convert_to_tensor(natoms, dtype=tf.int32, name="natoms")
    nnei = int(n_a_sel) + int(n_r_sel)
    if nnei <= 0:
        raise ValueError(f"n_a_sel + n_r_sel must be positive, got {n_a_sel} + {n_r_sel}")
    frames = tf.shape(net_deriv)[0]
    nloc, nall = natoms[0], natoms[1]
    net = tf.reshape(net_deriv, tf.stack([frames, nloc, nnei, 4]))
    env = tf.reshape(in_deriv, tf.stack([frames, nloc, nnei, 4, 3]))
    neighbours = tf.reshape(nlist, tf.stack([frames, nloc, nnei]))
    return net, env, neighbours, frames, nloc, nall


def _scatter_to_atoms(per_pair, neighbours, frames, nall, width):
    """Sum ``per_pair`` ``[F, nloc, nnei, width]`` onto the neighbour atoms: ``[F, nall,
    width]`` (slots with a negative index are dropped)."""
    valid = neighbours >= 0
    frame_id = tf.broadcast_to(tf.range(frames)[:, None, None], tf.shape(neighbours))
    segment = tf.where(valid, frame_id * nall + neighbours, tf.fill(tf.shape(neighbours),
                                                                    frames * nall))
    summed = tf.math.unsorted_segment_sum(tf.reshape(per_pair, [-1, width]),
                                          tf.reshape(segment, [-1]), frames * nall + 1)
    return tf.reshape(summed[:-1], tf.stack([frames, nall, width]))


def prod_force_se_a(net_deriv, in_deriv, nlist, natoms, n_a_sel=0, n_r_sel=0, name=None):
    """``ProdForceSeA``: atomic forces from ``net_deriv`` (dE/d descriptor, ``[F,
    nloc*nnei*4]``) and ``in_deriv`` (the descriptor derivative of :func:`prod_env_mat_a`):
    ``f_i -= sum_a net[i,a] * deriv[i,a]`` for every local atom and ``f_j += net[i,a] *
    deriv[i,a]`` for its neighbour ``j`` of slot ``a``. Returns ``[F, nall*3]``."""
    with tf.name_scope(name or "ProdForceSeA"):
        net, env, neighbours, frames, nloc, nall = _force_inputs(net_deriv, in_deriv, nlist,
                                                                 natoms, n_a_sel, n_r_sel)
        pair = tf.reduce_sum(net[..., None] * env, axis=3)  # [F, nloc, nnei, 3]
        on_neighbours = _scatter_to_atoms(pair, neighbours, frames, nall, 3)
        on_centre = tf.reduce_sum(pair, axis=2)  # [F, nloc, 3]
        on_centre = tf.pad(on_centre, tf.stack([[0, 0], [0, nall - nloc], [0, 0]]))
        return tf.reshape(on_neighbours - on_centre, tf.stack([frames, -1]))


def prod_virial_se_a(net_deriv, in_deriv, rij, nlist, natoms, n_a_sel=0, n_r_sel=0, name=None):
    """``ProdVirialSeA``: the virial ``sum_{i,a} net[i,a] * deriv[i,a,d0] * rij[i,j(a),d1]``
    (``[F, 9]``, index ``3*d0 + d1``) and its share on each neighbour atom ``j``
    (``atom_virial`` ``[F, nall*9]``); slots without a neighbour contribute nothing."""
    with tf.name_scope(name or "ProdVirialSeA"):
        net, env, neighbours, frames, nloc, nall = _force_inputs(net_deriv, in_deriv, nlist,
                                                                 natoms, n_a_sel, n_r_sel)
        rij = tf.reshape(tf.convert_to_tensor(rij, dtype=net.dtype, name="rij"),
                         tf.stack([frames, nloc, -1, 3]))
        pair = tf.reduce_sum(net[..., None] * env, axis=3)  # [F, nloc, nnei, 3] (d0)
        per_pair = pair[..., :, None] * rij[..., None, :]  # [F, nloc, nnei, 3, 3]
        per_pair = per_pair * tf.cast(neighbours >= 0, net.dtype)[..., None, None]
        per_pair = tf.reshape(per_pair, tf.stack([frames, nloc, -1, 9]))
        virial = tf.reduce_sum(per_pair, axis=[1, 2])
        atom_virial = _scatter_to_atoms(per_pair, neighbours, frames, nall, 9)
        return ProdVirialSeA(virial, tf.reshape(atom_virial, tf.stack([frames, -1])))


# ---- TabulateFusion(SeA) ------------------------------------------------------------------------


def _locate(table_info, em_x):
    """Table row and local coordinate of every ``em_x`` (DeePMD-kit's two-stride table)."""
    lower, upper, top = table_info[0], table_info[1], table_info[2]
    stride0, stride1 = table_info[3], table_info[4]
    first = tf.floor((upper - lower) / stride0)
    last = first + tf.floor((top - upper) / stride1) - 1.0
    in_first = (em_x >= lower) & (em_x < upper)
    in_second = (em_x >= upper) & (em_x < top)
    idx_first = tf.floor((em_x - lower) / stride0)
    idx_second = first + tf.floor((em_x - upper) / stride1)
    row = tf.where(in_first, idx_first, tf.where(in_second, idx_second,
                                                 tf.where(em_x < lower, tf.zeros_like(em_x),
                                                          tf.broadcast_to(last,
                                                                          tf.shape(em_x)))))
    local = tf.where(in_first, em_x - (idx_first * stride0 + lower),
                     tf.where(in_second, em_x - ((idx_second - first) * stride1 + upper),
                              tf.zeros_like(em_x)))
    return tf.cast(row, tf.int32), local


def _tabulate_inputs(table, table_info, em_x, em, last_layer_size=None):
    table = tf.convert_to_tensor(table, name="table")
    dtype = table.dtype
    table_info = tf.convert_to_tensor(table_info, dtype=dtype, name="table_info")
    em = tf.convert_to_tensor(em, dtype=dtype, name="em")
    em_x = tf.convert_to_tensor(em_x, dtype=dtype, name="em_x")
    nloc = tf.shape(em)[0]
    nnei = tf.shape(em)[1]
    x = tf.reshape(em_x, tf.stack([nloc, nnei]))
    width = last_layer_size if last_layer_size is not None else tf.shape(table)[1] // 6
    row, local = _locate(table_info, x)
    coeff = tf.reshape(tf.gather(table, row), tf.stack([nloc, nnei, width, 6]))
    xx = local[..., None]
    a = [coeff[..., k] for k in range(6)]
    value = a[0] + (a[1] + (a[2] + (a[3] + (a[4] + a[5] * xx) * xx) * xx) * xx) * xx
    slope = a[1] + (2.0 * a[2] + (3.0 * a[3] + (4.0 * a[4] + 5.0 * a[5] * xx) * xx) * xx) * xx
    return em, em_x, value, slope  # value/slope: [nloc, nnei, last_layer_size]


def _tabulate_grad(table, table_info, em_x, em, dy, op_type):
    with tf.name_scope(f"{op_type}Grad"):
        em, em_x, value, slope = _tabulate_inputs(table, table_info, em_x, em)
        dy = tf.convert_to_tensor(dy, dtype=em.dtype, name="dy")  # [nloc, 4, last]
        dy_dem = tf.matmul(value, dy, transpose_b=True)  # [nloc, nnei, 4]
        dy_dem_x = tf.reduce_sum(slope * tf.matmul(em, dy), axis=-1)  # [nloc, nnei]
        return TabulateFusionGrad(tf.reshape(dy_dem_x, tf.shape(em_x)), dy_dem)


def _tabulate(table, table_info, em_x, em, last_layer_size, op_type, name):
    with tf.name_scope(name or op_type):
        table = tf.convert_to_tensor(table, name="table")
        table_info = tf.convert_to_tensor(table_info, dtype=table.dtype, name="table_info")
        width = int(last_layer_size)
        last = tf.compat.dimension_value(table.shape[-1]) if table.shape.rank == 2 else None
        if last is not None and last != 6 * width:
            raise ValueError(f"{op_type}: table must have 6 * last_layer_size = {6 * width} "
                             f"columns, got {last}")

        @tf.custom_gradient
        def fused(em_x, em):
            em_t, _, value, _ = _tabulate_inputs(table, table_info, em_x, em, width)
            out = tf.matmul(em_t, value, transpose_a=True)  # [nloc, 4, last]

            def grad(dy):
                # DeePMD-kit's gradient op: the slope is the table polynomial's derivative,
                # also outside the table's range
                return tuple(_tabulate_grad(table, table_info, em_x, em, dy, op_type))

            return out, grad

        return fused(tf.convert_to_tensor(em_x, dtype=table.dtype),
                     tf.convert_to_tensor(em, dtype=table.dtype))


def tabulate_fusion_se_a(table, table_info, em_x, em, last_layer_size=128, name=None):
    """``TabulateFusionSeA``: the embedding net of the ``se_a`` descriptor replaced by its
    tabulated polynomials, fused with the product by the environment matrix.

    ``table`` ``[rows, last_layer_size*6]`` holds per row and output the coefficients of a
    quintic in the offset from the row's start; ``table_info`` ``[lower, upper, max, stride0,
    stride1, ...]`` places ``em_x`` (``[nloc*nnei, 1]``, the ``s(r)`` values) in a row: stride
    ``stride0`` on ``[lower, upper)``, ``stride1`` on ``[upper, max)``, clamped outside. With
    ``G = poly(em_x)`` ``[nloc, nnei, last]`` and ``em`` ``[nloc, nnei, 4]`` the output is
    ``em^T G``: ``[nloc, 4, last_layer_size]``. The gradient is :func:`tabulate_fusion_se_a_grad`.
    """
    return _tabulate(table, table_info, em_x, em, last_layer_size, "TabulateFusionSeA", name)


def tabulate_fusion_se_a_grad(table, table_info, em_x, em, dy, descriptor, name=None):
    """``TabulateFusionSeAGrad``: ``(dy_dem_x, dy_dem)`` for the upstream ``dy`` ``[nloc, 4,
    last]``: ``dy_dem = G dy^T`` and ``dy_dem_x = sum_k G'_k (em dy)_k`` (``descriptor``, the
    forward output, is not needed)."""
    with tf.name_scope(name or "TabulateFusionSeAGrad"):
        return _tabulate_grad(table, table_info, em_x, em, dy, "TabulateFusionSeA")


def tabulate_fusion(table, table_info, em_x, em, last_layer_size=128, name=None):
    """``TabulateFusion``: the earlier name of :func:`tabulate_fusion_se_a`, same semantics."""
    return _tabulate(table, table_info, em_x, em, last_layer_size, "TabulateFusion", name)


def tabulate_fusion_grad(table, table_info, em_x, em, dy, descriptor, name=None):
    """``TabulateFusionGrad``: as :func:`tabulate_fusion_se_a_grad`."""
    with tf.name_scope(name or "TabulateFusionGrad"):
        return _tabulate_grad(table, table_info, em_x, em, dy, "TabulateFusion")


# ---- LRUCacheV2 ---------------------------------------------------------------------------------


def lru_cache_v2(index_list, data, cache, tag, is_last_call, pre_route_count, name=None):
    """``LRUCacheV2``: device only (``DeviceOnlyError``)."""
    device_only("lru_cache_v2",
                "it swaps embedding rows between the host table `data` and a cache in the "
                "device's global memory, keeping its least-recently-used state in a kernel "
                "workspace on the device; on the host, gather from the table directly "
                "(tf.gather(data, index_list))")
