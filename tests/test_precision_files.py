"""modify_mixlist and customize_dtypes files: the forms they accept and the named errors
(option, file and line) for the ones they do not; the bundled default lists."""

import json

import pytest

from npu_adapter.errors import NpuConfigError, PrecisionFileError
from npu_adapter.precision.customize import load_customize_dtypes, parse_customize_dtypes
from npu_adapter.precision.lists import default_precision_lists
from npu_adapter.precision.mixlist import load_mixlist, parse_mixlist


def test_mixlist_entries_in_file_order_with_lines():
    text = '{\n "black-list": {\n  "to-add": ["Exp",\n   "ReduceSum"]\n },\n' \
           ' "white-list": {"to-remove": ["Conv2D"]}\n}\n'
    edits = parse_mixlist(text, "m.json")
    assert [(e.list, e.action, e.name, e.line) for e in edits.entries] == [
        ("black", "to-add", "Exp", 3), ("black", "to-add", "ReduceSum", 4),
        ("white", "to-remove", "Conv2D", 6)]


@pytest.mark.parametrize("text, line, fragment", [
    ('{"black-list": {"to-add": ["Exp"]}', 1, "not valid JSON"),
    ('{\n"black-list": {"to-add": ["Exp"]},\n"grey-list": {}\n}', 3, "unknown key 'grey-list'"),
    ('{\n"black-list": {\n"add": ["Exp"]}}', 3, "unknown key 'add'"),
    ('{"black-list": {"to-add": "Exp"}}', 1, "must be a list"),
    ('{"black-list": ["Exp"]}', 1, "must hold an object"),
    ('{"black-list": {"to-add": ["Exp", 3]}}', 1, "is not an op type"),
    ('{"black-list": {"to-add": ["Exp"]},\n "white-list": {"to-add": ["Exp"]}}', 2,
     "added to both the black list"),
    ('{"black-list": {"to-add": ["Exp"], "to-remove": ["Exp"]}}', 1,
     "both added to and removed from"),
    ('[1, 2]', 1, "JSON list"),
])
def test_mixlist_errors_name_file_and_line(text, line, fragment):
    with pytest.raises(PrecisionFileError) as info:
        parse_mixlist(text, "ops_info.json")
    error = info.value
    assert isinstance(error, NpuConfigError) and error.option == "modify_mixlist"
    assert error.line == line and fragment in str(error)
    assert f"ops_info.json:{line}" in str(error)


def test_mixlist_missing_file(tmp_path):
    with pytest.raises(PrecisionFileError, match="cannot be read"):
        load_mixlist(str(tmp_path / "nope.json"))


def test_customize_dtypes_forms():
    text = ("# by name\n\nscope/Relu::InputDtype:float16,int8,OutputDtype:float16,int8\n"
            "OpType::Relu:InputDtype:float,OutputDtype:fp16\n"
            "mm::OutputDtype:float32\n"
            "OpName::scope/dense/MatMul:InputDtype:float32,float32,OutputDtype:float32\n")
    parsed = parse_customize_dtypes(text, "c.cfg")
    rule = parsed.by_name["scope/Relu"]
    assert (rule.inputs, rule.outputs, rule.line) == (("float16", "int8"), ("float16", "int8"), 3)
    assert parsed.by_type["Relu"].inputs == ("float32",)
    assert parsed.by_type["Relu"].outputs == ("float16",)
    assert parsed.by_name["mm"].inputs == () and parsed.by_name["mm"].outputs == ("float32",)
    assert parsed.by_name["scope/dense/MatMul"].inputs == ("float32", "float32")
    # name wins over type; IR or TF type names both match
    assert parsed.rule_for("scope/Relu", "Relu", "Relu") is rule
    assert parsed.rule_for("other", "Relu", "Relu").line == 4


@pytest.mark.parametrize("text, line, fragment", [
    ("mm:InputDtype:float16", 1, "no '::'"),
    ("\nmm::InputDtype:float17", 2, "unknown dtype 'float17'"),
    ("mm::Dtype:float16", 1, "expected InputDtype"),
    ("OpType::Re lu:InputDtype:float16", 1, "must be followed by an op type"),
    ("mm::OutputDtype:float16\nmm::OutputDtype:float32", 2, "already has a rule on line 1"),
    ("mm::InputDtype:,OutputDtype:", 1, "no dtype given"),
])
def test_customize_dtypes_errors_name_file_and_line(text, line, fragment):
    with pytest.raises(PrecisionFileError) as info:
        parse_customize_dtypes(text, "c.cfg")
    assert info.value.option == "customize_dtypes" and info.value.line == line
    assert fragment in str(info.value) and f"c.cfg:{line}" in str(info.value)


def test_customize_dtypes_missing_file(tmp_path):
    with pytest.raises(PrecisionFileError, match="customize_dtypes"):
        load_customize_dtypes(str(tmp_path / "nope.cfg"))


def test_default_lists_sources():
    lists = default_precision_lists()
    # from CANN's op definitions (precision_reduce flag)
    assert (lists.entry("Exp").list, lists.entry("Exp").source) == ("white", "cann")
    assert (lists.entry("L2Loss").list, lists.entry("L2Loss").source) == ("black", "cann")
    assert (lists.entry("Sum").list, lists.entry("Sum").ir_name) == ("gray", "ReduceSum")
    # TensorFlow's AMP lists where CANN's repositories have no definition
    assert (lists.entry("MatMul").list, lists.entry("MatMul").source) == ("white", "tensorflow")
    assert lists.entry("MatMul").ir_name == "MatMulV2" and lists.entry("Conv2D").cube
    # anything else: gray, no source
    assert lists.entry("NoSuchOp").list == "gray" and lists.entry("NoSuchOp").source == "none"


def test_default_list_file_is_canonical():
    import importlib.resources

    text = (importlib.resources.files("npu_adapter.third_party")
            / "precision_lists.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    assert text == json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True) + "\n"
    assert set(doc["sources"]) == {"cann", "tensorflow"}
    assert {e["source"] for e in doc["ops"].values()} == {"cann", "tensorflow"}
