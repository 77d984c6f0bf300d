"""Recipe wheels built by farm, run on a real NVIDIA GPU: each package's kernels against a
plain-torch reference computed on the CPU, and the loaded extension shown to hold machine code
(SASS) for the GPU it ran on.

Point ``FARM_GPU_WHEELHOUSE`` at a folder of wheels from ``farm build`` (one cell: the cell's
torch and Python must be this interpreter's); each test installs its package's wheel with pip
(``--no-deps --target``, torch is the interpreter's own) and runs the kernels in a child process,
with ``CUDA_DISABLE_PTX_JIT=1`` and ``CUDA_CACHE_DISABLE=1``: the driver neither compiles PTX nor
reuses an earlier compile (the first alone still takes a cached one; measured on an H200, where a
PTX-only kernel then fails with cudaErrorJitCompilationDisabled), so a kernel that launches ran
from a cubin. Which cubin is shown from the binary: the
extension's ``.so`` is read with both of farm's readers, every translation unit must give the
device an SASS image (farm's driver model: the driver loads a unit's cubin for its own arch before
any PTX), and ``cuobjdump -sass`` must show the kernels that ran compiled for the device's arch.

Skipped, with the reason, without torch, a CUDA device or ``FARM_GPU_WHEELHOUSE``; a package
whose wheel the folder lacks is skipped on its own. ``-s`` prints the errors measured::

    FARM_GPU_WHEELHOUSE=wheelhouse pytest tests/test_recipe_gpu.py -s
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

from farm.binary.cuobjdump import find_cuobjdump
from farm.binary.inspection import Reader, inspect_file
from farm.model.driver import Device, ImageKind, pick_worst
from farm.model.label import parse_local_label

pytestmark = pytest.mark.slow  # pip installs and GPU kernels

WHEELHOUSE_ENV = "FARM_GPU_WHEELHOUSE"

torch = pytest.importorskip("torch")
F = pytest.importorskip("torch.nn.functional")


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    given = os.environ.get(WHEELHOUSE_ENV)
    if not given:
        pytest.skip(f"{WHEELHOUSE_ENV} is not set (a folder of farm-built wheels for this interpreter)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here (torch.cuda.is_available() is False)")
    path = Path(given)
    if not path.is_dir():
        pytest.fail(f"{WHEELHOUSE_ENV}={given}: no such folder")
    return path


@pytest.fixture(scope="module")
def device() -> Device:
    major, minor = torch.cuda.get_device_capability(0)
    return Device(major, minor)


def _wheel_for(wheelhouse: Path, dist: str) -> Path:
    """The folder's wheel of ``dist`` that this interpreter installs; skip when there is none,
    fail when it names another torch (its extension would not load against this one)."""
    tags = set(sys_tags())
    for wheel in sorted(wheelhouse.glob("*.whl")):
        name, version, _build, wheel_tags = parse_wheel_filename(wheel.name)
        if name != dist.replace("_", "-") or not tags & wheel_tags:
            continue
        label = parse_local_label(version.local)
        running = ".".join(torch.__version__.split("+")[0].split(".")[:2])
        if label is None or label.torch != running:
            pytest.fail(f"{wheel}: built for torch {label.torch if label else '?'}, this interpreter has "
                        f"torch {torch.__version__}: point {WHEELHOUSE_ENV} at the wheels of this torch's cell")
        return wheel
    pytest.skip(f"{wheelhouse} holds no {dist} wheel for this interpreter")


def _run_kernels(wheelhouse: Path, dist: str, work: Path, script: str, inputs: dict[str, Any],
                 needs: tuple[str, ...] = ()) -> dict[str, Any]:
    """Install ``dist``'s wheel (and those of the farm packages it ``needs``) under ``work`` and run
    ``script`` there on ``inputs`` (CPU tensors, moved to the GPU by the script); the script's
    ``out`` dict comes back, on the CPU."""
    wheel = _wheel_for(wheelhouse, dist)
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile",
                    "--target", str(site), str(wheel), *(str(_wheel_for(wheelhouse, n)) for n in needs)],
                   check=True, capture_output=True, text=True)
    torch.save(inputs, work / "in.pt")
    program = "import sys, torch\ninp = torch.load(sys.argv[1])\nout = {}\n" + textwrap.dedent(script) + (
        "\ntorch.cuda.synchronize()\ntorch.save(out, sys.argv[2])\n")
    # asks the driver for no JIT of PTX, and no JIT result from its cache standing in for one
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
               CUDA_DISABLE_PTX_JIT="1", CUDA_CACHE_DISABLE="1")
    done = subprocess.run([sys.executable, "-c", program, str(work / "in.pt"), str(work / "out.pt")],
                          capture_output=True, text=True, env=env, cwd=work, timeout=600, check=False)
    assert done.returncode == 0, f"{wheel.name}: the kernels failed on the GPU:\n{done.stdout}\n{done.stderr}"
    out: dict[str, Any] = torch.load(work / "out.pt")
    return out


def _assert_sass(so: str, device: Device, kernels: list[str]) -> None:
    """Every TU of ``so`` gives ``device`` an SASS image (both readers agreeing on what is there),
    and cuobjdump's disassembly for the device's arch holds each kernel in ``kernels``."""
    inspection = inspect_file(so, Reader.BOTH)
    assert inspection.agrees, f"{so}: the readers disagree: {inspection.disagreement}"
    worst = pick_worst(inspection.units, device)
    assert worst.kind is ImageKind.SASS, f"{so}: {worst.describe()} (found {inspection.found})"
    assert worst.target is not None, worst.describe()
    assert worst.target.number == device.number, worst.describe()
    arch = f"sm_{device.number}"
    sass = subprocess.run([str(find_cuobjdump()), "-sass", "-arch", arch, so], capture_output=True, text=True,
                          check=True, timeout=300).stdout
    functions = [line for line in sass.splitlines() if line.strip().startswith("Function :")]
    for kernel in kernels:
        assert any(kernel in f for f in functions), f"{so}: no {arch} SASS for {kernel}"
    print(f"{Path(so).name}: every TU's image for {device} is {worst.target}; {arch} SASS of "
          f"{len(functions)} functions, {', '.join(kernels)} among them; found {inspection.found}")


def _report(what: str, error: float, bound: float) -> None:
    print(f"{what}: max abs error {error:.3g} (bound {bound:g})")
    assert error <= bound, f"{what}: max abs error {error} over {bound}"


def _max_err(got: Any, want: Any) -> float:
    return float((got.double() - want.double()).abs().max())


# fused_ssim ---------------------------------------------------------------------------------

C1, C2 = 0.01 ** 2, 0.03 ** 2


def _ssim_map(x: Any, y: Any) -> Any:
    """SSIM with an 11x11 Gaussian window (sigma 1.5), zero padding: the definition fused_ssim implements."""
    taps = torch.exp(-((torch.arange(11, dtype=x.dtype) - 5) ** 2) / (2 * 1.5 ** 2))
    taps = taps / taps.sum()
    channels = x.shape[1]
    window = (taps[:, None] * taps[None, :]).expand(channels, 1, 11, 11)

    def blur(t: Any) -> Any:
        return F.conv2d(t, window, padding=5, groups=channels)

    mu_x, mu_y = blur(x), blur(y)
    var_x = blur(x * x) - mu_x * mu_x
    var_y = blur(y * y) - mu_y * mu_y
    cov = blur(x * y) - mu_x * mu_y
    return ((2 * mu_x * mu_y + C1) * (2 * cov + C2)) / ((mu_x ** 2 + mu_y ** 2 + C1) * (var_x + var_y + C2))


FUSED_SSIM = """
import fused_ssim, fused_ssim_cuda
img1 = inp["img1"].cuda().requires_grad_()
img2 = inp["img2"].cuda()
value = fused_ssim.fused_ssim(img1, img2)
value.backward()
out["mean"], out["grad"] = value.detach().cpu(), img1.grad.cpu()
out["map"] = fused_ssim_cuda.fusedssim(inp["C1"], inp["C2"], img1.detach(), img2, False)[0].cpu()
out["so"] = fused_ssim_cuda.__file__
"""


def test_fused_ssim_matches_torch_on_the_gpu(wheelhouse: Path, device: Device, tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    img1 = torch.rand(2, 3, 97, 131, generator=gen)
    img2 = (img1 + 0.2 * torch.rand(2, 3, 97, 131, generator=gen)).clamp(0, 1)  # similar, not equal
    out = _run_kernels(wheelhouse, "fused_ssim", tmp_path, FUSED_SSIM, {"img1": img1, "img2": img2, "C1": C1, "C2": C2})

    x = img1.double().requires_grad_()
    ref_map = _ssim_map(x, img2.double())
    ref_map.mean().backward()
    _report("fused_ssim map", _max_err(out["map"], ref_map.detach()), 1e-4)
    _report("fused_ssim mean", _max_err(out["mean"], ref_map.mean().detach()), 1e-5)
    assert x.grad is not None
    scale = float(x.grad.abs().max())
    _report("fused_ssim grad (relative to its largest)", _max_err(out["grad"], x.grad) / scale, 1e-3)
    _assert_sass(out["so"], device, ["fusedssimCUDA", "fusedssim_backwardCUDA"])


# simple_knn ---------------------------------------------------------------------------------

SIMPLE_KNN = """
from simple_knn import _C
out["dist"] = _C.distCUDA2(inp["points"].cuda()).cpu()
out["so"] = _C.__file__
"""


def test_simple_knn_matches_brute_force_on_the_gpu(wheelhouse: Path, device: Device, tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(1)
    points = torch.rand(3000, 3, generator=gen) * 4 - 2  # three of its 1024-point boxes
    out = _run_kernels(wheelhouse, "simple_knn", tmp_path, SIMPLE_KNN, {"points": points})

    p = points.double()
    d = torch.cdist(p, p)
    d.fill_diagonal_(float("inf"))
    ref = d.topk(3, dim=1, largest=False).values.pow(2).mean(dim=1)  # mean squared distance to 3 nearest
    assert out["dist"].shape == ref.shape
    _report("simple_knn distCUDA2 (relative)", float(((out["dist"].double() - ref) / ref).abs().max()), 1e-4)
    _assert_sass(out["so"], device, ["boxMeanDist", "boxMinMax"])


# pointnet2_ops ------------------------------------------------------------------------------

POINTNET2 = """
from pointnet2_ops import _ext, pointnet2_utils as u
xyz = inp["xyz"].cuda()
fps = u.furthest_point_sample(xyz, inp["npoint"])
centers = u.gather_operation(xyz.transpose(1, 2).contiguous(), fps).transpose(1, 2).contiguous()
out["fps"], out["centers"] = fps.cpu(), centers.cpu()
out["ball"] = u.ball_query(inp["radius"], inp["nsample"], xyz, centers).cpu()
dist, idx = u.three_nn(xyz, centers)
out["nn_dist"], out["nn_idx"] = dist.cpu(), idx.cpu()
features = inp["features"].cuda().requires_grad_()
gathered = u.gather_operation(features, inp["gather_idx"].cuda())
gathered.backward(inp["gather_grad"].cuda())
out["gathered"], out["gather_back"] = gathered.detach().cpu(), features.grad.cpu()
out["grouped"] = u.grouping_operation(features.detach(), inp["group_idx"].cuda()).cpu()
out["interp"] = u.three_interpolate(inp["known_features"].cuda(), inp["interp_idx"].cuda(),
                                    inp["interp_weight"].cuda()).cpu()
