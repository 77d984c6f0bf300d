"""The index's compatibility pages (farm/publish/compat.py): generated from provenance and the
driver model, beside PEP 503 pages that stay byte for byte what they were; and the find page as a
user meets it, in headless Chromium (Debian's chromium and chromium-driver, driven by selenium)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from farm.fsutil import sha256_file
from farm.provenance.buildinfo import LEDGER_KEYS, BuildInfo
from farm.publish import compat, index
from tests.support.ledgermaker import make_entry
from tests.support.publishfix import fresh_venv, pip_install, serve_dir

if TYPE_CHECKING:  # selenium is imported where the browser runs, so its absence is a skip
    from selenium.webdriver.chrome.webdriver import WebDriver

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("FARM_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))


def _wheel(arch: str, *, cuda: str = "12.8", torch: str = "2.8", nvcc: str | None = "12.8.93",
           python: str = "cp311") -> compat.CompatWheel:
    entry = make_entry("alpha", cuda=cuda, torch=torch, arch=arch, python=python)
    name = entry["filename"]
    data = {k: v for k, v in entry.items() if k not in LEDGER_KEYS}
    data["found"] = {"alpha/_C.so": arch}
    data["toolchain"]["nvcc"] = nvcc
    f = index.describe(name, "0" * 64, 1, b"Metadata-Version: 2.1\nName: alpha\nVersion: 1\n")
    return compat.CompatWheel(f, BuildInfo.from_json(data))


def test_record_from_provenance_and_the_driver_model() -> None:
    rec = compat.record(_wheel("sm_80;sm_90a;compute_90"))
    assert rec["channel"] == "cu128/torch2.8"
    assert rec["driver"] == "525.60.13"
    dev = rec["devices"]
    assert dev["7.5"] == {"kind": "none", "image": None, "cuda_arch": None, "stub_risk": False, "driver": None}
    assert dev["8.6"]["kind"] == "sass"
    assert dev["8.6"]["image"] == "sm_80"
    assert dev["9.0"]["image"] == "sm_90a"
    assert dev["9.0"]["driver"] == "525.60.13"
    # PTX from nvcc 12.8 (ISA 8.7): a GPU that JITs it needs the R570 driver, not just R525
    assert dev["12.0"] == {"kind": "ptx-jit", "image": "compute_90", "cuda_arch": 900, "stub_risk": True,
                           "driver": "570.26"}


def test_never_from_the_file_name() -> None:
    """A wheel named cu130 whose provenance says 12.8 is shown as 12.8; one without provenance
    gets no GPU column at all."""
    w = _wheel("sm_90")
    renamed = compat.CompatWheel(index.describe(w.file.filename.replace("cu128", "cu130"), "0" * 64, 1, None), w.info)
    rec = compat.record(renamed)
    assert rec["cuda"] == "12.8"
    assert rec["driver"] == "525.60.13"
    bare = compat.record(compat.CompatWheel(w.file, None, "no _build_info.json"))
    assert "devices" not in bare
    assert bare["problem"] == "no _build_info.json"
    page = compat.project_page("cu128/torch2.8", "alpha", [bare]).decode()
    assert "no farm provenance (no _build_info.json)" in page
    unknown = compat.record(_wheel(""))  # found: nothing recorded, so no GPU is claimed either way
    assert "devices" not in unknown
    assert unknown["problem"] == "its provenance records no device code"


def test_pages_escape_what_provenance_says() -> None:
    w = _wheel("sm_90")
    hostile = compat.CompatWheel(index.describe("alpha-1+cu128torch2.8-cp311-cp311-linux_x86_64.whl", "0" * 64, 1,
                                                None), w.info, "</script><script>alert(1)</script>")
    pages = compat.render([hostile, w])
    find = pages[compat.FIND_PAGE].decode()
    assert find.count("<script") == 2  # the JSON and find.js, nothing injected
    script = re.search(r'<script id="farm-wheels" type="application/json">(.*?)</script>', find, re.DOTALL)
    assert script, find
    data = json.loads(script[1])
    assert data["wheels"][0]["problem"] == "</script><script>alert(1)</script>"


def test_index_tree_keeps_pep503_bytes_and_prunes_compat(doctor_wheel: Path, tmp_path: Path) -> None:
    root = tmp_path / "index"
    sha = sha256_file(doctor_wheel)
    _, report = index.publish(root, [(doctor_wheel, sha)], lambda n: sha if n == doctor_wheel.name else None)
    stored = index.stored(root, doctor_wheel.name, lambda n: sha)
    for rel, data in index.render([stored]).items():  # what the tree held before compatibility pages
        assert (root / rel).read_bytes() == data, rel
    assert report is not None
    assert {"compat/find.html", "compat/find.js", "compat/cu130/demo-ext.html"} <= set(report.written)
    assert index.regenerate(root, lambda n: sha).written == ()  # deterministic
    (root / "compat" / "cu129").mkdir()
    (root / "compat" / "cu129" / "gone.html").write_text("stale")
    index.regenerate(root, lambda n: sha)
    assert not (root / "compat" / "cu129").exists()


def _browser() -> WebDriver:
    """Headless Chromium through chromedriver, or the reason it cannot run (a failure under CI)."""
    missing = [tool for tool in ("chromium", "chromedriver") if shutil.which(tool) is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        reason = (f"{', '.join(missing)} not installed: apt-get install chromium chromium-driver; "
                  "pip install selenium (.ci/run installs them)")
        if os.environ.get("CI") == "true":
            pytest.fail(f"under CI the browser test must run: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def test_find_page_in_chromium(doctor_wheel: Path, tmp_path: Path) -> None:
    """A user opens compat/find.html on the served index, picks a GPU, reads the table and copies
    the pip command, which installs the wheel."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    root = tmp_path / "index"
    sha = sha256_file(doctor_wheel)
    index.publish(root, [(doctor_wheel, sha)], lambda n: sha if n == doctor_wheel.name else None)
    server, url = serve_dir(root, tmp_path / "http.log")
    driver = _browser()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        driver.get(f"{url}/compat/find.html")

        def pick(gpu: str) -> tuple[list[list[str]], str, str]:
            Select(driver.find_element(By.ID, "gpu")).select_by_value(gpu)
            rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                    for tr in driver.find_elements(By.CSS_SELECTOR, "#rows tr")]
            return rows, driver.find_element(By.ID, "verdict").text, driver.find_element(By.ID, "pip").text

        spec = f"demo-ext=={doctor_wheel.name.split('-')[1]}"
        command = f"pip install --index-url {url}/cu130/ '{spec}'"
        rows, verdict, pip = pick("8.6")
        assert [r[5] for r in rows] == ["SASS sm_86"]
        assert rows[0][6] == ">= 580"
        assert pip == command
        assert rows[0][7] == command
        assert driver.find_element(By.ID, "uv").text == f"uv {command}"
        python = doctor_wheel.name.split("-")[2]
        for select, value in (("cuda", "13.0"), ("torch", "none"), ("python", python), ("platform", "linux_x86_64")):
            Select(driver.find_element(By.ID, select)).select_by_value(value)  # each filter keeps the wheel
            assert driver.find_element(By.ID, "count").text == "1 wheel(s)"
        driver.save_screenshot(str(ARTIFACTS / "compat-find-8.6.png"))

        rows, verdict, _ = pick("9.0")
        assert [r[5] for r in rows] == ["JIT compute_86 (stub risk)"]
        assert "PTX JIT" in verdict

        rows, verdict, pip = pick("7.5")
        assert rows == []
        assert pip == ""
        assert verdict == "No wheel here runs on GPU 7.5 with these filters."
        driver.save_screenshot(str(ARTIFACTS / "compat-find-7.5.png"))

        driver.get(f"{url}/compat/find.html?gpu=8.9")  # the link farm doctor prints preselects
        assert driver.find_element(By.ID, "pip").text == command

        driver.get(f"{url}/compat/cu130/demo-ext.html")
        cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "tbody td")]
        assert cells[1:4] == ["none", "SASS sm_80", "SASS sm_86"]
        assert command in [c.text for c in driver.find_elements(By.TAG_NAME, "code")]
        driver.save_screenshot(str(ARTIFACTS / "compat-demo-ext.png"))
        log = driver.get_log("browser")  # type: ignore[no-untyped-call]
        errors = [e for e in log if e["level"] == "SEVERE" and "favicon" not in e["message"]]
        assert errors == []

        venv_python = fresh_venv(tmp_path / "venv")  # the command the page shows installs the wheel
        proc = pip_install(venv_python, "--no-deps", "--index-url", f"{url}/cu130/", spec)
        assert proc.returncode == 0, proc.stderr
    finally:
        driver.quit()
        server.stop()
