"""Package indexes and downloads: the one reader of simple-API pages (PEP 503 HTML and PEP 691
JSON) and the one download function (a byte cap, sha256 on the fly, progress lines).

``parse_page`` is pure; ``read_page`` and ``download`` do the I/O and raise :class:`NetworkError`
(or its :class:`TooLarge`), which each caller words for its own step (a source fetch, an audit,
a toolkit download, a twine listing).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any, Self

from packaging.utils import canonicalize_name

from farm import jsonread
from farm.errors import NetworkError, TooLarge
from farm.fsutil import SHA256_HEX
from farm.progress import Say

# PEP 691: JSON preferred, HTML accepted (a static PEP 503 tree serves text/html).
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
# Nothing a real index serves is larger: a page lists links.
MAX_PAGE_BYTES = 64 << 20
# Every request ends within this many seconds, however the server paces its bytes; a download of
# up to N bytes within max(DEADLINE, N / MIN_RATE) seconds (a slow link's pace for its size).
DEADLINE = 300.0
MIN_RATE = 1 << 20  # bytes per second
CHUNK = 1 << 20


@dataclass(frozen=True)
class LinkedFile:
    """One file a project page links: its name, absolute URL (no fragment), sha256 if given, and
    whether the index serves its core metadata at ``url + ".metadata"`` (PEP 658 / PEP 714)."""

    filename: str
    url: str
    sha256: str | None
    metadata: bool = False
    size: int | None = None  # PEP 700's ``size`` (JSON pages only)


@dataclass(frozen=True)
class IndexPage:
    """A simple-API page: the files it links, and the pages below it (a root's project pages)."""

    url: str
    files: tuple[LinkedFile, ...]
    pages: tuple[str, ...]


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[str, str, bool]] = []
        self._href: str | None = None
        self._metadata = False
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            named = dict(attrs)
            self._href = named.get("href") or None
            self._metadata = _has_metadata(named.get("data-core-metadata", named.get("data-dist-info-metadata")))
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.anchors.append((self._href, "".join(self._text).strip(), self._metadata))
            self._href = None

    def close(self) -> None:
        super().close()
        if self._href is not None:  # an unclosed last anchor still links
            self.anchors.append((self._href, "".join(self._text).strip(), self._metadata))
            self._href = None


def _has_metadata(value: object) -> bool:
    """PEP 714's ``core-metadata`` (PEP 658's older name ``dist-info-metadata``): absent or false
    when the index serves none; ``true`` or a hash mapping / ``sha256=...`` when it does."""
    return value is not None and value is not False and value != "false"


def _sha256(value: object) -> str | None:
    text = str(value).lower() if value else ""
    return text if SHA256_HEX.fullmatch(text) else None


def _file(url: str, filename: str, sha256: str | None, metadata: bool = False, size: int | None = None) -> LinkedFile:
    return LinkedFile(filename or urllib.parse.unquote(PurePosixPath(urllib.parse.urlsplit(url).path).name),
                      url, sha256, metadata, size)


def parse_page(body: bytes, content_type: str, page_url: str) -> IndexPage:
    """The files and sub-pages of one page (pure). ValueError when JSON is not PEP 691's shape."""
    files: list[LinkedFile] = []
    pages: list[str] = []
    looks_json = "json" in content_type or (not content_type and body.lstrip()[:1] == b"{")
    if looks_json:
        doc = jsonread.loads(body)
        if not isinstance(doc, dict):
            raise ValueError("the JSON page is not an object")
        entries, projects = doc.get("files", []), doc.get("projects", [])
        if not isinstance(entries, list) or not isinstance(projects, list):
            raise ValueError("'files' and 'projects' of a JSON page must be lists")
        for entry in entries:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("url"), str):
                raise ValueError(f"a file entry without a url: {entry!r}"[:200])  # noqa: TRY004 (a malformed page)
            url = urllib.parse.urldefrag(urllib.parse.urljoin(page_url, entry["url"])).url
            hashes = entry.get("hashes") or {}
            hashes = hashes if isinstance(hashes, Mapping) else {}
            metadata = _has_metadata(entry.get("core-metadata", entry.get("dist-info-metadata")))
            size = entry.get("size")
            files.append(_file(url, str(entry.get("filename", "")), _sha256(hashes.get("sha256")), metadata,
                               size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None))
        for project in projects:  # a root page
            name = project.get("name") if isinstance(project, Mapping) else None
            if isinstance(name, str) and name:
                pages.append(urllib.parse.urljoin(page_url, f"{canonicalize_name(name)}/"))
        return IndexPage(page_url, tuple(files), tuple(pages))
    parser = _Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    parser.close()
    for href, text, metadata in parser.anchors:
        url, fragment = urllib.parse.urldefrag(urllib.parse.urljoin(page_url, href))
        if url.endswith("/"):
            pages.append(url)
            continue
        key, _, value = fragment.partition("=")
        files.append(_file(url, text, _sha256(value) if key == "sha256" else None, metadata))
    return IndexPage(page_url, tuple(files), tuple(pages))


