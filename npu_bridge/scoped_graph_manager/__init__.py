"""``npu_bridge.scoped_graph_manager``: unload a graph when a scope ends
(:class:`.scoped_graph_manager.ScopedGraphManager`)."""
