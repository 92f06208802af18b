"""Start the rank scripts of this directory as a job, for the distributed tests and benchmark."""

import io
import os
import pathlib

from npu_adapter.distributed import launcher

HERE = pathlib.Path(__file__).resolve().parent


def run_job(size, script, args=(), collective_timeout=60.0, timeout=240.0, extra_env=None):
    """Run ``script`` (a file of this directory) as ``size`` ranks on loopback; returns
    ``(status, stdout, stderr)`` of the launcher (the ranks' lines are prefixed ``[r]``)."""
    specs = launcher.plan_ranks(size, collective_timeout=collective_timeout)
    if extra_env:
        specs = [launcher.RankSpec(s.rank, s.device_id, {**s.env, **extra_env}) for s in specs]
    command = launcher.build_command([str(HERE / script), *map(str, args)])
    out, err = io.StringIO(), io.StringIO()
    saved = {key: os.environ.pop(key) for key in ("TF_CPP_MIN_LOG_LEVEL",)
             if key in os.environ}
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    try:
        status = launcher.launch(specs, command, grace=5.0, timeout=timeout, out=out, err=err)
    finally:
        os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        os.environ.update(saved)
    return status, out.getvalue(), err.getvalue()
