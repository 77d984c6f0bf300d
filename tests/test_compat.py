"""The index's compatibility pages (farm/publish/compat.py): generated from provenance and the
device and driver models, beside PEP 503 pages that stay byte for byte what they were; and the
pages as a user meets them, in headless Chromium (Debian's chromium and chromium-driver, driven by
selenium) at a desktop and a phone width, one test per case. The browser tests read a fleet of
records made from provenance (fast); the slow test installs real farm-built wheels, one with a
PyPI requirement and a farm pin, with the commands the page shows, by pip and by uv."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from farm.fsutil import sha256_file
from farm.model.install import FIND_PAGE, commands
from farm.provenance.buildinfo import LEDGER_KEYS, BuildInfo
from farm.publish import compat, index
from tests.support.cudafix import BASE, CudaFixtures
from tests.support.ledgermaker import make_entry
from tests.support.publishfix import fresh_venv, pip_install, serve_dir, stamped_fleet, uv_install

if TYPE_CHECKING:  # selenium is imported where the browser runs, so its absence is a skip
    from selenium.webdriver.chrome.webdriver import WebDriver

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("FARM_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True}


def _wheel(project: str, version: str, arch: str, *, cuda: str = "13.0", torch: str = "none",
           platform: str = "linux_x86_64", python: str = "cp311", nvcc: str | None = None,
           requires: tuple[str, ...] = ()) -> compat.CompatWheel:
    entry = make_entry(project, version, cuda=cuda, torch=torch, arch=arch, python=python, platform=platform)
    data = {k: v for k, v in entry.items() if k not in LEDGER_KEYS}
    data["found"] = {f"{project}/_C.so": arch}
    data["toolchain"]["nvcc"] = nvcc or f"{cuda}.88"
    f = index.describe(entry["filename"], entry["sha256"], 1, b"Metadata-Version: 2.1\nName: x\nVersion: 1\n")
    return compat.CompatWheel(f, BuildInfo.from_json(data), requires=requires)


# A fleet that holds each case the pages must tell apart.
FLEET = [
    _wheel("alpha", "1.0", "sm_80;sm_86;sm_90;compute_90"),  # x86: SASS 8.x/9.0, JIT above
    _wheel("alpha", "1.1", "sm_86"),  # a newer version, Ampere only
    _wheel("alpha", "1.0", "sm_80;sm_90;sm_110;sm_120", platform="linux_aarch64"),  # Thor, Spark
    _wheel("alpha", "1.0", "sm_80;sm_90;compute_90", cuda="12.8", platform="linux_aarch64"),  # no Thor: CUDA 12
    _wheel("beta", "2.0", "sm_80;sm_90", cuda="12.8", torch="2.8", requires=("torch==2.8.*", "einops")),
]
SHA = {w.file.filename: w.file.sha256 for w in FLEET}


def _records() -> list[dict[str, Any]]:
    recs = [compat.record(w) for w in FLEET]
    compat.resolve_pins(recs)
    return recs


# -- records ------------------------------------------------------------------------------------
def test_record_from_provenance_and_the_driver_model() -> None:
    rec = compat.record(_wheel("alpha", "1.0", "sm_80;sm_90a;compute_90", cuda="12.8", torch="2.8"))
    assert rec["channel"] == "cu128/torch2.8"
    assert rec["driver"] == "525.60.13"
    dev = rec["devices"]
    assert "7.5" not in dev  # absent: none of it runs there
    assert dev["8.6"]["kind"] == "sass"
    assert dev["8.6"]["image"] == "sm_80"
    assert dev["9.0"]["image"] == "sm_90a"
    assert dev["9.0"]["driver"] == "525.60.13"
    # PTX from nvcc 12.8 (ISA 8.7): a GPU that JITs it needs the R570 driver, not just R525
    assert dev["12.0"] == {"kind": "ptx-jit", "image": "compute_90", "cuda_arch": 900, "stub_risk": True,
                           "driver": "570.26"}
    assert rec["torch_step"] == 'pip install "torch==2.8.*" --index-url https://download.pytorch.org/whl/cu128'


def test_every_gpu_the_lines_build_for_is_judged() -> None:
    """5.0 to 12.1 from the support tables: a Maxwell wheel runs on Maxwell, not only 7.5 up."""
    rec = compat.record(_wheel("old", "1", "sm_50;sm_60;sm_70;compute_70", cuda="12.6", torch="2.8"))
    assert {g: rec["devices"][g]["kind"] for g in ("5.0", "5.2", "6.1", "7.0", "7.5", "8.0")} == {
        "5.0": "sass", "5.2": "sass", "6.1": "sass", "7.0": "sass", "7.5": "sass", "8.0": "ptx-jit"}
    assert "5.3" not in rec["devices"]  # Jetson Nano: not a platform farm builds


def test_platform_ties_decide_before_the_fatbins() -> None:
    x86, thor_spark, cuda12 = (compat.record(w) for w in FLEET[0:1] + FLEET[2:4])
    assert not {"8.7", "11.0", "12.1"} & set(x86["devices"])  # all three are Arm machines
    assert "8.7" not in thor_spark["devices"]  # Orin: sm_80 SASS would load, the SBSA runtime would not
    assert thor_spark["devices"]["11.0"]["image"] == "sm_110"
    assert thor_spark["devices"]["12.1"]["image"] == "sm_120"
    assert "11.0" not in cuda12["devices"]  # Thor runs CUDA 13.0 on
    assert cuda12["devices"]["12.1"]["kind"] == "ptx-jit"


def test_never_from_the_file_name() -> None:
    """A wheel named cu130 whose provenance says 12.8 is shown as 12.8; one without provenance
    gets no GPU at all."""
    w = _wheel("alpha", "1.0", "sm_90", cuda="12.8", torch="2.8")
    renamed = compat.CompatWheel(index.describe(w.file.filename.replace("cu128", "cu130"), "0" * 64, 1, None), w.info)
    rec = compat.record(renamed)
    assert rec["cuda"] == "12.8"
    assert rec["driver"] == "525.60.13"
    bare = compat.record(compat.CompatWheel(w.file, None, "no _build_info.json"))
    assert "devices" not in bare
    assert bare["problem"] == "no _build_info.json"
    page = compat.project_page("cu128/torch2.8", "alpha", [bare]).decode()
    assert "no farm provenance (no _build_info.json)" in page
    unknown = compat.record(_wheel("alpha", "1.0", ""))  # found: nothing recorded, so no GPU is claimed either way
    assert "devices" not in unknown
    assert unknown["problem"] == "its provenance records no device code"


def test_pages_escape_what_provenance_says() -> None:
    w = FLEET[0]
    hostile = compat.CompatWheel(index.describe("alpha-1+cu130-cp311-cp311-linux_x86_64.whl", "0" * 64, 1, None),
                                 w.info, "</script><script>alert(1)</script>")
    pages = compat.render([hostile, w])
    find = pages[FIND_PAGE].decode()
    assert find.count("<script") == 3  # the JSON, install.js and find.js: nothing injected
    script = re.search(r'<script id="farm-wheels" type="application/json">(.*?)</script>', find, re.DOTALL)
    assert script, find
    data = json.loads(script[1])
    assert data["wheels"][0]["problem"] == "</script><script>alert(1)</script>"


def test_farm_pins_resolve_in_their_own_channel() -> None:
    """A farm project a wheel requires is pinned by URL from the wheel's channel; a PyPI project
    is left to the user's index; a farm project the channel cannot satisfy makes the wheel not
    installable from here (never recommended)."""
    base = _wheel("cumm", "0.7", "sm_80")
    abi3 = _wheel("cumm", "0.7", "sm_80", python="abi3", cuda="12.8")
    user = _wheel("spconv", "2.3", "sm_80", requires=("cumm==0.7+cu130", "numpy>=1.24", "cumm[extra]>=0.1"))
    deep = _wheel("top", "1.0", "sm_80", requires=("spconv==2.3+cu130",))
    lost = _wheel("lost", "1.0", "sm_80", requires=("cumm==9.9+cu130",))
    other_line = _wheel("spconv", "2.3", "sm_80", cuda="12.8", requires=("cumm==0.7+cu128",))
    recs = [compat.record(w) for w in (base, abi3, user, deep, lost, other_line)]
    compat.resolve_pins(recs)
    by = {(r["filename"]): r for r in recs}
    assert [p["filename"] for p in by[user.file.filename]["pins"]] == [base.file.filename]
    assert by[user.file.filename]["unresolved"] == []
    assert sorted(p["project"] for p in by[deep.file.filename]["pins"]) == ["cumm", "spconv"]  # transitive
    assert by[lost.file.filename]["unresolved"] == ["cumm==9.9+cu130"]
    assert [p["filename"] for p in by[other_line.file.filename]["pins"]] == [abi3.file.filename]  # abi3 fits cp311


def test_commands_name_each_file_by_url_and_hash_and_no_index() -> None:
    recs = _records()
    alpha = recs[0]
    pip, uv = commands(alpha, "http://127.0.0.1:8000/")
    url = f"http://127.0.0.1:8000/files/alpha-1.0%2Bcu130-cp311-cp311-linux_x86_64.whl#sha256={alpha['sha256']}"
    assert pip == f'pip install "alpha @ {url}"'
    assert uv == f"uv {pip}"
    assert "index-url" not in pip  # no index is added: every other name comes from the user's own


def test_the_index_root_links_the_find_page() -> None:
    root = index.render([w.file for w in FLEET])["index.html"].decode()
    assert '<a href="compat/find.html">Find a wheel for your GPU</a>' in root
    assert '<a href="cu130/">cu130</a>' in root


# -- in the browser -----------------------------------------------------------------------------
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
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


class Page:
    """The browser on the served fleet: open a page at a width, read what a user reads."""

    def __init__(self, driver: WebDriver, url: str) -> None:
        self.driver, self.url = driver, url

    def open(self, path: str, *, phone: bool = False) -> Page:
        if phone:
            self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
        else:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        self.driver.get(f"{self.url}/{path}")
        return self

    def text(self, element_id: str) -> str:
        from selenium.webdriver.common.by import By

        return str(self.driver.find_element(By.ID, element_id).text)

    def commands(self) -> list[str]:
        from selenium.webdriver.common.by import By

        return [c.text for c in self.driver.find_elements(By.CSS_SELECTOR, "#commands code")]

    def rows(self) -> list[dict[str, str]]:
        from selenium.webdriver.common.by import By

        return [{td.get_attribute("data-label") or "": td.text for td in tr.find_elements(By.TAG_NAME, "td")}
                | {"filename": tr.get_attribute("data-filename") or ""}
                for tr in self.driver.find_elements(By.CSS_SELECTOR, "#rows tr")]

    def select(self, element_id: str, value: str) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        Select(self.driver.find_element(By.ID, element_id)).select_by_value(value)

    def widths(self) -> tuple[int, int]:
        """(the layout viewport's width, the document's): a page wider than its viewport scrolls sideways."""
        inner, scroll = self.driver.execute_script(
            "return [window.innerWidth, document.documentElement.scrollWidth]")
        return int(inner), int(scroll)

    def errors(self) -> list[str]:
        log = self.driver.get_log("browser")  # type: ignore[no-untyped-call]
        return [e["message"] for e in log if e["level"] == "SEVERE" and "favicon" not in e["message"]]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    """The fleet's pages and the index root served on 127.0.0.1, and one browser for the module."""
    root = tmp_path_factory.mktemp("site")
    pages = {**index.render([w.file for w in FLEET]), **compat.render(FLEET)}
    for rel, data in pages.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    server, url = serve_dir(root, root.parent / "http.log")
    try:
        driver = _browser()
    except BaseException:
        server.stop()
        raise
    driver.execute_cdp_cmd("Browser.grantPermissions", {"origin": url, "permissions": [
        "clipboardReadWrite", "clipboardSanitizedWrite"]})
    try:
        yield Page(driver, url)
        assert Page(driver, url).errors() == []  # no script error on any page the module opened
    finally:
        driver.quit()
        server.stop()


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.driver.save_screenshot(str(ARTIFACTS / f"compat-{name}.png"))


