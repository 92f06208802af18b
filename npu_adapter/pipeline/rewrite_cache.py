"""A cache of rewrite results keyed by content, so a graph is rewritten once per process.

Online-inference scripts open a session per request (often on a freshly loaded graph): the
rewrite of a signature depends only on the client graph's structure, the run signature, the
options, the backend and the names it hands out, never on weight values (the passes run on the
payload-free graph of :mod:`npu_adapter.graph.payload`). So the key is a hash of exactly those
(the light client graph serialised deterministically, fetches, targets, feeds, the options, the
backend, ``graph_num``, the op support list, the environment variables that change the
rewrite, and the versions), and a hit restores the current graph's weights into a copy of the
cached light result.

:data:`MEMORY` holds the results of this process (bounded, least recently used dropped). A disk
layer (under ``graph_compiler_cache_dir`` / ``npu_adapter_cache_dir``) shares them between
processes.
"""

import collections
import copy
import hashlib
import json
import os
import threading

__all__ = ["RewriteCache", "MEMORY", "rewrite_key"]

# Environment variables a rewrite reads (they change its result).
_ENVIRONMENT = ("ASCEND_OPP_PATH", "ASCEND_CUSTOM_OPP_PATH", "NPU_ADAPTER_EMULATE_PRECISION")


def _versions():
    import tensorflow as tf

    from npu_adapter import __version__

    return {"npu_adapter": __version__, "tensorflow": tf.__version__}


def rewrite_key(client_graph_def, *, fetches, targets, feeds, config, backend, graph_num,
                pipeline, op_support):
    """The content key (hex SHA-256) of one rewrite (see the module docstring)."""
    digest = hashlib.sha256()
    digest.update(client_graph_def.SerializeToString(deterministic=True))
    backend_cls = type(backend)
    describe = {
        "fetches": list(fetches), "targets": list(targets), "feeds": list(feeds),
        "config": sorted((k, repr(v)) for k, v in config.to_dict().items()),
        "present": bool(getattr(config, "present", True)),
        "backend": [getattr(backend, "name", ""), backend_cls.__module__,
                    backend_cls.__qualname__],
        "graph_num": int(graph_num), "pipeline": pipeline or "",
        "op_support": op_support.fingerprint() if hasattr(op_support, "fingerprint")
        else repr(op_support),
        "environment": {k: os.environ.get(k, "") for k in _ENVIRONMENT},
        "versions": _versions(),
    }
    digest.update(json.dumps(describe, sort_keys=True).encode())
    return digest.hexdigest()


class RewriteCache:
    """Rewrite results by content key, at most ``max_entries`` (least recently used dropped).

    Entries are the *light* final graph (weights set aside, see ``graph/payload.py``) and the
    other fields of the :class:`~npu_adapter.pipeline.result.RewriteResult`.
    """

    def __init__(self, max_entries=64):
        self.max_entries = max_entries
        self._entries = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        """``(light graph_def, result)`` for ``key`` or None. Callers get their own copies."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
        light, result = entry
        graph_def = type(light)()
        graph_def.CopyFrom(light)
        return graph_def, copy.copy(result)

    def put(self, key, light_graph_def, result):
        """Remember ``result`` (its ``graph_def`` is replaced by ``light_graph_def``)."""
        stored = type(light_graph_def)()
        stored.CopyFrom(light_graph_def)
        result = copy.copy(result)
        result.graph_def = None
        with self._lock:
            self._entries[key] = (stored, result)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self):
        """Forget every entry (and the counters)."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0


MEMORY = RewriteCache()
"""The rewrite results of this process."""
