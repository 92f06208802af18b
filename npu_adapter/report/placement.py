"""The placement report: where every node runs and why, as one JSON document.

:func:`placement_report` turns a :class:`~npu_adapter.pipeline.result.RewriteResult` and the
graph the rewrite received into a dict (written as ``placement.json`` by ``dump_graphs``)::

    {
      "format": "npu_adapter.placement/1",
      "model": ..., "backend": ..., "pipeline": ..., "options": {...explicit options...},
      "fetches": [...], "feeds": [...], "rewritten": bool, "skip_reason": str | null,
      "summary": {
        "nodes", "npu", "host", "clusters", "npu_fraction", "npu_executed_on_host",
        "boundary": {"inputs", "outputs", "bytes", "bytes_per_example",
                     "tensors_of_unknown_size"},
        "by_reason":     [{"reason", "device", "count", "description"}, ...],
        "host_blockers": [{"reason", "count", "description", "op_types": [{"op", "count"}],
                           "causes": [{"op", "count", "functions", "nodes", "text"}]}, ...],
        "by_op_type":    [{"op", "count", "npu", "host", "host_reasons": {code: count}}, ...]
      },
      "clusters": [{"name", "op", "size", "op_types", "inputs": [tensor record], "outputs": [...],
                    "input_bytes", "input_bytes_per_example", "output_bytes",
                    "output_bytes_per_example", "gears", "nodes": [...],
                    "executed_on_host": [...], "calls": [...],
                    "separators": {"inputs": [...], "outputs": [...], "clusters_in": [...],
                                   "clusters_out": [...], "fetched": [...]},
                    "compile": {"status", "reason", "detail",          # xla backend only
                                "decisions": [{"executable", "runs_on", "why",
                                               "compiled_ms", "tensorflow_ms", "ratio",
                                               "pairs", "failure"}]}}, ...],
      "nodes": {name: {"op", "device", "cluster", "reason", "executes",
                       "cause"}, ...},                    # graph order; cause: host nodes
      "reasons": {code: description}                                  # codes used above
    }

``device``, ``cluster``, ``reason``, the summary counts and the clusters (members, boundary) are
the original adapter's placement. ``executes`` says where a node runs on the backend that did the
rewrite: ``"host"`` with an ``executes_reason`` for the device nodes it runs in the outer graph
(the CPU reference keeps variables, the ops on their ref edges and other state owners with the
session; ``npu_executed_on_host`` counts them, a cluster lists them in ``executed_on_host`` and
its function calls in ``calls``). A variable that mix mode copies into further clusters has
``copied_into`` and counts as a member of each.

With precision emulation on (``npu_adapter_emulate_precision``), every device node that computes
in a float dtype also has ``"precision": {"dtype", "original", "reason", "detail", ...}`` and the
report has a ``"precision"`` section (:func:`precision_section`): mode, ops per dtype, casts
inserted, ops whose dtype a ``modify_mixlist`` edit changed, and the reason codes used.

Every host node has a ``cause``: the op (and function) behind its reason, as
:mod:`npu_adapter.report.causes` finds it (``"OptionalFromValue in model_bn_cond_true_12"``);
each host blocker ranks its causes. Each cluster's ``separators`` say what separates it from its
neighbours: the host nodes that feed it (``inputs``) and read from it (``outputs``), each
``{"node", "op", "reason", "cause"}`` (at most :data:`MAX_SEPARATORS`, with ``*_count`` the
totals), the clusters joined to it by a direct edge (kept apart although adjacent), and its
fetched outputs.

Lists are ordered most frequent first (ties by name), so ``host_blockers[0]`` is what keeps the
most ops off the device. Tensor records are described in :mod:`npu_adapter.report.shapes`. Sizes
add up: a cluster's ``input_bytes`` is the sum of the inputs' known ``bytes`` (``null`` when none
is known) and ``input_bytes_per_example`` the sum of the ``bytes_per_example`` of the inputs whose
batch dim is unknown; so one step moves ``input_bytes + batch * input_bytes_per_example``. The
summary's ``boundary`` adds up all clusters the same way (0 when nothing is known) and counts the
tensors of unknown size.
The report holds no timings, paths or other run-dependent values: the same rewrite gives the same
JSON, byte for byte — except, on the xla backend, each compiled cluster's ``decisions``: whether
its executables run compiled or on TensorFlow's kernels, as runs measured them (in this process,
or remembered in ``graph_compiler_cache_dir``); none until a run decided.
"""

