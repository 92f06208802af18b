"""The fake pyACL's state machine (see the package docstring for the contract it checks)."""

import collections
import functools
import json
import os
import sys
import threading

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(_HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(_HERE))

from fake_om import read_om  # noqa: E402

DYNAMIC_TENSOR_NAME = "ascend_mbatch_shape_data"
H2H, H2D, D2H, D2D = 0, 1, 2, 3
ACL_HOST = 1
# TensorFlow DataType enum -> (numpy dtype, aclDataType)
_TF_TYPES = {1: (np.float32, 0), 19: (np.float16, 1), 6: (np.int8, 2), 3: (np.int32, 3),
             4: (np.uint8, 4), 5: (np.int16, 6), 17: (np.uint16, 7), 22: (np.uint32, 8),
             9: (np.int64, 9), 23: (np.uint64, 10), 2: (np.float64, 11), 10: (np.bool_, 12)}
_ACL_INT64 = 9
_ND = 2
_BYTES_REGIONS_KEPT = 256


class ContractViolation(AssertionError):
    """A call the pyACL contract forbids but gives no return code for."""


class _Region:
    __slots__ = ("kind", "size", "data", "device", "context")

    def __init__(self, kind, size, data, device=None, context=None):
        self.kind = kind        # "device", "host" (malloc_host) or "bytes" (bytes_to_ptr)
        self.size = size
        self.data = data
        self.device = device
        self.context = context  # the context current when it was allocated


class _Dataset:
    __slots__ = ("buffers", "gear")

    def __init__(self):
        self.buffers = []
        self.gear = None


class FakeModel:
    """A loaded fake .om: its I/O description, a TensorFlow session running its graph."""

    def __init__(self, model_id, path, header, graph_bytes):
        import tensorflow as tf

        self.model_id = model_id
        self.path = path
        self.name = os.path.splitext(os.path.basename(path))[0]
        self.header = header
        self.inputs = header["inputs"]
        self.outputs = header["outputs"]
        self.gears = [tuple(g) for g in header["gears"]] if header["gears"] else None
        self.patterns = [tuple(i["shape"]) for i in self.inputs]
        self.graph_def = tf.compat.v1.GraphDef()
        self.graph_def.ParseFromString(graph_bytes)
        if self.gears:
            self.gear_shapes = [self._fill(g) for g in self.gears]
        else:
            self.gear_shapes = [self.patterns]
        self.output_shapes = [self._infer(shapes) for shapes in self.gear_shapes]
        for shapes in self.output_shapes:
            for j, shape in enumerate(shapes):
                if shape is None:
                    raise _LoadError(f"output {j} of {self.name} has a dynamic shape")
        sizes = [[int(np.prod(s, dtype=np.int64)) for s in shapes] for shapes in self.gear_shapes]
        self.largest = max(range(len(self.gear_shapes)), key=lambda g: sum(sizes[g]))
        self.input_sizes = [max(int(np.prod(shapes[i], dtype=np.int64)) for shapes in
                                self.gear_shapes) * np.dtype(self.np_in(i)).itemsize
                            for i in range(len(self.inputs))]
        self.output_sizes = [max(int(np.prod(shapes[j], dtype=np.int64)) for shapes in
                                 self.output_shapes) * np.dtype(self.np_out(j)).itemsize
                             for j in range(len(self.outputs))]
        self.rank = sum(len(p) for p in self.patterns)
        self.cur_dims = list(self.output_shapes[self.largest])
        self.executions = 0
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.graph_util.import_graph_def(self._with_shapes(self.patterns), name="")
        config = tf.compat.v1.ConfigProto(use_per_session_threads=True,
                                          inter_op_parallelism_threads=1)
        self.session = _plain_session_class()(graph=self.graph, config=config)

    @property
    def gear_index(self):
        return len(self.inputs) if self.gears else None

    @property
    def num_inputs(self):
        return len(self.inputs) + (1 if self.gears else 0)

    def np_in(self, i):
        return _TF_TYPES[self.inputs[i]["dtype"]][0]

    def acl_in(self, i):
        return _TF_TYPES[self.inputs[i]["dtype"]][1]

    def _out_dtype(self, j):
        name = self.outputs[j]["name"]
        node = next(n for n in self.graph_def.node if n.name == name)
        key = "T" if "T" in node.attr else "dtype"
        return node.attr[key].type

    def np_out(self, j):
        return _TF_TYPES[self._out_dtype(j)][0]

    def acl_out(self, j):
        return _TF_TYPES[self._out_dtype(j)][1]

    def _fill(self, values):
        it = iter(values)
        return [tuple(next(it) if d == -1 else d for d in p) for p in self.patterns]

    def _with_shapes(self, shapes):
        import tensorflow as tf

        graph_def = tf.compat.v1.GraphDef()
        graph_def.CopyFrom(self.graph_def)
        by_name = {i["name"]: s for i, s in zip(self.inputs, shapes)}
        for node in graph_def.node:
            if node.name in by_name:
                node.attr["shape"].shape.CopyFrom(tf.TensorShape(
                    [None if d == -1 else d for d in by_name[node.name]]).as_proto())
        return graph_def

    def _infer(self, shapes):
        import tensorflow as tf

        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(self._with_shapes(shapes), name="")
        found = []
        for out in self.outputs:
            shape = graph.get_tensor_by_name(f"{out['name']}:{out['port']}").shape
            found.append(tuple(shape.as_list()) if shape.is_fully_defined() else None)
        return found

    def run(self, arrays):
        feeds = {f"{i['name']}:0": a for i, a in zip(self.inputs, arrays)}
        fetches = [f"{o['name']}:{o['port']}" for o in self.outputs]
        return self.session.run(fetches, feeds)

    def close(self):
        self.session.close()


