"""Options accepted for compatibility only (effect class ``compat``): validated, then ignored.

For every such option a valid value other than the default must be accepted, and the rewrite
must be the same as with no options at all — the same clusters, placement and graph — except
for the option's own value among the attributes stamped on the cluster nodes (the original
stamps every option there). A value of the wrong kind must still be rejected: "accepted" means
validated as the original validates it.
"""

import re
from pathlib import Path

import pytest
from graph_cases import mix_cnn_graph

import npu_adapter
from npu_adapter.config import OPTIONS_BY_NAME, NpuConfig, reset_warn_once
from npu_adapter.config.effects import EFFECTS, effect_of
from npu_adapter.errors import NpuConfigError
from npu_adapter.testing import assert_graph_equal

COMPAT = sorted(name for name in EFFECTS if effect_of(name)[0] == "compat")
FETCHES = ["probs:0"]
_CANDIDATES = {"b": (True, False), "i": (1, 0, 2, 7), "s": ("1", "x", "0,1", "on"), "f": (0.5,)}


def _other_value(spec, tmp_path):
    """A value of ``spec`` other than its default that a config accepts on its own."""
    if spec.name in ("work_path", "dump_path", "debug_dir", "op_compiler_cache_dir"):
        return str(tmp_path)
    candidates = spec.choices or _CANDIDATES[spec.kind]
    for value in candidates:
        if value == spec.default or (spec.kind != "b" and value in ("", None)):
            continue
        try:
            NpuConfig.from_dict({spec.name: value})
        except NpuConfigError:
            continue
        return value
    raise AssertionError(f"no valid non-default value found for {spec.name}")


@pytest.fixture(scope="module")
def graph_def():
    return mix_cnn_graph().as_graph_def()


@pytest.fixture(scope="module")
def baseline(graph_def):
    return npu_adapter.rewrite(graph_def, {"mix_compile_mode": True}, fetches=FETCHES)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch, tmp_path):
    monkeypatch.delenv("AOE_MODE", raising=False)
    monkeypatch.chdir(tmp_path)  # aoe_mode checks the default work_path "./"
    reset_warn_once()


def test_readme_lists_exactly_the_compat_options():
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    start = readme.index("Accepted for compatibility only")
    listed = set(re.findall(r"`([A-Za-z0-9_]+)`", readme[start:readme.index("\n\n", start)]))
    assert listed == set(COMPAT)


def test_there_are_compat_options():
    assert len(COMPAT) >= 40
    assert {"hcom_parallel", "min_group_size", "graph_run_mode", "task_index"} <= set(COMPAT)


@pytest.mark.filterwarnings("ignore::npu_adapter.config.NpuAdapterWarning")
@pytest.mark.parametrize("name", COMPAT)
def test_compat_option_is_accepted_and_ignored(name, graph_def, baseline, tmp_path):
    spec = OPTIONS_BY_NAME[name]
    value = _other_value(spec, tmp_path)
    result = npu_adapter.rewrite(graph_def, {"mix_compile_mode": True, name: value},
                                 fetches=FETCHES)
    assert [(c.name, c.nodes, c.inputs, c.outputs) for c in result.clusters] == \
        [(c.name, c.nodes, c.inputs, c.outputs) for c in baseline.clusters]
    assert result.placement == baseline.placement
    assert result.tensor_map == baseline.tensor_map
    # aoe_mode also stores work_path as its real path (a compat option too).
    stamped = [spec.node_attr_name] + (["_work_path"] if name == "aoe_mode" else [])
    assert_graph_equal(result.graph_def, baseline.graph_def, ignore_attrs=stamped)


@pytest.mark.parametrize("name", COMPAT)
def test_compat_option_of_the_wrong_kind_is_rejected(name):
    spec = OPTIONS_BY_NAME[name]
    if not spec.strict_kind:
        pytest.skip("read only when its field is set, as in the original (ignored otherwise)")
    wrong = {"b": "yes", "i": "1", "s": 1, "f": "0.5"}[spec.kind]
    with pytest.raises(NpuConfigError, match=name):
        NpuConfig.from_dict({name: wrong})
