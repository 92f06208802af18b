"""What the CLI says when there is nothing to show, a typo or a missing argument, and what its
progress and summary lines count (issue 33, CLI item 7)."""

import pytest
from cli_cases import dump_tree, reprs_in, run


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("dumps")
    return {"golden": dump_tree(root, "golden"), "other": dump_tree(root, "other", scale=1.5),
            "root": root}


def _one_error(result):
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert result.out == "" and not reprs_in(result.err)
    return result.err_lines[0].removeprefix("npu-adapter: error: ")


# ---------------------------------------------------------------------------- dump show / compare


def test_dump_show_without_dumps_names_what_is_there(dumps, tmp_path, capsys):
    golden = dumps["golden"]
    assert _one_error(run(capsys, "dump", "show", tmp_path)).startswith(
        f"{tmp_path} holds no dump files (enable_dump writes them under dump_path")
    assert _one_error(run(capsys, "dump", "show", golden, "--step", "7")) == (
        f"--step 7: {golden} has no iteration 7; iterations found: 0, 1")
    assert _one_error(run(capsys, "dump", "show", tmp_path / "missing")) == (
        f"{tmp_path / 'missing'} does not exist")
    result = run(capsys, "dump", "show", golden, "--step", "1")
    assert result.code == 0 and "1 iteration(s)" in result.out


def test_dump_compare_without_common_iterations(dumps, tmp_path, capsys):
    golden, other = dumps["golden"], dumps["other"]
    assert _one_error(run(capsys, "dump", "compare", golden, other, "--step", "7")) == (
        f"--step 7: {golden} has no iteration 7; iterations found: 0, 1")
    assert _one_error(run(capsys, "dump", "compare", golden, tmp_path)).startswith(
        f"{tmp_path} holds no dump files")
    assert _one_error(run(capsys, "dump", "compare", tmp_path / "missing", other)) == (
        f"{tmp_path / 'missing'} does not exist")
