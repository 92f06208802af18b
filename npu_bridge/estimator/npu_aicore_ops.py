"""AI-core op wrappers (``npu_bridge.estimator.npu_aicore_ops``) built from TensorFlow ops.

The original wraps custom ops of ``_tf_adapter.so``; here each is composed of TensorFlow ops
(``npu_bridge._kernels``), with the gradient the original registers (``docs/api-ops.md``):

* math: :func:`fast_gelu_v2`, :func:`centralization`, :func:`prelu` (gradient
  :func:`prelu_grad`), :func:`layer_norm` (``FusedLayerNorm``; its gradient uses only the
  gradient of the normalised output, as the original's), :func:`nonzero`,
  :func:`nonzerowithvalue`;
* dropout: :func:`dropout_v3`, :func:`dropout_v4` (deterministic under a graph or op seed);
* the DeePMD-kit family :func:`prod_env_mat_a`, :func:`prodforcesea`, :func:`prodvirialsea`,
  :func:`tabulatefusion`, :func:`tabulatefusionsea` and their gradients;
* :func:`lru_cache_v2` manages a cache in device memory and raises
  :class:`~npu_adapter.errors.DeviceOnlyError`.

``npu_aicore_ops`` is the namespace of raw op wrappers (the same object as
``npu_ops.gen_npu_ops``).
"""

import numbers

import tensorflow as tf

from npu_bridge._kernels import deepmd as _deepmd
from npu_bridge._kernels import math as _math
from npu_bridge._kernels import random as _random
from npu_bridge._kernels.common import DEFAULT_GRAPH_SEED
from npu_bridge._kernels.gen import gen_npu_ops as npu_aicore_ops

__all__ = [
    "DEFAULT_GRAPH_SEED",
    "centralization",
    "dropout_v3",
    "dropout_v4",
    "fast_gelu_v2",
    "layer_norm",
    "lru_cache_v2",
    "nonzero",
    "nonzerowithvalue",
    "npu_aicore_ops",
    "prelu",
    "prelu_grad",
    "prod_env_mat_a",
    "prodforcesea",
    "prodvirialsea",
    "tabulatefusion",
    "tabulatefusiongrad",
    "tabulatefusionsea",
    "tabulatefusionseagrad",
]

# The original's top-level imports that scripts can reach through this module, where TensorFlow
# has a public module for them (its internal modules ops and random_seed are not re-exported).
_ORIGINAL_IMPORTS = (numbers,)
dtypes = tf.dtypes


def fast_gelu_v2(x, name=None):
    """``FastGeluV2``: GELU with a clipped-parabola approximation of ``erf`` (CANN's
    formula, see ``docs/api-ops.md``); float16 or float32 ``x``."""
    return _math.fast_gelu_v2(x, name)


def centralization(x, axes, name=None):
    """``Centralization``: ``x - reduce_mean(x, axes, keepdims=True)``."""
    return _math.centralization(x, axes, name=name)


def prelu(x, weight):
    """``PRelu``: ``x`` where positive, else ``weight * x``. A one-element ``weight`` applies to
    all of ``x``, a vector to the channel axis 1, otherwise ``weight`` broadcasts against the
    trailing dimensions (the ``PReLU`` layer's ``input_shape[1:]``)."""
    return _math.p_relu(x, weight)


prelu_grad = _math.prelu_grad


def _dropout(api, x, keep_prob, noise_shape, seed, name, gen_mask):
    x = _random.check_dropout_args(api, x, keep_prob)
    if not isinstance(keep_prob, (tf.Tensor, tf.Variable)) and keep_prob == 1.0:
        return x
    return _random.dropout_with_mask(x, keep_prob, noise_shape, seed, name or api, gen_mask,
                                     _random.drop_out_do_mask_v3)


def dropout_v3(x, keep_prob, noise_shape=None, seed=None, name=None):
    """Dropout (ops ``DropOutGenMaskV3`` + ``DropOutDoMaskV3``): keeps each element with
    probability ``keep_prob`` and scales it by ``1 / keep_prob``; same checks and seeding as
    ``npu_ops.dropout``, and it also works in eager mode."""
    return _dropout("dropout_v3", x, keep_prob, noise_shape, seed, name,
                    _random.drop_out_gen_mask_v3)


def dropout_v4(x, keep_prob, noise_shape=None, seed=None, output_dtype=tf.bool, name=None):
    """Dropout (ops ``DropOutGenMaskV4`` + ``DropOutDoMaskV3``): as :func:`dropout_v3`, the mask
    being of ``output_dtype`` (``bool``)."""
    dtype = tf.as_dtype(output_dtype)

    def gen_mask(shape, prob, seed1, seed2):
        return _random.drop_out_gen_mask_v4(shape, prob, seed1, seed2, dtype)

    return _dropout("dropout_v4", x, keep_prob, noise_shape, seed, name, gen_mask)


