"""farm's own patch scripts (packages/patches/): each changes exactly what it says on a setup.py
shaped like the upstream one, is idempotent, and refuses a setup.py it no longer recognises."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PATCHES = Path(__file__).resolve().parent.parent / "packages" / "patches"

FUSED_SSIM = textwrap.dedent("""\
    import torch
    fallback_archs = [
        "-gencode=arch=compute_75,code=sm_75",
        "-gencode=arch=compute_89,code=sm_89",
    ]
    nvcc_args = ["-O3"]
    if torch.cuda.is_available():
        nvcc_args.append("-arch=sm_90")
    else:
        nvcc_args.extend(fallback_archs)
    """)

SAGEATTN3 = textwrap.dedent("""\
    import os
    import torch
    if True:
        cc_flag = []
        cc_major, cc_minor = torch.cuda.get_device_capability()
        if (cc_major, cc_minor) == (10, 0):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_100a,code=sm_100a")
        else:
            raise RuntimeError("Unsupported GPU")
        FLAGS = cc_flag
    """)

RASTERIZER = textwrap.dedent("""\
    NAME = dict(
        version="0.1",
        name="custom_rasterizer",
    )["name"]
    """)

MMCV = textwrap.dedent("""\
    import os
    NAME = dict(
        name='mmcv' if os.getenv('MMCV_WITH_OPS', '0') == '0' else 'mmcv-full',
    )["name"]
    """)


def run(script: str, folder: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PATCHES / script)], cwd=folder, capture_output=True, text=True,
                          check=False, env=env)


def evaluate(folder: Path, env: dict[str, str], name: str) -> object:
    """Run the patched setup.py's module body with a stand-in torch; return one of its globals."""
    code = (folder / "setup.py").read_text()
    ast.parse(code)
    torch = type(sys)("torch")
    torch.cuda = type(sys)("torch.cuda")  # type: ignore[attr-defined]  # a probe would fail loudly: the patch must not reach it
    namespace: dict[str, object] = {}
    saved = sys.modules.get("torch")
    sys.modules["torch"] = torch
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            exec(compile(code, "setup.py", "exec"), namespace)  # noqa: S102 (runs the patched setup.py as pip would)
    finally:
        if saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = saved
    return namespace[name]


@pytest.mark.parametrize(("script", "text", "env", "name", "expected"), [
    ("fused_ssim.py", FUSED_SSIM, {}, "nvcc_args", ["-O3"]),
    ("sageattn3.py", SAGEATTN3, {"TORCH_CUDA_ARCH_LIST": "10.0a;12.0a"}, "FLAGS",
     ["-gencode", "arch=compute_100a,code=sm_100a", "-gencode", "arch=compute_120a,code=sm_120a"]),
    ("mmcv.py", MMCV, {"MMCV_WITH_OPS": "1"}, "NAME", "mmcv"),
    ("custom_rasterizer_hy3d2.py", RASTERIZER, {}, "NAME", "custom_rasterizer_hy3d2"),
])
def test_patch_applies_once_and_does_what_it_says(
    tmp_path: Path, script: str, text: str, env: dict[str, str], name: str, expected: object
) -> None:
    (tmp_path / "setup.py").write_text(text)
    first = run(script, tmp_path)
    assert first.returncode == 0, first.stderr
    patched = (tmp_path / "setup.py").read_text()
    assert patched != text
    second = run(script, tmp_path)
    assert second.returncode == 0
    assert "already patched" in second.stdout
    assert (tmp_path / "setup.py").read_text() == patched
    assert evaluate(tmp_path, env, name) == expected


def test_sageattn3_without_a_blackwell_arch_still_refuses(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(SAGEATTN3)
    assert run("sageattn3.py", tmp_path).returncode == 0
    with pytest.raises(RuntimeError, match="Unsupported GPU"):
        evaluate(tmp_path, {"TORCH_CUDA_ARCH_LIST": "9.0"}, "FLAGS")


@pytest.mark.parametrize("script", ["fused_ssim.py", "sageattn3.py", "mmcv.py", "custom_rasterizer_hy3d2.py"])
def test_patch_refuses_a_setup_py_it_does_not_recognise(tmp_path: Path, script: str) -> None:
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='other')\n")
    proc = run(script, tmp_path)
    assert proc.returncode != 0
    assert "review the patch" in proc.stderr
    assert (tmp_path / "setup.py").read_text() == "from setuptools import setup\nsetup(name='other')\n"


def test_torchsparse_dispatch_arguments_use_scalar_type(tmp_path: Path) -> None:
    kernel = tmp_path / "torchsparse" / "backend" / "voxelize" / "voxelize_cuda.cu"
    kernel.parent.mkdir(parents=True)
    source = ('AT_DISPATCH_FLOATING_TYPES_AND_HALF(\n    inputs.type(), "voxelize_forward_cuda", ([&] {}));\n'
              "bool cuda = inputs.type().is_cuda();\n")
    kernel.write_text(source)
    assert run("torchsparse.py", tmp_path).returncode == 0
    patched = kernel.read_text()
    assert 'inputs.scalar_type(), "voxelize_forward_cuda"' in patched
    assert "inputs.type().is_cuda()" in patched  # only the dispatch position is rewritten
    again = run("torchsparse.py", tmp_path)
    assert again.returncode == 0
    assert "already patched" in again.stdout
    assert kernel.read_text() == patched
    kernel.write_text("int x;\n")
    assert run("torchsparse.py", tmp_path).returncode != 0
