"""farm.jsontext writes what json.dumps writes, for every kind of value farm's documents hold."""

from __future__ import annotations

import json
import math

import pytest

from farm.jsontext import Raw, dump, dumps

VALUES: list[object] = [
    None, True, False, 0, -1, 2**70, 1.5, -0.0, 1e300, math.inf, -math.inf, "", "plain",
    'quote " backslash \\ slash / tab \t newline \n nul \0 bell \x07', "é ü 漢字 \U0001f600 \ud800",
    [], (), {}, [1, [2, (3, None)], {"a": []}], {"b": 1, "a": {"c": [True, False]}, "": ""},
    {1: "int key", -5: None}, {"path": "/tmp/x.so", "found": ["sm_90", "compute_90"], "n": 3},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_same_text_as_json_dumps(value: object) -> None:
    assert dumps(value) == json.dumps(value)


def test_nan_as_json_writes_it() -> None:
    assert dumps([math.nan]) == json.dumps([math.nan]) == "[NaN]"


def test_raw_text_is_written_as_it_is() -> None:
    inner = json.dumps([{"offset": 1}])
    assert dumps({"a": Raw(inner), "b": "x"}) == json.dumps({"a": [{"offset": 1}], "b": "x"})
    assert json.loads(dumps({"fatbins": Raw(inner)})) == {"fatbins": [{"offset": 1}]}


@pytest.mark.parametrize("value", [{(1, 2): 3}, {None: 1}, {True: 1}, object(), {1, 2}, b"bytes"])
def test_what_it_cannot_write_is_refused(value: object) -> None:
    with pytest.raises(TypeError):
        dumps(value)


def test_dump_hands_the_same_text_over_in_pieces() -> None:
    pieces: list[str] = []
    value = {"results": [{"fatbins": Raw("[1, 2]"), "path": "a\u00e9"}], "n": None}
    dump(value, pieces.append)
    assert len(pieces) > 1
    assert "".join(pieces) == dumps(value) == json.dumps({**value, "results": [
        {"fatbins": [1, 2], "path": "a\u00e9"}]})
