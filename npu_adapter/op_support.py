"""Op-support lists: which TensorFlow op types a device backend can run
(docs/original-adapter.md, 4).

The original TF Adapter reads ``npu_supported_ops.json`` files (``{OpType: {"isGray": bool,
"isHeavy": bool}}``) from the CANN operator package (``$ASCEND_OPP_PATH``). We read the same
files in the same order when ``ASCEND_OPP_PATH`` points at a directory, and otherwise use a
bundled default list built from public evidence (``third_party/npu_supported_ops.json``;
``third_party/SOURCES.md`` says where it comes from).

This module holds the data side only: :class:`OpSupportList`, the loader
:func:`load_op_support_list` and the per-op "white list" predicate :func:`is_op_supported`. The
graph-level rules (function bodies, infection over string/resource edges, control-flow frames)
belong to the candidate-marking pass.
"""

import collections
import dataclasses
import importlib.resources
import json
import logging
import os
import threading
import warnings
from collections.abc import Mapping

from npu_adapter.errors import NpuAdapterError
from npu_adapter.vocabulary import (
    REASON_ARG_RETVAL,
    REASON_CONST_NOT_SUPPORTED_HERE,
    REASON_DATASET_OP,
    REASON_GRAY_OP_IN_MIX_MODE,
    REASON_STRING_JOIN,
    REASON_SUPPORTED,
    REASON_UNSUPPORTED_OP,
    REASON_WITHOUT_NPU_COMPILE_SCOPE,
)

__all__ = [
    "OpInfo",
    "OpSupportList",
    "OpSupportWarning",
    "ORIGINS",
    "ORIGIN_BUNDLED",
    "ORIGIN_ASCEND_OPP",
    "ORIGIN_USER",
    "REASON_CODES",
    "REASON_SUPPORTED",
    "REASON_UNSUPPORTED_OP",
    "REASON_GRAY_OP_IN_MIX_MODE",
    "REASON_WITHOUT_NPU_COMPILE_SCOPE",
    "REASON_DATASET_OP",
    "REASON_CONST_NOT_SUPPORTED_HERE",
    "REASON_ARG_RETVAL",
    "REASON_STRING_JOIN",
    "ORIGINAL_TEST_FIXTURE_OPS",
    "OP_LIST_FILE_NAME",
    "bundled_op_support_list",
    "clear_cache",
    "default_op_support",
    "is_op_supported",
    "load_op_support_list",
    "original_test_fixture_list",
]

logger = logging.getLogger(__name__)

OP_LIST_FILE_NAME = "npu_supported_ops.json"

ORIGIN_BUNDLED = "bundled"
ORIGIN_ASCEND_OPP = "ascend_opp"
# Lists built in code (tests, fixtures, user-supplied names) are neither of the two above; a
# placement report that said "not in the bundled list" for them would be wrong.
ORIGIN_USER = "user"
ORIGINS = (ORIGIN_BUNDLED, ORIGIN_ASCEND_OPP, ORIGIN_USER)

REASON_CODES = (
    REASON_SUPPORTED,
    REASON_UNSUPPORTED_OP,
    REASON_GRAY_OP_IN_MIX_MODE,
    REASON_WITHOUT_NPU_COMPILE_SCOPE,
    REASON_DATASET_OP,
    REASON_CONST_NOT_SUPPORTED_HERE,
    REASON_ARG_RETVAL,
    REASON_STRING_JOIN,
)

# The 37 ops of the original's unit-test list
# (tf_adapter/tests/depends/support_json/framework/built-in/tensorflow/npu_supported_ops.json),
# none of them gray. Tests of other modules build the same list to reproduce the original's cases.
ORIGINAL_TEST_FIXTURE_OPS = (
    "Abs",
    "AccumulateNV2",
    "Add",
    "AddV2",
    "ApplyMomentum",
    "ArgMax",
    "Cast",
    "Const",
    "Enter",
    "Exit",
    "Floor",
    "Greater",
    "Identity",
    "If",
    "IsVariableInitialized",
    "Less",
    "LogicalNot",
    "LoopCond",
    "MatMul",
    "Merge",
    "Mul",
    "NextIteration",
    "NoOp",
    "Pack",
    "Placeholder",
    "PlaceholderWithDefault",
    "RandomUniformInt",
    "Softmax",
    "Squeeze",
    "StridedSlice",
    "Sub",
    "Sum",
    "Switch",
    "Unique",
    "VariableV2",
    "Where",
    "_Retval",
)

