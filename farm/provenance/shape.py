"""One frozen dataclass tree, read three ways: its JSON schema, its decoder and its writer.

A record format (``_build_info.json``, a ledger line) is declared once, as frozen dataclasses whose
field annotations say everything about a key: its type, whether it may be ``null`` (``| None``),
whether older files may lack it (``| Absent``, default :data:`ABSENT`), and its constraints
(``Annotated[str, Rule(pattern=...)]``). Everything else is derived here from those annotations:

- :func:`schema` - the JSON schema (draft 2020-12) a reader outside farm validates against;
- :func:`decode` - parsed JSON to the typed objects, refusing keys the definition lacks (they
  would be lost on writing back);
- :func:`encode` - the typed objects back to JSON values, keys in the fields' order, an
  :data:`ABSENT` key left out (not written as ``null``);
- :func:`projection` - a msgspec type for a few fields only (the ledger index's fast decoder).

So a new field is one line in the definition. Supported annotations: ``str``, ``int``, ``float``
(also takes an integer, kept as written), ``bool``, a union of those (``bool | str``, told apart by
the value's type), ``Literal[...]``, ``Mapping[str, X]`` (read into a read-only mapping),
``tuple[X, ...]``, a dataclass, a union of dataclasses told apart by their ``kind`` class
variable, each with ``| None`` and ``| Absent``.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal, Union

import msgspec


class Absent(enum.Enum):
    """A key the file does not have (as opposed to one it records as ``null``)."""

    ABSENT = "absent"


ABSENT: Final = Absent.ABSENT


class Known(enum.Enum):
    """:attr:`Rule.asserted`: an asserted provenance records this value (never ``null``)."""

    KNOWN = "known"


KNOWN: Final = Known.KNOWN


@dataclass(frozen=True)
class Rule:
    """Constraints on one key, carried in its ``Annotated`` type.

    ``asserted``: what an asserted provenance promises of the value beyond its type: :data:`KNOWN`
    (not ``null``) or the one value allowed."""

    pattern: str | None = None
    min_length: int | None = None
    minimum: int | None = None
    description: str | None = None
    asserted: object = None


class ShapeError(Exception):
    """The value does not have the shape the definition declares; ``path`` says where."""

    def __init__(self, path: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    @property
    def where(self) -> str:
        return "/".join(self.path)


class UnknownKeyError(ShapeError):
    """The object has keys the definition lacks."""


# -- reading the annotations ------------------------------------------------------------------
@dataclass(frozen=True)
class _Type:
    """One annotation taken apart: the value's type, whether null/absence are allowed, its rules."""

    base: Any
    nullable: bool
    absent: bool
    rules: tuple[Rule, ...]


def _split(annotation: Any) -> _Type:
    rules: list[Rule] = []
    if typing.get_origin(annotation) is Annotated:
        annotation, *meta = typing.get_args(annotation)
        rules += [m for m in meta if isinstance(m, Rule)]
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = typing.get_args(annotation)
        nullable, absent = type(None) in args, Absent in args
        members = [arg for arg in args if arg is not type(None) and arg is not Absent]
        if len(members) == 1:
            inner = _split(members[0])
            return _Type(inner.base, nullable or inner.nullable, absent or inner.absent, (*rules, *inner.rules))
        return _Type(tuple(members), nullable, absent, tuple(rules))
    return _Type(annotation, False, False, tuple(rules))


@cache
def fields_of(cls: type) -> tuple[tuple[str, _Type], ...]:
    """The fields of dataclass ``cls`` in order, each taken apart."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple((f.name, _split(hints[f.name])) for f in dataclasses.fields(cls))


def _kind(cls: type) -> str | None:
    kind = getattr(cls, "kind", None)
    return kind if isinstance(kind, str) else None


# -- the schema -------------------------------------------------------------------------------
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _scalars(base: object) -> bool:
    """Whether ``base`` is a union of plain JSON types (``bool | str``), told apart by the value's type."""
    return isinstance(base, tuple) and all(member in _JSON_TYPES for member in base)


def _value_schema(base: Any) -> dict[str, Any]:
    if _scalars(base):
        return {"type": [_JSON_TYPES[member] for member in base]}
    if isinstance(base, tuple):  # a union of dataclasses, told apart by kind
        return {"oneOf": [_value_schema(member) for member in base]}
    if dataclasses.is_dataclass(base):
        assert isinstance(base, type)
        return object_schema(base)
    origin = typing.get_origin(base)
    if origin is Literal:
        values = list(typing.get_args(base))
        return {"const": values[0]} if len(values) == 1 else {"enum": values}
    if origin is Mapping:
        return {"type": "object", "additionalProperties": _schema(_split(typing.get_args(base)[1]))}
    if origin is tuple:
        return {"type": "array", "items": _schema(_split(typing.get_args(base)[0]))}
    if base not in _JSON_TYPES:
        raise TypeError(f"the definition uses {base!r}, which farm.provenance.shape does not read")
    return {"type": _JSON_TYPES[base]}


