"""Placement report (placement.json), report.html and the drawings; a real browser when present."""

import importlib
import importlib.util
import json
import os
import pathlib
import re
import xml.etree.ElementTree as ET

import pytest
import tensorflow as tf
from graph_cases import mix_cnn_graph
from tensorflow.core.framework import graph_pb2

import npu_adapter
from npu_adapter.config import NpuConfig
from npu_adapter.report import drawing as drawing_mod
from npu_adapter.report.html import format_bytes
from npu_adapter.report.layout import layered_positions
from npu_adapter.report.placement import placement_report
from npu_adapter.report.shapes import static_shapes, tensor_record
from npu_adapter.vocabulary import REASON_DESCRIPTIONS

tf1 = tf.compat.v1

ROOT = pathlib.Path(__file__).resolve().parents[1]
MIX = {"mix_compile_mode": True}
FETCHES = ["probs:0"]
HAS_DOT = drawing_mod.dot_available() is not None


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("PRINT_MODEL", "DUMP_GE_GRAPH", "DUMP_GRAPH_LEVEL"):
        monkeypatch.delenv(name, raising=False)


def cnn(batch=None):
    return mix_cnn_graph(batch=batch).as_graph_def()


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return npu_adapter.dump_graphs(cnn(), MIX, out, fetches=FETCHES, tensorboard=False,
                                   model_name="cnn <mix>")


# ------------------------------------------------------------------------------ placement.json


def test_nodes_have_device_cluster_reason_and_op(dumped):
    nodes = dumped.report["nodes"]
    assert list(nodes)[:3] == ["images", "conv1/w", "conv1/conv"]
    assert nodes["conv1/conv"] == {"op": "Conv2D", "device": "npu", "cluster": "GeOp1_0",
                                   "reason": "supported", "executes": "npu"}
    assert nodes["conv1/w"]["reason"] == "const_follows_consumer"
    assert nodes["host/sqrt"] == {"op": "Sqrt", "device": "host", "cluster": None,
                                  "reason": "without_npu_compile_scope", "executes": "host",
                                  "cause": "Sqrt"}
    assert "cause" not in nodes["conv1/conv"]   # device nodes need none
    assert nodes["images"]["reason"] == "graph_input"
    assert dumped.report["reasons"] == {code: REASON_DESCRIPTIONS[code] for code in sorted(
        {"supported", "const_follows_consumer", "without_npu_compile_scope", "graph_input"})}


def test_cluster_boundaries_with_dtype_shape_and_bytes(dumped):
    first, second = dumped.report["clusters"]
    assert (first["name"], first["size"], first["op"]) == ("GeOp1_0", 3,
                                                           "StatefulPartitionedCall")
    assert first["nodes"] == ["conv1/w", "conv1/conv", "conv1/relu"]
    assert first["inputs"] == [{"tensor": "images:0", "dtype": "float32",
                                "shape": [-1, 8, 8, 3], "bytes": None,
                                "bytes_per_example": 8 * 8 * 3 * 4}]
    assert first["outputs"] == [{"tensor": "conv1/relu:0", "dtype": "float32",
                                 "shape": [-1, 8, 8, 4], "bytes": None,
                                 "bytes_per_example": 8 * 8 * 4 * 4}]
    assert first["input_bytes"] is None and first["input_bytes_per_example"] == 768
    assert second["inputs"][0]["tensor"] == "host/id:0"
    assert second["outputs"][0]["shape"] == [-1, 2]
    assert second["op_types"][0] == {"op": "Const", "count": 2}
    assert first["gears"] == []


def test_summary_counts_and_top_blockers_first(dumped):
    s = dumped.report["summary"]
    assert (s["nodes"], s["npu"], s["host"], s["clusters"]) == (15, 9, 6, 2)
    assert s["npu_fraction"] == 0.6
    assert s["boundary"] == {"inputs": 2, "outputs": 2, "bytes": 0,
                             "bytes_per_example": 768 + 1024 + 1024 + 8,
                             "tensors_of_unknown_size": 0}
    assert [b["reason"] for b in s["host_blockers"]] == ["without_npu_compile_scope",
                                                        "graph_input"]
    top = s["host_blockers"][0]
    assert top["count"] == 5
    assert top["description"] == REASON_DESCRIPTIONS["without_npu_compile_scope"]
    assert {o["op"] for o in top["op_types"]} == {"Abs", "AddV2", "Const", "Identity", "Sqrt"}
    assert [(r["device"], r["reason"], r["count"]) for r in s["by_reason"]][:2] == [
        ("npu", "supported", 6), ("host", "without_npu_compile_scope", 5)]
    ops = {row["op"]: row for row in s["by_op_type"]}
    assert ops["Const"] == {"op": "Const", "count": 4, "npu": 3, "host": 1,
                            "host_reasons": {"without_npu_compile_scope": 1}}
    assert s["by_op_type"][0]["op"] == "Const"  # most host nodes first


