"""The diagnosis (pure): installed packages x GPUs x driver x torch -> findings, each with its fix.

What fails at run time, predicted before any launch:

- **no image**: no SASS of the device's major at or below it, no PTX at or below it
  (``cudaErrorNoKernelImageForDevice``);
- **driver too old**: for the CUDA runtime the wheel was built against (minor version
  compatibility), or for the PTX the driver would JIT (``cudaErrorUnsupportedPtxVersion``);
- **torch mismatch**: a farm wheel pins a torch minor and CUDA line; another torch gives
  ``undefined symbol`` on import, another CUDA major a missing ``libcudart``.

What runs, but not as built for: a **PTX JIT** (a one-time compile on first launch, cached by the
driver) and, when the PTX is below the device, the **stub risk** (code gated above the PTX's
``__CUDA_ARCH__`` is compiled out and its kernel silently does nothing).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from farm.doctor.catalog import Catalog, CatalogWheel
from farm.doctor.environment import Environment, Extension, Package, Torch
from farm.doctor.machine import Gpu, Machine
from farm.errors import FarmError
from farm.model import devices
from farm.model.driver import Choice, ImageKind, pick_worst, stub_risk
from farm.model.drivers import DriverVersion, Requirement, requirements, table
from farm.model.install import FIND_PAGE, commands, torch_step
from farm.publish.attestation import verify_command


class Severity(str, enum.Enum):
    FAIL = "fail"  # will fail: the command exits 1
    WARN = "warn"  # runs, not as built for
    OK = "ok"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    package: str | None  # "demo_ext 0.1.0"
    where: str | None  # an extension's path, or None for the package
    what: str
    fix: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"severity": self.severity.value, "package": self.package, "where": self.where,
                "what": self.what, "fix": self.fix}


@dataclass(frozen=True)
class GpuVerdict:
    """One extension on one GPU."""

    package: str
    extension: str
    gpu: Gpu
    choice: Choice
    stub_risk: bool
    ptx_isa: str | None
    ptx_bytes: int

    def to_json(self) -> dict[str, object]:
        c = self.choice
        return {"package": self.package, "extension": self.extension, "gpu": self.gpu.index,
                "compute_capability": str(self.gpu.device), "kind": c.kind.value,
                "image": c.target.name if c.target else None, "cuda_arch": c.cuda_arch,
                "stub_risk": self.stub_risk, "ptx_isa": self.ptx_isa if c.kind is ImageKind.PTX_JIT else None}


@dataclass(frozen=True)
class Diagnosis:
    machine: Machine
    environment: Environment
    verdicts: tuple[GpuVerdict, ...]
    findings: tuple[Finding, ...]
    unchecked: tuple[str, ...] = ()  # what decides whether it runs and was not known here

    @property
    def failed(self) -> bool:
        return any(f.severity is Severity.FAIL for f in self.findings)

    @property
    def cannot_tell(self) -> bool:
        """Nothing found to fail, but CUDA extensions were not checked against a GPU or a driver:
        not the same answer as "nothing will fail"."""
        return not self.failed and bool(self.unchecked) and any(p.extensions for p in self.environment.packages)


def channel(cuda: str, torch: str | None) -> str:
    """The index channel of a (CUDA line, torch minor): ``cu128/torch2.8``, ``cu128`` without torch."""
    cu = "cu" + cuda.replace(".", "")
    return f"{cu}/torch{torch}" if torch and torch != "none" else cu


_RANK = {"sass": 0, "ptx-jit": 1}


def _version_key(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


NO_INDEX = "pass --index-url URL (or set FARM_INDEX_URL) and farm doctor names the wheel to install"


@dataclass(frozen=True)
class Fixes:
    """Names the wheel to install instead: from the catalogue of the farm index a package comes
    from (``index_url`` when given, else the index the package was installed from), by URL and
    sha256; without a catalogue, that index's compatibility page; without an index, how to name one."""

    machine: Machine
    env: Environment
    index_url: str | None  # --index-url or FARM_INDEX_URL: every package's index
    catalogs: Mapping[str, Catalog] = field(default_factory=dict)  # by index root, without the trailing /

    def index_of(self, pkg: Package) -> str | None:
        url = self.index_url or pkg.index_url
        return url.rstrip("/") if url else None

    def attested(self, pkg: Package) -> Finding | None:
        """Whether the package's own wheel is attested, as its index's catalogue says (None: the
        index or its record of the wheel is not known here), and the command that checks it."""
        info = pkg.build_info
        catalog = self.catalogs.get(self.index_of(pkg) or "")
        if info is None or catalog is None:
            return None
        c = info.cell
        own = next((w for w in catalog.wheels if w.project == canonicalize_name(pkg.dist)
                    and w.version == pkg.version and (w.cuda, w.torch, w.python, w.platform)
                    == (c.cuda, c.torch, c.python, c.platform)), None)
        if own is None:
            return None
        if own.attestation is None:
            return Finding(Severity.INFO, pkg.dist, None, f"{own.filename}: the index records no attestation "
                           "(a signed statement of where it was built)")
        return Finding(Severity.INFO, pkg.dist, None, f"{own.filename}: attested by {own.attestation.repository} "
                       f"({own.attestation.url})", f"check the signature of the wheel, or of the installed "
                       f"_build_info.json it names: {verify_command(own.filename, own.attestation)}")

    def candidates(self, pkg: Package) -> list[CatalogWheel]:
        catalog = self.catalogs.get(self.index_of(pkg) or "")
        if catalog is None:
            return []
        torch = self.env.torch
        out = []
        for w in catalog.wheels:
            if (w.project != canonicalize_name(pkg.dist) or w.python not in (self.env.python_tag, "abi3")
                    or not w.installable or w.platform != self.machine.platform):
                continue
            if w.torch != "none":
                if torch is None or w.torch != torch.minor:
                    continue
                if torch.cuda and torch.cuda != "cpu" and w.cuda.split(".")[0] != torch.cuda.split(".")[0]:
                    continue
            out.append(w)
        return out

    def runs(self, w: CatalogWheel, gpu: Gpu, *, sass_only: bool = False) -> bool:
        kind, driver = w.devices.get(str(gpu.device), ("none", None))
        if kind == "none" or (sass_only and kind != "sass"):
            return False
        if self.machine.driver is not None and driver:
            try:
                return DriverVersion.parse(driver).branch <= self.machine.driver.branch
            except FarmError:
                return False
        return True

    def best(self, pkg: Package, gpus: tuple[Gpu, ...], *, sass_only: bool = False) -> CatalogWheel | None:
        """The wheel that runs on every GPU given (SASS first, then the newest version and CUDA)."""
        fits = [w for w in self.candidates(pkg) if all(self.runs(w, g, sass_only=sass_only) for g in gpus)]
        if not gpus and self.machine.driver is not None:  # no GPU: the runtime's driver is what can be checked
            fits = [w for w in self.candidates(pkg) if self.runs_driver(w)]

        def key(w: CatalogWheel) -> tuple[int, Version, Version]:
            worst = max((_RANK.get(w.devices.get(str(g.device), ("none", None))[0], 2) for g in gpus), default=0)
            return (-worst, _version_key(w.version), _version_key(w.cuda))

        return max(fits, key=key, default=None)

    def runs_driver(self, w: CatalogWheel) -> bool:
        need = table().runtime_minimum(w.cuda, w.platform)
        return need is None or self.machine.driver is None or need.met_by(self.machine.driver)

    def install(self, pkg: Package, w: CatalogWheel) -> str:
        return commands(w.as_record(), f"{self.index_of(pkg)}/")[0]

    def page(self, pkg: Package, gpu: Gpu | None = None) -> str:
        """The index's find page for this package (and GPU and driver), or how to name an index."""
        index = self.index_of(pkg)
        if index is None:
            return f"no farm index is known for {pkg.dist}: {NO_INDEX}"
        query = f"package={canonicalize_name(pkg.dist)}" + (f"&gpu={gpu.device}" if gpu else "") + (
            f"&driver={self.machine.driver}" if self.machine.driver else "")
        return f"{index}/{FIND_PAGE}?{query}"