class _LoadError(Exception):
    pass


def _plain_session_class():
    try:
        from npu_adapter.session import plain_session_class

        return plain_session_class()
    except ImportError:  # pragma: no cover
        import tensorflow as tf

        return tf.compat.v1.Session


class FakeState:
    """Books of the fake: the call log and every live handle."""

    def __init__(self):
        self.reset()

    def reset(self):
        """Forget everything (a fresh process)."""
        self.lock = threading.RLock()
        self.calls = []
        self.fail = {}
        self.initialized = False
        self.finalized = False
        self.init_config = None
        self.devices = set()
        self.contexts = {}
        self.local = threading.local()
        self.memory = {}
        self.bytes_regions = collections.deque()
        self.models = {}
        self.descs = {}
        self.datasets = {}
        self.buffers = {}
        self.dump_initialized = False
        self.dump_configs = []
        self.dump_events = []
        self.last_error = None
        self.next_handle = 0x1000
        self.device_count = int(os.environ.get("FAKE_ACL_DEVICES", "1"))
        self.soc = os.environ.get("FAKE_ACL_SOC") or None

    def handle(self):
        with self.lock:
            self.next_handle += 0x10
            return self.next_handle

    def call_names(self):
        return [name for name, _ in self.calls]

    def leaks(self):
        """Live handles by kind (empty when everything was released)."""
        found = {
            "models": sorted(self.models), "descs": sorted(self.descs),
            "datasets": sorted(self.datasets), "data_buffers": sorted(self.buffers),
            "device_memory": sorted(p for p, r in self.memory.items() if r.kind == "device"),
            "host_memory": sorted(p for p, r in self.memory.items() if r.kind == "host"),
            "contexts": sorted(self.contexts), "devices": sorted(self.devices),
        }
        if self.initialized:
            found["initialized"] = [True]
        if self.dump_initialized:
            found["dump"] = [True]
        return {k: v for k, v in found.items() if v}


STATE = FakeState()