def test_clusters_say_what_separates_them(dumped):
    first, second = dumped.report["clusters"]
    assert first["separators"]["inputs"] == [
        {"node": "images", "op": "Placeholder", "reason": "graph_input", "cause": "Placeholder"}]
    assert first["separators"]["outputs"] == [
        {"node": "Abs", "op": "Abs", "reason": "without_npu_compile_scope", "cause": "Abs"}]
    assert second["separators"]["inputs"][0]["node"] == "host/id"
    assert second["separators"]["fetched"] == ["probs:0"]
    assert first["separators"]["clusters_out"] == second["separators"]["clusters_in"] == []


def _nested_cond_graph():
    """x ─► outer (If: its true branch holds an If whose true branch holds Lgamma, which no
    device runs) ─► relu ─► out."""
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [4], name="x")
        p = tf1.placeholder(tf.bool, [], name="p")
        y = tf.cond(p, lambda: tf.cond(p, lambda: tf.math.lgamma(x), lambda: x * 2),
                    lambda: x + 1, name="outer")
        tf.identity(tf.nn.relu(y) * 3, name="out")
    return g.as_graph_def()


def test_a_function_call_on_the_host_names_the_op_and_the_function():
    graph_def = _nested_cond_graph()
    functions = {f.signature.name for f in graph_def.library.function}
    result = npu_adapter.rewrite(graph_def, MIX, fetches=["out:0"])
    report = placement_report(result, graph_def, config=NpuConfig(**MIX), fetches=["out:0"])
    outer = report["nodes"]["outer"]
    assert outer["reason"] == "function_not_supported"
    op, _, path = outer["cause"].partition(" in ")
    outer_fn, inner_fn = path.split(" → ")
    assert op == "Lgamma" and {outer_fn, inner_fn} <= functions
    assert outer_fn.startswith("outer_true") and inner_fn.startswith("cond_true")
    blocker = next(b for b in report["summary"]["host_blockers"]
                   if b["reason"] == "function_not_supported")
    assert blocker["causes"] == [{"op": "Lgamma", "count": 1, "functions": [path],
                                  "nodes": [], "text": f"Lgamma in {path}"}]
    (cluster,) = report["clusters"]
    assert cluster["separators"]["inputs"] == [
        {"node": "outer", "op": "StatelessIf", "reason": "function_not_supported",
         "cause": outer["cause"]}]


def test_static_shapes_give_bytes():
    result = npu_adapter.rewrite(cnn(batch=2), MIX, fetches=FETCHES)
    report = placement_report(result, cnn(batch=2), config=npu_adapter.NpuConfig.from_dict(MIX))
    first = report["clusters"][0]
    assert first["inputs"][0]["bytes"] == 2 * 8 * 8 * 3 * 4
    assert first["inputs"][0]["bytes_per_example"] is None
    assert report["summary"]["boundary"]["bytes"] == 2 * (768 + 1024 + 1024 + 8)
    assert report["options"] == {"mix_compile_mode": True}
    no_shapes = placement_report(result, cnn(batch=2), shapes=False)
    assert no_shapes["clusters"][0]["inputs"][0]["shape"] is None
    assert no_shapes["summary"]["boundary"]["tensors_of_unknown_size"] == 4


def test_shapes_fall_back_to_attrs_for_graphs_tensorflow_cannot_import():
    graph = graph_pb2.GraphDef()
    node = graph.node.add(name="x", op="NoSuchOpAnywhere")
    node.attr["_output_shapes"].list.shape.add().dim.add(size=5)
    graph.node.add(name="p", op="Placeholder").attr["shape"].shape.unknown_rank = True
    assert static_shapes(graph, ["x:0", "p:0", "missing:0"]) == {"x:0": [5], "p:0": None,
                                                                "missing:0": None}
    assert tensor_record("s:0", 7, [4])["bytes"] is None  # DT_STRING has no fixed size
    assert tensor_record("h:0", 19, [3, 2])["bytes"] == 12  # DT_HALF
    assert tensor_record("u:0", 1, None)["bytes"] is None


