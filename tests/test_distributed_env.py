"""The rank table (both forms), the rank environment and the cluster it maps to: every error
names the field or variable."""

import json

import pytest

from npu_adapter.distributed import environment, server
from npu_adapter.distributed.errors import RankEnvironmentError, RankTableError
from npu_adapter.distributed.rank_table import load_rank_table, parse_rank_table

SERVER_LIST = {
    "server_count": "2",
    "server_list": [
        {"server_id": "10.0.0.10", "device": [
            {"device_id": "0", "device_ip": "192.168.100.101", "rank_id": "0"},
            {"device_id": "1", "device_ip": "192.168.100.102", "rank_id": "1"}]},
        {"server_id": "10.0.0.11", "device": [
            {"device_id": "0", "device_ip": "192.168.100.103", "rank_id": "3"},
            {"device_id": "4", "device_ip": "192.168.100.104", "rank_id": "2"}]},
    ],
    "status": "completed",
    "version": "1.0",
}

GROUP_LIST = {
    "status": "completed",
    "group_count": "1",
    "group_list": [{
        "group_name": "hccl_world_group",
        "device_count": "3",
        "instance_count": "2",
        "instance_list": [
            {"pod_name": "tf-bae41", "server_id": "127.0.0.1",
             "devices": [{"device_id": "0", "device_ip": "192.168.0.2"},
                         {"device_id": "1", "device_ip": "192.168.1.2"}]},
            {"pod_name": "tf-tbdf1", "server_id": "127.0.0.2",
             "devices": [{"device_id": "0", "device_ip": "192.168.0.3"}]},
        ],
    }],
}


def _copy(doc):
    return json.loads(json.dumps(doc))


@pytest.fixture(autouse=True)
def _no_rank_env(monkeypatch):
    for name in environment.ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def test_server_list_form():
    table = parse_rank_table(SERVER_LIST, "rt.json")
    assert table.form == "server_list" and table.size == 4
    assert [(e.rank_id, e.server_id, e.device_id) for e in table.ranks] == [
        (0, "10.0.0.10", 0), (1, "10.0.0.10", 1), (2, "10.0.0.11", 4), (3, "10.0.0.11", 0)]
    assert table.servers == ("10.0.0.10", "10.0.0.11")
    assert table.ranks_on("10.0.0.11") == (2, 3)
    assert table.entry(1).device_ip == "192.168.100.102"


def test_group_list_form_numbers_ranks_in_file_order():
    table = parse_rank_table(GROUP_LIST, "rt.json")
    assert table.form == "group_list" and table.size == 3
    assert [(e.rank_id, e.server_id, e.device_id, e.pod_name) for e in table.ranks] == [
        (0, "127.0.0.1", 0, "tf-bae41"), (1, "127.0.0.1", 1, "tf-bae41"),
        (2, "127.0.0.2", 0, "tf-tbdf1")]


def test_integers_may_be_json_numbers():
    doc = _copy(SERVER_LIST)
    doc["server_count"] = 2
    doc["server_list"][0]["device"][0]["rank_id"] = 0
    assert parse_rank_table(doc).size == 4


def _edit(doc, path, value):
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize("base,path,value,field,problem", [
    (SERVER_LIST, ("status",), "initializing", "status", "must be complete"),
    (SERVER_LIST, ("status",), KeyError, "status", "required"),
    (SERVER_LIST, ("server_count",), "3", "server_count", "lists 2 servers"),
    (SERVER_LIST, ("server_count",), "two", "server_count", "integer"),
    (SERVER_LIST, ("server_list", 1, "server_id"), "10.0.0.999", "server_list[1].server_id",
     "IPv4 or IPv6"),
    (SERVER_LIST, ("server_list", 1, "server_id"), "10.0.0.10", "server_list[1].server_id",
     "listed twice"),
    (SERVER_LIST, ("server_list", 0, "device", 1, "rank_id"), "0",
     "server_list[0].device[1].rank_id", "already given to server_list[0].device[0]"),
    (SERVER_LIST, ("server_list", 0, "device", 1, "rank_id"), "7",
     "server_list[0].device[1].rank_id", "rank ids must be 0 .. 3"),
    (SERVER_LIST, ("server_list", 0, "device", 1, "rank_id"), "-1",
     "server_list[0].device[1].rank_id", "integer"),
    (SERVER_LIST, ("server_list", 0, "device", 1, "device_id"), "0",
     "server_list[0].device[1].device_id", "appears twice on this server"),
    (SERVER_LIST, ("server_list", 0, "device", 1, "device_ip"), "fe80::zz",
     "server_list[0].device[1].device_ip", "device NIC address"),
    (SERVER_LIST, ("server_list", 0, "device"), [], "server_list[0].device", "non-empty"),
    (SERVER_LIST, ("server_list", 0, "device", 0), "x", "server_list[0].device[0]",
     "JSON object"),
    (SERVER_LIST, ("server_list", 1, "device", 0, "rank_id"), KeyError,
     "server_list[1].device[0].rank_id", "required"),
    (GROUP_LIST, ("group_list", 0, "device_count"), "4", "group_list[0].device_count",
     "lists 3 devices"),
    (GROUP_LIST, ("group_list", 0, "instance_count"), "1", "group_list[0].instance_count",
     "lists 2 instances"),
    (GROUP_LIST, ("group_count",), "2", "group_count", "lists 1 groups"),
    (GROUP_LIST, ("group_list", 0, "instance_list", 1, "server_id"), "",
     "group_list[0].instance_list[1].server_id", "non-empty"),
    (GROUP_LIST, ("group_list", 0, "instance_list", 0, "devices", 1, "device_id"), "0",
     "group_list[0].instance_list[0].devices[1].device_id", "appears twice"),
    (GROUP_LIST, ("group_list", 0, "instance_list"), KeyError, "group_list[0].instance_list",
     "required"),
])
def test_every_table_error_names_the_field(base, path, value, field, problem):
    doc = _edit(_copy(base), path, value)
    with pytest.raises(RankTableError) as info:
        parse_rank_table(doc, "rt.json")
    assert info.value.field == field
    assert problem in str(info.value) and str(info.value).startswith(f"rank table rt.json: {field}")