def _label(pkg: Package) -> str:
    return f"{pkg.dist} {pkg.version}"


def _wheel_cuda(pkg: Package) -> str | None:
    info = pkg.build_info
    return info.cell.cuda if info else None


def _nvcc_ptx_isa(pkg: Package) -> str | None:
    """The PTX ISA the wheel's nvcc writes, from provenance (``toolchain.nvcc`` 13.0.88 -> 9.0)."""
    info = pkg.build_info
    nvcc = info.toolchain.nvcc if info and info.toolchain else None
    return table().ptx_isa(nvcc) if nvcc else None


def _image_findings(pkg: Package, ext: Extension, gpu: Gpu, choice: Choice, risky: bool,
                    driver: DriverVersion | None, fixes: Fixes) -> list[Finding]:
    label = _label(pkg)
    if choice.kind is ImageKind.NONE:
        cc = gpu.device
        other = fixes.best(pkg, (gpu,))
        return [Finding(
            Severity.FAIL, label, ext.path,
            f"no kernel image for {gpu}: it holds {ext.found.canonical()}; the first launch raises "
            "cudaErrorNoKernelImageForDevice ('no kernel image is available for execution on the device')",
            fixes.install(pkg, other) if other else
            f"install a build whose targets include sm_{cc.number} (or PTX at or below {cc}): "
            f"{fixes.page(pkg, gpu)}")]
    if choice.kind is ImageKind.SASS:
        return [Finding(Severity.OK, label, ext.path, f"{gpu}: {choice.describe()}")]
    isa = ext.ptx_isa or _nvcc_ptx_isa(pkg)
    cost = (f"the first launch JIT-compiles its {ext.ptx_bytes // 1024 or 1} KiB of PTX, once: the driver caches "
            "the result in ~/.nv/ComputeCache (CUDA_CACHE_MAXSIZE); the cost grows with the PTX "
            "(0.2 s for 2 KiB on an H200)")
    out = [Finding(Severity.WARN, label, ext.path, f"{gpu}: {choice.describe()}; {cost}")]
    target = choice.target
    if risky and target is not None:
        out.append(Finding(
            Severity.WARN, label, ext.path,
            f"stub risk on {gpu}: code compiled from {target.name} sees __CUDA_ARCH__ {target.cuda_arch}, "
            f"so a path gated at __CUDA_ARCH__ >= {target.cuda_arch + 10}..{gpu.device.number * 10} is compiled out "
            "and its kernel runs and does nothing",
            fixes.install(pkg, sass) if (sass := fixes.best(pkg, (gpu,), sass_only=True)) else
            f"prefer a build with sm_{gpu.device.number} SASS: {fixes.page(pkg, gpu)}"))
    if driver is not None and isa:
        need = table().ptx_minimum(isa)
        if need is not None and not need.met_by(driver):
            out.append(Finding(
                Severity.FAIL, label, ext.path,
                f"{gpu} would JIT PTX ISA {isa}, which driver {driver} cannot read "
                f"(its JIT reads up to CUDA {table().newest_cuda(driver) or '?'}): {need.error}",
                f"upgrade the driver to {need.shown} or newer, or "
                + (fixes.install(pkg, sass) if (sass := fixes.best(pkg, (gpu,), sass_only=True)) else
                   f"install a build with sm_{gpu.device.number} SASS: {fixes.page(pkg, gpu)}")))
        elif need is None:
            out.append(Finding(Severity.WARN, label, ext.path,
                               f"PTX ISA {isa} is newer than farm's driver table: whether driver {driver} reads it "
                               "is unknown"))
    return out