out["so"] = _ext.__file__
"""


def _fps(xyz: Any, npoint: int) -> Any:
    """Furthest point sampling as the kernel defines it: start at point 0, points within 1e-3 of
    the origin (squared norm) never picked, float32 squared distances."""
    picks = torch.zeros(xyz.shape[0], npoint, dtype=torch.int32)
    for b, cloud in enumerate(xyz):
        far = torch.full((cloud.shape[0],), 1e10)
        usable = (cloud * cloud).sum(1) > 1e-3
        old = 0
        for j in range(1, npoint):
            far = torch.minimum(far, ((cloud - cloud[old]) ** 2).sum(1))
            old = int(torch.where(usable, far, -1.0).argmax())
            picks[b, j] = old
    return picks


def _ball_query(xyz: Any, centers: Any, radius: float, nsample: int) -> Any:
    """The first ``nsample`` points (in index order) strictly inside ``radius`` of each centre,
    the list padded with the first one."""
    out = torch.zeros(*centers.shape[:2], nsample, dtype=torch.int32)
    limit = torch.tensor(radius, dtype=torch.float32) ** 2  # the kernel squares the float32 radius
    for b in range(xyz.shape[0]):
        inside = ((centers[b][:, None, :] - xyz[b][None, :, :]) ** 2).sum(-1) < limit
        for j, row in enumerate(inside):
            hits = row.nonzero().flatten()[:nsample]
            out[b, j] = hits[0]
            out[b, j, :len(hits)] = hits
    return out


def test_pointnet2_ops_match_torch_on_the_gpu(wheelhouse: Path, device: Device, tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(2)
    b, n, npoint, channels, nsample, radius = 2, 1024, 64, 5, 16, 0.2
    xyz = torch.rand(b, n, 3, generator=gen) + 0.05  # away from the origin, which FPS never picks
    inputs = {
        "xyz": xyz, "npoint": npoint, "radius": radius, "nsample": nsample,
        "features": torch.rand(b, channels, n, generator=gen),
        "gather_idx": torch.randint(0, n, (b, npoint), generator=gen, dtype=torch.int32),
        "gather_grad": torch.rand(b, channels, npoint, generator=gen),
        "group_idx": torch.randint(0, n, (b, npoint, nsample), generator=gen, dtype=torch.int32),
        "known_features": torch.rand(b, channels, npoint, generator=gen),
        "interp_idx": torch.randint(0, npoint, (b, n, 3), generator=gen, dtype=torch.int32),
        "interp_weight": torch.rand(b, n, 3, generator=gen),
    }
    out = _run_kernels(wheelhouse, "pointnet2_ops", tmp_path, POINTNET2, inputs)

    fps = _fps(xyz, npoint)
    assert torch.equal(out["fps"], fps), "furthest_point_sample picked other points than the reference"
    centers = torch.stack([xyz[i, fps[i].long()] for i in range(b)])
    _report("pointnet2_ops gather_operation (the FPS centres)", _max_err(out["centers"], centers), 0.0)
    ball = _ball_query(xyz, centers, radius, nsample)
    assert torch.equal(out["ball"], ball), "ball_query returned other indices than the reference"

    d = torch.cdist(xyz.double(), centers.double())
    near = d.topk(3, dim=2, largest=False)
    assert torch.equal(out["nn_idx"].long(), near.indices), "three_nn found other neighbours than the reference"
    _report("pointnet2_ops three_nn distances", _max_err(out["nn_dist"], near.values), 1e-5)

    feats, gidx = inputs["features"], inputs["gather_idx"].long()
    want = torch.gather(feats, 2, gidx[:, None, :].expand(-1, channels, -1))
    _report("pointnet2_ops gather_operation", _max_err(out["gathered"], want), 0.0)
    back = torch.zeros_like(feats, dtype=torch.float64).scatter_add_(
        2, gidx[:, None, :].expand(-1, channels, -1), inputs["gather_grad"].double())
    _report("pointnet2_ops gather_operation backward", _max_err(out["gather_back"], back), 1e-5)
    grp = inputs["group_idx"].long()
    want = torch.gather(feats, 2, grp.reshape(b, 1, -1).expand(-1, channels, -1)).reshape(b, channels, npoint, nsample)
    _report("pointnet2_ops grouping_operation", _max_err(out["grouped"], want), 0.0)
    kf, iidx, w = inputs["known_features"].double(), inputs["interp_idx"].long(), inputs["interp_weight"].double()
    picked = torch.gather(kf, 2, iidx.reshape(b, 1, -1).expand(-1, channels, -1)).reshape(b, channels, n, 3)
    _report("pointnet2_ops three_interpolate", _max_err(out["interp"], (picked * w[:, None]).sum(-1)), 1e-5)
    _assert_sass(out["so"], device, ["furthest_point_sampling_kernel", "query_ball_point_kernel",
                                     "three_nn_kernel", "gather_points_kernel"])


# diff_gaussian_rasterization ----------------------------------------------------------------

GAUSSIANS = """
import diff_gaussian_rasterization as dgr
from diff_gaussian_rasterization import _C
cam = inp["camera"]
settings = dgr.GaussianRasterizationSettings(
    image_height=cam["height"], image_width=cam["width"], tanfovx=cam["tanfovx"], tanfovy=cam["tanfovy"],
    bg=inp["background"].cuda(), scale_modifier=1.0, viewmatrix=torch.eye(4).cuda(),
    projmatrix=inp["projmatrix"].cuda(), sh_degree=0, campos=torch.zeros(3).cuda(), prefiltered=False,
    debug=False)