def test_not_rewritten_graph():
    config = npu_adapter.NpuConfig.from_config_proto(tf1.ConfigProto())  # no NpuOptimizer
    result = npu_adapter.rewrite(cnn(), config, fetches=FETCHES)
    report = placement_report(result, cnn())
    assert report["rewritten"] is False and report["skip_reason"]
    assert report["summary"]["npu"] == 0 and report["clusters"] == []
    html = npu_adapter.report.html.render_report_html(report)
    assert "The graph was not rewritten" in html


# --------------------------------------------------------------------------------- report.html


def _html(dumped):
    return pathlib.Path(dumped.path("report.html")).read_text(encoding="utf-8")


def test_html_is_self_contained(dumped):
    html = _html(dumped)
    assert html.startswith("<!DOCTYPE html>")
    assert "<link" not in html and "@import" not in html and " src=" not in html
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert str(dumped.out_dir) not in html


def test_html_sections_clusters_and_escaping(dumped):
    html = _html(dumped)
    for anchor in ("summary", "blockers", "op-types", "clusters", "graph", "nodes", "options"):
        assert f'id="{anchor}"' in html
    assert 'id="cluster-GeOp1_0"' in html and 'id="cluster-GeOp1_1"' in html
    assert "Placement report: cnn &lt;mix&gt;" in html and "cnn <mix>" not in html
    assert 'data-q="reason=without_npu_compile_scope"' in html
    assert "768 B × batch" in html
    assert '<input id="search"' in html


def test_html_embedded_data(dumped):
    html = _html(dumped)
    blob = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html,
                     re.S).group(1)
    data = json.loads(blob)
    assert data["clusters"] == ["GeOp1_0", "GeOp1_1"]
    assert len(data["nodes"]) == 15
    name, op, on_npu, cluster, reason, executes, cause = data["nodes"][2]
    assert (name, op, on_npu, data["clusters"][cluster], data["reasons"][reason]) == (
        "conv1/conv", "Conv2D", 1, "GeOp1_0", "supported")
    assert executes == -1 and cause == -1  # runs where the original places it
    host = next(row for row in data["nodes"] if row[0] == "host/sqrt")
    assert data["causes"][host[6]] == "Sqrt"


def test_script_json_cannot_close_the_script_element():
    from npu_adapter.report.html import _script_json

    text = _script_json({"x": "</script><!--"})
    assert "</" not in text and "<!--" not in text and json.loads(text) == {"x": "</script><!--"}


def test_format_bytes():
    assert [format_bytes(v) for v in (None, 0, 1023, 1536, 3 * 1024 ** 3)] == [
        "?", "0 B", "1023 B", "1.5 KiB", "3.0 GiB"]


# ------------------------------------------------------------------------------------ drawings


def _client_and_report():
    result = npu_adapter.rewrite(cnn(), MIX, fetches=FETCHES)
    return cnn(), placement_report(result, cnn())


def test_builtin_svg_is_well_formed_and_coloured_by_cluster():
    client, report = _client_and_report()
    drawing = drawing_mod.full_drawing(client, report)
    svg, dot_text, used = drawing_mod.render(drawing, "builtin")
    assert used == "builtin"
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    nodes = [g for g in root.iter(ns + "g") if g.get("class") == "node"]
    assert [g.get("data-name") for g in nodes] == list(report["nodes"])
    fills = {g.get("data-name"): g.find(ns + "rect").get("fill") for g in nodes}
    colors = drawing_mod.cluster_colors(["GeOp1_0", "GeOp1_1"])
    assert fills["conv1/conv"] == colors["GeOp1_0"][0]
    assert fills["probs"] == colors["GeOp1_1"][0]
    assert fills["host/sqrt"] == "#f2f2f2"
    assert 'subgraph "cluster_GeOp1_0"' in dot_text and '"conv1/conv" -> "conv1/relu";' \
        in dot_text


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz dot is not installed")
def test_dot_svg():
    client, report = _client_and_report()
    svg, _, used = drawing_mod.render(drawing_mod.full_drawing(client, report), "dot")
    assert used == "dot" and not svg.startswith("<?xml")
    root = ET.fromstring(svg)
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert "cluster_GeOp1_0" in titles and "conv1/conv" in titles