def _tie_finding(pkg: Package, ext: Extension, gpu: Gpu, fixes: Fixes) -> Finding | None:
    """A GPU whose machine runs no wheel of the package's platform and CUDA line (a Jetson), from
    provenance; whatever the fatbins hold."""
    cell = pkg.build_info.cell if pkg.build_info else None
    why = devices.blocked(gpu.device, cell.platform, cell.cuda) if cell else None
    tie = devices.tie(gpu.device)
    if why is None or tie is None:
        return None
    other = fixes.best(pkg, (gpu,))
    return Finding(Severity.FAIL, _label(pkg), ext.path, f"{gpu}: {why}",
                   fixes.install(pkg, other) if other else f"install {tie.instead}: {fixes.page(pkg, gpu)}")


def _driver_findings(pkg: Package, driver: DriverVersion, platform: str, fixes: Fixes) -> list[Finding]:
    cuda = _wheel_cuda(pkg)
    if not cuda:
        return []
    need = table().runtime_minimum(cuda, platform)
    if need is None or need.met_by(driver):
        return []
    supported = table().newest_cuda(driver)
    info = pkg.build_info
    fix = f"upgrade the driver to {need.shown} or newer"
    other = fixes.best(pkg, fixes.machine.gpus)
    if other is not None and other.cuda.split(".")[0] != cuda.split(".")[0]:
        torch_too = f"{_torch(other.cuda, other.torch)}, then " if other.torch != "none" else ""
        fix += f", or {torch_too}{fixes.install(pkg, other)}"
    elif supported and info:
        torch_minor = info.cell.torch
        what = pkg.dist if torch_minor in (None, "none") else f"torch and {pkg.dist}"
        fix += (f", or install {what} for CUDA {supported} or older "
                f"(a channel such as {channel(supported, torch_minor)})")
    return [Finding(Severity.FAIL, _label(pkg), None,
                    f"built for CUDA {cuda}: needs {need.describe()}; driver {driver} is older: {need.error}", fix)]