def test_every_gpu_is_offered_and_named_once(site: Page) -> None:
    from selenium.webdriver.common.by import By

    from farm.model import devices

    site.open("compat/find.html")
    options = [o.text for o in site.driver.find_elements(By.CSS_SELECTOR, "#gpu option")][1:]
    assert options == [devices.label(d) for d in devices.targetable()]
    assert "11.0 Blackwell (Jetson Thor)" in options
    assert site.text("verdict") == "Pick your GPU: the wheels below are not checked against one."
    assert site.commands() == []  # no GPU: nothing recommended
    assert len(site.rows()) == len(FLEET)


def test_a_gpu_gets_the_wheel_that_runs_and_its_commands(site: Page) -> None:
    site.open("compat/find.html?gpu=8.6&platform=linux_x86_64")
    rows = site.rows()
    assert [(r["package"], r["version"], r["on this GPU"]) for r in rows] == [
        ("alpha", "1.1", "SASS sm_86"), ("alpha", "1.0", "SASS sm_86"), ("beta", "2.0", "SASS sm_80")]
    assert site.text("verdict") == ("3 wheel(s) of 2 packages run on 8.6 Ampere (RTX 30xx, A10): pick a "
                                    "package for the one to install.")
    assert site.commands() == []
    site.select("package", "alpha")
    best = next(r for r in _records() if r["version"] == "1.1+cu130")
    assert site.text("verdict").startswith(f"{best['filename']} runs on 8.6 Ampere (RTX 30xx, A10) as SASS")
    assert site.commands() == list(commands(best, f"{site.url}/"))  # the page and Python agree
    _shot(site, "find-8.6")


