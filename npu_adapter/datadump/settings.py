"""``DumpSettings``: what a session dumps, read from its ``NpuOptimizer`` options.

Data dump (``enable_dump``) writes the inputs and/or outputs of every op of every cluster, or of
the ops named in ``dump_layer``, at the steps of ``dump_step``, as tensors or statistics
(``dump_data``). Overflow detection (``enable_dump_debug``) writes only the ops whose results
overflow (inf or nan; with precision emulation on, also float32 values beyond the emulated
type's range). The option table checks each value; :meth:`DumpSettings.from_config` turns the
effective values into settings, or None when neither switch is on.
"""

import dataclasses
import os

from npu_adapter.config import parsers
from npu_adapter.errors import NpuConfigError

__all__ = ["DumpSettings", "device_id_from", "emulated_dtype_of"]

# Precision modes whose device ops compute in float16 / bfloat16 (see docs/data-dump.md).


def device_id_from(config, environ):
    """The device id of the dump path: ``session_device_id`` when set, else ``ASCEND_DEVICE_ID``,
    else ``DEVICE_ID``, else 0. A variable that is not an integer >= 0 is an error."""
    session_device = config.get("session_device_id", -1)
    if session_device is not None and session_device >= 0:
        return int(session_device)
    for name in ("ASCEND_DEVICE_ID", "DEVICE_ID"):
        text = environ.get(name)
        if text is None or text == "":
            continue
        if not text.strip().isdigit():
            raise NpuConfigError(name, text, "an integer >= 0",
                                 detail="environment variable naming the device")
        return int(text)
    return 0


def emulated_dtype_of(config):
    """``"float16"``/``"bfloat16"`` when precision emulation is on
    (``npu_adapter_emulate_precision=on``) and the precision mode makes device ops compute in
    that type (as :mod:`npu_adapter.precision` resolves it); else None."""
    from npu_adapter.precision.policy import (
        DT_BFLOAT16,
        FORCE_FP32,
        ORIGIN,
        emulation_enabled,
        resolve_mode,
    )

    if not emulation_enabled(config):
        return None
    mode, low, _ = resolve_mode(config)
    if mode in (FORCE_FP32, ORIGIN):
        return None
    return "bfloat16" if low == DT_BFLOAT16 else "float16"


@dataclasses.dataclass(frozen=True)
class DumpSettings:
    """What to dump and where.

    Attributes:
        dump_path: the realpath of ``dump_path``.
        kind: ``"dump"`` (``enable_dump``) or ``"overflow"`` (``enable_dump_debug``).
        steps: ``dump_step`` as inclusive ``(first, last)`` ranges; empty means every step.
        mode: ``dump_mode``: ``input``, ``output`` or ``all``.
        data: ``dump_data``: ``tensor`` or ``stats``.
        layer: ``dump_layer`` op names; empty means every op.
        debug_mode: ``dump_debug_mode``: ``aicore_overflow``, ``atomic_overflow`` or ``all``.
        device_id: the ``{device_id}`` level of the layout.
        emulated_dtype: see :func:`emulated_dtype_of`.
        epoch: seconds since the epoch to derive times from instead of the clock
            (``SOURCE_DATE_EPOCH``), for byte-identical dump trees; None uses the clock.
    """

    dump_path: str
    kind: str = "dump"
    steps: tuple = ()
    mode: str = "output"
    data: str = "tensor"
    layer: frozenset = frozenset()
    debug_mode: str = "all"
    device_id: int = 0
    emulated_dtype: object = None
    epoch: object = None

    @classmethod
    def from_config(cls, config, environ=None):
        """Settings for an :class:`~npu_adapter.config.NpuConfig`, or None when neither
        ``enable_dump`` nor ``enable_dump_debug`` is on (nothing is instrumented then)."""
        environ = os.environ if environ is None else environ
        if not (config.get("enable_dump") or config.get("enable_dump_debug")):
            return None
        kind = "dump" if config.get("enable_dump") else "overflow"
        steps = tuple(parsers.parse_dump_step(config.dump_step)) if config.dump_step else ()
        epoch = environ.get("SOURCE_DATE_EPOCH")
        if epoch is not None and epoch != "":
            if not epoch.strip().isdigit():
                raise NpuConfigError("SOURCE_DATE_EPOCH", epoch, "seconds since the epoch",
                                     detail="environment variable")
            epoch = int(epoch)
        else:
            epoch = None
        return cls(
            dump_path=os.path.realpath(config.dump_path),
            kind=kind,
            steps=steps,
            mode=config.dump_mode,
            data=config.dump_data,
            layer=frozenset(config.dump_layer.split()),
            debug_mode=config.dump_debug_mode,
            device_id=device_id_from(config, environ),
            emulated_dtype=emulated_dtype_of(config),
            epoch=epoch,
        )

    def step_selected(self, step):
        """True when iteration ``step`` is dumped."""
        if not self.steps:
            return True
        return any(first <= step <= last for first, last in self.steps)

    @property
    def wants_inputs(self):
        """Inputs are dumped (``dump_mode`` input/all; overflow dumps always hold them)."""
        return self.kind == "overflow" or self.mode in ("input", "all")

    @property
    def wants_outputs(self):
        """Outputs are dumped (``dump_mode`` output/all; overflow checks need them)."""
        return self.kind == "overflow" or self.mode in ("output", "all")
