"""The ``cann`` runtime: compile a cluster with ATC on first use, cache the ``.om``, run it.

A :class:`CannRuntime` serves every cluster lowered under one set of options
(:class:`CannRuntimeOptions`: ATC flags, device, cache directory, dump). Its interface is the
one every backend runtime has:

* :meth:`CannRuntime.compile` ``(program, shapes) → Executable``: the model of one cluster for
  one input signature (the concrete shapes of a static cluster; the gear patterns of a
  multi-gear one). Looked up in memory, then in the compile cache
  (``graph_compiler_cache_dir``), else compiled by ATC and stored there;
* :meth:`CannRuntime.run` ``(program, inputs) → outputs``: pick the gear (policy ``exact`` or
  ``pad_up``), get the executable, execute with pyACL;
* :meth:`CannRuntime.close`: unload every model of this runtime;
* :meth:`CannRuntime.stats`: compile and cache counters and a status per cluster.

Sessions hold a runtime (:meth:`CannRuntime.acquire` / :meth:`CannRuntime.release`). When the
last session of the process lets go, every model is unloaded and every device released as the
CANN contract's teardown says (``destroy_context``, ``reset_device``): a closed script holds no
device, also after a failed run. ACL itself stays initialised (``acl.init`` is once per
process) until :func:`shutdown`, which also finalizes it and runs at interpreter exit.

The process-wide registry maps the token of each lowered cluster op to its program and options
(:func:`register_program`); the op calls :func:`run_registered` at run time.
"""

import atexit
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time

import numpy as np

from npu_adapter import tf_compat
from npu_adapter.backends.cann.acl_runtime import AclProcess, OmModel
from npu_adapter.backends.cann.atc import atc_options_from_config, build_atc_command, run_atc
from npu_adapter.backends.cann.dump import dump_settings
from npu_adapter.backends.cann.errors import CannRuntimeError, GearMismatchError
from npu_adapter.backends.cann.toolkit import detect, import_acl
from npu_adapter.backends.compile_cache import (
    CompileCache,
    CompileCacheDirError,
    cache_key,
)
from npu_adapter.graph.names import sanitize_filename
from npu_adapter.graph.serialize import to_bytes

__all__ = [
    "CannRuntime",
    "CannRuntimeOptions",
    "Executable",
    "RuntimeStats",
    "register_program",
    "release_idle_devices",
    "run_registered",
    "runtime_for",
    "runtime_options_from_config",
    "shutdown",
]

BACKEND_NAME = "cann"
_OM_SUFFIX = ".om"


@dataclasses.dataclass(frozen=True)
class CannRuntimeOptions:
    """What of a session's options the runtime uses (hashable; equal options share a runtime).

    Attributes:
        atc: the :class:`~npu_adapter.backends.cann.atc.AtcOptions`.
        device_id: the device models are loaded on.
        cache_dir: ``graph_compiler_cache_dir`` (absolute) or None.
        cache_max_bytes: the cache's size bound (None: unbounded).
        dump: :class:`~npu_adapter.backends.cann.dump.DumpSettings` or None.
    """

    atc: object
    device_id: int = 0
    cache_dir: object = None
    cache_max_bytes: object = None
    dump: object = None

    def digest(self):
        """A short hash of the options that change compiled models (the token suffix)."""
        parts = self.atc.cache_key_parts()
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def runtime_options_from_config(config, environ=None):
    """The :class:`CannRuntimeOptions` of ``config`` (an ``NpuConfig``).

    Raises:
        CannConfigError: no SoC, or an option naming a missing file.
        CompileCacheDirError: ``graph_compiler_cache_dir`` is not an existing directory.
    """
    env = os.environ if environ is None else environ
    atc = atc_options_from_config(config, env)
    device = getattr(config, "session_device_id", -1)
    if device is None or device < 0:
        text = env.get("ASCEND_DEVICE_ID", "").strip()
        device = int(text) if text.isdigit() else 0
    cache_dir = getattr(config, "graph_compiler_cache_dir", None) or None
    if cache_dir:
        cache_dir = os.path.abspath(os.path.expanduser(cache_dir))
        if not os.path.isdir(cache_dir):
            raise CompileCacheDirError("graph_compiler_cache_dir", cache_dir,
                                       "an existing directory (it is not created for you, as "
                                       "with the original)")
    max_mb = getattr(config, "npu_adapter_compile_cache_max_mb", 0) or 0
    return CannRuntimeOptions(atc=atc, device_id=int(device), cache_dir=cache_dir,
                              cache_max_bytes=int(max_mb) * 1024 * 1024 or None,
                              dump=dump_settings(config))


