"""Errors of the ``cann`` backend: ATC failures, pyACL return codes, clusters ATC cannot take.

Every class derives from :class:`npu_adapter.errors.BackendError`. Raised inside a session run
(the cluster op calls into the runtime), TensorFlow reports them as an op error whose message
starts with the class name and carries the full text: the ATC error code (``E10001``) or the
pyACL call and code name (``acl.mdl.execute returned 507011 ACL_ERROR_RT_MODEL_EXECUTE``).
"""

from npu_adapter.errors import BackendError, NpuConfigError

__all__ = [
    "ACL_ERROR_NAMES",
    "AclError",
    "AtcError",
    "CannConfigError",
    "CannError",
    "CannLoweringError",
    "CannNotAvailableError",
    "CannRuntimeError",
    "GearMismatchError",
    "acl_error_name",
]


class CannError(BackendError):
    """Root of the ``cann`` backend's errors."""


class CannNotAvailableError(CannError):
    """The CANN toolkit (``atc``) or pyACL (``acl``) cannot be found or loaded.

    ``missing`` names what is missing (``"atc"``, ``"acl"``); the message says how to set up
    the environment (``source <toolkit>/set_env.sh``) and points at ``npu-adapter doctor``.
    """

    def __init__(self, missing, message):
        self.missing = missing
        self.reason = message  # without the pointer at doctor (which doctor itself shows)
        super().__init__(f"{message} (run `npu-adapter doctor` to see what of CANN is found)")


class CannConfigError(CannError, NpuConfigError):
    """An option the ``cann`` backend needs is missing or unusable (no SoC, a missing file)."""

    def __init__(self, option, value, allowed, detail=None):
        NpuConfigError.__init__(self, option, value, allowed, detail)


class CannLoweringError(CannError):
    """A cluster cannot become an ATC model (it holds state, or its boundary has a dtype pyACL
    cannot carry). ``cluster`` names it; the message says why and what to do instead."""

    def __init__(self, cluster, reason):
        self.cluster = cluster
        self.reason = reason
        super().__init__(f"cluster {cluster!r} cannot be compiled by ATC: {reason}")


class AtcError(CannError):
    """``atc`` failed.

    Attributes:
        code: the first ``E#####`` error code ATC printed (``"E10001"``), or None when it
            printed none (a crash, a missing model file).
        codes: every error code printed, in order.
        text: the error text after the failure line (codes with their messages).
        exit_status: the process exit status (negative for a signal).
        command: the argument list that was run.
        output: ATC's complete stdout and stderr.
    """

    def __init__(self, message, *, code=None, codes=(), text="", exit_status=None,
                 command=(), output=""):
        self.code = code
        self.codes = tuple(codes)
        self.text = text
        self.exit_status = exit_status
        self.command = tuple(command)
        self.output = output
        super().__init__(message)


