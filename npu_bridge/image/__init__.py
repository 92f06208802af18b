"""``npu_bridge.image``: JPEG decode-and-resize ops (:mod:`.image_ops`)."""
