"""Graph-level configuration: gating and the settings carried by node attributes.

Two things decide how the original adapter treats a graph besides the session options
(docs/original-adapter.md, 1 and 3): whether it touches the graph at all (gating), and graph-level
settings stamped on nodes by ``set_graph_exec_config`` (``_graph_dynamic_input`` and friends), which
override the session's dynamic options. :func:`read_graph_config` computes both from a GraphView and
the NpuConfig; every pass that needs them calls it on its own input, so no pass depends on another
pass's info. :func:`gate_reason` is the gate alone, which every gated pass checks before it runs
(``PassBase.gated``).

Both start from what the user's node attributes say whatever the options (:func:`node_settings`:
one walk over the nodes), kept in the view's cache: a view handed on with ``GraphView.rebind``
indexes a graph whose passes only added their own annotations, so the walk is done once for the
passes up to ``encapsulate``.
"""

import collections
import dataclasses

from npu_adapter.errors import RewriteError
from npu_adapter.vocabulary import (
    GRAPH_DYNAMIC_INPUT_ATTR,
    GRAPH_DYNAMIC_MODE_ATTR,
    NO_NEED_OPTIMIZE_ATTR,
    NPU_OPTIMIZER_ATTR,
    WITHOUT_NPU_COMPILE_ATTR,
)

__all__ = ["GraphConfig", "NodeSettings", "read_graph_config", "gate_reason", "node_settings"]

_GETNEXT_OPS = ("IteratorGetNext",)
_RESTORE_OPS = ("Restore", "RestoreV2")
_DATA_FORMATS = ("NHWC", "NCHW", "NDHWC", "NCDHW", "DHWCN", "DHWNC", "ND")


@dataclasses.dataclass(frozen=True)
class GraphConfig:
    """What the partitioner knows about one graph beyond the session options.

    Attributes:
        skip_reason: why the graph is left untouched (``None`` when it is rewritten):
            ``no_npu_optimizer``, ``job_ps``, ``job_default``, ``use_off_line_false``,
            ``no_need_optimize`` or ``already_rewritten``.
        dynamic_input: effective dynamic_input (graph-level attrs override the session).
        dynamic_graph_execute_mode: effective mode (``dynamic_execute`` or ``lazy_recompile``).
        data_inputs_shape_range / getnext_inputs_shape_range: routed shape ranges
            (docs/original-adapter.md, 3).
        graph_level_dynamic: True when a node carried ``_graph_dynamic_input``.
        train_graph: the fetch's ``_is_train_graph`` (None when absent).
        recompute_mode: the fetch's ``_recompute_mode`` ("" when absent).
        is_var_init_graph: the graph restores variables (``Restore``/``RestoreV2`` present).
        data_format: first non-empty ``data_format`` attr of an op node, else ``"ND"``.
        enable_dp: enable_data_pre_proc and the graph has an IteratorGetNext.
        getnext_count: number of IteratorGetNext nodes.
        is_dynamic_getnext: lazy_recompile with enable_dp and a GetNext
            (docs/original-adapter.md, 10).
    """

    skip_reason: object = None
    dynamic_input: bool = False
    dynamic_graph_execute_mode: str = "dynamic_execute"
    data_inputs_shape_range: str = ""
    getnext_inputs_shape_range: str = ""
    graph_level_dynamic: bool = False
    train_graph: object = None
    recompute_mode: str = ""
    is_var_init_graph: bool = False
    data_format: str = "ND"
    enable_dp: bool = False
    getnext_count: int = 0
    is_dynamic_getnext: bool = False

    @property
    def skipped(self):
        """True when the graph must be left untouched."""
        return self.skip_reason is not None

    def geop_attrs(self):
        """The graph options the original stamps on every GeOp (``_<key>`` → string)."""
        attrs = {"_dynamic_input": "1" if self.dynamic_input else "0"}
        if self.dynamic_input:
            attrs["_dynamic_graph_execute_mode"] = self.dynamic_graph_execute_mode
            if self.data_inputs_shape_range:
                attrs["_data_inputs_shape_range"] = self.data_inputs_shape_range
            if self.getnext_inputs_shape_range:
                attrs["_getnext_inputs_shape_range"] = self.getnext_inputs_shape_range
        if self.train_graph is not None:
            attrs["_train_graph"] = "1" if self.train_graph else "0"
        if self.recompute_mode:
            attrs["_recompute_mode"] = self.recompute_mode
        if self.is_var_init_graph:
            attrs["_is_var_init_graph"] = "1"
        if self.is_dynamic_getnext:
            attrs["_is_dynamic_getnext"] = "1"
        return attrs


