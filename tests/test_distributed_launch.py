"""``npu-adapter launch`` and the faults of a job: output prefixes, environments, a failing or
killed rank stops the job, signals are forwarded, a bad rank table stops everything before any
process starts, and a rank whose peer dies exits with a named error within the timeout.

The launcher tests use small Python children (no TensorFlow) so they take milliseconds; the
fault test runs real ranks (``tests/ranks/fault_rank.py``).
"""

import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

from npu_adapter import cli
from npu_adapter.distributed import launcher
from npu_adapter.distributed.errors import LaunchError, RankTableError

RANKS = pathlib.Path(__file__).resolve().parent / "ranks"
SERVER_LIST = {
    "server_count": "2", "status": "completed", "version": "1.0",
    "server_list": [
        {"server_id": "127.0.0.1", "device": [{"device_id": "0", "rank_id": "0"},
                                              {"device_id": "1", "rank_id": "1"}]},
        {"server_id": "127.0.0.2", "device": [{"device_id": "2", "rank_id": "2"}]},
    ],
}


@pytest.fixture(autouse=True)
def _no_rank_env(monkeypatch):
    for name in ("RANK_SIZE", "CM_WORKER_SIZE", "RANK_ID", "DEVICE_ID", "RANK_TABLE_FILE",
                 "NPU_ADAPTER_WORKERS", "NPU_ADAPTER_BASE_PORT"):
        monkeypatch.delenv(name, raising=False)


def _python(code):
    return [sys.executable, "-c", code]


def _launch(specs, code, **kwargs):
    out, err = io.StringIO(), io.StringIO()
    kwargs.setdefault("grace", 2.0)
    kwargs.setdefault("timeout", 60.0)
    started = time.monotonic()
    status = launcher.launch(specs, _python(code), out=out, err=err, **kwargs)
    return status, out.getvalue(), err.getvalue(), time.monotonic() - started


def test_ranks_get_their_environment_and_prefixed_output():
    code = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in ('RANK_SIZE', "
            "'RANK_ID', 'DEVICE_ID', 'NPU_ADAPTER_WORKERS')})); "
            "import sys; sys.stderr.write('to stderr\\n'); print('no newline', end='')")
    status, out, err, _ = _launch(launcher.plan_ranks(3), code)
    assert status == 0
    seen = {}
    for line in out.splitlines():
        if line.endswith("}"):
            rank, payload = line.split(" ", 1)
            seen[rank] = json.loads(payload)
    assert sorted(seen) == ["[0]", "[1]", "[2]"]
    workers = seen["[0]"]["NPU_ADAPTER_WORKERS"].split(",")
    assert len(set(workers)) == 3 and all(w.startswith("127.0.0.1:") for w in workers)
    for rank in range(3):
        assert seen[f"[{rank}]"] == {"RANK_SIZE": "3", "RANK_ID": str(rank),
                                     "DEVICE_ID": str(rank),
                                     "NPU_ADAPTER_WORKERS": ",".join(workers)}
        assert f"[{rank}] no newline" in out and f"[{rank}] to stderr" in err


def test_a_failing_rank_stops_the_others():
    code = ("import os, sys, time\nif os.environ['RANK_ID'] == '1':\n    time.sleep(0.5); "
            "sys.exit(3)\ntime.sleep(60)")
    status, _, err, elapsed = _launch(launcher.plan_ranks(3), code)
    assert status == 3 and elapsed < 20
    assert "rank 1 (pid" in err and "exited with code 3; stopping ranks [0, 2]" in err


def test_a_killed_rank_and_ranks_that_ignore_sigterm():
    code = ("import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "if os.environ['RANK_ID'] == '0':\n    time.sleep(0.5); "
            "os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(60)")
    status, _, err, elapsed = _launch(launcher.plan_ranks(2), code, grace=1.0)
    assert status == 128 + signal.SIGKILL and elapsed < 20
    assert "rank 0" in err and "was killed by SIGKILL; stopping ranks [1]" in err
    assert "ranks [1] still run after 1 s; killing them" in err


def test_the_job_timeout():
    status, _, err, _ = _launch(launcher.plan_ranks(2), "import time; time.sleep(60)",
                                timeout=1.0)
    assert status == launcher.EXIT_TIMEOUT and "longer than --timeout 1 s" in err


def test_a_rank_that_fails_last_sets_the_status():
    code = "import os, sys; sys.exit(int(os.environ['RANK_ID']) * 5)"
    status, _, err, _ = _launch(launcher.plan_ranks(2), code)
    assert status == 5 and "rank 1" in err


