"""The four reports of a realistic model, seen as a person sees them in a browser.

Builds tf_keras MobileNetV2 (``weights=None``, a small input) as a TF1 graph with the Keras
learning-phase conds (52 ``If`` nodes the device cannot run, so mix mode cuts the model into some
50 clusters), frozen as a user would export it, and writes its four reports through the paths a
user takes:

* the placement report: ``npu-adapter inspect`` in mix mode;
* the numerics report: ``npu-adapter numerics`` under ``force_fp16``;
* the dump comparison: two ``enable_dump`` runs of an NPU session in mix mode, on the CPU and
  under float16 emulation, compared by ``npu-adapter dump compare``;
* the profiling report: three profiled runs of an NPU session in mix mode.

Then each page is opened in headless Chromium at 1400×1000: a screenshot of its first screen is
written, and small scripts run in the page check what a person would — the partitioned graph is
visible in the first screen, its legend wraps, every cluster row says what separates it from its
neighbours, every host reason names the op (and function) that causes it, and the tables sort
(a header is clicked and the order read back).

    python -m bench.report_screens OUT_DIR [--image-size 96]

writes ``OUT_DIR/{placement,numerics,compare,profile}.png`` and the reports under
``OUT_DIR/reports/``, prints what the checks found, and exits 1 when one fails (2 when Chromium
is missing). ``tests/test_report_screens.py`` runs the same checks.
"""

import argparse
import json
import os
import re
import sys

import numpy as np

WIDTH, HEIGHT = 1400, 1000
INPUT, OUTPUT = "input:0", "probabilities:0"
PAGES = ("placement", "numerics", "compare", "profile")

__all__ = ["INPUT", "OUTPUT", "PAGES", "check_pages", "mobilenet_v2", "screenshots",
           "write_reports"]


def mobilenet_v2(image_size=96, seed=0):
    """``(frozen GraphDef, input image)``: tf_keras MobileNetV2 with random weights, called on a
    Placeholder without ``training=False`` (so batch norm keeps its learning-phase cond)."""
    import tensorflow as tf
    import tf_keras

    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(seed)
        x = tf1.placeholder(tf.float32, (1, image_size, image_size, 3), name="input")
        model = tf_keras.applications.MobileNetV2(weights=None,
                                                  input_shape=(image_size, image_size, 3))
        tf.identity(model(x), name="probabilities")
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            frozen = tf1.graph_util.convert_variables_to_constants(
                sess, graph.as_graph_def(), [OUTPUT.split(":")[0]])
    image = np.random.RandomState(seed).uniform(-1, 1, (1, image_size, image_size, 3))
    return frozen, image.astype(np.float32)


