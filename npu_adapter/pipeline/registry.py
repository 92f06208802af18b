"""The pass registry: pass name → pass class.

Passes register themselves with the :func:`register_pass` class decorator when their module is
imported; ``npu_adapter.passes`` imports every built-in pass module. A name can be registered
once; a second registration is an error so two passes can never share a name.
"""

import functools

from npu_adapter.pipeline.base import PassBase, PassResult

__all__ = ["register_pass", "get_pass", "get_pass_class", "list_passes", "graph_pass"]

_REGISTRY = {}


def _ensure_builtin_passes():
    # Importing the package registers the built-in passes; done lazily so that the core never
    # imports `passes` at module import time (dependency direction: passes → core).
    import npu_adapter.passes  # noqa: F401


def register_pass(cls):
    """Class decorator: register a :class:`PassBase` subclass under its ``name``."""
    name = getattr(cls, "name", "")
    if not name or not name.replace("_", "a").isalnum() or name.lower() != name:
        raise ValueError(f"pass class {cls.__name__} needs a snake_case `name`, got {name!r}")
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls:
        raise ValueError(
            f"pass name {name!r} is already registered by "
            f"{existing.__module__}.{existing.__name__}")
    _REGISTRY[name] = cls
    return cls


def get_pass_class(name):
    """The class registered as ``name``; ``KeyError`` lists the known names."""
    _ensure_builtin_passes()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no pass named {name!r}; registered passes: {list_passes()}") from None


def get_pass(name, **options):
    """A new instance of the pass ``name`` with ``options``."""
    return get_pass_class(name)(**options)


def list_passes():
    """Sorted names of all registered passes."""
    _ensure_builtin_passes()
    return sorted(_REGISTRY)


def graph_pass(name, options=None):
    """Decorator turning a function ``fn(graph_def, ctx, **options) -> PassResult`` into a pass.

    The function may also return a GraphDef; ``modified`` is then whether it is a different
    object than the input.
    """

    def wrap(fn):
        def run(self, graph_def, ctx, view):
            out = fn(graph_def, ctx, **self.option_values)
            if isinstance(out, PassResult):
                return out
            return PassResult(out, out is not graph_def, {})

        cls = type(
            f"{name.title().replace('_', '')}Pass",
            (PassBase,),
            {
                "name": name,
                "options": dict(options or {}),
                "run": run,
                "__doc__": fn.__doc__,
                "__module__": fn.__module__,
            },
        )
        functools.update_wrapper(run, fn)
        return register_pass(cls)

    return wrap
