"""Test values: reproducible inputs and a bit-for-bit comparison that says where and by how much
two results differ."""

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

__all__ = ["Difference", "difference", "format_number", "seeded_array"]


def seeded_array(seed, shape, dtype="float32"):
    """A reproducible array: standard-normal floats, integers in [-5, 5], or booleans.

    The same ``seed``, ``shape`` and ``dtype`` give the same values on every machine (NumPy's
    ``RandomState`` stream is frozen), so a printed reproducer carries its data as a seed.
    """
    rng = np.random.RandomState(seed)
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.randint(-5 if dtype.kind == "i" else 0, 6, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.randint(0, 2, shape).astype(bool)
    raise ValueError(f"seeded_array makes float, integer or bool arrays, not {dtype.name}")


def format_number(value):
    """A number as text for messages: integers whole, floats as the shortest text that reads
    back as the same value of their own dtype (two neighbouring float32 values print apart)."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (bytes, np.bytes_)):
        return '"' + value.decode("utf-8", "backslashreplace") + '"'
    if isinstance(value, np.floating):
        return str(value)
    if isinstance(value, float):
        return str(np.float64(value))
    return str(value)


def _shape_text(dtype, shape):
    return f"{dtype.name}[{', '.join(str(d) for d in shape)}]"


@dataclass(frozen=True)
class Difference:
    """How ``actual`` differs from ``expected`` (see :func:`difference`)."""

    expected_type: str
    actual_type: str
    differing: int = 0
    size: int = 0
    first_index: Optional[Tuple[int, ...]] = None
    expected_value: str = ""
    actual_value: str = ""
    max_abs_diff: Optional[float] = None
    max_ulp: Optional[int] = None

    def describe(self):
        """One line: the types, or how many elements differ, by how much and where first."""
        if self.expected_type != self.actual_type:
            return f"expected {self.expected_type}, got {self.actual_type}"
        text = f"{self.expected_type}: {self.differing} of {self.size} elements differ"
        if self.max_abs_diff is not None:
            text += f", max abs diff {self.max_abs_diff:.3g}"
            if self.max_ulp is not None:
                text += f" ({self.max_ulp} ulp)"
        where = "[" + ", ".join(str(i) for i in self.first_index) + "]"
        return (f"{text}; first at {where}: expected {self.expected_value}, "
                f"got {self.actual_value}")


def _ordered_ints(array):
    """Float bits as integers ordered like the floats (adjacent floats differ by 1)."""
    bits = array.view({2: np.int16, 4: np.int32, 8: np.int64}[array.dtype.itemsize])
    low = np.iinfo(bits.dtype).min
    return np.where(bits < 0, low - bits.astype(object if bits.itemsize == 8 else np.int64),
                    bits.astype(object if bits.itemsize == 8 else np.int64))


def difference(expected, actual):
    """None when ``actual`` equals ``expected`` bit for bit (same dtype and shape; NaNs equal
    NaNs), else a :class:`Difference`."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    expected_type = _shape_text(expected.dtype, expected.shape)
    actual_type = _shape_text(actual.dtype, actual.shape)
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return Difference(expected_type, actual_type)
    if expected.tobytes() == actual.tobytes() and expected.dtype.kind != "O":
        return None
    floating = expected.dtype.kind in "fc"
    if floating:
        same = (expected == actual) | (np.isnan(expected) & np.isnan(actual))
    else:
        same = expected == actual
    same = np.asarray(same)
    if same.all():
        return None  # e.g. 0.0 and -0.0, or equal objects with different buffers
    differing = np.argwhere(~same) if same.ndim else np.zeros((1, 0), int)
    first = tuple(int(i) for i in differing[0])
    max_abs = max_ulp = None
    if expected.dtype.kind in "fciu":
        both = ~same & ~(np.isnan(expected) | np.isnan(actual)) if floating else ~same
        if np.any(both):
            gaps = np.abs(expected.astype(np.float64) - actual.astype(np.float64))[both] \
                if expected.dtype.kind != "c" else np.abs(expected - actual)[both]
            max_abs = float(np.max(gaps))
            if expected.dtype.kind == "f":
                max_ulp = int(np.max(np.abs(_ordered_ints(expected[both])
                                            - _ordered_ints(actual[both]))))
    return Difference(expected_type, actual_type, differing=int(np.count_nonzero(~same)),
                      size=int(expected.size), first_index=first,
                      expected_value=format_number(expected[first]),
                      actual_value=format_number(actual[first]),
                      max_abs_diff=max_abs, max_ulp=max_ulp)