means = inp["means"].cuda()
color, radii, depth, alpha = dgr.GaussianRasterizer(settings)(
    means3D=means, means2D=torch.zeros_like(means), opacities=inp["opacities"].cuda(),
    colors_precomp=inp["colors"].cuda(), scales=inp["scales"].cuda(), rotations=inp["rotations"].cuda())
out.update(color=color.cpu(), radii=radii.cpu(), depth=depth.cpu(), alpha=alpha.cpu(), so=_C.__file__)
"""

TILE = 16  # the rasterizer's tile edge, in pixels


def _rotation(q: Any) -> Any:
    """Rotation matrices of unit quaternions (w, x, y, z)."""
    w, x, y, z = q.unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], -1).reshape(*q.shape[:-1], 3, 3)


def _splat(inp: dict[str, Any]) -> dict[str, Any]:
    """3D Gaussian splatting seen from the origin along +z (the view matrix the identity), as the
    rasterizer defines it: EWA projection with its 0.3-pixel low-pass, a 3-sigma radius, the tiles
    that radius touches, front-to-back blending (alpha capped at 0.99, below 1/255 skipped, a pixel
    done once its transmittance would fall under 1e-4); float64."""
    cam = inp["camera"]
    height, width, tanx, tany = cam["height"], cam["width"], cam["tanfovx"], cam["tanfovy"]
    means, scales = inp["means"].double(), inp["scales"].double()
    opac, colors = inp["opacities"].double().flatten(), inp["colors"].double()
    fx, fy = width / (2 * tanx), height / (2 * tany)
    x, y, z = means.unbind(1)
    tx = (x / z).clamp(-1.3 * tanx, 1.3 * tanx) * z
    ty = (y / z).clamp(-1.3 * tany, 1.3 * tany) * z
    zero = torch.zeros_like(z)
    jac = torch.stack([torch.stack([fx / z, zero, -fx * tx / z ** 2], 1),
                       torch.stack([zero, fy / z, -fy * ty / z ** 2], 1)], 1)
    rot = _rotation(inp["rotations"].double())
    sigma = rot @ torch.diag_embed(scales ** 2) @ rot.transpose(1, 2)
    cov = jac @ sigma @ jac.transpose(1, 2) + 0.3 * torch.eye(2, dtype=torch.float64)
    a, b, c = cov[:, 0, 0], cov[:, 0, 1], cov[:, 1, 1]
    det = a * c - b * b
    conic = torch.stack([c / det, -b / det, a / det], 1)
    mid = (a + c) / 2
    radius = torch.ceil(3 * torch.sqrt(mid + torch.sqrt(torch.clamp(mid * mid - det, min=0.1))))
    px = ((x / (tanx * z) + 1) * width - 1) / 2
    py = ((y / (tany * z) + 1) * height - 1) / 2
    grid = ((width + TILE - 1) // TILE, (height + TILE - 1) // TILE)

    def tiles(p: float, r: float, n: int) -> tuple[int, int]:
        return (min(n, max(0, int((p - r) / TILE))), min(n, max(0, int((p + r + TILE - 1) / TILE))))

    rows, cols = torch.meshgrid(torch.arange(height, dtype=torch.float64), torch.arange(width, dtype=torch.float64),
                                indexing="ij")
    color = torch.zeros(3, height, width, dtype=torch.float64)
    depth = torch.zeros(height, width, dtype=torch.float64)
    weight = torch.zeros(height, width, dtype=torch.float64)
    trans = torch.ones(height, width, dtype=torch.float64)
    done = torch.zeros(height, width, dtype=torch.bool)
    radii = torch.zeros(len(z), dtype=torch.int32)
    for i in sorted(range(len(z)), key=lambda k: float(z[k])):
        if z[i] <= 0.2:
            continue
        (x0, x1), (y0, y1) = tiles(float(px[i]), float(radius[i]), grid[0]), tiles(float(py[i]), float(radius[i]), grid[1])
        if (x1 - x0) * (y1 - y0) == 0:
            continue
        radii[i] = int(radius[i])
        covered = torch.zeros(height, width, dtype=torch.bool)
        covered[y0 * TILE:y1 * TILE, x0 * TILE:x1 * TILE] = True
        dx, dy = px[i] - cols, py[i] - rows
        power = -0.5 * (conic[i, 0] * dx * dx + conic[i, 2] * dy * dy) - conic[i, 1] * dx * dy
        alpha = torch.clamp(opac[i] * torch.exp(power), max=0.99)
        live = covered & ~done & (power <= 0) & (alpha >= 1 / 255)
        after = trans * (1 - alpha)
        done |= live & (after < 1e-4)
        blend = live & (after >= 1e-4)
        contribution = torch.where(blend, alpha * trans, 0.0)
        color += colors[i][:, None, None] * contribution
        depth += z[i] * contribution
        weight += contribution
        trans = torch.where(blend, after, trans)
    color += trans * inp["background"].double()[:, None, None]
    return {"color": color, "depth": depth[None], "alpha": weight[None], "radii": radii}


def test_diff_gaussian_rasterization_matches_torch_on_the_gpu(wheelhouse: Path, device: Device,
                                                              tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(3)
    n, height, width, tan = 40, 70, 90, 0.6  # the image not a whole number of tiles
    means = torch.stack([(torch.rand(n, generator=gen) - 0.5) * 3, (torch.rand(n, generator=gen) - 0.5) * 2.4,
                         2 + 4 * torch.rand(n, generator=gen)], 1)
    quats = torch.randn(n, 4, generator=gen)
    near, far = 0.01, 100.0
    proj = torch.zeros(4, 4)  # row-vector convention: [x y z 1] @ proj
    proj[0, 0], proj[1, 1] = 1 / tan, 1 / tan
    proj[2, 2], proj[3, 2], proj[2, 3] = far / (far - near), -far * near / (far - near), 1.0
    inputs = {
        "camera": {"height": height, "width": width, "tanfovx": tan, "tanfovy": tan},
        "means": means, "scales": 0.02 + 0.15 * torch.rand(n, 3, generator=gen),
        "rotations": quats / quats.norm(dim=1, keepdim=True),
        "opacities": 0.2 + 0.8 * torch.rand(n, 1, generator=gen), "colors": torch.rand(n, 3, generator=gen),
        "background": torch.tensor([0.1, 0.2, 0.3]), "projmatrix": proj,
    }
    out = _run_kernels(wheelhouse, "diff_gaussian_rasterization", tmp_path, GAUSSIANS, inputs)

    want = _splat(inputs)
    assert torch.equal(out["radii"], want["radii"]), "the screen-space radii differ from the reference"
    assert int((want["radii"] > 0).sum()) > n // 2, "the scene put most Gaussians out of view"
    _report("diff_gaussian_rasterization color", _max_err(out["color"], want["color"]), 1e-4)
    _report("diff_gaussian_rasterization alpha", _max_err(out["alpha"], want["alpha"]), 1e-4)
    _report("diff_gaussian_rasterization depth", _max_err(out["depth"], want["depth"]), 1e-3)
    _assert_sass(out["so"], device, ["renderCUDA", "preprocessCUDA"])


# torch_scatter ------------------------------------------------------------------------------

# torch_scatter's scatter() sums and averages through torch's own scatter_add_; its max, and every
# segment_* reduction, run the package's kernels. Both run here, on a 1-D and a broadcast 2-D source.
TORCH_SCATTER = """
import importlib.machinery, os.path as osp
import torch_scatter as ts
for dtype in ("float32", "float64"):
    for shape in ("flat", "rows"):
        src = inp[f"src_{shape}"].to(getattr(torch, dtype)).cuda()
        index, indptr = inp["index"].cuda(), inp["indptr"].cuda()
        for reduce in ("sum", "mean", "max"):
            key = f"{dtype}_{shape}_{reduce}"
            out[f"scatter_{key}"] = ts.scatter(src, index, 0, dim_size=inp["groups"], reduce=reduce).cpu()
            out[f"coo_{key}"] = ts.segment_coo(src, index, dim_size=inp["groups"], reduce=reduce).cpu()
            out[f"csr_{key}"] = ts.segment_csr(src, indptr, reduce=reduce).cpu()
        values, arg = ts.scatter_max(src, index, 0, dim_size=inp["groups"])
        out[f"argmax_{dtype}_{shape}"] = arg.cpu()