_BUNDLED_PACKAGE = "npu_adapter.third_party"
_GRAY_KEY = "isGray"
_HEAVY_KEY = "isHeavy"
_FLAG_KEYS = ((_GRAY_KEY, "is_gray"), (_HEAVY_KEY, "is_heavy"))
_ARG_RETVAL_OPS = ("_Arg", "_Retval")
_DATASET_SUFFIXES = ("Dataset", "DatasetV2")
_CACHE_MAX_ENTRIES = 32


class OpSupportWarning(UserWarning):
    """An op-support file or configuration entry was ignored (malformed, unreadable, invalid)."""


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """Flags of one listed op type.

    Attributes:
        is_gray: ``isGray`` of the JSON; in ``mix_compile_mode`` a gray op counts as unsupported.
        is_heavy: ``isHeavy`` ("performance sensitive"); exposed, unused by the partitioner.
    """

    is_gray: bool = False
    is_heavy: bool = False

    def __post_init__(self):
        for field in ("is_gray", "is_heavy"):
            value = getattr(self, field)
            if not isinstance(value, bool):
                raise TypeError(f"OpInfo.{field} must be a bool, got {value!r}")


class OpSupportList(Mapping):
    """Immutable mapping op type → :class:`OpInfo`, with where it came from.

    Iteration, :meth:`keys` and :meth:`names` are in sorted order, so anything derived from a list
    is deterministic. Two lists are equal when they hold the same ops with the same flags
    (``sources`` and ``origin`` are provenance, not content).

    Attributes:
        sources: tuple of the files the list was built from, in load order (later files override
            earlier ones); empty for lists built in code.
        origin: ``"bundled"`` (our default list), ``"ascend_opp"`` (read from a CANN operator
            package) or ``"user"`` (built in code, e.g. :meth:`from_names`).
    """

    __slots__ = ("_ops", "_names", "_sources", "_origin", "_hash", "_fingerprint")

    def __init__(self, ops=None, *, sources=(), origin=ORIGIN_USER):
        """Build a list from a mapping op type → OpInfo (copied)."""
        if origin not in ORIGINS:
            raise ValueError(f"OpSupportList origin must be one of {ORIGINS}, got {origin!r}")
        table = dict(ops or {})
        for op, info in table.items():
            if not isinstance(op, str) or not op:
                raise TypeError(f"op types must be non-empty strings, got {op!r}")
            if not isinstance(info, OpInfo):
                raise TypeError(f"the value for op {op!r} must be an OpInfo, got {info!r}")
        if isinstance(sources, str):
            sources = (sources,)
        object.__setattr__(self, "_ops", table)
        object.__setattr__(self, "_names", tuple(sorted(table)))
        object.__setattr__(self, "_sources", tuple(str(s) for s in sources))
        object.__setattr__(self, "_origin", origin)
        object.__setattr__(self, "_hash", None)
        object.__setattr__(self, "_fingerprint", None)

    def __setattr__(self, name, value):
        raise AttributeError(f"OpSupportList is immutable (cannot set {name!r})")

    @classmethod
    def from_names(cls, names, gray=(), heavy=(), *, origin=ORIGIN_USER, sources=()):
        """Build a list from op type names; ``gray``/``heavy`` name the ops with those flags.

        Raises:
            ValueError: ``gray`` or ``heavy`` names an op that is not in ``names``.
        """
        if isinstance(names, str) or isinstance(gray, str) or isinstance(heavy, str):
            raise TypeError("names, gray and heavy must be collections of op types, not a string")
        listed = list(names)
        known = set(listed)
        gray_set = set(gray)
        heavy_set = set(heavy)
        for label, flagged in (("gray", gray), ("heavy", heavy)):
            extra = sorted(op for op in set(flagged) if op not in known)
            if extra:
                raise ValueError(f"{label} ops {extra} are not in the list of names")
        table = {op: OpInfo(op in gray_set, op in heavy_set) for op in listed}
        return cls(table, sources=sources, origin=origin)

    @property
    def sources(self):
        """Files the list was built from, in load order."""
        return self._sources

    @property
    def origin(self):
        """``"bundled"``, ``"ascend_opp"`` or ``"user"``."""
        return self._origin

    def __getitem__(self, op_type):
        return self._ops[op_type]

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._ops)

    def __contains__(self, op_type):
        return op_type in self._ops

    def get(self, op_type, default=None):
        """The OpInfo of ``op_type``, or ``default`` when it is not listed."""
        return self._ops.get(op_type, default)

    def is_gray(self, op_type):
        """True when ``op_type`` is listed with ``isGray`` true (an unlisted op is not gray)."""
        info = self._ops.get(op_type)
        return info is not None and info.is_gray

    def is_heavy(self, op_type):
        """True when ``op_type`` is listed with ``isHeavy`` true (as ``IsPerformanceSensitive``)."""
        info = self._ops.get(op_type)
        return info is not None and info.is_heavy

    def names(self):
        """All listed op types, sorted."""
        return self._names

    def gray_names(self):
        """The listed op types with ``isGray`` true, sorted."""
        return tuple(op for op in self._names if self._ops[op].is_gray)

    def merged(self, other):
        """A new list: this one with ``other``'s entries added, ``other`` winning on conflicts.

        This is how the original combines a built-in list with a custom one (whole entries are
        replaced). ``sources`` are concatenated; ``origin`` is this list's.
        """
        if not isinstance(other, OpSupportList):
            other = OpSupportList(other)
        table = dict(self._ops)
        table.update(other._ops)
        return OpSupportList(table, sources=self._sources + other._sources, origin=self._origin)

    def to_json_dict(self):
        """The list in the original JSON shape, sorted: ``{op: {"isGray": .., "isHeavy": ..}}``."""
        return {
            op: {_GRAY_KEY: self._ops[op].is_gray, _HEAVY_KEY: self._ops[op].is_heavy}
            for op in self._names
        }

    def __eq__(self, other):
        if isinstance(other, OpSupportList):
            return self._ops == other._ops
        return Mapping.__eq__(self, other)

    def __hash__(self):
        if self._hash is None:
            items = tuple((op, self._ops[op]) for op in self._names)
            object.__setattr__(self, "_hash", hash(items))
        return self._hash

    def fingerprint(self):
        """A stable hex digest of the entries (not of the sources): equal lists, equal digest
        in every process (used to key cached rewrites)."""
        if self._fingerprint is None:
            import hashlib

            text = json.dumps(self.to_json_dict(), sort_keys=True).encode()
            object.__setattr__(self, "_fingerprint", hashlib.sha256(text).hexdigest())
        return self._fingerprint

    def __repr__(self):
        gray = sum(1 for info in self._ops.values() if info.is_gray)
        return (
            f"OpSupportList({len(self._ops)} ops, {gray} gray, origin={self._origin!r}, "
            f"sources={list(self._sources)!r})"
        )


