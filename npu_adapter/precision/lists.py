"""The mixed-precision lists: per op type, white (may run in low precision), black (keeps
float32) or gray (follows the op that feeds it), and where that comes from.

The default lists are data (``third_party/precision_lists.json``, sources in
``third_party/SOURCES.md``): the ``precision_reduce`` flag of CANN's own op definitions where the
open-sourced CANN op repositories have the op, TensorFlow's auto-mixed-precision lists for the
ops they do not cover, and gray for every other op. Entries are keyed by TensorFlow op type; the
Ascend IR name (``MatMul`` → ``MatMulV2``, ``Sum`` → ``ReduceSum``, ...) is kept too, because
``modify_mixlist`` and ``customize_dtypes`` files name Ascend IR op types. Both names are accepted
in those files.
"""

import dataclasses
import functools
import importlib.resources
import json

from npu_adapter.errors import NpuAdapterError

__all__ = ["LISTS", "ListEntry", "PrecisionLists", "default_precision_lists",
           "LISTS_FILE_NAME"]

LISTS = ("white", "black", "gray")
LISTS_FILE_NAME = "precision_lists.json"
_FORMAT = "npu_adapter.precision_lists/1"
_PACKAGE = "npu_adapter.third_party"


@dataclasses.dataclass(frozen=True)
class ListEntry:
    """What the lists say about one TensorFlow op type.

    Attributes:
        op: the TensorFlow op type.
        list: ``"white"``, ``"black"`` or ``"gray"``.
        source: ``"cann"`` (CANN op definition), ``"tensorflow"`` (TensorFlow's AMP lists),
            ``"none"`` (in no source: gray) or ``"modify_mixlist"`` (moved by the user's file).
        ref: where in the source (file, or TF list name, or the mixlist edit).
        ir: the Ascend IR op type (the TF name when it is the same).
        cube: a matrix ("cube") op: MatMul, BatchMatMul, convolutions.
        fp32: the device has a float32 kernel for it (false only where the source says so).
    """

    op: str
    list: str = "gray"
    source: str = "none"
    ref: str = ""
    ir: str = ""
    cube: bool = False
    fp32: bool = True

    @property
    def ir_name(self):
        """The Ascend IR op type."""
        return self.ir or self.op


class PrecisionLists:
    """The lists in force: the defaults, possibly edited by a ``modify_mixlist`` file.

    ``entry(op_type)`` answers for any op type (unlisted ones are gray, source ``none``).
    """

    def __init__(self, entries, overrides=None, origin="bundled"):
        self._entries = dict(entries)
        # name (TF or IR op type) → (list, ref) set by modify_mixlist
        self._overrides = dict(overrides or {})
        self.origin = origin

    def base_entry(self, op_type):
        """The default entry of ``op_type`` (no mixlist edit applied)."""
        entry = self._entries.get(op_type)
        return entry if entry is not None else ListEntry(op=op_type)

    def entry(self, op_type):
        """The entry of ``op_type`` with the mixlist edits applied."""
        entry = self.base_entry(op_type)
        for key in (op_type, entry.ir_name):
            if key in self._overrides:
                listed, ref = self._overrides[key]
                return dataclasses.replace(entry, list=listed, source="modify_mixlist", ref=ref)
        return entry

    def op_types(self):
        """Sorted TensorFlow op types with a default entry."""
        return sorted(self._entries)

    def ir_names(self):
        """Every name (TF and IR) the defaults know."""
        names = set(self._entries)
        names.update(e.ir_name for e in self._entries.values())
        return names

    def with_edits(self, edits):
        """A copy with ``edits`` applied: a :class:`~npu_adapter.precision.mixlist.MixlistEdits`.

        Returns ``(lists, changes)``: ``changes`` maps each edited name to
        ``(list before, list after, ref)``. Following the documented rules: ``to-add`` puts the
        op in that list (taking it out of the others); ``to-remove`` alone takes it out of the
        list it is in, which leaves it gray; ``to-remove`` from a list the op is not in changes
        nothing.
        """
        overrides = dict(self._overrides)
        changes = {}
        added = {}
        for item in edits.entries:
            if item.action == "to-add":
                added[item.name] = item
        for item in edits.entries:
            before = self._current(item.name, overrides)
            if item.action == "to-add":
                after = item.list
            elif item.name in added:
                continue  # also added to another list: that wins (documented example b)
            else:
                after = "gray" if before == item.list else before
            ref = f"{edits.path}:{item.line}: {item.list} {item.action} {item.name}"
            overrides[item.name] = (after, ref)
            changes[item.name] = (before, after, ref)
        return PrecisionLists(self._entries, overrides, self.origin), changes

    def _current(self, name, overrides):
        if name in overrides:
            return overrides[name][0]
        for entry in self._entries.values():
            if name in (entry.op, entry.ir_name):
                return entry.list
        return "gray"


def parse_lists_json(text, where):
    """Parse the lists file; ``NpuAdapterError`` naming ``where`` when it is malformed."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NpuAdapterError(f"{where}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise NpuAdapterError(f"{where}: not a precision list file (format {_FORMAT!r})")
    entries = {}
    for op, raw in sorted(doc.get("ops", {}).items()):
        if not isinstance(raw, dict) or raw.get("list") not in LISTS:
            raise NpuAdapterError(f"{where}: entry {op!r} needs a list in {list(LISTS)}")
        entries[op] = ListEntry(op=op, list=raw["list"], source=raw.get("source", "none"),
                                ref=raw.get("ref", ""), ir=raw.get("ir", ""),
                                cube=bool(raw.get("cube", False)),
                                fp32=bool(raw.get("fp32", True)))
    return entries


@functools.cache
def default_precision_lists():
    """The bundled default lists (read once)."""
    resource = importlib.resources.files(_PACKAGE) / LISTS_FILE_NAME
    try:
        text = resource.read_text(encoding="utf-8")
    except OSError as exc:
        raise NpuAdapterError(f"the bundled precision lists {resource} cannot be read ({exc}); "
                              "reinstall npu-adapter") from exc
    return PrecisionLists(parse_lists_json(text, str(resource)))
