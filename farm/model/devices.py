"""The GPUs a user may hold: every compute capability the farm's CUDA lines can build for, its
name, and the devices that ship as one machine whose CUDA stack limits which wheels can run.

The capabilities come from the nvcc support tables (:mod:`farm.model.arch`), never from a list
kept here: a CUDA line that learns a new arch adds a GPU to every page. What is kept here is what
no table says: each capability's generation and products, and the platform ties.

A **platform tie**: Jetson modules (Tegra: 5.3, 6.2, 7.2, 8.7, and 10.1, Thor's number before
CUDA 13.0) run the CUDA of their JetPack release, built for the integrated GPU; farm's
``linux_aarch64`` wheels are built with the Arm server (SBSA) toolkit from NVIDIA's PyPI wheels,
whose runtime does not run there. From CUDA 13.0 the Arm toolkit is one for servers and Thor
(11.0), so Thor runs ``linux_aarch64`` wheels of CUDA 13.0 or newer, its driver the one of its
JetPack (branch 580). DGX Spark's GB10 (12.1) is an Arm machine with the server driver: it runs
``linux_aarch64`` wheels only. Whatever a wheel's fatbins hold, a tie decides first.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from farm.model.arch import KNOWN_CUDA_LINES, supported_targets
from farm.model.driver import Device
from farm.model.drivers import release_key

# capability -> (generation, example products). Every capability a CUDA line builds SASS for needs
# an entry (tests/test_devices.py): a GPU shown without a name is a GPU the user cannot find.
_NAMES: dict[tuple[int, int], tuple[str, str]] = {
    (5, 0): ("Maxwell", "GTX 750 Ti, Quadro K2200"),
    (5, 2): ("Maxwell", "GTX 9xx, Tesla M40, M60"),
    (5, 3): ("Maxwell", "Jetson Nano, Jetson TX1"),
    (6, 0): ("Pascal", "Tesla P100"),
    (6, 1): ("Pascal", "GTX 10xx, Tesla P4, P40"),
    (6, 2): ("Pascal", "Jetson TX2"),
    (7, 0): ("Volta", "V100, Titan V"),
    (7, 2): ("Volta", "Jetson AGX Xavier, Xavier NX"),
    (7, 5): ("Turing", "T4, RTX 20xx"),
    (8, 0): ("Ampere", "A100"),
    (8, 6): ("Ampere", "RTX 30xx, A10"),
    (8, 7): ("Ampere", "Jetson Orin"),
    (8, 8): ("Ampere", ""),  # nvcc 13 targets sm_88; no product farm can name
    (8, 9): ("Ada", "RTX 40xx, L4, L40S"),
    (9, 0): ("Hopper", "H100, H200"),
    (10, 0): ("Blackwell", "B200, GB200"),
    (10, 1): ("Blackwell", "Jetson Thor under CUDA 12.8 and 12.9"),
    (10, 3): ("Blackwell Ultra", "B300"),
    (11, 0): ("Blackwell", "Jetson Thor"),
    (12, 0): ("Blackwell", "RTX 50xx, RTX PRO 6000"),
    (12, 1): ("Blackwell", "DGX Spark"),
}


@dataclass(frozen=True)
class PlatformTie:
    """A device that runs only the wheels of one platform, from one CUDA line on."""

    system: str  # "Jetson Orin"
    platform: str | None  # the wheel platform it can run; None: no platform farm builds
    first_cuda: str | None  # the first CUDA line whose wheels of that platform run there
    driver: str  # where its driver comes from, and so how it is upgraded
    why: str  # why the platform (and line) decide
    instead: str  # what runs there when nothing of the farm's does


_JETPACK_DRIVER = "the driver is part of JetPack (Jetson Linux): a newer one comes with a newer JetPack"
_JETPACK_WHY = ("Jetson modules run the CUDA of their JetPack release; farm's linux_aarch64 wheels are built "
                "with the Arm server (SBSA) toolkit, whose runtime does not run there")


def _jetson(system: str) -> PlatformTie:
    return PlatformTie(system, None, None, _JETPACK_DRIVER, _JETPACK_WHY,
                       f"a build made with JetPack's CUDA on the {system} (NVIDIA's Jetson builds of torch and "
                       "of the extension)")


_TIES: dict[tuple[int, int], PlatformTie] = {
    (5, 3): _jetson("Jetson Nano or TX1"),
    (6, 2): _jetson("Jetson TX2"),
    (7, 2): _jetson("Jetson Xavier"),
    (8, 7): _jetson("Jetson Orin"),
    (10, 1): _jetson("Jetson Thor"),
    (11, 0): PlatformTie(
        "Jetson Thor", "linux_aarch64", "13.0",
        "the driver is part of JetPack 7 (branch 580): a newer one comes with a newer JetPack",
        "Thor runs the Arm server toolkit from CUDA 13.0 on; older lines' runtimes do not run there",
        "a linux_aarch64 wheel of CUDA 13.0 or newer with sm_110 SASS (or PTX at or below 11.0)"),
    (12, 1): PlatformTie(
        "DGX Spark", "linux_aarch64", None,
        "DGX OS's driver, an Arm server driver: the minimums of its CUDA line apply",
        "DGX Spark is an Arm (aarch64) machine",
        "a linux_aarch64 wheel with sm_120 or sm_121 SASS (or PTX at or below 12.1)"),
}


@cache
def targetable() -> tuple[Device, ...]:
    """Every capability some CUDA line's nvcc builds SASS for, oldest first."""
    numbers = {n for line in KNOWN_CUDA_LINES for n, variant in supported_targets(line) if variant == ""}
    return tuple(sorted(Device(n // 10, n % 10) for n in numbers))


def lines_for(device: Device) -> tuple[str, ...]:
    """The CUDA lines whose nvcc builds SASS for ``device``."""
    return tuple(line for line in KNOWN_CUDA_LINES if (device.number, "") in supported_targets(line))


def products(device: Device) -> str:
    """Example products of a capability ("" when farm names none)."""
    return _NAMES.get((device.major, device.minor), ("", ""))[1]


def label(device: Device) -> str:
    """``8.6 Ampere (RTX 30xx, A10, A40)``: each name once."""
    gen, names = _NAMES.get((device.major, device.minor), ("", ""))
    text = f"{device} {gen}".rstrip()
    return f"{text} ({names})" if names else text


def tie(device: Device) -> PlatformTie | None:
    return _TIES.get((device.major, device.minor))


def blocked(device: Device, platform: str | None, cuda: str | None) -> str | None:
    """Why no wheel of ``platform`` built with CUDA ``cuda`` runs on ``device`` whatever its
    fatbins hold; None: the fatbins decide. An unknown platform or line (inferred provenance)
    never counts as the one a tie needs."""
    t = tie(device)
    if t is None:
        return None
    if t.platform is None:
        return f"{t.system} ({device}): {t.why}"
    if platform is None or cuda is None:
        return f"{t.system} ({device}) runs {t.platform} wheels only, and the wheel's provenance does not say its own"
    if platform != t.platform:
        return f"{t.system} ({device}) runs {t.platform} wheels only, not {platform}"
    if t.first_cuda and release_key(cuda) < release_key(t.first_cuda):
        return f"{t.system} ({device}) runs wheels of CUDA {t.first_cuda} or newer, not {cuda}: {t.why}"
    return None