# ---------------------------------------------------------------------------------------------
# Parsing


def _describe(value):
    return f"{json.dumps(value)[:60]} ({type(value).__name__})"


def _parse_op_json(text):
    """Parse a JSON op list; returns ``(table, None)`` or ``(None, problem)``.

    Stricter than the original, which silently treats a non-object entry as "not listed" and a
    non-bool flag as false: a file with such entries is most likely broken as a whole, so it is
    rejected with a message instead of being half-used. Missing flags mean false (as there), and
    unknown keys inside an entry are ignored (forward compatibility).
    """
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        return None, f"is not valid JSON ({e})"
    if not isinstance(data, dict):
        return None, (
            f"must be a JSON object mapping op types to "
            f'{{"isGray": bool, "isHeavy": bool}}, but the top level is a {type(data).__name__}'
        )
    table = {}
    problems = []
    for op, entry in data.items():
        if not op:
            problems.append("an op type is the empty string")
            continue
        if not isinstance(entry, dict):
            problems.append(
                f'entry {op!r} is {_describe(entry)}; expected an object like {{"isGray": false, '
                f'"isHeavy": false}}'
            )
            continue
        flags = {}
        for key, field in _FLAG_KEYS:
            value = entry.get(key, False)
            if not isinstance(value, bool):
                problems.append(
                    f"entry {op!r}: {key!r} is {_describe(value)}; expected true or false"
                )
            flags[field] = value if isinstance(value, bool) else False
        table[op] = OpInfo(**flags)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        return None, f"has the wrong shape: {problems[0]}{more}"
    return table, None


