"""Frozen records (the arch and binary models): immutable, compared and hashed by their fields,
replaced and pickled through their __init__."""

from __future__ import annotations

import copy
import pickle

import pytest

from farm.binary.fatbin import Compression, Entry, EntryKind
from farm.model.arch import ArchList, Kind, Target, Variant


def test_fields_compare_and_hash_and_cannot_be_set() -> None:
    a, b = Target(9, 0, Variant.ARCH), Target(9, 0, Variant.ARCH, Kind.SASS)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Target(9, 0) and a != (9, 0, Variant.ARCH, Kind.SASS)
    with pytest.raises(AttributeError, match="major"):
        a.major = 10  # type: ignore[misc]
    with pytest.raises(AttributeError, match="minor"):
        del a.minor  # type: ignore[misc]
    assert repr(ArchList.parse("9.0a")) == "ArchList('sm_90a')"


def test_replace_copy_and_pickle_go_through_init() -> None:
    entry = Entry(EntryKind.CUBIN, Target(8, 0), Compression.ZSTD, 0x40, 64, 100, 200)
    bigger = entry.replace(payload_size=300)
    assert (bigger.payload_size, bigger.offset, entry.payload_size) == (300, 0x40, 100)
    with pytest.raises(TypeError, match="Entry has no field size"):
        entry.replace(size=1)
    assert pickle.loads(pickle.dumps(entry)) == entry
    assert copy.deepcopy(ArchList.parse("8.0;9.0+PTX")) == ArchList.parse("8.0;9.0+PTX")
