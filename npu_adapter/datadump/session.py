"""``DumpSession``: the run-time side of a data dump, one per TensorFlow session.

It numbers the models (clusters) the session runs, counts their iterations, and writes the files
the instrumented cluster functions hand it (see :mod:`npu_adapter.datadump.instrument`)::

    dump = DumpSession.from_config(npu_config)       # None when no dump option is on
    graph_def = dump.instrument(result.graph_def)    # before the graph is imported
    ...                                              # session runs write the files
    dump.close()                                     # when the session closes

The reporting ops call back into Python through TensorFlow's ``PyFunc`` registry; the session
keeps its callbacks alive until :meth:`DumpSession.close`. Model ids are assigned as the
original assigns graph ids: the first model of a session gets 1, each further one 10 more.
"""

import itertools
import os
import threading
import time

import numpy as np

from npu_adapter import tf_compat
from npu_adapter.datadump import layout
from npu_adapter.datadump.overflow import (
    SUMMARY_FILE,
    OverflowEvent,
    OverflowSummary,
    overflow_kind,
)
from npu_adapter.datadump.settings import DumpSettings
from npu_adapter.datadump.stats import stats_row, write_stats_csv
from npu_adapter.datadump.writer import TensorSpec, build_header, encode_dump, write_atomic
from npu_adapter.progress import ProgressLog

__all__ = ["DumpSession", "ModelState"]

_SERIALS = itertools.count(1)
_LIVE = {}
_LIVE_LOCK = threading.Lock()
_CLAIMED_TIME_DIRS = set()
_MODEL_ID_STRIDE = 10


class ModelState:
    """One dumped model (cluster): its name, model id and iteration counter."""

    __slots__ = ("name", "model_id", "_next", "_lock")

    def __init__(self, name, model_id):
        self.name = name
        self.model_id = model_id
        self._next = 0
        self._lock = threading.Lock()

    def next_step(self):
        """The number of this execution of the model (0, 1, 2, ...)."""
        with self._lock:
            step = self._next
            self._next += 1
            return step

    @property
    def steps_run(self):
        """How many times the model ran."""
        return self._next