def layer_norm(x, gamma, beta, begin_norm_axis=0, begin_params_axis=0, epsilon=0.0000001,
               name=None):
    """``FusedLayerNorm``: ``[y, mean, variance]`` of the normalisation of ``x`` over the axes
    ``begin_norm_axis..`` with ``gamma``/``beta`` of shape ``x.shape[begin_params_axis:]``."""
    return list(_math.fused_layer_norm(x, gamma, beta, begin_norm_axis, begin_params_axis,
                                       epsilon, name))


def nonzero(x, transpose=False, output_type=tf.int64, name=None):
    """``NonZero``: the coordinates of the non-zero elements of ``x`` in row-major order,
    ``[count, rank]``, or ``[rank, count]`` with ``transpose``."""
    return _math.non_zero(x, transpose, output_type, name=name)


def nonzerowithvalue(x, transpose=False, output_type=tf.int64, name=None):
    """``NonZeroWithValue`` of a 2-D ``x``: ``(value, index, count)``, fixed-size outputs whose
    first ``count`` entries are valid (see ``docs/api-ops.md`` for the index layouts)."""
    return _math.non_zero_with_value(x, transpose, output_type, name=name)


def lru_cache_v2(index_list, data, cache, tag, is_last_call, pre_route_count, name=None):
    """``LRUCacheV2`` swaps embedding rows between a host table and a cache in device memory:
    :class:`~npu_adapter.errors.DeviceOnlyError` when built."""
    return _deepmd.lru_cache_v2(index_list, data, cache, tag, is_last_call, pre_route_count,
                                name)


def prod_env_mat_a(coord, types, natoms, box, mesh, davg, dstd, rcut_a=0.0, rcut_r=0.0,
                   rcut_r_smth=0.0, sel_a=None, sel_r=None, name=None):
    """``ProdEnvMatA`` (DeePMD-kit ``se_a`` environment matrix): ``(descrpt, descrpt_deriv,
    rij, nlist)``; see ``docs/api-ops.md``."""
    return _deepmd.prod_env_mat_a(coord, types, natoms, box, mesh, davg, dstd, rcut_a, rcut_r,
                                  rcut_r_smth, sel_a, sel_r, name)


def prodforcesea(net_deriv, in_deriv, nlist, natoms, n_a_sel=0, n_r_sel=0, name=None):
    """``ProdForceSeA``: atomic forces ``[frames, nall*3]`` from the network's derivative with
    respect to the descriptor."""
    return _deepmd.prod_force_se_a(net_deriv, in_deriv, nlist, natoms, n_a_sel, n_r_sel, name)


def prodvirialsea(net_deriv, in_deriv, rij, nlist, natoms, n_a_sel=0, n_r_sel=0, name=None):
    """``ProdVirialSeA``: ``(virial [frames, 9], atom_virial [frames, nall*9])``."""
    return _deepmd.prod_virial_se_a(net_deriv, in_deriv, rij, nlist, natoms, n_a_sel, n_r_sel,
                                    name)


def tabulatefusionsea(table, table_info, em_x, em, last_layer_size=128, name=None):
    """``TabulateFusionSeA``: the tabulated ``se_a`` embedding times the environment matrix,
    ``[nloc, 4, last_layer_size]``."""
    return _deepmd.tabulate_fusion_se_a(table, table_info, em_x, em, last_layer_size, name)


def tabulatefusionseagrad(table, table_info, em_x, em, dy_dem_x, dy_dem, name=None):
    """``TabulateFusionSeAGrad``: ``(dy_dem_x, dy_dem)``. As in the original wrapper, the
    argument ``dy_dem_x`` is the op's ``dy`` input (the gradient of the descriptor) and
    ``dy_dem`` its ``descriptor`` input (the forward output)."""
    return _deepmd.tabulate_fusion_se_a_grad(table, table_info, em_x, em, dy_dem_x, dy_dem,
                                             name)


def tabulatefusion(table, table_info, em_x, em, last_layer_size=128, name=None):
    """``TabulateFusion``: the earlier name of :func:`tabulatefusionsea`."""
    return _deepmd.tabulate_fusion(table, table_info, em_x, em, last_layer_size, name)


def tabulatefusiongrad(table, table_info, em_x, em, dy_dem_x, dy_dem, name=None):
    """``TabulateFusionGrad``: as :func:`tabulatefusionseagrad`."""
    return _deepmd.tabulate_fusion_grad(table, table_info, em_x, em, dy_dem_x, dy_dem, name)
