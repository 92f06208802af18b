"""pyACL: the process-wide ACL state and loaded ``.om`` models, every return code checked.

pyACL's conventions: a function that makes a handle or reads a value returns ``(value, ret)``;
an action returns ``ret``; plain getters (``get_num_inputs``, ``create_desc``, ...) return the
bare value; ``ret == 0`` is success. Every ``ret`` is checked by :func:`check`, which raises
:class:`~npu_adapter.backends.cann.errors.AclError` naming the call, the code and its
``ACL_ERROR_*`` name.

:class:`AclProcess` owns what exists once per process: ``acl.init`` (a second call is an error
in ACL), one context per device (``set_device`` + ``create_context``), the dump configuration,
and the teardown: :meth:`AclProcess.release_devices` (``destroy_context``, ``reset_device``)
when the last session closes, :meth:`AclProcess.shutdown` (the same, then ``acl.finalize``) at
exit. A context is bound to the calling thread with ``acl.rt.set_context`` before every use,
because TensorFlow calls in from any of its threads.

:class:`OmModel` is one loaded model: ``load_from_file``, its description, and input and output
datasets allocated once (device buffers of the sizes the model reports, the
``ascend_mbatch_shape_data`` buffer of a gear model in its place after the user inputs) and
reused by every :meth:`OmModel.execute`. A failure while loading releases what was created.
"""

import contextlib
import threading

import numpy as np

from npu_adapter.backends.cann.errors import AclError, CannRuntimeError

__all__ = [
    "ACL_DTYPES",
    "ACL_DEVICE",
    "ACL_DYNAMIC_TENSOR_NAME",
    "ACL_HOST",
    "ACL_MEMCPY_DEVICE_TO_DEVICE",
    "ACL_MEMCPY_DEVICE_TO_HOST",
    "ACL_MEMCPY_HOST_TO_DEVICE",
    "ACL_MEM_MALLOC_NORMAL_ONLY",
    "AclProcess",
    "OmModel",
    "check",
]

ACL_MEM_MALLOC_NORMAL_ONLY = 2
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_MEMCPY_DEVICE_TO_DEVICE = 3
ACL_DEVICE = 0
ACL_HOST = 1
ACL_DYNAMIC_TENSOR_NAME = "ascend_mbatch_shape_data"

ACL_DTYPES = {
    np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int8): 2,
    np.dtype(np.int32): 3, np.dtype(np.uint8): 4, np.dtype(np.int16): 6,
    np.dtype(np.uint16): 7, np.dtype(np.uint32): 8, np.dtype(np.int64): 9,
    np.dtype(np.uint64): 10, np.dtype(np.float64): 11, np.dtype(np.bool_): 12,
}
"""numpy dtype → aclDataType."""
_NUMPY_OF_ACL = {code: dtype for dtype, code in ACL_DTYPES.items()}


def _recent_message(acl):
    getter = getattr(acl, "get_recent_err_msg", None)
    if getter is None:
        return ""
    try:
        text = getter()
    except Exception:  # a diagnostic must never hide the real error
        return ""
    return " ".join(str(text).split()) if text else ""


def check(acl, call, ret, detail=""):
    """Raise :class:`AclError` when ``ret`` is not 0 (``ACL_SUCCESS``)."""
    if ret != 0:
        recent = _recent_message(acl)
        if recent:
            detail = f"{detail}; ACL says: {recent}" if detail else f"ACL says: {recent}"
        raise AclError(call, ret, detail)


