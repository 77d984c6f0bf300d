"""GitHub's REST API: the few calls farm needs, throttled and retried. A release's assets (list,
upload, download, delete); a workflow run's artifacts (list, download); a workflow's runs by
status, and a ``workflow_dispatch`` of it.

Every request first waits for :class:`farm.publish.ratelimit.Throttle` (GitHub's primary and
secondary limits, sliding windows), and an answer of 403/429 that is about a rate limit is
obeyed (``Retry-After``, else ``x-ratelimit-reset``, else a minute), at most ``max_retries``
times and never for longer than ``max_wait_s`` at once: a run past that fails with exit 3 and
the time GitHub asked for, instead of sleeping through a job's time limit. A 5xx answer or a
dropped connection is retried the same bounded way. Every wait is held to the throttle's
:class:`~farm.publish.ratelimit.WaitBudget` (a publish job's deadline and its cap on rate-limit
waits), which raises :class:`~farm.errors.OutOfTime` rather than sleep past them; where the
budget is a job's, it alone bounds the rate-limit answers obeyed (not a count of tries), so a
publish job meeting a limit it cannot wait out hands the cell on instead of failing it.

An upload that lands twice (a retried POST whose first try got through) is answered 422
``already_exists`` by GitHub: :meth:`Client.upload` returns None for it and the caller compares
digests, as for any asset already there. Downloads follow GitHub's redirect to its storage
without the token (the storage URL is signed; a token there is refused, and would leak).

An artifact is downloaded the same way: GitHub answers ``.../artifacts/ID/zip`` with a redirect
to a signed storage URL valid for a minute, followed without the token, the bytes streamed to
disk under a cap; an artifact past its retention is answered 410 Gone.

The token is a constructor argument, read from the environment by the caller (:func:`env_token`:
``GH_TOKEN``, else ``GITHUB_TOKEN``); it is never part of a message. Inside Actions the API's URL
is ``GITHUB_API_URL`` (GitHub Enterprise Server has its own), which :func:`actions_client` reads.
"""

from __future__ import annotations

import datetime as dt
import http.client
import itertools
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.errors import NetworkError, ToolError, UsageError, clip
from farm.netutil import DEADLINE, Deadline, deadline_for, download, read_body
from farm.publish.budget import waits_out
from farm.publish.github import API_URL, UPLOADS_URL
from farm.publish.ratelimit import Clock, RealClock, Throttle, retry_after
from farm.schedule.attempts import RunJob

TOKEN_VARIABLES = ("GH_TOKEN", "GITHUB_TOKEN")
API_VERSION = "2022-11-28"
PER_PAGE = 100
MAX_RETRIES = 6
# The longest single wait obeyed: a primary-limit reset can be up to an hour away.
MAX_WAIT_S = 3600.0
MAX_ERROR_BODY = 64 * 1024
MAX_JSON_BODY = 16 * 1024 * 1024  # a page of 100 assets is ~100 KB
# A run of build.yml holds ~2 artifacts a cell of <= 256 cells a shard; a concurrency group's waiting runs, a few.
MAX_ARTIFACT_PAGES = 50
MAX_RELEASE_ASSETS = 1000  # GitHub's limit of a release
MAX_ASSET_PAGES = MAX_RELEASE_ASSETS // PER_PAGE + 1
MAX_RUN_PAGES = 5
MAX_JOB_PAGES = 30  # a wave's jobs: <= 8 x 256 builds, <= 256 links, and the run's own
ACTIONS_READ = "the job's token needs `actions: read` on the run's repository (its permissions: block)"
ACTIONS_WRITE = ("the job's token needs `actions: write` to read a workflow's runs and dispatch it, and the "
                 "workflow must exist on the ref with a workflow_dispatch trigger")
TIMEOUT_S = 600.0


class GithubApiError(ToolError):
    """GitHub answered something a publisher cannot go on from (after the bounded retries)."""

    def __init__(self, message: str, *, status: int | None = None, where: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, where=where, hint=hint)
        self.status = status


@dataclass(frozen=True)
class GithubRelease:
    id: int
    tag: str


@dataclass(frozen=True)
class RemoteAsset:
    """An asset on a release. ``sha256``: GitHub's digest of its bytes (None when not reported);
    ``state``: ``uploaded``, or ``starter`` for an upload that never finished."""

    id: int
    name: str
    size: int
    sha256: str | None
    state: str = "uploaded"


