"""The signature cache: each run signature is rewritten and installed once per execution graph.

A run signature is what a ``Session.run`` asks for: the fetched tensors, the target operations and
the fed tensors, by name. TensorFlow prepares executors per signature; an NPU session rewrites and
installs per signature (:mod:`npu_adapter.session.runner`). Sessions on one graph with equal
options share their signatures through the execution graph, so a second session, or a session per
request, finds them rewritten and installed; concurrent first runs build a signature once. A
signature that failed to build is not kept: a later run (after fixing a feed) builds it again.
"""

import threading

import tensorflow as tf

__all__ = ["Signature", "SignatureNames", "signature_names", "shared_signature"]


class SignatureNames(tuple):
    """``(tensors, ops, feeds)``: sorted user names of the fetched tensors, target operations
    and fed tensors of a run."""

    __slots__ = ()

    @property
    def tensors(self):
        return self[0]

    @property
    def ops(self):
        return self[1]

    @property
    def feeds(self):
        return self[2]


def signature_names(elements, fed_tensors):
    """The :class:`SignatureNames` of a run fetching ``elements`` (tensors and operations of the
    user's graph) and feeding ``fed_tensors``."""
    tensors = sorted({e.name for e in elements if isinstance(e, tf.Tensor)})
    ops = sorted({e.name for e in elements if isinstance(e, tf.Operation)})
    feeds = sorted({t.name for t in fed_tensors})
    return SignatureNames((tuple(tensors), tuple(ops), tuple(feeds)))


class Signature:
    """One run signature installed in an execution graph.

    Attributes:
        names: its :class:`SignatureNames`.
        result: the :class:`~npu_adapter.pipeline.result.RewriteResult` (None when the signature
            runs on the user's nodes as they are: partial runs).
        installed: the :class:`~npu_adapter.session.execution_graph.Installed` it runs.
        iterations: the steps one run of it executes (``iterations_per_loop`` for a loop-sunk
            signature, else 1).
        variants: variant key → Installed, for the variants the backend's runtime selects (a
            gear called directly, a ``lazy_recompile`` specialisation), installed on first use.
        lock: held while a variant is installed.
    """

    __slots__ = ("names", "result", "installed", "iterations", "variants", "lock")

    def __init__(self, names, result, installed, iterations=1):
        self.names = names
        self.result = result
        self.installed = installed
        self.iterations = iterations
        self.variants = {}
        self.lock = threading.Lock()

    def variant(self, key, install):
        """The Installed of variant ``key``: ``install()`` on first use, shared afterwards."""
        installed = self.variants.get(key)
        if installed is None:
            with self.lock:
                installed = self.variants.get(key)
                if installed is None:
                    installed = self.variants[key] = install()
        return installed


class _Pending:
    """A signature being built by one thread; others wait for it."""

    __slots__ = ("done", "signature", "error")

    def __init__(self):
        self.done = threading.Event()
        self.signature = None
        self.error = None


def shared_signature(execution_graph, key, build):
    """The signature stored under ``key`` in ``execution_graph``, made by ``build()`` on first
    use (once, whatever the number of threads asking)."""
    with execution_graph.lock:
        entry = execution_graph.signatures.get(key)
        if isinstance(entry, Signature):
            return entry
        owner = entry is None
        if owner:
            entry = execution_graph.signatures[key] = _Pending()
    if not owner:
        entry.done.wait()
        if entry.error is not None:
            raise entry.error
        return entry.signature
    try:
        signature = build()
    except BaseException as exc:
        entry.error = exc
        with execution_graph.lock:
            execution_graph.signatures.pop(key, None)
        entry.done.set()
        raise
    entry.signature = signature
    with execution_graph.lock:
        execution_graph.signatures[key] = signature
    entry.done.set()
    return signature