class NodeSettings(collections.namedtuple("NodeSettings", [
        "gate", "getnext_count", "restore", "data_format", "dynamic_node", "missing_mode_node",
        "one_shot_node", "without_npu_compile"])):
    """What the node attributes of a graph say, whatever the options (node indices or None).

    Attributes:
        gate: the gate reason of the first node that gates the graph (``_NoNeedOptimize``,
            ``_NpuOptimizer``), or None.
        getnext_count: number of ``IteratorGetNext`` nodes.
        restore: whether a ``Restore``/``RestoreV2`` node is present.
        data_format: the first non-empty ``data_format`` attr ("" when none).
        dynamic_node: the last node carrying set_graph_exec_config's pair of attributes.
        missing_mode_node: the first node with ``_graph_dynamic_input`` but no mode.
        one_shot_node: the first ``OneShotIterator``.
        without_npu_compile: whether a node carries ``_without_npu_compile`` (the candidate
            rules then read that node, not only its op type).
    """

    __slots__ = ()


def node_settings(view):
    """The :class:`NodeSettings` of the graph in ``view`` (one walk; kept in the view's cache,
    which rebound views share: passes never write these attributes)."""
    found = view.cache.get("node_settings")
    if found is not None:
        return found
    gate = None
    getnext_count = 0
    restore = False
    data_format = ""
    dynamic_node = missing_mode_node = one_shot_node = None
    without_npu_compile = False
    # (From the GraphDef, not the view's list of NodeDefs, which this walk need not make.)
    for i, (node, op) in enumerate(zip(view.graph_def.node, view.ops)):
        attrs = node.attr
        if gate is None:
            gate = _node_gate(attrs)
        if op in _GETNEXT_OPS:
            getnext_count += 1
        elif op in _RESTORE_OPS:
            restore = True
        elif op == "OneShotIterator" and one_shot_node is None:
            one_shot_node = i
        if not without_npu_compile and WITHOUT_NPU_COMPILE_ATTR in attrs:
            without_npu_compile = True
        if not data_format and "data_format" in attrs:
            data_format = attrs["data_format"].s.decode()
        if GRAPH_DYNAMIC_INPUT_ATTR in attrs:
            if GRAPH_DYNAMIC_MODE_ATTR not in attrs:
                if missing_mode_node is None:
                    missing_mode_node = i
            else:
                dynamic_node = i  # the last one wins, as in the original's GetGraphConfig loop
    found = view.cache["node_settings"] = NodeSettings(
        gate, getnext_count, restore, data_format, dynamic_node, missing_mode_node,
        one_shot_node, without_npu_compile)
    return found


def gate_reason(view, config):
    """Why the original adapter would leave the graph in ``view`` alone (None: it rewrites it);
    the ``skip_reason`` of :func:`read_graph_config`, without the rest."""
    reason = _config_gate(config)
    if reason is not None:
        return reason
    reason = node_settings(view).gate
    if reason is not None:
        return reason
    return _off_line_gate(config)


def _config_gate(config):
    """The gate reasons decided by the options alone, before any node is looked at."""
    if config is None or not getattr(config, "present", True):
        return "no_npu_optimizer"
    job = getattr(config, "job", "localhost") or "localhost"
    if job in ("ps", "default"):
        return f"job_{job}"
    return None


def _node_gate(attrs):
    """The gate reason a node's attrs give (None: this node does not gate the graph)."""
    if NO_NEED_OPTIMIZE_ATTR in attrs:
        return "no_need_optimize"
    if NPU_OPTIMIZER_ATTR in attrs:
        # Cluster nodes carry the options (as in the original's GetAttrOptimizePass skip).
        return "already_rewritten"
    return None


def _off_line_gate(config):
    if not getattr(config, "use_off_line", True):
        return "use_off_line_false"
    return None


def _bool_attr(node, key):
    value = node.attr[key]
    if value.HasField("b"):
        return value.b
    if value.HasField("s"):
        return value.s in (b"1", b"true", b"True")
    if value.HasField("i"):
        return value.i != 0
    return False


def _str_attr(node, key):
    value = node.attr.get(key)
    return value.s.decode() if value is not None else ""


def _one_shot_error(name, iterations_per_loop):
    return RewriteError(
        f"OneShotIterator {name!r} cannot be used with iterations_per_loop="
        f"{iterations_per_loop}; use make_initializable_iterator (as the original adapter "
        "requires)", code="InvalidArgument", node=name)


