"""`vocabulary.wire`: typed reads of JSON at the edges, and the errors that name the field."""

from __future__ import annotations

import pytest

from vocabulary.wire import Reader, WireError, as_json


def test_reads_each_type_and_defaults() -> None:
    r = Reader({"s": "x", "i": 3, "f": 2, "b": False, "o": {"k": 1}, "l": [1, 2], "t": ["a"]}, "the reply")
    assert (r.text("s"), r.integer("i"), r.number("f"), r.flag("b")) == ("x", 3, 2.0, False)
    assert r.nested("o").integer("k") == 1 and r.items("l") == [1, 2] and r.texts("t") == ["a"]
    assert r.text("missing", "d") == "d" and r.optional_number("missing") is None
    assert r.nested("missing", optional=True).has("k") is False and r.items("missing", optional=True) == []
    assert r.items_of("l", lambda x: int(str(x)) * 2) == [2, 4]


@pytest.mark.parametrize(("data", "read", "words"), [
    ({}, lambda r: r.text("name"), "the reply lacks 'name'"),
    ({"n": None}, lambda r: r.integer("n"), "lacks 'n'"),
    ({"n": "3"}, lambda r: r.integer("n"), "'n' is not an integer"),
    ({"n": True}, lambda r: r.number("n"), "'n' is not a number"),
    ({"n": 1}, lambda r: r.flag("n"), "'n' is not true or false"),
    ({"l": {}}, lambda r: r.items("l"), "'l' is not a list"),
    ({"l": [1]}, lambda r: r.texts("l"), "'l' is not a list of strings"),
    ({"l": ["x"]}, lambda r: r.items_of("l", lambda x: int(str(x))), "an item of 'l' is malformed"),
    ({"o": 1}, lambda r: r.nested("o"), "the reply's 'o' is not a JSON object"),
])
def test_a_wrong_field_is_a_wire_error_naming_it(data: dict[str, object], read, words: str) -> None:
    with pytest.raises(WireError, match=words):
        read(Reader(data, "the reply"))


def test_only_objects_are_read_and_only_json_is_kept() -> None:
    with pytest.raises(WireError, match="the reply is not a JSON object"):
        Reader([1], "the reply")
    assert as_json({"a": (1, [2.5, None])}) == {"a": [1, [2.5, None]]}
    with pytest.raises(WireError, match="holds a set"):
        as_json({"a": {1}})
