"""Parsers of the structured string options (npu_adapter.config.parsers)."""

import pytest

from npu_adapter.config import parsers
from npu_adapter.config.parsers import (
    AccelerateTrainMode,
    DimsTrio,
    parse_accelerate_train_mode,
    parse_dump_step,
    parse_dynamic_dims,
    parse_gear_pad_values,
    parse_gear_unpad,
    parse_in_out_pair,
    parse_input_shape,
    parse_local_device_list,
    parse_shape_range,
    parse_shape_range_list,
    validate_dims_trio,
)
from npu_adapter.errors import NpuConfigError, excerpt


def _raises(func, *args, option, fragment=None, match=None):
    """Call func, expect NpuConfigError on ``option``; the message names option and fragment."""
    with pytest.raises(NpuConfigError) as info:
        func(*args)
    error = info.value
    assert error.option == option
    assert repr(option) in str(error)
    if fragment is not None:
        assert error.value == fragment
        assert excerpt(fragment) in str(error)
    if match is not None:
        assert match in str(error)
    return error


# ---- input_shape -------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("data:1,1,40,-1;label:1,-1;mask:-1,-1",
     [("data", (1, 1, 40, -1)), ("label", (1, -1)), ("mask", (-1, -1))]),
    ("a:0;b:0,1", [("a", ()), ("b", (0, 1))]),          # scalar only when 0 is the sole dim
    ("x:-1", [("x", (-1,))]),
    ("a:1;", [("a", (1,))]),                             # trailing ';' as the original's Split
    (" data : 2 , -1 ", [("data", (2, -1))]),
    (b"input/x:-1,3", [("input/x", (-1, 3))]),
    ("_arg0:1", [("_arg0", (1,))]),
])
def test_parse_input_shape_valid(text, expected):
    assert parse_input_shape(text) == expected


@pytest.mark.parametrize("text, fragment, match", [
    ("data:1,a", "a", "integer"),
    ("data:1,-2", "-2", "-1 for a dynamic dim"),
    ("data:", "data:", "at least one dim"),
    (":1", ":1", "non-empty input name"),
    ("a:1;a:2", "a", "once"),
    ("a:1;;b:2", "", "empty entry"),
    ("a1", "a1", "exactly one ':'"),
    ("a:1:2", "a:1:2", "exactly one ':'"),
    ("a:1,,2", "a:1,,2", "empty dim"),
    ("a b:1", "a b", "input node name"),
    ("", "", "at least one input"),
    ("a:1.5", "1.5", "integer"),
])
def test_parse_input_shape_errors(text, fragment, match):
    _raises(parse_input_shape, text, option="input_shape", fragment=fragment, match=match)


# ---- dynamic_dims ------------------------------------------------------------------------


def test_parse_dynamic_dims_valid():
    assert parse_dynamic_dims("20,20,1,1;40,40,2,2;80,60,4,4", 4) == [
        (20, 20, 1, 1), (40, 40, 2, 2), (80, 60, 4, 4)]
    assert parse_dynamic_dims("1;2;") == [(1,), (2,)]
    assert parse_dynamic_dims(";".join(str(i) for i in range(1, 101))) == [
        (i,) for i in range(1, 101)]


@pytest.mark.parametrize("text, count, fragment, match", [
    ("1,a;2,2", None, "a", "positive integer"),
    ("0;1", None, "0", "positive integer"),
    ("-1;1", None, "-1", "positive integer"),
    ("1", None, "1", "between 2 and 100 gears"),
    (";".join(str(i) for i in range(1, 102)), None, None, "got 101"),
    ("1;1", None, "1", "distinct gears"),
    ("1,2;3", 2, "3", "2 value(s) per gear"),
    ("1;;2", None, "", "empty gear"),
    ("", None, "", "gears"),
])
def test_parse_dynamic_dims_errors(text, count, fragment, match):
    _raises(parse_dynamic_dims, text, count, option="dynamic_dims", fragment=fragment,
            match=match)


# ---- the trio ----------------------------------------------------------------------------


