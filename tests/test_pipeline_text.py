"""Text pipelines (``parse_pipeline`` / ``format_pipeline``) and the pass registry.

Test passes are registered into a copy of the registry that is put back afterwards, so no test
pass leaks into other tests (``list_passes()`` stays the built-in list).
"""

import contextlib
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# Imported first so the built-in passes are registered before any test patches the registry.
import npu_adapter.passes
from npu_adapter.errors import PipelineParseError
from npu_adapter.pipeline import registry
from npu_adapter.pipeline.base import PassBase, PassOption, PassResult
from npu_adapter.pipeline.text import format_pipeline, parse_pipeline
from npu_adapter.testing import GraphBuilder

BUILTIN = ["cluster", "encapsulate", "finalize", "in_out_pair", "insert_gears", "lower",
           "mark_candidates", "precision", "read_graph_config"]


class _TypedPass(PassBase):
    """One option of each pipeline type, plus a choice-restricted one."""

    name = "typed_opts"
    options = {
        "count": PassOption(int, 0, "an int"),
        "ratio": PassOption(float, 0.5, "a float"),
        "flag": PassOption(bool, False, "a bool"),
        "label": PassOption(str, "", "a string"),
        "mode": PassOption(str, "fast", "a choice", choices=("fast", "slow")),
    }

    def run(self, graph_def, ctx, view):
        return PassResult(graph_def, False)


class _PlainPass(PassBase):
    name = "plain"

    def run(self, graph_def, ctx, view):
        return PassResult(graph_def, False)


@contextlib.contextmanager
def _scratch_registry(*classes):
    """Register ``classes`` in a copy of the registry; restore the original afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
        for cls in classes:
            registry.register_pass(cls)
        yield


@pytest.fixture
def test_passes():
    with _scratch_registry(_TypedPass, _PlainPass):
        yield


@pytest.fixture
def scratch():
    with _scratch_registry():
        yield


def _parse_error(text):
    with pytest.raises(PipelineParseError) as info:
        parse_pipeline(text)
    return info.value


def _caret_column(err):
    """The 0-based column the caret line points at (the message's last line)."""
    text_line, caret_line = str(err).splitlines()[-2:]
    assert text_line == "  " + err.text
    assert caret_line.strip() == "^"
    return len(caret_line) - 3


# --------------------------------------------------------------------------- parsing
def test_builtin_default_pipeline_parses_and_formats_back():
    text = npu_adapter.passes.DEFAULT_PIPELINE
    passes = parse_pipeline(text)
    assert [p.name for p in passes] == text.split(",")
    assert format_pipeline(passes) == text
    assert registry.list_passes() == BUILTIN


def test_options_are_converted_to_their_declared_types(test_passes):
    (p,) = parse_pipeline('typed_opts(count=-3,ratio=1e-3,flag=true,label="a, b",mode=slow)')
    assert p.option_values == {"count": -3, "ratio": 0.001, "flag": True, "label": "a, b",
                               "mode": "slow"}
    (p,) = parse_pipeline("typed_opts(ratio=2,label=dir/sub-name.v2)")
    assert p.option("ratio") == 2.0 and isinstance(p.option("ratio"), float)
    assert p.option("label") == "dir/sub-name.v2"  # a bare word is a string
    assert p.option("count") == 0  # default


def test_whitespace_between_tokens_is_tolerated(test_passes):
    text = (' \t cluster ( min_size = 2 ,\n max_clusters=3 )  ,  typed_opts( label = "x y" ) '
            ', lower ')
    passes = parse_pipeline(text)
    assert format_pipeline(passes) == \
        'cluster(max_clusters=3,min_size=2),typed_opts(label="x y"),lower'


def test_empty_parentheses_mean_no_options():
    assert format_pipeline(parse_pipeline("cluster()")) == "cluster"


def test_format_is_canonical_sorted_and_without_spaces(test_passes):
    passes = parse_pipeline("typed_opts( mode=slow , count=2 ),cluster(min_size=1,max_clusters=0)")
    assert format_pipeline(passes) == \
        "typed_opts(count=2,mode=slow),cluster(max_clusters=0,min_size=1)"
    # An option given explicitly stays in the text even when it equals the default.
    assert format_pipeline(parse_pipeline("cluster(min_size=0)")) == "cluster(min_size=0)"


def test_string_values_needing_quotes_are_quoted_and_escaped(test_passes):
    p = registry.get_pass("typed_opts", label='say "hi", \\ (x)')
    text = format_pipeline([p])
    assert text == 'typed_opts(label="say \\"hi\\", \\\\ (x)")'
    assert parse_pipeline(text)[0].option("label") == 'say "hi", \\ (x)'
    assert format_pipeline([registry.get_pass("typed_opts", label="")]) == 'typed_opts(label="")'


_WS = st.sampled_from(["", " ", "  ", "\t", "\n", " \n\t "])


def _finite_float_without_plus_exponent():
    # Large floats (repr "1e+16") and infinities round-trip too (dedicated tests below).
    return st.floats(allow_nan=False)


def _label_text():
    # Any text, non-ASCII letters included (dedicated test below).
    return st.text(max_size=12)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    count=st.one_of(st.none(), st.integers(-10**15, 10**15)),
    ratio=st.one_of(st.none(), _finite_float_without_plus_exponent()),
    flag=st.one_of(st.none(), st.booleans()),
    label=st.one_of(st.none(), _label_text()),
    mode=st.one_of(st.none(), st.sampled_from(["fast", "slow"])),
    ws=st.lists(_WS, min_size=12, max_size=12),
)
def test_parse_format_round_trip_is_canonical(count, ratio, flag, label, mode, ws):
    with _scratch_registry(_TypedPass, _PlainPass):
        _check_round_trip(count, ratio, flag, label, mode, ws)


