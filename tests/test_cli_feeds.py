"""``npu-adapter numerics`` inputs: a ``--feed`` value TensorFlow would refuse is one line
naming the entry, what the model takes and what the file holds (exit 2, nothing written)."""

import os

import numpy as np
import pytest
from cli_cases import image_batch, image_model, reprs_in, run


@pytest.fixture
def model(tmp_path):
    return image_model(tmp_path)


def _numerics(capsys, model, out, *feed_args):
    return run(capsys, "numerics", model, *feed_args, "--fetch", "output:0", "--out", out)


def _bad_feed(tmp_path, capsys, model, *feed_args):
    result = _numerics(capsys, model, tmp_path / "out", *feed_args)
    assert result.code == 2, result.err
    assert len(result.err_lines) == 1 and not reprs_in(result.err), result.err
    assert not (tmp_path / "out").exists() and not [
        name for name in os.listdir(tmp_path) if name.startswith(".out")]
    return result.err_lines[0]


def test_a_wrong_shape(tmp_path, capsys, model):
    wrong = image_batch(tmp_path, "wrong.npy", shape=(2, 3))
    line = _bad_feed(tmp_path, capsys, model, "--feed", f"input:0={wrong}")
    assert line == (f"npu-adapter: error: invalid value 'input:0={wrong}' for option '--feed': "
                    "a value of the tensor's shape (input:0 takes float32 of shape "
                    "(1,16,16,3); the file holds shape (2,3))")


def test_a_dtype_that_does_not_convert(tmp_path, capsys, model):
    complex_batch = image_batch(tmp_path, "c.npy", dtype=np.complex64)
    line = _bad_feed(tmp_path, capsys, model, "--feed", f"input={complex_batch}")
    assert "input:0 takes float32 of shape (1,16,16,3); the file holds complex64" in line


def test_an_unknown_tensor(tmp_path, capsys, model):
    line = _bad_feed(tmp_path, capsys, model, "--feed", f"nope:0={image_batch(tmp_path)}")
    assert "'--feed': a tensor of the model (the model has no node nope; its inputs: input:0)" \
        in line
    line = _bad_feed(tmp_path, capsys, model, "--feed", f"input:3={image_batch(tmp_path)}")
    assert "input:3" in line and "valid ports are 0..0" in line


def test_unreadable_files(tmp_path, capsys, model):
    (tmp_path / "objects.npy").write_bytes(b"")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    cases = {
        "missing.npy": "missing.npy: No such file or directory",
        model: f"{model} is not one",
        str(tmp_path / "objects.npy"): "it holds Python objects, which are never unpickled",
    }
    for path, detail in cases.items():
        line = _bad_feed(tmp_path, capsys, model, "--feed", f"input:0={path}")
        assert "a .npy or .npz file written by numpy.save or numpy.savez" in line
        assert detail in line, line


def test_an_archive_of_feeds(tmp_path, capsys, model):
    np.savez(tmp_path / "good.npz", input=np.ones((1, 16, 16, 3), np.float32))
    np.savez(tmp_path / "bad.npz", input=np.ones((16, 16, 3), np.float32))
    line = _bad_feed(tmp_path, capsys, model, "--feeds", tmp_path / "bad.npz")
    assert f"invalid value 'input in {tmp_path / 'bad.npz'}' for option '--feeds'" in line
    assert "the file holds shape (16,16,3)" in line
    result = _numerics(capsys, model, tmp_path / "ok", "--feeds", tmp_path / "good.npz")
    assert result.code == 0, result.err


# ---------------------------------------------------------------------------- what is checked first


def test_a_model_without_inputs_needs_no_feed(tmp_path, capsys):
    from cli_cases import constant_model

    result = run(capsys, "numerics", constant_model(tmp_path), "--fetch", "out:0", "--out",
                 tmp_path / "out")
    assert (result.code, result.err) == (0, "")
    assert "tensors compared" in result.out and (tmp_path / "out" / "numerics.html").is_file()


def test_a_missing_input_is_named(tmp_path, capsys, model):
    result = _numerics(capsys, model, tmp_path / "out")
    assert result.code == 2 and not (tmp_path / "out").exists()
    assert result.err_lines == [
        "npu-adapter: error: the model needs a value for input:0 (float32 of shape (1,16,16,3)): "
        "give --feed input:0=FILE.npy (repeatable) or --feeds FILE.npz"]


def test_out_is_checked_before_the_model_is_read(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    out = tmp_path / "a_file" / "out"
    result = run(capsys, "numerics", tmp_path / "missing.pb", "--fetch", "y:0", "--out", out)
    assert result.code == 2 and len(result.err_lines) == 1
    assert result.err.startswith(f"npu-adapter: error: invalid value '{out}' for option '--out'")


def test_convert_to_om_looks_for_atc_before_reading_the_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    result = run(capsys, "convert", tmp_path / "missing.pb", "--to", "om", "--soc-version",
                 "Ascend310P3", "--out", tmp_path / "m.om")
    assert result.code == 2 and len(result.err_lines) == 1
    assert "`atc` is not on PATH" in result.err and "missing.pb" not in result.err
    assert os.listdir(tmp_path) == []
