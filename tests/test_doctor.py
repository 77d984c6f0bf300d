"""farm doctor: the pure diagnosis (fast), and the command against a venv holding a real
farm-built wheel (slow: demo_ext compiled by nvcc, asserted and stamped by postbuild, installed by
pip), for GPUs and drivers this machine lacks through --device/--driver."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from farm.cli import main
from farm.doctor.catalog import Catalog
from farm.doctor.catalog import parse as parse_catalog
from farm.doctor.diagnose import Severity, channel, diagnose
from farm.doctor.environment import (
    VERSION_PY_MAX,
    Environment,
    Extension,
    Package,
    Torch,
    scan,
    torch_of,
    version_py_cuda,
)
from farm.doctor.machine import Machine, given
from farm.errors import FarmError
from farm.fsutil import sha256_file
from farm.model.arch import ArchList
from farm.model.driver import Device
from farm.model.drivers import DriverVersion
from farm.model.install import commands
from farm.provenance.buildinfo import LEDGER_KEYS, BuildInfo
from farm.publish import compat, index
from tests.support.ledgermaker import make_entry
from tests.support.publishfix import fresh_venv, pip_install, serve_dir

REPO = Path(__file__).resolve().parent.parent
SO = "pkg/_C.cpython-311-x86_64-linux-gnu.so"


def _package(arch: str = "sm_80;sm_86;compute_86", *, cuda: str = "13.0", torch: str = "none",
             nvcc: str = "13.0.88", ptx_isa: str | None = "9.0", platform: str = "linux_x86_64") -> Package:
    entry = make_entry("pkg", cuda=cuda, torch=torch, arch=arch, platform=platform)
    entry = {k: v for k, v in entry.items() if k not in LEDGER_KEYS}
    entry["found"] = {SO: arch}
    entry["toolchain"]["nvcc"] = nvcc
    info = BuildInfo.from_json(entry)
    archs = ArchList.parse(arch)
    ext = Extension(SO, (archs,), ptx_isa if archs.ptx else None, 2048 if archs.ptx else 0, False)
    return Package("pkg", info.version, "/site", info, (ext,))


def _env(*packages: Package, torch: Torch | None = None) -> Environment:
    return Environment("python", (), packages, torch)


def _machine(*devices: str, driver: str | None = "580.65.06") -> Machine:
    return given([Device.parse(d) for d in devices], DriverVersion.parse(driver) if driver else None)


def _fails(d) -> list[str]:
    return [f.what for f in d.findings if f.severity is Severity.FAIL]


def test_sass_runs_and_nothing_fails() -> None:
    d = diagnose(_machine("8.6"), _env(_package()))
    assert not d.failed
    target = d.verdicts[0].choice.target
    assert target is not None
    assert target.name == "sm_86"


def test_no_image_fails_with_the_page_to_find_another() -> None:
    d = diagnose(_machine("7.5"), _env(_package()), index_url="https://wheels.example.org/")
    assert d.failed
    (fail,) = [f for f in d.findings if f.severity is Severity.FAIL]
    assert "cudaErrorNoKernelImageForDevice" in fail.what
    assert (fail.fix or "").endswith(
        "https://wheels.example.org/compat/find.html?package=pkg&gpu=7.5&driver=580.65.06")


def test_without_an_index_the_fix_says_how_to_name_one() -> None:
    """No placeholder: the fix says what would run and how to get the command for it."""
    d = diagnose(_machine("7.5"), _env(_package()))
    (fail,) = [f for f in d.findings if f.severity is Severity.FAIL]
    assert fail.fix == ("install a build whose targets include sm_75 (or PTX at or below 7.5): no farm index is "
                        "known for pkg: pass --index-url URL (or set FARM_INDEX_URL) and farm doctor names the "
                        "wheel to install")
    assert not any("<" in (f.fix or "") for f in d.findings)


def test_the_index_a_wheel_was_installed_from_names_the_fix() -> None:
    pkg = replace(_package(), index_url="https://wheels.example.org/")
    d = diagnose(_machine("7.5"), _env(pkg))
    (fail,) = [f for f in d.findings if f.severity is Severity.FAIL]
    assert "https://wheels.example.org/compat/find.html?package=pkg&gpu=7.5" in (fail.fix or "")
    d = diagnose(_machine("7.5"), _env(pkg), index_url="https://other.example")  # --index-url wins
    (fail,) = [f for f in d.findings if f.severity is Severity.FAIL]
    assert "https://other.example/compat/find.html?package=pkg&gpu=7.5" in (fail.fix or "")


def test_cannot_tell_is_not_nothing_will_fail() -> None:
    unknown = diagnose(_machine(driver=None), _env(_package()))
    assert not unknown.failed
    assert unknown.cannot_tell
    assert unknown.unchecked == ("kernel images: no GPU found (none given)",
                                 "driver requirements: the driver version is unknown")
    half = diagnose(_machine("8.6", driver=None), _env(_package()))
    assert half.cannot_tell  # the image runs; whether the driver does is unknown
    assert half.unchecked == ("driver requirements: the driver version is unknown",)
    known = diagnose(_machine("8.6"), _env(_package()))
    assert not known.cannot_tell
    assert known.unchecked == ()
    nothing = diagnose(_machine(driver=None), _env())
    assert not nothing.cannot_tell  # no CUDA extension installed: nothing to tell


def test_a_jetson_runs_no_wheel_of_the_farm() -> None:
    """Orin (8.7): sm_80 SASS would load, but an Arm server build does not run on JetPack."""
    pkg = _package("sm_80;sm_86", cuda="13.0", platform="linux_aarch64")
    d = diagnose(_machine("8.7"), _env(pkg))
    (fail,) = _fails(d)
    assert "Jetson modules run the CUDA of their JetPack release" in fail
    thor = diagnose(_machine("11.0"), _env(_package("sm_80;sm_110", cuda="13.0", platform="linux_aarch64")))
    assert not thor.failed
    x86 = diagnose(_machine("11.0"), _env(_package("sm_80;sm_110", cuda="13.0")))
    (fail,) = _fails(x86)
    assert "runs linux_aarch64 wheels only" in fail


def test_jit_warns_of_its_cost_and_the_stub_risk() -> None:
    d = diagnose(_machine("9.0"), _env(_package()))
    assert not d.failed
    warns = [f.what for f in d.findings if f.severity is Severity.WARN]
    assert any("JIT-compiles compute_86" in w and "once" in w for w in warns)
    assert any("stub risk" in w and "__CUDA_ARCH__ 860" in w for w in warns)
    assert d.verdicts[0].stub_risk


def test_ptx_newer_than_the_driver_jit_fails_where_sass_would_run() -> None:
    """A cu128 wheel on driver 550: its SASS runs (minor version compatibility), its PTX does not."""
    pkg = _package(cuda="12.8", nvcc="12.8.93", ptx_isa="8.7")
    assert not diagnose(_machine("8.6", driver="550.54"), _env(pkg)).failed
    d = diagnose(_machine("9.0", driver="550.54"), _env(pkg))
    (fail,) = _fails(d)
    assert "PTX ISA 8.7" in fail
    assert "(222)" in fail
    assert "CUDA 12.4" in fail


def test_driver_too_old_for_the_runtime() -> None:
    d = diagnose(_machine("8.6", driver="550.54"), _env(_package()))
    (fail,) = _fails(d)
    assert "CUDA 13.x runtime" in fail
    assert "(35)" in fail
    fix = next(f.fix for f in d.findings if f.severity is Severity.FAIL) or ""
    assert "580" in fix
    assert "cu124" in fix


def test_no_gpu_still_checks_driver_and_torch() -> None:
    pkg = _package(cuda="12.8", torch="2.8", nvcc="12.8.93", ptx_isa="8.7")
    d = diagnose(_machine(driver="520.61"), _env(pkg, torch=Torch("2.9.1+cu128", "12.8")))
    assert any("no GPU found" in f.what for f in d.findings)
    fails = _fails(d)
    assert any("CUDA 12.x runtime" in f for f in fails)
    assert any("undefined symbol" in f for f in fails)


@pytest.mark.parametrize(("torch", "severity", "text"), [
    (None, Severity.FAIL, "no torch is installed"),
    (Torch("2.8.0+cpu", "cpu"), Severity.FAIL, "CPU build"),
    (Torch("2.9.0+cu128", "12.8"), Severity.FAIL, "undefined symbol"),
    (Torch("2.8.0+cu130", "13.0"), Severity.FAIL, "CUDA 12 runtime"),
    (Torch("2.8.0+cu126", "12.6"), Severity.WARN, "minor version compatibility"),
])
def test_torch_not_the_one_the_wheel_pins(torch: Torch | None, severity: Severity, text: str) -> None:
    pkg = _package(cuda="12.8", torch="2.8", nvcc="12.8.93", ptx_isa="8.7")
    d = diagnose(_machine("9.0", driver="575.51"), _env(pkg, torch=torch), index_url="https://w.example/")
    found = [f for f in d.findings if text in f.what]
    assert found
    assert found[0].severity is severity
    if torch is not None and torch.cuda not in (None, "cpu"):
        want = channel(torch.cuda, torch.minor)
        assert found[0].fix == (f"install the pkg wheel of {want}: "
                                "https://w.example/compat/find.html?package=pkg&driver=575.51")
    elif torch is None:
        assert found[0].fix == 'pip install "torch==2.8.*" --index-url https://download.pytorch.org/whl/cu128'


def test_the_pinned_torch_passes() -> None:
    pkg = _package(cuda="12.8", torch="2.8", nvcc="12.8.93", ptx_isa="8.7")
    d = diagnose(_machine("9.0", driver="575.51"), _env(pkg, torch=Torch("2.8.0+cu128", "12.8")))
    assert not d.failed


def _torch_dist(tmp_path: Path, version: str, requires: str = "") -> metadata.Distribution:
    """torch's dist-info as pip writes it (METADATA only: that is all doctor reads)."""
    info = tmp_path / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n{requires}")
    return metadata.PathDistribution(info)


