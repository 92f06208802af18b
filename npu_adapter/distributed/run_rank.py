"""Run one rank: ``python -m npu_adapter.distributed.run_rank script.py args...`` (or
``-m module args...``).

``npu-adapter launch`` starts every rank through this module. It validates the rank environment
before the script runs (a bad ``RANK_TABLE_FILE`` or ``RANK_ID`` stops the rank with a named
error and exit code 2), runs the script as ``__main__`` with its arguments, and turns a failed
collective into a :class:`~npu_adapter.distributed.errors.RankFailureError` that says which rank
failed and why (another rank stopped, a timeout, ranks running different collectives) instead of
TensorFlow's generic error.
"""

import os
import runpy
import sys

from npu_adapter.cli import quiet
from npu_adapter.distributed import environment
from npu_adapter.distributed.errors import DistributedError, RankFailureError

__all__ = ["collective_failure", "main"]

EXIT_INVALID = 2
_MARKERS = ("Collective ops is aborted", "Collective has timed out", "collective instance",
            "Collective instance", "CompleteGroup", "CompleteInstance", "RecvBuf")


def _failed_op(exc):
    op = getattr(exc, "op", None)
    return op if op is not None and op.type.startswith("Collective") else None


def collective_failure(exc):
    """A :class:`RankFailureError` describing ``exc`` if it is the failure of a collective op
    (a ``tf.errors.OpError`` raised by one), else None."""
    tf = sys.modules.get("tensorflow")  # no TensorFlow imported: no TensorFlow error either
    if tf is None or not isinstance(exc, tf.errors.OpError):
        return None
    op = _failed_op(exc)
    message = exc.message or ""
    if op is None and not any(marker in message for marker in _MARKERS):
        return None
    env = environment.current()
    reasons = [line.strip() for line in message.splitlines()
               if any(marker in line for marker in ("aborted by", "timed out", "mismatch",
                                                     "Socket closed", "Connection", "expected"))]
    reason = reasons[0] if reasons else message.splitlines()[0] if message else type(exc).__name__
    where = f"the collective {op.name!r} ({op.type})" if op is not None else "a collective"
    reason = reason[:400].rstrip(".")
    return RankFailureError(
        f"rank {env.rank_id} of {env.rank_size}: {where} failed with {type(exc).__name__}: "
        f"{reason}. Another rank has probably stopped (see its output), or did not reach "
        f"the collective within {env.timeout_seconds:g} s (NPU_ADAPTER_COLLECTIVE_TIMEOUT), or "
        "the ranks ran different collectives. TensorFlow refuses every later collective of this "
        "process, so the rank stops.", rank=env.rank_id, rank_size=env.rank_size, op=op)


def _usage():
    sys.stderr.write("usage: python -m npu_adapter.distributed.run_rank script.py [args...]\n"
                     "       python -m npu_adapter.distributed.run_rank -m module [args...]\n")
    return EXIT_INVALID


def main(argv=None):
    """Run the script or module named by ``argv`` as this rank; returns the exit code, or
    raises what the script raised (a failed collective as :class:`RankFailureError`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        return _usage()
    # The rank's first `import tensorflow` does not print TensorFlow's start-up lines (unless
    # the user asks for them with TF_CPP_MIN_LOG_LEVEL=0), as the npu-adapter commands do.
    quiet.install()
    try:
        environment.current()
    except DistributedError as exc:
        sys.stderr.write(f"npu-adapter rank: error: {exc}\n")
        return EXIT_INVALID
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = argv[0]
            sys.argv = [script, *argv[1:]]
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name="__main__")
    except Exception as exc:
        failure = collective_failure(exc)
        if failure is not None:
            raise failure from exc
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
