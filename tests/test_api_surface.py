"""The whole public API of the original ``npu_bridge`` (and of CANN's ``hccl`` package that
scripts import with it) exists here with the same kinds and argument names.

``tests/data/npu_bridge_api.json`` lists, per module, every public name with its kind
(``function`` with its argument names in order, ``class`` with its public methods, ``value``) and
the re-exports scripts rely on for ``npu_bridge`` and ``npu_bridge.npu_init``. The walk imports
every module and checks every name; it prints the figure ``N/N``. Run it alone to see the figure:
``python tests/test_api_surface.py``.
"""

import importlib
import inspect
import json
import pathlib
import sys

import pytest

INVENTORY = pathlib.Path(__file__).with_name("data") / "npu_bridge_api.json"

# Re-exports checked for presence (the others are the original's private imports such as `os`).
CHECKED_REEXPORTS = ("npu_bridge", "npu_bridge.npu_init")

# Names not provided yet, as "module:name" (":*" for a whole module). Empty: every name of the
# inventory is there.
PENDING = frozenset()


def load_inventory():
    """``{module: {"names": {name: spec}, "reexports": [...]}}`` from the JSON file."""
    return json.loads(INVENTORY.read_text(encoding="utf-8"))["modules"]


def _pending(module, name):
    return f"{module}:*" in PENDING or f"{module}:{name}" in PENDING


def _parameter_names(obj):
    params = inspect.signature(obj).parameters.values()
    return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def check_name(module_obj, name, spec):
    """None when ``module_obj.name`` matches ``spec``, else a sentence saying what differs."""
    if not hasattr(module_obj, name):
        return "missing"
    obj = getattr(module_obj, name)
    kind = spec["kind"]
    if kind == "class":
        if not inspect.isclass(obj):
            return f"expected a class, found {type(obj).__name__}"
        absent = [m for m in spec["methods"] if not hasattr(obj, m)]
        return f"methods missing: {absent}" if absent else None
    if kind == "function":
        if inspect.isclass(obj) or not callable(obj):
            return f"expected a function, found {type(obj).__name__}"
        args = _parameter_names(obj)
        if args != spec["args"]:
            return f"arguments {args}, expected {spec['args']}"
        return None
    if inspect.isfunction(obj) or inspect.isclass(obj):
        return f"expected a value, found {type(obj).__name__}"
    return None


def walk(inventory=None):
    """``(checked, ok, failures, pending)``: every name outside :data:`PENDING` is checked."""
    inventory = inventory or load_inventory()
    checked, ok, failures, pending = 0, 0, [], 0
    for module, entry in sorted(inventory.items()):
        items = [(name, spec) for name, spec in entry["names"].items()]
        if module in CHECKED_REEXPORTS:
            items += [(name, {"kind": "reexport"}) for name in entry["reexports"]]
        live = [(n, s) for n, s in items if not _pending(module, n)]
        pending += len(items) - len(live)
        if not live:
            continue
        try:
            module_obj = importlib.import_module(module)
        except Exception as error:
            failures += [f"{module}.{n}: module does not import ({error})" for n, _ in live]
            checked += len(live)
            continue
        for name, spec in live:
            checked += 1
            problem = "missing" if spec["kind"] == "reexport" and not hasattr(module_obj, name) \
                else (None if spec["kind"] == "reexport" else check_name(module_obj, name, spec))
            if problem:
                failures.append(f"{module}.{name}: {problem}")
            else:
                ok += 1
    return checked, ok, failures, pending


def test_inventory_is_well_formed():
    inventory = load_inventory()
    assert len(inventory) >= 37
    for module, entry in inventory.items():
        assert set(entry) == {"names", "reexports"}, module
        for name, spec in entry["names"].items():
            assert spec["kind"] in ("function", "class", "value"), (module, name)
            if spec["kind"] == "function":
                assert isinstance(spec["args"], list), (module, name)
            if spec["kind"] == "class":
                assert isinstance(spec["methods"], list), (module, name)


def test_walker_detects_mismatches():
    """The checks fail for a wrong kind, wrong argument names and a missing method."""
    import types

    def f(a, b=1):
        return a

    class C:
        def go(self):
            pass

    mod = types.SimpleNamespace(f=f, C=C, v=3)
    assert check_name(mod, "f", {"kind": "function", "args": ["a", "b"]}) is None
    assert "arguments" in check_name(mod, "f", {"kind": "function", "args": ["a", "c"]})
    assert "expected a class" in check_name(mod, "f", {"kind": "class", "methods": []})
    assert "methods missing" in check_name(mod, "C", {"kind": "class", "methods": ["stop"]})
    assert "expected a value" in check_name(mod, "C", {"kind": "value"})
    assert check_name(mod, "missing", {"kind": "value"}) == "missing"


def test_every_name_of_the_inventory():
    """Walked in a fresh process: importing the whole API (npu_init disables eager execution,
    npu_convert_dropout patches Keras' Dropout, as in the original) must not change the test
    process."""
    import os
    import subprocess

    proc = subprocess.run([sys.executable, __file__], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    lines = proc.stdout.strip().splitlines()
    print(f"\nnpu_bridge API surface: {lines[-1] if lines else proc.stderr[-2000:]}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    checked, _, pending = lines[-1].replace("(pending:", "").rstrip(")").partition(" ")
    ok, _, total = checked.partition("/")
    assert ok == total and int(total) > 250


@pytest.mark.parametrize("name", sorted(PENDING))
def test_pending_entries_name_inventory_modules(name):
    module, _, attr = name.partition(":")
    inventory = load_inventory()
    assert module in inventory
    assert attr == "*" or attr in inventory[module]["names"] or \
        attr in inventory[module]["reexports"]


if __name__ == "__main__":
    checked_, ok_, failures_, pending_ = walk()
    print("\n".join(failures_))
    print(f"{ok_}/{checked_} (pending: {pending_})")
    sys.exit(1 if failures_ else 0)
