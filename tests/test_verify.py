"""farm.builder.verify: the import check, on real wheels installed by pip into real fresh venvs.

The wheels here are pure Python or hold a file that is not a loadable extension; the import check
of a real CUDA build (demo_ext) is in test_builders.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from farm.builder.verify import ImportCheck, check_wheel, extension_modules, judge, modules_to_import
from farm.errors import ToolError, pip_failure
from farm.model.config import VerifyKnobs
from tests.support.wheelmaker import make_wheel

TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
EXT = f"cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu.so"


def test_what_is_imported_follows_the_recipe() -> None:
    names = ["pkg/__init__.py", f"pkg/_C.{EXT}", f"pkg/ops/_cuda.{EXT}", "pkg.libs/libfoo.so.1",
             f"pkg/core_cc.{EXT}", "pkg-1.0.dist-info/METADATA", "pkg/_native.abi3.so", "pkg/libplain.so"]
    assert extension_modules(names) == ("pkg._C", "pkg._native", "pkg.core_cc", "pkg.ops._cuda")
    knobs = VerifyKnobs(import_name="pkg", extra_imports=("pkg.ops",), no_direct_import=("*core_cc*", "*_cuda.*"))
    assert modules_to_import(names, knobs, "Pkg-Dist") == ("pkg", "pkg.ops", "pkg._C", "pkg._native")
    assert modules_to_import([], VerifyKnobs(), "Demo-Ext") == ("demo_ext",)


def test_a_failure_is_accepted_only_for_the_reason_the_recipe_gives() -> None:
    device = "RuntimeError: CUDA is not available"
    assert not judge("m", device, VerifyKnobs(), driver_present=False).ok
    assert judge("m", device, VerifyKnobs(expect_device_error=True), driver_present=False).ok
    assert judge("m", device, VerifyKnobs(expect_device_error="CUDA is not available"), driver_present=False).ok
    assert not judge("m", device, VerifyKnobs(expect_device_error="no GPU"), driver_present=False).ok
    # a device error is accepted; a missing module is not, whatever the recipe expects of devices
    assert not judge("m", "ModuleNotFoundError: No module named 'einops'", VerifyKnobs(expect_device_error=True),
                     driver_present=False).ok
    libcuda = "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"
    assert judge("m", libcuda, VerifyKnobs(needs_driver=True), driver_present=False).ok
    assert not judge("m", libcuda, VerifyKnobs(needs_driver=True), driver_present=True).ok  # the driver is here
    assert not judge("m", libcuda, VerifyKnobs(), driver_present=False).ok


def test_a_missing_library_is_no_device_error_whatever_the_recipe_expects() -> None:
    """A runtime library the loader cannot find is verify.runtime_libs's, not expect_device_error's,
    even where its name holds "cuda" or the recipe's text."""
    for lib in ("libnvrtc.so.13", "libcudart.so.13"):
        error = f"ImportError: {lib}: cannot open shared object file: No such file or directory"
        for knobs in (VerifyKnobs(expect_device_error=True), VerifyKnobs(expect_device_error=lib),
                      VerifyKnobs(expect_device_error="libnvrtc.so"), VerifyKnobs(needs_driver=True)):
            outcome = judge("pkg.core_cc", error, knobs, driver_present=False)
            assert not outcome.ok, (lib, knobs)
            assert "verify.runtime_libs" in (outcome.hint or "")
    check = ImportCheck(Path("pkg.whl"), "3.11.7", (judge("pkg.core_cc", error, VerifyKnobs(), driver_present=False),))
    assert "FAILED" in check.render()
    assert "is no device error" in check.render()


@pytest.mark.slow  # a venv and a pip install each
def test_a_wheel_that_imports_passes_in_a_fresh_environment(tmp_path) -> None:
    """Installed by pip into a venv that has nothing else; the module is found there, not here."""
    wheel = make_wheel(tmp_path / "in", "goodpkg", "1.0",
                       {"goodpkg/__init__.py": b"import json\nVALUE = 42\n",
                        "goodpkg/sub.py": b"from . import VALUE\n"},
                       tag="py3-none-any")
    check = check_wheel(wheel, VerifyKnobs(extra_imports=("goodpkg.sub",)), dist="goodpkg",
                        interpreter=sys.executable, work=tmp_path / "work")
    assert check.passed, check.render()
    assert [i.module for i in check.imports] == ["goodpkg", "goodpkg.sub"]
    assert not (tmp_path / "work" / "import-check").exists()  # the environment is thrown away


