"""The rank environment of this process: who am I, how many are we, where are the others.

Read from the variables Ascend scripts are started with (``RANK_SIZE`` or ``CM_WORKER_SIZE``,
``RANK_ID``, ``DEVICE_ID``, ``RANK_TABLE_FILE``) plus three of ours:

``NPU_ADAPTER_WORKERS``
    ``host:port`` of every rank, comma-separated, in rank order: the gRPC address of each
    rank's TensorFlow server. ``npu-adapter launch`` sets it (free ports on 127.0.0.1).
``NPU_ADAPTER_BASE_PORT``
    Without ``NPU_ADAPTER_WORKERS``, rank ``r`` listens on ``server_id:BASE+device_id`` of the
    rank table, or on ``127.0.0.1:BASE+r`` without a table (default base :data:`DEFAULT_BASE_PORT`).
``NPU_ADAPTER_COLLECTIVE_TIMEOUT``
    Seconds a collective may wait for the other ranks before it fails
    (default :data:`DEFAULT_TIMEOUT_SECONDS`).

``RANK_SIZE`` (or ``CM_WORKER_SIZE``) is the switch, as in the original: unset or 1 makes the
process a single rank and ``RANK_TABLE_FILE`` is then not read; above 1 the table, when given,
must list that many ranks.

:func:`current` validates them together and returns a :class:`RankEnvironment`; every problem
raises :class:`~npu_adapter.distributed.errors.RankEnvironmentError` naming the variable (or
:class:`~npu_adapter.distributed.errors.RankTableError` naming the table field).
"""

import dataclasses
import ipaddress
import os
import re
import threading

from npu_adapter.distributed.errors import RankEnvironmentError
from npu_adapter.distributed.rank_table import load_rank_table

__all__ = [
    "DEFAULT_BASE_PORT",
    "DEFAULT_TIMEOUT_SECONDS",
    "ENV_VARS",
    "RankEnvironment",
    "current",
    "from_environ",
    "parse_workers",
    "rank_size",
]

DEFAULT_BASE_PORT = 61000
"""First port of the ranks' servers when the addresses are derived (see the module doc)."""
DEFAULT_TIMEOUT_SECONDS = 600.0
"""How long a collective waits for the other ranks by default."""

ENV_VARS = ("RANK_SIZE", "CM_WORKER_SIZE", "RANK_ID", "DEVICE_ID", "RANK_TABLE_FILE",
            "CM_CHIEF_IP", "NPU_ADAPTER_WORKERS", "NPU_ADAPTER_BASE_PORT",
            "NPU_ADAPTER_COLLECTIVE_TIMEOUT")
"""Every variable :func:`from_environ` reads."""

_INT_RE = re.compile(r"[+-]?\d+\Z")
_LOCK = threading.Lock()
_CACHE = {}


@dataclasses.dataclass(frozen=True)
class RankEnvironment:
    """The validated rank environment of this process."""

    rank_size: int
    rank_id: int
    device_id: int
    addresses: tuple = ()
    """``host:port`` of every rank's TensorFlow server (empty for a single rank)."""
    local_rank_id: int = 0
    """This rank's position among the ranks on its server."""
    local_rank_size: int = 1
    """How many ranks run on this rank's server."""
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    rank_table: object = None
    """The :class:`~npu_adapter.distributed.rank_table.RankTable`, if ``RANK_TABLE_FILE`` is
    set."""
    hosts: tuple = ()
    """The server (host) of every rank: the table's ``server_id``, else the address's host."""

    @property
    def distributed(self):
        """True when the job has more than one rank."""
        return self.rank_size > 1

    @property
    def address(self):
        """This rank's ``host:port`` ('' for a single rank)."""
        return self.addresses[self.rank_id] if self.addresses else ""

    def local_ranks(self, members=None):
        """The ranks among ``members`` (default: all) that run on this rank's server."""
        members = range(self.rank_size) if members is None else members
        if not self.hosts:
            return tuple(members)
        host = self.hosts[self.rank_id]
        return tuple(rank for rank in members if self.hosts[rank] == host)


def _int(environ, name, minimum, maximum=None):
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    allowed = f"an integer >= {minimum}" if maximum is None else \
        f"an integer from {minimum} to {maximum}"
    if not _INT_RE.match(text):
        raise RankEnvironmentError(name, raw, f"not an integer; expected {allowed}")
    value = int(text)
    if value < minimum or (maximum is not None and value > maximum):
        raise RankEnvironmentError(name, raw, f"out of range; expected {allowed}")
    return value


def _timeout(environ):
    name = "NPU_ADAPTER_COLLECTIVE_TIMEOUT"
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return DEFAULT_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        raise RankEnvironmentError(name, raw, "expected a positive number of seconds")
    return value


def parse_workers(text, variable="NPU_ADAPTER_WORKERS"):
    """``"host:port,host:port,..."`` -> tuple of ``host:port`` (IPv6 hosts in brackets)."""
    addresses = []
    for index, item in enumerate(text.split(",")):
        item = item.strip()
        match = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+):(\d+)", item)
        if not match:
            raise RankEnvironmentError(variable, text, f"entry {index} ({item!r}) is not "
                                       "host:port")
        port = int(match.group(2))
        if not 1 <= port <= 65535:
            raise RankEnvironmentError(variable, text, f"entry {index} ({item!r}) has port "
                                       f"{port}; expected 1 to 65535")
        if item in addresses:
            raise RankEnvironmentError(variable, text, f"entry {index} ({item!r}) repeats the "
                                       f"address of rank {addresses.index(item)}")
        addresses.append(item)
    return tuple(addresses)