def test_torch_flavour_from_its_metadata(tmp_path: Path) -> None:
    assert torch_of(_torch_dist(tmp_path / "a", "2.11.0+cu130")) == Torch("2.11.0+cu130", "13.0")
    assert torch_of(_torch_dist(tmp_path / "b", "2.8.0+cpu")).cuda == "cpu"
    # PyPI's default Linux build has no local label; its CUDA runtime is an exact pin on NVIDIA's wheel
    pypi = _torch_dist(tmp_path / "c", "2.9.1",
                       "Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == 'Linux'\n")
    assert torch_of(pypi) == Torch("2.9.1", "12.8")
    cu13 = _torch_dist(tmp_path / "d", "2.11.0", "Requires-Dist: nvidia-cuda-runtime==13.0.96; extra == 'x'\n")
    assert torch_of(cu13).cuda == "13.0"
    assert torch_of(_torch_dist(tmp_path / "e", "2.9.1")).cuda is None


PYPI_TORCH = Path(__file__).parent / "data" / "pypi_torch_2.11.0"


def test_pypi_torch_without_a_label_takes_its_cuda_line_from_version_py(tmp_path: Path) -> None:
    """PyPI's Linux torch 2.11.0: version `2.11.0` with no `+cu130`, its CUDA wheels pinned through
    `cuda-toolkit[...]==13.0.2` (no nvidia-cuda-runtime pin), and `torch/version.py` saying
    `cuda: Optional[str] = '13.0'`. The fixture is that wheel's METADATA headers and version.py
    as shipped. doctor reads the file as text: a version.py that would fail on import is read all
    the same, and nothing of torch is imported."""
    env = scan(paths=(str(PYPI_TORCH),))
    assert env.torch == Torch("2.11.0", "13.0")
    # the same file with a line that raises when run: still read, never run
    site = tmp_path / "site"
    shutil.copytree(PYPI_TORCH, site)
    version_py = site / "torch" / "version.py"
    version_py.write_text("raise SystemExit('imported')\n" + version_py.read_text())
    assert scan(paths=(str(site),)).torch == Torch("2.11.0", "13.0")
    # a CPU build records `cuda = None`
    version_py.write_text("cuda: Optional[str] = None\n")
    assert scan(paths=(str(site),)).torch == Torch("2.11.0", "cpu")
    # a file that says nothing, or is not believed: the metadata's `cuda-toolkit[...]==13.0.2` pin
    # says it; without that pin the line is unknown
    meta = site / "torch-2.11.0.dist-info" / "METADATA"
    pinned = meta.read_text()
    for text in ("cuda = compute()\n", "x" * (VERSION_PY_MAX + 1)):  # the second: not the few lines torch writes
        version_py.write_text(text)
        meta.write_text(pinned)
        assert scan(paths=(str(site),)).torch == Torch("2.11.0", "13.0")
        meta.write_text("".join(line for line in pinned.splitlines(keepends=True)
                                if not line.startswith("Requires-Dist: cuda-toolkit")))
        assert scan(paths=(str(site),)).torch == Torch("2.11.0", None)
    assert version_py_cuda("cuda = '12.8'\n") == "12.8"
    assert version_py_cuda("cuda = '13.0' +\n") is None  # not Python: unknown