def test_a_wheel_whose_import_fails_fails_the_check_with_the_error(tmp_path) -> None:
    """The package imports a module it does not require; its extension file is no loadable library."""
    wheel = make_wheel(tmp_path / "in", "badpkg", "1.0",
                       {"badpkg/__init__.py": b"import not_a_dependency_of_badpkg\n",
                        f"badpkg/_C.{EXT}": b"not an ELF file"}, tag=f"{TAG}-{TAG}-linux_x86_64")
    check = check_wheel(wheel, VerifyKnobs(), dist="badpkg", interpreter=sys.executable, work=tmp_path / "w")
    assert not check.passed
    failed = {i.module: i.error for i in check.imports if not i.ok}
    assert "No module named 'not_a_dependency_of_badpkg'" in (failed["badpkg"] or "")
    assert set(failed) == {"badpkg", "badpkg._C"}
    assert "FAILED" in check.render()
    # the extension, loaded by the package itself, is not imported on its own when the recipe says so
    check = check_wheel(wheel, VerifyKnobs(no_direct_import=("*_C.*",)), dist="badpkg",
                        interpreter=sys.executable, work=tmp_path / "w")
    assert [i.module for i in check.imports] == ["badpkg"]


@pytest.mark.slow  # a venv and a pip install each
def test_a_submodule_loaded_before_its_package_failed_is_not_counted_as_imported(tmp_path) -> None:
    """The package imports its submodule, then fails: importing the submodule next must meet the
    package's failure again, not the half-loaded module left behind."""
    wheel = make_wheel(tmp_path / "in", "halfpkg", "1.0",
                       {"halfpkg/__init__.py": b"from . import sub\nimport not_a_dependency_of_halfpkg\n",
                        "halfpkg/sub.py": b"VALUE = 1\n"}, tag="py3-none-any")
    check = check_wheel(wheel, VerifyKnobs(extra_imports=("halfpkg.sub",)), dist="halfpkg",
                        interpreter=sys.executable, work=tmp_path / "w")
    assert [(i.module, "not_a_dependency_of_halfpkg" in (i.error or "")) for i in check.imports if not i.ok] == [
        ("halfpkg", True), ("halfpkg.sub", True)]


@pytest.mark.slow  # a venv and a pip install each
def test_a_device_error_the_recipe_expects_passes(tmp_path) -> None:
    wheel = make_wheel(tmp_path / "in", "gpuonly", "1.0",
                       {"gpuonly/__init__.py": b"raise RuntimeError('CUDA is not available on this machine')\n"},
                       tag="py3-none-any")
    knobs = VerifyKnobs(expect_device_error="CUDA is not available")
    check = check_wheel(wheel, knobs, dist="gpuonly", interpreter=sys.executable, work=tmp_path / "w")
    assert check.passed
    assert check.imports[0].accepted


@pytest.mark.slow  # a venv and a pip install each
def test_the_build_environment_is_visible_after_the_wheel(tmp_path) -> None:
    """A torch-linked package sees the build environment's site-packages (torch there), but its
    own files, installed in the fresh environment, come first."""
    shared = tmp_path / "buildenv-site"
    (shared / "fakedep").mkdir(parents=True)
    (shared / "fakedep" / "__init__.py").write_text("WHERE = 'build env'\n")
    (shared / "shadowed").mkdir()
    (shared / "shadowed" / "__init__.py").write_text("raise ImportError('the build env copy was imported')\n")
    wheel = make_wheel(tmp_path / "in", "shadowed", "1.0",
                       {"shadowed/__init__.py": b"import fakedep\nassert fakedep.WHERE == 'build env'\n"},
                       tag="py3-none-any")
    check = check_wheel(wheel, VerifyKnobs(), dist="shadowed", interpreter=sys.executable, work=tmp_path / "w",
                        visible_site=shared)
    assert check.passed, check.render()


