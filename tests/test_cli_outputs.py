"""What the CLI writes: every output gets the permissions the umask gives (files 0666 and
folders 0777 less the umask, as ``cp`` or ``tar`` would make them), through a temporary file
or folder beside it, and nothing is left behind when a command fails."""

import os
import pathlib

import pytest
from cli_cases import dump_tree, image_batch, image_model, run, tree


@pytest.fixture(params=[0o022, 0o027])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _expected(path, umask):
    return (0o777 if os.path.isdir(path) else 0o666) & ~umask


def _assert_modes(path, umask):
    """``path`` (a file, or a folder and everything in it) has the umask's modes."""
    found = tree(path) if os.path.isdir(path) else {".": os.stat(path).st_mode & 0o777}
    wrong = {name: oct(mode) for name, mode in found.items()
             if mode != _expected(os.path.join(path, name), umask)}
    assert not wrong, f"modes not from umask {umask:o}: {wrong}"


def test_every_output_follows_the_umask(tmp_path, umask, capsys):
    model = image_model(tmp_path)
    batch = image_batch(tmp_path)
    golden = dump_tree(tmp_path, "golden")
    other = dump_tree(tmp_path, "other", scale=1.01)
    out = tmp_path / "out"
    out.mkdir()
    commands = {
        "model.pb": ["convert", model, "--out", out / "model.pb"],
        "model.pbtxt": ["convert", model, "--out", out / "model.pbtxt"],
        "served": ["convert", model, "--to", "savedmodel", "--out", out / "served"],
        "inspect": ["inspect", model, "--out", out / "inspect", "-q"],
        "numerics": ["numerics", model, "--feed", f"input:0={batch}", "--fetch", "output:0",
                     "--out", out / "numerics"],
        "compare": ["dump", "compare", golden, other, "--out", out / "compare"],
    }
    for name, argv in commands.items():
        result = run(capsys, *argv)
        assert result.code == 0, (name, result.err)
        _assert_modes(out / name, umask)
    assert sorted(os.listdir(out)) == sorted(commands)  # no temporary file or folder left


def test_convert_to_om_follows_the_umask(cann_fakes, tmp_path, umask, capsys):
    model = image_model(tmp_path)
    result = run(capsys, "convert", model, "--to", "om", "--out", tmp_path / "model.om")
    assert result.code == 0, result.err
    for name in ("model.om", "model.om.json"):
        _assert_modes(tmp_path / name, umask)
    assert sorted(os.listdir(tmp_path)) == ["cann_fakes", "model.om", "model.om.json",
                                            "model.pb"]


def test_an_existing_output_folder_keeps_its_other_files(tmp_path, capsys):
    model = image_model(tmp_path)
    out = tmp_path / "inspect"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert run(capsys, "inspect", model, "--out", out, "-q").code == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "report.html").is_file()


def test_convert_refuses_to_write_over_its_input(tmp_path, capsys):
    model = image_model(tmp_path)
    original = pathlib.Path(model).read_bytes()
    (tmp_path / "sub").mkdir()
    os.symlink(model, tmp_path / "link.pb")
    for out in (model, str(tmp_path / "sub" / ".." / "model.pb"), str(tmp_path / "link.pb")):
        result = run(capsys, "convert", model, "--out", out)
        assert result.code == 2
        assert result.err_lines == [f"npu-adapter: error: --out {out} is the same file as the "
                                    f"input model {model}: writing there would replace the "
                                    "model; choose another output path"]
    assert pathlib.Path(model).read_bytes() == original
    assert sorted(os.listdir(tmp_path)) == ["link.pb", "model.pb", "sub"]
    assert os.path.islink(tmp_path / "link.pb")


def test_convert_refuses_a_file_of_the_input_saved_model(tmp_path, capsys):
    model = tmp_path / "served"
    assert run(capsys, "convert", image_model(tmp_path), "--to", "savedmodel", "--out",
               model).code == 0
    before = tree(model)
    result = run(capsys, "convert", model, "--out", model / "saved_model.pb")
    assert result.code == 2 and len(result.err_lines) == 1
    assert f"--out {model / 'saved_model.pb'} is a file of the input SavedModel {model}" \
        in result.err
    assert tree(model) == before