def test_farm_doctor_reports_the_cuda_line_of_pypis_torch(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`farm doctor --python PY` of an environment holding PyPI's torch 2.11.0 (unlabelled)."""
    monkeypatch.setenv("PYTHONPATH", str(PYPI_TORCH))
    assert main(["doctor", "--python", sys.executable, "--device", "9.0", "--driver", "580.65.06"]) == 0
    assert "torch 2.11.0 (CUDA 13.0)" in capsys.readouterr().out


def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--driver", "latest"], ["--device", "sm_90"]):
        with pytest.raises(SystemExit) as exc:
            main(["doctor", *bad])
        assert exc.value.code == 2
    assert "not a driver version" in capsys.readouterr().err
    assert main(["doctor", "--python", "/nonexistent/python"]) == 2
    assert "--python" in capsys.readouterr().err


# -- the command, against real installed wheels -----------------------------------------------
@pytest.fixture(scope="module")
def venv(doctor_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = fresh_venv(tmp_path_factory.mktemp("doctor") / "venv")
    proc = pip_install(python, "--no-deps", "--no-index", str(doctor_wheel))
    assert proc.returncode == 0, proc.stderr
    return python


def _doctor(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "doctor", *args, "--json"],
                          capture_output=True, text=True, check=False, cwd=REPO, env={**os.environ, **(env or {})})
    assert proc.returncode in (0, 1, 4), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize(("device", "driver", "code", "kind", "image"), [
    ("8.6", "580.65.06", 0, "sass", "sm_86"),
    ("8.9", "580.65.06", 0, "sass", "sm_86"),
    ("9.0", "580.159.04", 0, "ptx-jit", "compute_86"),  # what the H200 ran: __CUDA_ARCH__ 860
    ("12.0", "590.44", 0, "ptx-jit", "compute_86"),
    ("7.5", "580.65.06", 1, "none", None),
    ("8.6", "550.54", 1, "sass", "sm_86"),  # the CUDA 13 runtime needs 580
])
def test_doctor_on_an_installed_farm_wheel(venv: Path, device: str, driver: str, code: int, kind: str,
                                           image: str | None) -> None:
    rc, doc = _doctor("--python", str(venv), "--device", device, "--driver", driver)
    assert rc == code
    (pkg,) = doc["packages"]
    assert canonicalize_name(pkg["dist"]) == "demo-ext"  # setuptools writes Name: demo_ext
    assert pkg["provenance"] == "asserted"
    (ext,) = pkg["extensions"]
    assert ext["found"] == "sm_80;sm_86;compute_86"
    assert ext["ptx_isa"] == "9.0"
    assert ext["modified"] is False
    (verdict,) = doc["verdicts"]
    assert (verdict["kind"], verdict["image"]) == (kind, image)
    assert verdict["stub_risk"] is (kind == "ptx-jit")


def test_doctor_text_names_the_failure_and_the_fix(venv: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "doctor", "--python", str(venv), "--device", "7.5",
                           "--device", "9.0", "--driver", "550.54", "--index-url", "https://w.example"],
                          capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "no kernel image for GPU 0 (7.5)" in out
    assert "https://w.example/compat/find.html?package=demo-ext&gpu=7.5&driver=550.54" in out
    assert "cudaErrorUnsupportedPtxVersion (222)" in out  # GPU 9.0 would JIT ISA 9.0 on a 12.4 driver
    assert "3 will fail" in out


_BLOCK = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'cibuildwheel', 'nox'):
            raise ImportError(f'doctor must not import {name}')
