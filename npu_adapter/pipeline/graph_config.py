"""Graph-level configuration: gating and the settings carried by node attributes.

Two things decide how the original adapter treats a graph besides the session options
(docs/original-adapter.md, 1 and 3): whether it touches the graph at all (gating), and graph-level
settings stamped on nodes by ``set_graph_exec_config`` (``_graph_dynamic_input`` and friends), which
override the session's dynamic options. :func:`read_graph_config` computes both from a GraphView and
the NpuConfig; every pass that needs them calls it on its own input (it is linear and cheap), so no
pass depends on another pass's info. :func:`gate_reason` is the gate alone, which every gated pass
checks before it runs (``PassBase.gated``).
"""

import dataclasses

from npu_adapter.errors import RewriteError
from npu_adapter.vocabulary import (
    GRAPH_DYNAMIC_INPUT_ATTR,
    GRAPH_DYNAMIC_MODE_ATTR,
    NO_NEED_OPTIMIZE_ATTR,
    NPU_OPTIMIZER_ATTR,
)

__all__ = ["GraphConfig", "read_graph_config", "gate_reason"]

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


def gate_reason(graph_def, config):
    """Why the original adapter would leave ``graph_def`` alone (None: it rewrites it); the
    ``skip_reason`` of :func:`read_graph_config`, without the rest."""
    reason = _config_gate(config)
    if reason is not None:
        return reason
    for node in graph_def.node:
        attrs = node.attr
        if NO_NEED_OPTIMIZE_ATTR in attrs or NPU_OPTIMIZER_ATTR in attrs:
            return _node_gate(attrs)
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
    data_format = ""
    getnext_count = 0
    restore = False
    graph_dynamic = None
    # One walk over the nodes for the gate (as gate_reason) and the graph options. An error
    # found on the way is raised only once the graph is known not to be gated.
    error = None
    for node, op in zip(view.nodes, view.ops):
        attrs = node.attr
        skip = _node_gate(attrs)
        if skip is not None:
            return GraphConfig(skip_reason=skip)
        if error is not None:
            continue
        if op in _GETNEXT_OPS:
            getnext_count += 1
        elif op in _RESTORE_OPS:
            restore = True
        elif op == "OneShotIterator" and iterations_per_loop != 1:
            error = _one_shot_error(node.name, iterations_per_loop)
            continue
        if not data_format and "data_format" in attrs:
            data_format = attrs["data_format"].s.decode()
        if GRAPH_DYNAMIC_INPUT_ATTR in attrs:
            if GRAPH_DYNAMIC_MODE_ATTR not in attrs:
                error = RewriteError(
                    f"node {node.name!r} has _graph_dynamic_input but no "
                    "_graph_dynamic_graph_execute_mode; set both with set_graph_exec_config",
                    code="InvalidArgument", node=node.name)
                continue
            # Last node visited wins, as in the original's GetGraphConfig loop.
            graph_dynamic = node
    skip = _off_line_gate(config)
    if skip is not None:
        return GraphConfig(skip_reason=skip)
    if error is not None:
        raise error
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
