"""Op-support lists: loading (docs/original-adapter.md, 4), the bundled default list, the per-op
predicate."""

import json
import os
import warnings

import pytest

from npu_adapter import op_support
from npu_adapter.op_support import (
    ORIGINAL_TEST_FIXTURE_OPS,
    OpInfo,
    OpSupportList,
    OpSupportWarning,
    default_op_support,
    is_op_supported,
    load_op_support_list,
)
from npu_adapter.third_party import generate_default_op_list as gen

REFERENCE_TXT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "third_party",
    "npu_supported_ops.txt",
)
PLAIN = {"isGray": False, "isHeavy": False}
GRAY = {"isGray": True, "isHeavy": False}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    monkeypatch.delenv("ASCEND_OPP_PATH", raising=False)
    monkeypatch.delenv("ASCEND_CUSTOM_OPP_PATH", raising=False)
    op_support.clear_cache()
    yield
    op_support.clear_cache()


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data)
    path.write_text(text, encoding="utf-8")
    return path


def new_layout(root, builtin=None):
    """An opp dir in the new layout; returns (opp dir, built-in json path)."""
    opp = root / "opp"
    (opp / "built-in").mkdir(parents=True)
    path = opp / "built-in" / "framework" / "tensorflow" / "npu_supported_ops.json"
    if builtin is not None:
        write_json(path, builtin)
    return opp, path


def custom_dir(root, name, data):
    d = root / name
    write_json(d / "framework" / "tensorflow" / "npu_supported_ops.json", data)
    return d


def vendor_json(opp, vendor, data):
    path = opp / "vendors" / vendor / "framework" / "tensorflow" / "npu_supported_ops.json"
    return write_json(path, data)


def fallback_custom_json(opp, data):
    return write_json(opp / "framework" / "custom" / "tensorflow" / "npu_supported_ops.json", data)


def op_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, OpSupportWarning)]


def load_recording(*args, **kwargs):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = load_op_support_list(*args, **kwargs)
    return result, op_warnings(record)


# ---------------------------------------------------------------------------------------------
# Bundled default list


def test_unset_ascend_opp_path_gives_bundled_list_with_gray_flags():
    ops = load_op_support_list()
    assert ops.origin == "bundled"
    assert len(ops) == 732
    assert len(ops.gray_names()) == 162
    assert not any(ops.is_heavy(op) for op in ops)
    assert len(ops.sources) == 1 and ops.sources[0].endswith("npu_supported_ops.json")
    # Section 1, section 2 and section 3 ([B] only) of the txt.
    assert ops["Abs"] == OpInfo(False, False)
    assert ops.is_gray("Where") and ops.is_gray("TensorArrayV3") and ops.is_gray("Unique")
    assert "FastGeluV2" in ops and not ops.is_gray("FastGeluV2")
    assert "IteratorGetNext" not in ops and "IteratorV2" not in ops
    assert set(ORIGINAL_TEST_FIXTURE_OPS) <= set(ops)


def test_environ_argument_is_used_instead_of_os_environ(tmp_path, monkeypatch):
    opp, _ = new_layout(tmp_path, {"Abs": PLAIN})
    monkeypatch.setenv("ASCEND_OPP_PATH", str(opp))
    assert load_op_support_list(environ={}).origin == "bundled"
    assert load_op_support_list().origin == "ascend_opp"


@pytest.mark.parametrize("value", ["", "does/not/exist"])
def test_empty_or_missing_ascend_opp_path_falls_back_to_bundled(tmp_path, monkeypatch, value):
    monkeypatch.setenv("ASCEND_OPP_PATH", str(tmp_path / value) if value else "")
    ops, warned = load_recording()
    assert ops.origin == "bundled" and len(ops) == 732
    assert warned == []


