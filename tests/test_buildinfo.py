"""_build_info.json: schema validation, the typed object's round trip to the very bytes (files the
previous farm wrote included), the schema derived from the one definition, and failing closed on
foreign files."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from farm.errors import LedgerError, ToolError, WheelError
from farm.provenance import buildinfo, probe
from farm.provenance.buildinfo import ABSENT, BuildInfo, LedgerEntry, ToolkitRecord
from farm.provenance.ledgerline import dumps_entry
from farm.toolkit.assemble import parse_nvcc_release

SHA = "ab" * 32


def _tree(info: BuildInfo | LedgerEntry) -> dict[str, Any]:
    """The provenance as the JSON tree it writes, read as the tests read it."""
    return info.to_dict()



def asserted_example() -> BuildInfo:
    return buildinfo.make_build_info(
        package="demo_ext",
        dist="demo_ext",
        version="0.1.0",
        cell={"cuda": "13.0", "torch": "none", "python": "cp311", "platform": "linux_x86_64"},
        build_epoch=2,
        requested="8.0;9.0+PTX",
        normalised="sm_80;sm_90;compute_90",
        expected={"demo_ext/_C.so": "sm_80;sm_90;compute_90"},
        found={"demo_ext/_C.so": "sm_80;sm_90;compute_90"},
        tools={"native_reader": "farm 0.1.0", "cuobjdump": "13.2.51"},
        defaults_sha256=SHA,
        recipe_sha256=SHA,
        run=probe.run_from_env({}),
        source=buildinfo.GitSourceRecord("o/r", "v1", "c" * 40),
        # as farms before torch_cuda and toolkit wrote it: the keys stay absent on writing back
        toolchain=buildinfo.Toolchain.from_mapping({"nvcc": "13.0.88", "torch": None, "python": "3.11.7",
                                                    "builder": "native", "cibuildwheel": None}),
        extensions={"demo_ext/_C.so": SHA},
    )


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(buildinfo.schema())


def test_the_architecture_doc_example_keys_are_exactly_the_schema_keys(repo_root: Path) -> None:
    text = (repo_root / "docs" / "architecture.md").read_text()
    block = text.split("```json", 1)[1].split("```", 1)[0]
    doc_keys = set(json.loads(block.replace('"...",', '"x",').replace('"<sha256>"', '"x"')
                              .replace('"sm_75;..."', '"x"')))
    assert doc_keys == set(buildinfo.schema()["required"])
    assert doc_keys == set(asserted_example().for_wheel().to_dict())  # the file a wheel holds


def test_a_wheel_embeds_no_record_of_the_build_that_made_it_and_the_ledger_keeps_it() -> None:
    counts = {"tool": "sccache", "compiles": 3, "hits": 1, "misses": 2, "not_cacheable": {}}
    info = dataclasses.replace(asserted_example(), duration_s=12.5, toolchain=buildinfo.Toolchain.from_mapping(
        {"nvcc": "13.0.88", "torch": None, "python": "3.11.7", "builder": "native", "cibuildwheel": None,
         "compile_cache": counts}))
    embedded = _tree(info.for_wheel())
    assert not {"run", "duration_s"} & set(embedded)
    assert "compile_cache" not in embedded["toolchain"]
    # two builds of one cell (another run, another duration, other hits) embed the same bytes
    other = dataclasses.replace(info, run=buildinfo.Run("github", "o/r", "d" * 40, "7", "2"), duration_s=99.0)
    assert other.for_wheel().to_json() == info.for_wheel().to_json()
    line = _tree(info.ledger_entry(filename="demo_ext-0.1.0+cu130-cp311-cp311-linux_x86_64.whl", sha256=SHA, size=1))
    assert (line["run"], line["duration_s"], line["toolchain"]["compile_cache"]) == (
        {"provider": "local", "repository": None, "commit": None, "run_id": None, "attempt": None}, 12.5, counts)
    assert BuildInfo.from_json(info.for_wheel().to_json()) == info.for_wheel()  # read back as written


def test_asserted_example_validates_and_round_trips() -> None:
    info = asserted_example()
    buildinfo.validate(info.to_dict())
    data = info.to_json()
    assert BuildInfo.from_json(data) == info
    assert BuildInfo.from_json(data).to_json() == data
    assert BuildInfo.from_json(json.loads(data)) == info  # an object already parsed reads the same
    assert data == (json.dumps(info.to_dict(), indent=2) + "\n").encode()  # the format farm always wrote


def test_the_object_is_frozen_all_the_way_down() -> None:
    info = asserted_example()
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.dist = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.cell.cuda = "12.8"  # type: ignore[misc]
    with pytest.raises(TypeError):
        info.found["demo_ext/_C.so"] = "sm_75"  # type: ignore[index]


def test_absent_keys_stay_absent_and_nulls_stay_null() -> None:
    """An older file without ``torch_cuda``, ``toolkit`` or a run ``url`` is written back without
    them; one that records them as null keeps the nulls: both round-trip byte for byte."""
    old = asserted_example()
    assert old.toolchain is not None
    assert old.toolchain.torch_cuda is ABSENT
    assert old.toolchain.toolkit is ABSENT
    assert isinstance(old.run, buildinfo.Run)
    assert old.run.url is ABSENT
    assert "torch_cuda" not in _tree(old)["toolchain"]
    assert "url" not in _tree(old)["run"]
    new = dataclasses.replace(old, toolchain=probe.toolchain(cuda_home=None, builder="cibuildwheel"),
                              run=probe.run_from_env({"GITHUB_ACTIONS": "true"}))
    assert _tree(new)["toolchain"]["torch_cuda"] is None
    assert _tree(new)["toolchain"]["toolkit"] is None
    assert _tree(new)["run"]["url"] is None
    for info in (old, new):
        assert BuildInfo.from_json(info.to_json()).to_json() == info.to_json()


def test_toolkit_record_round_trips() -> None:
    toolkit = {"source": "redist", "release": "13.0.2", "manifest_url": "https://x/redistrib_13.0.2.json",
               "manifest_sha256": SHA, "components": [{"name": "cuda_nvcc", "version": "13.0.88", "sha256": SHA}]}
    chain = probe.toolchain(cuda_home=None, builder="native", toolkit=toolkit)
    info = dataclasses.replace(asserted_example(), toolchain=chain)
    assert _tree(info)["toolchain"]["toolkit"] == toolkit
    back = BuildInfo.from_json(info.to_json())
    assert back == info
    assert back.toolchain is not None
    assert isinstance(back.toolchain.toolkit, ToolkitRecord)
    assert back.toolchain.toolkit.components[0].name == "cuda_nvcc"
    assert back.toolchain.toolkit.libcuda_stub is ABSENT  # a farm before the stub: absent, written back so


@pytest.mark.parametrize("stub", [SHA, None])
def test_the_toolkits_libcuda_stub_round_trips(stub: str | None) -> None:
    """The link-time stub's sha256 (from the toolkit's ready stamp), or null where the toolkit has none."""
    toolkit: dict[str, Any] = {"source": "pypi", "release": "13.0.2", "manifest_url": None, "manifest_sha256": None,
                               "components": [], "libcuda_stub": stub}
    info = dataclasses.replace(asserted_example(),
                               toolchain=probe.toolchain(cuda_home=None, builder="native", toolkit=toolkit))
    assert _tree(info)["toolchain"]["toolkit"] == toolkit
    back = BuildInfo.from_json(info.to_json())
    assert back == info
    assert back.toolchain is not None
    assert isinstance(back.toolchain.toolkit, ToolkitRecord)
    assert back.toolchain.toolkit.libcuda_stub == stub


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["run"].update(runner="x"), "run has key(s) 'runner' this farm does not know"),
        (lambda d: d["toolchain"].update(ccache="4.9"), "toolchain has key(s) 'ccache'"),
        (lambda d: d["assertion"].update(third_reader="x"), "assertion has key(s) 'third_reader'"),
        (lambda d: d.update(signed_by="x"), "_build_info.json has key(s) 'signed_by'"),
    ],
)
def test_a_key_this_farm_does_not_know_fails_closed(mutate, message: str) -> None:
    """The schema leaves these objects open; the typed object would drop the key on writing
    back, so a file that has one is refused rather than silently changed."""
    data = asserted_example().to_dict()
    mutate(data)
    buildinfo.validate(data)  # the schema alone would take it
    with pytest.raises(WheelError) as err:
        BuildInfo.from_json(json.dumps(data).encode(), where="w.whl!x.dist-info/_build_info.json")
    assert message in str(err.value)
    assert str(err.value).startswith("w.whl!x.dist-info/_build_info.json: invalid build info")
    assert "upgrade farm" in (err.value.hint or "")


def test_a_newer_schema_says_so() -> None:
    data = {**asserted_example().to_dict(), "schema_version": 2}
    with pytest.raises(WheelError, match="schema version 2: this farm reads version 1") as err:
        BuildInfo.from_json(json.dumps(data), where="w.whl")
    assert "newer farm" in (err.value.hint or "")


@pytest.mark.parametrize("data", [b"[]", b'"x"', b"null", b"{}", b'{"provenance": "asserted"}'])
def test_not_a_build_info_is_refused_with_its_place(data: bytes) -> None:
    with pytest.raises(WheelError, match="^w.whl: invalid build info"):
        BuildInfo.from_json(data, where="w.whl")


def test_oversized_bytes_are_refused_before_parsing() -> None:
    with pytest.raises(WheelError, match="at most"):
        BuildInfo.from_json(b" " * (buildinfo.MAX_BUILD_INFO + 1), where="w.whl")


def test_ledger_entry_is_the_build_info_plus_the_ledger_keys() -> None:
    info = asserted_example()
    entry = info.ledger_entry(filename="demo_ext-0.1.0+cu130-2-cp311-cp311-linux_x86_64.whl", sha256=SHA, size=9)
    data = entry.to_dict()
    assert {k: v for k, v in data.items() if k not in buildinfo.LEDGER_KEYS} == info.to_dict()
    assert data["published"] == []
    assert data["size"] == 9
    assert LedgerEntry.from_json(json.dumps(data)) == entry
    published = entry.with_published("gh", "https://x/a.whl")
    assert _tree(published)["published"] == [{"target": "gh", "url": "https://x/a.whl"}]
    assert entry.published == ()  # frozen: with_published makes another
    # a ledger line is not a _build_info.json, nor the other way round
    with pytest.raises(WheelError, match="a ledger entry"):
        BuildInfo.from_json(json.dumps(data))
    with pytest.raises(LedgerError, match="not a ledger entry: no filename, sha256, size, published"):
        LedgerEntry.from_json(info.to_json(), where="ledger.jsonl:3")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("extensions"), "'extensions' is a required property"),
        (lambda d: d.update(provenance="guessed"), "provenance"),
        (lambda d: d["extensions"].update({"x.so": "not-a-hash"}), "extensions/x.so"),
        (lambda d: d.update(build_epoch=None), "build_epoch"),
        (lambda d: d.update(assertion={"result": "failed", "native_reader": None, "cuobjdump": None}), "assertion"),
        (lambda d: d.update(source={"kind": "git", "repo": "o/r"}), "source"),
        (lambda d: d["cell"].update(cuda="13"), "cell/cuda"),
    ],
)
def test_schema_rejects(mutate, message: str) -> None:
    info = copy.deepcopy(asserted_example().to_dict())
    mutate(info)
    with pytest.raises(WheelError) as err:
        buildinfo.validate(info, where="w.whl")
    assert message in str(err.value)
    assert str(err.value).startswith("w.whl: invalid build info")


def test_inferred_entry_has_every_key_and_nulls_for_the_unknown() -> None:
    info = buildinfo.inferred_build_info(
        dist="demo_ext", version="0.1.0",
        cell={"cuda": "12.8", "torch": None, "python": "cp311", "platform": "linux_x86_64"},
        found={"demo_ext/_C.so": "sm_80"}, extensions={"demo_ext/_C.so": SHA},
    )
    buildinfo.validate(info.to_dict())
    assert set(info.to_dict()) == set(asserted_example().to_dict())
    assert info.provenance == "inferred"
    assert not info.asserted
    assert info.run is None
    assert info.toolchain is None
    assert info.build_epoch is None
    assert BuildInfo.from_json(info.to_json()) == info


def test_from_json_refuses_non_json() -> None:
    with pytest.raises(WheelError, match="not JSON"):
        BuildInfo.from_json(b"{", where="x")


def test_parse_nvcc_version() -> None:
    text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\n"
    assert parse_nvcc_release(text) == "12.8.93"
    with pytest.raises(ToolError):
        parse_nvcc_release("garbage")


def test_sha256_file(tmp_path: Path) -> None:
    f = tmp_path / "x"
    f.write_bytes(b"a" * (3 << 20))
    assert buildinfo.sha256_file(f) == hashlib.sha256(b"a" * (3 << 20)).hexdigest()


# -- files the previous farm wrote, and the schema derived from the definition ----------------
GOLDEN = Path(__file__).parent / "data" / "provenance"


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.build_info.json")))
def test_files_an_earlier_farm_wrote_read_and_write_back_byte_for_byte(name: str) -> None:
    """These files were written by farm's previous, hand-written reader/writer (before the record
    was one definition): old and new keys, absent keys, nulls, every source kind, vendored, non-ASCII."""
    data = (GOLDEN / name).read_bytes()
    info = BuildInfo.from_json(data, where=name)
    assert info.to_json() == data
    assert BuildInfo.from_json(json.loads(data)) == info


def test_ledger_lines_an_earlier_farm_wrote_read_and_write_back_byte_for_byte() -> None:
    lines = (GOLDEN / "ledger.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4
    for number, line in enumerate(lines, 1):
        entry = LedgerEntry.from_json(line, where=f"ledger.jsonl:{number}")
        assert dumps_entry(entry) == line
        assert dumps_entry(json.loads(line)) == line


def test_older_files_lack_the_new_optional_keys_and_keep_lacking_them() -> None:
    info = BuildInfo.from_json((GOLDEN / "asserted-all-keys.build_info.json").read_bytes())
    assert info.duration_s is ABSENT
    assert info.toolchain is not None
    assert info.toolchain.compile_cache is ABSENT
    assert "duration_s" not in _tree(info)
    assert "compile_cache" not in _tree(info)["toolchain"]


def test_the_committed_schema_is_the_one_derived_from_the_definition() -> None:
    """Regenerate with: python -c "from farm.provenance.buildinfo import write_schema; write_schema()" """
    assert buildinfo.SCHEMA_FILE.read_text() == buildinfo.schema_text()
    assert json.loads(buildinfo.SCHEMA_FILE.read_text()) == buildinfo.schema()


@pytest.mark.parametrize("duration", [None, 0, 93, 812.25])
def test_duration_is_recorded_as_written(duration: float | None) -> None:
    info = dataclasses.replace(asserted_example(), duration_s=duration)
    data = info.to_json()
    assert json.loads(data)["duration_s"] == duration
    assert list(json.loads(data))[-1] == "duration_s"
    back = BuildInfo.from_json(data)
    assert back == info
    assert back.to_json() == data


def test_compile_cache_round_trips_and_null_means_unknown() -> None:
    older = {"tool": "sccache", "compiles": 40, "hits": 31, "misses": 9}  # before calls refused were recorded
    counts = {**older, "not_cacheable": {"-time": 2, "multiple input files": 20}}
    for value in (counts, {**older, "not_cacheable": {}}, older, None):
        chain = probe.toolchain(cuda_home=None, builder="native", compile_cache=value)
        info = dataclasses.replace(asserted_example(), toolchain=chain)
        assert _tree(info)["toolchain"]["compile_cache"] == value
        buildinfo.validate(info.to_dict())
        assert BuildInfo.from_json(info.to_json()) == info
    read = BuildInfo.from_json(dataclasses.replace(asserted_example(), toolchain=probe.toolchain(
        cuda_home=None, builder="native", compile_cache=older)).to_json())
    assert read.toolchain is not None
    assert isinstance(read.toolchain.compile_cache, buildinfo.CompileCacheRecord)
    assert read.toolchain.compile_cache.not_cacheable is ABSENT  # not counted, which is not "none refused"


def test_the_toolkit_the_device_code_records_round_trips() -> None:
    made = {"demo_ext/_C.so": {"cubin": {"13.0": 2}, "ptx_isa": {"9.0": 1}, "unread": 0}}
    info = dataclasses.replace(asserted_example(), made_by={
        so: buildinfo.MadeByRecord.from_mapping(m) for so, m in made.items()})
    assert info.to_dict()["made_by"] == made
    assert list(info.to_dict())[-1] == "made_by"
    back = BuildInfo.from_json(info.to_json())
    assert back == info
    assert back.to_json() == info.to_json()
    assert "made_by" not in asserted_example().to_dict()  # absent unless postbuild read it


GLM = {"kind": "archive", "path": "gsplat/cuda/csrc/third_party/glm",
       "url": "https://deb.debian.org/debian/pool/main/g/glm/glm_1.0.1+ds.orig.tar.xz", "sha256": SHA, "subdir": None}


def test_the_vendored_trees_of_the_source_round_trip() -> None:
    source = {"kind": "git", "repo": "o/r", "ref": "v1", "commit": "c" * 40,
              "vendor": [GLM, {"kind": "sdist", "path": "third_party/eigen", "name": "cmeel-eigen",
                               "version": "3.4.0", "sha256": SHA, "subdir": "cmeel.prefix/include"}]}
    info = dataclasses.replace(asserted_example(), source=buildinfo.source_from(source))
    assert info.to_dict()["source"] == source
    back = BuildInfo.from_json(info.to_json())
    assert back == info
    assert back.to_json() == info.to_json()
    plain = asserted_example().to_dict()["source"]
    assert isinstance(plain, dict)
    assert "vendor" not in plain  # absent unless the recipe vendors


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["source"].update(vendor=[{**GLM, "sha256": "abc"}]), "source"),
        (lambda d: d["source"].update(vendor=[{**GLM, "kind": "git"}]), "source"),
        (lambda d: d["source"].update(vendor=[{k: v for k, v in GLM.items() if k != "subdir"}]), "source"),
        (lambda d: d["source"].update(vendor=GLM), "source"),
        (lambda d: d.update(made_by={"a.so": {"cubin": {"13.0": -1}, "ptx_isa": {}, "unread": 0}}), "made_by"),
        (lambda d: d.update(made_by={"a.so": {"cubin": {}, "ptx_isa": {}}}), "made_by"),
        (lambda d: d.update(made_by=[1]), "made_by"),
        (lambda d: d.update(duration_s=-1), "duration_s"),
        (lambda d: d.update(duration_s="93"), "duration_s"),
        (lambda d: d["toolchain"].update(toolkit={"source": "pypi", "release": "13.0.2", "components": [],
                                                  "libcuda_stub": "abc"}),
         "toolchain/toolkit/libcuda_stub"),
        (lambda d: d["toolchain"].update(compile_cache={"tool": "ccache", "compiles": 1, "hits": 1}),
         "toolchain/compile_cache"),
        (lambda d: d["toolchain"].update(compile_cache={"tool": "ccache", "compiles": 1, "hits": -1, "misses": 0}),
         "toolchain/compile_cache/hits"),
        (lambda d: d["toolchain"].update(compile_cache={"tool": "ccache", "compiles": 1, "hits": 1, "misses": 0,
                                                        "rate": 1.0}), "toolchain/compile_cache"),
        (lambda d: d["toolchain"].update(compile_cache={"tool": "sccache", "compiles": 1, "hits": 1, "misses": 0,
                                                        "not_cacheable": {"-time": -1}}),
         "toolchain/compile_cache/not_cacheable"),
        (lambda d: d["toolchain"].update(compile_cache={"tool": "sccache", "compiles": 1, "hits": 1, "misses": 0,
                                                        "not_cacheable": 3}), "toolchain/compile_cache/not_cacheable"),
    ],
)
def test_the_new_keys_are_checked(mutate, message: str) -> None:
    info = copy.deepcopy(asserted_example().to_dict())
    mutate(info)
    with pytest.raises(WheelError) as err:
        BuildInfo.from_json(json.dumps(info), where="w.whl")
    assert message in str(err.value)
