"""Locating and running the real cuobjdump (the PyPI wheel in the test environment)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import packaging
import pytest
import zstandard

from farm.binary.cuobjdump import (
    PINNED,
    cuobjdump_version,
    find_cuobjdump,
    list_targets,
    parse_listing,
    pinned_cuobjdump,
    variant_free,
)
from farm.binary.fatbin import EntryKind
from farm.errors import BinaryFormatError, ToolError
from farm.model.arch import ArchList, Kind, Target, Variant
from tests.support.cudafix import FIXTURES, CudaFixtures

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tool() -> Path:
    return find_cuobjdump()


def test_found_and_versioned(tool: Path) -> None:
    assert tool.name.startswith("cuobjdump")
    assert os.access(tool, os.X_OK)
    version = cuobjdump_version(tool)
    assert all(part.isdigit() for part in version.split("."))
    assert version.count(".") == 2


def test_the_pin_is_what_the_extras_install(tool: Path) -> None:
    """The build and the upload extras install exactly the cuobjdump the assertion runs, and the
    test environment (the build extra) has it."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("build", "upload"):
        assert f"nvidia-cuda-cuobjdump=={PINNED}; platform_system != 'Darwin'" in extras[extra], extra
    assert cuobjdump_version(find_cuobjdump(version=PINNED)) == PINNED


def _fake(folder: Path, version: str) -> Path:
    """A cuobjdump that says it is ``version`` (all that the search asks of it)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "cuobjdump"
    exe.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version[:4]}, V{version}'\n")
    exe.chmod(0o755)
    return exe


def test_a_pinned_version_is_found_wherever_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PATH and CUDA_HOME hold other versions: the search passes them for the one asked for, and
    without it names every version it found and the wheel to install."""
    on_path = _fake(tmp_path / "path", "13.2.51")
    home = _fake(tmp_path / "cuda" / "bin", "13.4.49")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("CUDA_HOME", str(home.parent.parent))
    assert find_cuobjdump() == on_path  # no version asked: the first, as before
    assert find_cuobjdump(version="13.4.49") == home
    assert cuobjdump_version(find_cuobjdump(version=PINNED)) == PINNED  # the build extra's wheel
    with pytest.raises(ToolError, match=r"no cuobjdump 9\.9\.9 here \(found: .*\(13\.2\.51\).*\(13\.4\.49\)") as info:
        find_cuobjdump(version="9.9.9")
    assert "pip install nvidia-cuda-cuobjdump==9.9.9" in (info.value.hint or "")


def test_a_given_cuobjdump_of_another_version_is_refused(tmp_path: Path) -> None:
    other = _fake(tmp_path, "13.2.51")
    with pytest.raises(ToolError, match=f"is cuobjdump 13.2.51, and this assertion runs cuobjdump {PINNED}"):
        pinned_cuobjdump(PINNED, other)
    assert pinned_cuobjdump("13.2.51", other) == other


def _isolated_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "PATH")}
    env["PATH"] = "/nonexistent"
    env.update(extra)
    return env


def _find_in_subprocess(env: dict[str, str], python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    code = "from farm.binary.cuobjdump import find_cuobjdump; print(find_cuobjdump())"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=False)


def test_search_order_path_then_cuda_home_then_wheel(tool: Path, tmp_path: Path) -> None:
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "cuobjdump").symlink_to(tool)
    on_path = tmp_path / "onpath"
    on_path.mkdir()
    (on_path / "cuobjdump").symlink_to(tool)
    # CUDA_HOME, with nothing on PATH
    proc = _find_in_subprocess(_isolated_env(CUDA_HOME=str(home)))
    assert proc.stdout.strip() == str(home / "bin" / "cuobjdump"), proc.stderr
    # PATH wins over CUDA_HOME
    proc = _find_in_subprocess(_isolated_env(CUDA_HOME=str(home), PATH=str(on_path)))
    assert proc.stdout.strip() == str(on_path / "cuobjdump"), proc.stderr
    # neither: the nvidia-cuda-cuobjdump wheel of the running interpreter
    proc = _find_in_subprocess(_isolated_env())
    assert proc.stdout.strip().endswith("nvidia/cu13/bin/cuobjdump"), proc.stderr