def test_default_op_support_follows_ascend_opp_path(tmp_path, monkeypatch):
    assert default_op_support(None).origin == "bundled"
    opp, _ = new_layout(tmp_path, {"MyOp": PLAIN})
    monkeypatch.setenv("ASCEND_OPP_PATH", str(opp))
    ops = default_op_support(object())
    assert ops.origin == "ascend_opp" and ops.names() == ("MyOp",)


def test_bundled_json_is_in_generator_canonical_form():
    ops = op_support.bundled_op_support_list()
    with open(ops.sources[0], encoding="utf-8") as f:
        text = f.read()
    assert gen.render_json(json.loads(text)) == text
    assert json.loads(text) == ops.to_json_dict()


@pytest.mark.skipif(not os.path.exists(REFERENCE_TXT), reason="reference txt not available")
def test_bundled_json_is_up_to_date_with_reference_txt():
    ops = op_support.bundled_op_support_list()
    assert gen.main([REFERENCE_TXT, "--output", ops.sources[0], "--check"]) == 0


# ---------------------------------------------------------------------------------------------
# Loading from an operator package


def test_new_layout_built_in_only(tmp_path, monkeypatch):
    opp, builtin = new_layout(tmp_path, {"Abs": PLAIN, "Where": GRAY, "Foo": {}})
    monkeypatch.setenv("ASCEND_OPP_PATH", str(opp))
    ops, warned = load_recording()
    assert warned == []
    assert ops.origin == "ascend_opp"
    assert ops.sources == (str(builtin),)
    assert ops.names() == ("Abs", "Foo", "Where")
    assert ops.is_gray("Where") and not ops.is_gray("Abs")
    # Missing flags mean false, as in the original.
    assert ops["Foo"] == OpInfo(False, False)


def test_custom_opp_path_entries_valid_empty_and_invalid(tmp_path, monkeypatch):
    opp, builtin = new_layout(tmp_path, {"Abs": PLAIN, "Add": PLAIN, "Mul": PLAIN})
    c1 = custom_dir(tmp_path, "c1", {"Add": GRAY, "C1Op": PLAIN})
    c2 = custom_dir(tmp_path, "c2", {"Add": PLAIN, "Mul": GRAY, "C2Op": PLAIN})
    a_file = write_json(tmp_path / "not_a_dir", "{}")
    missing = tmp_path / "missing"
    value = ":".join([str(c1), "", str(missing), str(c2), str(a_file), ""])
    monkeypatch.setenv("ASCEND_OPP_PATH", str(opp))
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", value)
    ops, warned = load_recording()
    c1_json = str(c1 / "framework" / "tensorflow" / "npu_supported_ops.json")
    c2_json = str(c2 / "framework" / "tensorflow" / "npu_supported_ops.json")
    assert ops.sources == (str(builtin), c1_json, c2_json)
    assert ops.names() == ("Abs", "Add", "C1Op", "C2Op", "Mul")
    # c2 comes after c1, so its "Add" (not gray) wins; custom "Mul" overrides built-in.
    assert not ops.is_gray("Add")
    assert ops.is_gray("Mul")
    # Invalid entries warn (naming the entry); empty ones are skipped silently.
    assert len(warned) == 2
    assert str(missing) in warned[0] and "not a directory" in warned[0]
    assert str(a_file) in warned[1]


def test_custom_opp_paths_argument_overrides_environment(tmp_path, monkeypatch):
    opp, _ = new_layout(tmp_path, {"Abs": PLAIN})
    c1 = custom_dir(tmp_path, "c1", {"C1Op": PLAIN})
    c2 = custom_dir(tmp_path, "c2", {"C2Op": PLAIN})
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(c1))
    as_list = load_op_support_list(str(opp), [str(c2)])
    assert as_list.names() == ("Abs", "C2Op")
    as_string = load_op_support_list(opp, f"{c2}:{c1}")
    assert as_string.names() == ("Abs", "C1Op", "C2Op")
    from_env = load_op_support_list(opp)
    assert from_env.names() == ("Abs", "C1Op")


