"""Package indexes and downloads: the one reader of simple-API pages (PEP 503 HTML and PEP 691
JSON) and the one download function (a byte cap, sha256 on the fly, progress lines).

``parse_page`` is pure; ``read_page`` and ``download`` do the I/O and raise :class:`NetworkError`
(or its :class:`TooLarge`), which each caller words for its own step (a source fetch, an audit,
a toolkit download, a twine listing).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from farm.errors import NetworkError, TooLarge
from farm.progress import Say

# PEP 691: JSON preferred, HTML accepted (a static PEP 503 tree serves text/html).
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
# Nothing a real index serves is larger: a page lists links.
MAX_PAGE_BYTES = 64 << 20
CHUNK = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class IndexFile:
    """One file a project page links: its name, absolute URL (no fragment) and sha256 if given."""

    filename: str
    url: str
    sha256: str | None


@dataclass(frozen=True)
class IndexPage:
    """A simple-API page: the files it links, and the pages below it (a root's project pages)."""

    url: str
    files: tuple[IndexFile, ...]
    pages: tuple[str, ...]


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or None
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.anchors.append((self._href, "".join(self._text).strip()))
            self._href = None

    def close(self) -> None:
        super().close()
        if self._href is not None:  # an unclosed last anchor still links
            self.anchors.append((self._href, "".join(self._text).strip()))
            self._href = None


def _sha256(value: object) -> str | None:
    text = str(value).lower() if value else ""
    return text if _SHA256.fullmatch(text) else None


def _file(url: str, filename: str, sha256: str | None) -> IndexFile:
    return IndexFile(filename or urllib.parse.unquote(PurePosixPath(urllib.parse.urlsplit(url).path).name),
                     url, sha256)


def parse_page(body: bytes, content_type: str, page_url: str) -> IndexPage:
    """The files and sub-pages of one page (pure). ValueError when JSON is not PEP 691's shape."""
    files: list[IndexFile] = []
    pages: list[str] = []
    looks_json = "json" in content_type or (not content_type and body.lstrip()[:1] == b"{")
    if looks_json:
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise ValueError("the JSON page is not an object")
        for entry in doc.get("files", []):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("url"), str):
                raise ValueError(f"a file entry without a url: {entry!r}"[:200])
            url = urllib.parse.urldefrag(urllib.parse.urljoin(page_url, entry["url"])).url
            hashes = entry.get("hashes") or {}
            files.append(_file(url, str(entry.get("filename", "")), _sha256(hashes.get("sha256"))))
        for project in doc.get("projects", []):  # a root page
            name = project.get("name") if isinstance(project, Mapping) else None
            if isinstance(name, str) and name:
                pages.append(urllib.parse.urljoin(page_url, f"{canonicalize_name(name)}/"))
        return IndexPage(page_url, tuple(files), tuple(pages))
    parser = _Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    parser.close()
    for href, text in parser.anchors:
        url, fragment = urllib.parse.urldefrag(urllib.parse.urljoin(page_url, href))
        if url.endswith("/"):
            pages.append(url)
            continue
        key, _, value = fragment.partition("=")
        files.append(_file(url, text, _sha256(value) if key == "sha256" else None))
    return IndexPage(page_url, tuple(files), tuple(pages))


def project_url(index: str, project: str) -> str:
    """A project's page under a simple-API root (PEP 503's normalised name)."""
    return f"{index.rstrip('/')}/{canonicalize_name(project)}/"


def _open(request: urllib.request.Request | str, timeout: float) -> http.client.HTTPResponse:
    url = request.full_url if isinstance(request, urllib.request.Request) else request
    try:
        response: http.client.HTTPResponse = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise NetworkError(f"{url} answered HTTP {exc.code} {exc.reason}", url=url, status=exc.code) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise NetworkError(f"cannot reach {url}: {reason}", url=url) from None
    return response


def read_page(url: str, *, headers: Mapping[str, str] | None = None, timeout: float = 60.0) -> IndexPage:
    """GET one simple-API page (JSON preferred) and parse it; at most :data:`MAX_PAGE_BYTES`."""
    cap = MAX_PAGE_BYTES
    request = urllib.request.Request(url, headers={"Accept": ACCEPT, **(headers or {})})
    with _open(request, timeout) as response:
        try:
            body = response.read(cap + 1)
        except (http.client.HTTPException, OSError) as exc:
            raise NetworkError(f"reading {url} failed: {exc}", url=url) from None
        final = response.geturl()
        content_type = response.headers.get("Content-Type", "")
    if len(body) > cap:
        raise TooLarge(f"{url}: index page larger than {cap >> 20} MiB", url=url, cap=cap)
    return parse_page(body, content_type, final)


@dataclass(frozen=True)
class Downloaded:
    size: int
    sha256: str


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def download(url: str, dest: Path, *, max_bytes: int, timeout: float = 300.0,
             progress: Say | None = None, label: str | None = None) -> Downloaded:
    """Stream ``url`` to ``dest`` (through a ``.part`` file: ``dest`` appears whole or not at all);
    return its size and sha256. :class:`TooLarge` past ``max_bytes`` (the disk never holds more),
    :class:`NetworkError` when unreachable or cut off. ``progress`` hears a line about every tenth
    of the file (every 64 MB when the server does not say its length)."""
    say = progress or (lambda _message: None)
    what = label or PurePosixPath(urllib.parse.urlsplit(url).path).name or url
    part = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    size = 0
    try:
        with _open(url, timeout) as response, part.open("wb") as out:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            step = max(total // 10, CHUNK) if total else 64 << 20
            say(f"{what}: downloading {url}" + (f" ({_mb(total)})" if total else ""))
            mark = step
            try:
                while chunk := response.read(CHUNK):
                    size += len(chunk)
                    if size > max_bytes:
                        raise TooLarge(f"{url}: more than {max_bytes:,} bytes", url=url, cap=max_bytes)
                    digest.update(chunk)
                    out.write(chunk)
                    if size >= mark:
                        say(f"{what}: {_mb(size)}" + (f" of {_mb(total)}" if total else ""))
                        mark = (size // step + 1) * step
            except (http.client.HTTPException, ConnectionError, TimeoutError) as exc:
                raise NetworkError(f"the download of {url} was interrupted after {size} bytes "
                                   f"({type(exc).__name__})", url=url) from None
            if total is not None and size != total:  # read(n) returns short at a hang-up, raising nothing
                raise NetworkError(f"the download of {url} was interrupted after {size} bytes "
                                   f"(of {total})", url=url)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return Downloaded(size, digest.hexdigest())