import json

from npu_adapter.graph.names import parse_input, parse_tensor_name
from npu_adapter.graph.types import node_output_types
from npu_adapter.report.causes import CONSUMER_REASONS, FunctionSupport, host_causes
from npu_adapter.report.shapes import static_shapes, tensor_record
from npu_adapter.vocabulary import (
    DEVICE_HOST,
    DEVICE_NPU,
    PRECISION_REASON_DESCRIPTIONS,
    REASON_DESCRIPTIONS,
    XLA_DETAIL_ATTR,
    XLA_REASON_ATTR,
    XLA_STATUS_ATTR,
)

__all__ = ["REPORT_FORMAT", "placement_report", "report_json", "boundary_dtypes",
           "precision_section"]

REPORT_FORMAT = "npu_adapter.placement/1"
_TOP_OP_TYPES = 10
MAX_SEPARATORS = 5
"""At most this many host nodes per side are listed in a cluster's ``separators``."""
_TOP_CAUSES = 5


def _jsonable(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if hasattr(value, "SerializeToString"):
        from google.protobuf import text_format

        return text_format.MessageToString(value, as_one_line=True)
    return str(value)


def _ranked(counts):
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def boundary_dtypes(graph_def):
    """Cluster node name → ``(Tin list, Tout list)`` from the cluster nodes of ``graph_def``."""
    found = {}
    for node in graph_def.node:
        if "_npu_adapter_inputs" in node.attr or "_npu_adapter_outputs" in node.attr:
            found[node.name] = (list(node.attr["Tin"].list.type) if "Tin" in node.attr else [],
                                list(node.attr["Tout"].list.type) if "Tout" in node.attr else [])
    return found


def _dtype_at(types, index):
    return types[index] if index < len(types) else None


def _sum_known(records, key="bytes"):
    known = [r[key] for r in records if r[key] is not None]
    return sum(known) if known else None


def _boundary_dtypes(result, graph_def, groups):
    """Tensor name → dtype enum of every boundary tensor of ``groups``: from the cluster nodes'
    ``Tin``/``Tout``, else from the producer's op signature in ``graph_def``."""
    dtypes = {}
    node_types = boundary_dtypes(result.graph_def)
    for cluster in result.clusters:
        tin, tout = node_types.get(cluster.name, ([], []))
        dtypes.update((t, _dtype_at(tin, k)) for k, t in enumerate(cluster.inputs))
        dtypes.update((t, _dtype_at(tout, k)) for k, t in enumerate(cluster.outputs))
    missing = {t for main, _ in groups for t in main.device_inputs + main.device_outputs
               if dtypes.get(t) is None}
    if missing:
        wanted = {parse_tensor_name(t)[0] for t in missing}
        functions = {f.signature.name: f for f in graph_def.library.function}
        types = {node.name: node_output_types(node, functions) for node in graph_def.node
                 if node.name in wanted}
        for t in missing:
            name, port = parse_tensor_name(t)
            out = types.get(name) or ()
            dtypes[t] = out[port] if port < len(out) else None
    return dtypes


def _cluster_groups(result):
    """``(main ClusterInfo, [further steps])`` per cluster, in the order of the clusters."""
    groups = []
    steps = {}
    for cluster in result.clusters:
        if cluster.part_of is None:
            groups.append((cluster, steps.setdefault(cluster.name, [])))
    for cluster in result.clusters:
        if cluster.part_of is not None:
            steps.setdefault(cluster.part_of, []).append(cluster)
    return groups


def _cluster_records(result, graph_def, with_shapes, decisions):
    groups = _cluster_groups(result)
    membership = result.membership()
    dtypes = _boundary_dtypes(result, graph_def, groups)
    names = []
    for main, _ in groups:
        names.extend(main.device_inputs)
        names.extend(main.device_outputs)
    shapes = static_shapes(graph_def, names) if with_shapes else {}
    ops = {node.name: node.op for node in graph_def.node}
    compile_status = backend_compile_status(result.graph_def)
    records = []
    for main, steps in groups:
        inputs = [tensor_record(t, dtypes.get(t), shapes.get(t)) for t in main.device_inputs]
        outputs = [tensor_record(t, dtypes.get(t), shapes.get(t)) for t in main.device_outputs]
        members = membership.get(main.name, ())
        op_types = {}
        for name in members:
            op = ops.get(name, "?")
            op_types[op] = op_types.get(op, 0) + 1
        records.append({
            "name": main.name,
            "op": main.op,
            "size": len(members),
            "op_types": [{"op": op, "count": n} for op, n in _ranked(op_types)],
            "inputs": inputs,
            "outputs": outputs,
            "input_bytes": _sum_known(inputs),
            "input_bytes_per_example": _sum_known(inputs, "bytes_per_example"),
            "output_bytes": _sum_known(outputs),
            "output_bytes_per_example": _sum_known(outputs, "bytes_per_example"),
            "gears": [list(g) for g in main.gears],
            "nodes": list(members),
            "executed_on_host": list(main.outer_nodes),
            "calls": [main.name] + [step.name for step in steps],
        })
        status = [compile_status[n] for n in [main.name] + [s.name for s in steps]
                  if n in compile_status]
        if status:
            records[-1]["compile"] = status[0] if len(status) == 1 else \
                _merged_status(status)
            if main.name in decisions:
                records[-1]["compile"]["decisions"] = [
                    {"executable": label, "runs_on": "xla" if d.compiled else "tensorflow",
                     "why": d.why, "compiled_ms": d.compiled_ms,
                     "tensorflow_ms": d.tensorflow_ms, "ratio": d.ratio, "pairs": d.pairs,
                     "failure": d.failure}
                    for label, d in decisions[main.name].items()]
    return records


def backend_compile_status(graph_def):
    """Cluster node name → ``{"status", "reason", "detail"}`` from the compile-status attrs a
    backend put on the lowered cluster nodes (the xla backend: ``xla`` or ``fallback``)."""
    found = {}
    for node in graph_def.node:
        if XLA_STATUS_ATTR not in node.attr:
            continue
        record = {"status": node.attr[XLA_STATUS_ATTR].s.decode()}
        if XLA_REASON_ATTR in node.attr:
            record["reason"] = node.attr[XLA_REASON_ATTR].s.decode()
            record["detail"] = node.attr[XLA_DETAIL_ATTR].s.decode()
        found[node.name] = record
    return found


def _merged_status(statuses):
    """One record for a cluster called in steps: ``xla`` when every step compiles, else the
    first fallback (with ``steps`` saying how many of them compile)."""
    fallbacks = [s for s in statuses if "reason" in s]
    merged = dict(fallbacks[0] if fallbacks else statuses[0])
    merged["steps_compiled"] = sum(1 for s in statuses if "reason" not in s)
    merged["steps"] = len(statuses)
    return merged


def _backend_decisions(result, backend, config):
    """Cluster → {executable: decision} of a backend that decides per cluster whether it
    compiles (the xla backend), else {}."""
    if backend is None or isinstance(backend, str):
        from npu_adapter.backends import get_backend

        try:
            backend = get_backend(backend or "cpu")
        except (KeyError, ValueError):
            return {}
    decide = getattr(backend, "cluster_decisions", None)
    return decide(result.graph_def, config) if decide is not None else {}


def _function_support(graph_def, backend, config):
    """A :class:`~npu_adapter.report.causes.FunctionSupport` for the graph's library under the
    backend and options of the rewrite, or None when the backend is unknown here."""
    if not len(graph_def.library.function):
        return None
    from npu_adapter.api import as_npu_config
    from npu_adapter.backends import get_backend

    if backend is None or isinstance(backend, str):
        try:
            backend = get_backend(backend or "cpu")
        except (KeyError, ValueError):
            return None
    npu_config = as_npu_config(config)
    functions = {f.signature.name: f for f in graph_def.library.function}
    return FunctionSupport(functions, backend.op_support(npu_config), backend,
                           npu_config.mix_compile_mode)


def _blocker_causes(reason, names, nodes):
    """The causes of the host nodes of ``reason``, most frequent first."""
    ranked = {}
    for name in names:
        cause = nodes[name].get("cause")
        if cause is None:
            continue
        entry = ranked.setdefault(cause["op"], {"op": cause["op"], "count": 0, "functions": [],
                                                "nodes": []})
        entry["count"] += 1
        for key, value in (("functions", cause["function"]), ("nodes", cause["node"])):
            if value and value not in entry[key]:
                entry[key].append(value)
    causes = sorted(ranked.values(), key=lambda e: (-e["count"], e["op"]))[:_TOP_CAUSES]
    for entry in causes:
        functions, neighbours = entry["functions"], entry["nodes"]
        if len(functions) == 1:
            entry["text"] = f'{entry["op"]} in {functions[0]}'
        elif functions:
            more = f" and {len(functions) - 2} more" if len(functions) > 2 else ""
            entry["text"] = (f'{entry["op"]} in {len(functions)} functions: '
                             f'{", ".join(functions[:2])}{more}')
        elif neighbours:
            where = "feeding only host ops" if reason in CONSUMER_REASONS else "next to host ops"
            entry["text"] = (f'{where}: {entry["op"]} ({entry["count"]} nodes; e.g. '
                             f'{neighbours[0]})')
        else:
            entry["text"] = f'{entry["op"]} ×{entry["count"]}'
        entry["functions"], entry["nodes"] = functions[:10], neighbours[:10]
    return causes


def _separators(clusters, graph_def, nodes, fetches):
    """Per cluster (by name): the host nodes and clusters on its boundary (see the module
    docstring)."""
    records = {c["name"]: {"inputs": {}, "outputs": {}, "clusters_in": [], "clusters_out": [],
                           "fetched": []} for c in clusters}
    member_of = {}
    for c in clusters:
        for name in c["nodes"]:
            member_of.setdefault(name, c["name"])
    for node in graph_def.node:
        dst = member_of.get(node.name)
        for text in node.input:
            src_name, _, _ = parse_input(text)
            src = member_of.get(src_name)
            if src == dst or src_name not in nodes or node.name not in nodes:
                continue
            if src is not None and dst is not None:   # adjacent clusters kept apart
                if src not in records[dst]["clusters_in"]:
                    records[dst]["clusters_in"].append(src)
                if dst not in records[src]["clusters_out"]:
                    records[src]["clusters_out"].append(dst)
            elif dst is not None:                      # into the cluster from outside
                if nodes[src_name]["device"] == DEVICE_HOST:
                    records[dst]["inputs"].setdefault(src_name, None)
            elif nodes[node.name]["device"] == DEVICE_HOST:   # out of the cluster
                records[src]["outputs"].setdefault(node.name, None)
    fetched = {parse_tensor_name(f)[0]: f for f in fetches}
    for c in clusters:
        rec = records[c["name"]]
        rec["fetched"] = [fetched[n] for n in c["nodes"] if n in fetched]
        for key in ("inputs", "outputs"):
            names = list(rec[key])
            rec[key + "_count"] = len(names)
            rec[key] = [{"node": n, "op": nodes[n]["op"], "reason": nodes[n]["reason"],
                         "cause": nodes[n].get("cause", {}).get("text", "")}
                        for n in names[:MAX_SEPARATORS]]
    return records


def placement_report(result, graph_def, *, model=None, backend=None, config=None, fetches=(),
                     feeds=(), shapes=True):
    """The placement report of ``result`` (see the module docstring).

    Args:
        result: the :class:`~npu_adapter.pipeline.result.RewriteResult`.
        graph_def: the graph the rewrite worked on (the client graph of the run signature);
            gives op types and, imported into TensorFlow, the static shapes at the boundaries.
        model: a name for the model (shown as is; pass a base name, not an absolute path).
        backend: the backend (name or instance) that did the rewrite: its op list names the
            ops that keep function calls on the host.
        config: the ``NpuConfig`` used (its explicit options are listed).
        fetches, feeds: the run signature.
        shapes: False skips shape inference (shapes and sizes are then null).
    """
    ops = {node.name: node.op for node in graph_def.node}
    nodes = {}
    by_reason = {}
    by_op = {}
    host_ops_by_reason = {}
    devices = {DEVICE_NPU: 0, DEVICE_HOST: 0}
    executes_reasons = set()
    executed_on_host = 0
    for name, place in result.placement.items():
        op = ops.get(name, "?")
        device, reason, cluster = place["device"], place["reason"], place["cluster"]
        record = nodes[name] = {"op": op, "device": device, "cluster": cluster, "reason": reason,
                                "executes": place.get("executes", device)}
        if "executes_reason" in place:
            record["executes_reason"] = place["executes_reason"]
            executes_reasons.add(place["executes_reason"])
            if device == DEVICE_NPU:
                executed_on_host += 1
        if place.get("copied_into"):
            record["copied_into"] = list(place["copied_into"])
        devices[device] = devices.get(device, 0) + 1
        by_reason[(device, reason)] = by_reason.get((device, reason), 0) + 1
        entry = by_op.setdefault(op, {"op": op, "count": 0, DEVICE_NPU: 0, DEVICE_HOST: 0,
                                      "host_reasons": {}})
        entry["count"] += 1
        entry[device] = entry.get(device, 0) + 1
        if device != DEVICE_NPU:
            entry["host_reasons"][reason] = entry["host_reasons"].get(reason, 0) + 1
            per_reason = host_ops_by_reason.setdefault(reason, {})
            per_reason[op] = per_reason.get(op, 0) + 1
    causes = host_causes(graph_def, nodes, _function_support(graph_def, backend, config))
    for name, cause in causes.items():
        nodes[name]["cause"] = cause
    clusters = _cluster_records(result, graph_def, shapes,
                                _backend_decisions(result, backend, config))
    separators = _separators(clusters, graph_def, nodes, fetches)
    for cluster in clusters:
        cluster["separators"] = separators[cluster["name"]]
    total = len(nodes)
    reason_rows = [
        {"reason": reason, "device": device, "count": count,
         "description": REASON_DESCRIPTIONS.get(reason, reason)}
        for (device, reason), count in sorted(by_reason.items(),
                                              key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))]
    blockers = []
    host_names = {}
    for name, info in nodes.items():
        if info["device"] != DEVICE_NPU:
            host_names.setdefault(info["reason"], []).append(name)
    for reason, op_counts in host_ops_by_reason.items():
        blockers.append({
            "reason": reason,
            "count": sum(op_counts.values()),
            "description": REASON_DESCRIPTIONS.get(reason, reason),
            "op_types": [{"op": op, "count": n} for op, n in _ranked(op_counts)[:_TOP_OP_TYPES]],
            "causes": _blocker_causes(reason, host_names[reason], nodes),
        })
    blockers.sort(key=lambda b: (-b["count"], b["reason"]))
    op_rows = []
    for entry in by_op.values():
        entry["host_reasons"] = dict(_ranked(entry["host_reasons"]))
        op_rows.append(entry)
    op_rows.sort(key=lambda e: (-e[DEVICE_HOST], -e["count"], e["op"]))
    inputs = [r for c in clusters for r in c["inputs"]]
    outputs = [r for c in clusters for r in c["outputs"]]
    boundary = inputs + outputs
    used = sorted({r["reason"] for r in reason_rows} | executes_reasons)
    options = {}
    if config is not None:
        options = {k: _jsonable(v) for k, v in config.to_dict().items()}
    report = {
        "format": REPORT_FORMAT,
        "model": model,
        "backend": backend if backend is None or isinstance(backend, str) else backend.name,
        "pipeline": result.pipeline,
        "options": options,
        "fetches": list(fetches),
        "feeds": list(feeds),
        "rewritten": bool(result.modified),
        "skip_reason": _jsonable(result.skip_reason),
        "summary": {
            "nodes": total,
            "npu": devices.get(DEVICE_NPU, 0),
            "host": total - devices.get(DEVICE_NPU, 0),
            "clusters": len(clusters),
            "npu_fraction": round(devices.get(DEVICE_NPU, 0) / total, 4) if total else 0.0,
            "npu_executed_on_host": executed_on_host,
            "boundary": {
                "inputs": len(inputs),
                "outputs": len(outputs),
                "bytes": _sum_known(boundary) or 0,
                "bytes_per_example": _sum_known(boundary, "bytes_per_example") or 0,
                "tensors_of_unknown_size": sum(1 for r in boundary if r["bytes"] is None
                                               and r["bytes_per_example"] is None),
            },
            "by_reason": reason_rows,
            "host_blockers": blockers,
            "by_op_type": op_rows,
        },
        "clusters": clusters,
        "nodes": nodes,
        "reasons": {code: REASON_DESCRIPTIONS.get(code, code) for code in used},
    }
    for name in causes:
        nodes[name]["cause"] = causes[name]["text"]
    precision = (result.pass_info or {}).get("precision") or {}
    if precision.get("emulation") == "on" and "decisions" in precision:
        report["precision"] = precision_section(precision, nodes)
    return report


