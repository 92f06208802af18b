"""``accelerate_train_mode``: train the first part in low precision, then switch back once.

``experimental_accelerate_train_mode`` (session option) or ``ExperimentalConfig(
accelerate_train_mode=...)`` is ``type|mode[|ratio]``: type ``fast`` (float16) or ``fast1``
(bfloat16); mode ``step`` (ratio 0.2–0.9, default 0.9) or ``loss`` (ratio 1.01–1.5, default
1.05). Like the original GeOp:

* the low-precision phase uses ``precision_mode=allow_mix_precision_fp16`` (``fast``) or
  ``allow_mix_precision_bf16`` (``fast1``); with ``precision_mode_v2`` set, ``mixed_float16`` /
  ``mixed_bfloat16``. It is allowed only when the session's own mode is
  ``allow_fp32_to_fp16``, ``must_keep_origin_dtype`` or unset (``precision_mode``), or ``origin``
  or unset (``precision_mode_v2``); anything else is an :class:`AccelerateTrainModeError`;
* ``TellMeStepOrLossHook`` reports progress through the environment (``STEP_NOW`` /
  ``TOTAL_STEP`` or ``LOSS_NOW`` / ``TARGET_LOSS``), read before each run;
* step mode switches when ``STEP_NOW >= int(TOTAL_STEP * ratio)`` or
  ``STEP_NOW + iterations_per_loop >= TOTAL_STEP``; loss mode when ``LOSS_NOW`` is not 0.0 (the
  value before the first report) and ``LOSS_NOW <= TARGET_LOSS * ratio`` (float32 arithmetic, as
  the original computes it);
* the switch happens once: from then on the original precision is used for good.

Without the hook's variables the schedule cannot decide and stays off (with one warning): the
session then runs in its own precision throughout.

A session applies it like this, before every ``run`` (see ``docs/precision.md``)::

    schedule = AccelerateTrainSchedule.from_config(config)   # None when the option is unset
    ...
    config_for_run = schedule.config_for_run(config)          # low phase: the mixed mode
    # rewrite with config_for_run (cache one rewrite per phase), run,
    # and report schedule.stats() with the session statistics.
"""

import dataclasses
import logging
import os
import warnings

import numpy as np

from npu_adapter.config.parsers import parse_accelerate_train_mode
from npu_adapter.config.warnings import NpuAdapterWarning
from npu_adapter.errors import NpuConfigError

__all__ = ["AccelerateTrainModeError", "AccelerateTrainSchedule", "low_precision_config",
           "PHASE_LOW", "PHASE_ORIGINAL", "PHASE_OFF"]

logger = logging.getLogger("npu_adapter.accelerate")

OPTION = "experimental_accelerate_train_mode"
PHASE_LOW = "low_precision"
PHASE_ORIGINAL = "original_precision"
PHASE_OFF = "off"
_LOW_V1 = {"fast": "allow_mix_precision_fp16", "fast1": "allow_mix_precision_bf16"}
_LOW_V2 = {"fast": "mixed_float16", "fast1": "mixed_bfloat16"}
_ORIGIN_V1 = ("allow_fp32_to_fp16", "must_keep_origin_dtype")
_ORIGIN_V2 = ("origin",)


class AccelerateTrainModeError(NpuConfigError):
    """``accelerate_train_mode`` cannot be used with the session's precision mode."""


def low_precision_config(config):
    """The ``NpuConfig`` of the low-precision phase of ``config``.

    Raises:
        AccelerateTrainModeError: the session's precision mode does not allow acceleration.
    """
    mode = parse_accelerate_train_mode(config.get(OPTION))
    if config.is_set("precision_mode_v2"):
        current = config.precision_mode_v2
        if current not in _ORIGIN_V2:
            raise AccelerateTrainModeError(
                f"{OPTION} + precision_mode_v2", {OPTION: config.get(OPTION),
                                                 "precision_mode_v2": current},
                f"precision_mode_v2 must be origin or unset for accelerate type {mode.type}")
        return config.replace(precision_mode_v2=_LOW_V2[mode.type])
    current = config.get("precision_mode")
    if current is not None and current not in _ORIGIN_V1:
        raise AccelerateTrainModeError(
            f"{OPTION} + precision_mode", {OPTION: config.get(OPTION), "precision_mode": current},
            f"precision_mode must be allow_fp32_to_fp16, must_keep_origin_dtype or unset for "
            f"accelerate type {mode.type}")
    return config.replace(precision_mode=_LOW_V1[mode.type])


