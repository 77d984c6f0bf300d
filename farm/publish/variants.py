"""The wheel-variant properties of an asserted wheel (PEP 825), in the ``nvidia`` namespace of
NVIDIA's variant provider, from the wheel's provenance alone (pure).

What the provider does with them (uv 0.13.9's built-in provider, measured with
``NV_VARIANT_PROVIDER_FORCE_SM_ARCH`` and ``NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION``; it
behaves as NVIDIA's reference plugin does):

- a GPU of compute capability X.Y matches ``sm_arch`` values ``X0_real`` to ``XY_real`` and
  ``X0_virtual``, nothing else: ``XY_real`` stands for every GPU of major X from minor Y up, and
  ``X0_virtual`` for every GPU of major X. No value carries an ``a`` or ``f`` suffix, and no
  value reaches across majors (PTX that JITs on a later major has no value of its own);
- ``cuda_version_lower_bound`` V matches a driver whose CUDA version (``cuDriverGetVersion``, the
  "CUDA Version" nvidia-smi prints) is V or newer; without a driver nothing matches;
- a wheel matches when each of its features has one matching value.

So each value names a set of GPUs, and a wheel gets a value only if it runs on every GPU of that
set by farm's driver model (:func:`farm.model.driver.pick_worst` over the extensions' found
targets, every minor 0-9 of the major, not only the GPUs known today): a variant never installs
where it would fail. ``XY_real`` is offered for each SASS target ``sm_XY`` (``sm_XYf`` too, whose
family is the same set); ``sm_XYa`` runs on X.Y alone, so its value is offered only when other
targets serve the rest of the major. ``X0_virtual`` is offered for each major the wheel serves
whole with some GPU of it JIT-compiling PTX; a major that PTX serves only from some minor on gets
no value. The lower bound is the driver the CUDA line's runtime needs, or the one that JITs the
wheel's PTX when some GPU the values name JIT-compiles: one bound serves all the wheel's GPUs, so
a GPU that runs SASS under a driver new enough for the runtime but too old for the PTX is refused.
farm's model has no upper bound on the driver, so ``cuda_version_upper_bound`` is never set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from farm.errors import version_key
from farm.model.arch import ArchList
from farm.model.driver import Device, ImageKind, pick_worst
from farm.model.drivers import minimum_driver, requirements, table
from farm.provenance.buildinfo import BuildInfo, MadeByRecord

NAMESPACE = "nvidia"
SM_ARCH = "sm_arch"
LOWER_BOUND = "cuda_version_lower_bound"
# The majors whose values NVIDIA's provider knows, and the minors of each.
MAJORS = range(5, 13)
MINORS = range(10)


@dataclass(frozen=True)
class VariantProps:
    """The properties of one variant wheel: ``sm_arch`` values and the driver's lower bound."""

    sm_arch: tuple[str, ...]  # "80_real", "90_real", "100_virtual", in arch order
    lower_bound: str  # "13.0"

    def properties(self) -> list[tuple[str, str, str]]:
        """(namespace, feature, value) of every property."""
        return ([(NAMESPACE, SM_ARCH, v) for v in self.sm_arch]
                + [(NAMESPACE, LOWER_BOUND, self.lower_bound)])


@dataclass(frozen=True)
class LeftOut:
    """Why a wheel has no variant."""

    reason: str


def _real(major: int, minor: int) -> str:
    return f"{major}{minor}_real"


def _virtual(major: int) -> str:
    return f"{major}0_virtual"


def admitted(value: str) -> list[Device]:
    """Every GPU the provider matches to ``value`` (``90_real``: 9.0 to 9.9)."""
    number, kind = value.split("_")
    major, minor = int(number[:-1]), int(number[-1])
    return [Device(major, m) for m in MINORS if m >= (minor if kind == "real" else 0)]


def _ptx_isa(info: BuildInfo) -> str | None:
    """The PTX ISA of the wheel's PTX: as its device code records it, else its nvcc's."""
    made_by: Mapping[str, MadeByRecord] = info.made_by if isinstance(info.made_by, Mapping) else {}
    isas = [isa for rec in made_by.values() for isa in rec.ptx_isa]
    if isas:
        return max(isas, key=version_key)
    nvcc = info.toolchain.nvcc if info.toolchain else None
    return table().ptx_isa(nvcc) if nvcc else None


def sm_arch_values(units: Iterable[ArchList]) -> tuple[list[str], dict[Device, ImageKind]]:
    """The ``sm_arch`` values a wheel whose extensions hold ``units`` may claim, and the image
    each GPU of the provider's range runs."""
    units = list(units)
    kinds = {d: pick_worst(units, d).kind for d in (Device(a, b) for a in MAJORS for b in MINORS)}
    values: list[str] = []
    for t in sorted({t for u in units for t in u.sass}, key=lambda t: (t.major, t.minor)):
        value = _real(t.major, t.minor)
        if t.major in MAJORS and value not in values and all(kinds[d] is ImageKind.SASS for d in admitted(value)):
            values.append(value)
    for major in MAJORS:
        got = [kinds[d] for d in admitted(_virtual(major))]
        if ImageKind.NONE not in got and ImageKind.PTX_JIT in got:
            values.append(_virtual(major))
    order = {v: (int(v.split("_")[0][:-1]), v.endswith("_virtual"), v) for v in values}
    return sorted(values, key=order.__getitem__), kinds


def properties(info: BuildInfo) -> VariantProps | LeftOut:
    """The variant properties of the wheel ``info`` describes, or why it has none."""
    if info.provenance != "asserted":  # an asserted record's assertion passed (the schema says so)
        return LeftOut("not an asserted wheel")
    units = [ArchList.parse(v) for v in (info.found or {}).values() if v]
    if not units:
        return LeftOut("its provenance records no device code")
    values, kinds = sm_arch_values(units)
    if not values:
        found = ";".join(sorted({t.name for u in units for t in u}))
        return LeftOut(f"no sm_arch value of NVIDIA's provider names only GPUs its targets ({found}) run on")
    jit = any(kinds[d] is ImageKind.PTX_JIT for v in values for d in admitted(v))
    cuda = info.cell.cuda
    need = minimum_driver(requirements(cuda, _ptx_isa(info), has_ptx=jit, platform=info.cell.platform))
    bound = table().reported_cuda(need.branch) if need else None
    if bound is None:
        return LeftOut(f"no known driver requirement for CUDA {cuda}" + (" PTX" if jit else ""))
    return VariantProps(tuple(values), bound)
