"""The Ascend rank table (``RANK_TABLE_FILE``): which rank runs on which server and device.

Two documented layouts exist and both are read (see ``docs/distributed.md``):

* the **server list** form (``"version": "1.0"``): ``server_count`` and ``server_list``, each
  server with its ``server_id`` (the host's IP address) and a ``device`` list whose entries carry
  ``device_id``, ``device_ip`` and an explicit ``rank_id``;
* the **group list** form (the older layout): ``group_count`` and ``group_list``; the world group
  (``hccl_world_group``, or the only group) has ``instance_count`` instances (one per process or
  pod, each with ``server_id``, ``pod_name`` and ``devices``) and ``device_count`` devices in all.
  Ranks are numbered in file order: instance by instance, device by device.

Both need ``"status": "completed"``. Numbers may be written as JSON strings (as the generated
tables do) or as integers. Every problem raises
:class:`~npu_adapter.distributed.errors.RankTableError` naming the file, the JSON path of the
field and what is allowed; nothing is read half-way.
"""

import dataclasses
import ipaddress
import json
import os
import re

from npu_adapter.distributed.errors import MISSING, RankTableError

__all__ = ["RankEntry", "RankTable", "load_rank_table", "parse_rank_table"]

WORLD_GROUP = "hccl_world_group"
SERVER_LIST = "server_list"
GROUP_LIST = "group_list"
_INT_RE = re.compile(r"\d+\Z")


@dataclasses.dataclass(frozen=True)
class RankEntry:
    """One rank of the table."""

    rank_id: int
    server_id: str
    """The address of the host running the rank (the table's ``server_id``)."""
    device_id: int
    """The device on that host (``device_id``)."""
    device_ip: str = ""
    """The device NIC address (``device_ip``; HCCL's, recorded for reference)."""
    pod_name: str = ""
    """``pod_name`` of the group list form (empty for the server list form)."""


@dataclasses.dataclass(frozen=True)
class RankTable:
    """A parsed rank table: its ranks ordered by ``rank_id`` (0 .. size-1)."""

    path: str
    form: str
    """``"server_list"`` or ``"group_list"``."""
    ranks: tuple
    """:class:`RankEntry` per rank, ordered by rank id."""
    servers: tuple
    """The ``server_id`` of each server, in file order (without repeats)."""

    @property
    def size(self):
        """Number of ranks."""
        return len(self.ranks)

    def entry(self, rank_id):
        """The :class:`RankEntry` of ``rank_id``."""
        return self.ranks[rank_id]

    def ranks_on(self, server_id):
        """The rank ids of ``server_id``, ascending."""
        return tuple(entry.rank_id for entry in self.ranks if entry.server_id == server_id)


class _Reader:
    """Typed access to a JSON document with errors that name the field's path."""

    def __init__(self, path):
        self.path = path

    def fail(self, field, value, problem):
        raise RankTableError(self.path, field, value, problem)

    def get(self, obj, key, where, required=True):
        if key not in obj:
            if required:
                self.fail(_join(where, key), MISSING, "this field is required")
            return MISSING
        return obj[key]

    def object(self, value, field):
        if not isinstance(value, dict):
            self.fail(field, value, "expected a JSON object")
        return value

    def array(self, value, field, allow_empty=False):
        if not isinstance(value, list):
            self.fail(field, value, "expected a JSON array")
        if not value and not allow_empty:
            self.fail(field, value, "expected a non-empty array")
        return value

    def integer(self, value, field, minimum=0, maximum=None):
        """An integer written as a JSON number or a decimal string."""
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif isinstance(value, str) and _INT_RE.match(value.strip()):
            number = int(value.strip())
        else:
            number = None
        allowed = f"an integer >= {minimum}" if maximum is None \
            else f"an integer from {minimum} to {maximum}"
        if number is None:
            self.fail(field, value, f"expected {allowed} (a number or a decimal string)")
        if number < minimum or (maximum is not None and number > maximum):
            self.fail(field, value, f"out of range; expected {allowed}")
        return number

    def string(self, value, field):
        if not isinstance(value, str) or not value.strip():
            self.fail(field, value, "expected a non-empty string")
        return value.strip()

    def address(self, value, field, what):
        text = self.string(value, field)
        try:
            ipaddress.ip_address(text)
        except ValueError:
            self.fail(field, value, f"expected the {what} as an IPv4 or IPv6 address")
        return text


def _join(where, key):
    return f"{where}.{key}" if where else key


def _check_status(reader, doc):
    status = reader.get(doc, "status", "")
    if status != "completed":
        reader.fail("status", status, "the table must be complete: expected \"completed\"")


def _check_count(reader, doc, key, actual, what):
    value = reader.get(doc[0], key, doc[1])
    field = _join(doc[1], key)
    count = reader.integer(value, field, minimum=1)
    if count != actual:
        reader.fail(field, value, f"the table lists {actual} {what}")


def _device(reader, device, field, server_devices, with_rank):
    reader.object(device, field)
    device_id = reader.integer(reader.get(device, "device_id", field),
                               _join(field, "device_id"), maximum=1023)
    if device_id in server_devices:
        reader.fail(_join(field, "device_id"), device["device_id"],
                    f"device {device_id} appears twice on this server (also "
                    f"{server_devices[device_id]})")
    server_devices[device_id] = field
    device_ip = ""
    if "device_ip" in device:
        device_ip = reader.address(device["device_ip"], _join(field, "device_ip"),
                                   "device NIC address")
    rank_id = None
    if with_rank:
        rank_id = reader.integer(reader.get(device, "rank_id", field), _join(field, "rank_id"))
    return device_id, device_ip, rank_id


