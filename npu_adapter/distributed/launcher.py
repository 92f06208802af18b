"""Start the ranks of a job on this host: the logic behind ``npu-adapter launch``.

:func:`plan_ranks` decides which ranks this launcher starts and the environment of each (the
original's ``RANK_SIZE``, ``RANK_ID``, ``DEVICE_ID``, ``RANK_TABLE_FILE``, plus
``NPU_ADAPTER_WORKERS`` when it picks the ports itself); every problem with the arguments or the
rank table is raised before any process starts. :func:`launch` runs them, prefixes every line
of their output with ``[<rank>]``, forwards SIGINT/SIGTERM/SIGHUP to them, and when one rank
fails stops the others (SIGTERM, then SIGKILL after a grace period) and says which rank failed
and how.

Ports: when this launcher starts every rank of the job, it picks free ports on the ranks' host
(127.0.0.1 without a rank table). For a job spread over several servers each server runs its
own launcher (``--server-id``) and rank ``r`` listens on ``server_id:BASE+device_id`` of the
table (``--base-port`` / ``NPU_ADAPTER_BASE_PORT``), which every launcher derives alike.
"""

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from npu_adapter.distributed import environment
from npu_adapter.distributed.errors import LaunchError
from npu_adapter.distributed.rank_table import load_rank_table
from npu_adapter.errors import user_text

__all__ = ["RankSpec", "build_command", "cluster_addresses", "launch", "plan_ranks"]

PREFIX = "npu-adapter launch"
_CLEARED = ("RANK_SIZE", "CM_WORKER_SIZE", "RANK_ID", "DEVICE_ID", "RANK_TABLE_FILE",
            "NPU_ADAPTER_WORKERS")
_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP")
EXIT_TIMEOUT = 124


@dataclasses.dataclass(frozen=True)
class RankSpec:
    """One rank this launcher starts: its id, device and the variables set for it."""

    rank: int
    device_id: int
    env: dict