@dataclass(frozen=True)
class Artifact:
    """An artifact of a workflow run (``expired``: past its retention, no longer downloadable)."""

    id: int
    name: str
    size: int
    expired: bool
    sha256: str | None = None  # the digest GitHub lists for its bytes, when it lists one


@dataclass(frozen=True)
class WorkflowRun:
    """A run of a workflow: its id, status (``queued``, ``pending``, ``in_progress``, ...) and
    title (the workflow's ``run-name`` as rendered for it)."""

    id: int
    status: str
    title: str


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return jsonread.loads(self.body)
        except ValueError as exc:
            raise GithubApiError(f"GitHub answered HTTP {self.status} with a body that is not JSON farm reads "
                                 f"({clip(exc, 120)}): {clip(self.body[:80])!r}", status=self.status) from None


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is handed back to the caller, which decides what to send on


def _fields(obj: Any, what: str, **kinds: tuple[type, bool]) -> dict[str, Any]:
    """``obj``'s fields as GitHub's documented schema types them (``kinds``: name -> (type,
    required)); an id and a size are integers >= 0 (a bool is no number). Anything else is a
    :class:`GithubApiError` naming what was read: an answer is another system's output."""
    if not isinstance(obj, dict):
        raise GithubApiError(f"GitHub answered {what} with {clip(json.dumps(obj), 120)}, not an object")
    out: dict[str, Any] = {}
    for key, (kind, required) in kinds.items():
        value = obj.get(key)
        if value is None and not required:
            continue
        ok = isinstance(value, kind) and not isinstance(value, bool) if kind is not bool else isinstance(value, bool)
        if not ok or (isinstance(value, int) and value < 0) or (kind is str and required and not value):
            raise GithubApiError(f"GitHub answered {what} with {key} = {clip(json.dumps(value), 80)}, not "
                                 f"{'a number >= 0' if kind is int else 'a name' if kind is str else kind.__name__}")
        out[key] = value
    return out


def _asset(obj: Any) -> RemoteAsset:
    f = _fields(obj, "an asset", id=(int, True), name=(str, True), size=(int, False), digest=(str, False),
                state=(str, False))
    digest = f.get("digest") or ""
    return RemoteAsset(f["id"], f["name"], f.get("size", 0), digest.split(":", 1)[1] if digest.startswith("sha256:")
                       else None, f.get("state") or "uploaded")


def _artifact(obj: Any) -> Artifact:
    f = _fields(obj, "an artifact", id=(int, True), name=(str, True), size_in_bytes=(int, False),
                expired=(bool, False))
    return Artifact(f["id"], f["name"], f.get("size_in_bytes", 0), f.get("expired", False))


def _run(obj: Any) -> WorkflowRun:
    f = _fields(obj, "a workflow run", id=(int, True), status=(str, True), display_title=(str, False))
    return WorkflowRun(f["id"], f["status"], f.get("display_title") or "")


def _release(obj: Any, tag: str) -> GithubRelease:
    return GithubRelease(_fields(obj, f"release {tag}", id=(int, True))["id"], tag)


def check_url(url: str, what: str) -> str:
    """``url`` when it can be GitHub's API: https with a host, or http on this machine (a test
    server, never a token sent in clear over a network); a :class:`UsageError` otherwise."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
    except ValueError:
        host, parts = None, None
    if parts is None or not host or not (parts.scheme == "https" or (parts.scheme == "http" and _loopback(host))):
        raise UsageError(f"{what} {clip(url, 80)!r} is not an https URL of GitHub's API",
                         hint="unset it for https://api.github.com, or name your GitHub Enterprise Server's "
                              "https://HOST/api/v3")
    return url


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _seconds(text: Any) -> float | None:
    """Epoch seconds of GitHub's ISO 8601 time (``2026-12-06T01:02:03Z``); None for none."""
    if not isinstance(text, str) or not text:
        return None
    return dt.datetime.fromisoformat(text).timestamp()


def _job(obj: Any) -> RunJob:
    try:
        started, completed = _seconds(obj.get("started_at")), _seconds(obj.get("completed_at"))
        conclusion = obj.get("conclusion")
        return RunJob(str(obj["name"]), str(conclusion) if conclusion is not None else None,
                   completed - started if started is not None and completed is not None else None)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise GithubApiError(f"GitHub listed a job farm cannot read ({type(exc).__name__}): {clip(obj)}") from None