def _check_round_trip(count, ratio, flag, label, mode, ws):
    values = {"count": count, "ratio": ratio, "flag": flag, "label": label, "mode": mode}
    given_options = {k: v for k, v in values.items() if v is not None}
    passes = [registry.get_pass("typed_opts", **given_options), registry.get_pass("plain")]
    text = format_pipeline(passes)
    assert not re.search(r"\s", re.sub(r'"(\\.|[^"\\])*"', "", text))  # no padding
    parsed = parse_pipeline(text)
    assert [p.name for p in parsed] == ["typed_opts", "plain"]
    assert parsed[0].explicit_options == given_options
    for key, value in given_options.items():
        got = parsed[0].option(key)
        assert type(got) is type(value)
        if isinstance(value, float):
            assert math.copysign(1, got) == math.copysign(1, value)
    assert format_pipeline(parsed) == text
    # The same pipeline with whitespace between tokens parses to the same passes.
    head = f"{ws[0]}typed_opts{ws[1]}"
    if given_options:
        parts = [f"{ws[2]}{k}{ws[3]}={ws[4]}{text_value}{ws[5]}"
                 for k, text_value in _option_texts(text)]
        head += "(" + ",".join(parts) + ")"
    spaced = head + f"{ws[6]},{ws[7]}plain{ws[8]}({ws[9]}){ws[10]}"
    assert format_pipeline(parse_pipeline(spaced)) == text


def _option_texts(text):
    """``[(key, value text)]`` of the first pass of canonical ``text``."""
    inner = text[text.index("(") + 1:text.index("),plain")]
    found = []
    pos = 0
    key_re = re.compile(r"([a-z_]+)=")
    while pos < len(inner):
        m = key_re.match(inner, pos)
        pos = m.end()
        if inner[pos] == '"':
            end = pos + 1
            while inner[end] != '"':
                end += 2 if inner[end] == "\\" else 1
            end += 1
        else:
            end = inner.find(",", pos)
            end = len(inner) if end < 0 else end
        found.append((m.group(1), inner[pos:end]))
        pos = end + 1
    return found


