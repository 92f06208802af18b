"""The DeePMD-kit ops of ``npu_aicore_ops`` against NumPy references written here from
DeePMD-kit's definitions: the ``se_a`` environment matrix and neighbour list, forces, virials
and the tabulated embedding."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from npu_adapter.errors import DeviceOnlyError
from npu_bridge.estimator import npu_aicore_ops

RNG = np.random.default_rng(5)
RCUT, RCUT_SMTH = 1.9, 0.6
SEL = [3, 4]


def _run(fetches, graph):
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run(fetches)


def _raw_env(d, rmin, rmax):
    r = np.linalg.norm(d)
    if r <= rmin:
        sw = 1.0
    elif r >= rmax:
        sw = 0.0
    else:
        u = (r - rmin) / (rmax - rmin)
        sw = u ** 3 * (-6 * u * u + 15 * u - 10) + 1
    return np.concatenate([[sw / r], sw * d / r ** 2])


def np_env_mat(coord, types, nloc, box, pbc, davg, dstd):
    """One frame; returns descrpt [nloc, nnei, 4], deriv [nloc, nnei, 4, 3], rij, nlist."""
    nall = len(types)
    xyz = coord.reshape(nall, 3)
    shifts = [np.zeros(3)]
    if pbc:
        shifts += [np.array(n) @ box for n in itertools.product((-1, 0, 1), repeat=3)
                   if n != (0, 0, 0)]
    nnei = sum(SEL)
    starts = np.concatenate([[0], np.cumsum(SEL)])
    descrpt = np.zeros((nloc, nnei, 4))
    deriv = np.zeros((nloc, nnei, 4, 3))
    rij = np.zeros((nloc, nnei, 3))
    nlist = -np.ones((nloc, nnei), int)
    for i in range(nloc):
        candidates = []
        for s, shift in enumerate(shifts):
            for j in range(nall):
                if s == 0 and j == i:
                    continue
                d = xyz[j] + shift - xyz[i]
                if d @ d < RCUT * RCUT:
                    candidates.append((types[j], d @ d, s * nall + j, j, d))
        candidates.sort(key=lambda c: c[:3])
        filled = list(starts[:-1])
        for t, _, _, j, d in candidates:
            if filled[t] < starts[t + 1]:
                slot = filled[t]
                filled[t] += 1
                nlist[i, slot] = j
                rij[i, slot] = d
                descrpt[i, slot] = _raw_env(d, RCUT_SMTH, RCUT)
                for m in range(3):  # DeePMD-kit's sign: minus the derivative along d
                    step = np.zeros(3)
                    step[m] = 1e-6
                    deriv[i, slot, :, m] = -(_raw_env(d + step, RCUT_SMTH, RCUT)
                                             - _raw_env(d - step, RCUT_SMTH, RCUT)) / 2e-6
        avg = davg[types[i]].reshape(nnei, 4)
        std = dstd[types[i]].reshape(nnei, 4)
        descrpt[i] = (descrpt[i] - avg) / std
        deriv[i] = deriv[i] / std[..., None]
    return descrpt, deriv, rij, nlist


def _system(frames=2, natoms=7, cell=4.0, skew=0.0):
    box = np.array([[cell, 0, 0], [skew, cell, 0], [0, 0.5 * skew, cell]])
    frac = RNG.uniform(0, 1, size=(frames, natoms, 3))
    coord = (frac @ box).reshape(frames, -1)
    types = np.array([0, 0, 1, 1, 1, 0, 1][:natoms])
    nnei = sum(SEL)
    davg = RNG.normal(scale=0.1, size=(2, nnei * 4))
    dstd = RNG.uniform(0.5, 1.5, size=(2, nnei * 4))
    return coord, np.tile(types, (frames, 1)), np.tile(box.ravel(), (frames, 1)), davg, dstd


@pytest.mark.parametrize("pbc,skew,cell", [(False, 0.0, 4.0), (True, 0.0, 4.0), (True, 0.8, 4.0),
                                           (True, 0.0, 2.5)])  # rcut > half the cell
def test_prod_env_mat_a_matches_numpy(pbc, skew, cell):
    coord, types, box, davg, dstd = _system(skew=skew, cell=cell)
    natoms = np.array([7, 7, 3, 4], np.int32)
    mesh = np.zeros(6 if pbc else 0, np.int32)
    with tf.Graph().as_default() as graph:
        out = npu_aicore_ops.prod_env_mat_a(coord, types, natoms, box, mesh, davg, dstd,
                                            rcut_a=-1.0, rcut_r=RCUT, rcut_r_smth=RCUT_SMTH,
                                            sel_a=SEL, sel_r=[0, 0])
    descrpt, deriv, rij, nlist = _run(list(out), graph)
    nnei = sum(SEL)
    assert descrpt.shape == (2, 7 * nnei * 4) and nlist.dtype == np.int32
    for f in range(2):
        e_d, e_deriv, e_rij, e_nlist = np_env_mat(coord[f], types[f], 7, box[f].reshape(3, 3),
                                                   pbc, davg, dstd)
        np.testing.assert_array_equal(nlist[f].reshape(7, nnei), e_nlist)
        np.testing.assert_allclose(rij[f].reshape(7, nnei, 3), e_rij, atol=1e-12)
        np.testing.assert_allclose(descrpt[f].reshape(7, nnei, 4), e_d, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(deriv[f].reshape(7, nnei, 4, 3), e_deriv, rtol=1e-5,
                                   atol=1e-7)
    assert (nlist >= 0).any()
    if cell == 4.0:
        assert (nlist < 0).any()  # empty slots too
    else:
        assert (np.sort(nlist[0].reshape(7, -1), axis=1)[:, :-1]
                == np.sort(nlist[0].reshape(7, -1), axis=1)[:, 1:]).any()  # an atom twice


def test_prod_env_mat_a_argument_errors():
    coord, types, box, davg, dstd = _system()
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="16-element mesh carries host pointers"):
            npu_aicore_ops.prod_env_mat_a(coord, types, [7, 7, 3, 4], box, np.zeros(16, np.int32),
                                          davg, dstd, rcut_r=RCUT, rcut_r_smth=RCUT_SMTH,
                                          sel_a=SEL)
        with pytest.raises(ValueError, match="rcut_r_smth < rcut_r"):
            npu_aicore_ops.prod_env_mat_a(coord, types, [7, 7, 3, 4], box, [], davg, dstd,
                                          rcut_r=0.5, rcut_r_smth=0.6, sel_a=SEL)
        with pytest.raises(ValueError, match="sel_a must list"):
            npu_aicore_ops.prod_env_mat_a(coord, types, [7, 7, 3, 4], box, [], davg, dstd,
                                          rcut_r=RCUT, rcut_r_smth=RCUT_SMTH)


def _np_force_virial(net, env, rij, nlist, nall):
    nloc, nnei = nlist.shape
    force = np.zeros((nall, 3))
    virial = np.zeros((3, 3))
    atom_virial = np.zeros((nall, 3, 3))
    for i in range(nloc):
        for a in range(nnei * 4):
            force[i] -= net[i, a] * env[i, a]
        for jj in range(nnei):
            j = nlist[i, jj]
            if j < 0:
                continue
            for a in range(jj * 4, jj * 4 + 4):
                force[j] += net[i, a] * env[i, a]
                contribution = np.outer(net[i, a] * env[i, a], rij[i, jj])
                virial += contribution
                atom_virial[j] += contribution
    return force, virial, atom_virial


def test_prod_force_and_virial_match_numpy_and_are_minus_the_energy_gradient():
    coord, types, box, davg, dstd = _system(frames=1, natoms=7)
    nnei = sum(SEL)
    weights = RNG.normal(size=(1, 7 * nnei * 4))
    with tf.Graph().as_default() as graph:
        tcoord = tf.constant(coord)
        env = npu_aicore_ops.prod_env_mat_a(tcoord, types, [7, 7, 3, 4], box,
                                            np.zeros(0, np.int32), davg, dstd,
                                            rcut_r=RCUT, rcut_r_smth=RCUT_SMTH, sel_a=SEL)
        energy = tf.reduce_sum(env.descrpt * weights)
        force = npu_aicore_ops.prodforcesea(weights, env.descrpt_deriv, env.nlist, [7, 7, 3, 4],
                                            n_a_sel=nnei)
        virial, atom_virial = npu_aicore_ops.prodvirialsea(weights, env.descrpt_deriv, env.rij,
                                                           env.nlist, [7, 7, 3, 4],
                                                           n_a_sel=nnei)
        minus_grad = -tf.gradients(energy, tcoord)[0]
    values = _run([force, virial, atom_virial, env.descrpt_deriv, env.rij, env.nlist,
                   minus_grad], graph)
    force_v, virial_v, atom_virial_v, deriv, rij, nlist, minus_grad_v = values
    e_force, e_virial, e_atom = _np_force_virial(weights.reshape(7, nnei * 4),
                                                 deriv.reshape(7, nnei * 4, 3),
                                                 rij.reshape(7, nnei, 3), nlist.reshape(7, nnei),
                                                 7)
    np.testing.assert_allclose(force_v.reshape(7, 3), e_force, atol=1e-12)
    np.testing.assert_allclose(virial_v.reshape(3, 3), e_virial, atol=1e-12)
    np.testing.assert_allclose(atom_virial_v.reshape(7, 3, 3), e_atom, atol=1e-12)
    # the descriptor derivative is DeePMD-kit's: the forces are -dE/dx
    np.testing.assert_allclose(force_v, minus_grad_v, rtol=1e-8, atol=1e-10)


def _table(rows, last):
    return RNG.normal(size=(rows, last * 6))


def _np_tabulate(table, info, em_x, em, last):
    lower, upper, top, s0, s1 = info[:5]
    first = int((upper - lower) / s0)
    nloc, nnei = em.shape[:2]
    out = np.zeros((nloc, 4, last))
    values = np.zeros((nloc, nnei, last))
    slopes = np.zeros((nloc, nnei, last))
    for i in range(nloc):
        for j in range(nnei):
            x = em_x[i * nnei + j, 0]
            if x < lower:
                row, xx = 0, 0.0
            elif x < upper:
                row = int((x - lower) / s0)
                xx = x - (row * s0 + lower)
            elif x < top:
                row = first + int((x - upper) / s1)
                xx = x - ((row - first) * s1 + upper)
            else:
                row, xx = first + int((top - upper) / s1) - 1, 0.0
            a = table[row].reshape(last, 6)
            values[i, j] = sum(a[:, k] * xx ** k for k in range(6))
            slopes[i, j] = sum(k * a[:, k] * xx ** (k - 1) for k in range(1, 6))
            out[i] += np.outer(em[i, j], values[i, j])
    return out, values, slopes


@pytest.mark.parametrize("sea", [True, False])
def test_tabulate_fusion_and_its_gradient(sea):
    last, nloc, nnei = 4, 3, 5
    info = np.array([0.0, 1.0, 2.0, 0.25, 0.5, -1.0])  # 4 rows of 0.25, then 2 of 0.5
    table = _table(6, last)
    em_x = RNG.uniform(0.02, 1.98, size=(nloc * nnei, 1))
    em_x[0, 0], em_x[1, 0] = -0.5, 2.5  # clamped below and above the table
    em = RNG.normal(size=(nloc, nnei, 4))
    dy = RNG.normal(size=(nloc, 4, last))
    forward = npu_aicore_ops.tabulatefusionsea if sea else npu_aicore_ops.tabulatefusion
    grad_op = npu_aicore_ops.tabulatefusionseagrad if sea else npu_aicore_ops.tabulatefusiongrad
    with tf.Graph().as_default() as graph:
        tx, tem = tf.constant(em_x), tf.constant(em)
        out = forward(table, info, tx, tem, last_layer_size=last)
        auto = tf.gradients(out, [tx, tem], grad_ys=tf.constant(dy))
        explicit = grad_op(table, info, tx, tem, dy, out)
    out_v, auto_v, explicit_v = _run([out, auto, list(explicit)], graph)
    e_out, values, slopes = _np_tabulate(table, info, em_x, em, last)
    np.testing.assert_allclose(out_v, e_out, rtol=1e-10, atol=1e-12)
    e_dem = np.einsum("ijk,ick->ijc", values, dy)
    e_dem_x = np.einsum("ijk,ijc,ick->ij", slopes, em, dy).reshape(-1, 1)
    for dem_x, dem in (auto_v, explicit_v):
        np.testing.assert_allclose(dem, e_dem, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dem_x, e_dem_x, rtol=1e-10, atol=1e-12)
    # inside the table the slope is the derivative of the output
    eps = 1e-6
    plus, minus = em_x.copy(), em_x.copy()
    plus[5, 0] += eps
    minus[5, 0] -= eps
    numeric = (np.sum(_np_tabulate(table, info, plus, em, last)[0] * dy)
               - np.sum(_np_tabulate(table, info, minus, em, last)[0] * dy)) / (2 * eps)
    np.testing.assert_allclose(explicit_v[0][5, 0], numeric, rtol=1e-6)


def test_tabulate_fusion_checks_the_table_width():
    with tf.Graph().as_default(), pytest.raises(ValueError, match="6 \\* last_layer_size = 24"):
        npu_aicore_ops.tabulatefusionsea(np.zeros((3, 12)), np.ones(5), np.zeros((2, 1)),
                                         np.zeros((1, 2, 4)), last_layer_size=4)


def test_lru_cache_v2_is_device_only():
    with tf.Graph().as_default(), pytest.raises(DeviceOnlyError, match="lru_cache_v2 needs the "
                                                "Ascend device: it swaps embedding rows"):
        npu_aicore_ops.lru_cache_v2([1, 2], tf.zeros([8, 4]), tf.zeros([4, 4]), tf.zeros([4]),
                                    0, 2)
