"""Whether a cluster runs compiled by XLA or on TensorFlow's kernels: the decisions, remembered.

The runtime measures, per cluster and executable (a gear, or a set of fed shapes), which of the
two forms runs faster (:mod:`~npu_adapter.backends.xla.trial`) and keeps the faster one. A
:class:`Decision` says which, and why. Decisions are kept for the process, and with
``graph_compiler_cache_dir`` next to the executables in ``<dir>/npu_adapter_xla/decisions/``,
one small JSON file each: a later process that finds a cluster's decision (and, when compiled,
its executable in TensorFlow's persistent cache) measures and compiles nothing.

A decision is keyed by :func:`cluster_digest` — the cluster's function in both forms and every
function they call (what XLA compiles and what TensorFlow's kernels run), the TensorFlow
version and the machine's architecture — and by the executable's label: a changed graph, a new
TensorFlow or another kind of machine is measured again. The files are written atomically
(temporary file and ``os.replace``); an unreadable one is ignored and measured again.
"""

import dataclasses
import hashlib
import json
import os
import platform
import threading

from npu_adapter.datadump.writer import write_atomic
from npu_adapter.graph.types import called_functions
from npu_adapter.vocabulary import XLA_TF_FUNCTION_ATTR

__all__ = ["DECISIONS_SUBDIR", "Decision", "DecisionStore", "cluster_digest",
           "executable_label", "forget_decisions"]

DECISIONS_SUBDIR = "decisions"
_FORMAT = 1
# Bumped when the measurement changes meaning: older decisions are then measured again.
_RULE = "measured-1"

_MEMORY = {}  # process-wide: cluster digest -> {executable label: Decision}
_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether one cluster's executable runs compiled, with the times that decided it.

    Attributes:
        cluster: the cluster's name; executable: its label (:func:`executable_label`).
        compiled: True when XLA's executable runs, False when TensorFlow's kernels do.
        compiled_ms / tensorflow_ms: median time of a run with the cluster compiled / on
            TensorFlow's kernels (the rest of the run alike), in milliseconds.
        ratio: the median of the per-pair ratios compiled / TensorFlow's kernels (compiled
            when below 1).
        pairs: how many pairs of runs were timed.
        failure: why XLA could not build the executable ("" when it could); the cluster then
            stays on TensorFlow's kernels and nothing was timed.
    """

    cluster: str
    executable: str
    compiled: bool
    compiled_ms: float
    tensorflow_ms: float
    ratio: float
    pairs: int
    failure: str = ""

    @classmethod
    def compile_failed(cls, cluster, executable, message):
        """The decision for an executable XLA failed to build: TensorFlow's kernels."""
        return cls(cluster, executable, False, 0.0, 0.0, 0.0, 0, message)

    @property
    def why(self):
        """The sentence reports show: what was measured and what was kept."""
        if self.failure:
            return f"kept on TensorFlow's kernels: compile failed: {self.failure}"
        kept = "compiled by XLA" if self.compiled else "kept on TensorFlow's kernels"
        return (f"{kept}: a run took {_ms(self.compiled_ms)} compiled and "
                f"{_ms(self.tensorflow_ms)} on TensorFlow's kernels "
                f"(median ratio {self.ratio:.2f}x over {self.pairs} pairs of runs)")

    def to_json(self):
        return {"format": _FORMAT, "rule": _RULE, "cluster": self.cluster,
                "executable": self.executable, "compiled": self.compiled,
                "compiled_ms": self.compiled_ms, "tensorflow_ms": self.tensorflow_ms,
                "ratio": self.ratio, "pairs": self.pairs, "failure": self.failure}

    @classmethod
    def from_json(cls, data):
        """The decision in ``data``, or None when it is not one of this format and rule."""
        if not isinstance(data, dict) or data.get("format") != _FORMAT or \
                data.get("rule") != _RULE:
            return None
        try:
            return cls(str(data["cluster"]), str(data["executable"]), bool(data["compiled"]),
                       float(data["compiled_ms"]), float(data["tensorflow_ms"]),
                       float(data["ratio"]), int(data["pairs"]), str(data.get("failure", "")))
        except (KeyError, TypeError, ValueError):
            return None


def forget_decisions():
    """Forget the decisions this process measured or read (files on disk stay): the next
    session measures again, unless ``graph_compiler_cache_dir`` remembers."""
    with _LOCK:
        _MEMORY.clear()


def _ms(value):
    """A duration given in milliseconds, as people write it (``85 us``, ``4.1 ms``, ``2.5 s``)."""
    if value < 0.1:
        return f"{value * 1000:.2g} us"
    if value < 1000:
        return f"{value:.3g} ms"
    return f"{value / 1000:.3g} s" if value < 1e6 else f"{value / 1000:.0f} s"