def _free_ports(host, count):
    """``count`` distinct free TCP ports on ``host`` (held together while choosing)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    except OSError as exc:
        raise LaunchError(f"cannot pick free ports on {host}: {exc.strerror or exc}; is it an "
                          "address of this host?") from None
    finally:
        for sock in sockets:
            sock.close()


def _address(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_positive(name, value, kind=int):
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int) \
            or value <= 0:
        raise LaunchError(f"{name} must be a positive {'number' if kind is float else 'integer'}"
                          f", got {user_text(value)}")


def plan_ranks(nprocs, rank_table=None, server_id=None, base_port=None,
               collective_timeout=None):
    """The :class:`RankSpec` of every rank to start here.

    ``nprocs`` is ``-n``; ``rank_table`` a rank table file (its ranks on ``server_id``, or on
    its only server, are started: ``nprocs`` must match); ``base_port`` derives the ports of a
    multi-server job; ``collective_timeout`` sets ``NPU_ADAPTER_COLLECTIVE_TIMEOUT``.
    """
    _check_positive("-n", nprocs)
    if base_port is not None and (isinstance(base_port, bool) or not isinstance(base_port, int)
                                  or not 1 <= base_port <= 65535):
        raise LaunchError(f"--base-port must be a port number from 1 to 65535, got "
                          f"{user_text(base_port)}")
    common = {}
    if collective_timeout is not None:
        _check_positive("--collective-timeout", collective_timeout, float)
        common["NPU_ADAPTER_COLLECTIVE_TIMEOUT"] = repr(float(collective_timeout))
    if rank_table is None:
        if server_id is not None:
            raise LaunchError("--server-id selects the ranks of a server in a rank table; give "
                              "--rank-table too")
        if base_port is None:
            ports = _free_ports("127.0.0.1", nprocs)
        else:
            ports = [base_port + rank for rank in range(nprocs)]
            if ports[-1] > 65535:
                raise LaunchError(f"--base-port {base_port} + {nprocs - 1} exceeds 65535")
        workers = ",".join(_address("127.0.0.1", port) for port in ports)
        return [RankSpec(rank, rank, {**common, "RANK_SIZE": str(nprocs), "RANK_ID": str(rank),
                                      "DEVICE_ID": str(rank), "NPU_ADAPTER_WORKERS": workers})
                for rank in range(nprocs)]
    table = load_rank_table(rank_table)  # RankTableError names the field, before any process
    if server_id is None:
        if len(table.servers) > 1:
            raise LaunchError(f"the rank table {table.path} lists {len(table.servers)} servers "
                              f"({', '.join(table.servers)}); pass --server-id to choose the "
                              "server whose ranks this launcher starts (one launcher per server)")
        server_id = table.servers[0]
    if server_id not in table.servers:
        raise LaunchError(f"--server-id {server_id!r} is not a server of the rank table "
                          f"{table.path}; its servers: {', '.join(table.servers)}")
    local = table.ranks_on(server_id)
    if nprocs != len(local):
        raise LaunchError(f"-n {nprocs} does not match the rank table {table.path}: server "
                          f"{server_id} runs {len(local)} ranks ({', '.join(map(str, local))})")
    common.update({"RANK_SIZE": str(table.size),
                   "RANK_TABLE_FILE": os.path.abspath(table.path)})
    if len(local) == table.size and base_port is None:
        ports = _free_ports(server_id, len(local))
        common["NPU_ADAPTER_WORKERS"] = ",".join(
            _address(table.entry(rank).server_id, port) for rank, port in zip(local, ports))
    elif base_port is not None:
        common["NPU_ADAPTER_BASE_PORT"] = str(base_port)
    specs = []
    for rank in local:
        device = table.entry(rank).device_id
        specs.append(RankSpec(rank, device, {**common, "RANK_ID": str(rank),
                                             "DEVICE_ID": str(device)}))
    _check_environment(specs)
    return specs


def _rank_environment(spec):
    environ = {key: value for key, value in os.environ.items() if key not in _CLEARED}
    environ.update(spec.env)
    return environment.from_environ(environ)


def _check_environment(specs):
    """Validate each rank's environment as the rank will (named errors before any start)."""
    for spec in specs:
        _rank_environment(spec)


def cluster_addresses(spec):
    """The ``host:port`` of every rank of the job, as the rank of ``spec`` will see them."""
    return _rank_environment(spec).addresses


def build_command(args):
    """The command line of a rank: a ``.py`` script or ``-m module`` runs through
    :mod:`npu_adapter.distributed.run_rank` with this Python; anything else runs as given."""
    args = list(args)
    if not args:
        raise LaunchError("no command: give the training script (script.py args...)")
    runner = [sys.executable, "-u", "-m", "npu_adapter.distributed.run_rank"]
    if args[0] == "-m":
        if len(args) < 2:
            raise LaunchError("-m needs a module name")
        return runner + args
    if args[0].endswith(".py"):
        if not os.path.isfile(args[0]):
            raise LaunchError(f"script {args[0]!r} does not exist")
        return runner + args
    if shutil.which(args[0]) is None:
        raise LaunchError(f"command {args[0]!r} is not found (nor a .py script)")
    return args


def _describe(code):
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _exit_status(code):
    return 128 - code if code < 0 else code