def test_large_float_round_trips(test_passes):
    text = format_pipeline([registry.get_pass("typed_opts", ratio=1e16)])
    assert parse_pipeline(text)[0].option("ratio") == 1e16


def test_infinite_float_round_trips(test_passes):
    text = format_pipeline([registry.get_pass("typed_opts", ratio=float("-inf"))])
    assert parse_pipeline(text)[0].option("ratio") == float("-inf")


def test_non_ascii_label_round_trips(test_passes):
    text = format_pipeline([registry.get_pass("typed_opts", label="café")])
    assert parse_pipeline(text)[0].option("label") == "café"


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("text, column, message", [
    ("", 0, "empty pipeline; expected a pass name"),
    ("   \t", 4, "empty pipeline; expected a pass name"),
    ("mark_candidates,nope", 16, "unknown pass 'nope'; registered passes: ["),
    ("cluster(foo=1)", 8, "pass 'cluster' has no option 'foo'; valid options: "
                          "['max_clusters', 'min_size']"),
    ("cluster(min_size=x)", 17, "option 'min_size' of pass 'cluster' expects an integer, got 'x'"),
    ("cluster(min_size=1.5)", 17, "expects an integer, got '1.5'"),
    ('cluster(min_size="2")', 17, "option 'min_size' of pass 'cluster' expects int, got a string"),
    ("cluster(min_size=2, min_size=3)", 20, "option 'min_size' given twice"),
    ("cluster lower", 8, "expected ',' or end of pipeline, found 'l'"),
    ("cluster)", 7, "expected ',' or end of pipeline, found ')'"),
    ("cluster,", 8, "expected a pass name, found 'end of text'"),
    ("cluster(min_size=2", 18, "expected ')', found 'end of text'"),
    ("cluster(min_size 2)", 17, "expected '=', found '2'"),
    ("cluster(min_size=)", 17, "expected an option value, found ')'"),
    ("cluster(min_size=2,)", 19, "option name, found ')'"),
    ("cluster,,lower", 8, "expected a pass name, found ','"),
])
def test_errors_point_at_the_bad_token(text, column, message):
    err = _parse_error(text)
    assert err.position == column
    assert message in str(err)
    assert f"at column {column + 1}:" in str(err)
    assert _caret_column(err) == column
    assert isinstance(err, ValueError)


@pytest.mark.parametrize("text, column, message", [
    ('typed_opts(label="abc', 17, "unterminated string"),
    ('typed_opts(label="abc\\', 17, "unterminated string"),
    ('typed_opts(count=1, label="a\\"b', 26, "unterminated string"),
    ("typed_opts(flag=1)", 16, "option 'flag' of pass 'typed_opts' expects true or false, got '1'"),
    ('typed_opts(flag="true")', 16, "expects bool, got a string"),
    ("typed_opts(ratio=abc)", 17, "option 'ratio' of pass 'typed_opts' expects a number"),
    ("typed_opts(label=a b)", 19, "expected ')', found 'b'"),
    ("plain(x=1)", 6, "pass 'plain' has no option 'x'; valid options: none"),
    # A value the option's choices refuse is reported at the pass name.
    ("lower,typed_opts(mode=medium)", 6, "must be one of ['fast', 'slow'], got 'medium'"),
])
def test_errors_for_typed_options(test_passes, text, column, message):
    err = _parse_error(text)
    assert message in str(err)
    assert err.position == column
    assert _caret_column(err) == column


def test_unknown_pass_error_lists_the_registered_passes():
    err = _parse_error("cluster,  frobnicate(x=1)")
    assert err.position == 10
    for name in BUILTIN:
        assert repr(name) in str(err)


