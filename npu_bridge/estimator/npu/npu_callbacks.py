"""Keras callbacks of the NPU API (``npu_bridge.estimator.npu.npu_callbacks``).

:class:`NPUBroadcastGlobalVariablesCallback` broadcasts the model's variables from the root rank
when training starts. On the single rank this build runs, the broadcast is the identity and the
callback does nothing; with ``RANK_SIZE`` > 1 building it raises
:class:`~npu_adapter.errors.BackendError`.
"""

import tensorflow as tf

from npu_bridge import _env

__all__ = ["NPUBroadcastGlobalVariablesCallback"]


class NPUBroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Broadcast the initial variables from ``root_rank`` (must be 0: the only rank)."""

    def __init__(self, root_rank):
        _env.require_single_rank("NPUBroadcastGlobalVariablesCallback")
        if isinstance(root_rank, bool) or root_rank != 0:
            raise ValueError(f"NPUBroadcastGlobalVariablesCallback: root_rank={root_rank!r}; "
                             "this build runs a single rank whose id is 0")
        super().__init__()
        self.root_rank = root_rank
