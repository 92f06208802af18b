"""``npu_bridge.npu_cpu``: the host/AI CPU ops (:mod:`.npu_cpu_ops`) and the LRU id cache
(:mod:`.lru_cache`)."""
