"""Put the CANN fakes in place for a test: ``atc`` first on ``PATH``, ``acl`` on ``sys.path``.

Used by the ``cann_fakes`` fixture (``tests/conftest.py``) and by the scripts the tests run in
a second process (:func:`install` in that process).
"""

import json
import os
import stat
import sys

FAKES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakes")


class CannFakes:
    """The fakes of one test: where the ``atc`` wrapper is, its call log, the ``acl`` module."""

    def __init__(self, root):
        self.root = str(root)
        self.bin = os.path.join(self.root, "bin")
        self.atc = os.path.join(self.bin, "atc")
        self.atc_log = os.path.join(self.root, "atc_calls.jsonl")
        self.acl = None

    def write_atc(self):
        os.makedirs(self.bin, exist_ok=True)
        script = os.path.join(FAKES, "fake_atc.py")
        # The real atc is a shell wrapper around atc.bin; this one wraps the fake. An existing
        # wrapper is left alone: its identity (path, size, time) is part of the cache key.
        text = f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n'
        if os.path.exists(self.atc):
            with open(self.atc, encoding="utf-8") as f:
                if f.read() == text:
                    return
        with open(self.atc, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(self.atc, os.stat(self.atc).st_mode | stat.S_IXUSR | stat.S_IXGRP)

    def atc_calls(self):
        """The recorded atc runs: ``[{"argv": [...], "cwd": ..., "status": ...}]``."""
        if not os.path.exists(self.atc_log):
            return []
        with open(self.atc_log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def atc_flags(self, call=-1):
        """``{flag: value}`` of one recorded run."""
        flags = {}
        for arg in self.atc_calls()[call]["argv"]:
            name, _, value = arg.lstrip("-").partition("=")
            flags[name] = value
        return flags

    def environ(self):
        """The environment variables that put the fakes in place."""
        return {"PATH": self.bin + os.pathsep + os.environ.get("PATH", ""),
                "FAKE_ATC_LOG": self.atc_log, "SOC_VERSION": "Ascend310P3",
                "PYTHONPATH": FAKES + os.pathsep + os.environ.get("PYTHONPATH", "")}


def install(root):
    """Make this process use the fakes (for scripts run in a subprocess)."""
    fakes = CannFakes(root)
    fakes.write_atc()
    os.environ.update(fakes.environ())
    if FAKES not in sys.path:
        sys.path.insert(0, FAKES)
    import acl

    fakes.acl = acl
    return fakes


def compile_om(directory, *, gears=None, soc="Ascend310P3", batch=2):
    """Compile a small model with the fake ``atc`` on PATH: ``y = x * 2 + 1`` with ``x`` of
    shape ``(batch, 4)``, or ``(-1, 4)`` with ``gears`` (batch sizes). Returns the .om path."""
    import tensorflow as tf

    from npu_adapter.backends.cann.atc import AtcOptions, build_atc_command, run_atc
    from npu_adapter.backends.cann.toolkit import detect

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        tf.identity(x * 2.0 + 1.0, name="y")
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    pb = os.path.join(directory, "model.pb")
    with open(pb, "wb") as f:
        f.write(graph.as_graph_def().SerializeToString())
    toolkit = detect()
    stem = os.path.join(directory, "model")
    command = build_atc_command(
        toolkit.require_atc(), pb, stem, AtcOptions(soc),
        inputs=[("x", (-1 if gears else batch, 4))],
        gears=[(g,) for g in gears] if gears else None, out_nodes=["y:0"])
    run_atc(command, cwd=directory, env=toolkit.environment(), om_path=stem + ".om",
            what="test model")
    return stem + ".om"