sys.meta_path.insert(0, Refuse())
from farm.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_doctor_needs_no_torch_and_no_build_tooling(venv: Path) -> None:
    """What a user's light install runs: no torch import, none of the build extra, no toolkit."""
    proc = subprocess.run([sys.executable, "-c", _BLOCK, "doctor", "--python", str(venv), "--json"],
                          capture_output=True, text=True, check=False, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "CUDA_HOME": "/nonexistent"})
    assert proc.returncode in (0, 1, 4), proc.stderr  # 4: no GPU here, so it cannot tell
    doc = json.loads(proc.stdout)
    assert canonicalize_name(doc["packages"][0]["dist"]) == "demo-ext"
    if not doc["machine"]["gpus"]:  # this machine: no GPU, and it says so
        assert any("no GPU found" in f["what"] for f in doc["findings"])


def test_a_modified_extension_is_reported(venv: Path, tmp_path: Path) -> None:
    site = Path(subprocess.run([str(venv), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (so,) = site.glob("demo_ext/_C*.so")
    original = so.read_bytes()
    try:
        so.write_bytes(original + b"\0")
        _, doc = _doctor("--python", str(venv), "--device", "8.6", "--driver", "580.65.06")
        assert doc["packages"][0]["extensions"][0]["modified"] is True
        assert any("differs from the sha256" in f["what"] for f in doc["findings"])
    finally:
        so.write_bytes(original)


# -- the fix names a wheel of the index's catalogue --------------------------------------------
def _catalog(*wheels: tuple[str, str, str]) -> Catalog:
    """A catalogue as farm.publish.compat writes it, for pkg wheels (arch, CUDA, torch)."""
    recs = []
    for n, (arch, cuda, torch) in enumerate(wheels):
        entry = {k: v for k, v in make_entry("pkg", version=f"1.{n}", cuda=cuda, torch=torch, arch=arch).items()
                 if k not in LEDGER_KEYS}
        entry["found"] = {SO: arch}
        entry["toolchain"]["nvcc"] = f"{cuda}.0"
        name = make_entry("pkg", version=f"1.{n}", cuda=cuda, torch=torch)["filename"]
        recs.append(compat.record(compat.CompatWheel(index.describe(name, "0" * 64, 1, None),
                                                     BuildInfo.from_json(entry))))
    return parse_catalog(json.loads(json.dumps({"schema_version": 2, "wheels": [*recs, {"junk": 1}]})), "test")


def _url(name: str) -> str:
    return f"https://w.example/files/{name.replace('+', '%2B')}#sha256={'0' * 64}"


def test_the_fix_names_the_wheel_that_runs() -> None:
    catalog = _catalog(("sm_80;sm_86;compute_86", "13.0", "none"), ("sm_90;sm_120", "13.0", "none"),
                       ("sm_75;sm_80", "12.8", "none"))
    assert catalog.skipped == 1
    env = _env(_package(), torch=None)
    d = diagnose(_machine("7.5"), env, index_url="https://w.example", catalogs={"https://w.example": catalog})
    (fail,) = [f for f in d.findings if f.severity is Severity.FAIL]
    assert fail.fix == f'pip install "pkg @ {_url("pkg-1.2+cu128-cp311-cp311-linux_x86_64.whl")}"'
    d = diagnose(_machine("9.0"), env, index_url="https://w.example/", catalogs={"https://w.example/": catalog})
    risk = next(f for f in d.findings if "stub risk" in f.what)
    assert "pkg-1.1%2Bcu130-" in (risk.fix or "")  # SASS sm_90 instead of a JIT below the device


def test_driver_too_old_names_a_wheel_of_an_older_cuda_line() -> None:
    catalog = _catalog(("sm_80;sm_86;compute_86", "13.0", "none"), ("sm_80;sm_86", "12.8", "none"))
    d = diagnose(_machine("8.6", driver="550.54"), _env(_package(), torch=None), index_url="https://w.example",
                 catalogs={"https://w.example": catalog})
    (fail,) = [f for f in d.findings if f.severity is Severity.FAIL]
    assert "CUDA 13.x runtime" in fail.what
    assert fail.fix == ("upgrade the driver to 580 or newer, or pip install "
                        f'"pkg @ {_url("pkg-1.1+cu128-cp311-cp311-linux_x86_64.whl")}"')


def test_an_unreadable_catalogue_is_said_and_fixes_fall_back(venv: Path, tmp_path: Path) -> None:
    rc, doc = _doctor("--python", str(venv), "--device", "7.5", "--driver", "580.65.06",
                      "--index-url", str(tmp_path))
    assert rc == 1
    assert any("is not readable" in f["what"] for f in doc["findings"])
    fail = next(f for f in doc["findings"] if f["severity"] == "fail")
    assert fail["fix"].endswith("/compat/find.html?package=demo-ext&gpu=7.5&driver=580.65.06")


def test_doctor_reads_a_served_index(venv: Path, doctor_wheel: Path, tmp_path: Path) -> None:
    """The catalogue of a static index served on 127.0.0.1, as a user's --index-url is."""

    root = tmp_path / "index"
    sha = sha256_file(doctor_wheel)
    assert index.publish_each(root, [(doctor_wheel, sha)], lambda n: sha if n == doctor_wheel.name else None).report
    server, url = serve_dir(root, tmp_path / "http.log")
    try:
        rc, doc = _doctor("--python", str(venv), "--device", "9.0", "--driver", "580.65.06", "--index-url", url)
    finally:
        server.stop()
    assert rc == 0
    assert not any("catalogue" in f["what"] for f in doc["findings"])
    risk = next(f for f in doc["findings"] if "stub risk" in f["what"])
    page = f"{url}/compat/find.html?package=demo-ext&gpu=9.0&driver=580.65.06"
    assert risk["fix"] == f"prefer a build with sm_90 SASS: {page}"  # none in this index


def test_the_index_a_wheel_came_from_names_its_fix(doctor_wheel: Path, tmp_path: Path) -> None:
    """A wheel installed by the command the compatibility page shows (its URL, recorded by the
    installer in direct_url.json): doctor fetches that index's catalogue and names it in the fix,
    with no --index-url. FARM_INDEX_URL names another index instead."""
    root = tmp_path / "index"
    sha = sha256_file(doctor_wheel)
    assert index.publish_each(root, [(doctor_wheel, sha)], lambda n: sha if n == doctor_wheel.name else None).report
    server, url = serve_dir(root, tmp_path / "http.log")
    try:
        python = fresh_venv(tmp_path / "venv")
        rec = {"project": "demo-ext", "url": index.url_of(doctor_wheel.name, None), "sha256": sha}
        requirements = shlex.split(commands(rec, f"{url}/")[0])[2:]  # pip install "demo-ext @ URL#sha256=..."
        proc = pip_install(python, "--no-deps", *requirements)
        assert proc.returncode == 0, proc.stderr
        rc, doc = _doctor("--python", str(python), "--device", "7.5", "--driver", "580.65.06")
        assert rc == 1
        assert not any("not readable" in f["what"] for f in doc["findings"])  # the catalogue was read
        fail = next(f for f in doc["findings"] if f["severity"] == "fail")
        assert fail["fix"].endswith(f"{url}/compat/find.html?package=demo-ext&gpu=7.5&driver=580.65.06")
        rc, doc = _doctor("--python", str(python), "--device", "7.5", "--driver", "580.65.06",
                          env={"FARM_INDEX_URL": str(tmp_path / "elsewhere")})
        assert any(f"catalogue of {tmp_path / 'elsewhere'} is not readable" in f["what"] for f in doc["findings"])
    finally:
        server.stop()


def test_no_gpu_and_no_driver_is_cannot_tell(venv: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "doctor", "--python", str(venv)],
                          capture_output=True, text=True, check=False, cwd=REPO,
                          env={**os.environ, "PATH": "/nonexistent"})  # no nvidia-smi either
    if "no GPU found" not in proc.stdout:
        pytest.skip("this machine has a GPU: doctor can tell")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "cannot tell whether 1 CUDA extension(s) run here: not checked: kernel images" in proc.stdout
    assert "nothing will fail" not in proc.stdout


def test_a_wheel_without_provenance_is_judged_by_inspection(doctor_wheel: Path, tmp_path: Path) -> None:
    """The builder's wheel before postbuild stamped it: no _build_info.json, as any other package
    with CUDA extensions; its fatbins are read as installed, its PTX ISA from the PTX itself."""
    (raw,) = (doctor_wheel.parent.parent / "raw").glob("demo_ext-*.whl")
    python = fresh_venv(tmp_path / "venv")
    assert pip_install(python, "--no-deps", "--no-index", str(raw)).returncode == 0
    rc, doc = _doctor("--python", str(python), "--device", "9.0", "--driver", "570.86")
    (pkg,) = doc["packages"]
    assert pkg["provenance"] == "inspected"
    assert pkg["cell"] is None
    assert pkg["extensions"][0]["found"] == "sm_80;sm_86;compute_86"
    assert pkg["extensions"][0]["ptx_isa"] == "9.0"
    assert pkg["minimum_driver"] == ["driver >= 580.65.06 for PTX ISA 9.0 (CUDA 13.0) to JIT"]
    assert rc == 1  # a 570 driver cannot JIT ISA 9.0 PTX, which is all a 9.0 GPU finds in it


def test_torch_mismatch_names_the_wheel_for_the_installed_torch() -> None:
    catalog = _catalog(("sm_80;sm_90", "12.8", "2.8"), ("sm_80;sm_90", "12.8", "2.9"), ("sm_80;sm_90", "13.0", "2.9"))
    pkg = _package("sm_80;sm_90", cuda="12.8", torch="2.8", nvcc="12.8.93", ptx_isa=None)
    catalogs = {"https://w.example": catalog}
    d = diagnose(_machine("9.0", driver="575.51"), _env(pkg, torch=Torch("2.9.1+cu128", "12.8")),
                 index_url="https://w.example", catalogs=catalogs)
    (fail,) = [f for f in d.findings if f.severity is Severity.FAIL]
    assert "undefined symbol" in fail.what
    assert fail.fix == f'pip install "pkg @ {_url("pkg-1.1+cu128torch2.9-cp311-cp311-linux_x86_64.whl")}"'
    d = diagnose(_machine("9.0", driver="575.51"), _env(pkg, torch=Torch("2.7.0+cu126", "12.6")),
                 index_url="https://w.example", catalogs=catalogs)
    (fail,) = [f for f in d.findings if f.severity is Severity.FAIL]
    assert fail.fix == ("the index has no pkg for torch 2.7.0+cu126 that runs here: "
                        'pip install "torch==2.8.*" --index-url https://download.pytorch.org/whl/cu128 instead')


def test_a_catalogue_record_that_would_break_the_command_is_left_out() -> None:
    """A fix pastes the record's URL into a shell command: only a stored wheel's path under the
    index root, and a sha256, are believed."""
    good = next(iter(_catalog(("sm_80", "13.0", "none")).wheels)).as_record()
    base = {"filename": "pkg-1.0+cu130-cp311-cp311-linux_x86_64.whl", "project": "pkg", "version": "1.0+cu130",
            "channel": "cu130", "cuda": "13.0", "torch": "none", "python": "cp311", "platform": "linux_x86_64",
            "devices": {}, "pins": [], "unresolved": [], "sha256": "0" * 64}
    bad_urls = ['files/x.whl"; rm -rf ~; "', "https://evil.example/x.whl", "files/../x.whl/", "files/x.tar.gz"]
    recs = [{**base, "url": good["url"]}, *({**base, "url": u} for u in bad_urls),
            {**base, "url": good["url"], "sha256": "z" * 64},
            {**base, "url": good["url"], "pins": [{"project": "a", "url": "files/$(id).whl", "sha256": "0" * 64}]}]
    catalog = parse_catalog({"schema_version": 2, "wheels": recs}, "test")
    assert (len(catalog.wheels), catalog.skipped) == (1, 6)
    with pytest.raises(FarmError, match="schema_version 2"):
        parse_catalog({"schema_version": 1, "wheels": []}, "test")