def test_the_copy_button_puts_the_command_on_the_clipboard(site: Page) -> None:
    from selenium.webdriver.common.by import By

    site.open("compat/find.html?gpu=9.0&package=alpha&version=1.0&platform=linux_x86_64")
    (pip, _) = site.driver.find_elements(By.CSS_SELECTOR, "#commands .cmd")
    pip.find_element(By.CSS_SELECTOR, "button.copy").click()
    assert pip.find_element(By.CSS_SELECTOR, "button.copy").text == "copied"
    pasted = site.driver.execute_async_script(
        "var done=arguments[0];navigator.clipboard.readText().then(done,function(e){done('ERR '+e);});")
    assert pasted == pip.find_element(By.TAG_NAME, "code").text
    assert pasted.startswith('pip install "alpha @ ')


def test_a_known_gpu_no_wheel_runs_on_says_what_would(site: Page) -> None:
    """Volta (7.0): older lines build it, this fleet has nothing for it; no command is offered."""
    site.open("compat/find.html?gpu=7.0")
    assert site.rows() == []
    assert site.commands() == []
    verdict = site.text("verdict")
    assert verdict.startswith("No wheel here runs on 7.0 Volta (V100, Titan V).")
    assert "What would: a build with sm_70 SASS (CUDA 12.4, 12.6, 12.8, 12.9 can build it)" in verdict
    _shot(site, "find-7.0")


