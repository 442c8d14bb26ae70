"""`JsonField`: `vocabulary.wire.JsonValue` as a named recursive alias (``typing_extensions``), the
form pydantic can check and document: a free-form JSON part of an API response, as a JSON column
holds it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from typing_extensions import TypeAliasType

__all__ = ["JsonField"]

#: A JSON value (`vocabulary.wire.JsonValue`) in a form pydantic can check and document.
JsonField = TypeAliasType(
    "JsonField", "bool | int | float | str | Sequence[JsonField] | Mapping[str, JsonField] | None"
)
