"""Files and JSON named by options: the shared file checks (npu_adapter.config.files) and what
the option files parse to (npu_adapter.precision parses modify_mixlist and customize_dtypes, and
the option rules check them with the same parsers when the options are read)."""

import pytest

from npu_adapter.config import files
from npu_adapter.errors import NpuConfigError
from npu_adapter.precision.customize import load_customize_dtypes
from npu_adapter.precision.mixlist import load_mixlist
from npu_adapter.profiling.options import parse_profiling_options


def _edits(path):
    return [(e.list, e.action, e.name, e.line) for e in load_mixlist(str(path)).entries]


def test_modify_mixlist_parses_to_lists_and_actions(tmp_path):
    path = tmp_path / "ops_info.json"
    path.write_text('{\n "black-list": {"to-add": ["Matmul", "Cast"], "to-remove": ["Xlog1py"]},'
                    '\n "white-list": {"to-remove": ["Conv2D"]}\n}\n')
    assert _edits(path) == [("black", "to-add", "Matmul", 2), ("black", "to-add", "Cast", 2),
                            ("black", "to-remove", "Xlog1py", 2),
                            ("white", "to-remove", "Conv2D", 3)]


def test_modify_mixlist_comments_as_in_canns_examples(tmp_path):
    path = tmp_path / "ops_info.json"
    path.write_text('{\n "black-list": { // black list\n  "to-add": ["Cast"] // "x" \\"\n'
                    ' },\n "white-list": {"to-remove": ["Conv2D // not a comment"]}\n}\n')
    with pytest.raises(NpuConfigError, match=r":5: 'Conv2D // not a comment'"):
        load_mixlist(str(path))
    path.write_text('{"black-list": {"to-add": ["Cast"]}} // "quoted \\" // text"\n')
    assert _edits(path) == [("black", "to-add", "Cast", 1)]


def test_modify_mixlist_errors_name_the_line(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{\n "black-list": {\n  "to-add": ["Cast", "Ma tmul"]\n }\n}\n')
    with pytest.raises(NpuConfigError, match=r"m.json:3: 'Ma tmul'"):
        load_mixlist(str(path))
    path.write_text('{\n "black-list": {,}\n}')
    with pytest.raises(NpuConfigError, match=r"m.json:2: not valid JSON"):
        load_mixlist(str(path))


def test_option_files_get_the_shared_file_checks(tmp_path):
    with pytest.raises(NpuConfigError, match="no such file"):
        load_mixlist(str(tmp_path / "missing.json"))
    with pytest.raises(NpuConfigError, match="it is a directory"):
        load_customize_dtypes(str(tmp_path))
    with pytest.raises(NpuConfigError, match="NUL"):
        load_mixlist("a\0b")
    bad = tmp_path / "latin1.cfg"
    bad.write_bytes(b"# ok\nRel\xe9::InputDtype:float16\n")
    with pytest.raises(NpuConfigError, match="line 2: bytes that are not UTF-8"):
        load_customize_dtypes(str(bad))


def test_customize_dtypes_entries(tmp_path):
    path = tmp_path / "dtypes.cfg"
    path.write_text("# by name\n"
                    "resnet/block1/Relu::InputDtype:float16,int8,OutputDtype:float16,int8\n\n"
                    "OpType::Relu:InputDtype:float16,OutputDtype:float32\n"
                    "OpType::Cast:OutputDtype:float16\n"
                    "OpName::scope/MatMul:InputDtype:float32,float32\n")
    parsed = load_customize_dtypes(str(path))
    rules = sorted(list(parsed.by_name.values()) + list(parsed.by_type.values()),
                   key=lambda rule: rule.line)
    assert [(r.key, r.by_type, r.inputs, r.outputs, r.line) for r in rules] == [
        ("resnet/block1/Relu", False, ("float16", "int8"), ("float16", "int8"), 2),
        ("Relu", True, ("float16",), ("float32",), 4),
        ("Cast", True, (), ("float16",), 5),
        ("scope/MatMul", False, ("float32", "float32"), (), 6)]


@pytest.mark.parametrize("line", [
    "Relu",
    "OpType::Re lu:InputDtype:float16",
    "a::InputDtype:float16,InputDtype:float16",
    "a::InputDtype:float16 OutputDtype:float16",
])
def test_customize_dtypes_errors_name_the_line(tmp_path, line):
    path = tmp_path / "d.cfg"
    path.write_text("# first\n" + line + "\n")
    with pytest.raises(NpuConfigError) as info:
        load_customize_dtypes(str(path))
    assert f"{path}:2:" in str(info.value)


def test_op_type_list_and_profiling_options():
    assert files.parse_op_type_list("Pooling, SoftmaxV2") == ["Pooling", "SoftmaxV2"]
    parsed = parse_profiling_options('{"output": "/tmp/p", "task_time": "on"}')
    assert parsed.output == "/tmp/p"
    with pytest.raises(NpuConfigError, match="entry 2"):
        files.parse_op_type_list("Pooling,,Relu")
    with pytest.raises(NpuConfigError, match="line 1 column"):
        parse_profiling_options('{"output": }')