@dataclasses.dataclass
class RuntimeStats:
    """Counters of a runtime. ``clusters`` maps a cluster name to its status dict
    (``status``: ``registered`` / ``ready`` / ``failed``; ``compiles``, ``cache_hits``, ``runs``,
    ``executables``, ``gears`` used, ``last_error``)."""

    compiles: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    loads: int = 0
    runs: int = 0
    clusters: dict = dataclasses.field(default_factory=dict)

    def as_dict(self):
        return dataclasses.asdict(self)


class Executable:
    """One compiled model of a cluster, loaded on the device."""

    def __init__(self, runtime, program, shapes, key, om_path, source, model):
        self.runtime = runtime
        self.program = program
        self.shapes = shapes
        self.key = key
        self.om_path = om_path
        self.source = source      # "atc" or "cache"
        self.model = model

    def run(self, arrays, dynamic_dims=None):
        """Execute on ``arrays``; returns the outputs as numpy arrays."""
        return self.model.execute(arrays, dynamic_dims)

    def close(self):
        """Unload the model."""
        self.model.unload()


def _flat_gear_values(program, shapes, g):
    """The values of the ``-1`` axes of gear ``g``, in input order then axis order."""
    gear = program.gear
    position = {k: t for t, k in enumerate(gear.inputs)}
    values = []
    for k, shape in enumerate(shapes):
        t = position.get(k)
        for axis, d in enumerate(shape):
            if d == -1:
                values.append(gear.table.gears[g][t][axis])
    return tuple(values)


