"""Frozen value records without :mod:`dataclasses`, for the models on a command's start-up path.

``@dataclass(frozen=True)`` imports :mod:`inspect` (and with it ast, dis and tokenize) and compiles
each class's methods with ``exec``: about 15 ms of start-up, a third of what ``farm inspect LIB`` may
take in all. The arch and binary models subclass :class:`Frozen` instead. A subclass names its fields
in order in ``__match_args__`` (as a dataclass does), stores them in ``__slots__ = __match_args__``
and sets them once in a typed ``__init__`` taking them in that order, through :meth:`Frozen._set`;
equality, hash, repr, :meth:`Frozen.replace` and pickling go over them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time either
if TYPE_CHECKING:
    from typing import Self


class Frozen:
    __slots__ = ()
    __match_args__: tuple[str, ...] = ()

    def _set(self, *values: object) -> None:
        """Set every field, in order (``__init__`` only)."""
        for name, value in zip(self.__match_args__, values, strict=True):
            object.__setattr__(self, name, value)

    def _fields(self) -> tuple[object, ...]:
        return tuple([getattr(self, name) for name in self.__match_args__])

    def replace(self, **changes: object) -> Self:
        """A copy with ``changes`` (fields by name), like :func:`dataclasses.replace`."""
        unknown = changes.keys() - set(self.__match_args__)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return self.__class__(*[changes.get(name, getattr(self, name)) for name in self.__match_args__])

    __replace__ = replace  # copy.replace (Python 3.13)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Frozen)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[type[Self], tuple[object, ...]]:
        # __init__ takes the fields in order: pickle and copy rebuild through it
        return self.__class__, self._fields()
