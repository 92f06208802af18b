"""The error raised by the ``npu_bridge`` names that need the Ascend device itself.

A few functions of the original talk to the device runtime directly: RDMA pools and remote
registration, shared device memory, device addresses of variables, and the HCCL graph adaptor
library. Nothing on a host computes them, so they raise :class:`DeviceOnlyError` when they are
called (after the original's own argument checks), before anything is built or changed. The
README lists these names.
"""

from npu_adapter import errors as _errors

__all__ = ["DeviceOnlyError", "MissingDeviceLibrary"]

if hasattr(_errors, "DeviceOnlyError"):
    DeviceOnlyError = _errors.DeviceOnlyError
else:  # the shared definition in npu_adapter.errors is not merged in yet

    class DeviceOnlyError(_errors.BackendError):
        """An API needs the Ascend device (its runtime, memory or RDMA), which this build
        lacks. ``api`` names the function, ``reason`` says what on the device it needs."""

        def __init__(self, api, reason):
            self.api = api
            self.reason = reason
            super().__init__(f"{api} needs the Ascend device: {reason}")


class MissingDeviceLibrary:
    """Stands in for a device shared library the original loads with ``ctypes``: any attribute
    access raises :class:`DeviceOnlyError` naming the library."""

    def __init__(self, library, api):
        self._library = library
        self._api = api

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise DeviceOnlyError(f"{self._api}.{name}",
                              f"it calls into {self._library}, a library of the device runtime")

    def __repr__(self):
        return f"<missing device library {self._library}>"