def _warn(message):
    warnings.warn(message, OpSupportWarning, stacklevel=3)


def _read_op_file(path):
    """Read one op-list file; returns its table, or None when it contributes nothing."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except (FileNotFoundError, NotADirectoryError):
        logger.debug("op list %s does not exist; it contributes no ops", path)
        return None
    except OSError as e:
        _warn(f"op-support list {path} cannot be read ({e}); it contributes no ops")
        return None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        _warn(f"op-support list {path} is not UTF-8 text ({e}); it contributes no ops")
        return None
    table, problem = _parse_op_json(text)
    if problem is not None:
        _warn(f"op-support list {path} {problem}; it contributes no ops")
        return None
    logger.debug("op list %s: %d ops", path, len(table))
    return table


# ---------------------------------------------------------------------------------------------
# Bundled list

_BUNDLED_LOCK = threading.Lock()
_BUNDLED = []


def bundled_op_support_list():
    """Our default list (``third_party/npu_supported_ops.json``), origin ``"bundled"``.

    Raises:
        NpuAdapterError: the packaged file is missing or broken (an installation problem).
    """
    with _BUNDLED_LOCK:
        if _BUNDLED:
            return _BUNDLED[0]
        resource = importlib.resources.files(_BUNDLED_PACKAGE) / OP_LIST_FILE_NAME
        try:
            text = resource.read_text(encoding="utf-8")
        except OSError as e:
            raise NpuAdapterError(
                f"the bundled op-support list {resource} cannot be read ({e}); "
                f"reinstall npu-adapter"
            ) from e
        table, problem = _parse_op_json(text)
        if problem is not None:
            raise NpuAdapterError(
                f"the bundled op-support list {resource} {problem}; regenerate it with "
                f"third_party/generate_default_op_list.py"
            )
        result = OpSupportList(table, sources=(str(resource),), origin=ORIGIN_BUNDLED)
        _BUNDLED.append(result)
        return result


# ---------------------------------------------------------------------------------------------
# Loading from a CANN operator package (docs/original-adapter.md, 4)


def _op_json(*parts):
    return os.path.join(*parts, OP_LIST_FILE_NAME)


def _custom_opp_entries(custom_opp_paths, environ):
    if custom_opp_paths is None:
        value = environ.get("ASCEND_CUSTOM_OPP_PATH", "")
        return value.split(":") if value else []
    if isinstance(custom_opp_paths, (str, os.PathLike)):
        value = os.fspath(custom_opp_paths)
        return value.split(":") if value else []
    return [os.fspath(p) for p in custom_opp_paths]


def _vendors_from_config(config_path, problems):
    """Vendor names from ``<opp>/vendors/config.ini``, or None when the fallback applies.

    Like the original, only the first line counts and it must be ``key=value``; the value is a
    comma-separated list. Unlike the original (which keeps them and ends up reading
    ``<opp>/vendors//framework/...``), empty entries are skipped, and the key must be
    ``load_priority``.
    """
    try:
        with open(config_path, encoding="utf-8") as f:
            first_line = f.readline()
    except FileNotFoundError:
        logger.debug("%s does not exist; falling back to framework/custom", config_path)
        return None
    except (OSError, UnicodeDecodeError) as e:
        problems.append(
            f"{config_path} cannot be read ({e}); using <opp>/framework/custom/tensorflow/"
            f"{OP_LIST_FILE_NAME} instead of the vendor lists"
        )
        return None
    line = first_line.strip()
    parts = line.split("=")
    if len(parts) != 2 or parts[0].strip() != "load_priority":
        problems.append(
            f"{config_path} is malformed: its first line is {line!r}, expected "
            f"'load_priority=vendor1,vendor2,...'; using <opp>/framework/custom/tensorflow/"
            f"{OP_LIST_FILE_NAME} instead of the vendor lists"
        )
        return None
    vendors = [v.strip() for v in parts[1].split(",")]
    vendors = [v for v in vendors if v]
    if not vendors:
        problems.append(
            f"{config_path} is malformed: 'load_priority' names no vendor; using "
            f"<opp>/framework/custom/tensorflow/{OP_LIST_FILE_NAME} instead of the vendor lists"
        )
        return None
    return vendors


def _plan_files(base, custom_opp_paths, environ):
    """The op-list files to read, in load order, and the configuration problems found."""
    problems = []
    if not os.path.isdir(os.path.join(base, "built-in")):
        # Old layout; ASCEND_CUSTOM_OPP_PATH and vendors/ are not consulted there.
        return [
            _op_json(base, "framework", "built-in", "tensorflow"),
            _op_json(base, "framework", "custom", "tensorflow"),
        ], problems
    files = [_op_json(base, "built-in", "framework", "tensorflow")]
    for entry in _custom_opp_entries(custom_opp_paths, environ):
        if not entry:
            # `export ASCEND_CUSTOM_OPP_PATH=dir:$ASCEND_CUSTOM_OPP_PATH` (what CANN's custom-op
            # set_env.sh does) leaves an empty entry behind whenever the variable was unset;
            # warning about that would fire for nearly every install.
            logger.debug("ASCEND_CUSTOM_OPP_PATH has an empty entry; skipped")
            continue
        if not os.path.isdir(entry):
            problems.append(
                f"custom opp path {entry!r} (ASCEND_CUSTOM_OPP_PATH) is not a directory; skipped"
            )
            continue
        files.append(_op_json(entry, "framework", "tensorflow"))
    vendors = _vendors_from_config(os.path.join(base, "vendors", "config.ini"), problems)
    if vendors is None:
        files.append(_op_json(base, "framework", "custom", "tensorflow"))
    else:
        # Quirk kept from the original: files are merged in load_priority order with later
        # entries overwriting earlier ones, so the LAST vendor listed wins on conflicts, although
        # CANN itself treats the first vendor as the highest priority.
        files.extend(_op_json(base, "vendors", v, "framework", "tensorflow") for v in vendors)
    return files, problems


def _file_signature(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


_CACHE_LOCK = threading.Lock()
_CACHE = collections.OrderedDict()
_MISSING_OPP_NOTED = set()


def clear_cache():
    """Forget every cached list (and the bundled one), so the next load re-reads the files."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _MISSING_OPP_NOTED.clear()
    with _BUNDLED_LOCK:
        _BUNDLED.clear()


def load_op_support_list(opp_path=None, custom_opp_paths=None, *, environ=None):
    """Load the op-support list the way the original does (docs/original-adapter.md, 4).

    The base directory is ``opp_path`` or ``$ASCEND_OPP_PATH``. When neither is set, or the
    directory does not exist, the bundled default list is returned. (The original falls back to
    ``/usr/local/Ascend/opp``; we do not, so that a stray install never changes placement without
    the user asking for it.)

    New layout (``<opp>/built-in`` exists), files read in this order:

    1. ``<opp>/built-in/framework/tensorflow/npu_supported_ops.json``;
    2. for each directory of ``custom_opp_paths`` (or ``$ASCEND_CUSTOM_OPP_PATH``, colon-separated):
       ``<dir>/framework/tensorflow/npu_supported_ops.json``; entries that are not directories
       are skipped with a warning, empty entries silently;
    3. for each vendor of the first line ``load_priority=a,b,c`` of ``<opp>/vendors/config.ini``:
       ``<opp>/vendors/<vendor>/framework/tensorflow/npu_supported_ops.json``; when config.ini is
       missing, unreadable or malformed (warning for the last two):
       ``<opp>/framework/custom/tensorflow/npu_supported_ops.json``.

    Old layout: ``<opp>/framework/built-in/tensorflow/...`` then ``<opp>/framework/custom/...``.

    Later files override earlier ones entry by entry, so custom lists override the built-in one
    and — a quirk of the original kept on purpose — the last vendor of ``load_priority`` wins.
    Missing files contribute nothing (debug log); unreadable or malformed ones contribute nothing
    and raise one :class:`OpSupportWarning` naming the file and the problem. Results are cached
    per (files, their mtimes and sizes, configuration problems): repeated calls cost a few
    ``stat`` calls and warn once.

    Args:
        opp_path: the operator package directory; default ``$ASCEND_OPP_PATH``.
        custom_opp_paths: a colon-separated string or a sequence of directories; default
            ``$ASCEND_CUSTOM_OPP_PATH``.
        environ: mapping used instead of ``os.environ`` (for tests and tools).

    Returns:
        An :class:`OpSupportList`; ``origin`` is ``"ascend_opp"`` (``sources`` = the files that
        contributed) or ``"bundled"``.
    """
    env = os.environ if environ is None else environ
    base = os.fspath(opp_path) if opp_path is not None else env.get("ASCEND_OPP_PATH", "")
    if not base:
        return bundled_op_support_list()
    if not os.path.isdir(base):
        with _CACHE_LOCK:
            first_time = base not in _MISSING_OPP_NOTED
            _MISSING_OPP_NOTED.add(base)
        if first_time:
            logger.info("ASCEND_OPP_PATH %r is not a directory; using the bundled op list", base)
        return bundled_op_support_list()
    base = os.path.abspath(base)
    files, problems = _plan_files(base, custom_opp_paths, env)
    key = (tuple((path, _file_signature(path)) for path in files), tuple(problems))
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            _CACHE.move_to_end(key)
            return cached
        for problem in problems:
            _warn(problem)
        table = {}
        sources = []
        for path in files:
            part = _read_op_file(path)
            if part is None:
                continue
            table.update(part)
            sources.append(path)
        if not sources:
            _warn(
                f"no {OP_LIST_FILE_NAME} could be read under ASCEND_OPP_PATH {base!r} (looked "
                f"for {', '.join(files)}); no op type is NPU-supported. Unset ASCEND_OPP_PATH to "
                f"use the bundled default list."
            )
        result = OpSupportList(table, sources=sources, origin=ORIGIN_ASCEND_OPP)
        _CACHE[key] = result
        while len(_CACHE) > _CACHE_MAX_ENTRIES:
            _CACHE.popitem(last=False)
        return result


def default_op_support(config=None):
    """The op list a backend uses by default: from ``$ASCEND_OPP_PATH`` if set, else bundled.

    ``config`` (an ``NpuConfig``-like object) is accepted so backends can pass it through; the
    list itself does not depend on it (``mix_compile_mode`` is applied by
    :func:`is_op_supported`, not by choosing another list).
    """
    del config
    return load_op_support_list()


def original_test_fixture_list():
    """The original's 37-op unit-test list (:data:`ORIGINAL_TEST_FIXTURE_OPS`, none gray)."""
    return OpSupportList.from_names(ORIGINAL_TEST_FIXTURE_OPS)


# ---------------------------------------------------------------------------------------------
# The per-op predicate (docs/original-adapter.md, 4, steps 1 and 2)


def is_op_supported(
    op_type,
    op_list,
    *,
    mix_compile_mode,
    support_const=False,
    without_npu_compile=False,
):
    """The "white list" part of ``IsNpuSupportingNode`` for one node.

    Args:
        op_type: the node's op type (``NodeDef.op``).
        op_list: an :class:`OpSupportList` (any mapping op type → :class:`OpInfo` works).
        mix_compile_mode: in mix mode gray ops count as unsupported.
        support_const: whether ``Const`` may be supported here (the original allows it only
            inside function bodies).
        without_npu_compile: the node's ``_without_npu_compile`` attr.

    Returns:
        ``(supported, reason)`` with ``reason`` one of :data:`REASON_CODES`. When several rules
        exclude a node, the first of this order is reported: ``without_npu_compile_scope``,
        ``arg_retval``, ``dataset_op``, ``string_join``, ``const_not_supported_here``,
        ``unsupported_op``, ``gray_op_in_mix_mode``.
    """
    if without_npu_compile:
        return False, REASON_WITHOUT_NPU_COMPILE_SCOPE
    if op_type in _ARG_RETVAL_OPS:
        return False, REASON_ARG_RETVAL
    if op_type.endswith(_DATASET_SUFFIXES):
        return False, REASON_DATASET_OP
    if op_type == "StringJoin":
        return False, REASON_STRING_JOIN
    if op_type == "Const" and not support_const:
        return False, REASON_CONST_NOT_SUPPORTED_HERE
    info = op_list.get(op_type)
    if info is None:
        return False, REASON_UNSUPPORTED_OP
    if mix_compile_mode and info.is_gray:
        return False, REASON_GRAY_OP_IN_MIX_MODE
    return True, REASON_SUPPORTED
