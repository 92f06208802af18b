"""``npu_bridge.helper``: the handle of the generated op wrappers (:mod:`.helper`)."""