class AclProcess:
    """The ACL state of this process (one instance per ``acl`` module, see :meth:`get`)."""

    _instances = {}
    _instances_lock = threading.Lock()

    def __init__(self, acl):
        self.acl = acl
        self.lock = threading.RLock()
        self.initialized = False
        self.contexts = {}        # device id -> context
        self.run_mode = ACL_HOST
        self.models = set()       # live OmModel instances
        self.dump_initialized = False
        self.dump_config = None   # text of the acl.json last given to set_dump

    @classmethod
    def get(cls, acl):
        """The process's instance for module ``acl``."""
        with cls._instances_lock:
            inst = cls._instances.get(id(acl))
            if inst is None or inst.acl is not acl:
                inst = cls._instances[id(acl)] = cls(acl)
            return inst

    @classmethod
    def all_instances(cls):
        with cls._instances_lock:
            return list(cls._instances.values())

    def ensure_init(self):
        """``acl.init()`` once."""
        with self.lock:
            if not self.initialized:
                check(self.acl, "acl.init", self.acl.init())
                self.initialized = True

    def bind(self, device_id):
        """Initialise ACL, open ``device_id`` once, and make its context current for the calling
        thread."""
        acl = self.acl
        with self.lock:
            self.ensure_init()
            context = self.contexts.get(device_id)
            if context is None:
                check(acl, "acl.rt.set_device", acl.rt.set_device(device_id),
                      f"device {device_id}")
                try:
                    context, ret = acl.rt.create_context(device_id)
                    check(acl, "acl.rt.create_context", ret, f"device {device_id}")
                    run_mode, ret = acl.rt.get_run_mode()
                    check(acl, "acl.rt.get_run_mode", ret)
                except BaseException:
                    if context:
                        with contextlib.suppress(Exception):
                            acl.rt.destroy_context(context)
                    with contextlib.suppress(Exception):
                        acl.rt.reset_device(device_id)
                    raise
                self.run_mode = run_mode
                self.contexts[device_id] = context
        check(acl, "acl.rt.set_context", acl.rt.set_context(context), f"device {device_id}")
        return context

    def set_dump(self, config_path, config_text):
        """Give ``acl.mdl.set_dump`` the acl.json at ``config_path`` (for models loaded after
        the call); ``acl.mdl.init_dump`` first, once."""
        acl = self.acl
        with self.lock:
            self.ensure_init()
            if self.dump_config == config_text:
                return
            if not self.dump_initialized:
                check(acl, "acl.mdl.init_dump", acl.mdl.init_dump())
                self.dump_initialized = True
            check(acl, "acl.mdl.set_dump", acl.mdl.set_dump(config_path), config_path)
            self.dump_config = config_text

    def release_devices(self):
        """The contract's teardown up to, not including, ``acl.finalize``: unload every model,
        ``finalize_dump``, then ``destroy_context`` and ``reset_device`` for every device. ACL
        stays initialised (``acl.init`` is once per process; :meth:`shutdown` finalizes, at
        exit). Run when the last session on the CANN backend closes. Every step runs even when
        one fails; the first failure is raised at the end."""
        errors = self._release_devices()
        if errors:
            raise errors[0]

    def shutdown(self):
        """:meth:`release_devices`, then ``acl.finalize``. Every step runs even when one fails;
        the first failure is raised at the end."""
        with self.lock:
            errors = self._release_devices()
            if self.initialized:
                errors += _attempt(self.acl, "acl.finalize", self.acl.finalize)
                self.initialized = False
        if errors:
            raise errors[0]

    def _release_devices(self):
        acl = self.acl
        errors = []
        with self.lock:
            for model in sorted(self.models, key=lambda m: m.label):
                try:
                    model.unload()
                except Exception as exc:
                    errors.append(exc)
            if not self.initialized:
                return errors
            if self.dump_initialized:
                errors += _attempt(acl, "acl.mdl.finalize_dump", acl.mdl.finalize_dump)
                self.dump_initialized = False
                self.dump_config = None
            for device_id, context in sorted(self.contexts.items()):
                errors += _attempt(acl, "acl.rt.destroy_context", acl.rt.destroy_context,
                                   context)
                errors += _attempt(acl, "acl.rt.reset_device", acl.rt.reset_device, device_id)
            self.contexts.clear()
        return errors


def _attempt(acl, call, fn, *args):
    try:
        check(acl, call, fn(*args))
    except Exception as exc:
        return [exc]
    return []