def _schema(t: _Type) -> dict[str, Any]:
    out = _value_schema(t.base)
    if t.nullable:
        if "type" in out:
            out["type"] = [out["type"], "null"]
        elif "oneOf" in out:
            out["oneOf"].insert(0, {"type": "null"})
        else:  # an enum or const
            out = {"oneOf": [{"type": "null"}, out]}
    out.update((key, value) for rule in t.rules
               for key, value in (("minLength", rule.min_length), ("minimum", rule.minimum), ("pattern", rule.pattern),
                                  ("description", rule.description)) if value is not None)
    return out


def object_schema(cls: type) -> dict[str, Any]:
    """The schema of one dataclass object: its keys in order, the ones it may lack not required."""
    kind = _kind(cls)
    properties: dict[str, Any] = {"kind": {"const": kind}} if kind is not None else {}
    properties.update((name, _schema(t)) for name, t in fields_of(cls))
    out: dict[str, Any] = {"type": "object",
                           "required": [*(["kind"] if kind else []), *(n for n, t in fields_of(cls) if not t.absent)]}
    if not getattr(cls, "OPEN_SCHEMA", False):
        out["additionalProperties"] = False
    out["properties"] = properties
    return out


def asserted_schema(cls: type) -> dict[str, Any] | None:
    """What an asserted provenance promises beyond the types (the fields' ``Rule.asserted``), as
    a schema the object must also match; None when nothing is promised."""
    properties: dict[str, Any] = {}
    for name, t in fields_of(cls):
        promise = next((r.asserted for r in t.rules if r.asserted is not None), None)
        here: dict[str, Any] = {}
        if promise is KNOWN:
            value = _value_schema(t.base)
            here = {"type": value["type"]} if "type" in value else {"not": {"type": "null"}}
        elif promise is not None:
            here = {"const": promise}
        if dataclasses.is_dataclass(t.base) and isinstance(t.base, type):
            inner = asserted_schema(t.base)
            if inner is not None:
                here.update(inner)
        if here:
            properties[name] = here
    return {"properties": properties} if properties else None


# -- decoding ---------------------------------------------------------------------------------
def decode(cls: type, data: object, path: tuple[str, ...] = (), *, skip: tuple[str, ...] = (),
           given: Mapping[str, Any] | None = None) -> Any:
    """``data`` (parsed JSON) as an instance of dataclass ``cls``. Keys in ``skip`` are ignored;
    fields in ``given`` take that value (an object the caller decoded from the same data)."""
    if not isinstance(data, Mapping):
        raise ShapeError(path, f"expected an object, got {type(data).__name__}")
    given = given or {}
    own = [(name, t) for name, t in fields_of(cls) if name not in given]
    allowed = {name for name, _ in own} | set(skip) | ({"kind"} if _kind(cls) else set())
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise UnknownKeyError(path, ", ".join(map(repr, unknown)))
    values: dict[str, Any] = dict(given)
    for name, t in own:
        if name in data:
            values[name] = _decode_value(t, data[name], (*path, name))
        elif t.absent:
            values[name] = ABSENT
        else:
            raise ShapeError((*path, name), f"missing key {name!r}")
    return cls(**values)


