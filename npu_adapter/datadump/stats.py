"""Statistics dumps (``dump_data=stats``): one CSV per op execution instead of the tensors.

The header is the device's default::

    Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value,Count,
    Nan Count,Negative Inf Count,Positive Inf Count

One row per dumped tensor: ``Input`` or ``Output``, its index, its size in bytes, its data type
(``DT_FLOAT``), its format without the ``FORMAT_`` prefix (``ND``), its shape joined by ``x``
(``1x3x224x224``; a scalar, which has no dims, gives an empty cell), then the statistics.
``Max``, ``Min`` and ``Avg`` are taken over the finite values (so one ``inf`` does not hide the
range of the others) and are ``NA`` when there is none or the type has no order (complex);
``Count`` is the number of elements. Values are written with ``repr`` of a Python float (the
shortest text that reads back to the same double), integers as integers.
"""

import csv
import io

import numpy as np

__all__ = ["STATS_HEADER", "read_stats_csv", "shape_text", "stats_row", "tensor_stats",
           "write_stats_csv"]

STATS_HEADER = ("Input/Output", "Index", "Data Size", "Data Type", "Format", "Shape",
                "Max Value", "Min Value", "Avg Value", "Count", "Nan Count",
                "Negative Inf Count", "Positive Inf Count")
NA = "NA"


def shape_text(shape):
    """``[1, 3, 224, 224]`` → ``"1x3x224x224"``; a scalar (no dims) → ``""``, as joining the dims
    gives (the device writes ``-`` only for an unknown shape, which a dumped tensor never has)."""
    return "x".join(str(int(d)) for d in shape)


def _number(value):
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return repr(float(value))


def tensor_stats(array):
    """``{"max", "min", "avg", "count", "nan", "neg_inf", "pos_inf"}`` of ``array``.

    ``max``/``min``/``avg`` are over the finite values (None when there are none, or for complex
    values); integers and booleans keep their exact values; ``avg`` is computed in float64.
    """
    values = np.asarray(array)
    count = int(values.size)
    result = {"count": count, "nan": 0, "neg_inf": 0, "pos_inf": 0,
              "max": None, "min": None, "avg": None}
    if count == 0 or np.iscomplexobj(values):
        return result
    if values.dtype.kind == "f" or values.dtype.name == "bfloat16":
        wide = values.astype(np.float64)
        nan = np.isnan(wide)
        pos = np.isposinf(wide)
        neg = np.isneginf(wide)
        result.update(nan=int(nan.sum()), pos_inf=int(pos.sum()), neg_inf=int(neg.sum()))
        finite = wide[~(nan | pos | neg)]
        if finite.size:
            result.update(max=float(finite.max()), min=float(finite.min()),
                          avg=float(finite.mean()))
        return result
    if values.dtype.kind == "b":
        values = values.astype(np.int64)
    result.update(max=values.max().item(), min=values.min().item(),
                  avg=float(values.astype(np.float64).mean()))
    return result


def stats_row(direction, index, array, dtype_name, format_name):
    """One CSV row (a list of strings) for tensor ``index`` (``"Input"``/``"Output"``)."""
    stats = tensor_stats(array)
    fmt = format_name[len("FORMAT_"):] if format_name.startswith("FORMAT_") else format_name

    def value(key):
        return NA if stats[key] is None else _number(stats[key])

    return [direction, str(index), str(np.asarray(array).nbytes), dtype_name, fmt,
            shape_text(np.shape(array)), value("max"), value("min"), value("avg"),
            str(stats["count"]), str(stats["nan"]), str(stats["neg_inf"]), str(stats["pos_inf"])]


def write_stats_csv(rows):
    """The CSV text (with header) of ``rows`` built by :func:`stats_row`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(STATS_HEADER)
    writer.writerows(rows)
    return out.getvalue()


def read_stats_csv(text):
    """Parse a statistics CSV into a list of dicts keyed by the header's column names."""
    reader = csv.DictReader(io.StringIO(text))
    return [dict(row) for row in reader]