def _session_config(**options):
    """A ``ConfigProto`` with the NpuOptimizer entry, as a user's script writes it."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto()
    custom = config.graph_options.rewrite_options.custom_optimizers.add()
    custom.name = "NpuOptimizer"
    for key, value in {"mix_compile_mode": True, **options}.items():
        if isinstance(value, bool):
            custom.parameter_map[key].b = value
        else:
            custom.parameter_map[key].s = str(value).encode()
    return config


def _run_session(graph_def, image, runs, **options):
    """``runs`` runs of an NPU session with ``options`` on ``graph_def``."""
    import tensorflow as tf

    from npu_adapter.session import NpuSession

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    with NpuSession(graph=graph, config=_session_config(**options)) as sess:
        for _ in range(runs):
            sess.run(OUTPUT, {INPUT: image})


def write_reports(work_dir, image_size=96):
    """Write the four reports of MobileNetV2 under ``work_dir``; returns page name → path of
    its HTML file."""
    from npu_adapter.cli import main

    os.makedirs(work_dir, exist_ok=True)
    graph_def, image = mobilenet_v2(image_size)
    model = os.path.join(work_dir, "mobilenet_v2.pb")
    with open(model, "wb") as f:
        f.write(graph_def.SerializeToString())
    feed = os.path.join(work_dir, "input.npy")
    np.save(feed, image)

    def cli(*args):
        code = main(list(args))
        if code != 0:
            raise RuntimeError(f"npu-adapter {args[0]} exited with {code}")

    placement = os.path.join(work_dir, "placement")
    cli("inspect", model, "--out", placement, "--option", "mix_compile_mode=true",
        "--fetch", OUTPUT, "--feed", INPUT, "--no-tensorboard", "-q")
    numerics = os.path.join(work_dir, "numerics")
    cli("numerics", model, "--out", numerics, "--feed", f"{INPUT}={feed}", "--fetch", OUTPUT,
        "--option", "mix_compile_mode=true", "--option", "precision_mode=force_fp16")
    dumps = {}
    for name, extra in (("cpu", {}), ("fp16", {"npu_adapter_emulate_precision": "on",
                                               "precision_mode": "force_fp16"})):
        dumps[name] = os.path.join(work_dir, "dump_" + name)
        os.makedirs(dumps[name], exist_ok=True)
        _run_session(graph_def, image, 1, enable_dump=True, dump_path=dumps[name],
                     dump_mode="all", **extra)
    compare = os.path.join(work_dir, "compare")
    cli("dump", "compare", dumps["cpu"], dumps["fp16"], "--out", compare)
    profile_root = os.path.join(work_dir, "profile")
    _run_session(graph_def, image, 3, profiling_mode=True,
                 profiling_options=json.dumps({"output": profile_root,
                                               "training_trace": "on"}))
    (profile,) = [os.path.join(root, name) for root, _, files in os.walk(profile_root)
                  for name in files if name == "report.html"]
    return {"placement": os.path.join(placement, "report.html"),
            "numerics": os.path.join(numerics, "numerics.html"),
            "compare": os.path.join(compare, "comparison.html"),
            "profile": profile}


def screenshots(pages, out_dir):
    """A PNG of the first screen (1400×1000) of each page in ``out_dir``; returns page name →
    ``(path, problems)`` (see :func:`npu_adapter.report.screenshot.check_png`)."""
    from npu_adapter.report import screenshot

    os.makedirs(out_dir, exist_ok=True)
    shots = {}
    for name, page in pages.items():
        png = os.path.join(out_dir, f"{name}.png")
        screenshot.screenshot(page, png, WIDTH, HEIGHT)
        shots[name] = (png, screenshot.check_png(png)[1])
    return shots


# ------------------------------------------------------------------------------------- probes
# Scripts run in the page (npu_adapter.report.screenshot.probe). The first screen is the
# window's 1400×1000 whatever height the headless window gives the page at load.

_SORT_JS = """
function sortProbe(table, rows, col) {
  var th = document.querySelectorAll(table + ' thead th')[col];
  function read() {
    return Array.prototype.map.call(document.querySelectorAll(rows), function (tr) {
      var td = tr.cells[col];
      var k = td.getAttribute('data-k');
      return k === null ? td.textContent : k;
    });
  }
  th.click(); var asc = read(); th.click(); var desc = read();
  return {header: th.textContent, asc: asc, desc: desc};
}
"""

_PLACEMENT_JS = _SORT_JS + """
var W = %(width)d, H = %(height)d;
var box = document.getElementById('main-graph'), br = box.getBoundingClientRect();
var visible = 0;
box.querySelectorAll('g.node rect').forEach(function (n) {
  var b = n.getBoundingClientRect();
  if (b.right > Math.max(0, br.left) && b.left < Math.min(W, br.right) &&
      b.bottom > Math.max(0, br.top) && b.top < Math.min(H, br.bottom)) visible++;
});
var legend = box.querySelector('g.legend'), rows = {}, lb = legend.getBoundingClientRect();
legend.querySelectorAll('rect').forEach(function (r) { rows[r.getAttribute('y')] = 1; });
var clusters = Array.prototype.map.call(
  document.querySelectorAll('#cluster-table tbody tr'), function (tr) {
    return [tr.cells[0].textContent, tr.cells[3].textContent]; });
var blockers = Array.prototype.map.call(
  document.querySelectorAll('#blocker-table tbody tr'), function (tr) {
    return [tr.cells[0].textContent, tr.cells[5].textContent]; });
return {graph_nodes_in_first_screen: visible, graph_box: [br.left, br.top, br.width, br.height],
        legend_rows: Object.keys(rows).length, legend_width: lb.width,
        box_width: box.clientWidth, clusters: clusters, blockers: blockers,
        sorts: [sortProbe('#cluster-table', '#cluster-table tbody tr', 1),
                sortProbe('#blocker-table', '#blocker-table tbody tr', 1),
                sortProbe('#nodes table', '#node-rows tr', 1),
                sortProbe('#nodes table', '#node-rows tr', 3)]};