def test_vendors_load_priority_last_vendor_wins(tmp_path):
    opp, builtin = new_layout(tmp_path, {"Abs": PLAIN, "Shared": PLAIN})
    (opp / "vendors").mkdir()
    (opp / "vendors" / "config.ini").write_text("load_priority = vA , ,vB,\n", encoding="utf-8")
    va = vendor_json(opp, "vA", {"Shared": GRAY, "OnlyA": PLAIN})
    vb = vendor_json(opp, "vB", {"Shared": PLAIN, "OnlyB": GRAY})
    unlisted = vendor_json(opp, "vC", {"OnlyC": PLAIN})
    fallback = fallback_custom_json(opp, {"FromFallback": PLAIN})
    custom = custom_dir(tmp_path, "c1", {"Shared": GRAY, "Custom": PLAIN})
    ops, warned = load_recording(opp, str(custom))
    assert warned == []
    custom_json = str(custom / "framework" / "tensorflow" / "npu_supported_ops.json")
    assert ops.sources == (str(builtin), custom_json, str(va), str(vb))
    assert "OnlyC" not in ops and str(unlisted) not in ops.sources
    assert "FromFallback" not in ops and str(fallback) not in ops.sources
    assert ops.names() == ("Abs", "Custom", "OnlyA", "OnlyB", "Shared")
    # Quirk of the original: vB is listed last, so its entry (not gray) wins over vA and custom.
    assert not ops.is_gray("Shared")


def test_vendors_missing_config_ini_falls_back_to_framework_custom(tmp_path):
    opp, builtin = new_layout(tmp_path, {"Abs": PLAIN})
    vendor_json(opp, "vA", {"OnlyA": PLAIN})
    fallback = fallback_custom_json(opp, {"Abs": GRAY, "FromFallback": PLAIN})
    ops, warned = load_recording(opp)
    assert warned == []
    assert ops.sources == (str(builtin), str(fallback))
    assert ops.names() == ("Abs", "FromFallback")
    assert ops.is_gray("Abs")


@pytest.mark.parametrize(
    "content",
    [
        "",
        "\nload_priority=vA\n",
        "load_priority\n",
        "priority=vA\n",
        "load_priority=\n",
        "load_priority= , ,\n",
        "load_priority=vA=vB\n",
    ],
)
def test_vendors_malformed_config_ini_warns_and_falls_back(tmp_path, content):
    opp, builtin = new_layout(tmp_path, {"Abs": PLAIN})
    (opp / "vendors").mkdir()
    ini = opp / "vendors" / "config.ini"
    ini.write_text(content, encoding="utf-8")
    vendor_json(opp, "vA", {"OnlyA": PLAIN})
    fallback = fallback_custom_json(opp, {"FromFallback": PLAIN})
    ops, warned = load_recording(opp)
    assert ops.sources == (str(builtin), str(fallback))
    assert "OnlyA" not in ops
    assert len(warned) == 1
    assert str(ini) in warned[0] and "malformed" in warned[0]


def test_old_layout_reads_framework_built_in_and_custom(tmp_path, monkeypatch):
    opp = tmp_path / "opp"
    builtin = write_json(
        opp / "framework" / "built-in" / "tensorflow" / "npu_supported_ops.json",
        {"Abs": PLAIN, "Add": PLAIN},
    )
    custom = fallback_custom_json(opp, {"Add": GRAY, "Custom": PLAIN})
    # Neither ASCEND_CUSTOM_OPP_PATH nor vendors/ are consulted in the old layout.
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(custom_dir(tmp_path, "c1", {"C1": PLAIN})))
    (opp / "vendors").mkdir()
    (opp / "vendors" / "config.ini").write_text("load_priority=vA\n", encoding="utf-8")
    vendor_json(opp, "vA", {"OnlyA": PLAIN})
    ops = load_op_support_list(opp)
    assert ops.sources == (str(builtin), str(custom))
    assert ops.names() == ("Abs", "Add", "Custom")
    assert ops.is_gray("Add")