class DumpSession:
    """The dump state of one TensorFlow session.

    Args:
        settings: a :class:`~npu_adapter.datadump.settings.DumpSettings`.
        stream: where progress and overflow lines go (default stderr).
        progress_interval: seconds between progress lines (default: the environment's).
    """

    def __init__(self, settings, stream=None, progress_interval=None):
        self.settings = settings
        self.serial = next(_SERIALS)
        self._stream = stream
        self._lock = threading.Lock()
        self._models = []
        self._tokens = []
        self._callbacks = []
        self._time_dir = None
        self._mappings = {}
        self._dirs = {}
        self._summary_lock = threading.Lock()
        self._closed = False
        self.overflows = OverflowSummary()
        self.progress = ProgressLog("data dump" if settings.kind == "dump"
                                    else "overflow detection", settings.dump_path,
                                    interval=progress_interval, stream=stream)
        with _LIVE_LOCK:
            _LIVE[self.serial] = self

    @classmethod
    def from_config(cls, config, environ=None, **kwargs):
        """A session for an :class:`~npu_adapter.config.NpuConfig`, or None when neither
        ``enable_dump`` nor ``enable_dump_debug`` is on."""
        settings = DumpSettings.from_config(config, environ)
        return None if settings is None else cls(settings, **kwargs)

    # ---- graph side ---------------------------------------------------------------------

    def instrument(self, graph_def):
        """``graph_def`` with its clusters reporting to this session (see
        :func:`~npu_adapter.datadump.instrument.instrument_for_dump`)."""
        from npu_adapter.datadump.instrument import instrument_for_dump

        return instrument_for_dump(graph_def, self)

    def register_model(self, name):
        """A new :class:`ModelState` for cluster ``name`` (model ids 1, 11, 21, ...)."""
        with self._lock:
            model = ModelState(name, 1 + _MODEL_ID_STRIDE * len(self._models))
            self._models.append(model)
            return model

    @property
    def models(self):
        """The registered models, in order."""
        with self._lock:
            return list(self._models)

    def step_token(self, model):
        """The PyFunc token of ``model``'s iteration counter."""
        return self._register(f"m{model.model_id}_step", lambda: np.int64(model.next_step()))

    def op_token(self, model, info):
        """The PyFunc token of the reporting op of ``info`` (an
        :class:`~npu_adapter.datadump.instrument.OpInfo`) in ``model``."""
        selected = self.settings.step_selected
        handle = self._dump_op if self.settings.kind == "dump" else self._check_overflow

        def report(step, *arrays):
            step = int(step)
            if selected(step):
                handle(model, info, step, arrays)
            return []

        return self._register(f"m{model.model_id}_t{info.task_id}_{len(self._tokens)}", report)

    def _register(self, suffix, callback):
        token = f"npu_adapter_dump_{self.serial}_{suffix}"
        # Our own token: the graph is the same in every process; _callbacks keeps it alive.
        tf_compat.register_py_func(token, callback)
        with self._lock:
            self._tokens.append(token)
            self._callbacks.append(callback)
        return token

    # ---- run-time side ------------------------------------------------------------------

    def _timestamp(self, step, task_id):
        """Microseconds since the epoch (16 digits); derived from ``epoch`` when it is set."""
        epoch = self.settings.epoch
        if epoch is not None:
            return (epoch + step) * 1_000_000 + task_id
        return time.time_ns() // 1000

    @property
    def time_dir(self):
        """``YYYYMMDDhhmmss`` of this session's first dump (unique among this process's
        sessions writing to the same ``dump_path``)."""
        with self._lock:
            if self._time_dir is None:
                epoch = self.settings.epoch
                if epoch is not None:
                    self._time_dir = layout.time_dir_name(time.gmtime(epoch))
                else:
                    seconds = int(time.time())
                    with _LIVE_LOCK:
                        while (self.settings.dump_path,
                               layout.time_dir_name(time.localtime(seconds))) in \
                                _CLAIMED_TIME_DIRS:
                            seconds += 1
                        self._time_dir = layout.time_dir_name(time.localtime(seconds))
                        _CLAIMED_TIME_DIRS.add((self.settings.dump_path, self._time_dir))
            return self._time_dir

    def iteration_dir(self, model, step):
        """Absolute directory of ``model``'s iteration ``step`` (created, checked to be inside
        ``dump_path`` once, then cached)."""
        key = (model.model_id, step)
        directory = self._dirs.get(key)
        if directory is None:
            relative = layout.iteration_dir(self.time_dir, self.settings.device_id, model.name,
                                            model.model_id, step)
            directory = layout.safe_join(self.settings.dump_path, relative)
            os.makedirs(directory, exist_ok=True)
            with self._lock:
                self._dirs[key] = directory
        return directory

    def _write(self, directory, file_name, chunks, step):
        short = layout.shorten_file_name(file_name)
        if os.sep in short or short in (".", ".."):  # names are sanitised; never leave the dir
            raise ValueError(f"refusing to write the file name {short!r}")
        path = os.path.join(directory, short)
        write_atomic(path, chunks, make_dirs=False)
        if short != file_name:
            self._add_mapping(directory, short, file_name)
        nbytes = sum(len(c) if isinstance(c, (bytes, str)) else c.nbytes for c in chunks)
        self.progress.add(files=1, nbytes=nbytes, step=step)
        return path

    def _add_mapping(self, directory, short, original):
        with self._lock:
            mapping = self._mappings.setdefault(directory, {})
            mapping[short] = original
            text = "".join(f"{k},{v}\n" for k, v in sorted(mapping.items()))
            write_atomic(os.path.join(directory, layout.MAPPING_FILE), text)

    @staticmethod
    def _specs(info, arrays, direction):
        return [TensorSpec(array, slot.dtype_name) for slot, array in zip(info.slots, arrays)
                if slot.direction == direction]

    def _dump_op(self, model, info, step, arrays):
        timestamp = self._timestamp(step, info.task_id)
        directory = self.iteration_dir(model, step)
        name = layout.dump_file_name(info.op_type, info.name, info.task_id, 0, timestamp)
        if self.settings.data == "stats":
            rows = []
            for slot, array in zip(info.slots, arrays):
                rows.append(stats_row("Input" if slot.direction == "input" else "Output",
                                      slot.index, array, slot.dtype_name, "FORMAT_ND"))
            self._write(directory, name + ".csv", [write_stats_csv(rows).encode("utf-8")],
                        step)
            return
        inputs = self._specs(info, arrays, "input")
        outputs = self._specs(info, arrays, "output")
        header = build_header(info.name, inputs, outputs, timestamp)
        self._write(directory, name, encode_dump(header, inputs + outputs), step)

    def _check_overflow(self, model, info, step, arrays):
        found = None
        for slot, array in zip(info.slots, arrays):
            if slot.direction == "output":
                kind = overflow_kind(array, self.settings.emulated_dtype)
                if kind is not None:
                    found = (slot.index, kind)
                    break
        if found is None:
            return
        inputs_finite = all(overflow_kind(array) is None for slot, array in
                            zip(info.slots, arrays) if slot.direction == "input")
        timestamp = self._timestamp(step, info.task_id)
        directory = self.iteration_dir(model, step)
        inputs = self._specs(info, arrays, "input")
        outputs = self._specs(info, arrays, "output")
        name = layout.dump_file_name(info.op_type, info.name, info.task_id, 0, timestamp)
        path = self._write(directory, name, encode_dump(
            build_header(info.name, inputs, outputs, timestamp), inputs + outputs), step)
        global_step = _global_step()
        attrs = [("model_name", model.name), ("model_id", model.model_id), ("step", step),
                 ("op_name", info.name), ("op_type", info.op_type), ("task_id", info.task_id),
                 ("output_index", found[0]), ("overflow", found[1]),
                 ("inputs_finite", str(inputs_finite).lower())]
        if global_step is not None:
            attrs.append(("global_step", global_step))
        debug_name = layout.dump_file_name(layout.OPDEBUG_TYPE, layout.OPDEBUG_NAME,
                                           info.task_id, 0, timestamp)
        self._write(directory, debug_name, encode_dump(
            build_header(layout.OPDEBUG_NAME, dump_time=timestamp, attrs=attrs)), step)
        event = OverflowEvent(model.name, model.model_id, step, info.name, info.op_type,
                              info.task_id, found[0], found[1], inputs_finite,
                              os.path.relpath(path, self.settings.dump_path), global_step)
        first = self.overflows.add(event)
        self._write_overflow_summary()
        if first:
            self._say(f"npu-adapter: overflow in {model.name} at step {step} starts at "
                      f"{info.name} ({info.op_type}): output {found[0]} is {found[1]}; see "
                      f"{os.path.join(self.settings.dump_path, self.time_dir, SUMMARY_FILE)}")

    def _write_overflow_summary(self):
        # Snapshot and write under one lock: a writer holding an older snapshot must not
        # replace the file after one holding a newer snapshot.
        with self._summary_lock:
            if len(self.overflows):
                self.overflows.write(layout.safe_join(self.settings.dump_path, self.time_dir))

    def _say(self, line):
        import sys

        stream = self._stream or sys.stderr
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass

    # ---- lifetime -----------------------------------------------------------------------

    def close(self):
        """Release the callbacks and print the last progress line. Runs of the instrumented
        graph after this fail; call it when the TensorFlow session closes. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            tokens, self._tokens = self._tokens, []
            self._callbacks = []
        for token in tokens:
            tf_compat.unregister_py_func(token)
        with _LIVE_LOCK:
            _LIVE.pop(self.serial, None)
        self._write_overflow_summary()
        self.progress.close()

    @property
    def closed(self):
        """True after :meth:`close`."""
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _global_step():
    """The training step ``TellMeStepOrLossHook`` last wrote to ``STEP_NOW``, if any."""
    text = os.environ.get("STEP_NOW", "")
    return int(text) if text.strip().isdigit() else None
