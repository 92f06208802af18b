"""``NpuConfig``: the parsed, validated, typed ``NpuOptimizer`` options of a session.

A script configures the adapter through a ``custom_optimizers`` entry named ``NpuOptimizer`` in its
``ConfigProto``; the entry's ``parameter_map`` maps option names to ``AttrValue``s. ``NpuConfig``
reads that map (or a plain dict), checks every value and combination the original checks
(docs/options.md; see :mod:`~npu_adapter.config.options` and :mod:`~npu_adapter.config.rules`),
and exposes one typed attribute per option, named as the key.

The object is immutable and compares by ``present`` plus the explicitly given entries, so the
same options give equal (and equally hashed) configs however they were written. TensorFlow
protos are imported only by the methods that build or read them.
"""

from npu_adapter.config import parsers
from npu_adapter.config.options import (
    KIND_ARTICLES,
    KIND_FIELDS,
    OPTION_SPECS,
    OPTIONS_BY_NAME,
    OUR_PREFIX,
    STRICT_OPTIONS_ENV,
    suggest_option,
    unknown_option_hint,
)
from npu_adapter.config.parsers import check_int64, check_text
from npu_adapter.config.rules import apply_rules
from npu_adapter.config.warnings import warn_once
from npu_adapter.errors import NpuConfigError, UnknownOptionError, user_text

__all__ = ["NPU_OPTIMIZER_NAME", "NpuConfig"]

NPU_OPTIMIZER_NAME = "NpuOptimizer"

_ZERO = {"b": False, "i": 0, "s": "", "f": 0.0}
_JIT_COMPILE_ATTR = {"true": "1", "false": "0", "auto": "2"}


def _is_attr_value(value):
    return hasattr(value, "WhichOneof") and hasattr(value, "SerializeToString")


def _attr_value_class():
    from tensorflow.core.framework import attr_value_pb2

    return attr_value_pb2.AttrValue