def test_validate_dims_trio_valid():
    trio = validate_dims_trio("data:1,1,40,-1;label:1,-1;mask:-1,-1",
                              "20,20,1,1;40,40,2,2;80,60,4,4", 0)
    assert trio == DimsTrio(
        inputs=(("data", (1, 1, 40, -1)), ("label", (1, -1)), ("mask", (-1, -1))),
        gears=((20, 20, 1, 1), (40, 40, 2, 2), (80, 60, 4, 4)), node_type=0)


@pytest.mark.parametrize("args, option, fragment, match", [
    (("mask:-1;data:-1", "1,2;3,4", 0), "input_shape", "data", "alphabetical order"),
    (("data:1", "1;2", 0), "input_shape", "data:1", "at least one -1"),
    (("data:-1,-1", "1;2", 1), "dynamic_dims", "1", "2 value(s) per gear"),
    (("data:-1", "1;2", 2), "dynamic_node_type", 2, "0 (dataset"),
    (("data:-1", "1;2", True), "dynamic_node_type", True, "0 (dataset"),
])
def test_validate_dims_trio_errors(args, option, fragment, match):
    _raises(validate_dims_trio, *args, option=option, fragment=fragment, match=match)


# ---- shape ranges ------------------------------------------------------------------------


@pytest.mark.parametrize("text, enable_dp, expected", [
    # a case of the original's tests
    ("getnext:[2~3,4~5];data:[2,3],[1~2,3~4]", True, ("[2,3],[1~2,3~4]", "[2~3,4~5]")),
    ("getnext:[2~3,4~5];data:[2,3],[1~2,3~4]", False, ("[2~3,4~5],[2,3],[1~2,3~4]", "")),
    # a case of the original's tests: one entry + enable_dp goes to getnext; the tag itself is
    # ignored
    ("getnext:[1~50, 1~50],[1~50, 1~50]", True, ("", "[1~50, 1~50],[1~50, 1~50]")),
    ("getnext:[1~50, 1~50],[1~50, 1~50]", False, ("[1~50, 1~50],[1~50, 1~50]", "")),
    ("data:[3]", True, ("", "[3]")),
    ("data:[3];getnext:[]", True, ("[3]", "[]")),
])
def test_parse_shape_range_routing(text, enable_dp, expected):
    assert parse_shape_range(text, enable_dp) == expected


@pytest.mark.parametrize("text, fragment, match", [
    ("foo:[1]", "foo", "'data' or 'getnext'"),
    ("data[1]", "data[1]", "exactly one ':'"),
    ("data:[1]:x", "data:[1]:x", "exactly one ':'"),
    ("data:[1];getnext:[2];data:[3]", "data:[1];getnext:[2];data:[3]", "got 3"),
    ("data:[1];data:[2]", "data", "at most once"),
    ("", "", "one or two entries"),
    ("data:[1];", "", "exactly one ':'"),
])
def test_parse_shape_range_errors(text, fragment, match):
    _raises(parse_shape_range, text, False, option="dynamic_inputs_shape_range",
            fragment=fragment, match=match)


def test_parse_shape_range_list_valid():
    assert parse_shape_range_list("[1~50, 1~50],[3,-1],[]") == [
        [(1, 50), (1, 50)], [(3, 3), (1, None)], []]
    assert parse_shape_range_list(" [128 ,3~5, 2~128, -1] , [ ] ") == [
        [(128, 128), (3, 5), (2, 128), (1, None)], []]
    assert parse_shape_range_list("[2~-1]") == [[(2, None)]]


@pytest.mark.parametrize("text, match", [
    ("", "bracketed shapes"),
    ("[1~50", "unbalanced"),
    ("[[1]]", "unbalanced"),
    ("1,2", "'[' to open"),
    ("[5~3]", "min <= max"),
    ("[1,,2]", "empty dim"),
    ("[1],", "trailing ','"),
    ("[1] [2]", "',' between shapes"),
    ("[a]", "a dim"),
    ("[-2]", "a dim >= 0"),
    ("[-1~3]", "min >= 0"),
    ("[1~x]", "integer max"),
])
def test_parse_shape_range_list_errors(text, match):
    _raises(parse_shape_range_list, text, option="dynamic_inputs_shape_range", match=match)