@pytest.mark.slow  # a venv and a pip install each
def test_a_requirement_pip_cannot_find_is_an_environment_error(tmp_path, monkeypatch) -> None:
    """The message names the requirement, though pip first prints a warning per configured location
    it ignores (as on a host whose pip.conf names find-links folders that are not there)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # only the wheelhouse: nothing is asked of an index
    monkeypatch.setenv("PIP_FIND_LINKS", " ".join(str(tmp_path / f"gone{i}") for i in range(8)))
    wheel = make_wheel(tmp_path / "in", "needy", "1.0", {"needy/__init__.py": b""}, tag="py3-none-any",
                       requires=("farm-no-such-requirement==0.0.1",))
    with pytest.raises(ToolError, match="cannot install needy") as err:
        check_wheel(wheel, VerifyKnobs(), dist="needy", interpreter=sys.executable, work=tmp_path / "w",
                    find_links=[tmp_path / "in"])
    assert "farm-no-such-requirement" in str(err.value)
    assert "gone0" not in str(err.value)


def test_pip_failure_keeps_what_pip_calls_an_error() -> None:
    out = ("WARNING: Location 'file:///x/' is ignored: it is neither a file nor a directory.\n" * 20
           + "ERROR: Could not find a version that satisfies the requirement cumesh==0.0.1\n"
           + "ERROR: No matching distribution found for cumesh==0.0.1\n")
    assert pip_failure(out) == ("ERROR: Could not find a version that satisfies the requirement cumesh==0.0.1 / "
                                "ERROR: No matching distribution found for cumesh==0.0.1")
    assert pip_failure("WARNING: only a warning\n") == "WARNING: only a warning"
    assert pip_failure("x" * 5000).endswith("(4,400 more characters)")


def test_a_missing_interpreter_is_an_environment_error(tmp_path) -> None:
    wheel = make_wheel(tmp_path / "in", "goodpkg", "1.0", {"goodpkg/__init__.py": b""}, tag="py3-none-any")
    with pytest.raises(ToolError, match="cannot run the interpreter"):
        check_wheel(wheel, VerifyKnobs(), dist="goodpkg", interpreter=Path(tmp_path / "python9.9"),
                    work=tmp_path / "w")


_RUNTIME_EXT = """
#include <Python.h>
int nvrtcVersion(int *major, int *minor);  /* nvrtc.h's, an nvrtcResult (an enum) returned */
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_rt", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__rt(void) {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != 0) {  /* answers without a GPU or a driver */
        PyErr_SetString(PyExc_RuntimeError, "nvrtcVersion failed");
        return NULL;
    }
    PyObject *m = PyModule_Create(&def);
    if (m) PyModule_AddIntConstant(m, "nvrtc_major", major);
    return m;
}
"""


@pytest.mark.slow  # pip downloads NVIDIA's nvrtc wheel (about 90 MB) and installs it into a fresh venv
def test_a_runtime_library_named_in_runtime_libs_is_installed_for_the_check(tmp_path) -> None:
    """An extension linked against NVRTC (libnvrtc.so.13, as cumm's core_cc is), built with the
    host compiler against the library from the line's pinned nvidia-cuda-nvrtc wheel: in a fresh
    environment its import fails on the missing library, which expect_device_error does not
    excuse; with the same wheel installed beside it by pip (runtime_libs), it imports."""
    import sysconfig
    import zipfile

    from farm.load.recipes import load_config
    from farm.toolkit.request import runtime_wheels
    from tests.support.buildroot import REPO

    toolkit = load_config(REPO).defaults.toolkit
    wheels = runtime_wheels(toolkit, "13.0", ("cuda_nvrtc",), where="test")
    assert wheels == (f"nvidia-cuda-nvrtc=={toolkit.lines['13.0'].pypi['cuda_nvrtc']}",)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                    "-d", str(tmp_path / "dl"), *wheels], check=True)
    (nvrtc_wheel,) = (tmp_path / "dl").glob("*.whl")
    lib = tmp_path / "link" / "libnvrtc.so.13"
    lib.parent.mkdir()
    lib.write_bytes(zipfile.ZipFile(nvrtc_wheel).read("nvidia/cu13/lib/libnvrtc.so.13"))
    src = tmp_path / "rt.c"
    src.write_text(_RUNTIME_EXT)
    ext = tmp_path / f"_rt.{EXT}"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(ext), str(src), f"-I{sysconfig.get_paths()['include']}",
                    f"-L{lib.parent}", "-l:libnvrtc.so.13"], check=True)
    wheel = make_wheel(tmp_path / "in", "rtpkg", "1.0", {"rtpkg/__init__.py": b"", f"rtpkg/_rt.{EXT}": ext},
                       tag=f"{TAG}-{TAG}-linux_x86_64")

    bare = check_wheel(wheel, VerifyKnobs(expect_device_error=True), dist="rtpkg", interpreter=sys.executable,
                       work=tmp_path / "w")
    (failed,) = [i for i in bare.imports if not i.ok]
    assert failed.module == "rtpkg._rt"
    assert "libnvrtc.so.13: cannot open shared object file" in (failed.error or "")
    assert "verify.runtime_libs" in (failed.hint or "")

    check = check_wheel(wheel, VerifyKnobs(runtime_libs=("cuda_nvrtc",)), dist="rtpkg", interpreter=sys.executable,
                        work=tmp_path / "w", runtime=wheels)
    assert check.passed, check.render()
    assert [(i.module, i.error) for i in check.imports] == [("rtpkg", None), ("rtpkg._rt", None)]