def test_renderer_dot_without_dot_fails_clearly(monkeypatch):
    monkeypatch.setattr(drawing_mod, "dot_available", lambda: None)
    client, report = _client_and_report()
    with pytest.raises(FileNotFoundError, match="Debian package: graphviz"):
        drawing_mod.render(drawing_mod.full_drawing(client, report), "dot")
    assert drawing_mod.render(drawing_mod.full_drawing(client, report))[2] == "builtin"


def test_large_graphs_collapse_with_drill_downs(tmp_path):
    out = npu_adapter.dump_graphs(cnn(), MIX, tmp_path, fetches=FETCHES, draw_limit=5,
                                  tensorboard=False, renderer="builtin")
    dot_text = (tmp_path / "graph" / "partition.dot").read_text()
    ids = re.findall(r'^  "([^"]+)" \[', dot_text, re.M)
    assert ids[:2] == ["cluster:GeOp1_0", "cluster:GeOp1_1"]
    # 5 boxes: 2 clusters and 3 host groups (the two largest scopes and the rest).
    assert ids[2:] == ["host:(other)", "host:add", "host:host"]
    assert 'href="#cluster-GeOp1_0"' in dot_text
    assert '"cluster:GeOp1_0" -> "host:(other)" [label="1"' in dot_text
    html = (tmp_path / "report.html").read_text()
    assert "The graph is large" in html
    drill = (tmp_path / "graph" / "GeOp1_1.dot").read_text()
    assert '"in:conv2" [label="conv2/\\n3 nodes"' in drill  # collapsed by scope (6 > 5)
    assert '"node:host/id" [label="host/id\\nhost"' in drill  # the neighbour outside
    assert out.renderer == "builtin"


def _cond_chain(blocks=12):
    """x ─► [relu ─► block_k/cond (If: Lgamma in a branch, fed by two Consts)] × blocks ─► out:
    a chain of clusters cut by host Ifs, as batch norm under a learning-phase cond makes."""
    g = tf.Graph()
    with g.as_default():
        y = tf1.placeholder(tf.float32, [4], name="x")
        p = tf1.placeholder_with_default(False, [], name="phase")
        for k in range(blocks):
            with tf.name_scope(f"block_{k}"):
                h = tf.nn.relu(y * 2.0)
                a, b = tf.constant(1.5, name="gamma"), tf.constant(0.5, name="beta")
                y = tf.cond(p, lambda h=h, a=a: tf.math.lgamma(h) * a,
                            lambda h=h, b=b: h + b, name="cond")
        tf.identity(y * 3.0, name="out")
    return g.as_graph_def()


def test_overview_of_a_chain_cut_by_host_nodes(tmp_path):
    out = npu_adapter.dump_graphs(_cond_chain(), MIX, tmp_path, fetches=["out:0"],
                                  draw_limit=60, tensorboard=False, renderer="builtin")
    report = out.report
    assert len(report["clusters"]) == 13
    dot_text = (tmp_path / "graph" / "partition.dot").read_text()
    ids = re.findall(r'^  "([^"]+)" \[', dot_text, re.M)
    # One box per cluster and one per If with the Consts that feed it: no box joins distant
    # parts of the chain.
    hosts = [i for i in ids if i.startswith("host:")]
    assert hosts == ["host:x"] + [f"host:block_{k}/cond" for k in range(12)]
    assert '"host:block_3/cond" [label="block_3/cond\\nStatelessIf + 2 host nodes"' in dot_text
    # Every cluster row names the If on each side and the op inside it.
    second = report["clusters"][1]["separators"]
    assert [s["node"] for s in second["inputs"]] == ["block_0/cond"]
    assert [s["node"] for s in second["outputs"]] == ["block_1/cond"]
    assert second["inputs"][0]["cause"].startswith("Lgamma in block_0_cond_")
    # The legend wraps at a screen's width instead of setting the drawing's width.
    svg = (tmp_path / "graph" / "partition.svg").read_text()
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    legend = next(g for g in root.iter(ns + "g") if g.get("class") == "legend")
    rows = {r.get("y") for r in legend.iter(ns + "rect")}
    assert len(rows) >= 2 and float(root.get("width")) <= 1240
    html = (tmp_path / "report.html").read_text()
    assert html.index('id="graph"') < html.index('id="blockers"')   # right after the summary