# pyACL / GE / runtime return codes and their names (the codes documented for pyACL).
ACL_ERROR_NAMES = {
    0: "ACL_SUCCESS",
    100000: "ACL_ERROR_INVALID_PARAM",
    100001: "ACL_ERROR_UNINITIALIZE",
    100002: "ACL_ERROR_REPEAT_INITIALIZE",
    100003: "ACL_ERROR_INVALID_FILE",
    100006: "ACL_ERROR_PARSE_FILE",
    100011: "ACL_ERROR_INVALID_MODEL_ID",
    100012: "ACL_ERROR_DESERIALIZE_MODEL",
    100013: "ACL_ERROR_PARSE_MODEL",
    100014: "ACL_ERROR_READ_MODEL_FAILURE",
    100015: "ACL_ERROR_MODEL_SIZE_INVALID",
    100017: "ACL_ERROR_MODEL_INPUT_NOT_MATCH",
    100018: "ACL_ERROR_MODEL_OUTPUT_NOT_MATCH",
    100019: "ACL_ERROR_MODEL_NOT_DYNAMIC",
    100026: "ACL_ERROR_UNSUPPORTED_DATA_TYPE",
    100037: "ACL_ERROR_REPEAT_FINALIZE",
    148049: "ACL_ERROR_INVALID_OPP_PATH",
    200000: "ACL_ERROR_BAD_ALLOC",
    200001: "ACL_ERROR_API_NOT_SUPPORT",
    200002: "ACL_ERROR_INVALID_DEVICE",
    200003: "ACL_ERROR_MEMORY_ADDRESS_UNALIGNED",
    200004: "ACL_ERROR_RESOURCE_NOT_MATCH",
    200005: "ACL_ERROR_INVALID_RESOURCE_HANDLE",
    200006: "ACL_ERROR_FEATURE_UNSUPPORTED",
    300000: "ACL_ERROR_STORAGE_OVER_LIMIT",
    500000: "ACL_ERROR_INTERNAL_ERROR",
    500001: "ACL_ERROR_FAILURE",
    500002: "ACL_ERROR_GE_FAILURE",
    500003: "ACL_ERROR_RT_FAILURE",
    500004: "ACL_ERROR_DRV_FAILURE",
    145000: "ACL_ERROR_GE_PARAM_INVALID",
    145002: "ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID",
    145003: "ACL_ERROR_GE_EXEC_MODEL_ID_INVALID",
    145006: "ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID",
    145011: "ACL_ERROR_GE_DYNAMIC_INPUT_ADDR_INVALID",
    145012: "ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID",
    145013: "ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID",
    245000: "ACL_ERROR_GE_MEMORY_ALLOCATION",
    545001: "ACL_ERROR_GE_LOAD_MODEL",
    545601: "ACL_ERROR_GE_MODEL_EXECUTE_TIMEOUT",
    107000: "ACL_ERROR_RT_PARAM_INVALID",
    107001: "ACL_ERROR_RT_INVALID_DEVICEID",
    107002: "ACL_ERROR_RT_CONTEXT_NULL",
    207001: "ACL_ERROR_RT_MEMORY_ALLOCATION",
    207004: "ACL_ERROR_RT_NO_DEVICE",
    507000: "ACL_ERROR_RT_INTERNAL_ERROR",
    507008: "ACL_ERROR_RT_SOC_VERSION",
    507011: "ACL_ERROR_RT_MODEL_EXECUTE",
    507014: "ACL_ERROR_RT_AICORE_TIMEOUT",
    507015: "ACL_ERROR_RT_AICORE_EXCEPTION",
    507018: "ACL_ERROR_RT_AICPU_EXCEPTION",
    507899: "ACL_ERROR_RT_DRV_INTERNAL_ERROR",
}


def acl_error_name(ret):
    """``ACL_ERROR_*`` name of return code ``ret`` (``ACL_ERROR_UNKNOWN_<ret>`` if undocumented)."""
    return ACL_ERROR_NAMES.get(ret, f"ACL_ERROR_UNKNOWN_{ret}")


class AclError(CannError):
    """A pyACL call returned a non-zero code.

    Attributes:
        call: the pyACL function (``"acl.mdl.execute"``).
        ret: the return code.
        name: its ``ACL_ERROR_*`` name.
        detail: what the backend was doing, plus ``acl.get_recent_err_msg()`` when it says more.
    """

    def __init__(self, call, ret, detail=""):
        self.call = call
        self.ret = ret
        self.name = acl_error_name(ret)
        self.detail = detail
        message = f"{call} returned {ret} {self.name}"
        if detail:
            message += f": {detail}"
        super().__init__(message)


class CannRuntimeError(CannError):
    """The runtime was misused or met data it cannot run (wrong input dtype or size)."""


class GearMismatchError(CannRuntimeError, ValueError):
    """Runtime input shapes match no gear of a multi-gear model (TensorFlow reports it as
    ``InvalidArgumentError``, as the CPU reference's gear dispatcher does)."""