def _host_of(address):
    host = address.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") else host


def _format_address(host, port):
    try:
        is_v6 = ipaddress.ip_address(host).version == 6
    except ValueError:
        is_v6 = False
    return f"[{host}]:{port}" if is_v6 else f"{host}:{port}"


def _rank_size(environ):
    if environ.get("RANK_SIZE") is not None and environ.get("CM_WORKER_SIZE") is not None:
        raise RankEnvironmentError("RANK_SIZE", environ["RANK_SIZE"],
                                   "RANK_SIZE and CM_WORKER_SIZE cannot be configured at the "
                                   "same time; set only one of them")
    name = "RANK_SIZE" if environ.get("RANK_SIZE") is not None else "CM_WORKER_SIZE"
    size = _int(environ, name, 1)
    return name, 1 if size is None else size


def _rank_id(environ, size, table, device_id):
    rank_id = _int(environ, "RANK_ID", 0)
    if rank_id is None:
        if size == 1:
            return 0
        if table is not None and device_id is not None:
            matches = [entry.rank_id for entry in table.ranks if entry.device_id == device_id]
            if len(matches) == 1:
                return matches[0]
        raise RankEnvironmentError("RANK_ID", None, f"required with {size} ranks: set it to "
                                   f"this process's rank, 0 to {size - 1}")
    if rank_id >= size:
        raise RankEnvironmentError("RANK_ID", environ["RANK_ID"], f"must be smaller than the "
                                   f"rank size {size}")
    return rank_id


def _addresses(environ, size, table):
    workers = environ.get("NPU_ADAPTER_WORKERS")
    if workers is not None and workers.strip():
        addresses = parse_workers(workers)
        if len(addresses) != size:
            raise RankEnvironmentError("NPU_ADAPTER_WORKERS", workers, f"lists "
                                       f"{len(addresses)} addresses for {size} ranks")
        return addresses
    base = _int(environ, "NPU_ADAPTER_BASE_PORT", 1, 65535)
    base = DEFAULT_BASE_PORT if base is None else base
    if table is not None:
        offsets = [(entry.server_id, entry.device_id) for entry in table.ranks]
    else:
        offsets = [("127.0.0.1", rank) for rank in range(size)]
    top = base + max(offset for _, offset in offsets)
    if top > 65535:
        raise RankEnvironmentError("NPU_ADAPTER_BASE_PORT", str(base), f"the ports reach {top} "
                                   "(base + device id or rank), above 65535")
    return tuple(_format_address(host, base + offset) for host, offset in offsets)


def rank_size(environ=None):
    """Only the rank size (``RANK_SIZE`` or ``CM_WORKER_SIZE``, 1 when unset), validated alone:
    for callers that need no more than the size (the original's ``util.get_ranksize``)."""
    return _rank_size(os.environ if environ is None else environ)[1]


def from_environ(environ):
    """Validate the rank variables of ``environ`` (a mapping) and return a
    :class:`RankEnvironment`."""
    size_name, size = _rank_size(environ)
    if size > 1 and environ.get("CM_CHIEF_IP") and environ.get("RANK_TABLE_FILE"):
        raise RankEnvironmentError("CM_CHIEF_IP", environ["CM_CHIEF_IP"], "cannot be used "
                                   "together with RANK_TABLE_FILE; describe the cluster with one "
                                   "of them")
    table_path = environ.get("RANK_TABLE_FILE")
    table = None
    if size > 1 and table_path and table_path.strip():
        # As the original, the table matters only for a multi-rank job: RANK_SIZE is the switch.
        table = load_rank_table(table_path)
        if table.size != size:
            raise RankEnvironmentError(size_name, environ[size_name], f"the rank table "
                                       f"{table.path} lists {table.size} ranks")
    device_id = _int(environ, "DEVICE_ID", 0)
    rank_id = _rank_id(environ, size, table, device_id)
    if table is not None:
        table_device = table.entry(rank_id).device_id
        if device_id is not None and device_id != table_device:
            raise RankEnvironmentError("DEVICE_ID", environ["DEVICE_ID"], f"rank {rank_id} "
                                       f"uses device {table_device} in the rank table "
                                       f"{table.path}")
        device_id = table_device
    device_id = 0 if device_id is None else device_id
    timeout = _timeout(environ)
    if size == 1:
        return RankEnvironment(1, 0, device_id, timeout_seconds=timeout, rank_table=table)
    addresses = _addresses(environ, size, table)
    if table is not None:
        hosts = tuple(entry.server_id for entry in table.ranks)
    else:
        hosts = tuple(_host_of(address) for address in addresses)
    local = [rank for rank in range(size) if hosts[rank] == hosts[rank_id]]
    return RankEnvironment(size, rank_id, device_id, addresses, local.index(rank_id), len(local),
                           timeout, table, hosts)


def _cache_key(environ):
    values = tuple(environ.get(name) for name in ENV_VARS)
    path = environ.get("RANK_TABLE_FILE")
    stamp = None
    if path and path.strip():
        try:
            info = os.stat(path)
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        except OSError:
            stamp = "unreadable"
    return values, stamp


def current():
    """The :class:`RankEnvironment` of ``os.environ`` (cached until a variable or the rank table
    file changes)."""
    key = _cache_key(os.environ)
    with _LOCK:
        cached = _CACHE.get("value")
        if cached is not None and cached[0] == key:
            return cached[1]
    value = from_environ(os.environ)
    with _LOCK:
        _CACHE["value"] = (key, value)
    return value