# --------------------------------------------------------------------------- pass options
def test_pass_constructor_validates_options_with_an_example_call():
    with pytest.raises(ValueError, match=r"no option\(s\) \['size'\].*e\.g\. cluster\("
                                         r"max_clusters=-1, min_size=0\)"):
        registry.get_pass("cluster", size=2)
    with pytest.raises(ValueError, match="option 'min_size' expects int, got bool True"):
        registry.get_pass("cluster", min_size=True)
    with pytest.raises(ValueError, match="expects int, got str '2'"):
        registry.get_pass("cluster", min_size="2")


def test_describe_shows_only_explicit_options():
    assert registry.get_pass("cluster").describe() == "cluster"
    assert repr(registry.get_pass("cluster", max_clusters=2)) == "<pass cluster(max_clusters=2)>"


# --------------------------------------------------------------------------- registry
def test_registry_rejects_a_second_class_with_the_same_name(scratch):
    class Again(PassBase):
        name = "cluster"

    with pytest.raises(ValueError, match="pass name 'cluster' is already registered by "
                                         r"\S*passes\.cluster\.ClusterPass"):
        registry.register_pass(Again)
    assert registry.get_pass_class("cluster").__name__ == "ClusterPass"


def test_registering_the_same_class_twice_is_harmless(scratch):
    assert registry.register_pass(_PlainPass) is _PlainPass
    assert registry.register_pass(_PlainPass) is _PlainPass


@pytest.mark.parametrize("bad", ["", "CamelCase", "with-dash", "has space", "dot.name"])
def test_registry_requires_snake_case_names(scratch, bad):
    cls = type("Bad", (PassBase,), {"name": bad})
    with pytest.raises(ValueError, match="needs a snake_case `name`"):
        registry.register_pass(cls)


def test_unknown_pass_lookup_names_the_known_ones():
    with pytest.raises(KeyError, match="no pass named 'nope'; registered passes: .*'cluster'"):
        registry.get_pass_class("nope")


def test_scratch_registry_leaves_no_trace():
    assert registry.list_passes() == BUILTIN


# --------------------------------------------------------------------------- graph_pass
def _graph():
    b = GraphBuilder()
    b.placeholder("x")
    return b.graph_def()


def test_graph_pass_turns_a_function_into_a_registered_pass(scratch):
    calls = []

    @registry.graph_pass("rename_first", options={"to": PassOption(str, "renamed", "new name")})
    def rename_first(graph_def, ctx, to):
        """Rename the first node (test pass)."""
        calls.append(to)
        out = type(graph_def)()
        out.CopyFrom(graph_def)
        out.node[0].name = to
        return out

    assert rename_first.name == "rename_first"
    assert rename_first.__name__ == "RenameFirstPass"
    assert rename_first.__doc__ == "Rename the first node (test pass)."
    assert registry.get_pass_class("rename_first") is rename_first
    (p,) = parse_pipeline("rename_first(to=y)")
    gd = _graph()
    result = p(gd)
    assert isinstance(result, PassResult) and result.modified
    assert result.graph_def.node[0].name == "y" and gd.node[0].name == "x"
    assert calls == ["y"]


def test_graph_pass_returning_its_input_is_not_modified(scratch):
    @registry.graph_pass("identity_fn")
    def identity_fn(graph_def, ctx):
        return graph_def

    gd = _graph()
    result = registry.get_pass("identity_fn")(gd)
    assert result.graph_def is gd and not result.modified and result.info == {}


def test_graph_pass_may_return_a_pass_result(scratch):
    @registry.graph_pass("with_info")
    def with_info(graph_def, ctx):
        return PassResult(graph_def, False, {"seen": len(graph_def.node)})

    assert registry.get_pass("with_info")(_graph()).info == {"seen": 1}


def test_graph_pass_duplicate_name_is_rejected(scratch):
    @registry.graph_pass("twice")
    def first(graph_def, ctx):
        return graph_def

    with pytest.raises(ValueError, match="'twice' is already registered"):
        @registry.graph_pass("twice")
        def second(graph_def, ctx):
            return graph_def