class CannRuntime:
    """Compiles and runs the clusters lowered under one :class:`CannRuntimeOptions`."""

    name = BACKEND_NAME

    def __init__(self, options, toolkit=None):
        self.options = options
        self.toolkit = toolkit or detect(environ=os.environ)
        self.cache = None
        if options.cache_dir:
            self.cache = CompileCache(options.cache_dir, BACKEND_NAME, suffix=_OM_SUFFIX,
                                      max_bytes=options.cache_max_bytes)
        self._lock = threading.RLock()
        self._executables = {}   # key -> Executable
        self._compiling = {}     # key -> threading.Lock held by the compiling thread
        self._stats = RuntimeStats()
        self._work_dir = None
        self._acl = None
        self._dumped = []        # model names given to set_dump so far
        self._users = 0          # sessions holding this runtime (acquire / release)

    # ------------------------------------------------------------------ bookkeeping
    def _cluster(self, name):
        return self._stats.clusters.setdefault(name, {
            "status": "registered", "compiles": 0, "cache_hits": 0, "runs": 0,
            "executables": 0, "gears": {}, "last_error": None})

    def note_program(self, program):
        """Record ``program`` in the per-cluster stats (called when it is registered)."""
        with self._lock:
            self._cluster(program.name)

    def stats(self):
        """A :class:`RuntimeStats` snapshot."""
        with self._lock:
            snap = dataclasses.replace(self._stats)
            snap.clusters = {name: dict(st, gears=dict(st["gears"]))
                             for name, st in self._stats.clusters.items()}
            return snap

    def _work(self):
        with self._lock:
            if self._work_dir is None or not os.path.isdir(self._work_dir):
                self._work_dir = tempfile.mkdtemp(prefix="npu_adapter_cann_")
            return self._work_dir

    def _process(self):
        if self._acl is None:
            self._acl = import_acl(self.toolkit)
        return AclProcess.get(self._acl)

    # ------------------------------------------------------------------ compile
    def cache_key(self, program, shapes):
        """The compile-cache key of ``program`` for ``shapes``."""
        from npu_adapter import __version__

        return cache_key({
            "backend": BACKEND_NAME, "npu_adapter": __version__,
            "atc": self.toolkit.atc_identity(), "program": program.fingerprint,
            "shapes": [list(s) for s in shapes], "options": self.options.atc.cache_key_parts(),
        })

    def compile(self, program, shapes):
        """The :class:`Executable` of ``program`` for ``shapes`` (one tuple per input, ``-1``
        on gear axes): from memory, from the compile cache, or compiled by ATC."""
        shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        key = self.cache_key(program, shapes)
        with self._lock:
            exe = self._executables.get(key)
            if exe is not None:
                self._stats.cache_hits += 1
                self._stats.memory_hits += 1
                return exe
            gate = self._compiling.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                exe = self._executables.get(key)
                if exe is not None:
                    self._stats.cache_hits += 1
                    self._stats.memory_hits += 1
                    return exe
            try:
                exe = self._build(program, shapes, key)
            except BaseException as exc:
                with self._lock:
                    st = self._cluster(program.name)
                    st["status"] = "failed"
                    st["last_error"] = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                with self._lock:
                    self._compiling.pop(key, None)
            with self._lock:
                self._executables[key] = exe
                st = self._cluster(program.name)
                st["status"] = "ready"
                st["executables"] += 1
                st["last_error"] = None
            return exe

    def _build(self, program, shapes, key):
        path = self.cache.lookup(key) if self.cache is not None else None
        if path is not None:
            source = "cache"
            with self._lock:
                self._stats.cache_hits += 1
                self._stats.disk_hits += 1
                self._cluster(program.name)["cache_hits"] += 1
        else:
            with self._lock:
                self._stats.cache_misses += 1
            path = self._run_atc(program, shapes, key)
            source = "atc"
        model_path = path
        if self.options.dump is not None:
            model_path = self._dump_copy(program, key, path)
        model = OmModel(self._process(), model_path, self.options.device_id,
                        label=f"cluster {program.name!r}", num_inputs=len(program.inputs),
                        num_outputs=len(program.outputs), gear=program.gear is not None)
        with self._lock:
            self._stats.loads += 1
        return Executable(self, program, shapes, key, path, source, model)

    def _run_atc(self, program, shapes, key):
        atc = self.toolkit.require_atc()
        scratch = tempfile.mkdtemp(prefix="atc-", dir=self._work())
        try:
            model = os.path.join(scratch, "model.pb")
            with open(model, "wb") as f:
                f.write(to_bytes(program.graph_for(shapes)))
            keep = None
            if program.keep_dtype:
                keep = os.path.join(scratch, "keep_dtype.cfg")
                with open(keep, "w", encoding="utf-8") as f:
                    f.write("".join(name + "\n" for name in program.keep_dtype))
            stem = os.path.join(scratch, sanitize_filename(program.name))
            om = stem + _OM_SUFFIX
            gears = None
            if program.gear is not None:
                gears = [_flat_gear_values(program, shapes, g)
                         for g in range(len(program.gear.table.gears))]
            command = build_atc_command(
                atc, model, stem, self.options.atc,
                inputs=[(spec.name, shape) for spec, shape in zip(program.inputs, shapes)],
                gears=gears, out_nodes=[f"{spec.name}:0" for spec in program.outputs],
                keep_dtype_file=keep)
            start = time.perf_counter()
            run_atc(command, cwd=scratch, env=self.toolkit.environment(), om_path=om,
                    what=f"cluster {program.name!r}")
            with self._lock:
                self._stats.compiles += 1
                self._cluster(program.name)["compiles"] += 1
            meta = {"cluster": program.name, "soc_version": self.options.atc.soc_version,
                    "shapes": [list(s) for s in shapes],
                    "seconds": round(time.perf_counter() - start, 3)}
            if self.cache is not None:
                return self.cache.store(key, om, meta)
            target = os.path.join(self._work(), key + _OM_SUFFIX)
            os.replace(om, target)
            return target
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _dump_copy(self, program, key, path):
        """Dumps are named after the ``.om`` file: load a link named after the cluster, and
        hand pyACL an acl.json listing it (and the earlier ones) before the load."""
        stem = f"{sanitize_filename(program.name)}_{key[:12]}"
        target = os.path.join(self._work(), stem + _OM_SUFFIX)
        if not os.path.exists(target):
            try:
                os.link(path, target)
            except OSError:
                shutil.copyfile(path, target)
        with self._lock:
            if stem not in self._dumped:
                self._dumped.append(stem)
            text = self.options.dump.acl_json(self._dumped)
        config = os.path.join(self._work(), "acl.json")
        tmp = config + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, config)
        self._process().set_dump(config, text)
        return target

    # ------------------------------------------------------------------ run
    def run(self, program, inputs):
        """Run ``program`` on ``inputs`` (numpy arrays, one per program input)."""
        arrays = [np.asarray(a) for a in inputs]
        if len(arrays) != len(program.inputs):
            raise CannRuntimeError(f"cluster {program.name!r} takes {len(program.inputs)} "
                                   f"input(s), got {len(arrays)}")
        for spec, array in zip(program.inputs, arrays):
            expected = _numpy_dtype(spec.dtype)
            if array.dtype != expected:
                raise CannRuntimeError(f"cluster {program.name!r}: input {spec.tensor!r} is "
                                       f"{array.dtype}, expected {expected}")
        gear = program.gear
        dims = None
        chosen = None
        actual = [tuple(a.shape) for a in arrays]
        if gear is not None:
            chosen = gear.table.select([actual[k] for k in gear.inputs], gear.policy)
            if chosen is None:
                raise GearMismatchError(_gear_message(program, actual))
            if gear.policy == "pad_up":
                arrays = _pad(arrays, gear, chosen)
            shapes = []
            position = {k: t for t, k in enumerate(gear.inputs)}
            for k, array in enumerate(arrays):
                t = position.get(k)
                shapes.append(gear.table.patterns[t] if t is not None else array.shape)
            dims = [d for array in arrays for d in array.shape]
        else:
            shapes = actual
        try:
            exe = self.compile(program, shapes)
            outputs = exe.run(arrays, dims)
        except BaseException as exc:
            with self._lock:
                st = self._cluster(program.name)
                st["status"] = "failed"
                st["last_error"] = f"{type(exc).__name__}: {exc}"
            raise
        if gear is not None and gear.policy == "pad_up" and gear.unpad:
            outputs = _unpad(program, outputs, actual, chosen)
        results = []
        for spec, out in zip(program.outputs, outputs):
            expected = _numpy_dtype(spec.dtype)
            results.append(out if out.dtype == expected else out.astype(expected))
        with self._lock:
            self._stats.runs += 1
            st = self._cluster(program.name)
            st["runs"] += 1
            st["status"] = "ready"
            if chosen is not None:
                st["gears"][chosen] = st["gears"].get(chosen, 0) + 1
        return results

    def acquire(self):
        """Note one more user (a session) of this runtime."""
        with self._lock:
            self._users += 1

    @property
    def users(self):
        """How many sessions hold this runtime."""
        with self._lock:
            return self._users

    def release(self):
        """One user is done; the last one unloads the models (:meth:`close`), and when no
        session of the process holds a runtime any more the devices are released
        (:func:`release_idle_devices`)."""
        with self._lock:
            self._users = max(0, self._users - 1)
            last = self._users == 0
        if last:
            try:
                self.close()
            finally:
                release_idle_devices()

    def close(self):
        """Unload every model of this runtime (they are loaded again on the next run)."""
        with self._lock:
            executables = list(self._executables.values())
            self._executables.clear()
        errors = []
        for exe in executables:
            try:
                exe.close()
            except Exception as exc:
                errors.append(exc)
        with self._lock:
            if self._work_dir is not None:
                shutil.rmtree(self._work_dir, ignore_errors=True)
                self._work_dir = None
            self._dumped = []
        if errors:
            raise errors[0]