class _Job:
    """The running ranks, their output pumps, and the stop logic."""

    def __init__(self, specs, command, prefix, out, err, grace):
        self.specs = specs
        self.command = command
        self.prefix = prefix
        self.out = out
        self.err = err
        self.grace = grace
        self.lock = threading.Lock()
        self.procs = {}
        self.pumps = []

    def message(self, text):
        with self.lock:
            self.err.write(f"{PREFIX}: {text}\n")
            self.err.flush()

    def _pump(self, rank, stream, sink):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace")
            if not line.endswith("\n"):
                line += "\n"
            with self.lock:
                sink.write(f"[{rank}] {line}" if self.prefix else line)
                sink.flush()
        stream.close()

    def start(self):
        for spec in self.specs:
            env = {key: value for key, value in os.environ.items() if key not in _CLEARED}
            env.update(spec.env)
            env["PYTHONUNBUFFERED"] = "1"
            try:
                proc = subprocess.Popen(self.command, env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        start_new_session=True)
            except OSError as exc:
                self.stop(signal.SIGKILL)
                raise LaunchError(f"cannot start rank {spec.rank}: {exc}") from None
            self.procs[spec.rank] = proc
            for stream, sink in ((proc.stdout, self.out), (proc.stderr, self.err)):
                pump = threading.Thread(target=self._pump, args=(spec.rank, stream, sink),
                                        daemon=True, name=f"rank{spec.rank}-output")
                pump.start()
                self.pumps.append(pump)

    def running(self):
        return [rank for rank, proc in self.procs.items() if proc.poll() is None]

    def signal_all(self, signum, ranks=None):
        for rank in self.running() if ranks is None else ranks:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.procs[rank].pid, signum)  # the rank and its children

    def stop(self, first=signal.SIGTERM):
        """Send ``first`` to the running ranks, SIGKILL whatever still runs after the grace."""
        self.signal_all(first)
        deadline = time.monotonic() + self.grace
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.running():
            self.message(f"ranks {self.running()} still run after {self.grace:g} s; killing "
                         "them")
            self.signal_all(signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait()

    def finish(self):
        for pump in self.pumps:
            pump.join(timeout=5)


@contextlib.contextmanager
def _forwarding(received):
    """Record SIGINT/SIGTERM/SIGHUP in ``received`` instead of dying (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for name in _FORWARDED:
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def launch(specs, command, prefix=True, grace=10.0, timeout=None, out=None, err=None):
    """Run ``command`` once per :class:`RankSpec`; return the job's exit code.

    0 when every rank exits with 0. When a rank fails, the others are stopped and the failed
    rank's status is returned (128 + signal number for a signal); a forwarded signal returns
    128 + its number; ``timeout`` seconds after the start every rank is stopped and the result
    is :data:`EXIT_TIMEOUT`.
    """
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    _check_positive("--grace", grace, float)
    if timeout is not None:
        _check_positive("--timeout", timeout, float)
    job = _Job(specs, command, prefix, out, err, float(grace))
    received = []
    with _forwarding(received):
        job.start()
        started = time.monotonic()
        status = 0
        forwarded = False
        while job.running():
            if received and not forwarded:
                signum = received[0]
                job.message(f"received {signal.Signals(signum).name}; forwarding it to ranks "
                            f"{job.running()}")
                forwarded = True
                status = 128 + signum
                job.stop(signum)
                break
            failed = [(rank, proc.returncode) for rank, proc in sorted(job.procs.items())
                      if proc.returncode not in (None, 0)]
            if failed:
                rank, code = failed[0]
                others = job.running()
                job.message(f"rank {rank} (pid {job.procs[rank].pid}) {_describe(code)}; "
                            + (f"stopping ranks {others}" if others else "no rank is left"))
                status = _exit_status(code)
                job.stop()
                break
            if timeout is not None and time.monotonic() - started > timeout:
                job.message(f"the job ran longer than --timeout {timeout:g} s; stopping ranks "
                            f"{job.running()}")
                status = EXIT_TIMEOUT
                job.stop()
                break
            time.sleep(0.05)
        else:
            codes = {rank: proc.wait() for rank, proc in job.procs.items()}
            bad = [(rank, code) for rank, code in sorted(codes.items()) if code != 0]
            if bad:
                rank, code = bad[0]
                job.message(f"rank {rank} (pid {job.procs[rank].pid}) {_describe(code)}")
                status = _exit_status(code)
    job.finish()
    return status