def test_an_unknown_gpu_value_gets_no_wheel(site: Page) -> None:
    site.open("compat/find.html?gpu=13.7")
    assert site.rows() == []
    assert site.commands() == []
    assert site.text("verdict").startswith("No wheel here is known to run on GPU 13.7")
    assert "sm_137 SASS" in site.text("verdict")
    site.open("compat/find.html?gpu=%3Cb%3Eh100")
    assert site.rows() == []
    assert site.text("verdict").startswith('"<b>h100" is not a compute capability')


def test_jetson_orin_gets_no_wheel_of_the_farm(site: Page) -> None:
    """sm_80 SASS would load on 8.7, but the Arm server runtime does not run on Orin."""
    site.open("compat/find.html?gpu=8.7")
    assert site.rows() == []
    assert site.commands() == []
    verdict = site.text("verdict")
    assert "Jetson modules run the CUDA of their JetPack release" in verdict
    assert "What would: a build made with JetPack's CUDA on the Jetson Orin" in verdict


def test_thor_gets_only_arm_wheels_of_cuda_13(site: Page) -> None:
    site.open("compat/find.html?gpu=11.0")
    assert [(r["platform"], r["CUDA"], r["on this GPU"]) for r in site.rows()] == [
        ("linux_aarch64", "13.0", "SASS sm_110")]
    assert "alpha-1.0+cu130-cp311-cp311-linux_aarch64.whl runs on 11.0" in site.text("verdict")
    site.select("cuda", "12.8")
    assert site.rows() == []
    verdict = site.text("verdict")
    assert "Jetson Thor runs linux_aarch64 wheels of CUDA 13.0 or newer only" in verdict
    assert "JetPack 7" in verdict
    assert "1 wheel(s) run there with other filters" in verdict