def test_collapse_by_scope():
    names = ["a/x/1", "a/x/2", "a/y", "b/z", "c"]
    assert drawing_mod.collapse_by_scope(names, 3) == {
        "a/x/1": "a", "a/x/2": "a", "a/y": "a", "b/z": "b", "c": "c"}
    assert drawing_mod.collapse_by_scope(names, 4) == {
        "a/x/1": "a/x", "a/x/2": "a/x", "a/y": "a/y", "b/z": "b/z", "c": "c"}
    many = [f"dense_{k}/op" for k in range(10)] + ["conv_1/op", "conv_2/op", "x"]
    assert set(drawing_mod.collapse_by_scope(many, 3).values()) == {"dense_*", "conv_*", "x"}
    assert set(drawing_mod.collapse_by_scope(many, 2).values()) == {"dense_*", "(other)"}


def test_layout_is_deterministic_and_survives_cycles():
    edges = [(0, 1), (1, 2), (2, 0), (0, 3), (3, 2)]
    layer, order = layered_positions(4, edges)
    assert layered_positions(4, edges) == (layer, order)
    assert layer[0] == 0 and layer[1] == layer[3] == 1 and layer[2] == 2
    assert sorted(order[1::2]) == [0, 1]


# ----------------------------------------------------------------------------- real browser


SHOT = importlib.import_module("npu_adapter.report.screenshot")
CHROMIUM = SHOT.find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install "
                                             "chromium)")
def test_report_in_headless_chromium(dumped, tmp_path):
    png = tmp_path / "report.png"
    SHOT.screenshot(dumped.path("report.html"), str(png), width=1200, height=1800)
    colors = drawing_mod.cluster_colors(["GeOp1_0", "GeOp1_1"])
    stats, problems = SHOT.check_png(str(png), [colors["GeOp1_0"][0], colors["GeOp1_1"][0]])
    assert problems == []
    assert (stats["width"], stats["height"]) == (1200, 1800)
    assert os.path.getsize(png) > 10000


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
@pytest.mark.parametrize("query, expected", [
    ("op=Conv2D", ["conv1/conv", "conv2/conv"]),
    ("device=host reason:without op:sq", ["host/sqrt"]),
    ("cluster=GeOp1_0", ["conv1/w", "conv1/conv", "conv1/relu"]),
    ("nothing-matches", []),
])
def test_node_table_search_in_chromium(dumped, query, expected):
    dom = SHOT.dump_dom(dumped.path("report.html"), query)
    rows = re.search(r'<tbody id="node-rows">(.*?)</tbody>', dom, re.S).group(1)
    names = re.findall(r'<tr><td class="mono">([^<]*)</td>', rows)
    assert names == expected
    assert f"{len(expected)} of 15 nodes match" in dom


_SORT_PROBE = """
var th = document.querySelectorAll('#nodes thead th'), out = {};
function column(k) {
  return Array.prototype.map.call(document.querySelectorAll('#node-rows tr'),
                                  function (tr) { return tr.cells[k].textContent; });
}
th[1].click(); out.op = column(1);
th[1].click(); out.op_desc = column(1);
th[5].click(); out.cause = column(5);
return out;
"""


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
def test_node_table_sorts_in_chromium(dumped):
    got = SHOT.probe(dumped.path("report.html"), _SORT_PROBE)
    ops = [info["op"] for info in dumped.report["nodes"].values()]
    assert got["op"] == sorted(ops, key=str.lower)
    assert got["op_desc"] == sorted(ops, key=str.lower, reverse=True)
    causes = [info["cause"] for info in dumped.report["nodes"].values() if "cause" in info]
    blanks = [""] * (len(dumped.report["nodes"]) - len(causes))   # device nodes: last
    assert got["cause"] == sorted(causes, key=str.lower) + blanks


@pytest.mark.parametrize("collapsed", [False, True])
def test_a_large_graphs_overview_is_laid_out_with_its_legend(collapsed):
    """A collapsed overview always gets the built-in layout, with the legend that wraps at a
    screen's width, whether or not Graphviz is installed; a small drawing gets dot when it is."""
    from npu_adapter.report import drawing as drawing_mod

    nodes = [drawing_mod.DrawNode("a", "a\nAbs", group="GeOp1_0"), drawing_mod.DrawNode("b", "b")]
    groups = [drawing_mod.DrawGroup("GeOp1_0", "GeOp1_0 (1 nodes)", "#cfe2ff", "#3d6fd1")]
    draw = drawing_mod.Drawing("partition", "Partitioned graph", nodes,
                               [drawing_mod.DrawEdge("a", "b")], groups, collapsed=collapsed)
    svg, _, used = drawing_mod.render(draw, "auto")
    if collapsed or drawing_mod.dot_available() is None:
        assert used == "builtin" and 'class="legend"' in svg
    else:
        assert used == "dot"
