"""The bounded JSON reader: what it refuses, and that it reads what farm writes unchanged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from farm import jsonread
from farm.jsonread import JsonInputError


@pytest.mark.parametrize(("text", "why"), [
    ("[" * 100_000 + "]" * 100_000, "nest deeper than 64"),
    ("[" * 65 + "]" * 65, "nest deeper than 64"),
    ('{"a": NaN}', "NaN"),
    ('{"a": -Infinity}', "-Infinity"),
    ("1e400", "out of range"),
    ("1" * 65, "number of 65 characters"),
    ("0." + "1" * 100, "number of 102 characters"),
])
def test_refused(text: str, why: str) -> None:
    with pytest.raises(JsonInputError, match=why):
        jsonread.loads(text)


def test_not_utf8_names_the_offset() -> None:
    with pytest.raises(JsonInputError, match=r"not UTF-8 text \(byte 0xff at offset 7\)"):
        jsonread.loads(b'{"a": "\xff"}')


def test_what_farm_writes_reads_back_unchanged() -> None:
    value = {"a": [1, 2.5, None, True, "x" * 1000, {"b": [[["deep enough"]]]}], "n": 2**63, "s": "0" * 64}
    assert jsonread.loads(json.dumps(value)) == value
    assert jsonread.loads(json.dumps([[[]]] * 3).encode()) == [[[]]] * 3
    assert jsonread.loads("[" * 64 + "]" * 64) is not None


def test_a_file_is_read_up_to_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"a": 1}')
    assert jsonread.load_file(path, cap=8) == {"a": 1}
    with pytest.raises(JsonInputError, match="larger than 7 bytes"):
        jsonread.load_file(path, cap=7)
    with pytest.raises(JsonInputError, match="not a regular file"):
        jsonread.read_bounded("/dev/zero", 1024)  # a device never ends: never read
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(JsonInputError, match="not a regular file"):
        jsonread.read_bounded(fifo)  # nobody writes it: opening it blocked