def _page(answer: Answer, key: str, what: str) -> tuple[list[Any], int]:
    """The items under ``key`` of a listing page and its ``total_count``."""
    obj = answer.json()
    items = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(items, list):
        raise GithubApiError(f"listing {what}: GitHub's answer has no {key!r} list")
    total = obj.get("total_count")
    return items, total if isinstance(total, int) else -1


@dataclass
class Client:
    """One repository through one token: its releases and its workflows' runs."""

    repository: str
    token: str = field(repr=False)
    api_url: str = API_URL
    uploads_url: str = UPLOADS_URL
    throttle: Throttle = field(default_factory=Throttle)
    clock: Clock = field(default_factory=RealClock)
    max_retries: int = MAX_RETRIES
    max_wait_s: float = MAX_WAIT_S
    timeout_s: float = TIMEOUT_S
    requests: int = 0  # requests sent, retries included
    rate_limited: int = 0  # 403/429 rate-limit answers obeyed
    deadline_s: float = DEADLINE  # one request, its answer included, at most (an upload: its size's pace)

    def __post_init__(self) -> None:
        check_url(self.api_url, "the API URL")
        check_url(self.uploads_url, "the uploads URL")

    # -- transport ---------------------------------------------------------------------------
    def _send(self, method: str, url: str, body: Path | bytes | None, headers: Mapping[str, str]) -> Answer:
        self.throttle.wait(method)
        self.requests += 1
        try:
            return self._exchange(method, url, body, headers)
        finally:
            self.throttle.sent(method)

    def _exchange(self, method: str, url: str, body: Path | bytes | None, headers: Mapping[str, str]) -> Answer:
        handle = body.open("rb") if isinstance(body, Path) else None
        data: Any = body if handle is None else handle
        all_headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/vnd.github+json",
                       "X-GitHub-Api-Version": API_VERSION, "User-Agent": "farm-publish", **headers}
        if isinstance(body, Path):
            all_headers["Content-Length"] = str(body.stat().st_size)
        request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
        shown = url.split("?", maxsplit=1)[0]
        size = int(all_headers.get("Content-Length") or 0)
        limit = Deadline(shown, max(self.deadline_s, deadline_for(size)) if size else self.deadline_s)
        try:
            with limit, limit.opener(NoRedirect()).open(request, timeout=self.timeout_s) as response:
                payload = b"".join(read_body(response, shown, limit, MAX_JSON_BODY))
                return Answer(response.status, dict(response.headers), payload)
        except NetworkError as exc:  # past the cap or the deadline (a trickling answer): not retried
            raise GithubApiError(f"{method} {exc.message}") from None
        except urllib.error.HTTPError as exc:
            try:
                payload = exc.read(MAX_ERROR_BODY)
            except (OSError, http.client.HTTPException):
                payload = b""
            finally:
                exc.close()  # the error holds the response and its socket
            return Answer(exc.code, dict(exc.headers or {}), payload)
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            if limit.passed():  # the deadline cut the connection: not retried either
                raise GithubApiError(f"{method} {limit.error().message}") from None
            raise
        finally:
            if handle is not None:
                handle.close()

    def request(self, method: str, path_or_url: str, *, body: Path | bytes | None = None,
                headers: Mapping[str, str] | None = None, ok: tuple[int, ...] = (200,),
                hint: str | None = None) -> Answer:
        """One call, retried while GitHub asks to wait or fails on its side; an answer whose
        status is in ``ok`` is returned, anything else raises :class:`GithubApiError` (with
        ``hint`` for a 403 or 404, the call's permission)."""
        url = path_or_url if "://" in path_or_url else self.api_url.rstrip("/") + path_or_url
        shown = f"{method} {url.split('?')[0]}"
        for attempt in itertools.count():
            try:
                answer = self._send(method, url, body, headers or {})
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = getattr(exc, "reason", None) or exc
                if attempt >= self.max_retries:
                    raise GithubApiError(f"{shown}: cannot reach GitHub ({reason}) after {attempt + 1} tries",
                                         hint="check the network, then run the upload again: it resumes") from None
                self.throttle.pause(min(2.0 ** attempt, 60.0), rate_limit=False, what=f"{shown}: a retry")
                continue
            if answer.status in ok:
                self._spent(answer.headers)
                return answer
            text = answer.body[:MAX_ERROR_BODY].decode("utf-8", "replace")
            wait = retry_after(answer.status, answer.headers, self.clock.now(), text)
            if wait is None and answer.status >= 500:
                wait = min(2.0 ** attempt, 60.0)
            if wait is None:
                raise GithubApiError(f"{shown}: HTTP {answer.status}: {clip(_message(text), 300)}",
                                     status=answer.status,
                                     hint=hint if hint and answer.status in (403, 404) else _hint(answer.status))
            limited = answer.status in (403, 429)
            if not waits_out(self.throttle.budget, limited, attempt, wait, max_retries=self.max_retries,
                             max_wait_s=self.max_wait_s):
                raise GithubApiError(
                    f"{shown}: HTTP {answer.status}; GitHub asks to wait {wait:.0f} s "
                    f"(after {attempt + 1} tries)", status=answer.status,
                    hint="the token's rate limit is spent: run the upload again later, it resumes where it stopped")
            self.rate_limited += limited
            self.throttle.pause(wait, rate_limit=limited, what=f"{shown}: HTTP {answer.status}")
        raise AssertionError("unreachable")

    def _spent(self, headers: Mapping[str, str]) -> None:
        """GitHub's own count of the token's primary budget (other jobs spend it too): when it
        says none is left, wait for its reset before the next request, not after a 403."""
        lower = {k.lower(): v for k, v in headers.items()}
        remaining, reset = lower.get("x-ratelimit-remaining", ""), lower.get("x-ratelimit-reset", "")
        if remaining.strip() == "0" and reset.strip().isdigit():
            wait = float(reset) - self.clock.now() + 1.0
            if 0 < wait <= self.max_wait_s:
                self.throttle.pause(wait, rate_limit=True, what="the token's primary limit is spent")

    # -- the calls ---------------------------------------------------------------------------
    def _repo(self) -> str:
        return f"/repos/{self.repository}"

    def release(self, tag: str) -> GithubRelease | None:
        answer = self.request("GET", f"{self._repo()}/releases/tags/{urllib.parse.quote(tag, safe='')}", ok=(200, 404))
        if answer.status == 404:
            return None
        return _release(answer.json(), tag)

    def create_release(self, tag: str, notes: str) -> GithubRelease:
        """The release ``tag``, created when missing (a concurrent creator's release is used)."""
        body = json.dumps({"tag_name": tag, "name": tag, "body": notes}).encode()
        answer = self.request("POST", f"{self._repo()}/releases", body=body,
                              headers={"Content-Type": "application/json"}, ok=(201, 422))
        if answer.status == 201:
            return _release(answer.json(), tag)
        existing = self.release(tag)  # 422: the tag's release exists already (a concurrent creator)
        if existing is None:
            text = _message(answer.body.decode("utf-8", "replace"))
            raise GithubApiError(f"creating release {tag}: HTTP 422: {clip(text, 300)}", status=422)
        return existing

    def assets(self, release: GithubRelease) -> list[RemoteAsset]:
        """Every asset of ``release``, every page."""
        out: list[RemoteAsset] = []
        for page in range(1, MAX_ASSET_PAGES + 1):
            answer = self.request("GET", f"{self._repo()}/releases/{release.id}/assets?per_page={PER_PAGE}&page={page}")
            items = answer.json()
            if not isinstance(items, list):
                raise GithubApiError(f"listing the assets of release {release.tag}: not a list")
            out.extend(_asset(a) for a in items)
            if len(items) < PER_PAGE:
                return out
        raise GithubApiError(f"listing the assets of release {release.tag}: more than {MAX_ASSET_PAGES} pages of "
                             f"{PER_PAGE}, where a release holds at most {MAX_RELEASE_ASSETS:,} assets",
                             hint="GitHub's listing did not end: look at the release, then run the upload again")

    def upload(self, release: GithubRelease, path: Path, name: str) -> RemoteAsset | None:
        """Upload ``path`` as asset ``name``; None when the release already has an asset of
        that name (GitHub's 422), which the caller then looks at."""
        url = (f"{self.uploads_url.rstrip('/')}{self._repo()}/releases/{release.id}/assets?"
               + urllib.parse.urlencode({"name": name}))
        answer = self.request("POST", url, body=path, headers={"Content-Type": "application/octet-stream"},
                              ok=(201, 422))
        if answer.status == 422:
            if _already_exists(answer.body):
                return None
            raise GithubApiError(f"uploading {name} to release {release.tag}: HTTP 422: "
                                 f"{clip(_message(answer.body.decode('utf-8', 'replace')), 300)}", status=422,
                                 hint="a release holds at most 1,000 assets: see the target's tag in docs/upload.md")
        return _asset(answer.json())

    def delete(self, asset: RemoteAsset) -> None:
        self.request("DELETE", f"{self._repo()}/releases/assets/{asset.id}", ok=(204, 404))

    def download(self, asset: RemoteAsset, dest: Path, *, max_bytes: int) -> str:
        """The asset's bytes into ``dest`` (at most ``max_bytes``); returns their sha256."""
        answer = self.request("GET", f"{self._repo()}/releases/assets/{asset.id}",
                              headers={"Accept": "application/octet-stream"}, ok=(302, 301, 307))
        return self._follow(answer, dest, max_bytes=max_bytes, what=f"asset {asset.name}")

    def _follow(self, answer: Answer, dest: Path, *, max_bytes: int, what: str) -> str:
        """The bytes at the storage location a redirect ``answer`` names, into ``dest``; their sha256."""
        location = {k.lower(): v for k, v in answer.headers.items()}.get("location")
        if not location:
            raise GithubApiError(f"downloading {what}: GitHub gave no storage location")
        parts = urllib.parse.urlsplit(location)
        api = urllib.parse.urlsplit(self.api_url)
        if parts.scheme != "https" and (parts.scheme, parts.netloc) != (api.scheme, api.netloc):
            raise GithubApiError(f"downloading {what}: GitHub redirected to {clip(location, 80)!r}; only an https "
                                 "location (or the configured API's own host) is followed",
                                 hint="GitHub's storage is https: the API URL may not be GitHub's")
        try:
            return download(location, dest, max_bytes=max_bytes, timeout=self.timeout_s).sha256
        except NetworkError as exc:
            raise GithubApiError(f"downloading {what}: {exc.message}") from None

    def attestations(self, sha256: str) -> list[Mapping[str, Any]]:
        """The Sigstore bundles of the attestations the repository holds for a subject's sha256
        (its first page of 100: one per publish of the file); none: an empty list."""
        answer = self.request("GET", f"{self._repo()}/attestations/sha256:{sha256}?per_page={PER_PAGE}",
                              ok=(200, 404), hint="reading attestations needs a token of the repository")
        if answer.status == 404:
            return []
        data = answer.json()
        items = data.get("attestations") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise GithubApiError(f"the attestations of sha256:{sha256} are not a list",
                                 hint="GitHub answered something else than its attestations API")
        return [a["bundle"] for a in items[:PER_PAGE] if isinstance(a, dict) and isinstance(a.get("bundle"), dict)]

    # -- Actions ---------------------------------------------------------------------------------
    def _pages(self, path: str, key: str, what: str, *, max_pages: int, hint: str) -> list[Any]:
        """Every item of a paginated Actions listing (``{"total_count": N, key: [...]}``), at
        most ``max_pages`` pages of :data:`PER_PAGE`."""
        out: list[Any] = []
        sep = "&" if "?" in path else "?"
        for page in range(1, max_pages + 1):
            answer = self.request("GET", f"{path}{sep}per_page={PER_PAGE}&page={page}", hint=hint)
            items, total = _page(answer, key, what)
            out.extend(items)
            if len(items) < PER_PAGE or (total >= 0 and len(out) >= total):
                return out
        raise GithubApiError(f"listing {what}: more than {max_pages * PER_PAGE} entries",
                             hint="a build shard's run holds at most a few hundred artifacts; look at the run")

    def artifacts(self, run_id: str) -> list[Artifact]:
        """Every artifact of the workflow run ``run_id`` (expired ones included, marked)."""
        path = f"{self._repo()}/actions/runs/{urllib.parse.quote(run_id, safe='')}/artifacts"
        return [_artifact(a) for a in self._pages(path, "artifacts", f"the artifacts of run {run_id}",
                                                  max_pages=MAX_ARTIFACT_PAGES, hint=ACTIONS_READ)]

    def download_artifact(self, artifact: Artifact, dest: Path, *, max_bytes: int) -> str:
        """The artifact's bytes (a zip, or the file itself for one uploaded unarchived) into
        ``dest``, at most ``max_bytes``; returns their sha256. A :class:`GithubApiError` with
        status 410 when the artifact has expired."""
        if artifact.size > max_bytes:
            raise GithubApiError(f"artifact {artifact.name}: {artifact.size:,} bytes, more than the {max_bytes:,} "
                                 "allowed", hint="a wheel artifact is one wheel; a fragment artifact a few KB")
        answer = self.request("GET", f"{self._repo()}/actions/artifacts/{artifact.id}/zip",
                              ok=(302, 301, 307, 410), hint=ACTIONS_READ)
        if answer.status == 410:
            raise GithubApiError(f"artifact {artifact.name} (id {artifact.id}) has expired: HTTP 410 Gone",
                                 status=410, hint="the run's artifacts are past their retention; the next run "
                                                  "builds the cell again")
        return self._follow(answer, dest, max_bytes=max_bytes, what=f"artifact {artifact.name}")

    def run_jobs(self, run_id: str) -> list[RunJob]:
        """The jobs of the workflow run ``run_id`` (their latest attempt): name, conclusion, time."""
        path = f"{self._repo()}/actions/runs/{urllib.parse.quote(run_id, safe='')}/jobs?filter=latest"
        return [_job(j) for j in self._pages(path, "jobs", f"the jobs of run {run_id}", max_pages=MAX_JOB_PAGES,
                                             hint=ACTIONS_READ)]

    def workflow_runs(self, workflow: str, *, branch: str, status: str) -> list[WorkflowRun]:
        """The runs of ``workflow`` (its file name or id) on ``branch`` whose status is
        ``status``, newest first (GitHub's order)."""
        query = urllib.parse.urlencode({"branch": branch, "status": status})
        path = f"{self._repo()}/actions/workflows/{urllib.parse.quote(workflow, safe='')}/runs?{query}"
        return [_run(r) for r in self._pages(path, "workflow_runs", f"the {status} runs of {workflow}",
                                             max_pages=MAX_RUN_PAGES, hint=ACTIONS_WRITE)]

    def dispatch(self, workflow: str, ref: str, inputs: Mapping[str, str]) -> None:
        """Start ``workflow`` on ``ref`` with ``inputs`` (``workflow_dispatch``; GitHub answers 204)."""
        body = json.dumps({"ref": ref, "inputs": dict(inputs)}).encode()
        self.request("POST", f"{self._repo()}/actions/workflows/{urllib.parse.quote(workflow, safe='')}/dispatches",
                     body=body, headers={"Content-Type": "application/json"}, ok=(204, 200), hint=ACTIONS_WRITE)


