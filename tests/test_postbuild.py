"""Postbuild of real nvcc-built wheels: assert, stamp, fragment; pip installs the result."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest
from wheel.wheelfile import WheelFile

from farm.binary.archrule import Expected
from farm.builder.spec import read_spec, resolve_spec, write_spec
from farm.cli import main
from farm.errors import UsageError, WheelError
from farm.load.recipes import load_config
from farm.model.arch import ArchList
from farm.model.archrequest import ArchRequest
from farm.model.cells import Cell
from farm.provenance import buildinfo, probe
from farm.provenance.buildinfo import BuildInfo, LedgerEntry
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerline import dumps_entry
from farm.provenance.ledgerwrite import merge_fragments, read_fragment, write_fragment
from farm.provenance.postbuild import (
    BuildContext,
    PostbuildResult,
    cell_platform,
    check_wheel_matches_cell,
    context_from_config,
    cuda_line,
    postbuild_wheel,
)
from farm.provenance.stamp import WheelName
from farm.schedule.durations import durations_of, recorded_builds
from farm.source.fetch import tree_sha256
from tests.support.cudafix import BASE, CudaFixtures
from tests.support.postbuildfix import PY, SO, TAG, builder_wheel, write_farm_root

SCRIPT = "demo_ext-0.1.0.data/scripts/demo-run"


def context(cuda_home: Path, expected: str, *, epoch: int = 0) -> BuildContext:
    archs = ArchList.parse(expected)
    return BuildContext(
        cell=Cell("demo_ext", "0.1.0", cuda_line(cuda_home), "none", PY, "linux_x86_64"),
        expected=Expected(archs),
        requested=expected,
        build_epoch=epoch,
        defaults_sha256="d" * 64,
        recipe_sha256="e" * 64,
        source=buildinfo.GitSourceRecord("example/demo_ext", "v0.1.0", None),
        run=probe.run_from_env(),
        toolchain=probe.toolchain(cuda_home=cuda_home, builder="native"),
    )


@pytest.fixture(scope="module")
def raw_wheel(cuda_fixtures: CudaFixtures, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The builder's wheel: real extension (sm_80, sm_90, compute_90), a script, an executable."""
    out = tmp_path_factory.mktemp("raw")
    return builder_wheel(out, "demo_ext", cuda_fixtures.path("default"), extra={
        SCRIPT: b"#!/bin/sh\necho demo-run-ok\n",
        "demo_ext/tool.sh": b"#!/bin/sh\necho tool\n",
    }, executables=(SCRIPT, "demo_ext/tool.sh"))


@pytest.fixture(scope="module")
def stamped(raw_wheel: Path, cuda_home: Path, tmp_path_factory: pytest.TempPathFactory) -> PostbuildResult:
    out = tmp_path_factory.mktemp("out")
    result = postbuild_wheel(raw_wheel, out, context(cuda_home, BASE, epoch=2), dist="demo_ext")
    assert result.passed, result.report.render()
    return result