def precision_section(info, nodes):
    """The report's ``precision`` section from the ``precision`` pass info; also adds each
    device node's ``precision`` record to ``nodes`` (name → node record)."""
    decisions = info["decisions"]
    per_dtype = {}
    per_reason = {}
    for name, record in nodes.items():
        decision = decisions.get(name)
        if decision is None or record["device"] != DEVICE_NPU:
            continue
        entry = {k: decision[k] for k in ("dtype", "original", "reason", "detail")}
        for key in ("list", "list_source", "approximated"):
            if key in decision:
                entry[key] = decision[key]
        record["precision"] = entry
        if decision["reason"] != "not_reducible":
            per_dtype[decision["dtype"]] = per_dtype.get(decision["dtype"], 0) + 1
        per_reason[decision["reason"]] = per_reason.get(decision["reason"], 0) + 1
    casts = info.get("casts", {})
    return {
        "mode": info.get("mode"),
        "setting": info.get("setting"),
        "low": info.get("low"),
        "ops_per_dtype": dict(_ranked(per_dtype)),
        "by_reason": [{"reason": r, "count": n,
                       "description": PRECISION_REASON_DESCRIPTIONS.get(r, r)}
                      for r, n in _ranked(per_reason)],
        "casts": sum(casts.values()),
        "casts_per_function": dict(sorted(casts.items())),
        "mixlist_changes": [dict(node=name, **change)
                            for name, change in sorted(info.get("mixlist_changes", {}).items())],
        "customize_ignored": info.get("customize_ignored", ""),
    }


def report_json(report):
    """Deterministic JSON text of a report (insertion order kept, newline at the end)."""
    return json.dumps(report, indent=1, ensure_ascii=False) + "\n"