def env_token(env: Mapping[str, str]) -> str | None:
    """The token of ``GH_TOKEN``, else ``GITHUB_TOKEN`` (None when neither is set)."""
    return next((env[v] for v in TOKEN_VARIABLES if env.get(v)), None)


def actions_client(repository: str | None, env: Mapping[str, str], *, clock: Clock | None = None,
                   throttle: Throttle | None = None) -> Client:
    """A client for the repository a workflow runs in: ``GITHUB_API_URL`` (as Actions sets it;
    api.github.com when unset), the token of :func:`env_token`, GitHub's limits (or ``throttle``,
    a job's own, shared with its other clients)."""
    if not repository:
        raise UsageError("--repository (or $GITHUB_REPOSITORY) names the workflow's repository")
    token = env_token(env)
    if token is None:
        raise ToolError(f"reading {repository}'s workflow runs needs a token in GH_TOKEN or GITHUB_TOKEN",
                        hint="pass the job's token: `GH_TOKEN: ${{ secrets.GITHUB_TOKEN }}` (docs/ci.md)")
    clock = clock or RealClock()
    return Client(repository, token, api_url=env.get("GITHUB_API_URL") or API_URL,
                  throttle=throttle or Throttle(clock=clock), clock=clock)


def _already_exists(body: bytes) -> bool:
    """GitHub's 422 for a name taken on the release: ``errors[].code == "already_exists"``."""
    try:
        obj = jsonread.loads(body)
        return any(isinstance(e, dict) and e.get("code") == "already_exists" for e in obj.get("errors") or ())
    except (ValueError, AttributeError, TypeError):
        return False


def _message(text: str) -> str:
    try:
        obj = jsonread.loads(text)
    except ValueError:
        return text
    if not isinstance(obj, dict):
        return text
    details = [str(e.get("message") or e.get("code")) for e in obj.get("errors") or () if isinstance(e, dict)]
    return str(obj.get("message", text)) + (f" ({'; '.join(details)})" if details else "")


def _hint(status: int) -> str | None:
    if status == 401:
        return "the token is missing or expired: set GH_TOKEN (see docs/upload.md)"
    if status in (403, 404):
        return ("the token cannot write this repository's releases: use a GitHub App installation token or a "
                "fine-grained token with contents: write on it (see docs/upload.md)")
    return None