def test_signals_are_forwarded_to_every_rank(tmp_path):
    child = tmp_path / "child.py"
    child.write_text(
        "import os, signal, sys, time\n"
        "def stop(number, frame):\n"
        "    print('rank', os.environ['RANK_ID'], 'got', signal.Signals(number).name, "
        "flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\nprint('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "npu_adapter.cli", "launch", "-n", "2",
                             "--grace", "5", sys.executable, str(child)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while sum("ready" in line for line in lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    try:
        status = proc.wait(timeout=30)
    finally:
        proc.kill()
    reader.join(5)
    assert status == 128 + signal.SIGTERM
    assert "[0] rank 0 got SIGTERM\n" in lines and "[1] rank 1 got SIGTERM\n" in lines
    assert "received SIGTERM; forwarding it to ranks" in proc.stderr.read()


def test_plan_with_a_rank_table(tmp_path):
    table = tmp_path / "rt.json"
    table.write_text(json.dumps(SERVER_LIST))
    with pytest.raises(LaunchError, match="lists 2 servers .* pass --server-id"):
        launcher.plan_ranks(2, table)
    specs = launcher.plan_ranks(2, table, "127.0.0.1", base_port=30000)
    assert [(s.rank, s.device_id) for s in specs] == [(0, 0), (1, 1)]
    assert specs[0].env == {"RANK_SIZE": "3", "RANK_ID": "0", "DEVICE_ID": "0",
                            "RANK_TABLE_FILE": str(table), "NPU_ADAPTER_BASE_PORT": "30000"}
    specs = launcher.plan_ranks(1, table, "127.0.0.2", base_port=30000)
    assert (specs[0].rank, specs[0].device_id, specs[0].env["RANK_SIZE"]) == (2, 2, "3")
    # Every launcher derives the same cluster: server_id:base+device_id.
    assert launcher.cluster_addresses(specs[0]) == ("127.0.0.1:30000", "127.0.0.1:30001",
                                                    "127.0.0.2:30002")
    with pytest.raises(LaunchError, match="-n 3 does not match .* server 127.0.0.1 runs 2 ranks"):
        launcher.plan_ranks(3, table, "127.0.0.1")
    with pytest.raises(LaunchError, match="--server-id '10.1.1.1' is not a server"):
        launcher.plan_ranks(1, table, "10.1.1.1")
    single = dict(SERVER_LIST, server_count="1", server_list=SERVER_LIST["server_list"][:1])
    single["server_list"][0]["device"] = SERVER_LIST["server_list"][0]["device"]
    table.write_text(json.dumps(single))
    specs = launcher.plan_ranks(2, table)  # one server on loopback: free ports are picked
    assert len(specs[1].env["NPU_ADAPTER_WORKERS"].split(",")) == 2


@pytest.mark.parametrize("args,match", [
    ((0,), "-n must be a positive integer"),
    ((2, None, "127.0.0.1"), "--server-id selects the ranks of a server in a rank table"),
    ((2, None, None, 70000), "--base-port must be a port number"),
    ((2, None, None, None, -1.0), "--collective-timeout must be a positive number"),
])
def test_plan_errors(args, match):
    with pytest.raises(LaunchError, match=match):
        launcher.plan_ranks(*args)


def test_commands(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    assert launcher.build_command([str(script), "--lr", "1"])[-4:] == [
        "npu_adapter.distributed.run_rank", str(script), "--lr", "1"]
    assert launcher.build_command(["-m", "pkg.train"])[-2:] == ["-m", "pkg.train"]
    for args, match in (([], "no command"), (["missing.py"], "does not exist"),
                        (["no-such-command-xyz"], "is not found"), (["-m"], "module name")):
        with pytest.raises(LaunchError, match=match):
            launcher.build_command(args)


def test_a_bad_rank_table_stops_before_any_process_starts(tmp_path, capsys):
    marker = tmp_path / "started"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    table = tmp_path / "rt.json"
    bad = json.loads(json.dumps(SERVER_LIST))
    bad["server_list"][1]["device"][0]["rank_id"] = "1"
    table.write_text(json.dumps(bad))
    status = cli.main(["launch", "-n", "2", "--rank-table", str(table), "--server-id",
                       "127.0.0.1", str(script)])
    err = capsys.readouterr().err
    assert status == cli.EXIT_INVALID and not marker.exists()
    assert "server_list[1].device[0].rank_id" in err and "already given to" in err
    with pytest.raises(RankTableError):
        launcher.plan_ranks(2, table, "127.0.0.1")


def test_dry_run_prints_each_rank(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("")
    assert cli.main(["launch", "-n", "2", "--dry-run", "--collective-timeout", "30",
                     str(script), "--epochs", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("# cluster (one worker task per rank): ")
    assert lines[0].count("127.0.0.1:") == 2
    assert lines[2].startswith("DEVICE_ID=1 NPU_ADAPTER_COLLECTIVE_TIMEOUT=30.0 "
                               "NPU_ADAPTER_WORKERS=127.0.0.1:")
    assert "RANK_ID=1 RANK_SIZE=2 " in lines[2] and lines[2].endswith("--epochs 3")


def test_a_rank_whose_peer_is_killed_exits_with_a_named_error(tmp_path):
    """Ranks started without the launcher (as a user's shell loop does): rank 1 is killed in
    the middle of training; ranks 0 and 2 stop with RankFailureError within the timeout."""
    timeout = 10.0
    specs = launcher.plan_ranks(3, collective_timeout=timeout)
    command = launcher.build_command([str(RANKS / "fault_rank.py")])
    procs, outputs = {}, {}
    for spec in specs:
        env = {**os.environ, **spec.env, "TF_CPP_MIN_LOG_LEVEL": "2"}
        procs[spec.rank] = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True)
        outputs[spec.rank] = []
        threading.Thread(target=lambda r=spec.rank: outputs[r].extend(procs[r].stdout),
                         daemon=True).start()
    try:
        deadline = time.monotonic() + 90
        while not any("step 5" in line for line in outputs[1]):
            assert time.monotonic() < deadline, outputs
            assert procs[1].poll() is None, outputs[1]
            time.sleep(0.05)
        procs[1].kill()
        killed = time.monotonic()
        for rank in (0, 2):
            status = procs[rank].wait(timeout=timeout + 30)
            elapsed = time.monotonic() - killed
            text = "".join(outputs[rank])
            assert status != 0 and elapsed < timeout + 15, (rank, elapsed, text[-2000:])
            assert "npu_adapter.distributed.errors.RankFailureError: " \
                   f"rank {rank} of 3: the collective 'HcomAllReduce/CollectiveReduceV2'" in text
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
