"""A fake pyACL (``import acl``) that checks calls against pyACL's documented contract.

It has pyACL's names and return conventions: handle and value makers return ``(value, ret)``,
actions return ``ret``, plain getters return the bare value, ``0`` is ``ACL_SUCCESS``. It keeps
books the tests assert on (``acl.fake``): every call in order, and every live handle — models,
descriptions, datasets, data buffers, device and host memory, contexts, devices — so leaks show.

Return codes for misuse, as pyACL documents them: a call before ``acl.init`` or after
``acl.finalize`` → 100001 ``ACL_ERROR_UNINITIALIZE``; a second ``init`` → 100002; a second
``finalize`` → 100037; memory or model calls on a thread with no current context → 107002
``ACL_ERROR_RT_CONTEXT_NULL``; a bad device id → 107001; an unknown model id → 100011; input or
output buffer counts that differ from the model → 100017 / 100018; a data buffer too small for
the tensor → 145006; ``set_input_dynamic_dims`` on a static model → 100019, without the
``ascend_mbatch_shape_data`` buffer or with ``dimCount`` 0 → 100000, with a length or static
axis that differs from the model → 145012, with dims matching no gear → 145013; an ``.om``
built for another SoC (``FAKE_ACL_SOC``) → 507008. Other bad handles → 100000. Misuse the
contract gives no code for raises :class:`ContractViolation`, so a test fails loudly.

Execution is real: the model's frozen graph (see ``tests/fakes/fake_om.py``) runs in its own
TensorFlow session on the bytes found in device memory, and the outputs are written back.
``acl.fake.fail[<call name>] = code`` makes that call return ``code`` (failure injection).

The release order is checked too: ``destroy_context`` while memory allocated in that context
lives, ``reset_device`` while a context of the device lives, ``acl.finalize`` while a context or
device is held or before ``finalize_dump`` raise :class:`ContractViolation`. With
``FAKE_ACL_LOG`` set, every call's name is appended to that file as it is made, so a test sees
what a process called until it exited.
"""

from . import _core

ACL_SUCCESS = 0
fake = _core.STATE


def init(config_path=None):
    return _core.init(config_path)


def finalize():
    return _core.finalize()


def create_data_buffer(ptr, size):
    return _core.create_data_buffer(ptr, size)


def destroy_data_buffer(buf):
    return _core.destroy_data_buffer(buf)


def get_data_buffer_addr(buf):
    return _core.get_data_buffer_addr(buf)


def get_data_buffer_size_v2(buf):
    return _core.get_data_buffer_size_v2(buf)


def get_recent_err_msg():
    return _core.get_recent_err_msg()


class _Namespace:
    def __init__(self, prefix, names):
        for name in names:
            setattr(self, name, getattr(_core, f"{prefix}_{name}"))


rt = _Namespace("rt", ["set_device", "reset_device", "create_context", "set_context",
                       "destroy_context", "get_run_mode", "malloc", "free", "malloc_host",
                       "free_host", "memcpy"])
mdl = _Namespace("mdl", [
    "load_from_file", "unload", "create_desc", "get_desc", "destroy_desc", "get_num_inputs",
    "get_num_outputs", "get_input_size_by_index", "get_output_size_by_index", "get_input_dims",
    "get_output_dims", "get_cur_output_dims", "get_input_data_type", "get_output_data_type",
    "get_input_format", "get_output_format", "get_input_name_by_index",
    "get_output_name_by_index", "get_input_index_by_name", "create_dataset", "destroy_dataset",
    "add_dataset_buffer", "get_dataset_num_buffers", "get_dataset_buffer", "execute",
    "get_input_dynamic_gear_count", "get_input_dynamic_dims", "set_input_dynamic_dims",
    "init_dump", "set_dump", "finalize_dump"])
util = _Namespace("util", ["bytes_to_ptr", "ptr_to_bytes"])

__all__ = ["fake", "init", "finalize", "rt", "mdl", "util", "create_data_buffer",
           "destroy_data_buffer", "get_data_buffer_addr", "get_data_buffer_size_v2",
           "get_recent_err_msg", "ContractViolation"]

ContractViolation = _core.ContractViolation