# ---- in_out_pair -------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("[[['import/conv2d_1/convolution'], ['import/conv2d_59/BiasAdd', "
     "'import/conv2d_67/BiasAdd']]]",
     [("import/conv2d_1/convolution", ("import/conv2d_59/BiasAdd", "import/conv2d_67/BiasAdd"))]),
    ("[[['Variable', 'Const_1'],['Add']]]", [("Variable", ("Add",)), ("Const_1", ("Add",))]),
    ('[[["a"], ["c", "b"]]]', [("a", ("b", "c"))]),
    ("[[[a],[b]]]", [("a", ("b",))]),                                   # bare names
    ("  [ [ [ 'a' ] ,\n\t[ 'b' ] ] ]  ", [("a", ("b",))]),               # whitespace anywhere
    ("[[['a'],['c']],[['a'],['b']],[['z'],['c']]]", [("a", ("b", "c")), ("z", ("c",))]),
    ("[[['x.y-1/z>w'],['.t']]]", [("x.y-1/z>w", (".t",))]),
])
def test_parse_in_out_pair_valid(text, expected):
    assert parse_in_out_pair(text) == expected


def test_parse_in_out_pair_accepts_python_str_of_pairs():
    in_nodes = ["import/conv2d_1/convolution"]
    out_nodes = ["import/conv2d_59/BiasAdd", "import/conv2d_75/BiasAdd"]
    text = str([[in_nodes, out_nodes]])
    assert parse_in_out_pair(text.encode()) == [(in_nodes[0], tuple(sorted(out_nodes)))]


@pytest.mark.parametrize("text, fragment, match", [
    ("[['a'],['b']]", "a", "only two bracket levels"),
    ("['a']", "a", "only one bracket level"),
    ("[[['a'],['b']]", "", "unbalanced brackets"),
    ("[[['a'],['b']]]]", "]", "unbalanced brackets: extra ']'"),
    ("", "", "empty string"),
    ("   ", "   ", "empty string"),
    ("[]", "]", "empty list, no entries"),
    ("[[[],['b']]]", "]", "empty node list"),
    ("[[['a'],[]]]", "]", "empty node list"),
    ("'abc'", "abc", "not a list"),
    ("abc", "abc", "not a list"),
    ("[[['a']]]", "]", "exactly 2 lists"),
    ("[[]]", "]", "empty pair"),
    ("[[['a'],['b'],['c']]]", "]", "got 3"),
    ("[[['a\"b'],['c']]]", 'a"b', "contains a quote character"),
    ("[[[a'b],['c']]]", "a'b", "contains a quote character"),
    ("[[['a b'],['c']]]", "a b", "not a valid TF node name"),
    ("[[['-a'],['c']]]", "-a", "not a valid TF node name"),
    ("[[['a'],['c\\\\d']]]", "c\\\\d", "not a valid TF node name"),
    ("[[['a],[c]]]", "'a],[c]]]", "unterminated ' quote"),
    ('[[["a],[c]]]', '"a],[c]]]', 'unterminated " quote'),
    ("[[['a'],['b']]] x", "x", "trailing garbage"),
    ("[[['a'],['b']]],", ",", "trailing garbage"),
    ("[[[['a']],['c']]]", "[", "too many bracket levels"),
    ("[[['a'] ['c']]]", "[", "expected ',' or ']' after a node list"),
    ("[[['a' 'b'],['c']]]", "b", "expected ',' or ']' after a node name"),
    ("[[['a'],['b']] [['c'],['d']]]", "[", "expected ',' or ']' after a pair"),
])
def test_parse_in_out_pair_errors(text, fragment, match):
    error = _raises(parse_in_out_pair, text, option="in_out_pair", fragment=fragment,
                    match=match)
    assert "at offset " in str(error)


def test_parse_in_out_pair_error_reports_offset():
    error = _raises(parse_in_out_pair, "[[['a'],['b']]] x", option="in_out_pair")
    assert "at offset 16 " in str(error)


# ---- dump_step, local_device_list, accelerate mode, our formats --------------------------


def test_parse_dump_step_valid():
    assert parse_dump_step("0|5|10-20") == [(0, 0), (5, 5), (10, 20)]
    assert parse_dump_step("|".join(str(i) for i in range(100))) == [(i, i) for i in range(100)]


