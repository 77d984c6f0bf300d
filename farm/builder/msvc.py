"""The MSVC side of a win_amd64 cell: which Visual C++ toolset builds it, how the build gets the
Visual Studio developer environment, and what nvcc and cl are told because of it (pure).

cibuildwheel runs a Windows build on the host and does not set up Visual Studio itself; torch's
``BuildExtension`` finds ``cl.exe`` on ``PATH`` once the developer environment is active, and with
``DISTUTILS_USE_SDK=1`` setuptools takes that environment as it is instead of looking for Visual
Studio a second time (torch refuses an active environment without it). So the builder runs
``vcvarsall.bat x64 -vcvars_ver=TOOLSET`` of the Visual Studio that ``vswhere`` finds, keeps the
environment it leaves (``set``), and starts cibuildwheel in it.

nvcc refuses a host compiler newer than its ``crt/host_config.h`` knows (``#error -- unsupported
Microsoft Visual Studio version!``) unless it is given ``-allow-unsupported-compiler``: the flag is
added exactly where the cell's CUDA line does not know the toolset.
"""

from __future__ import annotations

from dataclasses import dataclass

from farm.errors import UsageError

# The first _MSC_VER each CUDA line's crt/host_config.h refuses (`_MSC_VER < LOW || _MSC_VER >= HIGH`),
# read from NVIDIA's nvcc of the line farm pins: 12.4.131, 12.6.85, 12.8.93, 12.9.86, 13.0.88, 13.2.86.
MSC_VER_CEILING: dict[str, int] = {
    "12.4": 1950, "12.6": 1950, "12.8": 1950, "12.9": 1950, "13.0": 1950, "13.2": 1960,
}


@dataclass(frozen=True)
class Toolset:
    """A Visual C++ toolset: ``14.44`` (Visual Studio 2022 17.14) is cl 19.44, ``_MSC_VER`` 1944."""

    version: str  # as vcvarsall's -vcvars_ver takes it: "14.44"

    @property
    def msc_ver(self) -> int:
        major, minor = self.version.split(".")
        return 1900 + int(minor) if major == "14" else int(major) * 100 + int(minor)


# The toolset of the Windows runners' Visual Studio 2022 (17.14); every CUDA line of the grid knows it.
# `build.msvc_toolset` (_defaults.yml or a recipe) names another.
DEFAULT_TOOLSET = Toolset("14.44")

# The C++ standard torch's BuildExtension compiles with (cl /std:c++NN, nvcc -std=c++NN) where the
# package passes none: C++20 from torch 2.13 (its headers need it under MSVC), C++17 before.
CXX20_FROM_TORCH = (2, 13)


# Where the Visual Studio with the C++ x64 tools is installed (cmd.exe; its answer becomes %VS%).
VSWHERE = ('"%ProgramFiles(x86)%\\Microsoft Visual Studio\\Installer\\vswhere.exe" -latest -products * '
           '-requires Microsoft.VisualStudio.Component.VC.Tools.x86.x64 -property installationPath')


@dataclass(frozen=True)
class MsvcSetup:
    """What a win_amd64 cell's build gets from the MSVC side, shown by ``farm build --plan``."""

    toolset: Toolset
    cuda: str
    msc_ceiling: int  # the first _MSC_VER the CUDA line refuses
    cxx_std: str  # "c++17" | "c++20": torch's default for the cell
    nvcc_flags: tuple[str, ...]  # added to NVCC_APPEND_FLAGS
    environment: tuple[tuple[str, str], ...]  # added to the build's environment

    @property
    def vcvars(self) -> str:
        """The step that makes the developer environment (cmd.exe; %VS% is vswhere's installationPath)."""
        return f'call "%VS%\\VC\\Auxiliary\\Build\\vcvarsall.bat" x64 -vcvars_ver={self.toolset.version} && set'

    def to_json(self) -> dict[str, object]:
        return {"toolset": self.toolset.version, "msc_ver": self.toolset.msc_ver, "cuda": self.cuda,
                "msc_ceiling": self.msc_ceiling, "cxx_std": self.cxx_std,
                "cl_std_flag": f"/std:{self.cxx_std}", "nvcc_std_flag": f"-std={self.cxx_std}",
                "nvcc_flags": list(self.nvcc_flags), "environment": dict(self.environment),
                "vswhere": VSWHERE, "vcvars": self.vcvars}

    def render(self) -> list[str]:
        """The plan's lines for a maintainer."""
        supported = "knows it" if not self.nvcc_flags else "does not know it: -allow-unsupported-compiler"
        return [(f"MSVC toolset {self.toolset.version} (_MSC_VER {self.toolset.msc_ver}); CUDA {self.cuda}'s "
                 f"host_config.h accepts _MSC_VER < {self.msc_ceiling}: {supported}"),
                f"developer environment: {VSWHERE}",
                f"  then: {self.vcvars}",
                f"C++ standard (torch's default for the cell): /std:{self.cxx_std} (cl), -std={self.cxx_std} (nvcc)",
                *(f"env {k}={v}" for k, v in self.environment)]


def msvc_setup(cuda: str, torch_version: str | None, toolset: Toolset = DEFAULT_TOOLSET) -> MsvcSetup:
    """The MSVC side of a win_amd64 cell of CUDA line ``cuda`` and torch ``torch_version`` (full, or None)."""
    ceiling = MSC_VER_CEILING.get(cuda)
    if ceiling is None:
        raise UsageError(f"CUDA {cuda}: farm does not know which Visual Studio versions its nvcc accepts",
                         hint="add the line's host_config.h limit to MSC_VER_CEILING in farm/builder/msvc.py")
    torch = tuple(int(p) for p in torch_version.split(".")[:2]) if torch_version else None
    std = "c++20" if torch is not None and torch >= CXX20_FROM_TORCH else "c++17"
    flags = ("-allow-unsupported-compiler",) if toolset.msc_ver >= ceiling else ()
    return MsvcSetup(toolset=toolset, cuda=cuda, msc_ceiling=ceiling, cxx_std=std, nvcc_flags=flags,
                     environment=(("DISTUTILS_USE_SDK", "1"),))


def parse_set_output(text: str) -> dict[str, str]:
    """The environment ``cmd /c "... && set"`` printed: ``NAME=value`` lines (vcvarsall's own
    banner lines, without ``=``, are skipped; a value may hold ``=``)."""
    env = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name and not name.startswith(("*", " ", "[")):
            env[name] = value
    return env
