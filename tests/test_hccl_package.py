"""CANN's top-level ``hccl`` package: the modules, names and arguments scripts import, backed
by npu_bridge's group functions."""

import inspect

import pytest

import hccl
import hccl.manage.api as manage_api
import hccl.split.api as split_api
from npu_adapter.distributed import groups
from npu_bridge import _env
from npu_bridge.hccl.manage import api as bridge_api

# Names and arguments of CANN's hccl package (its documented interface).
MANAGE = {
    "create_group": ["group", "rank_num", "rank_ids"],
    "destroy_group": ["group"],
    "get_rank_size": ["group"],
    "get_local_rank_size": ["group"],
    "get_rank_id": ["group"],
    "get_local_rank_id": ["group"],
    "get_world_rank_from_group_rank": ["group", "group_rank_id"],
    "get_group_rank_from_world_rank": ["world_rank_id", "group"],
}
SPLIT = {
    "set_split_strategy_by_idx": ["idxList", "group"],
    "set_split_strategy_by_size": ["dataSizeList", "group"],
}


@pytest.fixture(autouse=True)
def _single_rank_env(monkeypatch):
    for name in _env.RANK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    groups.reset()
    yield
    groups.reset()


@pytest.mark.parametrize("module,names", [(manage_api, MANAGE), (split_api, SPLIT)])
def test_names_and_arguments(module, names):
    for name, arguments in names.items():
        function = getattr(module, name)
        assert list(inspect.signature(function).parameters) == arguments, name
        assert function is getattr(bridge_api, name)
        group = inspect.signature(function).parameters.get("group")
        if group is not None and group.default is not inspect.Parameter.empty:
            assert group.default == "hccl_world_group"
    assert sorted(hccl.__all__) == ["manage", "split"]


def test_the_package_works_at_one_rank():
    assert (manage_api.get_rank_size(), manage_api.get_rank_id()) == (1, 0)
    assert (manage_api.get_local_rank_size(), manage_api.get_local_rank_id()) == (1, 0)
    manage_api.create_group("solo", 1, [0])
    assert manage_api.get_world_rank_from_group_rank("solo", 0) == 0
    split_api.set_split_strategy_by_size([70, 30], "solo")
    assert split_api.get_split_strategy("solo") == ("size", (70, 30))
    manage_api.destroy_group("solo")
    with pytest.raises(ValueError, match="unknown group 'solo'"):
        manage_api.get_rank_size("solo")


def test_the_package_sees_the_rank_environment(monkeypatch):
    monkeypatch.setenv("RANK_SIZE", "8")
    monkeypatch.setenv("RANK_ID", "5")
    monkeypatch.setenv("NPU_ADAPTER_WORKERS", ",".join(
        f"10.0.0.{1 + rank // 4}:{7000 + rank}" for rank in range(8)))
    assert (manage_api.get_rank_size(), manage_api.get_rank_id()) == (8, 5)
    assert (manage_api.get_local_rank_size(), manage_api.get_local_rank_id()) == (4, 1)
    manage_api.create_group("odd", 4, [1, 3, 5, 7])
    assert (manage_api.get_rank_id("odd"), manage_api.get_local_rank_size("odd")) == (2, 2)
    assert manage_api.get_local_rank_id("odd") == 0


def test_another_hccl_first_on_the_path_is_reported(tmp_path, monkeypatch):
    from npu_bridge import hccl as bridge_hccl

    assert bridge_hccl.top_level_hccl_origin() == bridge_hccl._OURS
    fake = tmp_path / "hccl"
    (fake / "manage").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "hccl")
    warnings = []
    monkeypatch.setattr(bridge_hccl.logging, "warning",
                        lambda message, *args: warnings.append(message % args))
    bridge_hccl._warn_about_another_hccl()
    assert bridge_hccl.top_level_hccl_origin() == str(fake)
    assert len(warnings) == 1 and f"package is {fake}, not npu-adapter's" in warnings[0]