def test_later_files_override_whole_entries(tmp_path):
    opp, _ = new_layout(tmp_path, {"Op": {"isGray": True, "isHeavy": True}})
    custom = custom_dir(tmp_path, "c1", {"Op": {"isGray": False}})
    ops = load_op_support_list(opp, [str(custom)])
    # The entry is replaced, not merged key by key: isHeavy falls back to false.
    assert ops["Op"] == OpInfo(False, False)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{not json", "is not valid JSON"),
        ("[]", "top level is a list"),
        ('{"Abs": true}', "entry 'Abs' is true (bool)"),
        ('{"Abs": {"isGray": "yes"}}', "'isGray' is \"yes\" (str)"),
        ('{"Abs": {"isGray": false, "isHeavy": 1}}', "'isHeavy' is 1 (int)"),
        ('{"": {}}', "empty string"),
        ('{"A": 1, "B": 2}', "and 1 more problem"),
    ],
)
def test_malformed_file_contributes_nothing_and_warns_once(tmp_path, text, fragment):
    opp, builtin = new_layout(tmp_path, {"Abs": PLAIN})
    custom = custom_dir(tmp_path, "bad", {})
    bad = write_json(custom / "framework" / "tensorflow" / "npu_supported_ops.json", text)
    good = custom_dir(tmp_path, "good", {"Good": PLAIN})
    paths = [str(custom), str(good)]
    ops, warned = load_recording(opp, paths)
    assert ops.names() == ("Abs", "Good")
    assert str(bad) not in ops.sources
    assert len(warned) == 1
    assert str(bad) in warned[0] and fragment in warned[0] and "contributes no ops" in warned[0]
    again, warned_again = load_recording(opp, paths)
    assert again is ops and warned_again == []


def test_broken_built_in_file_leaves_custom_entries(tmp_path):
    opp, builtin = new_layout(tmp_path, "{")
    fallback = fallback_custom_json(opp, {"Custom": PLAIN})
    ops, warned = load_recording(opp)
    assert ops.names() == ("Custom",) and ops.sources == (str(fallback),)
    assert len(warned) == 1 and str(builtin) in warned[0]


def test_missing_files_contribute_nothing_without_warning(tmp_path):
    opp, builtin = new_layout(tmp_path, {"Abs": PLAIN})
    # No custom dir, no vendors/, no framework/custom: only the built-in list is read.
    ops, warned = load_recording(opp)
    assert warned == [] and ops.names() == ("Abs",)


def test_no_file_at_all_gives_empty_list_and_one_warning(tmp_path):
    opp, _ = new_layout(tmp_path)
    ops, warned = load_recording(opp)
    assert ops.origin == "ascend_opp" and len(ops) == 0 and ops.sources == ()
    assert len(warned) == 1 and "no npu_supported_ops.json could be read" in warned[0]
    assert str(opp) in warned[0]


def test_unreadable_path_warns(tmp_path):
    opp, builtin = new_layout(tmp_path)
    builtin.mkdir(parents=True)  # a directory where the file should be
    fallback_custom_json(opp, {"Custom": PLAIN})
    ops, warned = load_recording(opp)
    assert ops.names() == ("Custom",)
    assert len(warned) == 1 and str(builtin) in warned[0] and "cannot be read" in warned[0]