def test_dgx_spark_gets_only_arm_wheels(site: Page) -> None:
    site.open("compat/find.html?gpu=12.1")
    assert [(r["platform"], r["CUDA"], r["on this GPU"]) for r in site.rows()] == [
        ("linux_aarch64", "13.0", "SASS sm_120"), ("linux_aarch64", "12.8", "JIT compute_90 (stub risk)")]


def test_package_and_version_filters(site: Page) -> None:
    from selenium.webdriver.common.by import By

    site.open("compat/find.html")
    site.select("package", "beta")
    assert {r["package"] for r in site.rows()} == {"beta"}
    versions = [o.get_attribute("value") for o in site.driver.find_elements(By.CSS_SELECTOR, "#version option")]
    assert versions == ["", "2.0"]  # the versions of the package chosen
    site.select("package", "alpha")
    versions = [o.get_attribute("value") for o in site.driver.find_elements(By.CSS_SELECTOR, "#version option")]
    assert versions == ["", "1.1", "1.0"]
    site.select("version", "1.1")
    assert [r["filename"] for r in site.rows()] == ["alpha-1.1+cu130-cp311-cp311-linux_x86_64.whl"]
    site.open("compat/find.html?gpu=9.0&package=beta")  # torch-linked: torch's own index first
    assert site.commands()[0] == 'pip install "torch==2.8.*" --index-url https://download.pytorch.org/whl/cu128'


def test_the_driver_decides_too(site: Page) -> None:
    site.open("compat/find.html?gpu=9.0&package=alpha&platform=linux_x86_64&driver=560.35")
    assert site.rows() == []  # CUDA 13.0 needs branch 580
    assert "1 wheel(s) run there with a newer driver (>= 580)" in site.text("verdict")
    site.open("compat/find.html?gpu=9.0&package=alpha&platform=linux_x86_64&driver=580.65.06")
    assert len(site.rows()) == 1
    site.open("compat/find.html?gpu=9.0&driver=latest")
    assert site.text("verdict").startswith('"latest" is not a driver version')


def test_the_pages_fit_a_phone(site: Page) -> None:
    for path in ("compat/find.html?gpu=8.6&package=alpha", "compat/cu130/alpha.html", "index.html"):
        site.open(path, phone=True)
        inner, scroll = site.widths()
        assert inner == PHONE["width"], path  # the viewport meta: laid out at the phone's width, not 980 px
        assert scroll <= inner, path  # nothing scrolls sideways
    site.open("compat/find.html?gpu=8.6&package=alpha", phone=True)
    assert site.commands()  # the commands are there, wrapped
    _shot(site, "find-8.6-phone")


def test_the_project_page_on_a_desktop(site: Page) -> None:
    from selenium.webdriver.common.by import By

    site.open("compat/cu130/alpha.html")
    assert site.driver.execute_script("return document.querySelector('main').getBoundingClientRect().width") <= 1280
    assert site.widths()[1] <= site.widths()[0]
    sections = site.driver.find_elements(By.CSS_SELECTOR, "section.wheel")
    assert len(sections) == 3
    chips = [c.text for c in sections[0].find_elements(By.CSS_SELECTOR, ".chip")]
    assert chips[:3] == ["5.0 none", "5.2 none", "5.3 none"]
    assert "8.6 SASS sm_86" in chips
    assert "12.0 JIT compute_90 (stub risk)" in chips
    orin = sections[0].find_element(By.XPATH, ".//span[starts-with(., '8.7 ')]")
    assert "Jetson Orin" in (orin.get_attribute("title") or "")
    codes = [c.text for c in sections[0].find_elements(By.CSS_SELECTOR, ".install code")]
    rec = next(r for r in _records() if r["filename"] == sections[0].get_attribute("data-filename"))
    assert codes == list(commands(rec, f"{site.url}/"))
    _shot(site, "project-alpha")


def test_the_index_root_leads_to_the_find_page(site: Page) -> None:
    from selenium.webdriver.common.by import By

    site.open("index.html")
    site.driver.find_element(By.LINK_TEXT, "Find a wheel for your GPU").click()
    assert site.driver.current_url == f"{site.url}/compat/find.html"
    assert site.driver.find_element(By.TAG_NAME, "h1").text == "Find a wheel for your GPU"


