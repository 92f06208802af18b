"""The backend interface: what a device backend tells the rewrite, and what it must do for it.

A backend has two halves: the lowering (graph time, below) and a runtime (run time,
:meth:`Backend.create_runtime`, see :mod:`npu_adapter.backends.runtime`). For the passes it
answers three questions — which op types it supports
(:meth:`Backend.op_support`, plus per-node exclusions in :meth:`Backend.supports_node`), whether
state (variables, queues, iterators, tables) stays with the TensorFlow session
(:attr:`Backend.keeps_state_on_host`), whether it can run here at all (:meth:`Backend.available`)
— and does one job: :meth:`Backend.lower` turns the encapsulated clusters into something
executable. Backends depend only on the library core; they never import passes or the session.
"""

import abc

from npu_adapter.op_support import default_op_support
from npu_adapter.vocabulary import REASON_SUPPORTED

__all__ = ["Backend"]


class Backend(abc.ABC):
    """Base class of device backends (CPU reference, XLA, CANN, or your own).

    Subclasses set :attr:`name` and implement :meth:`lower`; the other hooks have defaults.
    Instances are created by :func:`npu_adapter.backends.get_backend` with no arguments, once per
    call, so constructors must be cheap and must not touch devices: do expensive set-up lazily
    (and cache it at class level when it should be shared).

    Attributes:
        name: the registry name (lower-case, e.g. ``"cpu"``).
        keeps_state_on_host: True when the backend's clusters cannot hold state (variables,
            queues, tables): its ``supports_node`` refuses them and the partition treats them
            as with ``variable_placement=Host`` (no mix-mode variable copies, no "not in white
            list" error for host readers). False (the default) places state as the original
            does; how it then executes is the lowering's business (the CPU reference runs
            state owners in the outer graph, see :meth:`outside_cluster_reason`).
    """

    name = ""
    keeps_state_on_host = False
    # True when supports_node() depends on the op type alone (not on node attrs): the
    # partitioner then asks once per op type, which matters on 100k-node graphs.
    per_op_node_support = False
    # Consts of at least this many bytes stay outside cluster functions and are passed in as
    # arguments (None: constants go into the cluster, as the original puts them into the GeOp).
    hoist_constants_bytes = None
    # True when a rewritten graph holds nothing tied to the process that made it (no callback
    # tokens, handles or registrations), so another process may take it from the disk rewrite
    # cache. False (the safe default) keeps this backend's rewrites in the process.
    portable_rewrites = False
    # True when the backend's runtime keeps no per-session record of what TensorFlow's session
    # holds, so a closed NpuSession's TensorFlow session may serve the next NpuSession on the same
    # graph (see session/reuse.py). The XLA runtime counts the executables of its session; the
    # CANN runtime's graphs call back into it.
    reuses_tf_sessions = False
    # True when the cluster calls of a rewrite are plain TensorFlow function calls that
    # TensorFlow would inline at the first run anyway: sessions then install them inlined
    # (see graph/inline.py), which spares TensorFlow the function instantiation.
    inlines_calls_at_install = False
    # False when lower() does not read its ``clusters`` argument (it then gets None).
    lower_reads_clusters = True
    # True when lower() needs the data of the graph's constants (it writes them out, as the
    # CANN backend freezes each cluster into a model). Sessions otherwise rewrite graphs whose
    # large constants hold no data (npu_adapter/graph/payload.py) and put it back at install.
    needs_constant_data = False

    def op_support(self, config):
        """The op-support list for this backend under ``config``.

        ``config`` is an ``NpuConfig``-like object; implementations read it with ``getattr`` and
        defaults (for example ``getattr(config, "mix_compile_mode", False)``) so that any object
        with the relevant attributes works. The default is the CANN list: from
        ``$ASCEND_OPP_PATH`` when set, else the bundled default list.

        Returns:
            An :class:`npu_adapter.op_support.OpSupportList`.
        """
        return default_op_support(config)

    def supports_node(self, node_def, op_def):
        """Backend-specific exclusion of one node beyond the op list.

        Called only for nodes whose op type passed the list check. ``op_def`` is the node's
        ``OpDef`` or None when TensorFlow does not know the op. Return ``(False, reason)`` with a
        short snake_case reason code to keep the node on the host (for example a dtype the device
        cannot handle); the reason ends up in the placement report.

        Returns:
            ``(supported: bool, reason: str)``; the default is ``(True, "supported")``.
        """
        del node_def, op_def
        return True, REASON_SUPPORTED

    def outside_cluster_reason(self, node_def, op_def):
        """Why a cluster member of this op type must run in the outer graph on this backend
        (a reason code such as ``"resource_handle_cpu_reference"``), or None when it runs
        inside the cluster. Called with ``node_def=None``: the answer may depend on the op
        type alone. The placement report keeps the original's placement and records this as
        ``executes``."""
        del node_def, op_def
        return None

    @abc.abstractmethod
    def lower(self, graph_def, clusters, ctx):
        """Make the encapsulated clusters executable.

        Args:
            graph_def: the rewritten ``GraphDef``. Each cluster is one node whose op is ``GeOp``,
                with a ``function`` attr naming a ``FunctionDef`` in ``graph_def.library`` that
                holds the cluster's body (gears, when present, are a ``Case`` inside it or around
                it). Never mutate it (docs/architecture.md, "The pass contract").
            clusters: the partitioner's description of each cluster (name, node names, input
                and output tensor names, gears), in the order of the GeOp names; None for a
                backend whose ``lower_reads_clusters`` is False (reading them from the bodies
                costs about 50 ms for 100k clustered nodes).
            ctx: the pass context (read-only inputs: the typed config as ``ctx.config``).

        Returns:
            A new ``GraphDef`` that TensorFlow can import and run with ``tf.import_graph_def``
            (every op registered, every function present), computing the same values as the
            input graph. A backend may replace the ``GeOp`` nodes (e.g. by
            ``PartitionedCall`` of the function), annotate them, or swap the function bodies;
            node names that the session maps (stateful nodes, feeds, fetches) must be kept.

        Raises:
            npu_adapter.errors.BackendError: a cluster cannot be lowered; the message names it.
        """

    # The run-time half (see npu_adapter.backends.runtime); a "module:Class" path or a class.
    runtime_class = "npu_adapter.backends.runtime:BackendRuntime"

    def create_runtime(self, config):
        """The run-time half for one session under ``config``: a
        :class:`~npu_adapter.backends.runtime.BackendRuntime` that prepares each rewritten
        signature, picks its variant per run and keeps the statistics."""
        cls = self.runtime_class
        if isinstance(cls, str):
            import importlib

            module, _, name = cls.partition(":")
            cls = getattr(importlib.import_module(module), name)
        return cls(self, config)

    def available(self):
        """Whether this backend can run in this process.

        Returns:
            ``(True, "")`` when usable, else ``(False, why)`` with a message saying what is
            missing (a Python package, a device, a driver) and how to get it.
        """
        return True, ""

    def __repr__(self):
        return f"<{type(self).__name__} backend {self.name!r}>"
