"""What the lint counts as compiled: build files, translation units, the include graph."""

from __future__ import annotations

import textwrap
from pathlib import Path

from farm.lint.compiled import BuildScope, TreeIndex, build_scope, resolve_include

KERNEL = "__global__ void k(float* x) { x[0] = 1.0f; }\n"


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def scope_of(root: Path, subdir: str | None = None) -> BuildScope:
    return build_scope(TreeIndex(root), subdir)


def test_setup_py_globs_paths_and_rocm_branches(tmp_path) -> None:
    root = write(tmp_path, {
        "setup.py": """
            import glob, os
            from torch.utils.cpp_extension import CUDAExtension
            IS_ROCM = False
            srcs = glob.glob("csrc/*.cu") + [os.path.join("csrc", "extra", "joined.cpp")]
            if IS_ROCM:
                srcs = ["csrc/hip/only_rocm.cu"]
            elif not IS_ROCM:
                srcs += ["csrc/cuda_only.cu"]
            ext = CUDAExtension("x._C", srcs)
            """,
        "csrc/a.cu": KERNEL, "csrc/b.cu": KERNEL, "csrc/extra/joined.cpp": "int f();\n",
        "csrc/hip/only_rocm.cu": KERNEL, "csrc/cuda_only.cu": KERNEL,
        "tests/test_a.cu": KERNEL,
    })
    scope = scope_of(root)
    assert set(scope.seeds) == {"csrc/a.cu", "csrc/b.cu", "csrc/extra/joined.cpp", "csrc/cuda_only.cu"}
    assert scope.build_files == ("setup.py",)


def test_bare_glob_applies_to_directories_the_build_names(tmp_path) -> None:
    root = write(tmp_path, {
        "setup.py": 'import glob, os\nsrc = glob.glob(os.path.join("kernels", "*.cu"))\n',
        "kernels/a.cu": KERNEL, "other/b.cu": KERNEL,
    })
    assert scope_of(root).seeds == ("kernels/a.cu",)


def test_setup_helper_modules_are_build_files(tmp_path) -> None:
    root = write(tmp_path, {
        "setup.py": "from build_utils import sources\n",
        "build_utils.py": 'def sources():\n    return ["csrc/k.cu"]\n',
        "csrc/k.cu": KERNEL,
    })
    scope = scope_of(root)
    assert scope.build_files == ("setup.py", "build_utils.py")
    assert scope.seeds == ("csrc/k.cu",)


def test_cmake_subdirectories_globs_and_vendored_libraries(tmp_path) -> None:
    root = write(tmp_path, {
        "CMakeLists.txt": """
            project(p LANGUAGES CUDA)
            include(cmake/arch.cmake)
            add_subdirectory(src)
            add_subdirectory(third_party/lib)  # a vendored library: its build is not the package's
            """,
        "cmake/arch.cmake": "set(FOO 1)\n",
        "src/CMakeLists.txt": 'file(GLOB KSRC "${CMAKE_CURRENT_SOURCE_DIR}/kernels/*.cu")\nadd_library(k ${KSRC} main.cpp)\n',
        "src/kernels/a.cu": KERNEL, "src/main.cpp": "int main() {}\n",
        "third_party/lib/CMakeLists.txt": "add_executable(t test/t.cu)\n", "third_party/lib/LICENSE": "MIT\n",
        "third_party/lib/test/t.cu": KERNEL,
    })
    scope = scope_of(root)
    assert set(scope.build_files) == {"CMakeLists.txt", "cmake/arch.cmake", "src/CMakeLists.txt"}
    assert set(scope.seeds) == {"src/kernels/a.cu", "src/main.cpp"}
    assert scope.vendored == ("third_party/lib",)


def test_makefile_wildcards(tmp_path) -> None:
    root = write(tmp_path, {"Makefile": "SRC := $(wildcard src/*.cu) main.cu\n", "src/a.cu": KERNEL, "main.cu": KERNEL})
    assert set(scope_of(root).seeds) == {"src/a.cu", "main.cu"}


def test_fallback_when_no_build_file_names_sources(tmp_path) -> None:
    root = write(tmp_path, {
        "pyproject.toml": "[project]\nname = 'jit'\n",
        "jit/csrc/k.cu": KERNEL, "examples/e.cu": KERNEL, "benchmarks/b.cu": KERNEL,
        "vendor/lib/include/lib/x.h": "", "vendor/lib/tests/t.cu": KERNEL,
    })
    scope = scope_of(root)
    assert scope.seeds == ("jit/csrc/k.cu",)
    assert "no build file" in scope.how
    assert scope.vendored == ("vendor/lib",)  # include/ beside its own tests: a project of its own