def _torch(cuda: str | None, torch: str | None) -> str:
    """How to install the torch a wheel was built against."""
    return torch_step(cuda, torch) or f"install torch {torch} for CUDA {cuda or '?'}"


def _for_torch(pkg: Package, torch: Torch, fixes: Fixes) -> str:
    """The wheel for the installed torch: from the catalogue when there is one, else the page."""
    info = pkg.build_info
    assert info is not None
    other = fixes.best(pkg, fixes.machine.gpus)
    if other is not None:
        return fixes.install(pkg, other)
    if fixes.candidates(pkg) or fixes.catalogs.get(fixes.index_of(pkg) or ""):
        return (f"the index has no {pkg.dist} for torch {torch.version} that runs here: "
                f"{_torch(info.cell.cuda, info.cell.torch)} instead")
    where = channel(torch.cuda, torch.minor) if torch.cuda else f"torch {torch.minor}"
    return f"install the {pkg.dist} wheel of {where}: {fixes.page(pkg)}"


def _torch_findings(pkg: Package, torch: Torch | None, fixes: Fixes) -> list[Finding]:
    info = pkg.build_info
    if info is None or not info.cell.torch or info.cell.torch == "none":
        return []
    pinned, cuda = info.cell.torch, info.cell.cuda
    label = _label(pkg)
    want = f"torch {pinned} ({channel(cuda, pinned) if cuda else '?'})"
    if torch is None:
        return [Finding(Severity.FAIL, label, None, f"built against {want}, and no torch is installed: "
                        "importing it fails", _torch(cuda, pinned))]
    if torch.cuda == "cpu":
        return [Finding(Severity.FAIL, label, None,
                        f"built against {want}; torch {torch.version} is a CPU build: importing it fails",
                        f"{_torch(cuda, pinned)}, then {pkg.dist} again")]
    out = []
    if torch.minor != pinned:
        fix = _for_torch(pkg, torch, fixes)
        out.append(Finding(Severity.FAIL, label, None,
                           f"built against {want}; torch {torch.version} is installed: importing it fails "
                           "with 'undefined symbol' (torch's C++ ABI changes between minors)", fix))
    elif cuda and torch.cuda and torch.cuda != cuda:
        fix = _for_torch(pkg, torch, fixes)
        if torch.cuda.split(".")[0] != cuda.split(".")[0]:
            out.append(Finding(Severity.FAIL, label, None,
                               f"built against {want}; torch {torch.version} is for CUDA {torch.cuda}: "
                               f"the extension needs the CUDA {cuda.split('.')[0]} runtime torch does not bring", fix))
        else:
            out.append(Finding(Severity.WARN, label, None,
                               f"built against {want}; torch {torch.version} is for CUDA {torch.cuda} "
                               "(same major: runs under minor version compatibility, not the pinned pair)", fix))
    elif torch.cuda is None:
        out.append(Finding(Severity.INFO, label, None,
                           f"torch {torch.version}: its metadata names no CUDA line; the wheel pins CUDA {cuda}"))
    return out


