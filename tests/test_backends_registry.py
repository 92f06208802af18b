"""The backend interface and registry (no built-in backend is needed: tests register dummies)."""

import subprocess
import sys
import textwrap

import pytest

from npu_adapter import op_support
from npu_adapter.backends import (
    Backend,
    get_backend,
    list_backends,
    register_backend,
    registry,
    unregister_backend,
)
from npu_adapter.errors import BackendError


class DummyBackend(Backend):
    name = "dummy_test"

    def lower(self, graph_def, clusters, ctx):
        return graph_def


class OtherBackend(DummyBackend):
    name = "dummy_other"
    keeps_state_on_host = False


@pytest.fixture
def registered():
    """Register backends through this list; they are unregistered after the test."""
    names = []

    def register(name, cls, **kwargs):
        register_backend(name, cls, **kwargs)
        if name not in names:
            names.append(name)

    yield register
    for name in names:
        if name in list_backends():
            unregister_backend(name)


def test_builtins_are_registered_by_module_path():
    assert dict(registry.BUILTIN_BACKENDS) == {
        "cpu": "npu_adapter.backends.cpu:CpuReferenceBackend",
        "xla": "npu_adapter.backends.xla:XlaBackend",
        "cann": "npu_adapter.backends.cann:CannBackend",
    }
    names = list_backends()
    assert {"cpu", "xla", "cann"} <= set(names)
    assert names == sorted(names)


def test_importing_the_registry_does_not_import_builtin_backends():
    code = textwrap.dedent(
        """
        import sys
        import npu_adapter.backends
        loaded = [m for m in ("npu_adapter.backends.cpu", "npu_adapter.backends.xla",
                              "npu_adapter.backends.cann") if m in sys.modules]
        print(loaded)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_register_and_get_returns_new_instances(registered):
    registered("dummy_test", DummyBackend)
    first = get_backend("dummy_test")
    second = get_backend("dummy_test")
    assert isinstance(first, DummyBackend) and first is not second
    assert "dummy_test" in list_backends()
    assert repr(first) == "<DummyBackend backend 'dummy_test'>"


def test_duplicate_name_needs_replace(registered):
    registered("dummy_test", DummyBackend)
    with pytest.raises(BackendError, match=r"'dummy_test' is already registered .*replace=True"):
        register_backend("dummy_test", OtherBackend)
    assert type(get_backend("dummy_test")) is DummyBackend
    registered("dummy_test", OtherBackend, replace=True)
    assert type(get_backend("dummy_test")) is OtherBackend


def test_builtin_name_is_protected_too():
    with pytest.raises(BackendError, match="'cpu' is already registered"):
        register_backend("cpu", DummyBackend)


def test_unknown_name_lists_registered_backends(registered):
    registered("dummy_test", DummyBackend)
    with pytest.raises(BackendError) as info:
        get_backend("nope")
    message = str(info.value)
    assert "unknown backend 'nope'" in message
    assert ", ".join(list_backends()) in message
    assert "dummy_test" in message and "cpu" in message
    with pytest.raises(BackendError, match="unknown backend"):
        get_backend(None)


def test_lazy_backend_with_missing_module_is_not_available(registered):
    registered("ghost", "npu_adapter.backends._no_such_backend:Ghost")
    assert "ghost" in list_backends()
    with pytest.raises(BackendError) as info:
        get_backend("ghost")
    message = str(info.value)
    assert "'ghost' is not available in this build" in message
    assert "npu_adapter.backends._no_such_backend" in message
    # Still registered: a later install of the module can succeed.
    assert "ghost" in list_backends()


def test_lazy_backend_with_missing_dependency_names_it(registered, tmp_path, monkeypatch):
    (tmp_path / "npu_test_backend_needs_dep.py").write_text(
        "import npu_test_missing_dependency_xyz\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registered("needs_dep", "npu_test_backend_needs_dep:Thing")
    with pytest.raises(BackendError, match="'npu_test_missing_dependency_xyz' is missing"):
        get_backend("needs_dep")


def test_lazy_backend_is_imported_on_first_use(registered, tmp_path, monkeypatch):
    (tmp_path / "npu_test_lazy_backend.py").write_text(
        textwrap.dedent(
            """
            from npu_adapter.backends import Backend

            class LazyBackend(Backend):
                name = "lazy_test"

                def lower(self, graph_def, clusters, ctx):
                    return graph_def
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "npu_test_lazy_backend", raising=False)
    registered("lazy_test", "npu_test_lazy_backend:LazyBackend")
    assert "npu_test_lazy_backend" not in sys.modules
    backend = get_backend("lazy_test")
    assert type(backend).__name__ == "LazyBackend"
    assert "npu_test_lazy_backend" in sys.modules
    monkeypatch.delitem(sys.modules, "npu_test_lazy_backend")


def test_lazy_target_that_is_not_a_backend(registered):
    registered("not_backend", "json:JSONDecoder")
    with pytest.raises(BackendError, match="does not name a subclass"):
        get_backend("not_backend")
    registered("no_attr", "json:NoSuchThing")
    with pytest.raises(BackendError, match="does not name a subclass"):
        get_backend("no_attr")


@pytest.mark.parametrize("name", ["", "CPU", "my-backend", "1st", None])
def test_invalid_names_are_rejected(name):
    with pytest.raises(BackendError, match="invalid backend name"):
        register_backend(name, DummyBackend)


@pytest.mark.parametrize("cls", [object, DummyBackend(), "no_colon", "a:b:c", 42])
def test_invalid_classes_are_rejected(cls):
    with pytest.raises(BackendError, match="cannot register backend 'bad_cls'"):
        register_backend("bad_cls", cls)
    assert "bad_cls" not in list_backends()


def test_unregister_unknown_name():
    with pytest.raises(BackendError, match="unknown backend 'never_registered'"):
        unregister_backend("never_registered")


def test_backend_defaults(monkeypatch):
    monkeypatch.delenv("ASCEND_OPP_PATH", raising=False)
    op_support.clear_cache()
    with pytest.raises(TypeError):
        Backend()  # lower() is abstract
    backend = DummyBackend()
    # By default a backend places state as the original does (variables in the clusters).
    assert backend.keeps_state_on_host is False
    assert backend.outside_cluster_reason(None, None) is None
    assert backend.available() == (True, "")
    assert backend.supports_node(object(), None) == (True, "supported")

    class Config:
        mix_compile_mode = True

    ops = backend.op_support(Config())
    assert ops.origin == "bundled" and len(ops) == 732