def _record(name, args):
    """Book a call; with ``FAKE_ACL_LOG`` set, also append its name to that file at once (a
    test reads what a process called up to its very end, its exit handlers included)."""
    STATE.calls.append((name, args))
    log = os.environ.get("FAKE_ACL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(name + "\n")


def _current_context():
    return getattr(STATE.local, "ctx", None)


def _api(name, form="ret", context=False, needs_init=True):
    """Record the call; answer ACL_ERROR_UNINITIALIZE / CONTEXT_NULL / injected codes."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            with STATE.lock:
                _record(name, args)
                code = 0
                if needs_init and not STATE.initialized:
                    code = 100001
                elif context and _current_context() not in STATE.contexts:
                    code = 107002
                elif name in STATE.fail:
                    code = STATE.fail[name]
                if code:
                    STATE.last_error = f"{name} failed with {code}"
                    return _failure(form, code)
                result = fn(*args)
                ret = result[1] if form == "pair" else result if form == "ret" else 0
                if ret:
                    STATE.last_error = f"{name} failed with {ret}"
                return result

        return wrapper

    return decorate


def _failure(form, code):
    if form == "pair":
        return None, code
    if form == "ret":
        return code
    return 0


def _region(ptr, kinds):
    region = STATE.memory.get(ptr)
    if region is None or region.kind not in kinds:
        return None
    return region


# ------------------------------------------------------------------ process and devices
@_api("acl.init", needs_init=False)
def init(config_path=None):
    if STATE.initialized:
        return 100002
    if config_path is not None:
        try:
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f) if f.read().strip() else {}
        except (OSError, ValueError):
            return 100006
        STATE.init_config = config
        if "dump" in config:
            code = _check_dump(config["dump"])
            if code:
                return code
            STATE.dump_configs.append(config["dump"])
    STATE.initialized = True
    STATE.finalized = False
    return 0


@_api("acl.finalize", needs_init=False)
def finalize():
    if not STATE.initialized:
        return 100037 if STATE.finalized else 100001
    if STATE.contexts or STATE.devices:
        raise ContractViolation(f"acl.finalize while contexts {sorted(STATE.contexts)} or "
                                f"devices {sorted(STATE.devices)} are held: destroy_context "
                                "and reset_device first")
    if STATE.dump_initialized:
        raise ContractViolation("acl.finalize before acl.mdl.finalize_dump")
    STATE.initialized = False
    STATE.finalized = True
    return 0


@_api("acl.rt.set_device")
def rt_set_device(device_id):
    if not isinstance(device_id, int) or not 0 <= device_id < STATE.device_count:
        return 107001
    STATE.devices.add(device_id)
    return 0


@_api("acl.rt.reset_device")
def rt_reset_device(device_id):
    if device_id not in STATE.devices:
        return 107001
    if any(d == device_id for d in STATE.contexts.values()):
        raise ContractViolation(f"reset_device({device_id}) while its contexts live: destroy "
                                "them first")
    STATE.devices.discard(device_id)
    return 0


@_api("acl.rt.create_context", form="pair")
def rt_create_context(device_id):
    if device_id not in STATE.devices:
        raise ContractViolation(f"create_context({device_id}) before set_device({device_id})")
    ctx = STATE.handle()
    STATE.contexts[ctx] = device_id
    STATE.local.ctx = ctx  # the new context is current for the calling thread
    return ctx, 0


@_api("acl.rt.set_context")
def rt_set_context(ctx):
    if ctx not in STATE.contexts:
        return 100000
    STATE.local.ctx = ctx
    return 0


@_api("acl.rt.destroy_context")
def rt_destroy_context(ctx):
    if ctx not in STATE.contexts:
        return 100000
    held = sorted(p for p, r in STATE.memory.items() if r.context == ctx)
    if held:
        raise ContractViolation(f"destroy_context({ctx:#x}) while memory allocated in it "
                                f"lives ({len(held)} allocation(s)): free it first")
    del STATE.contexts[ctx]
    if _current_context() == ctx:
        STATE.local.ctx = None
    return 0


@_api("acl.rt.get_run_mode", form="pair")
def rt_get_run_mode():
    return ACL_HOST, 0


# ------------------------------------------------------------------ memory
@_api("acl.rt.malloc", form="pair", context=True)
def rt_malloc(size, policy):
    if not isinstance(size, int) or size <= 0 or policy not in (0, 1, 2):
        return None, 100000
    ptr = STATE.handle()
    STATE.memory[ptr] = _Region("device", size, bytearray(size),
                                STATE.contexts[_current_context()], _current_context())
    return ptr, 0


@_api("acl.rt.free", context=True)
def rt_free(ptr):
    if _region(ptr, ("device",)) is None:
        return 100000
    del STATE.memory[ptr]
    return 0


@_api("acl.rt.malloc_host", form="pair", context=True)
def rt_malloc_host(size):
    if not isinstance(size, int) or size <= 0:
        return None, 100000
    ptr = STATE.handle()
    STATE.memory[ptr] = _Region("host", size, bytearray(size), context=_current_context())
    return ptr, 0


@_api("acl.rt.free_host", context=True)
def rt_free_host(ptr):
    if _region(ptr, ("host",)) is None:
        return 100000
    del STATE.memory[ptr]
    return 0


_KINDS = {H2H: (("host", "bytes"), ("host",)), H2D: (("host", "bytes"), ("device",)),
          D2H: (("device",), ("host",)), D2D: (("device",), ("device",))}


@_api("acl.rt.memcpy", context=True)
def rt_memcpy(dst, dest_max, src, count, kind):
    if kind not in _KINDS:
        return 100000
    src_kinds, dst_kinds = _KINDS[kind]
    source, target = _region(src, src_kinds), _region(dst, dst_kinds)
    if source is None or target is None:
        return 100000
    if count > dest_max or dest_max > target.size or count > source.size or count < 0:
        return 100000
    target.data[:count] = bytes(source.data[:count])
    return 0


def util_bytes_to_ptr(data):
    _record("acl.util.bytes_to_ptr", (len(data),))
    if not isinstance(data, bytes):
        raise ContractViolation("acl.util.bytes_to_ptr takes a bytes object")
    ptr = STATE.handle()
    STATE.memory[ptr] = _Region("bytes", len(data), data)
    STATE.bytes_regions.append(ptr)
    while len(STATE.bytes_regions) > _BYTES_REGIONS_KEPT:
        STATE.memory.pop(STATE.bytes_regions.popleft(), None)
    return ptr


def util_ptr_to_bytes(ptr, size):
    _record("acl.util.ptr_to_bytes", (ptr, size))
    region = _region(ptr, ("host", "bytes"))
    if region is None or size > region.size:
        raise ContractViolation(f"ptr_to_bytes({ptr:#x}, {size}) outside host memory")
    return bytes(region.data[:size])


# ------------------------------------------------------------------ data buffers and datasets
@_api("acl.create_data_buffer", form="value")
def create_data_buffer(ptr, size):
    region = _region(ptr, ("device",))
    if region is None or size > region.size:
        return 0
    buf = STATE.handle()
    STATE.buffers[buf] = (ptr, size)
    return buf


@_api("acl.destroy_data_buffer")
def destroy_data_buffer(buf):
    if buf not in STATE.buffers:
        return 100000
    del STATE.buffers[buf]
    return 0


@_api("acl.get_data_buffer_addr", form="value")
def get_data_buffer_addr(buf):
    return STATE.buffers.get(buf, (0, 0))[0]


@_api("acl.get_data_buffer_size_v2", form="value")
def get_data_buffer_size_v2(buf):
    return STATE.buffers.get(buf, (0, 0))[1]


def get_recent_err_msg():
    text, STATE.last_error = STATE.last_error, None
    return text


@_api("acl.mdl.create_dataset", form="value")
def mdl_create_dataset():
    ds = STATE.handle()
    STATE.datasets[ds] = _Dataset()
    return ds


@_api("acl.mdl.destroy_dataset")
def mdl_destroy_dataset(ds):
    if ds not in STATE.datasets:
        return 100000
    del STATE.datasets[ds]
    return 0


@_api("acl.mdl.add_dataset_buffer", form="pair")
def mdl_add_dataset_buffer(ds, buf):
    if ds not in STATE.datasets or buf not in STATE.buffers:
        return ds, 100000
    STATE.datasets[ds].buffers.append(buf)
    return ds, 0


@_api("acl.mdl.get_dataset_num_buffers", form="value")
def mdl_get_dataset_num_buffers(ds):
    dataset = STATE.datasets.get(ds)
    return len(dataset.buffers) if dataset else 0


@_api("acl.mdl.get_dataset_buffer", form="value")
def mdl_get_dataset_buffer(ds, index):
    dataset = STATE.datasets.get(ds)
    if dataset is None or not 0 <= index < len(dataset.buffers):
        return 0
    return dataset.buffers[index]


# ------------------------------------------------------------------ models
@_api("acl.mdl.load_from_file", form="pair", context=True)
def mdl_load_from_file(path):
    if not isinstance(path, str) or not os.path.isfile(path):
        return None, 145002
    try:
        header, graph = read_om(path)
    except ValueError:
        return None, 100013
    if STATE.soc and header["soc_version"] != STATE.soc:
        return None, 507008
    model_id = len(STATE.models) + 1
    while model_id in STATE.models:
        model_id += 1
    try:
        STATE.models[model_id] = FakeModel(model_id, path, header, graph)
    except _LoadError:
        return None, 545001
    return model_id, 0


@_api("acl.mdl.unload", context=True)
def mdl_unload(model_id):
    model = STATE.models.pop(model_id, None)
    if model is None:
        return 100011
    model.close()
    return 0


@_api("acl.mdl.create_desc", form="value")
def mdl_create_desc():
    desc = STATE.handle()
    STATE.descs[desc] = None
    return desc


@_api("acl.mdl.get_desc")
def mdl_get_desc(desc, model_id):
    if desc not in STATE.descs:
        return 100000
    if model_id not in STATE.models:
        return 100011
    STATE.descs[desc] = model_id
    return 0


@_api("acl.mdl.destroy_desc")
def mdl_destroy_desc(desc):
    if desc not in STATE.descs:
        return 100000
    del STATE.descs[desc]
    return 0


def _model_of(desc):
    model_id = STATE.descs.get(desc)
    if model_id is None:
        raise ContractViolation(f"description {desc!r} was not filled by get_desc")
    model = STATE.models.get(model_id)
    if model is None:
        raise ContractViolation(f"description {desc!r} describes an unloaded model")
    return model


@_api("acl.mdl.get_num_inputs", form="value")
def mdl_get_num_inputs(desc):
    return _model_of(desc).num_inputs


@_api("acl.mdl.get_num_outputs", form="value")
def mdl_get_num_outputs(desc):
    return len(_model_of(desc).outputs)


def _input_index(model, index):
    if not 0 <= index < model.num_inputs:
        raise ContractViolation(f"input index {index} of a model with {model.num_inputs}")
    return index


@_api("acl.mdl.get_input_size_by_index", form="value")
def mdl_get_input_size_by_index(desc, index):
    model = _model_of(desc)
    if _input_index(model, index) == model.gear_index:
        return 8 * model.rank
    return model.input_sizes[index]


@_api("acl.mdl.get_output_size_by_index", form="value")
def mdl_get_output_size_by_index(desc, index):
    return _model_of(desc).output_sizes[index]


def _dims(name, dims):
    return {"name": name, "dimCount": len(dims), "dims": [int(d) for d in dims]}


@_api("acl.mdl.get_input_dims", form="pair")
def mdl_get_input_dims(desc, index):
    model = _model_of(desc)
    if _input_index(model, index) == model.gear_index:
        return _dims(DYNAMIC_TENSOR_NAME, [model.rank]), 0
    return _dims(model.inputs[index]["name"], model.patterns[index]), 0


@_api("acl.mdl.get_output_dims", form="pair")
def mdl_get_output_dims(desc, index):
    model = _model_of(desc)
    return _dims(model.outputs[index]["name"], model.output_shapes[model.largest][index]), 0


@_api("acl.mdl.get_cur_output_dims", form="pair")
def mdl_get_cur_output_dims(desc, index):
    model = _model_of(desc)
    return _dims(model.outputs[index]["name"], model.cur_dims[index]), 0


@_api("acl.mdl.get_input_data_type", form="value")
def mdl_get_input_data_type(desc, index):
    model = _model_of(desc)
    return _ACL_INT64 if _input_index(model, index) == model.gear_index else model.acl_in(index)


@_api("acl.mdl.get_output_data_type", form="value")
def mdl_get_output_data_type(desc, index):
    return _model_of(desc).acl_out(index)


@_api("acl.mdl.get_input_format", form="value")
def mdl_get_input_format(desc, index):
    return _ND


@_api("acl.mdl.get_output_format", form="value")
def mdl_get_output_format(desc, index):
    return _ND


@_api("acl.mdl.get_input_name_by_index", form="value")
def mdl_get_input_name_by_index(desc, index):
    model = _model_of(desc)
    if _input_index(model, index) == model.gear_index:
        return DYNAMIC_TENSOR_NAME
    return model.inputs[index]["name"]


@_api("acl.mdl.get_output_name_by_index", form="value")
def mdl_get_output_name_by_index(desc, index):
    out = _model_of(desc).outputs[index]
    return f"{out['name']}:{out['port']}"


@_api("acl.mdl.get_input_index_by_name", form="pair")
def mdl_get_input_index_by_name(desc, name):
    model = _model_of(desc)
    if name == DYNAMIC_TENSOR_NAME:
        return (model.gear_index, 0) if model.gears else (None, 100000)
    for i, spec in enumerate(model.inputs):
        if spec["name"] == name:
            return i, 0
    return None, 100000


@_api("acl.mdl.get_input_dynamic_gear_count", form="pair")
def mdl_get_input_dynamic_gear_count(desc, index):
    if index != -1:
        raise ContractViolation("get_input_dynamic_gear_count takes index -1 (reserved)")
    model = _model_of(desc)
    return (len(model.gears) if model.gears else 0), 0


@_api("acl.mdl.get_input_dynamic_dims", form="pair")
def mdl_get_input_dynamic_dims(desc, index, gear_count):
    model = _model_of(desc)
    if index != -1 or not model.gears or gear_count != len(model.gears):
        return None, 100000
    return [_dims("", [d for s in shapes for d in s]) for shapes in model.gear_shapes], 0


@_api("acl.mdl.set_input_dynamic_dims")
def mdl_set_input_dynamic_dims(model_id, ds, index, dims):
    model = STATE.models.get(model_id)
    if model is None:
        return 100011
    if not model.gears:
        return 100019
    dataset = STATE.datasets.get(ds)
    if dataset is None or index != model.gear_index or index >= len(dataset.buffers):
        return 100000
    ptr, _ = STATE.buffers.get(dataset.buffers[index], (0, 0))
    if _region(ptr, ("device",)) is None:
        return 100000
    if not isinstance(dims, dict) or set(dims) != {"dimCount", "name", "dims"}:
        raise ContractViolation(f"dims must be {{'dimCount', 'name', 'dims'}}, got {dims!r}")
    if dims["dimCount"] == 0:
        return 100000
    values = list(dims["dims"])
    if len(values) != dims["dimCount"] or len(values) != model.rank:
        return 145012
    flat_pattern = [d for p in model.patterns for d in p]
    if any(p != -1 and p != v for p, v in zip(flat_pattern, values)):
        return 145012
    for g, shapes in enumerate(model.gear_shapes):
        if [d for s in shapes for d in s] == values:
            dataset.gear = g
            region = STATE.memory[ptr]
            region.data[:8 * len(values)] = np.asarray(values, np.int64).tobytes()
            return 0
    return 145013


@_api("acl.mdl.execute", context=True)
def mdl_execute(model_id, in_ds, out_ds):
    model = STATE.models.get(model_id)
    if model is None:
        return 100011
    inputs, outputs = STATE.datasets.get(in_ds), STATE.datasets.get(out_ds)
    if inputs is None or outputs is None:
        return 100000
    if len(inputs.buffers) != model.num_inputs:
        return 100017
    if len(outputs.buffers) != len(model.outputs):
        return 100018
    gear = inputs.gear if inputs.gear is not None else model.largest
    shapes = model.gear_shapes[gear]
    arrays = []
    for i in range(len(model.inputs)):
        ptr, size = STATE.buffers[inputs.buffers[i]]
        dtype = np.dtype(model.np_in(i))
        need = int(np.prod(shapes[i], dtype=np.int64)) * dtype.itemsize
        region = _region(ptr, ("device",))
        if region is None or size < need:
            return 145006
        arrays.append(np.frombuffer(bytes(region.data[:need]), dtype).reshape(shapes[i]))
    results = model.run(arrays)
    for j, value in enumerate(results):
        value = np.ascontiguousarray(value)
        ptr, size = STATE.buffers[outputs.buffers[j]]
        region = _region(ptr, ("device",))
        if region is None or size < value.nbytes:
            return 145006
        region.data[:value.nbytes] = value.tobytes()
    model.cur_dims = [tuple(np.shape(v)) for v in results]
    model.executions += 1
    for config in STATE.dump_configs:
        for entry in config.get("dump_list", []):
            if entry.get("model_name") == model.name:
                STATE.dump_events.append({"model_name": model.name, "model_id": model_id,
                                          "step": model.executions - 1,
                                          "layer": entry.get("layer"),
                                          "dump_path": config["dump_path"],
                                          "dump_mode": config.get("dump_mode", "output")})
    return 0


# ------------------------------------------------------------------ dump
def _check_dump(section):
    path = section.get("dump_path")
    if not path or not os.path.isdir(path):
        return 100000
    if section.get("dump_mode", "output") not in ("input", "output", "all"):
        return 100000
    if section.get("dump_data", "tensor") not in ("tensor", "stats"):
        return 100000
    for entry in section.get("dump_list", []):
        if "model_name" not in entry:
            return 100000
    step = section.get("dump_step")
    if step is not None:
        parts = str(step).split("|")
        if len(parts) > 100 or not all(p.replace("-", "").isdigit() for p in parts):
            return 100000
    return 0


@_api("acl.mdl.init_dump")
def mdl_init_dump():
    if STATE.dump_initialized:
        return 100002
    STATE.dump_initialized = True
    return 0


@_api("acl.mdl.set_dump")
def mdl_set_dump(path):
    if not STATE.dump_initialized:
        raise ContractViolation("acl.mdl.set_dump before acl.mdl.init_dump")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return 100006
    section = config.get("dump")
    if not isinstance(section, dict):
        return 100000
    code = _check_dump(section)
    if code:
        return code
    STATE.dump_configs.append(section)
    return 0


@_api("acl.mdl.finalize_dump")
def mdl_finalize_dump():
    if not STATE.dump_initialized:
        return 100001
    STATE.dump_initialized = False
    return 0