def read_graph_config(view, config):
    """The :class:`GraphConfig` of the graph in ``view`` under ``config``.

    Raises:
        RewriteError: conditions the original rejects at partition time: lazy_recompile with
            iterations_per_loop > 1 (InvalidArgument), a OneShotIterator with
            iterations_per_loop != 1, or more than one IteratorGetNext with the dynamic-dims trio.
    """
    skip = _config_gate(config)
    if skip is not None:
        return GraphConfig(skip_reason=skip)
    from npu_adapter.config.parsers import parse_shape_range

    iterations_per_loop = getattr(config, "iterations_per_loop", 1)
    settings = node_settings(view)
    if settings.gate is not None:
        return GraphConfig(skip_reason=settings.gate)
    skip = _off_line_gate(config)
    if skip is not None:
        return GraphConfig(skip_reason=skip)
    # The first error in node order is raised (the original stops at it).
    errors = []
    if settings.one_shot_node is not None and iterations_per_loop != 1:
        errors.append((settings.one_shot_node, 0, _one_shot_error(
            view.names[settings.one_shot_node], iterations_per_loop)))
    if settings.missing_mode_node is not None:
        name = view.names[settings.missing_mode_node]
        errors.append((settings.missing_mode_node, 1, RewriteError(
            f"node {name!r} has _graph_dynamic_input but no "
            "_graph_dynamic_graph_execute_mode; set both with set_graph_exec_config",
            code="InvalidArgument", node=name)))
    if errors:
        raise min(errors, key=lambda e: e[:2])[2]
    getnext_count = settings.getnext_count
    restore = settings.restore
    data_format = settings.data_format
    graph_dynamic = view.node_at(settings.dynamic_node) if settings.dynamic_node is not None \
        else None
    enable_dp = bool(getattr(config, "enable_data_pre_proc", False)) and getnext_count > 0
    train_graph = None
    recompute_mode = ""
    if graph_dynamic is not None:
        dynamic_input = _bool_attr(graph_dynamic, "_graph_dynamic_input")
        mode = _str_attr(graph_dynamic, "_graph_dynamic_graph_execute_mode")
        shape_range = _str_attr(graph_dynamic, "_graph_dynamic_inputs_shape_range")
        if "_is_train_graph" in graph_dynamic.attr:
            train_graph = _bool_attr(graph_dynamic, "_is_train_graph")
        recompute_mode = _str_attr(graph_dynamic, "_recompute_mode")
        option = f"set_graph_exec_config on {graph_dynamic.name!r}"
    else:
        dynamic_input = bool(getattr(config, "dynamic_input", False))
        mode = getattr(config, "dynamic_graph_execute_mode", "dynamic_execute") or "dynamic_execute"
        shape_range = getattr(config, "dynamic_inputs_shape_range", "") or ""
        option = "dynamic_inputs_shape_range"
    if dynamic_input and mode not in ("dynamic_execute", "lazy_recompile"):
        raise RewriteError(
            f"{option}: dynamic_graph_execute_mode {mode!r} is invalid; allowed: "
            "'dynamic_execute', 'lazy_recompile'", code="InvalidArgument")
    data_range = getnext_range = ""
    if dynamic_input and mode == "dynamic_execute" and shape_range:
        data_range, getnext_range = parse_shape_range(shape_range, enable_dp)
    if dynamic_input and mode == "lazy_recompile" and iterations_per_loop > 1:
        raise RewriteError(
            "iterations_per_loop only support 1 in lazy_recompile mode. Current is:"
            f"{iterations_per_loop}", code="InvalidArgument")
    dims_trio = all(getattr(config, k, None) for k in ("input_shape", "dynamic_dims"))
    if dims_trio and getnext_count > 1:
        raise RewriteError(
            f"the graph has {getnext_count} IteratorGetNext nodes; input_shape/dynamic_dims "
            "support at most one", code="InvalidArgument")
    if data_format and data_format not in _DATA_FORMATS:
        data_format = "ND"  # the GeOp OpDef only accepts these; others fall back as in GE
    return GraphConfig(
        skip_reason=None,
        dynamic_input=dynamic_input,
        dynamic_graph_execute_mode=mode,
        data_inputs_shape_range=data_range,
        getnext_inputs_shape_range=getnext_range,
        graph_level_dynamic=graph_dynamic is not None,
        train_graph=train_graph,
        recompute_mode=recompute_mode,
        is_var_init_graph=restore,
        data_format=data_format or "ND",
        enable_dp=enable_dp,
        getnext_count=getnext_count,
        is_dynamic_getnext=bool(dynamic_input and mode == "lazy_recompile" and enable_dp),
    )
