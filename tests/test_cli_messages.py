"""What the CLI says: every error path of every command is one line on stderr, exit 2, with
values written as a user writes them (``enable_dump=true``, ``(1,16,16,3)``, ``0.9999999``),
never a Python repr (``None``, ``True``, ``{'a': 1}``, ``('input:0', (1, 16, 16, 3))``, a
16-digit float), and nothing written."""

import json

import pytest
from cli_cases import constant_model, dump_tree, image_batch, image_model, reprs_in, run, tree


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    (root / "empty").mkdir()
    (root / "existing").mkdir()
    (root / "a_file").write_text("x")
    (root / "rank.py").write_text("print('rank')\n")
    (root / "bad_table.json").write_text(json.dumps({"server_count": "1", "server_list": []}))
    return {"model": image_model(root), "constants": constant_model(root),
            "batch": image_batch(root), "wrong": image_batch(root, "wrong.npy", shape=(2, 3)),
            "root": str(root)}


ERRORS = {
    "dump on without dump_path": ["options", "--check", "enable_dump=true"],
    "data dump and overflow dump": ["options", "--check", "enable_dump=true",
                                    "enable_dump_debug=true", "dump_path={root}"],
    "dims trio incomplete": ["options", "--check", "input_shape=input:-1,16,16,3"],
    "dims trio order": ["options", "--check", "input_shape=b:-1;a:-1", "dynamic_dims=1,1;2,2",
                        "dynamic_node_type=1"],
    "bool": ["options", "--check", "mix_compile_mode=maybe"],
    "int": ["options", "--check", "iterations_per_loop=1.5"],
    "choice": ["options", "--check", "precision_mode=fastest"],
    "exclusive modes": ["options", "--check", "precision_mode=force_fp16",
                        "precision_mode_v2=origin"],
    "mixlist file": ["options", "--check", "precision_mode=allow_mix_precision",
                     "modify_mixlist={root}/none.json"],
    "profiling json value": ["options", "--check", "profiling_mode=true",
                             'profiling_options={{"output": "{root}", "training_trace": true}}'],
    "unknown option": ["options", "--check", "mix_compile_mod=1"],
    "variable placement": ["options", "--check", "variable_placement=Host"],
    "convert onto its input": ["convert", "{model}", "--out", "{model}"],
    "convert missing model": ["convert", "{root}/none.pb", "--out", "{root}/o.pb"],
    "convert suffix": ["convert", "{model}", "--out", "{root}/o.txt"],
    "convert unknown fetch": ["convert", "{model}", "--out", "{root}/o.pb", "--fetch", "nope:0"],
    "convert unknown feed": ["convert", "{model}", "--out", "{root}/o.pb", "--feed", "nope:0"],
    "savedmodel exists": ["convert", "{model}", "--to", "savedmodel", "--out", "{root}/existing"],
    "om suffix": ["convert", "{model}", "--to", "om", "--out", "{root}/o.pb"],
    "inspect out is a file": ["inspect", "{model}", "--out", "{root}/a_file", "-q"],
    "inspect backend": ["inspect", "{model}", "--out", "{root}/o", "--backend", "nope", "-q"],
    # a path whose bytes are not UTF-8 (a str with surrogate escapes): an internal error once
    "inspect out not UTF-8": ["inspect", "{model}", "--out", "{root}/o\udcff", "-q"],
    "convert fetch not UTF-8": ["convert", "{model}", "--out", "{root}/o.pb", "--fetch",
                                "out\udcff:0"],
    "numerics no feed": ["numerics", "{model}", "--fetch", "output:0", "--out", "{root}/o"],
    "numerics no fetch": ["numerics", "{model}", "--feed", "input:0={batch}", "--out",
                          "{root}/o"],
    "numerics feed shape": ["numerics", "{model}", "--feed", "input:0={wrong}", "--fetch",
                            "output:0", "--out", "{root}/o"],
    "numerics feed syntax": ["numerics", "{model}", "--feed", "input:0", "--fetch", "output:0",
                             "--out", "{root}/o"],
    "dump compare missing": ["dump", "compare", "{root}/none", "{root}/empty"],
    "doctor unknown option": ["doctor", "--option", "soc_confg=Ascend310P3"],
    "doctor config file": ["doctor", "--config", "{root}/none.json"],
    "launch -n 0": ["launch", "-n", "0", "{root}/rank.py"],
    "launch missing script": ["launch", "-n", "1", "{root}/none.py"],
    "launch base port": ["launch", "-n", "1", "--base-port", "70000", "{root}/rank.py"],
    "launch rank table": ["launch", "-n", "1", "--rank-table", "{root}/bad_table.json",
                          "{root}/rank.py"],
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_every_error_is_one_line_without_python_reprs(inputs, name, capsys):
    before = tree(inputs["root"])
    result = run(capsys, *(a.format(**inputs) for a in ERRORS[name]))
    assert result.code == 2, result.err
    assert len(result.err_lines) == 1 and result.err.startswith("npu-adapter"), result.err
    assert not reprs_in(result.err), result.err
    assert tree(inputs["root"]) == before


def test_bytes_that_are_not_utf8_are_named(inputs, capsys):
    result = run(capsys, "inspect", inputs["model"], "--out", inputs["root"] + "/o\udcff", "-q")
    assert result.err_lines == [
        f"npu-adapter inspect: error: invalid value '{inputs['root']}/o\\udcff' for option "
        "'--out': text that is valid UTF-8 ('\\udcff' at offset "
        f"{len(inputs['root']) + 2} stands for bytes that are not UTF-8, e.g. in a command-line "
        "argument or a file name) (see npu-adapter inspect --help)"]


def test_combinations_show_each_value(capsys):
    result = run(capsys, "options", "--check", "enable_dump=true")
    assert result.err_lines == [
        "npu-adapter: error: invalid combination of options enable_dump + enable_dump_debug + "
        "dump_path (enable_dump=true, enable_dump_debug=false): if use dump function, dump_path "
        "must be set."]


def test_numerics_names_the_outputs_to_fetch(inputs, capsys):
    result = run(capsys, "numerics", inputs["constants"], "--out", inputs["root"] + "/o")
    assert result.err_lines == [
        "npu-adapter: error: --fetch is needed: the model has no signature naming its outputs; "
        "name the tensors to compute, e.g. --fetch out:0"]


def test_dump_compare_figures_have_six_digits(tmp_path, capsys):
    golden = dump_tree(tmp_path, "golden")
    other = dump_tree(tmp_path, "other", scale=1.001)
    result = run(capsys, "dump", "compare", golden, other, "--min-cosine", "0.9999999999")
    assert result.code == 0 and "first diverging op" in result.out, result.out
    assert not reprs_in(result.out), result.out


def test_gears_in_the_placement_report(tmp_path, capsys):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="input")
        tf.nn.relu(tf.matmul(x, tf.ones([4, 2])), name="output")
    model = tmp_path / "dyn.pb"
    model.write_bytes(graph.as_graph_def().SerializeToString())
    result = run(capsys, "inspect", model, "--backend", "xla", "--option", "input_shape=input:-1,4",
                 "--option", "dynamic_dims=1;2", "--option", "dynamic_node_type=1", "--out",
                 tmp_path / "out", "-q")
    assert result.code == 0, result.err
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<td>input:0 (1,4); input:0 (2,4)</td>" in page
    assert not reprs_in(page.replace("&#x27;", "'"))
