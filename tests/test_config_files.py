"""Files and JSON named by options (npu_adapter.config.files): what they parse to."""

import pytest

from npu_adapter.config import files
from npu_adapter.errors import NpuConfigError


def test_modify_mixlist_parses_to_lists_and_actions(tmp_path):
    path = tmp_path / "ops_info.json"
    path.write_text('{\n "black-list": {"to-add": ["Matmul", "Cast"], "to-remove": ["Xlog1py"]},'
                    '\n "white-list": {"to-remove": ["Conv2D"]}\n}\n')
    assert files.read_modify_mixlist(str(path)) == {
        "black-list": {"to-add": ["Matmul", "Cast"], "to-remove": ["Xlog1py"]},
        "white-list": {"to-remove": ["Conv2D"]}}


def test_modify_mixlist_comments_as_in_canns_examples(tmp_path):
    path = tmp_path / "ops_info.json"
    path.write_text('{\n "black-list": { // black list\n  "to-add": ["Cast"] // "x" \\"\n'
                    ' },\n "white-list": {"to-remove": ["Conv2D // not a comment"]}\n}\n')
    with pytest.raises(NpuConfigError, match="line 5: 'Conv2D // not a comment'"):
        files.read_modify_mixlist(str(path))
    path.write_text('{"black-list": {"to-add": ["Cast"]}} // "quoted \\" // text"\n')
    assert files.read_modify_mixlist(str(path)) == {"black-list": {"to-add": ["Cast"]}}


def test_modify_mixlist_errors_name_the_line(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{\n "black-list": {\n  "to-add": ["Cast", "Ma tmul"]\n }\n}\n')
    with pytest.raises(NpuConfigError, match=r"line 3: 'Ma tmul'"):
        files.read_modify_mixlist(str(path))
    path.write_text('{\n "black-list": {,}\n}')
    with pytest.raises(NpuConfigError, match="line 2 column"):
        files.read_modify_mixlist(str(path))


def test_customize_dtypes_entries(tmp_path):
    path = tmp_path / "dtypes.cfg"
    path.write_text("# by name\n"
                    "resnet/block1/Relu::InputDtype:float16,int8,OutputDtype:float16,int8\n\n"
                    "OpType::Relu:InputDtype:float16,OutputDtype:float32\n"
                    "OpType::Cast:OutputDtype:float16\n"
                    "OpName::scope/MatMul:InputDtype:float32,float32\n")
    assert files.read_customize_dtypes(str(path)) == [
        ("name", "resnet/block1/Relu", ("float16", "int8"), ("float16", "int8"), 2),
        ("type", "Relu", ("float16",), ("float32",), 4),
        ("type", "Cast", (), ("float16",), 5),
        ("name", "scope/MatMul", ("float32", "float32"), (), 6)]


@pytest.mark.parametrize("line, detail", [
    ("Relu", "no '<op>::'"),
    ("OpType::Re lu:InputDtype:float16", "not an op type name"),
    ("a::InputDtype:float16,InputDtype:float16", "expected 'InputDtype"),
    ("a::InputDtype:float16 OutputDtype:float16", "',' expected"),
])
def test_customize_dtypes_errors_name_the_line(tmp_path, line, detail):
    path = tmp_path / "d.cfg"
    path.write_text("# first\n" + line + "\n")
    with pytest.raises(NpuConfigError, match="line 2") as info:
        files.read_customize_dtypes(str(path))
    assert detail in str(info.value) and str(path) in str(info.value)


def test_op_type_list_and_profiling_options():
    assert files.parse_op_type_list("Pooling, SoftmaxV2") == ["Pooling", "SoftmaxV2"]
    assert files.parse_profiling_options('{"output": "/tmp/p", "task_time": "on"}') == {
        "output": "/tmp/p", "task_time": "on"}
    with pytest.raises(NpuConfigError, match="entry 2"):
        files.parse_op_type_list("Pooling,,Relu")
    with pytest.raises(NpuConfigError, match="line 1 column"):
        files.parse_profiling_options('{"output": }')