def test_table_shape_errors():
    with pytest.raises(RankTableError, match="server_list .* or a group_list"):
        parse_rank_table({"status": "completed"})
    with pytest.raises(RankTableError, match="either a server_list or a group_list, not both"):
        parse_rank_table({**SERVER_LIST, "group_list": []})
    doc = _copy(GROUP_LIST)
    doc["group_list"].append({"group_name": "other"})
    doc["group_list"][0]["group_name"] = "mine"
    doc["group_count"] = "2"
    with pytest.raises(RankTableError, match="exactly one must be named 'hccl_world_group'"):
        parse_rank_table(doc)


def test_table_files(tmp_path):
    good = tmp_path / "rt.json"
    good.write_text(json.dumps(GROUP_LIST))
    assert load_rank_table(good).size == 3
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(RankTableError, match="not valid JSON"):
        load_rank_table(bad)
    with pytest.raises(RankTableError, match="cannot read the file"):
        load_rank_table(tmp_path / "missing.json")


def _env(**values):
    return {key: str(value) for key, value in values.items()}


def test_single_rank_environment():
    env = environment.from_environ({})
    assert (env.rank_size, env.rank_id, env.device_id, env.distributed) == (1, 0, 0, False)
    # RANK_SIZE is the switch: a table is not even read for one rank, as in the original.
    env = environment.from_environ(_env(RANK_SIZE=1, RANK_TABLE_FILE="/missing.json",
                                        DEVICE_ID=3))
    assert (env.rank_size, env.device_id, env.rank_table) == (1, 3, None)


def test_loopback_environment_without_a_table():
    env = environment.from_environ(_env(RANK_SIZE=3, RANK_ID=2))
    base = environment.DEFAULT_BASE_PORT
    assert env.addresses == tuple(f"127.0.0.1:{base + rank}" for rank in range(3))
    assert (env.rank_id, env.local_rank_id, env.local_rank_size) == (2, 2, 3)
    env = environment.from_environ(_env(RANK_SIZE=2, RANK_ID=1, NPU_ADAPTER_BASE_PORT=5000,
                                        NPU_ADAPTER_COLLECTIVE_TIMEOUT=7.5))
    assert env.address == "127.0.0.1:5001" and env.timeout_seconds == 7.5
    workers = "127.0.0.1:7001,[::1]:7002"
    env = environment.from_environ(_env(RANK_SIZE=2, RANK_ID=1, NPU_ADAPTER_WORKERS=workers))
    assert env.addresses == ("127.0.0.1:7001", "[::1]:7002")
    assert env.hosts == ("127.0.0.1", "::1") and env.local_rank_size == 1


def test_environment_from_a_multi_server_table(tmp_path):
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(SERVER_LIST))
    env = environment.from_environ(_env(RANK_SIZE=4, RANK_ID=2, RANK_TABLE_FILE=path))
    assert env.device_id == 4 and env.rank_table.size == 4
    base = environment.DEFAULT_BASE_PORT
    assert env.addresses == (f"10.0.0.10:{base}", f"10.0.0.10:{base + 1}",
                             f"10.0.0.11:{base + 4}", f"10.0.0.11:{base}")
    assert (env.local_rank_id, env.local_rank_size) == (0, 2)
    assert env.local_ranks() == (2, 3)
    # Without RANK_ID the rank is found by DEVICE_ID when that device is unique in the table.
    env = environment.from_environ(_env(RANK_SIZE=4, DEVICE_ID=4, RANK_TABLE_FILE=path))
    assert env.rank_id == 2
    spec = server.cluster_spec(env).as_dict()
    assert spec == {"worker": list(env.addresses)}


