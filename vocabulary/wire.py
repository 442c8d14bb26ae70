"""JSON at the edges: the type of a value on the wire, and typed reads of one.

Values travel inside and between the packages as frozen dataclasses and enums; they become JSON
only at the edges (the sandbox pipe, the database column, HTTP/SSE, Celery). `JsonObject` is the type
of such a JSON object, already parsed or about to be dumped: what a ``to_dict()`` returns and a
``from_dict()`` reads. A ``from_dict()`` reads it through a `Reader`, so a field that is missing
or of the wrong type is a `WireError` naming the field: a reply from an untrusted sandbox is
validated where it enters, not where it is used.

Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import TypeAlias, TypeVar

__all__ = ["JsonObject", "JsonValue", "Reader", "WireError", "as_json", "as_object", "finite_or_none"]

#: A JSON value as `json.dumps` takes it (containers read-only, so a ``list[str]`` or a tuple is one).
JsonValue: TypeAlias = "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
#: A JSON object at an edge (a ``to_dict()``'s result).
JsonObject: TypeAlias = "dict[str, JsonValue]"

T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)


class WireError(ValueError):
    """A JSON value without the shape its reader expects; the message names the field."""


class Reader:
    """Typed reads of the fields of one JSON object.

    Args:
        data: the parsed value (anything: it is checked to be an object).
        what: how a `WireError`'s message names it ("the timing reply").

    A read without a default fails on a missing (or null) field; with one, that field reads as
    the default. An ``int`` reads as a number; a ``bool`` is never a number.
    """

    def __init__(self, data: object, what: str = "the object") -> None:
        if not isinstance(data, Mapping):
            raise WireError(f"{what} is not a JSON object")
        self.data: Mapping[str, object] = data
        self.what = what

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def _present(self, key: str) -> object:
        value = self.data.get(key)
        if value is None:
            raise WireError(f"{self.what} lacks {key!r}")
        return value

    def _wrong(self, key: str, expected: str) -> WireError:
        return WireError(f"{self.what}: {key!r} is not {expected}")

    def text(self, key: str, default: str | None = None) -> str:
        if default is not None and not self.has(key):
            return default
        value = self._present(key)
        if not isinstance(value, str):
            raise self._wrong(key, "a string")
        return value

    def optional_text(self, key: str) -> str | None:
        return self.text(key) if self.has(key) else None

    def choice(self, key: str, enum: type[E]) -> E:
        """A string field naming one of ``enum``'s values."""
        value = self.text(key)
        try:
            return enum(value)
        except ValueError:
            raise self._wrong(key, f"one of {[member.value for member in enum]}") from None

    def optional_choice(self, key: str, enum: type[E]) -> E | None:
        return self.choice(key, enum) if self.has(key) else None

    def integer(self, key: str, default: int | None = None) -> int:
        if default is not None and not self.has(key):
            return default
        value = self._present(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, "an integer")
        return value

    def optional_integer(self, key: str) -> int | None:
        return self.integer(key) if self.has(key) else None

    def number(self, key: str, default: float | None = None) -> float:
        if default is not None and not self.has(key):
            return default
        value = self._present(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(key, "a number")
        return float(value)

    def optional_number(self, key: str) -> float | None:
        return self.number(key) if self.has(key) else None

    def flag(self, key: str, default: bool | None = None) -> bool:
        if default is not None and not self.has(key):
            return default
        value = self._present(key)
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false")
        return value

    def nested(self, key: str, *, optional: bool = False) -> Reader:
        """A nested object as a `Reader`; ``optional``: a missing one reads as an empty object."""
        value = self.data.get(key)
        if value is None and optional:
            value = {}
        return Reader(value if value is not None else self._present(key), f"{self.what}'s {key!r}")

    def items(self, key: str, *, optional: bool = False) -> list[object]:
        """A list's items, unchecked; ``optional``: a missing list reads as empty."""
        if optional and not self.has(key):
            return []
        value = self._present(key)
        if not isinstance(value, list | tuple):
            raise self._wrong(key, "a list")
        return list(value)

    def items_of(self, key: str, read: Callable[[object], T], *, optional: bool = False) -> list[T]:
        """A list whose items ``read`` turns into values; an item it cannot read (`WireError`,
        TypeError, ValueError, KeyError) is a `WireError` naming the list."""
        try:
            return [read(x) for x in self.items(key, optional=optional)]
        except WireError:
            raise
        except (TypeError, ValueError, KeyError) as exc:
            raise WireError(f"{self.what}: an item of {key!r} is malformed ({exc})") from None

    def texts(self, key: str, *, optional: bool = False) -> list[str]:
        values = self.items(key, optional=optional)
        if not all(isinstance(v, str) for v in values):
            raise self._wrong(key, "a list of strings")
        return [str(v) for v in values]

    def numbers(self, key: str, *, optional: bool = False) -> list[float]:
        found: list[float] = []
        for value in self.items(key, optional=optional):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self._wrong(key, "a list of numbers")
            found.append(float(value))
        return found

    def integers(self, key: str, *, optional: bool = False) -> list[int]:
        found: list[int] = []
        for value in self.items(key, optional=optional):
            if isinstance(value, bool) or not isinstance(value, int):
                raise self._wrong(key, "a list of integers")
            found.append(value)
        return found

    def object(self, key: str) -> JsonObject:
        """A nested object kept as JSON (a payload another reader checks)."""
        return as_object(self._present(key), f"{self.what}'s {key!r}")

    def json(self, key: str, *, optional: bool = False) -> JsonValue:
        """A field kept as JSON (a free-form part of the contract); ``optional``: missing is null."""
        if optional and not self.has(key):
            return None
        return as_json(self._present(key), f"{self.what}'s {key!r}")


def as_json(value: object, what: str = "the value") -> JsonValue:
    """``value`` checked to be JSON (tuples become lists); anything else is a `WireError`."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [as_json(v, what) for v in value]
    if isinstance(value, Mapping):
        return {str(k): as_json(v, what) for k, v in value.items()}
    raise WireError(f"{what} holds a {type(value).__name__}, not JSON")


def as_object(value: object, what: str = "the value") -> JsonObject:
    """``value`` checked to be a JSON object; anything else is a `WireError`."""
    checked = as_json(value, what)
    if not isinstance(checked, dict):
        raise WireError(f"{what} is not a JSON object")
    return checked


def finite_or_none(value: float | None) -> float | None:
    """``value`` if it is a finite number, else ``None``: JSON (and SQL) have no NaN or infinity."""
    return value if value is not None and math.isfinite(value) else None
