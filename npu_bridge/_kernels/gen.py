"""``gen_npu_ops``: the raw op wrappers, under the names TensorFlow generates for the original's
custom ops (``DynamicRnn`` -> ``dynamic_rnn``).

In the original, ``npu_ops.gen_npu_ops``, ``npu_aicore_ops.npu_aicore_ops``,
``npu_unary_ops.npu_unary_ops`` and ``npu_dynamic_rnn.gen_npu_ops`` are the same generated module
of ``_tf_adapter.so``; here they are the same :class:`GenNpuOps` namespace. A name the original
generates but this package does not build raises ``AttributeError`` naming it and the
available ones.
"""

from . import array, deepmd, deformable, kmeans, math, optim, random, rnn, system

__all__ = ["GenNpuOps", "gen_npu_ops"]

_OPS = {
    # system and device channels
    "npu_init": system.npu_init,
    "npu_shutdown": system.npu_shutdown,
    "outfeed_enqueue_op": system.outfeed_enqueue_op,
    "outfeed_dequeue_op": system.outfeed_dequeue_op,
    "stop_outfeed_dequeue_op": system.stop_outfeed_dequeue_op,
    "get_next": system.get_next,
    "npu_onnx_graph_op": system.npu_onnx_graph_op,
    # recurrent
    "dynamic_rnn": rnn.dynamic_rnn,
    "dynamic_rnn_v2": rnn.dynamic_rnn_v2,
    "dynamic_gru_v2": rnn.dynamic_gru_v2,
    "dynamic_augru": rnn.dynamic_augru,
    "basic_lstm_cell": rnn.basic_lstm_cell,
    # math
    "gelu": math.gelu,
    "gelu_grad": math.gelu_grad,
    "fast_gelu": math.fast_gelu,
    "fast_gelu_grad": math.fast_gelu_grad,
    "fast_gelu_v2": math.fast_gelu_v2,
    "centralization": math.centralization,
    "p_relu": math.p_relu,
    "p_relu_grad": math.p_relu_grad,
    "fused_layer_norm": math.fused_layer_norm,
    "fused_layer_norm_grad": math.fused_layer_norm_grad,
    "non_zero": math.non_zero,
    "non_zero_with_value": math.non_zero_with_value,
    "scatter_elements": array.scatter_elements,
    # dropout
    "drop_out_gen_mask": random.drop_out_gen_mask,
    "drop_out_gen_mask_v3": random.drop_out_gen_mask_v3,
    "drop_out_gen_mask_v4": random.drop_out_gen_mask_v4,
    "drop_out_do_mask": random.drop_out_do_mask,
    "drop_out_do_mask_v3": random.drop_out_do_mask_v3,
    # optimizers
    "lars": optim.lars,
    "lars_v2": optim.lars_v2,
    "adam_apply_one_assign": optim.adam_apply_one_assign,
    "adam_apply_one_with_decay_assign": optim.adam_apply_one_with_decay_assign,
    "lamb_apply_optimizer_assign": optim.lamb_apply_optimizer_assign,
    "lamb_apply_weight_assign": optim.lamb_apply_weight_assign,
    "k_means_centroids": kmeans.k_means_centroids,
    "k_means_centroids_v2": kmeans.k_means_centroids_v2,
    # convolution
    "deformable_offsets": deformable.deformable_offsets,
    "deformable_offsets_grad": deformable.deformable_offsets_grad_kernel,
    # DeePMD-kit, embedding cache
    "prod_env_mat_a": deepmd.prod_env_mat_a,
    "prod_force_se_a": deepmd.prod_force_se_a,
    "prod_virial_se_a": deepmd.prod_virial_se_a,
    "tabulate_fusion_se_a": deepmd.tabulate_fusion_se_a,
    "tabulate_fusion_se_a_grad": deepmd.tabulate_fusion_se_a_grad,
    "tabulate_fusion": deepmd.tabulate_fusion,
    "tabulate_fusion_grad": deepmd.tabulate_fusion_grad,
    "lru_cache_v2": deepmd.lru_cache_v2,
}


class GenNpuOps:
    """A namespace of raw op wrappers, read like a generated op module."""

    def __init__(self, ops):
        self.__dict__.update(ops)
        self._names = sorted(ops)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"gen_npu_ops.{name} is a custom op of the original _tf_adapter.so that this "
            f"pure-Python build does not provide; available: {', '.join(self._names)}")

    def __dir__(self):
        return list(self._names)

    def __repr__(self):
        return f"<gen_npu_ops: {len(self._names)} op wrappers>"


gen_npu_ops = GenNpuOps(_OPS)
"""The shared namespace of raw op wrappers."""