folder = osp.dirname(ts.__file__)
out["so"] = [importlib.machinery.PathFinder().find_spec(f"_{lib}_cuda", [folder]).origin
             for lib in ("scatter", "segment_coo", "segment_csr")]
"""


@pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta:UserWarning")  # the cross-check below
def test_torch_scatter_matches_torch_on_the_gpu(wheelhouse: Path, device: Device, tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(4)
    n, groups, features = 5000, 97, 7
    # sorted (segment_coo and segment_csr need it), every group but the last two used: empty
    # groups come out as 0 from both, and their argmax as n
    index = torch.randint(0, groups - 2, (n,), generator=gen).sort().values
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(index, minlength=groups).cumsum(0)])
    inputs = {"index": index, "indptr": indptr, "groups": groups,
              "src_flat": torch.randn(n, generator=gen, dtype=torch.float64),
              "src_rows": torch.randn(n, features, generator=gen, dtype=torch.float64)}
    out = _run_kernels(wheelhouse, "torch_scatter", tmp_path, TORCH_SCATTER, inputs)

    torch_name = {"sum": "sum", "mean": "mean", "max": "amax"}
    for shape in ("flat", "rows"):
        src = inputs[f"src_{shape}"]
        where = index.view(-1, *[1] * (src.dim() - 1)).expand_as(src)
        zeros = torch.zeros(groups, *src.shape[1:], dtype=torch.float64)
        for reduce in ("sum", "mean", "max"):
            want = zeros.scatter_reduce(0, where, src, torch_name[reduce], include_self=False)
            # torch's other index reduction says the same (index_reduce has no sum: index_add)
            other = (zeros.index_add(0, index, src) if reduce == "sum"
                     else zeros.index_reduce(0, index, src, torch_name[reduce], include_self=False))
            assert torch.allclose(want, other)
            for dtype, bound in (("float32", 1e-4), ("float64", 1e-10)):
                for op in ("scatter", "coo", "csr"):
                    _report(f"torch_scatter {op} {reduce} {shape} {dtype}",
                            _max_err(out[f"{op}_{dtype}_{shape}_{reduce}"], want), bound)
        empty = torch.bincount(index, minlength=groups) == 0
        for dtype in ("float32", "float64"):
            typed = src.to(getattr(torch, dtype))
            arg = out[f"argmax_{dtype}_{shape}"]
            assert bool((arg[empty] == n).all()), f"argmax {shape} {dtype}: an empty group's is not {n}"
            most = typed.new_zeros(groups, *src.shape[1:]).scatter_reduce(0, where, typed, "amax", include_self=False)
            # each argmax points into its own group at a value equal to the group's largest
            assert torch.equal(typed.gather(0, arg[~empty]), most[~empty]), f"argmax {shape} {dtype}: not a maximum"
            owner = torch.arange(groups).view(-1, *[1] * (src.dim() - 1)).expand_as(arg)[~empty]
            assert torch.equal(index[arg[~empty]], owner), f"argmax {shape} {dtype}: points outside its group"
    _assert_sass(out["so"][0], device, ["scatter_kernel", "scatter_arg_kernel"])
    _assert_sass(out["so"][1], device, ["segment_coo_kernel", "segment_coo_broadcast_kernel"])
    _assert_sass(out["so"][2], device, ["segment_csr_kernel", "segment_csr_broadcast_kernel"])


# torch_sparse --------------------------------------------------------------------------------

TORCH_SPARSE = """
import importlib.machinery, os.path as osp
import torch_sparse as tsp
a = tsp.SparseTensor(row=inp["row"].cuda(), col=inp["col"].cuda(), value=inp["value"].cuda(),
                     sparse_sizes=inp["size"])