def _numpy_dtype(enum):
    import tensorflow as tf

    return np.dtype(tf.as_dtype(enum).as_numpy_dtype)


def _gear_message(program, actual):
    gear = program.gear
    parts = [f"input {gear.table.names[t]} has shape {list(actual[k])}"
             for t, k in enumerate(gear.inputs)]
    return (f"{program.name}: the input shapes match no gear (policy {gear.policy}); inputs: "
            + "; ".join(parts) + f"; allowed gears: {gear.table.describe_all()}")


def _pad(arrays, gear, g):
    out = list(arrays)
    for t, k in enumerate(gear.inputs):
        target = gear.table.gears[g][t]
        amount = [(0, int(want) - int(have)) for want, have in zip(target, out[k].shape)]
        if any(after for _, after in amount):
            out[k] = np.pad(out[k], amount, constant_values=np.asarray(
                gear.pad_values[t]).astype(out[k].dtype))
    return out


def _unpad(program, outputs, actual, g):
    """Slice padded axes back, as the CPU reference's dispatcher does: an output axis is
    matched to the first dynamic input dim whose gear length equals the axis length."""
    gear = program.gear
    padded, real = [], []
    for t, k in enumerate(gear.inputs):
        for axis, d in enumerate(gear.table.patterns[t]):
            if d == -1:
                padded.append(gear.table.gears[g][t][axis])
                real.append(actual[k][axis])
    out = list(outputs)
    for j, axes in gear.unpad:
        for axis in axes:
            length = out[j].shape[axis]
            hits = [i for i, p in enumerate(padded) if p == length]
            if not hits:
                raise CannRuntimeError(
                    f"{program.name}: output {j} axis {axis} (npu_adapter_gear_unpad) has "
                    f"length {length}, which is no padded input dim of the chosen gear "
                    f"{padded}")
            index = [slice(None)] * out[j].ndim
            index[axis] = slice(0, real[hits[0]])
            out[j] = out[j][tuple(index)]
    return out


