"""The environment variables that control graph dumps, read once per rewrite.

The original adapter and GE read these (docs/original-adapter.md, 12; CANN's TF online
inference guide, graph dumps); we apply them to our own dumps:

``PRINT_MODEL``
    ``"1"`` writes the original's file names (``BeforeSubGraph_<n>.pbtxt``,
    ``AfterSubGraph_<n>.pbtxt``, ``TF_<GeOp>.pbtxt`` per cluster, ``TF_Subgraph_<fn>.pbtxt`` per
    function a cluster calls). Any other value (or unset) writes nothing, as the original only
    compares with ``"1"``.
``NPU_COLLECT_PATH``
    When set, those files go to ``<path>/extra-info/graph/<pid>_<device id>/``.
``DUMP_GRAPH_PATH``
    Otherwise they go there (default ``./``; created when missing).
``ASCEND_DEVICE_ID`` / ``DEVICE_ID``
    The ``<device id>`` of the collect path (``ASCEND_DEVICE_ID`` preferred; an int >= 0; the
    session option ``session_device_id`` overrides both; default 0).
``DUMP_GE_GRAPH``
    Content of every dump: ``1`` full, ``2`` without Const tensor contents (dtype and shape kept),
    ``3`` structure only (node names, ops, inputs, devices). Unset or empty: full.
``DUMP_GRAPH_LEVEL``
    Which graphs are dumped, only when ``DUMP_GE_GRAPH`` is set (default ``2`` then, as in GE):
    ``1`` all graphs, including one file per function subgraph; ``2`` all but the function
    subgraph files; ``3`` only the last graph; ``4`` only the first.

An invalid value raises :class:`~npu_adapter.errors.NpuConfigError` naming the variable.
"""

import dataclasses
import os

from npu_adapter.errors import NpuConfigError

__all__ = [
    "CONTENT_FULL",
    "CONTENT_NO_WEIGHTS",
    "CONTENT_STRUCTURE",
    "COUNT_ALL",
    "COUNT_NO_SUBGRAPHS",
    "COUNT_LAST",
    "COUNT_FIRST",
    "DumpSettings",
    "read_dump_settings",
    "check_content_level",
    "check_count_level",
]

CONTENT_FULL = 1
CONTENT_NO_WEIGHTS = 2
CONTENT_STRUCTURE = 3
COUNT_ALL = 1
COUNT_NO_SUBGRAPHS = 2
COUNT_LAST = 3
COUNT_FIRST = 4

_CONTENT_ALLOWED = "1 (full), 2 (without Const tensor contents) or 3 (structure only)"
_COUNT_ALLOWED = ("1 (all graphs), 2 (all but function subgraphs), 3 (the last graph) or "
                  "4 (the first graph)")


def _level(name, text, allowed_values, allowed):
    value = text.strip()
    if value.isdigit() and int(value) in allowed_values:
        return int(value)
    raise NpuConfigError(name, text, allowed)


def check_content_level(value, name="DUMP_GE_GRAPH"):
    """``value`` (int or digit string) as a content level 1..3; NpuConfigError otherwise."""
    return _level(name, str(value), (1, 2, 3), _CONTENT_ALLOWED)


def check_count_level(value, name="DUMP_GRAPH_LEVEL"):
    """``value`` (int or digit string) as a count level 1..4; NpuConfigError otherwise."""
    return _level(name, str(value), (1, 2, 3, 4), _COUNT_ALLOWED)


def _device_id(environ):
    for name in ("ASCEND_DEVICE_ID", "DEVICE_ID"):
        text = environ.get(name, "")
        if text == "":
            continue
        value = text.strip()
        if not value.isdigit():
            raise NpuConfigError(name, text, "an integer >= 0")
        return int(value)
    return 0


@dataclasses.dataclass(frozen=True)
class DumpSettings:
    """What the environment asks of the dumps.

    Attributes:
        print_model: ``PRINT_MODEL=1``: write the original's files.
        compat_dir: the directory for them, with ``{pid}`` and ``{device}`` left as fields when
            ``NPU_COLLECT_PATH`` is used (see :meth:`compat_path`).
        content_level: 1, 2 or 3 (``DUMP_GE_GRAPH``; 1 when unset).
        count_level: 1..4 (``DUMP_GRAPH_LEVEL``; 1 = everything when ``DUMP_GE_GRAPH`` is unset).
        device_id: device id from ``ASCEND_DEVICE_ID``/``DEVICE_ID`` (0 when unset).
        collect: True when ``NPU_COLLECT_PATH`` chose the directory.
    """

    print_model: bool = False
    compat_dir: str = "./"
    content_level: int = CONTENT_FULL
    count_level: int = COUNT_ALL
    device_id: int = 0
    collect: bool = False

    def compat_path(self, session_device_id=None, pid=None):
        """The directory of the ``PRINT_MODEL`` files (not created here).

        ``session_device_id`` (the session option, when >= 0) overrides the environment's device
        id, as in the original's ``GetDumpPath``.
        """
        if not self.collect:
            return self.compat_dir
        device = self.device_id
        if session_device_id is not None and session_device_id >= 0:
            device = session_device_id
        pid = os.getpid() if pid is None else pid
        return os.path.join(self.compat_dir, "extra-info", "graph", f"{pid}_{device}")


def read_dump_settings(environ=None):
    """Read :class:`DumpSettings` from ``environ`` (default ``os.environ``) now.

    Raises:
        NpuConfigError: ``DUMP_GE_GRAPH``, ``DUMP_GRAPH_LEVEL`` (when it applies),
            ``ASCEND_DEVICE_ID`` or ``DEVICE_ID`` (when ``NPU_COLLECT_PATH`` is used) is invalid.
    """
    env = os.environ if environ is None else environ
    print_model = env.get("PRINT_MODEL", "") == "1"
    content_text = env.get("DUMP_GE_GRAPH", "")
    if content_text.strip():
        content = check_content_level(content_text)
        count_text = env.get("DUMP_GRAPH_LEVEL", "")
        count = check_count_level(count_text) if count_text.strip() else COUNT_NO_SUBGRAPHS
    else:
        # GE ignores DUMP_GRAPH_LEVEL without DUMP_GE_GRAPH; so do we (not even validated).
        content, count = CONTENT_FULL, COUNT_ALL
    collect_path = env.get("NPU_COLLECT_PATH", "")
    device_id = 0
    if collect_path:
        compat_dir = collect_path
        if print_model:
            device_id = _device_id(env)
    else:
        compat_dir = env.get("DUMP_GRAPH_PATH", "") or "./"
    return DumpSettings(print_model=print_model, compat_dir=compat_dir, content_level=content,
                        count_level=count, device_id=device_id, collect=bool(collect_path))