@pytest.mark.parametrize("text, fragment, match", [
    ("5-3", "5-3", "N < M"),
    ("5-5", "5-5", "N < M"),
    ("a", "a", "'N' or 'N-M'"),
    ("1|", "", "'N' or 'N-M'"),
    ("1-", "1-", "'N' or 'N-M'"),
    ("-1", "-1", "'N' or 'N-M'"),
    ("1|2-x", "2-x", "'N' or 'N-M'"),
    ("|".join(str(i) for i in range(101)), "|".join(str(i) for i in range(101)), "at most 100"),
])
def test_parse_dump_step_errors(text, fragment, match):
    _raises(parse_dump_step, text, option="dump_step", fragment=fragment, match=match)


def test_parse_local_device_list():
    assert parse_local_device_list("1,2,3") == [1, 2, 3]
    assert parse_local_device_list("0") == [0]
    for text, fragment in (("a,b", "a"), ("", ""), ("1,,2", ""), ("1, 2", " 2"), ("1,", "")):
        _raises(parse_local_device_list, text, option="local_device_list", fragment=fragment)


@pytest.mark.parametrize("text, expected", [
    ("fast|step|0.9", AccelerateTrainMode("fast", "step", 0.9)),
    ("fast|step|0.2", AccelerateTrainMode("fast", "step", 0.2)),
    ("fast1|loss", AccelerateTrainMode("fast1", "loss", 1.05)),
    ("fast|step", AccelerateTrainMode("fast", "step", 0.9)),
    ("fast|loss|1.5", AccelerateTrainMode("fast", "loss", 1.5)),
])
def test_parse_accelerate_train_mode_valid(text, expected):
    assert parse_accelerate_train_mode(text) == expected


@pytest.mark.parametrize("text, fragment, match", [
    ("fast", "fast", "'type|mode'"),
    ("fast|step|0.9|x", "fast|step|0.9|x", "'type|mode'"),
    ("slow|step", "slow", "'fast' or 'fast1'"),
    ("fast|time", "time", "'step' or 'loss'"),
    ("fast|step|0.95", "0.95", "[0.2, 0.9]"),
    ("fast|loss|1.0", "1.0", "[1.01, 1.5]"),
    ("fast|loss|abc", "abc", "a ratio"),
])
def test_parse_accelerate_train_mode_errors(text, fragment, match):
    _raises(parse_accelerate_train_mode, text, option="experimental_accelerate_train_mode",
            fragment=fragment, match=match)


def test_parse_gear_pad_values():
    assert parse_gear_pad_values("") == {}
    assert parse_gear_pad_values("ids:0;mask:-1;x:0:1.5") == {"ids": 0, "mask": -1, "x:0": 1.5}
    option = "npu_adapter_gear_pad_values"
    _raises(parse_gear_pad_values, "ids:a", option=option, fragment="a", match="a number")
    _raises(parse_gear_pad_values, "ids:inf", option=option, fragment="inf", match="finite")
    _raises(parse_gear_pad_values, "ids", option=option, fragment="ids", match="'name:value'")
    _raises(parse_gear_pad_values, ":1", option=option, fragment=":1")
    _raises(parse_gear_pad_values, "a:1;a:2", option=option, fragment="a", match="once")
    _raises(parse_gear_pad_values, "a b:1", option=option, fragment="a b")


def test_parse_gear_unpad():
    assert parse_gear_unpad("") == {}
    assert parse_gear_unpad("logits:0:0,1;other:1") == {"logits:0": (0, 1), "other": (1,)}
    option = "npu_adapter_gear_unpad"
    _raises(parse_gear_unpad, "logits:0:0,0", option=option, fragment="0", match="distinct")
    _raises(parse_gear_unpad, "logits:0:", option=option, fragment="logits:0:")
    _raises(parse_gear_unpad, "logits:0:-1", option=option, fragment="-1", match="axis")
    _raises(parse_gear_unpad, "a:1;a:2", option=option, fragment="a", match="once")
    _raises(parse_gear_unpad, "a", option=option, fragment="a")


def test_non_utf8_bytes_are_rejected():
    _raises(parse_input_shape, b"\xff:1", option="input_shape", match="UTF-8")


def test_parsers_declare_public_names():
    for name in parsers.__all__:
        assert getattr(parsers, name).__doc__, name
