"""This rank's TensorFlow server and the sessions that connect to it.

A multi-rank job is one TensorFlow cluster with a single job, ``worker``, and one task per rank
at the address of :attr:`RankEnvironment.addresses
<npu_adapter.distributed.environment.RankEnvironment.addresses>`. Each process starts the server
of its own task (:func:`local_server`, once, when its first session is created) with task 0 as
the collective group leader, and its sessions run on that server with:

* ``experimental.collective_group_leader`` = ``/job:worker/replica:0/task:0``;
* ``device_filters`` = this task only: a session never waits for the other ranks' servers and
  places every op on its own task;
* ``isolate_session_state`` = True: variables and other state belong to the session, as with a
  local session, instead of being shared by every session on the server.

The other ranks wait (the collective timeout, at least a minute) for rank 0's server before
their first session: TensorFlow itself would retry a missing group leader forever.
"""

import socket
import threading
import time

import tensorflow as tf

from npu_adapter.distributed import environment
from npu_adapter.distributed.errors import DistributedError, RankFailureError

__all__ = [
    "JOB_NAME",
    "cluster_spec",
    "local_server",
    "server_config",
    "session_config",
    "session_target",
    "task_name",
]

JOB_NAME = "worker"
_LOCK = threading.Lock()
_STATE = {"server": None, "env": None}


def task_name(rank):
    """The TensorFlow task of ``rank``: ``/job:worker/replica:0/task:<rank>``."""
    return f"/job:{JOB_NAME}/replica:0/task:{rank}"


def cluster_spec(env):
    """The ``tf.train.ClusterSpec`` of the job: one ``worker`` task per rank."""
    return tf.train.ClusterSpec({JOB_NAME: list(env.addresses)})


def server_config(env):
    """The ``ConfigProto`` of this rank's server (the group leader is task 0)."""
    del env  # the leader is the same for every rank
    config = tf.compat.v1.ConfigProto()
    config.experimental.collective_group_leader = task_name(0)
    return config


def session_config(env, config=None):
    """A copy of ``config`` (or a new ``ConfigProto``) with the settings a session of rank
    ``env.rank_id`` needs (see the module doc); the caller's proto is not modified."""
    result = tf.compat.v1.ConfigProto()
    if config is not None:
        result.CopyFrom(config)
    result.experimental.collective_group_leader = task_name(0)
    own = f"/job:{JOB_NAME}/task:{env.rank_id}"
    if own not in result.device_filters:
        result.device_filters.append(own)
    result.isolate_session_state = True
    return result


def local_server(env=None):
    """This rank's ``tf.distribute.Server``, started on first use (one per process).

    Raises :class:`~npu_adapter.distributed.errors.DistributedError` for a single-rank
    environment, when the server cannot listen on its address, or when the rank environment
    changed after the server started.
    """
    env = environment.current() if env is None else env
    if not env.distributed:
        raise DistributedError("local_server: this process is not a rank of a multi-rank job "
                               "(RANK_SIZE/CM_WORKER_SIZE/RANK_TABLE_FILE describe one rank)")
    with _LOCK:
        server = _STATE["server"]
        if server is not None:
            started = _STATE["env"]
            if (started.addresses, started.rank_id) != (env.addresses, env.rank_id):
                raise DistributedError(
                    f"the rank environment changed after this process started the server of "
                    f"rank {started.rank_id} at {started.address}: now rank {env.rank_id} of "
                    f"{env.addresses}; a process is one rank for its whole life")
            return server
        try:
            server = tf.distribute.Server(cluster_spec(env), job_name=JOB_NAME,
                                          task_index=env.rank_id, config=server_config(env),
                                          start=True)
        except (tf.errors.OpError, ValueError) as exc:
            raise DistributedError(
                f"rank {env.rank_id}: cannot start the TensorFlow server at {env.address} "
                f"(NPU_ADAPTER_WORKERS, or the base port and the rank table): "
                f"{str(exc).splitlines()[0]}") from exc
        _wait_for_leader(env)
        _STATE["server"] = server
        _STATE["env"] = env
        return server


LEADER_WAIT_MIN_SECONDS = 60.0
"""Ranks start at different times (imports, schedulers): wait at least this long for rank 0."""


def _wait_for_leader(env):
    """Wait until rank 0's server accepts connections (the collective timeout, at least
    :data:`LEADER_WAIT_MIN_SECONDS`).

    TensorFlow's runtime retries a missing group leader forever; checking once at start-up
    turns a leader that never comes up into a named error.
    """
    if env.rank_id == 0:
        return
    address = env.addresses[0]
    host, port = address.rsplit(":", 1)
    host = host.strip("[]")
    wait = max(env.timeout_seconds, LEADER_WAIT_MIN_SECONDS)
    deadline = time.monotonic() + wait
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RankFailureError(
                    f"rank {env.rank_id} of {env.rank_size}: the group leader, rank 0 at "
                    f"{address}, did not accept connections within {wait:g} s "
                    f"(NPU_ADAPTER_COLLECTIVE_TIMEOUT): {exc.strerror or exc}. Is rank 0 "
                    "running with the same NPU_ADAPTER_WORKERS / rank table?",
                    rank=env.rank_id, rank_size=env.rank_size) from None
            time.sleep(0.1)


def session_target(target, config):
    """``(target, config)`` for a session created with ``target`` and ``config``.

    In a rank of a multi-rank job, a session without a target (``""``) runs on this rank's
    server: the result is the server's ``grpc://`` target and a copy of ``config`` with the
    collective settings (:func:`session_config`). Otherwise (one rank, or an explicit target)
    the arguments come back unchanged.
    """
    if target not in (None, "", b""):
        return target, config
    env = environment.current()
    if not env.distributed:
        return target, config
    return local_server(env).target, session_config(env, config)


