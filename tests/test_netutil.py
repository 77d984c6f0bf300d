"""farm.netutil: the one simple-API reader (PEP 503 HTML, PEP 691 JSON) and the one download
function, against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.errors import NetworkError, TooLarge
from farm.netutil import ACCEPT, LinkedFile, download, parse_page, project_url, read_page
from tests.support import loopback

NAME = "demo_ext-0.1.0+cu130-cp311-cp311-linux_x86_64.whl"
HTML = (f'<html><body><a href="../../packages/demo_ext-0.1.0%2Bcu130-cp311-cp311-linux_x86_64.whl'
        f'#sha256={"A" * 64}">{NAME}</a><br>\n<a href="/packages/other.tar.gz#md5=00">other.tar.gz</a>'
        '<a href="sub/">sub</a></body></html>')
JSON = {"meta": {"api-version": "1.1"}, "name": "demo-ext",
        "files": [{"filename": NAME, "url": "../../packages/x.whl", "hashes": {"sha256": "b" * 64}},
                  {"filename": "other.tar.gz", "url": "/packages/other.tar.gz", "hashes": {}}]}


def test_an_html_page_and_a_json_page_read_the_same() -> None:
    html = parse_page(HTML.encode(), "text/html", "http://127.0.0.1:1/simple/demo-ext/")
    assert html.files == (
        LinkedFile(NAME, "http://127.0.0.1:1/packages/demo_ext-0.1.0%2Bcu130-cp311-cp311-linux_x86_64.whl", "a" * 64),
        LinkedFile("other.tar.gz", "http://127.0.0.1:1/packages/other.tar.gz", None),
    )
    assert html.pages == ("http://127.0.0.1:1/simple/demo-ext/sub/",)
    page = parse_page(json.dumps(JSON).encode(), "application/vnd.pypi.simple.v1+json",
                      "http://127.0.0.1:1/simple/demo-ext/")
    assert page.files == (LinkedFile(NAME, "http://127.0.0.1:1/packages/x.whl", "b" * 64),
                          LinkedFile("other.tar.gz", "http://127.0.0.1:1/packages/other.tar.gz", None))
    root = parse_page(json.dumps({"meta": {"api-version": "1.0"}, "projects": [{"name": "Demo_Ext"}]}).encode(),
                      "application/vnd.pypi.simple.v1+json", "http://127.0.0.1:1/simple/")
    assert root.pages == ("http://127.0.0.1:1/simple/demo-ext/",)


def test_json_that_is_not_pep_691_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not an object"):
        parse_page(b"[1, 2]", "application/json", "http://x/")
    with pytest.raises(ValueError, match="without a url"):
        parse_page(b'{"files": [{"filename": "a.whl"}]}', "application/vnd.pypi.simple.v1+json", "http://x/")


def test_project_url_normalises_the_name() -> None:
    assert project_url("http://h/simple", "Demo.Ext_x") == "http://h/simple/demo-ext-x/"
    assert project_url("http://h/simple/", "demo") == "http://h/simple/demo/"


BLOB = bytes(range(256)) * 4096  # 1 MiB


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/simple/demo-ext/":
            wants_json = "json" in self.headers.get("Accept", "")
            body = json.dumps(JSON).encode() if wants_json else HTML.encode()
            kind = "application/vnd.pypi.simple.v1+json" if wants_json else "text/html"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("X-Accept", self.headers.get("Accept", ""))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/blob":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BLOB)))
            self.end_headers()
            self.wfile.write(BLOB)
        elif self.path == "/cut":  # promises more than it sends, then hangs up
            self.send_response(200)
            self.send_header("Content-Length", str(len(BLOB) * 2))
            self.end_headers()
            self.wfile.write(BLOB)
            self.close_connection = True
        else:
            self.send_error(404)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with loopback.serve(handler=_Handler) as url:
        yield url.rstrip("/")


def test_read_page_asks_for_json_first(server: str) -> None:
    assert "application/vnd.pypi.simple.v1+json" in ACCEPT.split(",")[0]
    page = read_page(f"{server}/simple/demo-ext/")
    assert page.files[0] == LinkedFile(NAME, f"{server}/packages/x.whl", "b" * 64)
    with pytest.raises(NetworkError) as info:
        read_page(f"{server}/simple/nothing/")
    assert info.value.status == 404


def test_read_page_of_an_unreachable_index_names_it() -> None:
    with pytest.raises(NetworkError, match="cannot reach http://127.0.0.1:9/") as info:
        read_page("http://127.0.0.1:9/simple/")
    assert info.value.status is None


def test_download_hashes_caps_and_reports(server: str, tmp_path: Path) -> None:
    lines: list[str] = []
    got = download(f"{server}/blob", tmp_path / "blob", max_bytes=len(BLOB), progress=lines.append)
    assert (got.size, got.sha256) == (len(BLOB), hashlib.sha256(BLOB).hexdigest())
    assert (tmp_path / "blob").read_bytes() == BLOB
    assert lines[0] == f"blob: downloading {server}/blob (1.0 MB)"
    assert lines[-1] == "blob: 1.0 MB of 1.0 MB"
    with pytest.raises(TooLarge) as info:
        download(f"{server}/blob", tmp_path / "small", max_bytes=1000)
    assert info.value.cap == 1000
    assert list(tmp_path.iterdir()) == [tmp_path / "blob"]  # nothing left of the refused one


def test_a_cut_download_leaves_nothing(server: str, tmp_path: Path) -> None:
    with pytest.raises(NetworkError, match="interrupted after"):
        download(f"{server}/cut", tmp_path / "cut", max_bytes=10 << 20)
    assert list(tmp_path.iterdir()) == []


def test_a_trickling_page_ends_at_the_deadline_naming_its_url() -> None:
    """A server on 127.0.0.1 that sends one byte every 0.2 s, each well within the stall timeout:
    the overall deadline ends the read, and the error names the URL."""
    stop = threading.Event()

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            while not stop.wait(0.2):
                try:
                    self.wfile.write(b"<")
                    self.wfile.flush()
                except OSError:
                    return

        def log_message(self, format: str, *args: object) -> None:
            pass

    with loopback.serve(handler=Trickle) as url:
        started = time.monotonic()
        with pytest.raises(NetworkError, match=rf"{url}torch/ did not finish within 1 s"):
            read_page(f"{url}torch/", timeout=5, deadline=1)
        elapsed = time.monotonic() - started
        stop.set()
    assert elapsed < 2


def test_a_server_trickling_its_headers_ends_at_the_deadline(tmp_path: Path) -> None:
    """The status line itself, a byte every 0.2 s: the deadline covers the headers too (the
    connection is cut when the time is up), and nothing is left behind."""
    stop = threading.Event()

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx" * 100:
                if stop.wait(0.2):
                    return
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    return

        def log_message(self, format: str, *args: object) -> None:
            pass

    with loopback.serve(handler=Trickle) as url:
        started = time.monotonic()
        with pytest.raises(NetworkError, match=rf"{url}x.whl did not finish within 1 s"):
            download(f"{url}x.whl", tmp_path / "x.whl", max_bytes=10, timeout=5, deadline=1)
        elapsed = time.monotonic() - started
        stop.set()
    assert elapsed < 2
    assert list(tmp_path.iterdir()) == []