def test_missing_tool_is_an_environment_error(tmp_path: Path) -> None:
    """An interpreter without the wheel, no PATH, no CUDA_HOME: `farm inspect --reader cuobjdump` exits 3."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # farm's own dependencies, and nothing else of this environment (not the cuobjdump wheel)
    deps = tmp_path / "deps"
    deps.mkdir()
    for module in (zstandard, packaging):
        (deps / module.__name__).symlink_to(Path(module.__file__ or "").parent)
    so = tmp_path / "x.so"
    so.write_bytes(b"\x7fELF")
    code = "import sys; from farm.cli import main; sys.exit(main(sys.argv[1:]))"
    env = _isolated_env(PYTHONPATH=os.pathsep.join([str(REPO), str(deps)]))
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code, "inspect", "--reader", "cuobjdump", str(so)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "cuobjdump not found" in proc.stderr
    assert "pip install nvidia-cuda-cuobjdump" in proc.stderr


def test_tool_that_is_not_executable(tmp_path: Path, cuda_fixtures: CudaFixtures) -> None:
    fake = tmp_path / "cuobjdump"
    fake.write_text("not a program")
    with pytest.raises(ToolError, match="not executable"):
        list_targets(cuda_fixtures.path("default"), fake)
    with pytest.raises(ToolError, match="does not exist"):
        list_targets(cuda_fixtures.path("default"), tmp_path / "absent")


def test_timeout_is_an_environment_error(tool: Path, cuda_fixtures: CudaFixtures) -> None:
    with pytest.raises(ToolError, match="did not finish") as err:
        list_targets(cuda_fixtures.path("default"), tool, timeout=1e-6)
    assert err.value.exit_code == 3


def test_ptx_is_mapped_to_compute_and_sass_loses_f(tool: Path, cuda_fixtures: CudaFixtures) -> None:
    listed = list_targets(cuda_fixtures.path("family"), tool)
    assert sorted((e.kind.value, e.name) for e in listed) == [
        ("cubin", "sm_100"), ("cubin", "sm_120"), ("ptx", "compute_120f")]
    listed = list_targets(cuda_fixtures.path("sm90a"), tool)
    assert {e.name for e in listed} == {"sm_90a", "compute_90a"}


def test_default_listing_is_the_executable_fatbin(tool: Path, cuda_fixtures: CudaFixtures) -> None:
    path = cuda_fixtures.path("rdc")
    assert ArchList.of(e.target for e in list_targets(path, tool)) == ArchList.parse("8.0;9.0")
    everything = list_targets(path, tool, all_sections=True)
    assert Target(9, 0, Variant.NONE, Kind.PTX) in {e.target for e in everything}


def test_rc_255_no_device_code_is_an_empty_listing(tool: Path, cuda_fixtures: CudaFixtures) -> None:
    assert list_targets(cuda_fixtures.path("host-only"), tool) == []


@pytest.mark.parametrize(("name", "message"), [("text", "neither an ELF nor a PE file"), ("truncated", "truncated")])
def test_rc_255_broken_file_is_bad_input(tool: Path, cuda_fixtures: CudaFixtures, name: str, message: str) -> None:
    with pytest.raises(BinaryFormatError, match=message):
        list_targets(cuda_fixtures.path(name), tool)


def test_rc_1_after_partial_output_is_an_error(tool: Path, cuda_fixtures: CudaFixtures) -> None:
    """A corrupt payload: cuobjdump prints the cubins, then fails on the PTX; nothing counts."""
    with pytest.raises(BinaryFormatError, match=r"cuobjdump failed \(rc 1") as err:
        list_targets(cuda_fixtures.path("bad-payload"), tool)
    assert "payload" in str(err.value)


def test_a_crashing_cuobjdump_is_an_environment_error(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    """Killed by a signal (a segfault, the OOM killer) on a file whose headers are intact: the tool's
    problem (exit 3), not a corrupt file (exit 2)."""
    crashing = tmp_path / "cuobjdump"
    crashing.write_text("#!/bin/sh\nkill -SEGV $$\n")
    crashing.chmod(0o755)
    with pytest.raises(ToolError, match=r"cuobjdump crashed \(rc -11\)") as err:
        list_targets(cuda_fixtures.path("default"), crashing)
    assert err.value.exit_code == 3
    # broken headers still win: the file is named as the problem, whatever the tool did
    with pytest.raises(BinaryFormatError, match="bad fatbin magic"):
        list_targets(cuda_fixtures.path("bad-magic"), crashing)


def test_rc_1_on_bad_headers_names_the_header_problem(tool: Path, cuda_fixtures: CudaFixtures) -> None:
    with pytest.raises(BinaryFormatError, match="bad fatbin magic"):
        list_targets(cuda_fixtures.path("bad-magic"), tool)


def test_cuobjdump_alone_skips_unknown_kinds(tool: Path, cuda_fixtures: CudaFixtures) -> None:
    """An unknown entry kind is skipped silently (rc 0; docs/background.md, "cuobjdump's quirks"). This is why every reader mode
    also checks the headers (tests/test_inspection.py)."""
    listed = list_targets(cuda_fixtures.path("unknown-kind"), tool)
    assert len(listed) == len(ArchList.parse(FIXTURES["default"].holds or "")) - 1


def test_parse_listing_is_anchored_and_strict() -> None:
    out = ("ELF file    1: my.ext.cpython-311-x86_64-linux-gnu.1.sm_80.cubin\n"
           "PTX file    1: my.ext.cpython-311-x86_64-linux-gnu.1.sm_90a.ptx\n")
    entries = parse_listing(out, where="x")
    assert [(e.kind, e.name, e.index) for e in entries] == [
        (EntryKind.CUBIN, "sm_80", 1), (EntryKind.PTX, "compute_90a", 1)]
    # nvcc -lineinfo / -G: no index, the source's name (nvdiffrast 0.4.0 builds with -lineinfo)
    lineinfo = parse_listing("ELF file    1: antialias.sm_100.cubin\nPTX file    2: antialias.sm_120.ptx\n", where="x")
    assert [(e.kind, e.name, e.index) for e in lineinfo] == [
        (EntryKind.CUBIN, "sm_100", 1), (EntryKind.PTX, "compute_120", 2)]
    with pytest.raises(ToolError, match="unexpected cuobjdump output line 1"):
        parse_listing("Fatbin elf code:\n", where="x")
    with pytest.raises(ToolError, match="unexpected"):
        parse_listing("ELF file    1: x.1.sm_80.ptx\n", where="x")


def test_variant_free() -> None:
    assert variant_free(Target.from_name("sm_100f")) == Target.from_name("sm_100")
    assert variant_free(Target.from_name("compute_100f")) == Target.from_name("compute_100f")
    assert variant_free(Target.from_name("sm_90a")) == Target.from_name("sm_90a")
