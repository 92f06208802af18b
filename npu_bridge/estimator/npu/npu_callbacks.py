"""Keras callbacks of the NPU API (``npu_bridge.estimator.npu.npu_callbacks``).

:class:`NPUBroadcastGlobalVariablesCallback` broadcasts the global variables from the root rank
before the first training batch, so every rank starts from the root's weights (graph-mode Keras,
as TF1.15 scripts run it: the broadcast runs in the Keras session). With one rank it does
nothing.
"""

import tensorflow as tf

from npu_bridge.estimator.npu import npu_hook

__all__ = ["BroadcastGlobalVariablesCallbackImpl", "NPUBroadcastGlobalVariablesCallback",
           "broadcast_global_variables"]


def broadcast_global_variables(root_rank):
    """An op giving every global variable the value it has on ``root_rank``."""
    return npu_hook.broadcast_global_variables(root_rank)


class BroadcastGlobalVariablesCallbackImpl:
    """The callback's logic: broadcast once, at the first batch."""

    def __init__(self, root_rank, *args):
        _, self.root_rank = npu_hook._check_root(root_rank, "NPUBroadcastGlobalVariablesCallback")
        self.broadcast_done = False
        super().__init__(*args)

    def on_batch_begin(self, batch, logs=None):
        """Broadcast the variables before the first batch."""
        if self.broadcast_done:
            return
        if npu_hook._check_root(self.root_rank, "NPUBroadcastGlobalVariablesCallback")[0].size > 1:
            bcast_op = broadcast_global_variables(self.root_rank)
            tf.compat.v1.keras.backend.get_session().run(bcast_op)
        self.broadcast_done = True

    def on_train_batch_begin(self, batch, logs=None):
        """Keras 2 calls this one for training batches."""
        self.on_batch_begin(batch, logs)


class NPUBroadcastGlobalVariablesCallback(BroadcastGlobalVariablesCallbackImpl,
                                          tf.keras.callbacks.Callback):
    """Broadcast the initial variables from ``root_rank`` at the start of training."""

    def __init__(self, root_rank):
        super().__init__(root_rank)
