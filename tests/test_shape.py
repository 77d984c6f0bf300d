"""One frozen dataclass tree read as its JSON schema, its decoder, its writer and a fast projection:
a field added to the definition shows up in all four, with nothing else to edit."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import jsonschema
import msgspec
import pytest

from farm.provenance import buildinfo
from farm.provenance.buildinfo import BuildInfo
from farm.provenance.shape import (
    ABSENT,
    Absent,
    Rule,
    ShapeError,
    UnknownKeyError,
    decode,
    encode,
    object_schema,
    projection,
)


@dataclass(frozen=True)
class Leaf:
    kind: ClassVar[str] = "leaf"
    name: Annotated[str, Rule(min_length=1)]


@dataclass(frozen=True)
class Branch:
    kind: ClassVar[str] = "branch"
    leaves: tuple[Leaf, ...]


@dataclass(frozen=True, kw_only=True)
class Tree:
    OPEN_SCHEMA: ClassVar[bool] = True
    size: Annotated[int, Rule(minimum=0)]
    labels: Mapping[str, str] | None
    top: Leaf | Branch | None
    state: Literal["young", "old"]
    note: str | Absent | None = ABSENT


SAMPLE = {"size": 3, "labels": {"b": "x", "a": "y"}, "top": {"kind": "branch", "leaves": [{"kind": "leaf", "name": "n"}]},
          "state": "old"}


def test_decode_and_encode_round_trip_in_field_order() -> None:
    tree = decode(Tree, SAMPLE)
    assert tree == Tree(size=3, labels={"b": "x", "a": "y"}, top=Branch((Leaf("n"),)), state="old")
    assert tree.note is ABSENT
    assert json.dumps(encode(tree)) == json.dumps(SAMPLE)  # order kept, the absent key left out
    with pytest.raises(TypeError):
        tree.labels["c"] = "z"


@pytest.mark.parametrize(("data", "where"), [
    ({**SAMPLE, "extra": 1}, ""),
    ({**SAMPLE, "top": {"kind": "leaf", "name": "n", "colour": "red"}}, "top"),
])
def test_a_key_the_definition_lacks_is_refused(data: dict[str, object], where: str) -> None:
    with pytest.raises(UnknownKeyError) as err:
        decode(Tree, data)
    assert err.value.where == where


@pytest.mark.parametrize(("data", "where"), [
    ({k: v for k, v in SAMPLE.items() if k != "size"}, "size"),
    ({**SAMPLE, "size": True}, "size"),
    ({**SAMPLE, "state": "new"}, "state"),
    ({**SAMPLE, "top": {"kind": "trunk"}}, "top"),
    ({**SAMPLE, "top": {"kind": "branch", "leaves": [None]}}, "top/leaves/0"),
    ({**SAMPLE, "labels": {"a": 1}}, "labels/a"),
])
def test_a_wrong_shape_says_where(data: dict[str, object], where: str) -> None:
    with pytest.raises(ShapeError) as err:
        decode(Tree, data)
    assert err.value.where == where


def test_the_schema_says_what_the_decoder_checks() -> None:
    schema = object_schema(Tree)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(SAMPLE)
    assert schema["required"] == ["size", "labels", "top", "state"]  # note may be absent
    assert "additionalProperties" not in schema  # open for other readers; the decoder is closed
    assert schema["properties"]["top"]["oneOf"][1]["additionalProperties"] is False
    assert not validator.is_valid({**SAMPLE, "size": -1})
    assert not validator.is_valid({**SAMPLE, "top": {"kind": "leaf", "name": ""}})


def test_a_projection_decodes_the_picked_fields_only() -> None:
    fast = projection(Tree, "TreeSize", {"size": ..., "state": Literal["old"]})
    decoded: Any = msgspec.json.decode(json.dumps(SAMPLE), type=fast)
    assert (decoded.size, decoded.state) == (3, "old")
    for bad in ({**SAMPLE, "size": -1}, {**SAMPLE, "state": "young"}):
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(json.dumps(bad), type=fast)


def test_a_projection_with_missing_decodes_only_absent_capable_fields_as_none() -> None:
    fast = projection(Tree, "TreeNote", {"size": ..., "note": ...}, missing=True)
    decoded: Any = msgspec.json.decode(json.dumps(SAMPLE), type=fast)
    assert (decoded.size, decoded.note) == (3, None)  # note may be left out: None
    noted: Any = msgspec.json.decode(json.dumps({**SAMPLE, "note": "n"}), type=fast)
    assert noted.note == "n"
    with pytest.raises(msgspec.ValidationError, match="size"):  # size may not: still required
        msgspec.json.decode(json.dumps({"note": "n"}), type=fast)


@dataclass(frozen=True)
class Counts:
    steps: int
    refused: Mapping[str, int] | Absent = ABSENT  # a key added later


@dataclass(frozen=True)
class Holder:
    counts: Counts


def test_missing_reaches_the_absent_keys_of_a_whole_record_picked() -> None:
    """A record picked whole (``...``) gets a key its definition adds later: older lines lack it."""
    fast = projection(Holder, "HolderCounts", {"counts": ...}, missing=True)
    older: Any = msgspec.json.decode(json.dumps({"counts": {"steps": 3}}), type=fast)
    assert (older.counts.steps, older.counts.refused) == (3, None)
    newer: Any = msgspec.json.decode(json.dumps({"counts": {"steps": 3, "refused": {"x": 1}}}), type=fast)
    assert newer.counts.refused == {"x": 1}
    strict = projection(Holder, "HolderCountsStrict", {"counts": ...})
    with pytest.raises(msgspec.ValidationError, match="refused"):
        msgspec.json.decode(json.dumps({"counts": {"steps": 3}}), type=strict)


def test_a_field_added_to_the_definition_reaches_schema_decoder_writer_and_index() -> None:
    """The one place a new key is written: a field. Here a subclass of the real definition adds
    one, and the schema, the decoder, the writer and a projection all know it."""

    @dataclass(frozen=True, kw_only=True)
    class Signed(BuildInfo):
        signed_by: Annotated[str, Rule(min_length=1)] | Absent | None = ABSENT

    base = buildinfo.inferred_build_info(dist="a", version="1.0", cell={"cuda": "13.0"}, found={"a/_C.so": "sm_90"},
                                         extensions={"a/_C.so": "ab" * 32})
    signed = Signed(**{f.name: getattr(base, f.name) for f in dataclasses.fields(BuildInfo)}, signed_by="key-1")
    # the writer: the new key last, in the file's order
    data = encode(signed)
    assert list(data)[-1] == "signed_by"
    assert data["signed_by"] == "key-1"
    assert {k: v for k, v in data.items() if k != "signed_by"} == base.to_dict()
    # the schema
    schema = object_schema(Signed)
    assert schema["properties"]["signed_by"] == {"type": ["string", "null"], "minLength": 1}
    assert "signed_by" not in schema["required"]
    assert jsonschema.Draft202012Validator(schema).is_valid(data)
    # the decoder (and an older file without the key still reads, and writes back without it)
    assert decode(Signed, data) == signed
    assert decode(Signed, base.to_dict()).signed_by is ABSENT
    assert encode(decode(Signed, base.to_dict())) == base.to_dict()
    # the fast projection
    fast = projection(Signed, "SignedKey", {"signed_by": ...})
    assert getattr(msgspec.json.decode(json.dumps(data), type=fast), "signed_by") == "key-1"  # noqa: B009 (a type made at run time)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(json.dumps({**data, "signed_by": ""}), type=fast)
    # and the real definition does not know it: a file that has it is refused, not silently changed
    with pytest.raises(Exception, match="signed_by"):
        BuildInfo.from_json(json.dumps(data))
    assert "signed_by" not in buildinfo.schema()["properties"]


def test_a_literal_takes_only_its_own_values_and_types() -> None:
    """``1.0`` or ``true`` equal ``1`` in Python; written back they would not be the same bytes."""
    for value in (1.0, True):
        with pytest.raises(ShapeError, match="is not one of"):
            decode(Tree, {**SAMPLE, "state": value})
    data = buildinfo.inferred_build_info(dist="a", version="1.0", cell={}, found={}, extensions={}).to_dict()
    with pytest.raises(ShapeError) as err:
        decode(BuildInfo, {**data, "schema_version": 1.0})
    assert err.value.where == "schema_version"


@dataclass(frozen=True)
class Knob:
    expect: bool | str


def test_a_union_of_plain_types_takes_each_by_its_own_type() -> None:
    """``true`` or a text (a recipe's expect_device_error); a number is neither, even where Python
    would compare it equal to ``true``."""
    assert object_schema(Knob)["properties"]["expect"] == {"type": ["boolean", "string"]}
    for good in (True, "CUDA is not available"):
        assert decode(Knob, {"expect": good}) == Knob(good)
        assert encode(Knob(good)) == {"expect": good}
        jsonschema.validate({"expect": good}, object_schema(Knob))
    value: object
    for value, says in ((1, "expected boolean or string"), (1.0, "expected boolean or string"),
                        ([], "expected boolean or string"), (None, "null where a value is required")):
        with pytest.raises(ShapeError, match=says) as err:
            decode(Knob, {"expect": value})
        assert err.value.where == "expect"


def test_an_annotation_the_reader_does_not_know_is_a_clear_error() -> None:
    @dataclass(frozen=True)
    class Odd:
        when: complex

    with pytest.raises(TypeError, match="does not read"):
        object_schema(Odd)