out["rowptr"] = a.storage.rowptr().cpu()  # ind2ptr_kernel
for reduce in ("sum", "mean", "max"):
    out[reduce] = tsp.matmul(a, inp["dense"].cuda(), reduce=reduce).cpu()  # spmm_kernel
out["so"] = [importlib.machinery.PathFinder().find_spec(f"_{lib}_cuda", [osp.dirname(tsp.__file__)]).origin
             for lib in ("convert", "spmm")]
"""


def test_torch_sparse_matches_torch_on_the_gpu(wheelhouse: Path, device: Device, tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(5)
    rows, cols, features, nnz = 300, 200, 33, 4000
    # distinct (row, col) pairs, sorted as SparseTensor keeps them; the last rows empty
    flat = torch.randperm((rows - 3) * cols, generator=gen)[:nnz].sort().values
    row, col = flat // cols, flat % cols
    inputs = {"row": row, "col": col, "value": torch.randn(nnz, generator=gen), "size": (rows, cols),
              "dense": torch.randn(cols, features, generator=gen)}
    out = _run_kernels(wheelhouse, "torch_sparse", tmp_path, TORCH_SPARSE, inputs, needs=("torch_scatter",))

    counts = torch.bincount(row, minlength=rows)
    assert torch.equal(out["rowptr"], torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]))
    products = inputs["value"].double()[:, None] * inputs["dense"].double()[col]  # one per stored entry
    where = row[:, None].expand_as(products)
    zeros = torch.zeros(rows, features, dtype=torch.float64)
    dense = torch.zeros(rows, cols, dtype=torch.float64).index_put((row, col), inputs["value"].double())
    _report("torch_sparse spmm sum (against the dense product)", _max_err(out["sum"], dense @ inputs["dense"].double()),
            1e-4)
    for reduce, name in (("sum", "sum"), ("mean", "mean"), ("max", "amax")):
        want = zeros.scatter_reduce(0, where, products, name, include_self=False)
        _report(f"torch_sparse spmm {reduce}", _max_err(out[reduce], want), 1e-4)
    _assert_sass(out["so"][0], device, ["ind2ptr_kernel"])
    _assert_sass(out["so"][1], device, ["spmm_kernel"])


# torch_cluster -------------------------------------------------------------------------------

TORCH_CLUSTER = """
import importlib.machinery, os.path as osp
import torch_cluster as tc
x, y = inp["x"].cuda(), inp["y"].cuda()
bx, by = inp["batch_x"].cuda(), inp["batch_y"].cuda()
out["fps"] = tc.fps(x, bx, ratio=0.25, random_start=False).cpu()
out["knn"] = tc.knn(x, y, 6, bx, by).cpu()
out["radius"] = tc.radius(x, y, 0.2, bx, by, max_num_neighbors=len(x)).cpu()
out["nearest"] = tc.nearest(x, y, bx, by).cpu()
out["grid"] = tc.grid_cluster(x, inp["size"].cuda(), inp["start"].cuda(), inp["end"].cuda()).cpu()
row, col = inp["row"].cuda(), inp["col"].cuda()
out["graclus"] = tc.graclus_cluster(row, col, num_nodes=inp["nodes"]).cpu()
start = torch.arange(inp["nodes"], device="cuda")
out["walk"] = tc.random_walk(row, col, start, 10).cpu()
out["so"] = {lib: importlib.machinery.PathFinder().find_spec(f"_{lib}_cuda", [osp.dirname(tc.__file__)]).origin
             for lib in ("fps", "knn", "radius", "nearest", "grid", "graclus", "rw")}