def test_include_graph_and_resolution(tmp_path) -> None:
    root = write(tmp_path, {
        "setup.py": 'srcs = ["csrc/k.cu"]\n',
        "csrc/k.cu": '#include "local.h"\n#include <lib/api.h>\n#include <vector>\n' + KERNEL,
        "csrc/local.h": '#include "utils.h"\n',
        "csrc/utils.h": "",
        "third/lib/include/lib/api.h": "",
        "third/lib/tools/utils.h": "",
        "csrc/unused.h": "",
    })
    scope = scope_of(root)
    assert scope.compiled == {"csrc/k.cu", "csrc/local.h", "csrc/utils.h", "third/lib/include/lib/api.h"}
    index = TreeIndex(root)
    # An ambiguous name resolves to the candidates closest to the including file.
    assert resolve_include(index, "csrc/sub/x.cu", "utils.h") == ["csrc/utils.h"]


def test_build_subdir_is_the_build_root(tmp_path) -> None:
    root = write(tmp_path, {
        "setup.py": 'srcs = ["top.cu"]\n', "top.cu": KERNEL,
        "python/setup.py": 'srcs = ["csrc/k.cu"]\n', "python/csrc/k.cu": KERNEL,
    })
    scope = scope_of(root, "python")
    assert scope.build_files == ("python/setup.py",)
    assert scope.seeds == ("python/csrc/k.cu",)


def test_paths_joined_from_constants_are_followed(tmp_path) -> None:
    # gsplat's setup.py: the sources are globbed under a directory assembled with os.path.join.
    root = write(tmp_path, {
        "setup.py": """
            import glob
            import os.path as osp
            import pathlib
            def get_extensions():
                extensions_dir = osp.join("pkg", "cuda")
                sources = glob.glob(osp.join(extensions_dir, "csrc", "*.cu"))
                sources += [osp.join(extensions_dir, "ext.cpp")]
                current_dir = pathlib.Path(__file__).parent.resolve()
                include_dirs = [osp.join(current_dir, "pkg", "cuda", "include")]
                return sources, include_dirs
            """,
        "pkg/cuda/csrc/a.cu": KERNEL, "pkg/cuda/csrc/b.cu": KERNEL, "pkg/cuda/ext.cpp": "int f();\n",
        "pkg/cuda/include/h.cuh": "", "pkg/other/c.cu": KERNEL,
    })
    assert set(scope_of(root).seeds) == {"pkg/cuda/csrc/a.cu", "pkg/cuda/csrc/b.cu", "pkg/cuda/ext.cpp"}


def test_cmake_project_in_a_directory_setup_py_names(tmp_path) -> None:
    root = write(tmp_path, {
        "setup.py": 'import subprocess\nsubprocess.check_call(["cmake", "csrc"])\n',
        "csrc/CMakeLists.txt": "file(GLOB S ./src/*.cu)\nadd_library(x ${S})\n",
        "csrc/src/k.cu": KERNEL,
        "other/CMakeLists.txt": "add_library(y y.cu)\n", "other/y.cu": KERNEL,
    })
    scope = scope_of(root)
    assert scope.build_files == ("setup.py", "csrc/CMakeLists.txt")
    assert scope.seeds == ("csrc/src/k.cu",)
    # Without cmake in the Python build, a named directory's CMakeLists.txt is not part of it.
    (root / "setup.py").write_text('srcs = ["csrc/src/k.cu"]\n')
    assert scope_of(root).build_files == ("setup.py",)


def test_vendored_by_convention_or_by_include_and_licence(tmp_path) -> None:
    root = write(tmp_path, {
        "setup.py": 'srcs = ["csrc/k.cu"]\n', "csrc/k.cu": KERNEL,
        "csrc/cutlass/include/cutlass/c.h": "", "csrc/cutlass/LICENSE.txt": "BSD\n",  # sdist: no build file
        "third_party/glm/glm/glm.hpp": "",  # nothing but a conventional parent
    })
    assert scope_of(root).vendored == ("csrc/cutlass", "third_party/glm")