@dataclasses.dataclass
class _Event:
    run: int
    value: float
    threshold: float


class AccelerateTrainSchedule:
    """Decides, before each run, whether training still runs in low precision.

    Build with :meth:`from_config`. Call :meth:`phase` (or :meth:`config_for_run`) once per
    ``session.run``; it reads the hook's environment variables and switches at most once.
    """

    def __init__(self, mode, iterations_per_loop=1, environ=None):
        self.mode = mode
        self.iterations_per_loop = max(int(iterations_per_loop), 1)
        self._environ = environ
        self._switched = None      # _Event once switched
        self._runs = 0
        self._low_runs = 0
        self._warned = False

    @classmethod
    def from_config(cls, config, environ=None):
        """The schedule of ``config`` (None when ``experimental_accelerate_train_mode`` is
        empty). Checks the precision-mode restriction now (AccelerateTrainModeError)."""
        text = config.get(OPTION) or ""
        if not text:
            return None
        low_precision_config(config)  # the restriction, checked once
        return cls(parse_accelerate_train_mode(text), config.iterations_per_loop, environ)

    @property
    def environ(self):
        return os.environ if self._environ is None else self._environ

    @property
    def switched(self):
        """True once the original precision is back."""
        return self._switched is not None

    def _read(self, name, kind):
        text = self.environ.get(name)
        if text is None or text == "":
            return None
        try:
            return kind(text)
        except ValueError:
            raise NpuConfigError(name, text, f"a {kind.__name__} written by "
                                 "TellMeStepOrLossHook",
                                 detail=f"environment variable read for {OPTION}") from None

    def _triggered(self):
        """``(triggered, value, threshold)``, or None when the hook's variables are missing."""
        ratio = np.float32(self.mode.ratio)
        if self.mode.mode == "step":
            total, now = self._read("TOTAL_STEP", int), self._read("STEP_NOW", int)
            if total is None or now is None:
                return None
            threshold = int(np.float32(total) * ratio)
            hit = now >= threshold or now + self.iterations_per_loop >= total
            return hit, now, threshold
        target, now = self._read("TARGET_LOSS", float), self._read("LOSS_NOW", float)
        if target is None or now is None:
            return None
        threshold = np.float32(target) * ratio
        now32 = np.float32(now)
        return bool(now32 != 0.0 and now32 <= threshold), now, float(threshold)

    def phase(self):
        """The phase of the coming run: :data:`PHASE_LOW`, :data:`PHASE_ORIGINAL` (after the
        switch) or :data:`PHASE_OFF` (no hook: the session's own precision)."""
        self._runs += 1
        if self._switched is not None:
            return PHASE_ORIGINAL
        state = self._triggered()
        if state is None:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"{OPTION}={self._text()} cannot take effect: no TellMeStepOrLossHook "
                    f"reports the {'step' if self.mode.mode == 'step' else 'loss'} "
                    "(environment variables STEP_NOW/TOTAL_STEP or LOSS_NOW/TARGET_LOSS are "
                    "not set); training runs in the session's own precision",
                    NpuAdapterWarning, stacklevel=2)
            return PHASE_OFF
        hit, value, threshold = state
        if hit:
            self._switched = _Event(self._runs, value, threshold)
            logger.warning("accelerate_train_mode %s: switching to the original precision at "
                           "run %d (%s now %s, threshold %s)", self._text(), self._runs,
                           self.mode.mode, value, threshold)
            return PHASE_ORIGINAL
        self._low_runs += 1
        return PHASE_LOW

    def config_for_run(self, config):
        """The config the coming run must be rewritten with (calls :meth:`phase`)."""
        return low_precision_config(config) if self.phase() == PHASE_LOW else config

    def stats(self):
        """Session statistics (like ``npu_gear_stats``): runs, low-precision runs, the switch."""
        event = self._switched
        return {
            "accelerate_train_mode": self._text(),
            "low_precision_dtype": "bfloat16" if self.mode.type == "fast1" else "float16",
            "runs": self._runs,
            "low_precision_runs": self._low_runs,
            "switched": event is not None,
            "switched_at_run": event.run if event else None,
            "switched_at_value": event.value if event else None,
            "threshold": event.threshold if event else None,
        }

    def _text(self):
        return f"{self.mode.type}|{self.mode.mode}|{self.mode.ratio:g}"