def _decode(key, raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NpuConfigError(key, raw, "UTF-8 text", detail=str(exc)) from None


def _describe_attr(attr):
    field = attr.WhichOneof("value")
    if field is None:
        return "<empty AttrValue>"
    if field in _ZERO:
        return getattr(attr, field)
    return f"<AttrValue .{field}>"


def _passthrough_from_attr(attr):
    """Canonical hashable form of a value we keep but do not interpret."""
    field = attr.WhichOneof("value")
    if field in _ZERO:
        return (field, getattr(attr, field))
    return ("raw", attr.SerializeToString(deterministic=True))


def _passthrough_from_python(key, value):
    if _is_attr_value(value):
        return _passthrough_from_attr(value)
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", check_int64(key, value))
    if isinstance(value, float):
        return ("f", value)
    if isinstance(value, str):
        return ("s", check_text(key, value).encode("utf-8"))
    if isinstance(value, bytes):
        return ("s", value)
    raise NpuConfigError(key, value, "a bool, int, float, str, bytes or AttrValue",
                         detail=f"got {type(value).__name__}")


def _passthrough_to_python(entry):
    field, value = entry
    if field == "raw":
        attr = _attr_value_class()()
        attr.ParseFromString(value)
        return attr
    if field == "s":
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


def _make_attr(field, value):
    attr = _attr_value_class()()
    if field == "raw":
        attr.ParseFromString(value)
    elif field == "s":
        attr.s = value.encode("utf-8") if isinstance(value, str) else value
    else:
        setattr(attr, field, value)
    return attr


class _KindMismatch(Exception):
    """Internal: a value of the wrong kind for an option read only when the kind matches."""


def _python_value(spec, value):
    """Check/convert a Python value for ``spec``; raise on a wrong type."""
    kind = spec.kind
    if kind == "b" and isinstance(value, bool):
        return value
    if kind == "i" and isinstance(value, int) and not isinstance(value, bool):
        return check_int64(spec.name, int(value))
    if kind == "i" and not isinstance(value, (bool, str, bytes, float)):
        try:  # numpy integers and other index-like types
            return check_int64(spec.name, value.__index__())
        except (AttributeError, TypeError):
            pass
    if kind == "s" and isinstance(value, str):
        return check_text(spec.name, value)
    if kind == "s" and isinstance(value, bytes):
        return _decode(spec.name, value)
    if kind == "f" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not spec.strict_kind:
        raise _KindMismatch
    raise NpuConfigError(spec.name, value, KIND_ARTICLES[kind],
                         detail=f"got {type(value).__name__}")


def _attr_python_value(spec, attr):
    """Read ``spec``'s field from an AttrValue; raise on a wrong field."""
    field = attr.WhichOneof("value")
    if field is None:
        # The original reads e.g. `.b()` of an empty AttrValue and gets the zero value.
        return _ZERO[spec.kind]
    if field == spec.kind:
        value = getattr(attr, field)
        return _decode(spec.name, value) if field == "s" else value
    if not spec.strict_kind:
        raise _KindMismatch
    raise NpuConfigError(
        spec.name, _describe_attr(attr),
        f"an AttrValue with the {KIND_FIELDS[spec.kind]} field set ({spec.type_name})",
        detail=f"got the .{field} field")


def _node_attr_string(spec, value):
    if spec.name == "jit_compile":
        return _JIT_COMPILE_ATTR[value]
    if spec.kind == "b":
        return "1" if value else "0"
    if spec.kind == "f":
        return repr(value)
    return str(value)


_STRICT_OPTION = OUR_PREFIX + "strict_options"
_ENV_TRUE = ("1", "true", "yes", "on")
_ENV_FALSE = ("", "0", "false", "no", "off")


def _strict_source(explicit, environ=None):
    """What makes unknown keys errors: ``npu_adapter_strict_options=true`` among the options,
    else ``NPU_ADAPTER_STRICT_OPTIONS=1`` in the environment; None when neither does."""
    import os

    if _STRICT_OPTION in explicit:
        strict = OPTIONS_BY_NAME[_STRICT_OPTION].validate(explicit[_STRICT_OPTION])
        return f"{_STRICT_OPTION}=true" if strict else None
    text = (os.environ if environ is None else environ).get(STRICT_OPTIONS_ENV, "")
    if text.strip().lower() in _ENV_TRUE:
        return f"{STRICT_OPTIONS_ENV}={text.strip()}"
    if text.strip().lower() not in _ENV_FALSE:
        raise NpuConfigError(STRICT_OPTIONS_ENV, text, "1 (unknown option keys are errors) or 0")
    return None


def _unknown(key, value, strict_source):
    """Warn about an unknown option key, naming its near miss as the command line does; with
    strict options, raise :class:`UnknownOptionError` instead."""
    hint = unknown_option_hint(key)
    if strict_source:
        raise UnknownOptionError(key, value, hint, detail=f"an error because {strict_source}")
    where = "npu-adapter" if key.startswith(OUR_PREFIX) else "the NpuOptimizer"
    warn_once(("unknown", key),
              f"unknown option {key!r} ({hint}) is not an option of {where} and is ignored; "
              f"{_STRICT_OPTION}=true or {STRICT_OPTIONS_ENV}=1 make it an error")


def _warn_deprecated(spec):
    hint = f": {spec.deprecation_hint}" if spec.deprecation_hint else ""
    warn_once(("deprecated", spec.name), f"option {spec.name!r} is deprecated{hint}")


def _warn_ignored_kind(spec, got):
    warn_once(("ignored-kind", spec.name),
              f"option {spec.name!r} is read only from the {KIND_FIELDS[spec.kind]} field "
              f"({spec.type_name}); the given {got} value is ignored and the default "
              f"{user_text(spec.default)} is used, as in the original")


class NpuConfig:
    """The ``NpuOptimizer`` options of a session, validated and typed.

    Build one with :meth:`from_config_proto`, :meth:`from_parameter_map`, :meth:`from_dict` or
    ``NpuConfig(**options)`` (same as :meth:`from_dict`). Every option is an attribute named as its
    key (``cfg.iterations_per_loop``, ``cfg.HCCL_algorithm``) holding the explicit value or the
    original's default (``None`` for options that are unset without a default). Invalid values
    or combinations raise :class:`~npu_adapter.errors.NpuConfigError`; unknown keys and
    deprecated options warn once per process (:class:`NpuAdapterWarning`).

    ``present`` is False only for a ``ConfigProto`` without an ``NpuOptimizer`` entry: then every
    option reads its default and ``job`` is ``"default"``, which makes every pass inert, as in the
    original.
    """

    __slots__ = ("_present", "_explicit", "_passthrough", "_effective", "_key")

    def __init__(self, **options):
        self._init(True, *self._from_python(options))

    # ---- construction ---------------------------------------------------------------------

    def _init(self, present, explicit, passthrough):
        setattr_ = object.__setattr__
        unknown = [key for key in sorted(passthrough) if key not in OPTIONS_BY_NAME]
        strict_source = _strict_source(explicit) if unknown else None
        for key in unknown:
            _unknown(key, passthrough[key], strict_source)
        for key in sorted(explicit):
            spec = OPTIONS_BY_NAME[key]
            if spec.deprecated:
                _warn_deprecated(spec)
        for key in sorted(explicit):
            explicit[key] = OPTIONS_BY_NAME[key].validate(explicit[key])
        derived = {}
        if present:
            for key, value in apply_rules(explicit).items():
                (explicit if key in explicit else derived)[key] = value
        effective = {spec.name: spec.default for spec in OPTION_SPECS}
        if not present:
            effective["job"] = "default"
        effective.update(explicit)
        effective.update(derived)
        setattr_(self, "_present", bool(present))
        setattr_(self, "_explicit", dict(sorted(explicit.items())))
        setattr_(self, "_passthrough", dict(sorted(passthrough.items())))
        setattr_(self, "_effective", effective)
        setattr_(self, "_key", (self._present, tuple(self._explicit.items()),
                                tuple(self._passthrough.items())))

    @classmethod
    def _create(cls, present, explicit, passthrough):
        config = cls.__new__(cls)
        config._init(present, explicit, passthrough)
        return config

    @staticmethod
    def _from_python(options):
        explicit, passthrough = {}, {}
        for key, value in options.items():
            if not isinstance(key, str):
                raise NpuConfigError(user_text(key), value, "option names are strings")
            check_text("option name", key)
            if value is None:
                continue  # NPURunConfig style: None means "not given"
            spec = OPTIONS_BY_NAME.get(key)
            if spec is None:
                passthrough[key] = _passthrough_from_python(key, value)
                continue
            try:
                if _is_attr_value(value):
                    explicit[key] = _attr_python_value(spec, value)
                else:
                    explicit[key] = _python_value(spec, value)
            except _KindMismatch:
                if not spec.compat_only:
                    _warn_ignored_kind(spec, type(value).__name__)
                passthrough[key] = _passthrough_from_python(key, value)
        return explicit, passthrough

    @staticmethod
    def _from_attrs(items):
        explicit, passthrough = {}, {}
        for key, attr in items:
            if not _is_attr_value(attr):
                raise NpuConfigError(key, attr, "an AttrValue",
                                     detail=f"got {type(attr).__name__}")
            spec = OPTIONS_BY_NAME.get(key)
            if spec is None:
                passthrough[key] = _passthrough_from_attr(attr)
                continue
            try:
                explicit[key] = _attr_python_value(spec, attr)
            except _KindMismatch:
                if not spec.compat_only:
                    _warn_ignored_kind(spec, "." + attr.WhichOneof("value"))
                passthrough[key] = _passthrough_from_attr(attr)
        return explicit, passthrough

    @classmethod
    def from_dict(cls, options):
        """Build from Python values: bool / int / str (or UTF-8 bytes) / float per option kind.

        A value of ``None`` means "not given". ``AttrValue`` instances are accepted too. The
        result is ``present``.
        """
        return cls._create(True, *cls._from_python(dict(options)))

    @classmethod
    def from_parameter_map(cls, parameter_map):
        """Build from a ``parameter_map`` (protobuf ``map<string, AttrValue>`` or a dict of
        ``AttrValue``). Each option must use the field the original reads (``.b``, ``.i``,
        ``.s``); an empty AttrValue reads as that field's zero value, as in the original.
        """
        return cls._create(True, *cls._from_attrs(sorted(parameter_map.items())))

    @classmethod
    def from_config_proto(cls, config_proto):
        """Build from a ``tf.compat.v1.ConfigProto`` (or ``None``).

        Uses the ``custom_optimizers`` entry named exactly ``NpuOptimizer``; without one the
        config is not ``present``. Several such entries are merged in order, later keys winning,
        as the original's loop over the entries does.
        """
        if config_proto is None:
            return cls._create(False, {}, {})
        if not hasattr(config_proto, "graph_options"):
            raise TypeError("NpuConfig.from_config_proto expects a tf.compat.v1.ConfigProto or "
                            f"None, got {type(config_proto).__name__}")
        entries = [optimizer for optimizer in
                   config_proto.graph_options.rewrite_options.custom_optimizers
                   if optimizer.name == NPU_OPTIMIZER_NAME]
        if not entries:
            return cls._create(False, {}, {})
        if len(entries) > 1:
            warn_once(("multiple-npu-optimizer",),
                      f"ConfigProto has {len(entries)} custom_optimizers named "
                      f"{NPU_OPTIMIZER_NAME!r}; they are merged, later entries winning")
        merged = {}
        for entry in entries:
            merged.update(entry.parameter_map.items())
        return cls._create(True, *cls._from_attrs(sorted(merged.items())))

    @classmethod
    def option_specs(cls):
        """The :class:`~npu_adapter.config.options.OptionSpec` of every option, sorted by name."""
        return list(OPTION_SPECS)

    # ---- conversion -----------------------------------------------------------------------

    def to_parameter_map(self):
        """``{key: AttrValue}`` holding exactly the explicit entries (unknown keys included),
        each in the field the original reads.
        """
        result = {}
        for key, value in self._explicit.items():
            result[key] = _make_attr(OPTIONS_BY_NAME[key].kind, value)
        for key, entry in self._passthrough.items():
            result[key] = _make_attr(*entry)
        return dict(sorted(result.items()))

    def to_dict(self):
        """The explicit entries as Python values (unknown keys included); see :meth:`from_dict`."""
        result = dict(self._explicit)
        for key, entry in self._passthrough.items():
            result[key] = _passthrough_to_python(entry)
        return dict(sorted(result.items()))

    def to_config_proto(self, base=None):
        """A ``ConfigProto`` whose ``NpuOptimizer`` entry carries :meth:`to_parameter_map`.

        ``base`` is copied, not modified; its first ``NpuOptimizer`` entry is replaced (further
        ones are removed), or one is appended. A config that is not ``present`` removes them.
        """
        from tensorflow.core.protobuf import config_pb2

        proto = config_pb2.ConfigProto()
        if base is not None:
            proto.CopyFrom(base)
        optimizers = proto.graph_options.rewrite_options.custom_optimizers
        indexes = [i for i, opt in enumerate(optimizers) if opt.name == NPU_OPTIMIZER_NAME]
        keep = indexes[0] if indexes and self._present else None
        for index in reversed(indexes):
            if index != keep:
                del optimizers[index]
        if not self._present:
            return proto
        if keep is None:
            target = optimizers.add()
            target.name = NPU_OPTIMIZER_NAME
        else:
            target = optimizers[keep]
            target.parameter_map.clear()
        for key, attr in self.to_parameter_map().items():
            target.parameter_map[key].CopyFrom(attr)
        return proto

    def to_node_attrs(self):
        """The options as the original stamps them on nodes: ``{"_" + name: str}``, sorted.

        Bools are "0"/"1", ints decimal, ``jit_compile`` true/false/auto → "1"/"0"/"2";
        ``variable_placement`` is stamped as ``_variable_location``. Every option with an
        effective value is included, except our own options, ``const_input`` and the
        compatibility-only keys; ``_NpuOptimizer`` is added. A config that is not ``present``
        gives ``{}``: without an ``NpuOptimizer`` entry the original stamps nothing.
        """
        if not self._present:
            return {}
        attrs = {"_" + NPU_OPTIMIZER_NAME: NPU_OPTIMIZER_NAME}
        for spec in OPTION_SPECS:
            value = self._effective[spec.name]
            if spec.stamped and value is not None:
                attrs[spec.node_attr_name] = _node_attr_string(spec, value)
        return dict(sorted(attrs.items()))

    def effective_values(self):
        """``{name: value}`` for every option: explicit, derived or default (sorted)."""
        return dict(self._effective)

    # ---- queries --------------------------------------------------------------------------

    @property
    def present(self):
        """False when built from a ConfigProto without an ``NpuOptimizer`` entry."""
        return self._present

    def explicit_keys(self):
        """Sorted tuple of the known options given explicitly."""
        return tuple(self._explicit)

    def unknown_keys(self):
        """Sorted tuple of the given keys that are not options (kept only for round trips)."""
        return tuple(key for key in self._passthrough if key not in OPTIONS_BY_NAME)

    def is_set(self, key):
        """True when option ``key`` was given explicitly; KeyError for a name that is no option."""
        if key not in OPTIONS_BY_NAME:
            raise KeyError(f"{key!r} is not an NpuOptimizer option")
        return key in self._explicit

    def get(self, key, default=None):
        """The effective value of option ``key``, or the given value of an unknown key, or
        ``default``."""
        if key in self._effective:
            return self._effective[key]
        if key in self._passthrough:
            return _passthrough_to_python(self._passthrough[key])
        return default

    def replace(self, **changes):
        """A new validated config with ``changes`` applied (``None`` unsets a key)."""
        options = self.to_dict()
        for key, value in changes.items():
            if value is None:
                options.pop(key, None)
            else:
                options[key] = value
        present = self._present or bool(changes)
        return self._create(present, *self._from_python(options))

    # ---- parsed views of structured options ----------------------------------------------

    def dims_trio(self):
        """The parsed dynamic dims (:class:`~npu_adapter.config.parsers.DimsTrio`), or None
        unless ``input_shape``, ``dynamic_dims`` and ``dynamic_node_type`` are all set."""
        if not all(self.is_set(n) for n in ("input_shape", "dynamic_dims", "dynamic_node_type")):
            return None
        return parsers.validate_dims_trio(self.input_shape, self.dynamic_dims,
                                          self.dynamic_node_type)

    def in_out_pairs(self):
        """``in_out_pair`` parsed (see :func:`~npu_adapter.config.parsers.parse_in_out_pair`),
        or None when empty."""
        return parsers.parse_in_out_pair(self.in_out_pair) if self.in_out_pair else None

    def shape_ranges(self, enable_dp):
        """``(data, getnext)`` shape-range strings routed as the original does, ``("", "")``
        when ``dynamic_inputs_shape_range`` is empty."""
        if not self.dynamic_inputs_shape_range:
            return ("", "")
        return parsers.parse_shape_range(self.dynamic_inputs_shape_range, enable_dp)

    def gear_pad_values(self):
        """``npu_adapter_gear_pad_values`` parsed into ``{name: number}``."""
        return parsers.parse_gear_pad_values(self.npu_adapter_gear_pad_values)

    def gear_unpad(self):
        """``npu_adapter_gear_unpad`` parsed into ``{tensor_name: (axes...)}``."""
        return parsers.parse_gear_unpad(self.npu_adapter_gear_unpad)

    # ---- value-object protocol ------------------------------------------------------------

    def __getattr__(self, name):
        if not name.startswith("_"):
            effective = object.__getattribute__(self, "_effective")
            if name in effective:
                return effective[name]
        match = suggest_option(name)
        hint = f"; did you mean {match!r}?" if match else ""
        raise AttributeError(f"NpuConfig has no option or attribute {name!r}{hint}")

    def __setattr__(self, name, value):
        raise AttributeError("NpuConfig is immutable; use replace(**changes)")

    def __delattr__(self, name):
        raise AttributeError("NpuConfig is immutable; use replace(key=None)")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(OPTIONS_BY_NAME))

    def __eq__(self, other):
        if not isinstance(other, NpuConfig):
            return NotImplemented
        return self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (_rebuild, (self._present, self.to_dict()))

    def __repr__(self):
        if not self._present:
            return "NpuConfig(present=False)"
        parts = [f"{key}={value!r}" for key, value in self._explicit.items()]
        parts += [f"{key}=<unread {entry[0]}: {_passthrough_to_python(entry)!r}>"
                  for key, entry in self._passthrough.items()]
        return "NpuConfig(" + ", ".join(parts) + ")"


def _rebuild(present, options):
    return NpuConfig._create(present, *NpuConfig._from_python(options))
