"""farm grid: PyTorch's wheel index (PEP 503 pages per CUDA line, in download.pytorch.org's
layout) served on 127.0.0.1, compared with the grid."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.cli import main
from farm.errors import EXIT_DEFECT, EXIT_ENVIRONMENT, EXIT_OK
from farm.load.defaults import load_defaults
from farm.netutil import parse_page
from farm.schedule.grid import propose, shipped
from tests.support import loopback

REPO = Path(__file__).resolve().parent.parent
PYS = ("310", "311", "312", "313", "314", "315")
# the Requires-Dist of PyPI's torch 2.8.0, 2.9.0, 2.11.0 and 2.14.1 (Linux x86_64), as the index serves them
REAL_REQUIRES: dict[str, list[str]] = json.loads(
    (REPO / "tests" / "data" / "pypi_torch_requires.json").read_text())["requires_dist"]
CPU_REQUIRES = ["filelock", "typing-extensions>=4.10.0"]


def _wheel(version: str, cu: str, py: str, plat: str) -> str:
    return f"torch-{version}%2B{cu}-cp{py}-cp{py}-{plat}.whl"


def _page(names: list[str]) -> str:
    links = "\n".join(f'<a href="/whl/{n}#sha256={"0" * 64}">{n.replace("%2B", "+")}</a><br/>' for n in names)
    return f"<!DOCTYPE html><html><body><h1>Links for torch</h1>\n{links}\n</body></html>\n"


def _upstream(root: Path) -> None:
    """cu130 as upstream ships it (2.13.0, 2.14.1 and a future 2.15.0 without Windows 3.15), plus
    the noise a real page has: +cpu wheels, free-threaded builds, pre-releases, other files."""
    names = []
    for version, pys in (("2.13.0", PYS), ("2.14.0", PYS), ("2.14.1", PYS), ("2.15.0", PYS)):
        for py in pys:
            names += [_wheel(version, "cu130", py, "manylinux_2_28_x86_64"),
                      _wheel(version, "cu130", py, "manylinux_2_28_aarch64")]
            if not (py == "315" and version != "2.14.1"):
                names.append(_wheel(version, "cu130", py, "win_amd64"))
    names += [_wheel("2.15.0", "cpu", "311", "manylinux_2_28_x86_64"),
              "torch-2.15.0%2Bcu130-cp313-cp313t-manylinux_2_28_x86_64.whl",
              _wheel("2.16.0rc1", "cu130", "311", "manylinux_2_28_x86_64"),
              "torch-2.15.0%2Bcu130.tar.gz", "not-a-wheel.whl"]
    page = root / "whl" / "cu130" / "torch"
    page.mkdir(parents=True)
    (page / "index.html").write_text(_page(names))


@pytest.fixture(scope="module")
def index_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("pytorch-index")
    _upstream(root)

    with loopback.serve(root) as url:
        yield f"{url}whl/{{cu}}"


def _root(tmp_path: Path) -> Path:
    shutil.copy(REPO / "_defaults.yml", tmp_path / "_defaults.yml")
    return tmp_path


def test_the_page_parser_keeps_only_this_lines_release_wheels() -> None:
    html = _page([_wheel("2.14.1", "cu130", "311", "manylinux_2_28_x86_64"), _wheel("2.14.1", "cu126", "311", "win_amd64"),
                  _wheel("2.14.1", "cpu", "311", "win_amd64"), "torch-2.14.1%2Bcu130-cp314-cp314t-win_amd64.whl",
                  _wheel("2.15.0a0", "cu130", "311", "win_amd64"), _wheel("2.14.1", "cu130", "312", "macosx_11_0_arm64")])
    (only,) = shipped(parse_page(html.encode(), "text/html", "http://127.0.0.1/whl/cu130/torch/"), "13.0")
    assert (only.cuda, str(only.torch), only.python, only.platform) == ("13.0", "2.14.1", "3.11", "linux_x86_64")


def test_grid_proposes_the_rows_and_phantoms_the_config_lacks(tmp_path: Path, index_url: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path)
    code = main(["grid", "--root", str(root), "--cuda", "13.0", "--index", index_url, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == EXIT_DEFECT
    # the shipped grid has 2.13 and 2.14 as upstream ships them; 2.15 is new
    assert out["rows"] == [{"cuda": "13.0", "torch": "2.15.0", "why": "new",
                            "python": ["3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]}]
    assert out["phantoms"] == [{"cuda": "13.0", "torch": "2.15", "python": "3.15", "platform": "win_amd64"}]

    # pasted into _defaults.yml, the grid is complete: exit 0
    text = (root / "_defaults.yml").read_text()
    text = text.replace("  - {cuda: '13.0', torch: '2.14.1'",
                        "  - {cuda: '13.0', torch: '2.15.0', python: ['3.10', '3.11', '3.12', '3.13', '3.14', '3.15']}\n"
                        "  - {cuda: '13.0', torch: '2.14.1'", 1)
    text = text.replace("  - {cuda: '13.0', torch: '2.14', python: '3.15', platform: win_amd64}\n",
                        "  - {cuda: '13.0', torch: '2.14', python: '3.15', platform: win_amd64}\n"
                        "  - {cuda: '13.0', torch: '2.15', python: '3.15', platform: win_amd64}\n", 1)
    (root / "_defaults.yml").write_text(text)
    assert main(["grid", "--root", str(root), "--cuda", "13.0", "--index", index_url]) == EXIT_OK
    assert "the grid has every" in capsys.readouterr().out


def test_an_older_patch_release_and_a_missing_python_are_proposed(tmp_path: Path) -> None:
    defaults = load_defaults(REPO / "_defaults.yml")
    html = _page([_wheel("2.13.1", "cu130", py, "manylinux_2_28_x86_64") for py in PYS]
                 + [_wheel("2.13.1", "cu130", py, "manylinux_2_28_aarch64") for py in PYS]
                 + [_wheel("2.13.1", "cu130", py, "win_amd64") for py in PYS[:-1]])
    found = propose(defaults, shipped(parse_page(html.encode(), "text/html", "http://127.0.0.1/whl/cu130/torch/"), "13.0"), ["13.0"])
    (row,) = found.rows
    assert (row.torch, row.why) == ("2.13.1", "newer release than 2.13.0")
    assert not found.phantoms  # Windows 3.15 is a declared phantom already


def test_an_unreachable_index_is_an_environment_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path)
    code = main(["grid", "--root", str(root), "--cuda", "13.0", "--index", "http://127.0.0.1:9/whl/{cu}"])
    assert code == EXIT_ENVIRONMENT
    assert "cannot read PyTorch's index page http://127.0.0.1:9/whl/cu130/torch/" in capsys.readouterr().err


# --------------------------------------------------------------------------- PyPI's shape
def _metadata(version: str, requires: list[str]) -> bytes:
    lines = ["Metadata-Version: 2.1", "Name: torch", f"Version: {version}",
             *(f"Requires-Dist: {req}" for req in requires)]
    return ("\n".join(lines) + "\n\n").encode()


def _pypi(root: Path, releases: dict[str, list[str]], pythons: dict[str, tuple[str, ...]] | None = None) -> None:
    """``/simple/torch/`` as PyPI serves it (PEP 691 JSON with ``core-metadata``, PEP 503 HTML with
    ``data-core-metadata``) and each wheel's ``.metadata`` beside it under ``/packages/``: torch
    wheels without a local label, for ``pythons[version]`` (default: all of PYS), Linux builds with
    the requirements ``releases[version]``, Windows and macOS builds CPU-only."""
    files = []
    for version, requires in releases.items():
        for py in (pythons or {}).get(version, PYS):
            for plat in ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "win_amd64", "macosx_11_0_arm64"):
                name = f"torch-{version}-cp{py}-cp{py}-{plat}.whl"
                linux = plat.startswith("manylinux")
                meta = _metadata(version, requires if linux else CPU_REQUIRES)
                path = root / "packages" / version / name
                path.parent.mkdir(parents=True, exist_ok=True)
                (path.parent / f"{name}.metadata").write_bytes(meta)
                files.append({"filename": name, "url": f"/packages/{version}/{name}", "hashes": {"sha256": "0" * 64},
                              "core-metadata": {"sha256": "1" * 64}, "data-dist-info-metadata": {"sha256": "1" * 64}})
    page = root / "simple" / "torch"
    page.mkdir(parents=True)
    (page / "index.json").write_text(json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files}))
    (page / "index.html").write_text("<!DOCTYPE html><html><body>" + "".join(
        f'<a href="{f["url"]}#sha256={"0" * 64}" data-core-metadata="sha256={"1" * 64}">{f["filename"]}</a>'
        for f in files) + "</body></html>")


class _Simple(loopback.QuietHandler):
    """PyPI's content negotiation: JSON for a PEP 691 Accept header, HTML otherwise."""

    def do_GET(self) -> None:
        if self.path.endswith("/simple/torch/"):
            wants_json = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
            body = (Path(self.directory) / "simple" / "torch" / ("index.json" if wants_json else "index.html")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json" if wants_json else "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def test_a_pypi_shaped_index_is_read_from_its_wheels_requirements(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """PyPI's torch wheels carry no +cu130 label: the grid used to read none of them and call the
    grid complete. Their CUDA line comes from the CUDA release their metadata pins: the runtime's
    wheel up to torch 2.10 (2.8.0 here: CUDA 12.8), the `cuda-toolkit[...]` meta-package from 2.11
    on (2.11.0 and 2.14.1 here: CUDA 13.0, with no runtime pin at all). A PyPI-shaped index served
    on 127.0.0.1 (unlabelled wheels, PEP 691 JSON, PEP 658 .metadata files) with the releases' real
    requirements; 2.15.0 stands for a future release that declares as 2.14.1 does."""
    _pypi(tmp_path / "pypi", {"2.8.0": REAL_REQUIRES["2.8.0"], "2.11.0": REAL_REQUIRES["2.11.0"],
                              "2.14.1": REAL_REQUIRES["2.14.1"], "2.15.0": REAL_REQUIRES["2.14.1"]},
          pythons={"2.8.0": PYS[:4], "2.11.0": PYS[:5]})
    (tmp_path / "farm").mkdir()
    root = _root(tmp_path / "farm")
    with loopback.serve(tmp_path / "pypi", _Simple) as url:
        code = main(["grid", "--root", str(root), "--cuda", "13.0", "--index", f"{url}simple/", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == EXIT_DEFECT
    assert out["rows"] == [{"cuda": "13.0", "torch": "2.15.0", "why": "new",
                            "python": ["3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]}]
    # PyPI ships no CUDA build for Windows: every grid cell there is a phantom of this index
    assert out["phantoms"]
    assert {p["platform"] for p in out["phantoms"]} == {"win_amd64"}
    assert out["wheels"] == 2 * (5 + 6 + 6)  # 2.11.0, 2.14.1 and 2.15.0 on x86_64 and aarch64; 2.8.0 is 12.8


def test_the_html_page_says_which_wheels_have_metadata() -> None:
    html = ('<a href="/p/torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl" data-core-metadata="sha256=' + "1" * 64
            + '">torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl</a>'
            '<a href="/p/torch-2.15.0-cp311-cp311-win_amd64.whl">torch-2.15.0-cp311-cp311-win_amd64.whl</a>')
    page = parse_page(html.encode(), "text/html", "http://127.0.0.1/simple/torch/")
    assert [f.metadata for f in page.files] == [True, False]


def test_an_index_with_no_wheel_of_the_line_is_an_error_never_complete(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Only CUDA 12.8 builds (and CPU ones) on a PyPI-shaped index: asked for 13.0, farm says it read
    nothing of the line, and what it read instead; it does not print that the grid is complete."""
    _pypi(tmp_path / "pypi", {"2.8.0": REAL_REQUIRES["2.8.0"], "2.9.0": REAL_REQUIRES["2.9.0"]})
    (tmp_path / "farm").mkdir()
    root = _root(tmp_path / "farm")
    with loopback.serve(tmp_path / "pypi", _Simple) as url:
        code = main(["grid", "--root", str(root), "--cuda", "13.0", "--index", f"{url}simple/"])
        captured = capsys.readouterr()
    assert code == EXIT_ENVIRONMENT
    assert f"read no CUDA 13.0 torch wheel from {url}simple/torch/" in captured.err
    assert "requirements name CUDA 12.8" in captured.err
    assert "Traceback" not in captured.err
    assert "the grid has every" not in captured.out