def test_cache_reuses_result_until_a_file_changes(tmp_path):
    opp, builtin = new_layout(tmp_path, {"Abs": PLAIN})
    first = load_op_support_list(opp)
    assert load_op_support_list(str(opp)) is first
    write_json(builtin, {"Abs": PLAIN, "Add": GRAY})
    stat = os.stat(builtin)
    os.utime(builtin, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    second = load_op_support_list(opp)
    assert second is not first and second.names() == ("Abs", "Add")
    # A file appearing later in the load order also invalidates the cache.
    fallback_custom_json(opp, {"Late": PLAIN})
    third = load_op_support_list(opp)
    assert "Late" in third
    op_support.clear_cache()
    fourth = load_op_support_list(opp)
    assert fourth is not third and fourth == third


# ---------------------------------------------------------------------------------------------
# OpSupportList


def test_from_names_and_mapping_api():
    ops = OpSupportList.from_names(["Sub", "Add", "Where"], gray=["Where"], heavy=["Add"])
    assert ops.origin == "user" and ops.sources == ()
    assert ops.names() == ("Add", "Sub", "Where") and list(ops) == ["Add", "Sub", "Where"]
    assert len(ops) == 3 and "Add" in ops and "Mul" not in ops
    assert ops.get("Mul") is None and ops.get("Mul", 1) == 1
    assert ops.is_gray("Where") and not ops.is_gray("Add") and not ops.is_gray("Mul")
    assert ops.is_heavy("Add") and not ops.is_heavy("Mul")
    assert ops.gray_names() == ("Where",)
    assert ops.to_json_dict()["Add"] == {"isGray": False, "isHeavy": True}
    assert "3 ops, 1 gray" in repr(ops)
    with pytest.raises(ValueError, match=r"gray ops \['Mul'\] are not in the list"):
        OpSupportList.from_names(["Add"], gray=["Mul"])
    with pytest.raises(TypeError, match="not a string"):
        OpSupportList.from_names("Add")


def test_op_support_list_is_immutable_and_hashable():
    ops = OpSupportList.from_names(["Add"])
    with pytest.raises(AttributeError, match="immutable"):
        ops.origin = "bundled"
    with pytest.raises(TypeError):
        ops["Mul"] = OpInfo()
    with pytest.raises(AttributeError):
        OpInfo().is_gray = True
    same = OpSupportList({"Add": OpInfo()}, sources=["x.json"], origin="ascend_opp")
    assert ops == same and hash(ops) == hash(same)
    assert ops != OpSupportList.from_names(["Add"], gray=["Add"])
    assert ops == {"Add": OpInfo()}


def test_constructor_validates_its_input():
    with pytest.raises(ValueError, match="origin must be one of"):
        OpSupportList({}, origin="elsewhere")
    with pytest.raises(TypeError, match="must be an OpInfo"):
        OpSupportList({"Add": {"isGray": False}})
    with pytest.raises(TypeError, match="non-empty strings"):
        OpSupportList({"": OpInfo()})
    with pytest.raises(TypeError, match="must be a bool"):
        OpInfo(is_gray=1)


def test_merged_other_wins_and_sources_concatenate():
    base = OpSupportList(
        {"Add": OpInfo(False, True), "Mul": OpInfo()}, sources=["a.json"], origin="ascend_opp"
    )
    other = OpSupportList({"Add": OpInfo(True, False), "New": OpInfo()}, sources=["b.json"])
    merged = base.merged(other)
    assert merged["Add"] == OpInfo(True, False)
    assert merged.names() == ("Add", "Mul", "New")
    assert merged.sources == ("a.json", "b.json") and merged.origin == "ascend_opp"
    assert base.names() == ("Add", "Mul")  # unchanged
    assert base.merged({"X": OpInfo()}).names() == ("Add", "Mul", "X")


def test_original_test_fixture_list():
    assert len(ORIGINAL_TEST_FIXTURE_OPS) == 37
    assert len(set(ORIGINAL_TEST_FIXTURE_OPS)) == 37
    fixture = op_support.original_test_fixture_list()
    assert fixture.names() == tuple(sorted(ORIGINAL_TEST_FIXTURE_OPS))
    assert fixture.gray_names() == ()
    assert {"Unique", "Where", "_Retval", "Const", "VariableV2"} <= set(fixture)


# ---------------------------------------------------------------------------------------------
# The predicate


FIXTURE = OpSupportList.from_names(
    ["Add", "Where", "Const", "_Arg", "_Retval", "StringJoin", "TFRecordDataset", "MapDatasetV2"],
    gray=["Where"],
)


@pytest.mark.parametrize(
    "op, kwargs, expected",
    [
        ("Add", {}, (True, "supported")),
        ("Mul", {}, (False, "unsupported_op")),
        ("Where", {}, (True, "supported")),
        ("Where", {"mix_compile_mode": True}, (False, "gray_op_in_mix_mode")),
        ("Add", {"without_npu_compile": True}, (False, "without_npu_compile_scope")),
        ("Mul", {"without_npu_compile": True}, (False, "without_npu_compile_scope")),
        ("TFRecordDataset", {}, (False, "dataset_op")),
        ("MapDatasetV2", {}, (False, "dataset_op")),
        ("TensorSliceDataset", {}, (False, "dataset_op")),
        ("DatasetToGraph", {}, (False, "unsupported_op")),
        ("Const", {}, (False, "const_not_supported_here")),
        ("Const", {"support_const": True}, (True, "supported")),
        ("_Arg", {}, (False, "arg_retval")),
        ("_Retval", {"support_const": True}, (False, "arg_retval")),
        ("StringJoin", {}, (False, "string_join")),
    ],
)
def test_is_op_supported_reason_codes(op, kwargs, expected):
    kwargs = {"mix_compile_mode": False, **kwargs}
    result = is_op_supported(op, FIXTURE, **kwargs)
    assert result == expected
    assert result[1] in op_support.REASON_CODES


def test_const_with_support_const_must_still_be_listed():
    ops = OpSupportList.from_names(["Add"])
    assert is_op_supported("Const", ops, mix_compile_mode=False, support_const=True) == (
        False,
        "unsupported_op",
    )


# ---------------------------------------------------------------------------------------------
# The generator script


TXT = """# header comment
# ---- Section 1: plain (2) ----
Add
Abs

# ---- Section 2: gray (1) ----
Where
# ---- Section 3: newer (1) ----
FastGeluV2
"""


def test_generator_parses_sections_into_flags():
    ops = gen.parse_op_txt(TXT)
    assert ops == {"Add": PLAIN, "Abs": PLAIN, "Where": GRAY, "FastGeluV2": PLAIN}
    rendered = gen.render_json(ops)
    assert rendered.endswith("}\n")
    assert list(json.loads(rendered)) == ["Abs", "Add", "FastGeluV2", "Where"]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("Add\n", "before the first section"),
        ("# ---- Section 4: new ----\nAdd\n", "unknown section 4"),
        ("# ---- Section 1: x ----\nAdd\nAdd\n", "listed twice"),
        ("# ---- Section 1: x (3) ----\nAdd\n", "announces 3 ops but lists 1"),
        ("# ---- Section 1: x ----\nAdd Mul\n", "is not an op type"),
        ("# ---- Section 1: x ----\n# ---- Section 1: y ----\n", "appears twice"),
    ],
)
def test_generator_rejects_bad_input(text, fragment):
    with pytest.raises(gen.OpListFormatError, match=fragment) as info:
        gen.parse_op_txt(text, source="list.txt")
    assert "list.txt:" in str(info.value)


def test_generator_main_writes_and_checks(tmp_path, capsys):
    txt = tmp_path / "ops.txt"
    txt.write_text(TXT, encoding="utf-8")
    out = tmp_path / "out.json"
    assert gen.main([str(txt), "-o", str(out), "--check"]) == 1
    assert gen.main([str(txt), "-o", str(out)]) == 0
    first = out.read_bytes()
    assert gen.main([str(txt), "-o", str(out)]) == 0
    assert out.read_bytes() == first
    assert gen.main([str(txt), "-o", str(out), "--check"]) == 0
    assert "4 ops, 1 gray" in capsys.readouterr().out
    txt.write_text("Add\n", encoding="utf-8")
    assert gen.main([str(txt), "-o", str(out)]) == 2
    assert "before the first section" in capsys.readouterr().err