def test_postbuild_names_the_wheel_and_writes_its_fragment_beside_it(stamped, raw_wheel: Path) -> None:
    wheel = stamped.stamped.path
    assert wheel.name == f"demo_ext-0.1.0+cu{cuda_line_digits(stamped)}-2-{TAG}.whl"
    assert stamped.fragment == wheel.parent / f"{wheel.name}.ledger.json"
    entry = json.loads(stamped.fragment.read_text())
    assert entry["filename"] == wheel.name
    assert entry["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert entry["size"] == wheel.stat().st_size
    assert entry["published"] == []
    buildinfo.validate(entry)
    with zipfile.ZipFile(wheel) as zf:
        embedded = json.loads(zf.read(f"demo_ext-{WheelName.parse(wheel.name).version}.dist-info/_build_info.json"))
    # the fragment is the embedded object plus the ledger's keys and the record of this build (its run)
    assert {k: v for k, v in entry.items() if k not in ("filename", "sha256", "size", "published", "run")} == embedded
    assert entry["run"] == probe.run_from_env(os.environ).to_dict()


def test_real_provenance_round_trips_byte_for_byte(stamped) -> None:
    """The typed object reads the stamped wheel's file and the fragment and writes back their
    very bytes: published wheels and ledgers stay valid, in the format farm always wrote."""
    member = f"demo_ext-{WheelName.parse(stamped.stamped.filename).version}.dist-info/_build_info.json"
    with zipfile.ZipFile(stamped.stamped.path) as zf:
        data = zf.read(member)
    info = BuildInfo.from_json(data, where=f"{stamped.stamped.path}!{member}")
    assert info == stamped.stamped.build_info.for_wheel()
    assert info.to_json() == data
    assert data == (json.dumps(json.loads(data), indent=2) + "\n").encode()  # json.dumps, indent 2, file order
    line = stamped.fragment.read_bytes()
    entry, rec = read_fragment(stamped.fragment)
    assert (dumps_entry(entry) + "\n").encode() == line
    assert entry == stamped.stamped.build_info.ledger_entry(filename=rec.filename, sha256=rec.sha256, size=entry.size)
    assert LedgerEntry.from_json(line).info.for_wheel().to_json() == data


def test_postbuild_again_in_the_same_build_is_a_no_op(stamped, raw_wheel: Path, cuda_home: Path) -> None:
    """A retried job re-runs postbuild over its own output folder: same bytes, same fragment."""
    out = stamped.stamped.path.parent
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = postbuild_wheel(raw_wheel, out, context(cuda_home, BASE, epoch=2), dist="demo_ext")
    assert again.stamped is not None
    assert not again.stamped.created
    assert again.stamped.sha256 == stamped.stamped.sha256
    assert again.fragment == stamped.fragment
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def cuda_line_digits(result: PostbuildResult) -> str:
    assert result.stamped is not None
    assert result.stamped.build_info is not None
    return str(result.stamped.build_info.cell.cuda).replace(".", "")


def test_build_info_comes_from_real_sources(stamped, cuda_home: Path, nvcc: Path) -> None:
    info = stamped.stamped.build_info.to_dict()
    buildinfo.validate(info)
    so = f"demo_ext/{SO}"
    with zipfile.ZipFile(stamped.stamped.path) as zf:
        assert info["extensions"] == {so: hashlib.sha256(zf.read(so)).hexdigest()}
    assert info["found"] == {so: "sm_80;sm_90;compute_90"} == info["expected"]
    assert info["arch_list"] == {"requested": BASE, "normalised": "sm_80;sm_90;compute_90"}
    assert info["assertion"]["result"] == "passed"
    assert info["assertion"]["cuobjdump"] == stamped.report.tools.cuobjdump
    assert info["assertion"]["cuobjdump"]
    reported = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    assert f"V{info['toolchain']['nvcc']}" in reported
    assert info["toolchain"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert info["run"] == probe.run_from_env(os.environ).to_dict()
    assert info["build_epoch"] == 2
    assert info["provenance"] == "asserted"


def test_record_verifies_and_input_is_untouched(stamped, raw_wheel: Path) -> None:
    with WheelFile(stamped.stamped.path) as wf:
        for item in wf.infolist():
            wf.read(item)  # raises on any hash or size mismatch with RECORD
    with WheelFile(raw_wheel) as wf:  # the builder's wheel is still its own, valid self
        for item in wf.infolist():
            wf.read(item)
    assert "+" not in raw_wheel.name


def test_stamped_wheel_installs_and_build_info_reads_back_at_runtime(stamped, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--disable-pip-version-check", str(stamped.stamped.path)], check=True)
    code = ("import importlib.metadata as m, json; d = m.distribution('demo_ext'); "
            "print(json.dumps({'version': d.version, 'info': json.loads(d.read_text('_build_info.json'))}))")
    out = json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout)
    assert out["info"] == stamped.stamped.build_info.for_wheel().to_dict()
    assert out["version"] == WheelName.parse(stamped.stamped.filename).version
    # .data/scripts became an executable script; the package's executable kept its mode
    script = venv / "bin" / "demo-run"
    assert os.access(script, os.X_OK)
    assert subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout == "demo-run-ok\n"
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert os.access(site / "demo_ext" / "tool.sh", os.X_OK)
    assert (site / "demo_ext" / SO).read_bytes()[:4] == b"\x7fELF"


def test_failed_assertion_writes_nothing(raw_wheel: Path, cuda_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = postbuild_wheel(raw_wheel, out, context(cuda_home, "8.0;8.6;9.0+PTX"), dist="demo_ext")
    assert not result.passed
    assert result.stamped is None
    assert result.fragment is None
    assert "sm_86" in result.report.render()
    assert not out.exists() or list(out.iterdir()) == []


def test_wheel_of_another_cell_is_refused(raw_wheel: Path, cuda_home: Path, tmp_path: Path) -> None:
    ctx = context(cuda_home, BASE)
    with pytest.raises(UsageError, match="not cell"):
        postbuild_wheel(raw_wheel, tmp_path, ctx, dist="other_project")
    name = WheelName.parse(raw_wheel.name)
    with pytest.raises(UsageError, match="platform linux_x86_64 is not the cell's linux_aarch64"):
        check_wheel_matches_cell(name, Cell("demo_ext", "0.1.0", "13.0", "none", PY, "linux_aarch64"), "demo_ext")


def test_cell_platform_from_tags() -> None:
    def plat(tag: str) -> str:
        return cell_platform(WheelName.parse(f"a-1.0-cp311-cp311-{tag}.whl"))

    assert plat("manylinux_2_28_x86_64") == "linux_x86_64"
    assert plat("manylinux_2_17_aarch64.manylinux2014_aarch64") == "linux_aarch64"
    assert plat("win_amd64") == "win_amd64"
    for bad in ("macosx_11_0_arm64", "manylinux_2_17_x86_64.manylinux_2_17_aarch64"):
        with pytest.raises(WheelError):
            plat(bad)


# -- the config glue and the command ----------------------------------------------------------------
@pytest.fixture
def farm_root(tmp_path: Path) -> Path:
    return write_farm_root(tmp_path / "farm", {"demo_ext": BASE}, build_epoch=3)


def test_context_from_config(farm_root: Path, raw_wheel: Path, cuda_home: Path) -> None:
    recipe_file = farm_root / "packages" / "demo_ext.yml"
    recipe_file.write_text(recipe_file.read_text() + "requires_dist: ['numpy>=1.24']\n")
    config = load_config(farm_root)
    ctx, recipe = context_from_config(config, raw_wheel, cuda_home=cuda_home, builder="native",
                                      env={"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "o/farm",
                                           "GITHUB_SHA": "a" * 40, "GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "1"})
    assert recipe.name == "demo_ext"
    assert ctx.cell == Cell("demo_ext", "0.1.0", cuda_line(cuda_home), "none", PY, "linux_x86_64")
    assert ctx.build_epoch == 3
    assert ctx.build_tag == "3"
    assert ctx.defaults_sha256 == hashlib.sha256((farm_root / "_defaults.yml").read_bytes()).hexdigest()
    assert ctx.recipe_sha256 == hashlib.sha256((farm_root / "packages" / "demo_ext.yml").read_bytes()).hexdigest()
    assert ctx.requested == BASE
    assert ctx.expected.default == ArchList.parse(BASE)
    assert ctx.source == buildinfo.GitSourceRecord("example/demo_ext", "v0.1.0", None)
    assert ctx.run.provider == "github"
    assert ctx.run.run_id == "77"
    assert ctx.requires_dist == ("numpy>=1.24",)  # stamped into the wheel's METADATA


def test_cli_postbuild_then_failed_batch_writes_nothing(farm_root: Path, raw_wheel: Path, cuda_home: Path,
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dist"
    argv = ["postbuild", str(raw_wheel), "--out", str(out), "--root", str(farm_root),
            "--cuda-home", str(cuda_home), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"]
    assert len(report["wheels"]) == 1
    stamped = Path(report["wheels"][0]["stamped"])
    assert stamped.parent == out
    assert "-3-" in stamped.name
    assert sorted(p.name for p in out.iterdir()) == sorted([stamped.name, stamped.name + ".ledger.json"])

    write_farm_root(farm_root, {"demo_ext": "8.0;9.0;10.0+PTX"})  # the build missed 10.0
    (farm_root / "packages" / "demo_ext.yml").write_text(
        (farm_root / "packages" / "demo_ext.yml").read_text() + "only:\n  cuda: ['12.8', '12.9', '13.0', '13.2']\n")
    out2 = tmp_path / "dist2"
    assert main(["postbuild", str(raw_wheel), "--out", str(out2), "--root", str(farm_root),
                 "--cuda-home", str(cuda_home)]) == 1
    captured = capsys.readouterr()
    assert "sm_100" in captured.out
    assert "nothing was written" in captured.err
    assert not out2.exists() or list(out2.iterdir()) == []


def test_two_processes_merging_fragments_at_once_lose_and_duplicate_nothing(stamped, tmp_path: Path) -> None:
    base = json.loads(stamped.fragment.read_text())
    dirs = [tmp_path / "a", tmp_path / "b"]
    names = []
    for i in range(60):
        filename = base["filename"].replace("demo_ext-", f"demo_ext{i}-")
        entry = {**base, "filename": filename, "sha256": hashlib.sha256(filename.encode()).hexdigest()}
        names.append(filename)
        # a third of the fragments reach both mergers: the merge must be idempotent
        for d in (dirs if i % 3 == 0 else [dirs[i % 2]]):
            write_fragment(entry, d)
    ledger = tmp_path / "ledger.jsonl"
    code = ("import sys; from pathlib import Path; from farm.provenance.ledgerwrite import merge_fragments; "
            "merge_fragments(Path(sys.argv[1]), Path(sys.argv[2]))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(ledger), str(d)]) for d in dirs]
    assert [p.wait() for p in procs] == [0, 0]
    index = LedgerIndex.load(ledger)  # refuses a filename recorded twice
    assert sorted(r.filename for r in index.records) == sorted(names)
    assert merge_fragments(ledger, dirs[0]).added == ()


def test_context_of_a_path_source_records_its_tree_hash(farm_root: Path, raw_wheel: Path, cuda_home: Path) -> None:
    src = farm_root / "src" / "demo_ext"
    src.mkdir(parents=True)
    (src / "setup.py").write_text("# demo\n")
    recipe = farm_root / "packages" / "demo_ext.yml"
    recipe.write_text(recipe.read_text().replace("git: {repo: example/demo_ext, ref: v0.1.0}", "path: src/demo_ext"))
    ctx, _ = context_from_config(load_config(farm_root), raw_wheel, cuda_home=cuda_home)
    assert ctx.source == buildinfo.PathSourceRecord("src/demo_ext", tree_sha256(src))
    with pytest.raises(UsageError, match="does not link torch"):
        context_from_config(load_config(farm_root), raw_wheel, cuda_home=cuda_home, torch="2.8")


def test_a_planned_arch_list_is_what_the_assertion_checks(farm_root: Path, raw_wheel: Path, cuda_home: Path) -> None:
    """The builder hands postbuild the plan's list: the assertion checks what was built, not a
    second resolution of a config that may say otherwise."""
    planned = ArchList.parse("8.0;9.0")
    per_module = (("*_sm90*", ArchList.parse("9.0")),)
    ctx, _ = context_from_config(load_config(farm_root), raw_wheel, cuda_home=cuda_home,
                                 arch=ArchRequest(planned, "8.0;9.0 (as planned)", "planned", per_module))
    assert ctx.expected.default == planned != ArchList.parse(BASE)
    assert ctx.requested == "8.0;9.0 (as planned)"
    assert ctx.expected.per_extension == per_module  # the spec's per-extension lists too, not the recipe's


def test_postbuild_asserts_the_build_spec_it_is_given(farm_root: Path, raw_wheel: Path, cuda_home: Path,
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`farm postbuild --spec build-spec.json`: the spec farm build wrote crosses the process
    boundary intact, and its arch request (not the config's) is what the assertion checks."""

    config = load_config(farm_root)
    recipe = config.recipe("demo_ext")
    ctx, _ = context_from_config(config, raw_wheel, cuda_home=cuda_home)
    as_configured = write_spec(resolve_spec(config, recipe, ctx.cell), tmp_path / "a")
    base = ["postbuild", str(raw_wheel), "--root", str(farm_root), "--cuda-home", str(cuda_home), "--json"]
    assert main([*base, "--out", str(tmp_path / "out-a"), "--spec", str(as_configured)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"]
    assert doc["wheels"][0]["stamped"]

    # a build given another list than the config's: its wheel fails the spec's assertion
    other = write_spec(resolve_spec(config, recipe, ctx.cell, arch=ArchRequest.given(ArchList.parse("8.0;9.0"))),
                       tmp_path / "b")
    assert main([*base, "--out", str(tmp_path / "out-b"), "--spec", str(other)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert not doc["passed"]
    assert not (tmp_path / "out-b").exists()

    # a spec of another cell, or a flag that contradicts it: bad input, nothing written
    wrong = write_spec(resolve_spec(config, recipe, replace(ctx.cell, python="cp312")), tmp_path / "c")
    assert main([*base, "--out", str(tmp_path / "out-c"), "--spec", str(wrong)]) == 2
    assert "the build spec is for" in capsys.readouterr().out
    assert main([*base, "--out", str(tmp_path / "out-c"), "--spec", str(as_configured), "--cuda", "12.8"]) == 2
    assert "contradicts the build spec" in capsys.readouterr().out
    assert not (tmp_path / "out-c").exists()


def test_postbuild_of_a_wheel_build_already_postbuilt_carries_it(farm_root: Path, raw_wheel: Path, cuda_home: Path,
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The README's flow: `farm build` postbuilds into wheelhouse/, then a maintainer runs
    `farm postbuild wheelhouse/*.whl --out dist/`. The stamped wheel is re-asserted and carried
    over as it is, with its fragment; the cell comes from the wheel itself (no --cuda needed)."""
    house = tmp_path / "wheelhouse"
    assert main(["postbuild", str(raw_wheel), "--out", str(house), "--root", str(farm_root),
                 "--cuda-home", str(cuda_home)]) == 0
    (stamped,) = house.glob("*.whl")
    capsys.readouterr()
    monkeypatch.delenv("CUDA_HOME", raising=False)
    dist = tmp_path / "dist"
    for _ in range(2):  # and again: a no-op
        assert main(["postbuild", str(stamped), "--out", str(dist), "--root", str(farm_root), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["passed"]
        assert doc["wheels"][0]["sha256"] == hashlib.sha256(stamped.read_bytes()).hexdigest()
    assert (dist / stamped.name).read_bytes() == stamped.read_bytes()
    assert json.loads((dist / (stamped.name + ".ledger.json")).read_text())["filename"] == stamped.name
    # `farm assert --cell` reads the stamped wheel's own cell too
    assert main(["assert", str(stamped), "--cell", "--root", str(farm_root)]) == 0
    assert "expected from the cell's arch list" in capsys.readouterr().out
    assert main(["assert", str(stamped), "--arch-list", BASE]) == 0
    assert "(expected from --arch-list)" in capsys.readouterr().out

    # a stamped wheel whose list the config no longer resolves is not carried
    write_farm_root(farm_root, {"demo_ext": "8.0;9.0;10.0+PTX"}, build_epoch=3)
    assert main(["postbuild", str(stamped), "--out", str(tmp_path / "dist3"), "--root", str(farm_root)]) != 0


def test_a_cuda_13_build_postbuilt_for_another_line_fails_naming_both(
        farm_root: Path, raw_wheel: Path, cuda_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The wheel's device code was made by nvcc 13.0: `--cuda 12.8`, or a build spec whose cell says
    12.8, would stamp it +cu128; the assertion reads the toolkit from the cubins' notes and the PTX
    ISA and fails it, naming both lines; nothing is written."""
    from dataclasses import replace

    from farm.builder.spec import resolve_spec, write_spec

    assert cuda_line(cuda_home) == "13.0"
    (farm_root / "packages" / "demo_ext.yml").write_text(
        (farm_root / "packages" / "demo_ext.yml").read_text() + "only:\n  cuda: ['12.8', '13.0']\n")
    base = ["postbuild", str(raw_wheel), "--root", str(farm_root), "--json"]
    assert main([*base, "--out", str(tmp_path / "a"), "--cuda", "12.8"]) == 1
    doc = json.loads(capsys.readouterr().out)
    (ext,) = doc["wheels"][0]["assertion"]["extensions"]
    (finding,) = [f for f in ext["findings"] if f["code"] == "toolkit-mismatch"]
    assert "cubin(s) made by CUDA 13.0" in finding["message"]
    assert "PTX entry of ISA 9.0" in finding["message"]
    assert "the cell's CUDA line is 12.8" in finding["message"]
    assert finding["cause"] == "built by another CUDA toolkit"
    assert not (tmp_path / "a").exists()

    config = load_config(farm_root)
    ctx, _ = context_from_config(config, raw_wheel, cuda_home=cuda_home)
    spec = write_spec(resolve_spec(config, config.recipe("demo_ext"), replace(ctx.cell, cuda="12.8")), tmp_path / "s")
    assert main([*base, "--out", str(tmp_path / "b"), "--spec", str(spec)]) == 1
    assert "the cell's CUDA line is 12.8" in capsys.readouterr().out
    assert not (tmp_path / "b").exists()
    # the same wheel for its own line passes, and the report says what the binary records
    assert main([*base, "--out", str(tmp_path / "c"), "--cuda-home", str(cuda_home)]) == 0
    doc = json.loads(capsys.readouterr().out)
    (ext,) = doc["wheels"][0]["assertion"]["extensions"]
    assert ext["made_by"] == {"cubin": {"13.0": 2}, "ptx_isa": {"9.0": 1}, "unread": 0}
    stamped = Path(doc["wheels"][0]["stamped"])
    info = BuildInfo.from_json(zipfile.ZipFile(stamped).read(
        next(n for n in zipfile.ZipFile(stamped).namelist() if n.endswith("_build_info.json"))))
    assert isinstance(info.made_by, Mapping)
    assert {so: m.to_dict() for so, m in info.made_by.items()} == {ext["path"]: ext["made_by"]}


def test_postbuild_of_a_spec_follows_the_spec_when_the_recipe_moved(farm_root: Path, raw_wheel: Path,
                                                                     cuda_home: Path, tmp_path: Path) -> None:
    """The recipe is edited after the build (its epoch, a vendored rule, jit, requires_dist, the
    arch list): `farm postbuild --spec` stamps and records what the spec says, not today's recipe."""
    config = load_config(farm_root)
    recipe = config.recipe("demo_ext")
    cell = Cell("demo_ext", "0.1.0", cuda_line(cuda_home), "none", PY, "linux_x86_64")
    path = write_spec(resolve_spec(config, recipe, cell), tmp_path / "spec")
    recipe_file = farm_root / "packages" / "demo_ext.yml"
    recipe_file.write_text(recipe_file.read_text().replace(BASE, "8.0") + "build_epoch: 4\njit: true\n"
                           "requires_dist: ['numpy>=1.24']\nvendored:\n  'libextra*.so*': '9.0'\n")
    today = load_config(farm_root)
    assert today.effective_epoch(today.recipe("demo_ext")) == 7 != config.effective_epoch(recipe) == 3
    out = tmp_path / "out"
    assert main(["postbuild", str(raw_wheel), "--root", str(farm_root), "--cuda-home", str(cuda_home),
                 "--out", str(out), "--spec", str(path)]) == 0
    (wheel,) = out.glob("*.whl")
    assert WheelName.parse(wheel.name).build == "3"  # the spec's epoch, not today's 7
    dist_info = f"demo_ext-0.1.0+{WheelName.parse(wheel.name).local}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        info = json.loads(zf.read(f"{dist_info}/_build_info.json"))
        meta = zf.read(f"{dist_info}/METADATA").decode()
    spec = read_spec(path)
    assert info["build_epoch"] == 3
    assert info["recipe_sha256"] == spec.recipe_sha256 != today.recipe("demo_ext").sha256
    assert info["arch_list"]["requested"] == BASE
    assert "numpy" not in meta


def test_kernel_families_are_asserted_recorded_and_judged(cuda_fixtures: CudaFixtures,
                                                          cuda_home: Path, tmp_path: Path, farm_root: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A real .so of two kernel families (k1.cu for the base list, k2.cu for 9.0a alone): postbuild
    asserts each family, records them in _build_info.json, and the gate's judge accepts the record;
    with one family's list changed nothing is stamped."""
    from dataclasses import replace

    from farm.binary.archrule import FamilyTargets
    from farm.provenance.judge import GATE, judge
    from farm.provenance.wheelfacts import wheel_facts

    raw = builder_wheel(tmp_path / "raw", "demo_ext", cuda_fixtures.path("families"))
    ctx = context(cuda_home, BASE)
    k1 = FamilyTargets("BASE_ARCHS", ("csrc/k1.cu",), ArchList.parse(BASE))
    k2 = FamilyTargets("HOPPER_ARCHS (CMakeLists.txt:9)", ("csrc/k2.cu",), ArchList.parse("9.0a"))
    result = postbuild_wheel(raw, tmp_path / "out", replace(ctx, expected=replace(ctx.expected, families=(k1, k2))),
                             dist="demo_ext")
    assert result.passed, result.report.render()
    assert result.stamped is not None, result.report.render()
    info = result.stamped.build_info
    assert info is not None
    member = f"demo_ext/{SO}"
    assert isinstance(info.families, MappingProxyType)
    assert {n: (f.targets, f.extensions) for n, f in info.families.items()} == {
        "BASE_ARCHS": ("sm_80;sm_90;compute_90", (member,)), "HOPPER_ARCHS (CMakeLists.txt:9)": ("sm_90a", (member,))}
    assert dict(info.expected or {}) == dict(info.found or {}) == {member: "sm_80;sm_90;compute_90;sm_90a"}
    assert judge(wheel_facts(result.stamped.path), None, None, replace(GATE, vouched=False)) == []
    assert info.families["BASE_ARCHS"].patterns is buildinfo.ABSENT  # a family without globs reads as before

    # k2.cu as a file the build generated, named by its family's glob: recorded with the glob
    generated = FamilyTargets("GEN_ARCHS", (), ArchList.parse("9.0a"), ("csrc/generated/*.cu",))
    globbed = postbuild_wheel(raw, tmp_path / "out-glob",
                              replace(ctx, expected=replace(ctx.expected, families=(k1, generated))), dist="demo_ext")
    assert globbed.passed, globbed.report.render()
    assert globbed.stamped is not None
    assert globbed.stamped.build_info is not None
    assert isinstance(globbed.stamped.build_info.families, MappingProxyType)
    record = globbed.stamped.build_info.families["GEN_ARCHS"]
    assert (record.sources, record.patterns, record.extensions) == ((), ("csrc/generated/*.cu",), (member,))
    assert judge(wheel_facts(globbed.stamped.path), None, None, replace(GATE, vouched=False)) == []

    wrong = replace(k2, targets=ArchList.parse("9.0a;10.0a"))
    failed = postbuild_wheel(raw, tmp_path / "out-wrong",
                             replace(ctx, expected=replace(ctx.expected, families=(k1, wrong))), dist="demo_ext")
    assert not failed.passed
    assert failed.stamped is None
    assert not (tmp_path / "out-wrong").exists()
    assert "kernel family HOPPER_ARCHS" in failed.report.render()
    assert "TU k2.cu" in failed.report.render()

    # postbuilt again, the stamped wheel is carried only with the families it records
    again = postbuild_wheel(result.stamped.path, tmp_path / "again",
                            replace(ctx, expected=replace(ctx.expected, families=(k1, k2))), dist="demo_ext")
    assert again.passed
    with pytest.raises(UsageError, match="kernel families that are not the ones asserted now"):
        postbuild_wheel(result.stamped.path, tmp_path / "again2",
                        replace(ctx, expected=replace(ctx.expected, families=(k1, replace(k2, name="OTHER")))),
                        dist="demo_ext")

    # `farm assert --spec`: the families the build spec carries
    from farm.builder.spec import resolve_spec, write_spec

    config = load_config(farm_root)
    cell = context_from_config(config, raw, cuda_home=cuda_home)[0].cell
    spec = resolve_spec(config, config.recipe("demo_ext"), cell)
    right = write_spec(replace(spec, families=(k1, k2)), tmp_path / "spec-right")
    assert main(["assert", str(raw), "--spec", str(right)]) == 0
    assert main(["assert", str(raw), "--spec", str(write_spec(replace(spec, families=(k1, wrong)),
                                                              tmp_path / "spec-wrong"))]) == 1
    assert "kernel family HOPPER_ARCHS" in capsys.readouterr().out


def test_the_build_time_is_recorded_in_the_provenance_and_the_fragment(raw_wheel: Path, cuda_home: Path,
                                                                      tmp_path: Path) -> None:
    """``farm build`` hands postbuild the cell's build time; the matrix plans jobs with it."""
    ctx = replace(context(cuda_home, BASE), duration_s=1234.5)
    result = postbuild_wheel(raw_wheel, tmp_path, ctx, dist="demo_ext")
    assert result.passed
    assert result.stamped
    assert result.fragment
    assert json.loads(result.fragment.read_text())["duration_s"] == 1234.5
    info = buildinfo.read_wheel(result.stamped.path)
    assert info is not None
    assert info.duration_s is buildinfo.ABSENT  # one build's record: the ledger's, not the wheel's
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(result.fragment.read_text().replace("\n", "") + "\n")
    c = ctx.cell
    assert durations_of(recorded_builds(LedgerIndex.load(ledger))).cells == {(c.package, c.cuda, c.torch, c.python, c.platform): 1234.5}