"""


def _pairs(edges: Any) -> list[tuple[int, int]]:
    return sorted(zip(edges[0].tolist(), edges[1].tolist(), strict=True))


def _graph(gen: Any, nodes: int) -> Any:
    """An undirected graph's (row, col) pairs, sorted by row, with no isolated node (a walk never
    stops early)."""
    ring = torch.arange(nodes)
    extra = torch.randint(0, nodes, (2, 600), generator=gen)
    src, dst = torch.cat([ring, extra[0]]), torch.cat([(ring + 1) % nodes, extra[1]])
    keep = src != dst
    return torch.unique(torch.stack([torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])]), dim=1)


def _assert_walks(seq: Any, nodes: int, edges: set[tuple[int, int]]) -> None:
    assert seq.shape == (nodes, 11), f"random walks: shape {tuple(seq.shape)}"
    assert torch.equal(seq[:, 0], torch.arange(nodes)), "a random walk that starts elsewhere"
    steps = zip(seq[:, :-1].flatten().tolist(), seq[:, 1:].flatten().tolist(), strict=True)
    off = [step for step in steps if step not in edges]
    assert not off, f"{len(off)} random-walk steps along no edge, e.g. {off[:3]}"


def test_torch_cluster_matches_brute_force_on_the_gpu(wheelhouse: Path, device: Device, tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(6)
    # two point clouds in the unit cube, in float64: no two distances tie, so every choice is one
    x = torch.rand(400, 3, generator=gen, dtype=torch.float64)
    y = torch.rand(120, 3, generator=gen, dtype=torch.float64)
    batch_x = torch.cat([torch.zeros(200, dtype=torch.long), torch.ones(200, dtype=torch.long)])
    batch_y = torch.cat([torch.zeros(50, dtype=torch.long), torch.ones(70, dtype=torch.long)])
    nodes = 300
    pairs = _graph(gen, nodes)
    inputs = {"x": x, "y": y, "batch_x": batch_x, "batch_y": batch_y, "size": torch.full((3,), 0.1,
              dtype=torch.float64), "start": torch.zeros(3, dtype=torch.float64),
              "end": torch.ones(3, dtype=torch.float64), "row": pairs[0], "col": pairs[1], "nodes": nodes}
    out = _run_kernels(wheelhouse, "torch_cluster", tmp_path, TORCH_CLUSTER, inputs)

    square = torch.cdist(y, x) ** 2
    same = batch_y[:, None] == batch_x[None, :]
    # farthest point sampling from each cloud's first point: each next point the farthest from those taken
    want = []
    for first in (0, 200):
        cloud = x[first:first + 200]
        taken, gap = [0], ((cloud - cloud[0]) ** 2).sum(1)
        while len(taken) < 50:
            taken.append(int(gap.argmax()))
            gap = torch.minimum(gap, ((cloud - cloud[taken[-1]]) ** 2).sum(1))
        want += [first + t for t in taken]
    assert out["fps"].tolist() == want, "fps: another sample than the brute force's"
    nearest6 = square.masked_fill(~same, float("inf")).topk(6, dim=1, largest=False).indices
    assert _pairs(out["knn"]) == sorted((q, int(i)) for q in range(len(y)) for i in nearest6[q]), "knn differs"
    within = ((square <= 0.2 ** 2) & same).nonzero()
    assert _pairs(out["radius"]) == _pairs(within.T), "radius differs"
    closest = torch.cdist(x, y).masked_fill(~same.T, float("inf")).argmin(1)
    assert torch.equal(out["nearest"], closest), "nearest differs"
    cells = torch.trunc(x / 0.1).long()  # (pos - start) / size, truncated; 11 cells a side from end
    assert torch.equal(out["grid"], cells[:, 0] + 11 * cells[:, 1] + 121 * cells[:, 2]), "grid_cluster differs"
    print(f"torch_cluster fps {len(want)}, knn {out['knn'].shape[1]}, radius {out['radius'].shape[1]}, nearest "
          f"{len(closest)}, grid {len(x)}: equal to the brute force's")

    # graclus and the walks are random: what they return is checked against the graph
    edges = set(zip(pairs[0].tolist(), pairs[1].tolist(), strict=True))
    members: dict[int, list[int]] = {}
    for node, cluster in enumerate(out["graclus"].tolist()):
        members.setdefault(cluster, []).append(node)
    assert all(len(m) == 1 or (len(m) == 2 and (m[0], m[1]) in edges) for m in members.values()), \
        "graclus: a cluster that is not a node or an edge"
    matched = sum(len(m) == 2 for m in members.values())
    _assert_walks(out["walk"], nodes, edges)
    print(f"torch_cluster graclus: {matched} matched pairs, each an edge; random walks: every step an edge")
    for lib, kernels in (("fps", ["fps_kernel"]), ("knn", ["knn_kernel"]), ("radius", ["radius_kernel"]),
                         ("nearest", ["nearest_kernel"]), ("grid", ["grid_kernel"]),
                         ("graclus", ["colorize_kernel", "propose_kernel", "respond_kernel"]),
                         ("rw", ["uniform_sampling_kernel", "rejection_sampling_kernel"])):
        _assert_sass(out["so"][lib], device, kernels)


# torch_spline_conv ---------------------------------------------------------------------------

TORCH_SPLINE_CONV = """
import importlib.machinery, os.path as osp
import torch_spline_conv as tsc
basis, index = tsc.spline_basis(inp["pseudo"].cuda(), inp["kernel_size"].cuda(), inp["is_open"].cuda(), 1)
out["basis"], out["index"] = basis.cpu(), index.cpu()
out["weighted"] = tsc.spline_weighting(inp["x"].cuda(), inp["weight"].cuda(), basis, index).cpu()
out["so"] = [importlib.machinery.PathFinder().find_spec(f"_{lib}_cuda", [osp.dirname(tsc.__file__)]).origin
             for lib in ("basis", "weighting")]