# ---------------------------------------------------------------------- registry
_REGISTRY_LOCK = threading.RLock()
_RUNTIMES = {}   # CannRuntimeOptions -> CannRuntime
_CALLS = {}      # token -> _ClusterCall


def runtime_for(options):
    """The process's :class:`CannRuntime` for ``options`` (made on first use)."""
    with _REGISTRY_LOCK:
        runtime = _RUNTIMES.get(options)
        if runtime is None:
            runtime = _RUNTIMES[options] = CannRuntime(options)
        return runtime


def runtimes():
    """Every live runtime of this process."""
    with _REGISTRY_LOCK:
        return list(_RUNTIMES.values())


class _ClusterCall:
    """What the lowered cluster op calls (TensorFlow's py_func registry holds it by token)."""

    def __init__(self, token, program, options):
        self.token = token
        self.program = program
        self.options = options

    def __call__(self, *arrays):
        return runtime_for(self.options).run(self.program, arrays)


def register_program(program, options):
    """Register ``program`` under ``options``; returns the token the cluster op carries.

    The token depends only on the program's content and the compile options, so lowering the
    same graph twice gives the same token (and the same rewritten GraphDef).
    """
    token = f"npu_adapter_cann_{program.fingerprint[:24]}_{options.digest()}"
    with _REGISTRY_LOCK:
        call = _CALLS.get(token)
        if call is None or call.options != options:
            call = _CALLS[token] = _ClusterCall(token, program, options)
        tf_compat.register_py_func(token, call)  # _CALLS keeps it alive
        runtime_for(options).note_program(program)
    return token


def run_registered(token, *arrays):
    """Run the cluster registered under ``token`` (what the PyFunc kernel does)."""
    with _REGISTRY_LOCK:
        call = _CALLS.get(token)
    if call is None:
        raise CannRuntimeError(f"no cann cluster is registered under {token!r} in this process "
                               "(a rewritten graph can only run in the process that rewrote it)")
    return call(*arrays)


def release_idle_devices():
    """When no session holds a runtime: unload every model of every runtime, then destroy the
    contexts and reset the devices (ACL stays initialised until :func:`shutdown`). Nothing
    happens while a session is open. Every step runs; the first failure is raised."""
    with _REGISTRY_LOCK:
        all_runtimes = list(_RUNTIMES.values())
        if any(runtime.users for runtime in all_runtimes):
            return
        _raise_first(_each(runtime.close for runtime in all_runtimes)
                     + _each(process.release_devices for process in AclProcess.all_instances()))


def shutdown():
    """Unload every model, destroy contexts, reset devices and finalize ACL. The runtimes are
    dropped (the next run makes them again; registered clusters stay registered)."""
    with _REGISTRY_LOCK:
        all_runtimes = list(_RUNTIMES.values())
        _RUNTIMES.clear()
    _raise_first(_each(runtime.close for runtime in all_runtimes)
                 + _each(process.shutdown for process in AclProcess.all_instances()))


def _each(steps):
    """Run every step; return the exceptions raised."""
    errors = []
    for step in steps:
        try:
            step()
        except Exception as exc:
            errors.append(exc)
    return errors


def _raise_first(errors):
    if errors:
        raise errors[0]


def _shutdown_at_exit():
    with contextlib.suppress(Exception):
        shutdown()


atexit.register(_shutdown_at_exit)