def executable_label(key):
    """A readable, stable label of an executable key of the runtime: ``("gear", 2)`` →
    ``"gear 2"``; ``("shapes", (("x:0", (1, 224, 224, 3)),))`` → ``"x:0 1x224x224x3"``."""
    kind, value = key
    if kind == "gear":
        return f"gear {value}"
    if not value:
        return "no fed tensors"
    return ", ".join(f"{name} {'x'.join(str(d) for d in shape) or 'scalar'}"
                     for name, shape in value)


def cluster_digest(node, functions):
    """The digest of cluster call ``node`` (a NodeDef of the lowered graph) that keys its
    decisions: its function in the form XLA compiles and on TensorFlow's kernels, every function
    they call, the TensorFlow version and the machine."""
    import tensorflow as tf

    digest = hashlib.sha256()
    for text in (_RULE, tf.__version__, platform.machine(), "XLA_CPU_JIT"):
        digest.update(text.encode())
        digest.update(b"\0")
    roots = [node.attr["f"].func.name]
    if XLA_TF_FUNCTION_ATTR in node.attr:
        roots.append(node.attr[XLA_TF_FUNCTION_ATTR].s.decode())
    seen = set()
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for body in functions[name].node_def:
            pending.extend(called_functions(body))
    for name in sorted(seen):
        digest.update(name.encode())
        digest.update(_in_name_order(functions[name]).SerializeToString(deterministic=True))
    return digest.hexdigest()


def _in_name_order(fdef):
    """``fdef`` with its arguments and results in name order. A rewrite orders a cluster's
    arguments and results after the feeds and fetches it was given (a session and ``inspect``
    may name them in another order); that changes neither what XLA compiles nor its speed."""
    if not fdef.signature.input_arg and not fdef.signature.output_arg:
        return fdef
    out = type(fdef)()
    out.CopyFrom(fdef)
    order = sorted(range(len(fdef.signature.input_arg)),
                   key=lambda k: fdef.signature.input_arg[k].name)
    del out.signature.input_arg[:]
    out.signature.input_arg.extend(fdef.signature.input_arg[k] for k in order)
    for indexed in ("arg_attr", "resource_arg_unique_id"):
        field = getattr(out, indexed)
        old = {k: getattr(fdef, indexed)[k] for k in getattr(fdef, indexed)}
        field.clear()
        for new_index, k in enumerate(order):
            if k in old:
                if indexed == "arg_attr":
                    field[new_index].CopyFrom(old[k])
                else:
                    field[new_index] = old[k]
    del out.signature.output_arg[:]
    out.signature.output_arg.extend(sorted(fdef.signature.output_arg, key=lambda a: a.name))
    return out


class DecisionStore:
    """The decisions of this process, and with a directory those of earlier processes.

    Args:
        directory: where decision files live (``<graph_compiler_cache_dir>/npu_adapter_xla/
            decisions``), or None to keep them for this process only.
    """

    def __init__(self, directory=None):
        self.directory = directory

    def _path(self, digest, label):
        label_digest = hashlib.sha256(label.encode()).hexdigest()[:16]
        return os.path.join(self.directory, f"{digest[:32]}-{label_digest}.json")

    def get(self, digest, label):
        """The :class:`Decision` for executable ``label`` of the cluster ``digest``, or None."""
        with _LOCK:
            found = _MEMORY.get(digest, {}).get(label)
        if found is not None or self.directory is None:
            return found
        try:
            with open(self._path(digest, label), encoding="utf-8") as f:
                found = Decision.from_json(json.load(f))
        except (OSError, ValueError):
            return None
        if found is not None and found.executable == label:
            with _LOCK:
                _MEMORY.setdefault(digest, {})[label] = found
            return found
        return None

    def put(self, digest, decision):
        """Remember ``decision`` (for the process, and on disk with a directory)."""
        with _LOCK:
            _MEMORY.setdefault(digest, {})[decision.executable] = decision
        if self.directory is None:
            return
        # Atomic, with the mode the umask gives (as the executables TensorFlow writes).
        write_atomic(self._path(digest, decision.executable),
                     json.dumps(decision.to_json(), sort_keys=True))

    def for_cluster(self, digest):
        """Every known decision of the cluster ``digest`` (any executable), by label."""
        found = {}
        if self.directory is not None:
            prefix = digest[:32] + "-"
            try:
                names = sorted(os.listdir(self.directory))
            except OSError:
                names = []
            for name in names:
                if not (name.startswith(prefix) and name.endswith(".json")):
                    continue
                try:
                    with open(os.path.join(self.directory, name), encoding="utf-8") as f:
                        decision = Decision.from_json(json.load(f))
                except (OSError, ValueError):
                    continue
                if decision is not None:
                    found[decision.executable] = decision
        with _LOCK:
            found.update(_MEMORY.get(digest, {}))
        return dict(sorted(found.items()))