def _decode_value(t: _Type, value: object, path: tuple[str, ...]) -> Any:
    if value is None:
        if not t.nullable:
            raise ShapeError(path, "null where a value is required")
        return None
    base = t.base
    if _scalars(base):  # JSON's true is no integer: the value's own type must be a member
        if type(value) not in base and not (float in base and type(value) is int):
            raise ShapeError(path, f"expected {' or '.join(_JSON_TYPES[m] for m in base)}, got {type(value).__name__}")
        return value
    if isinstance(base, tuple):
        kind = value.get("kind") if isinstance(value, Mapping) else None
        for member in base:
            if _kind(member) == kind:
                return decode(member, value, path)
        raise ShapeError(path, f"unknown kind {kind!r}")
    if dataclasses.is_dataclass(base):
        return decode(base, value, path)  # type: ignore[arg-type]
    origin = typing.get_origin(base)
    if origin is Literal:
        if not any(value == allowed and type(value) is type(allowed) for allowed in typing.get_args(base)):
            raise ShapeError(path, f"{value!r} is not one of {list(typing.get_args(base))}")
        return value
    if origin is Mapping:
        if not isinstance(value, Mapping):
            raise ShapeError(path, f"expected an object, got {type(value).__name__}")
        item = _split(typing.get_args(base)[1])
        return MappingProxyType({k: _decode_value(item, v, (*path, k)) for k, v in value.items()})
    if origin is tuple:
        if not isinstance(value, list):
            raise ShapeError(path, f"expected an array, got {type(value).__name__}")
        item = _split(typing.get_args(base)[0])
        return tuple(_decode_value(item, v, (*path, str(i))) for i, v in enumerate(value))
    accepted: tuple[type, ...] = (int, float) if base is float else (base,)
    if not isinstance(value, accepted) or (isinstance(value, bool) and base is not bool):
        raise ShapeError(path, f"expected {_JSON_TYPES[base]}, got {type(value).__name__}")
    return value


# -- writing ----------------------------------------------------------------------------------
def encode(value: object) -> Any:
    """The JSON value of a definition's object: a dataclass as an object in its fields' order
    (``kind`` first where the class has one), an :data:`ABSENT` field left out."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = _kind(type(value))
        out: dict[str, Any] = {"kind": kind} if kind is not None else {}
        out.update((name, encode(item)) for name, _ in fields_of(type(value))
                   if (item := getattr(value, name)) is not ABSENT)
        return out
    if isinstance(value, Mapping):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [encode(v) for v in value]
    return value


# -- a fast decoder of a few fields -----------------------------------------------------------
def projection(cls: type | tuple[type, ...], name: str, pick: Mapping[str, Any], *,
               nulls: bool | Collection[str] = False,
               missing: bool | Collection[str] = False) -> type[msgspec.Struct]:
    """A msgspec type that decodes only the fields of ``cls`` (of one object made of several
    dataclasses' fields, when a tuple) named in ``pick``, with their
    definition's type made non-null (the rest of the object is skipped, never built).

    ``pick[field]`` is ``...`` (the definition's type), a mapping (a projection of that field's
    dataclass) or a type that narrows the definition's (``Literal["asserted"]``). Patterns are left
    to the caller: a regular expression per value costs more than decoding the whole line.

    ``missing``: a field its definition allows to be left out (``Absent``), here and in the picked
    fields' projections, decodes as None when the object leaves it out (True: every field; else the
    names of the fields, and their projections, it applies to)."""
    own = {n: t for c in (cls if isinstance(cls, tuple) else (cls,)) for n, t in fields_of(c)}
    spec: list[tuple[str, Any] | tuple[str, Any, None]] = []
    for field, how in pick.items():
        t = own[field]
        null = nulls is True or (not isinstance(nulls, bool) and field in nulls)
        miss = missing is True or (not isinstance(missing, bool) and field in missing)
        if isinstance(how, Mapping):
            sub: Any = projection(t.base, f"{name}_{field}", how, nulls=null, missing=miss)
            typ = sub | None if null else sub
        elif how is ...:
            typ = _msgspec_type(t, nulls=null, missing=miss)
        else:
            typ = _msgspec_type(_split(how), nulls=null, missing=miss)
        spec.append((field, typ | None, None) if miss and t.absent else (field, typ))
    # kw_only: fields with a default may come first. gc=False: a decoded value holds no cycle, and
    # the collector's passes over a ledger's 30,000 decoded lines cost more than decoding them.
    return msgspec.defstruct(name, spec, kw_only=True, gc=False)


def _msgspec_type(t: _Type, *, nulls: bool = False, missing: bool = False) -> Any:
    base = t.base
    if dataclasses.is_dataclass(base) and isinstance(base, type):  # a whole record: its absent keys too
        base = projection(base, base.__name__, {n: ... for n, _ in fields_of(base)}, nulls=nulls, missing=missing)
    elif typing.get_origin(base) is tuple:
        item = _msgspec_type(_split(typing.get_args(base)[0]), nulls=nulls, missing=missing)
        base = list[item]  # type: ignore[valid-type]
    metas = [msgspec.Meta(min_length=r.min_length) for r in t.rules if r.min_length is not None]
    metas += [msgspec.Meta(ge=r.minimum) for r in t.rules if r.minimum is not None]
    out = Annotated.__class_getitem__((base, *metas)) if metas else base  # type: ignore[attr-defined]
    return out | None if nulls else out
