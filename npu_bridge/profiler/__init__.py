"""``npu_bridge.profiler``: scoped profiling (:class:`.profiler.Profiler`)."""
