"""farm.builder.msvc: the MSVC side of a win_amd64 cell (pure), and its table of the Visual Studio
versions each CUDA line's nvcc accepts checked against a real toolkit's crt/host_config.h."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from farm.builder.builders import developer_environment
from farm.builder.msvc import DEFAULT_TOOLSET, MSC_VER_CEILING, Toolset, msvc_setup, parse_set_output
from farm.errors import ToolError, UsageError


def test_a_toolset_is_its_msc_ver() -> None:
    assert DEFAULT_TOOLSET.msc_ver == 1944
    assert Toolset("14.50").msc_ver == 1950
    assert Toolset("14.29").msc_ver == 1929


@pytest.mark.parametrize("cuda", sorted(MSC_VER_CEILING))
def test_every_line_knows_the_default_toolset(cuda: str) -> None:
    setup = msvc_setup(cuda, "2.9.1")
    assert setup.nvcc_flags == ()
    assert setup.environment == (("DISTUTILS_USE_SDK", "1"),)


@pytest.mark.parametrize(("cuda", "flagged"), [("12.4", True), ("12.8", True), ("13.0", True), ("13.2", False)])
def test_a_toolset_the_line_does_not_know_gets_allow_unsupported_compiler(cuda: str, flagged: bool) -> None:
    """Visual Studio 2026's MSVC 14.50 (_MSC_VER 1950): only CUDA 13.2's host_config.h accepts it."""
    setup = msvc_setup(cuda, "2.9.1", Toolset("14.50"))
    assert setup.nvcc_flags == (("-allow-unsupported-compiler",) if flagged else ())
    assert ("does not know it" in setup.render()[0]) is flagged


@pytest.mark.parametrize(("torch", "std"), [("2.12.1", "c++17"), ("2.13.0", "c++20"), ("2.14.1", "c++20"),
                                            (None, "c++17")])
def test_torchs_cxx_standard(torch: str | None, std: str) -> None:
    assert msvc_setup("13.0", torch).cxx_std == std


def test_an_unknown_line_is_refused() -> None:
    with pytest.raises(UsageError, match="CUDA 11.8: farm does not know"):
        msvc_setup("11.8", None)


def test_the_developer_environment_is_read_from_set() -> None:
    out = ("**********************************************************************\n"
           "** Visual Studio 2022 Developer Command Prompt v17.14.0\n"
           "[vcvarsall.bat] Environment initialized for: 'x64'\n"
           "INCLUDE=C:\\VS\\include;C:\\Kits\\10\\include\n"
           "VSCMD_ARG_TGT_ARCH=x64\n"
           "WEIRD=a=b\n")
    assert parse_set_output(out) == {"INCLUDE": "C:\\VS\\include;C:\\Kits\\10\\include", "VSCMD_ARG_TGT_ARCH": "x64",
                                     "WEIRD": "a=b"}


def test_the_ceiling_is_the_toolkits_own(cuda_home: Path) -> None:
    """The toolkit the suite builds with: its nvcc's line and its host_config.h's MSVC check."""
    release = subprocess.run([str(cuda_home / "bin" / "nvcc"), "--version"], capture_output=True, text=True,
                             check=True).stdout
    line = re.search(r"release (\d+\.\d+)", release)
    assert line is not None
    text = (cuda_home / "include" / "crt" / "host_config.h").read_text()
    check = re.search(r"_MSC_VER < (\d+) \|\| _MSC_VER >= (\d+)", text)
    assert check is not None
    assert MSC_VER_CEILING[line[1]] == int(check[2])


@pytest.mark.skipif(sys.platform == "win32", reason="the Linux host's answer")
def test_the_developer_environment_needs_a_windows_host() -> None:
    """A win_amd64 cell is planned anywhere, built only where Visual Studio runs: exit 3, saying so."""
    with pytest.raises(ToolError, match="built on a Windows host with Visual Studio") as err:
        developer_environment(msvc_setup("13.0", "2.14.1"))
    assert err.value.exit_code == 3
    assert "farm build --plan" in str(err.value)