def _server_list_form(reader, doc):
    servers = reader.array(doc[SERVER_LIST], SERVER_LIST)
    _check_count(reader, (doc, ""), "server_count", len(servers), "servers")
    entries = []
    seen_ranks = {}
    server_ids = []
    for index, server in enumerate(servers):
        where = f"{SERVER_LIST}[{index}]"
        reader.object(server, where)
        server_id = reader.address(reader.get(server, "server_id", where),
                                   _join(where, "server_id"), "host address")
        if server_id in server_ids:
            reader.fail(_join(where, "server_id"), server["server_id"],
                        f"server {server_id} is listed twice (also "
                        f"{SERVER_LIST}[{server_ids.index(server_id)}])")
        server_ids.append(server_id)
        devices = reader.array(reader.get(server, "device", where), _join(where, "device"))
        server_devices = {}
        for d_index, device in enumerate(devices):
            field = f"{where}.device[{d_index}]"
            device_id, device_ip, rank_id = _device(reader, device, field, server_devices, True)
            if rank_id in seen_ranks:
                reader.fail(_join(field, "rank_id"), device["rank_id"],
                            f"rank {rank_id} is already given to {seen_ranks[rank_id]}")
            seen_ranks[rank_id] = field
            entries.append(RankEntry(rank_id, server_id, device_id, device_ip))
    size = len(entries)
    for entry in entries:
        if entry.rank_id >= size:
            field = _join(seen_ranks[entry.rank_id], "rank_id")
            reader.fail(field, entry.rank_id,
                        f"rank ids must be 0 .. {size - 1} (the table has {size} devices)")
    return sorted(entries, key=lambda entry: entry.rank_id), server_ids


def _world_group(reader, groups):
    named = [index for index, group in enumerate(groups)
             if isinstance(group, dict) and group.get("group_name") == WORLD_GROUP]
    if len(groups) == 1:
        return 0
    if len(named) == 1:
        return named[0]
    reader.fail(GROUP_LIST, f"{len(groups)} groups",
                f"with several groups exactly one must be named {WORLD_GROUP!r}")
    return None  # unreachable


def _group_list_form(reader, doc):
    groups = reader.array(doc[GROUP_LIST], GROUP_LIST)
    _check_count(reader, (doc, ""), "group_count", len(groups), "groups")
    index = _world_group(reader, groups)
    where = f"{GROUP_LIST}[{index}]"
    group = reader.object(groups[index], where)
    instances = reader.array(reader.get(group, "instance_list", where),
                             _join(where, "instance_list"))
    _check_count(reader, (group, where), "instance_count", len(instances), "instances")
    entries = []
    server_ids = []
    devices_by_server = {}
    for i_index, instance in enumerate(instances):
        i_where = f"{where}.instance_list[{i_index}]"
        reader.object(instance, i_where)
        server_id = reader.address(reader.get(instance, "server_id", i_where),
                                   _join(i_where, "server_id"), "host address")
        pod_name = ""
        if "pod_name" in instance:
            pod_name = reader.string(instance["pod_name"], _join(i_where, "pod_name"))
        if server_id not in server_ids:
            server_ids.append(server_id)
        server_devices = devices_by_server.setdefault(server_id, {})
        devices = reader.array(reader.get(instance, "devices", i_where),
                               _join(i_where, "devices"))
        for d_index, device in enumerate(devices):
            field = f"{i_where}.devices[{d_index}]"
            device_id, device_ip, _ = _device(reader, device, field, server_devices, False)
            entries.append(RankEntry(len(entries), server_id, device_id, device_ip, pod_name))
    _check_count(reader, (group, where), "device_count", len(entries), "devices")
    return entries, server_ids


def parse_rank_table(doc, path="<rank table>"):
    """Parse a rank table already loaded from JSON; ``path`` is used in messages."""
    reader = _Reader(path)
    reader.object(doc, "(top level)")
    has_servers = SERVER_LIST in doc
    has_groups = GROUP_LIST in doc
    if has_servers and has_groups:
        reader.fail("(top level)", f"keys {SERVER_LIST!r} and {GROUP_LIST!r}",
                    "a table has either a server_list or a group_list, not both")
    if not has_servers and not has_groups:
        reader.fail(SERVER_LIST, MISSING, "expected a server_list (\"version\": \"1.0\") or a "
                    "group_list (the older layout)")
    _check_status(reader, doc)
    if has_servers:
        entries, servers = _server_list_form(reader, doc)
        form = SERVER_LIST
    else:
        entries, servers = _group_list_form(reader, doc)
        form = GROUP_LIST
    return RankTable(path=path, form=form, ranks=tuple(entries), servers=tuple(servers))


def load_rank_table(path):
    """Read and parse the rank table file ``path``
    (:class:`~npu_adapter.distributed.errors.RankTableError` when it is unreadable or
    invalid)."""
    shown = os.fspath(path)
    try:
        with open(shown, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise RankTableError(shown, "RANK_TABLE_FILE", shown,
                             f"cannot read the file: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise RankTableError(shown, "(file)", text[:40], f"not valid JSON: {exc}") from None
    return parse_rank_table(doc, shown)