def project_url(index: str, project: str) -> str:
    """A project's page under a simple-API root (PEP 503's normalised name)."""
    return f"{index.rstrip('/')}/{canonicalize_name(project)}/"


class Deadline:
    """One request's overall time limit, headers included: a watchdog shuts the connection's
    socket down when the time is up, so a server that trickles a byte now and then (each within
    the stall timeout) still ends on time. Use as a context manager around the whole request."""

    def __init__(self, url: str, seconds: float) -> None:
        self.url, self.seconds = url, seconds
        self.at = time.monotonic() + seconds
        self._timers: list[threading.Timer] = []

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def error(self) -> NetworkError:
        return NetworkError(f"{self.url} did not finish within {self.seconds:g} s (a stalled or trickling "
                            "server)", url=self.url)

    def watch(self, sock: socket.socket) -> None:
        """Cut ``sock`` at the deadline (a blocked read then returns at once)."""
        def cut() -> None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(max(0.0, self.at - time.monotonic()), cut)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for timer in self._timers:
            timer.cancel()

    def opener(self, *handlers: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
        """urllib's opener (with ``handlers``), its HTTP(S) connections watched by this deadline."""
        deadline = self

        def watched(kind: type[http.client.HTTPConnection]) -> Callable[..., http.client.HTTPConnection]:
            def connection(host: str, **kwargs: Any) -> http.client.HTTPConnection:
                conn = kind(host, **kwargs)
                connect = conn.connect

                def connect_and_watch() -> None:
                    connect()
                    deadline.watch(conn.sock)

                conn.connect = connect_and_watch  # type: ignore[method-assign]
                return conn

            return connection

        class Http(urllib.request.HTTPHandler):
            def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(watched(http.client.HTTPConnection), req)

        class Https(urllib.request.HTTPSHandler):
            def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(watched(http.client.HTTPSConnection), req,
                                    context=self._context)  # type: ignore[attr-defined]

        return urllib.request.build_opener(Http, Https, *handlers)


def _open(request: urllib.request.Request | str, timeout: float, deadline: Deadline) -> http.client.HTTPResponse:
    url = request.full_url if isinstance(request, urllib.request.Request) else request
    if deadline.passed():
        raise deadline.error()
    try:
        response: http.client.HTTPResponse = deadline.opener().open(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()  # the error holds the response: its body is unread, its socket still open
        raise NetworkError(f"{url} answered HTTP {exc.code} {exc.reason}", url=url, status=exc.code) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        if deadline.passed():
            raise deadline.error() from None
        reason = getattr(exc, "reason", None) or exc
        raise NetworkError(f"cannot reach {url}: {reason}", url=url) from None
    return response


def read_body(response: http.client.HTTPResponse, url: str, deadline: Deadline, max_bytes: int) -> Iterator[bytes]:
    """The body in chunks as they arrive; :class:`TooLarge` past ``max_bytes``, the deadline's
    error when it cut the connection."""
    size = 0
    while True:
        try:
            chunk = response.read1(CHUNK) if hasattr(response, "read1") else response.read(CHUNK)
        except (http.client.HTTPException, ConnectionError, TimeoutError, OSError) as exc:
            if deadline.passed():
                raise deadline.error() from None
            raise NetworkError(f"the download of {url} was interrupted after {size} bytes "
                               f"({type(exc).__name__})", url=url) from None
        if not chunk:
            if deadline.passed():  # cut at the deadline: the end of the body is not the end of the file
                raise deadline.error()
            return
        size += len(chunk)
        if size > max_bytes:
            raise TooLarge(f"{url}: more than {max_bytes:,} bytes", url=url, cap=max_bytes)
        yield chunk


def fetch_bytes(url: str, *, max_bytes: int, timeout: float = 60.0, deadline: float = DEADLINE,
                headers: Mapping[str, str] | None = None) -> tuple[bytes, str, str]:
    """The body of ``url`` (at most ``max_bytes``, within ``deadline`` seconds in all), its final
    URL and its Content-Type. :class:`NetworkError` naming the URL otherwise."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    with Deadline(url, deadline) as limit, _open(request, timeout, limit) as response:
        body = b"".join(read_body(response, url, limit, max_bytes))
        return body, response.geturl(), response.headers.get("Content-Type", "")


def read_page(url: str, *, headers: Mapping[str, str] | None = None, timeout: float = 60.0,
              deadline: float = DEADLINE) -> IndexPage:
    """GET one simple-API page (JSON preferred) and parse it; at most :data:`MAX_PAGE_BYTES`."""
    cap = MAX_PAGE_BYTES
    try:
        body, final, content_type = fetch_bytes(url, max_bytes=cap, timeout=timeout, deadline=deadline,
                                                headers={"Accept": ACCEPT, **(headers or {})})
    except TooLarge:
        raise TooLarge(f"{url}: index page larger than {cap >> 20} MiB", url=url, cap=cap) from None
    return parse_page(body, content_type, final)


@dataclass(frozen=True)
class Downloaded:
    size: int
    sha256: str


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def deadline_for(max_bytes: int) -> float:
    """A download's time limit: a slow link's pace for its size, never less than :data:`DEADLINE`."""
    return max(DEADLINE, max_bytes / MIN_RATE)


def download(url: str, dest: Path, *, max_bytes: int, timeout: float = 300.0, deadline: float | None = None,
             progress: Say | None = None, label: str | None = None) -> Downloaded:
    """Stream ``url`` to ``dest`` (through a ``.part`` file: ``dest`` appears whole or not at all);
    return its size and sha256. :class:`TooLarge` past ``max_bytes`` (the disk never holds more),
    :class:`NetworkError` when unreachable, cut off, silent for ``timeout`` seconds or not done
    within ``deadline`` seconds in all (default: :func:`deadline_for` ``max_bytes``). ``progress``
    hears a line about every tenth of the file (every 64 MB when the server does not say its length)."""
    say = progress or (lambda _message: None)
    what = label or PurePosixPath(urllib.parse.urlsplit(url).path).name or url
    part = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    size = 0
    limit = Deadline(url, deadline if deadline is not None else deadline_for(max_bytes))
    try:
        with limit, _open(url, timeout, limit) as response, part.open("wb") as out:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            step = max(total // 10, CHUNK) if total else 64 << 20
            say(f"{what}: downloading {url}" + (f" ({_mb(total)})" if total else ""))
            mark = step
            if total is not None and total > max_bytes:  # refused before a byte is written
                raise TooLarge(f"{url}: {total:,} bytes, more than {max_bytes:,}", url=url, cap=max_bytes)
            for chunk in read_body(response, url, limit, max_bytes):
                size += len(chunk)
                digest.update(chunk)
                out.write(chunk)
                if size >= mark:
                    say(f"{what}: {_mb(size)}" + (f" of {_mb(total)}" if total else ""))
                    mark = (size // step + 1) * step
            if total is not None and size != total:  # read(n) returns short at a hang-up, raising nothing
                raise NetworkError(f"the download of {url} was interrupted after {size} bytes "
                                   f"(of {total})", url=url)
        part.replace(dest)
    finally:
        part.unlink(missing_ok=True)
    return Downloaded(size, digest.hexdigest())