"""

_TABLES_JS = _SORT_JS + """
var out = {sorts: [], text: document.body.innerText.slice(0, 4000)};
%(sorts)s
return out;
"""

_PAGE_SORTS = {
    "numerics": [("#tensor-table", 5), ("#tensor-table", 1)],
    "compare": [("#tensors", 12), ("#tensors", 2)],
    "profile": [("#op_types", 3), ("#top_ops", 4)],
}


def _natural(text):
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.findall(r"\d+|\D+", text.lower())]


def _keys(values):
    """Sort keys of column values as the pages sort them: numbers when every value is one,
    else text with runs of digits compared as numbers; empty cells are left out."""
    filled = [v for v in values if v.strip()]
    try:
        return [float(v) for v in filled]
    except ValueError:
        return [_natural(v) for v in filled]


def _contiguous_blanks(values):
    """True when the empty cells (host nodes have no cluster) sit together at one end."""
    blank = [not v.strip() for v in values]
    first = blank.index(True) if True in blank else len(blank)
    return all(blank[first:first + blank.count(True)])


def _sorted_problems(page, sort):
    """Problems with one clicked column: ascending after a click, descending after another
    (a paged table shows the first rows of each order, not one list reversed)."""
    asc, desc = _keys(sort["asc"]), _keys(sort["desc"])
    name = sort["header"]
    if len(sort["asc"]) < 2:
        return [f"{page}: column {name} has fewer than 2 rows to sort"]
    problems = []
    if asc != sorted(asc) or not _contiguous_blanks(sort["asc"]):
        problems.append(f"{page}: a click on column {name} does not sort the table")
    if desc != sorted(desc, reverse=True) or not _contiguous_blanks(sort["desc"]):
        problems.append(f"{page}: a second click on column {name} does not reverse the order")
    if asc == desc and len(set(map(str, asc))) > 1:
        problems.append(f"{page}: column {name} gives the same order on both clicks")
    return problems


def _placement_problems(facts, report):
    problems = []
    if facts["graph_nodes_in_first_screen"] < 3:
        problems.append("placement: the graph is not visible in the first screen "
                        f"({facts['graph_nodes_in_first_screen']} boxes in it)")
    if facts["legend_rows"] < 2 or facts["legend_width"] > facts["box_width"]:
        problems.append(f"placement: the legend does not wrap ({facts['legend_rows']} row(s), "
                        f"{facts['legend_width']:.0f} px in a {facts['box_width']} px box)")
    for name, separated in facts["clusters"]:
        if not ("←" in separated or "→" in separated):
            problems.append(f"placement: cluster {name.strip()} does not say what separates it")
    ops = {info["op"] for info in report["nodes"].values()}
    functions = set()
    for blocker in report["summary"]["host_blockers"]:
        for cause in blocker["causes"]:
            ops.add(cause["op"])
            functions.update(cause["functions"])
    for reason, cause in facts["blockers"]:
        if not any(re.search(rf"\b{re.escape(op)}\b", cause) for op in ops):
            problems.append(f"placement: reason {reason} does not name the op that causes it")
        if reason == "function_not_supported" and not any(f in cause for f in functions):
            problems.append("placement: function_not_supported does not name the function")
    for sort in facts["sorts"]:
        problems += _sorted_problems("placement", sort)
    return problems


def check_pages(pages):
    """Open each page in headless Chromium and check it (see the module docstring); returns
    ``(facts, problems)``: what the page scripts read, and a list of one-line problems."""
    from npu_adapter.report import screenshot

    facts, problems = {}, []
    with open(os.path.join(os.path.dirname(pages["placement"]), "placement.json")) as f:
        report = json.load(f)
    facts["placement"] = screenshot.probe(pages["placement"],
                                          _PLACEMENT_JS % {"width": WIDTH, "height": HEIGHT},
                                          width=WIDTH, height=HEIGHT)
    problems += _placement_problems(facts["placement"], report)
    for page, sorts in _PAGE_SORTS.items():
        calls = "".join(f"out.sorts.push(sortProbe('{table}', '{table} tbody tr', {col}));\n"
                        for table, col in sorts)
        facts[page] = screenshot.probe(pages[page], _TABLES_JS % {"sorts": calls},
                                       width=WIDTH, height=HEIGHT)
        for sort in facts[page]["sorts"]:
            problems += _sorted_problems(page, sort)
    if "_Mkl" in json.dumps(facts["profile"]["sorts"]):
        problems.append("profile: oneDNN kernel names instead of the graph's op types")
    if "first step" not in facts["profile"]["text"]:
        problems.append("profile: the first step is not shown apart from the steady ones")
    return facts, problems


def main(argv=None):
    """Command line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", metavar="OUT_DIR",
                        help="where the screenshots (and the reports, under reports/) go")
    parser.add_argument("--image-size", type=int, default=96, help="input height and width")
    args = parser.parse_args(argv)
    from npu_adapter.report import screenshot

    if screenshot.find_chromium() is None:
        print("report_screens: Chromium is not installed (Debian: apt-get install -y chromium "
              "fonts-dejavu-core)", file=sys.stderr)
        return 2
    pages = write_reports(os.path.join(args.out_dir, "reports"), args.image_size)
    shots = screenshots(pages, args.out_dir)
    facts, problems = check_pages(pages)
    for name, (png, png_problems) in shots.items():
        print(f"{png}: {pages[name]}")
        problems += [f"{name}: {p}" for p in png_problems]
    placement = facts["placement"]
    print(f"placement: {placement['graph_nodes_in_first_screen']} graph boxes in the first "
          f"screen, legend in {placement['legend_rows']} rows, {len(placement['clusters'])} "
          f"cluster rows, {len(placement['blockers'])} host reasons")
    for problem in problems:
        print(f"problem: {problem}")
    print("all checks passed" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