# -- the real thing: farm-built wheels on a served index, installed by the page's commands -----
def test_index_tree_keeps_pep503_bytes_and_prunes_compat(doctor_wheel: Path, tmp_path: Path) -> None:
    root = tmp_path / "index"
    sha = sha256_file(doctor_wheel)
    report = index.publish_each(root, [(doctor_wheel, sha)], lambda n: sha if n == doctor_wheel.name else None).report
    stored = index.stored(root, doctor_wheel.name, lambda n: sha)
    for rel, data in index.render([stored]).items():  # what the tree held before compatibility pages
        assert (root / rel).read_bytes() == data, rel
    assert report is not None
    assert {"compat/find.html", "compat/find.js", "compat/install.js", "compat/compat.css",
            "compat/cu130/demo-ext.html"} <= set(report.written)
    assert index.regenerate(root, lambda n: sha).written == ()  # deterministic
    (root / "compat" / "cu129").mkdir()
    (root / "compat" / "cu129" / "gone.html").write_text("stale")
    index.regenerate(root, lambda n: sha)
    assert not (root / "compat" / "cu129").exists()


@pytest.fixture(scope="module")
def served_fleet(cuda_fixtures: CudaFixtures, cuda_home: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Path]]]:
    """Two farm-built wheels on an index served on 127.0.0.1: demo_pin, and demo_top, which
    requires einops (a PyPI project) and demo_pin of its own cell (a farm pin)."""
    work = tmp_path_factory.mktemp("pinfleet")
    _, wheels = stamped_fleet(work, cuda_fixtures.path("default"), cuda_home, ["demo_pin", "demo_top"], arch=BASE,
                              recipe_lines={"demo_top": "requires_dist: [einops, "
                                                        "'demo_pin=={version:demo_pin}+{local:demo_pin}']\n"})
    root = work / "index"
    shas = {p.name: sha256_file(p) for p in wheels.values()}
    assert index.publish_each(root, [(p, shas[p.name]) for p in wheels.values()], shas.get).report is not None
    server, url = serve_dir(root, work / "http.log")
    try:
        yield url, wheels
    finally:
        server.stop()


def _page_commands(url: str, query: str) -> list[str]:
    page = Page(_browser(), url)
    try:
        page.open(f"compat/find.html?{query}")
        assert page.errors() == []
        return page.commands()
    finally:
        page.driver.quit()


def _run_command(command: str, python: Path) -> subprocess.CompletedProcess[str]:
    """A command the page shows, run as a user runs it, into ``python``'s environment."""
    import shlex

    tool, *args = shlex.split(command)
    if tool == "uv":
        assert args[:2] == ["pip", "install"]
        return uv_install(python, *args[2:])
    assert args[0] == "install"
    return pip_install(python, *args[1:])


@pytest.mark.slow
def test_the_page_commands_install_a_wheel_with_its_dependencies(served_fleet: tuple[str, dict[str, Path]],
                                                                 tmp_path: Path) -> None:
    """pip and uv, each in a fresh venv, run the commands the page shows for demo_top: the farm's
    two files come by URL and hash, einops from PyPI (the machine's default index; pip_install
    and uv_install drop the machine's own pip and uv configuration). The same command with a
    hash the file does not have installs nothing."""
    url, wheels = served_fleet
    commands = _page_commands(url, "gpu=8.6&package=demo-top")
    assert len(commands) == 2, commands
    assert all(f"{url}/files/" in c and "index-url" not in c for c in commands)
    for command in commands:
        python = fresh_venv(tmp_path / command.split()[0])
        proc = _run_command(command, python)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        names = "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))"
        check = subprocess.run([str(python), "-c", f"import importlib.metadata as m, json; {names}"],
                               capture_output=True, text=True, check=True, cwd=tmp_path)
        assert json.loads(check.stdout) == ["demo_pin", "demo_top", "einops"]

    pin = sha256_file(wheels["demo_pin"])
    tampered = commands[0].replace(pin, "0" * 64)
    assert tampered != commands[0]
    python = fresh_venv(tmp_path / "tampered")
    for command in (tampered, f"uv {tampered}"):
        proc = _run_command(command, python)
        assert proc.returncode != 0
        assert "hash" in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
