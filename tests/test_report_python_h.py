"""benchmarks/report_python_h.py: which units reach Python.h, through the tree's own headers,
read from a folder and from a git repository's HEAD."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.support.buildroot import REPO

_spec = importlib.util.spec_from_file_location("report_python_h", REPO / "benchmarks" / "report_python_h.py")
assert _spec is not None
assert _spec.loader is not None
report = importlib.util.module_from_spec(_spec)
sys.modules["report_python_h"] = report  # its dataclasses look their module up
_spec.loader.exec_module(report)

FILES = {
    "csrc/kernels/fwd.cu": '#include "../common/kernel.cuh"\n',  # c10/ATen only: shared across Pythons
    "csrc/common/kernel.cuh": "#include <ATen/ATen.h>\n#include <c10/cuda/CUDAStream.h>\n",
    "csrc/api.cu": '#include "bind.h"\n',  # reaches torch/extension.h through a header of the tree
    "include/bind.h": "#pragma once\n#  include <torch/extension.h>\n",
    "csrc/module.cpp": "#include <pybind11/pybind11.h>\n",
    "tests/t.cu": "#include <torch/extension.h>\n",  # never compiled into the package
}


def _tree(root: Path) -> Path:
    for path, text in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_units_reaching_python_h_through_the_trees_headers(tmp_path) -> None:
    tree = report.read_tree(_tree(tmp_path / "pkg"))
    assert report.python_units(tree) == {"csrc/api.cu": True, "csrc/kernels/fwd.cu": False, "csrc/module.cpp": True}
    row = report.summary(tree)
    assert (row["cu_units"], row["cu_python"], row["cu_shared_fraction"]) == (2, 1, 0.5)
    assert "50.0%" in report.render([row], 6)
    assert "41.7%" in report.render([row], 6)


def test_a_git_repository_is_read_at_its_head(tmp_path) -> None:
    root = _tree(tmp_path / "repo")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (root / "csrc" / "kernels" / "fwd.cu").write_text("#include <Python.h>\n")  # not committed: not read
    assert report.python_units(report.read_tree(root))["csrc/kernels/fwd.cu"] is False