class OmModel:
    """One loaded ``.om`` with its reusable datasets.

    Args:
        process: the :class:`AclProcess`.
        path: the ``.om`` file.
        device_id: the device to load it on.
        label: a name for messages (the cluster).
        num_inputs, num_outputs: what the model must have (user inputs; the gear input of a
            multi-gear model comes on top).
        gear: whether the model must be multi-gear.
    """

    def __init__(self, process, path, device_id, *, label, num_inputs, num_outputs, gear):
        self.process = process
        self.acl = process.acl
        self.path = path
        self.device_id = device_id
        self.label = label
        self.lock = threading.Lock()
        self.model_id = None
        self.desc = None
        self.gear_index = None
        self.inputs = []      # [(device ptr, size, data buffer, acl dtype)]
        self.outputs = []     # [(device ptr, size, data buffer, acl dtype, host ptr)]
        self.in_dataset = None
        self.out_dataset = None
        self._undo = []
        try:
            self._load(num_inputs, num_outputs, gear)
        except BaseException:
            self._release()
            raise
        process.models.add(self)

    # ---------------------------------------------------------------- loading
    def _load(self, num_inputs, num_outputs, gear):
        acl = self.acl
        self.process.bind(self.device_id)
        model_id, ret = acl.mdl.load_from_file(self.path)
        check(acl, "acl.mdl.load_from_file", ret, f"{self.label}: {self.path}")
        self.model_id = model_id
        self._undo.append(("acl.mdl.unload", acl.mdl.unload, model_id))
        desc = acl.mdl.create_desc()
        if not desc:
            raise AclError("acl.mdl.create_desc", 500000, f"{self.label}: no description made")
        self.desc = desc
        self._undo.append(("acl.mdl.destroy_desc", acl.mdl.destroy_desc, desc))
        check(acl, "acl.mdl.get_desc", acl.mdl.get_desc(desc, model_id), self.label)
        total_inputs = acl.mdl.get_num_inputs(desc)
        total_outputs = acl.mdl.get_num_outputs(desc)
        index, ret = acl.mdl.get_input_index_by_name(desc, ACL_DYNAMIC_TENSOR_NAME)
        self.gear_index = index if ret == 0 else None
        expected = num_inputs + (1 if gear else 0)
        if (self.gear_index is not None) != bool(gear) or total_inputs != expected \
                or total_outputs != num_outputs:
            kind = "a multi-gear" if gear else "a static"
            found = "multi-gear" if self.gear_index is not None else "static"
            raise CannRuntimeError(
                f"{self.label}: {self.path} is not the model compiled for this cluster: "
                f"expected {kind} model with {expected} input(s) and {num_outputs} output(s), "
                f"found a {found} model with {total_inputs} input(s) and {total_outputs} "
                "output(s)")
        if self.gear_index is not None and self.gear_index != num_inputs:
            raise CannRuntimeError(
                f"{self.label}: the {ACL_DYNAMIC_TENSOR_NAME} input is at index "
                f"{self.gear_index}, expected after the {num_inputs} user input(s)")
        self.in_dataset = self._dataset()
        for i in range(total_inputs):
            size = acl.mdl.get_input_size_by_index(desc, i)
            dtype = None if i == self.gear_index else acl.mdl.get_input_data_type(desc, i)
            ptr, buf = self._device_buffer(size, self.in_dataset, f"input {i}")
            self.inputs.append((ptr, size, buf, dtype))
        self.out_dataset = self._dataset()
        for j in range(total_outputs):
            size = acl.mdl.get_output_size_by_index(desc, j)
            dtype = acl.mdl.get_output_data_type(desc, j)
            ptr, buf = self._device_buffer(size, self.out_dataset, f"output {j}")
            host, ret = acl.rt.malloc_host(size)
            check(acl, "acl.rt.malloc_host", ret, f"{self.label}: output {j}, {size} bytes")
            self._undo.append(("acl.rt.free_host", acl.rt.free_host, host))
            self.outputs.append((ptr, size, buf, dtype, host))

    def _dataset(self):
        acl = self.acl
        dataset = acl.mdl.create_dataset()
        if not dataset:
            raise AclError("acl.mdl.create_dataset", 500000, f"{self.label}: no dataset made")
        self._undo.append(("acl.mdl.destroy_dataset", acl.mdl.destroy_dataset, dataset))
        return dataset

    def _device_buffer(self, size, dataset, what):
        acl = self.acl
        ptr, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_NORMAL_ONLY)
        check(acl, "acl.rt.malloc", ret, f"{self.label}: {what}, {size} bytes")
        self._undo.append(("acl.rt.free", acl.rt.free, ptr))
        buf = acl.create_data_buffer(ptr, size)
        if not buf:
            raise AclError("acl.create_data_buffer", 500000, f"{self.label}: {what}")
        self._undo.append(("acl.destroy_data_buffer", acl.destroy_data_buffer, buf))
        _, ret = acl.mdl.add_dataset_buffer(dataset, buf)
        check(acl, "acl.mdl.add_dataset_buffer", ret, f"{self.label}: {what}")
        return ptr, buf

    # ---------------------------------------------------------------- running
    def execute(self, arrays, dynamic_dims=None):
        """Copy ``arrays`` in, run, copy the outputs back; returns numpy arrays.

        ``dynamic_dims`` (multi-gear models) is every input's full shape, concatenated in input
        order, for ``set_input_dynamic_dims``.
        """
        acl = self.acl
        with self.lock:
            if self.model_id is None:
                raise CannRuntimeError(f"{self.label}: the model was unloaded")
            self.process.bind(self.device_id)
            host_mode = self.process.run_mode == ACL_HOST
            kind_in = ACL_MEMCPY_HOST_TO_DEVICE if host_mode else ACL_MEMCPY_DEVICE_TO_DEVICE
            kind_out = ACL_MEMCPY_DEVICE_TO_HOST if host_mode else ACL_MEMCPY_DEVICE_TO_DEVICE
            user_inputs = [entry for i, entry in enumerate(self.inputs) if i != self.gear_index]
            keep_alive = []
            for i, (array, (ptr, size, _, dtype)) in enumerate(zip(arrays, user_inputs)):
                array = np.ascontiguousarray(array)
                if ACL_DTYPES.get(array.dtype) != dtype:
                    raise CannRuntimeError(
                        f"{self.label}: input {i} is {array.dtype}, the model takes aclDataType "
                        f"{dtype} ({_NUMPY_OF_ACL.get(dtype, 'unknown')})")
                exact = self.gear_index is None
                if array.nbytes > size or (exact and array.nbytes != size):
                    raise CannRuntimeError(
                        f"{self.label}: input {i} has shape {list(array.shape)} "
                        f"({array.nbytes} bytes); the model's buffer holds {size} bytes")
                data = array.tobytes()
                keep_alive.append(data)  # the pointer is valid while the bytes live
                if data:
                    check(acl, "acl.rt.memcpy",
                          acl.rt.memcpy(ptr, size, acl.util.bytes_to_ptr(data), len(data),
                                        kind_in), f"{self.label}: input {i}")
            if self.gear_index is not None and dynamic_dims is not None:
                dims = {"dimCount": len(dynamic_dims), "name": "",
                        "dims": [int(d) for d in dynamic_dims]}
                check(acl, "acl.mdl.set_input_dynamic_dims",
                      acl.mdl.set_input_dynamic_dims(self.model_id, self.in_dataset,
                                                     self.gear_index, dims),
                      f"{self.label}: dims {dims['dims']}")
            check(acl, "acl.mdl.execute",
                  acl.mdl.execute(self.model_id, self.in_dataset, self.out_dataset), self.label)
            results = []
            for j, (ptr, size, _, dtype, host) in enumerate(self.outputs):
                dims, ret = acl.mdl.get_cur_output_dims(self.desc, j)
                check(acl, "acl.mdl.get_cur_output_dims", ret, f"{self.label}: output {j}")
                shape = [int(d) for d in dims["dims"][:dims["dimCount"]]]
                np_dtype = _NUMPY_OF_ACL.get(dtype)
                if np_dtype is None:
                    raise CannRuntimeError(f"{self.label}: output {j} has aclDataType {dtype}, "
                                           "which has no numpy equivalent")
                nbytes = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
                if nbytes > size:
                    raise CannRuntimeError(f"{self.label}: output {j} of shape {shape} needs "
                                           f"{nbytes} bytes, the model reserved {size}")
                if nbytes:
                    check(acl, "acl.rt.memcpy",
                          acl.rt.memcpy(host, size, ptr, nbytes, kind_out),
                          f"{self.label}: output {j}")
                    data = acl.util.ptr_to_bytes(host, nbytes)
                else:
                    data = b""
                results.append(np.frombuffer(data, np_dtype).reshape(shape))
            return results

    # ---------------------------------------------------------------- teardown
    def unload(self):
        """Release the datasets, buffers and device memory, unload the model and destroy its
        description (in that order); every step runs, the first failure is raised."""
        with self.lock:
            self.process.models.discard(self)
            if not self._undo:
                return
            # Still release when binding fails: the calls report their own errors.
            with contextlib.suppress(Exception):
                self.process.bind(self.device_id)
            errors = self._release()
            if errors:
                raise errors[0]

    def _release(self):
        errors = []
        # Buffers and datasets first, then the model and its description, as documented.
        late = {"acl.mdl.unload", "acl.mdl.destroy_desc"}
        steps = list(reversed(self._undo))
        ordered = [s for s in steps if s[0] not in late] + \
            [s for s in steps if s[0] == "acl.mdl.unload"] + \
            [s for s in steps if s[0] == "acl.mdl.destroy_desc"]
        for call, fn, handle in ordered:
            errors += _attempt(self.acl, call, fn, handle)
        self._undo = []
        self.model_id = None
        self.inputs, self.outputs = [], []
        return errors