def diagnose(machine: Machine, env: Environment, *, index_url: str | None = None,
             catalogs: Mapping[str, Catalog] | None = None,
             catalog_errors: Mapping[str, str] | None = None) -> Diagnosis:
    """``index_url``: the index every fix names (else each package's own); ``catalogs``: the
    catalogue of each index, by root without the trailing ``/``; ``catalog_errors``: why an
    index's could not be read."""
    findings: list[Finding] = []
    verdicts: list[GpuVerdict] = []
    unchecked: list[str] = []
    catalogs = {url.rstrip("/"): c for url, c in (catalogs or {}).items()}
    fixes = Fixes(machine, env, index_url, catalogs)
    for url, error in sorted((catalog_errors or {}).items()):
        findings.append(Finding(Severity.INFO, None, None, f"the catalogue of {url} is not readable: {error}",
                                "fixes name the index's compatibility page instead of a wheel"))
    findings.extend(Finding(Severity.INFO, None, None, f"{c.skipped} malformed record(s) of {c.url} left out")
                    for c in catalogs.values() if c.skipped)
    if not machine.gpus:
        why = "; ".join(machine.notes) if machine.notes else "none given"
        unchecked.append(f"kernel images: no GPU found ({why})")
        findings.append(Finding(Severity.INFO, None, None,
                                f"no GPU found ({why}): kernel images are not checked; the driver and torch are",
                                "pass --device X.Y to check them for a GPU"))
    if machine.driver is None:
        unchecked.append("driver requirements: the driver version is unknown")
        findings.append(Finding(Severity.INFO, None, None, "driver version unknown: driver requirements not checked",
                                "pass --driver X.Y to check them for a machine"))
    if not env.packages:
        findings.append(Finding(Severity.INFO, None, None,
                                f"no package with farm provenance or CUDA extensions in {env.python}"))
    for pkg in env.packages:
        signed = fixes.attested(pkg)
        if signed is not None:
            findings.append(signed)
        label = _label(pkg)
        findings.extend(Finding(Severity.WARN, label, None, problem) for problem in pkg.problems)
        for ext in pkg.extensions:
            if ext.modified:
                findings.append(Finding(Severity.WARN, label, ext.path,
                                        "differs from the sha256 its provenance records: judged as installed",
                                        f"reinstall {pkg.dist}"))
            for gpu in machine.gpus:
                choice = pick_worst(ext.units, gpu.device)
                risky = stub_risk(choice)
                verdicts.append(GpuVerdict(label, ext.path, gpu, choice, risky, ext.ptx_isa or _nvcc_ptx_isa(pkg),
                                           ext.ptx_bytes))
                tied = _tie_finding(pkg, ext, gpu, fixes)
                findings.extend([tied] if tied else
                                _image_findings(pkg, ext, gpu, choice, risky, machine.driver, fixes))
            if not machine.gpus and machine.driver is not None and ext.ptx_bytes:
                isa = ext.ptx_isa or _nvcc_ptx_isa(pkg)
                need = table().ptx_minimum(isa) if isa else None
                if need is not None and not need.met_by(machine.driver):
                    findings.append(Finding(Severity.WARN, label, ext.path,
                                            f"its PTX (ISA {isa}) needs {need.describe()}: a GPU that would JIT it "
                                            f"fails with {need.error}"))
        if machine.driver is not None:
            findings.extend(_driver_findings(pkg, machine.driver, machine.platform, fixes))
        findings.extend(_torch_findings(pkg, env.torch, fixes))
    return Diagnosis(machine, env, tuple(verdicts), tuple(findings), tuple(unchecked))


def requirements_of(pkg: Package, platform: str) -> list[Requirement]:
    """Every driver requirement of a package (runtime, and PTX when it holds any)."""
    isa = next((e.ptx_isa for e in pkg.extensions if e.ptx_isa), None) or _nvcc_ptx_isa(pkg)
    return requirements(_wheel_cuda(pkg), isa, has_ptx=any(e.ptx_bytes for e in pkg.extensions), platform=platform)