"""


def test_torch_spline_conv_matches_torch_on_the_gpu(wheelhouse: Path, device: Device, tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(7)
    edges, inputs_per_edge, outputs = 500, 8, 6
    kernel_size = torch.tensor([5, 5, 4])
    is_open = torch.tensor([1, 1, 0], dtype=torch.uint8)  # the last dimension wraps around (an angle)
    inputs = {"pseudo": torch.rand(edges, 3, generator=gen, dtype=torch.float64), "kernel_size": kernel_size,
              "is_open": is_open, "x": torch.randn(edges, inputs_per_edge, generator=gen, dtype=torch.float64),
              "weight": torch.randn(int(kernel_size.prod()), inputs_per_edge, outputs, generator=gen,
                                    dtype=torch.float64)}
    out = _run_kernels(wheelhouse, "torch_spline_conv", tmp_path, TORCH_SPLINE_CONV, inputs)

    # linear B-splines: each edge weighs the 2**3 kernel points around its pseudo-coordinates
    scaled = inputs["pseudo"] * (kernel_size - is_open)
    lower, frac = scaled.trunc().long(), scaled - scaled.floor()
    basis, index = [], []
    for s in range(8):
        bits = torch.tensor([(s >> d) & 1 for d in range(3)])
        basis.append(torch.where(bits.bool(), frac, 1 - frac).prod(1))
        places = (lower + bits) % kernel_size
        index.append(places[:, 0] + 5 * places[:, 1] + 25 * places[:, 2])
    want_basis, want_index = torch.stack(basis, 1), torch.stack(index, 1)
    assert torch.equal(out["index"], want_index), "spline_basis: other kernel points than the reference's"
    _report("torch_spline_conv spline_basis", _max_err(out["basis"], want_basis), 1e-12)
    weighted = torch.einsum("es,ei,esio->eo", want_basis, inputs["x"], inputs["weight"][want_index])
    _report("torch_spline_conv spline_weighting", _max_err(out["weighted"], weighted), 1e-10)
    _assert_sass(out["so"][0], device, ["spline_basis_fw_kernel"])
    _assert_sass(out["so"][1], device, ["spline_weighting_fw_kernel"])


TORCH_CLUSTER_BIASED_WALK = """
import torch_cluster as tc
start = torch.arange(inp["nodes"], device="cuda")
out["walk"] = tc.random_walk(inp["row"].cuda(), inp["col"].cuda(), start, 10, p=0.5, q=2.0).cpu()
"""


@pytest.mark.xfail(strict=True, reason=(
    "torch_cluster 1.6.3 (and upstream at 3d1d9e39): csrc/cuda/rw_cuda.cu's rejection_sampling_kernel "
    "reuses row_start/row_end for the candidate's own neighbours, so a rejected draw is redrawn from "
    "the candidate's list, not the current node's: the walk leaves the graph (the CPU kernel does not). "
    "Strict: a patched recipe's wheel passes, and this mark must then go."))
def test_torch_cluster_biased_random_walk_stays_on_the_graph(wheelhouse: Path, tmp_path: Path) -> None:
    nodes = 300
    pairs = _graph(torch.Generator().manual_seed(6), nodes)
    out = _run_kernels(wheelhouse, "torch_cluster", tmp_path, TORCH_CLUSTER_BIASED_WALK,
                       {"row": pairs[0], "col": pairs[1], "nodes": nodes})
    _assert_walks(out["walk"], nodes, set(zip(pairs[0].tolist(), pairs[1].tolist(), strict=True)))