@pytest.mark.parametrize("values,variable,problem", [
    ({"RANK_SIZE": "two"}, "RANK_SIZE", "not an integer"),
    ({"RANK_SIZE": "0"}, "RANK_SIZE", "out of range"),
    ({"RANK_SIZE": "2", "CM_WORKER_SIZE": "2"}, "RANK_SIZE", "at the same time"),
    ({"RANK_SIZE": "2"}, "RANK_ID", "required with 2 ranks"),
    ({"RANK_SIZE": "2", "RANK_ID": "2"}, "RANK_ID", "smaller than the rank size 2"),
    ({"RANK_SIZE": "2", "RANK_ID": "x"}, "RANK_ID", "not an integer"),
    ({"RANK_SIZE": "2", "RANK_ID": "0", "DEVICE_ID": "-1"}, "DEVICE_ID", "out of range"),
    ({"RANK_SIZE": "2", "RANK_ID": "0", "NPU_ADAPTER_WORKERS": "127.0.0.1:1"},
     "NPU_ADAPTER_WORKERS", "lists 1 addresses for 2 ranks"),
    ({"RANK_SIZE": "2", "RANK_ID": "0", "NPU_ADAPTER_WORKERS": "a:1,a:1"},
     "NPU_ADAPTER_WORKERS", "repeats the address of rank 0"),
    ({"RANK_SIZE": "2", "RANK_ID": "0", "NPU_ADAPTER_WORKERS": "a:1,b"},
     "NPU_ADAPTER_WORKERS", "is not host:port"),
    ({"RANK_SIZE": "2", "RANK_ID": "0", "NPU_ADAPTER_WORKERS": "a:1,b:70000"},
     "NPU_ADAPTER_WORKERS", "expected 1 to 65535"),
    ({"RANK_SIZE": "2", "RANK_ID": "0", "NPU_ADAPTER_BASE_PORT": "65535"},
     "NPU_ADAPTER_BASE_PORT", "above 65535"),
    ({"RANK_SIZE": "2", "RANK_ID": "0", "NPU_ADAPTER_COLLECTIVE_TIMEOUT": "-3"},
     "NPU_ADAPTER_COLLECTIVE_TIMEOUT", "positive number of seconds"),
])
def test_every_environment_error_names_the_variable(values, variable, problem):
    with pytest.raises(RankEnvironmentError) as info:
        environment.from_environ(values)
    assert info.value.variable == variable and problem in str(info.value)
    assert str(info.value).startswith(f"environment variable {variable}")


def test_environment_errors_with_a_table(tmp_path):
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(SERVER_LIST))
    with pytest.raises(RankEnvironmentError, match="RANK_SIZE .* lists 4 ranks"):
        environment.from_environ(_env(RANK_SIZE=8, RANK_ID=0, RANK_TABLE_FILE=path))
    with pytest.raises(RankEnvironmentError, match="DEVICE_ID .* rank 1 uses device 1"):
        environment.from_environ(_env(RANK_SIZE=4, RANK_ID=1, DEVICE_ID=3,
                                      RANK_TABLE_FILE=path))
    with pytest.raises(RankEnvironmentError, match="CM_CHIEF_IP .* RANK_TABLE_FILE"):
        environment.from_environ(_env(RANK_SIZE=4, RANK_ID=1, CM_CHIEF_IP="10.0.0.1",
                                      RANK_TABLE_FILE=path))
    # DEVICE_ID 0 is on both servers: the rank cannot be derived from it.
    with pytest.raises(RankEnvironmentError, match="RANK_ID"):
        environment.from_environ(_env(RANK_SIZE=4, DEVICE_ID=0, RANK_TABLE_FILE=path))
    with pytest.raises(RankTableError, match="cannot read"):
        environment.from_environ(_env(RANK_SIZE=4, RANK_ID=0,
                                      RANK_TABLE_FILE=tmp_path / "none.json"))


def test_current_follows_the_process_environment(monkeypatch):
    assert environment.current().rank_size == 1
    monkeypatch.setenv("RANK_SIZE", "2")
    monkeypatch.setenv("RANK_ID", "1")
    assert (environment.current().rank_size, environment.current().rank_id) == (2, 1)


def test_session_settings_of_a_rank():
    env = environment.from_environ(_env(RANK_SIZE=2, RANK_ID=1))
    import tensorflow as tf

    user = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    user.device_filters.append("/job:worker/task:1")
    config = server.session_config(env, user)
    assert config.experimental.collective_group_leader == "/job:worker/replica:0/task:0"
    assert list(config.device_filters) == ["/job:worker/task:1"]
    assert config.isolate_session_state and config.allow_soft_placement
    assert not user.isolate_session_state  # the caller's proto is left alone
    leader = server.server_config(env).experimental.collective_group_leader
    assert leader == "/job:worker/replica:0/task:0"


def test_session_target_leaves_single_rank_and_explicit_targets_alone(monkeypatch):
    config = object()
    assert server.session_target("", config) == ("", config)
    monkeypatch.setenv("RANK_SIZE", "2")
    monkeypatch.setenv("RANK_ID", "0")
    assert server.session_target("grpc://elsewhere:1", config) == ("grpc://elsewhere:1", config)
