"""Unload a graph when a scope ends
(``npu_bridge.scoped_graph_manager.scoped_graph_manager.ScopedGraphManager``).

``with ScopedGraphManager(): sess.run(tf.global_variables_initializer())`` runs the variable
initialisation graph once and unloads it at the end of the scope, releasing the memory its
constants hold. The contract follows the original's documentation: one ``sess.run`` of one graph
inside the scope (a second registration is refused), for a single-threaded initialisation in the
main process; leaving the scope always ends the control, also after an error.

The runtime side reads the process-wide state through three functions:

* :func:`control_enabled` — True inside a scope;
* :func:`register_graph` ``(owner, graph_id, unload=None)`` — called by the session when it loads
  a graph inside a scope; returns False (and registers nothing) when a graph is already
  registered, which the caller reports as an error ("only one sess.run in the scope");
* at :meth:`ScopedGraphManager.stop`, ``unload()`` of the registered graph is called (errors in
  it are logged, not raised, as the original only warns) and the registration is cleared;
  :func:`registered_graph` returns ``(owner, graph_id)`` or None.
"""

import threading

from absl import logging

__all__ = ["ScopedGraphManager", "control_enabled", "register_graph", "registered_graph"]

_LOCK = threading.Lock()
_STATE = {"enabled": False, "owner": None, "graph_id": None, "unload": None}


def control_enabled():
    """True between :meth:`ScopedGraphManager.start` and :meth:`ScopedGraphManager.stop`."""
    with _LOCK:
        return _STATE["enabled"]


def register_graph(owner, graph_id, unload=None):
    """Register the graph ``graph_id`` of ``owner`` (a session) to be unloaded at the end of
    the scope; ``unload`` is called then. Returns False when one is already registered."""
    if unload is not None and not callable(unload):
        raise TypeError(f"unload must be callable or None, got {type(unload).__name__}")
    with _LOCK:
        if _STATE["graph_id"] is not None:
            logging.error("[ScopedGraphManager] Only support call sess.run once in scope of "
                          "ScopedGraphManager.")
            return False
        _STATE["owner"] = owner
        _STATE["graph_id"] = graph_id
        _STATE["unload"] = unload
        return True


def registered_graph():
    """``(owner, graph_id)`` of the registered graph, or None."""
    with _LOCK:
        if _STATE["graph_id"] is None:
            return None
        return _STATE["owner"], _STATE["graph_id"]


class ScopedGraphManager:
    """Scope whose single graph run is unloaded when it ends (see the module doc)."""

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.stop()

    def start(self):
        """Enable graph life-cycle control."""
        with _LOCK:
            _STATE["enabled"] = True

    def stop(self):
        """Disable the control and unload the registered graph, if any."""
        with _LOCK:
            _STATE["enabled"] = False
            unload, graph_id = _STATE["unload"], _STATE["graph_id"]
            _STATE.update(owner=None, graph_id=None, unload=None)
        if graph_id is None:
            logging.warning("[ScopedGraphManager] No need to unload a graph: none ran in the "
                            "scope")
            return
        if unload is not None:
            try:
                unload()
            except Exception as error:
                logging.warning("[ScopedGraphManager] Failed to unload graph %s: %s",
                                graph_id, error)
