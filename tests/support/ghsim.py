"""A loopback GitHub REST API (Releases and Actions) on 127.0.0.1, for the publish and chain tests.

GitHub cannot be reached from the test machine, so this server simulates GitHub's documented
behaviour of the calls farm makes (REST API version 2022-11-28):

- releases by tag: ``GET /repos/O/R/releases/tags/TAG`` (404 when none), ``POST /repos/O/R/releases``
  (201; 422 ``already_exists`` for a tag that has one);
- assets: list (``GET .../releases/ID/assets``, paginated by ``per_page``/``page``), upload
  (``POST /uploads/repos/O/R/releases/ID/assets?name=N``, the uploads host), download (``GET
  .../releases/assets/ID`` with ``Accept: application/octet-stream`` answers 302 to a signed
  storage URL, which refuses a request that carries a token, as GitHub's storage does), delete;
  each asset reports ``digest: sha256:...`` (``null`` for one uploaded before GitHub computed digests);
- 422 ``already_exists`` on a duplicate asset name; 422 past 1,000 assets in one release;
- a workflow run's artifacts: list (``GET /repos/O/R/actions/runs/ID/artifacts``, ``{"total_count",
  "artifacts"}`` paginated by ``per_page`` (at most 100) / ``page``, expired ones listed with
  ``expired: true``), download (``GET .../actions/artifacts/ID/zip`` answers 302 to a signed
  storage URL that expires after a minute and refuses a token; 410 Gone for an expired artifact,
  404 for an unknown one); an artifact uploaded unarchived is served as the file itself;
- a run's jobs (``GET .../actions/runs/ID/jobs``, ``{"total_count", "jobs"}`` paginated, each with
  its ``name``, ``conclusion`` and ``started_at``/``completed_at``);
- a workflow's runs (``GET .../actions/workflows/FILE/runs?branch=&status=``, newest first,
  ``{"total_count", "workflow_runs"}`` paginated; ``status`` matches a run's status or conclusion)
  and ``workflow_dispatch`` (``POST .../actions/workflows/FILE/dispatches`` with ``ref`` and
  ``inputs``: 204 and no body; 404 for a workflow without the trigger, 422 for an input it does not
  declare or more than 25). The new run is titled by the workflow's ``run-name`` (its
  ``${{ inputs.X || 'default' }}`` terms rendered) and joins its concurrency group (one per
  workflow and branch): ``pending`` while another run of the group is queued or in progress, and a
  pending run it finds there is cancelled, as GitHub keeps one pending run per group;
- a run's artifact service, as ``actions/download-artifact`` reaches it inside the run
  (``ACTIONS_RESULTS_URL`` = ``sim.base + "results/"``, Twirp JSON): ``ListArtifacts`` (the run's
  live artifacts, each with ``database_id``, ``size`` and a ``sha256:`` digest; ``name_filter`` and
  ``id_filter``) and ``GetSignedArtifactURL`` (a storage URL valid for a minute; twirp
  ``not_found`` for a name the run lacks), authorised by a runtime token the sim issued for that run
  (:meth:`GitHubSim.runtime_token`, a JWT whose ``scp`` claim names the run). These requests are
  logged but are not REST requests: GitHub's REST limits do not count them, and the service's own
  limits are not documented (not modelled);
- artifact attestations: ``POST /repos/O/R/attestations`` with ``{"bundle": ...}`` (201 ``{"id"}``;
  422 for a bundle whose DSSE envelope holds no in-toto Statement v1 with subjects), and ``GET
  .../attestations/sha256:HEX`` (``{"attestations": [{"bundle", "repository_id", "bundle_url"}]}``,
  those whose statement names the digest, ``per_page`` at most 100); :func:`attest_build_provenance`
  does what ``actions/attest-build-provenance`` does with a ``subject-checksums`` file (at most 1,024
  subjects; the predicate built from the run as ``@actions/attest`` builds it) but signs nothing:
  Sigstore (Fulcio's certificate for the job's OIDC token, Rekor's log entry) is left out, so the
  bundle's signature and verification material are empty;
- 401 without the token;
- the primary limit (requests per hour per repository; 403 with ``x-ratelimit-remaining: 0`` and
  ``x-ratelimit-reset``) and the secondary limits on content-creating requests (per minute and
  per hour; 403 or 429 with ``Retry-After``), every answer carrying ``x-ratelimit-*`` headers;
- every request counted, with its time, so a test can check the busiest hour and minute.

Time is scaled (:class:`ScaledClock`): the server and the client under test share one clock in
which an hour passes in seconds, so rate limits and ``Retry-After`` waits are exercised for real
without making the tests slow.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import math
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from farm.simulate.githubsim import most_in_window
from tests.support import loopback

TOKEN = "ghs_loopbacktoken0123456789"
ASSET_CAP = 1000
CONTENT = frozenset({"POST", "PATCH", "PUT", "DELETE"})


class ScaledClock:
    """Epoch seconds in which ``scale`` simulated seconds pass per real second."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self._t0 = time.time()
        self._m0 = time.monotonic()

    def now(self) -> float:
        return self._t0 + (time.monotonic() - self._m0) * self.scale

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.scale)


@dataclass(frozen=True)
class Limits:
    primary_per_hour: int = 1000
    content_per_minute: int = 80
    content_per_hour: int = 500


@dataclass
class SimAsset:
    id: int
    name: str
    data: bytes

    digest: bool = True  # False: an asset from before GitHub computed digests (``digest: null``)

    def to_json(self, repo: str, tag: str) -> dict[str, object]:
        return {"id": self.id, "name": self.name, "size": len(self.data), "state": "uploaded",
                "digest": "sha256:" + hashlib.sha256(self.data).hexdigest() if self.digest else None,
                "content_type": "application/octet-stream",
                "browser_download_url": f"https://github.com/{repo}/releases/download/{tag}/{self.name}"}


@dataclass
class SimRelease:
    id: int
    tag: str
    assets: dict[str, SimAsset] = field(default_factory=dict)


@dataclass
class SimArtifact:
    id: int
    run_id: int
    name: str
    data: bytes
    expired: bool = False

    def to_json(self, repo: str, base: str) -> dict[str, object]:
        api = f"{base}repos/{repo}/actions/artifacts/{self.id}"
        return {"id": self.id, "node_id": f"MDg6QXJ0aWZhY3Q{self.id}", "name": self.name,
                "size_in_bytes": len(self.data), "url": api, "archive_download_url": f"{api}/zip",
                "expired": self.expired, "workflow_run": {"id": self.run_id}}


@dataclass(frozen=True)
class SimWorkflow:
    """A workflow file with a ``workflow_dispatch`` trigger: its ``run-name`` and declared inputs."""

    run_name: str
    inputs: tuple[str, ...]


@dataclass
class SimRun:
    id: int
    workflow: str
    branch: str
    status: str  # requested, queued, pending, waiting, in_progress, completed
    title: str
    inputs: dict[str, str] = field(default_factory=dict)
    conclusion: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "name": self.workflow, "display_title": self.title, "status": self.status,
                "conclusion": self.conclusion, "head_branch": self.branch, "event": "workflow_dispatch",
                "path": f".github/workflows/{self.workflow}"}


MAX_DISPATCH_INPUTS = 25
STORAGE_URL_TTL_S = 60.0
_RUN_NAME_TERM = re.compile(r"\$\{\{\s*inputs\.(\w+)\s*\|\|\s*'([^']*)'\s*\}\}")


ARTIFACT_SERVICE = "/results/twirp/github.actions.results.api.v1.ArtifactService/"


def _backend(run_id: int) -> str:
    """A run's backend id, as the artifact service names it (opaque to its clients)."""
    return f"{run_id:08x}-5e1f-4b0c-9a7d-{run_id:012x}"


def render_run_name(template: str, inputs: dict[str, str]) -> str:
    """A ``run-name`` of ``${{ inputs.X || 'default' }}`` terms as GitHub renders it: X when
    non-empty, else the default."""
    return _RUN_NAME_TERM.sub(lambda m: inputs.get(m[1]) or m[2], template)


@dataclass(frozen=True)
class SimAttestation:
    id: int
    bundle: dict[str, object]
    digests: frozenset[str]  # the sha256 of every subject its statement names


@dataclass(frozen=True)
class Request:
    at: float
    method: str
    path: str
    status: int

    @property
    def rest(self) -> bool:
        """A request of GitHub's REST API (counted against its limits): not the storage behind a
        signed URL, not the run's artifact service."""
        return not self.path.startswith(("/_storage/", "/results/"))


@dataclass
class GitHubSim:
    """The state of the simulated repository ``repo``, and what it was asked."""

    repo: str = "farm-wheels/wheels"
    clock: ScaledClock = field(default_factory=ScaledClock)
    limits: Limits = field(default_factory=Limits)
    token: str = TOKEN
    secondary_status: int = 403  # GitHub answers a secondary limit with 403 or 429
    # Called with (release tag, asset name) once an upload is stored, before it is answered: a
    # test kills the publisher here to crash it between the upload and the ledger record.
    on_upload: Callable[[str, str], None] | None = None
    # Called with (method, path, status) after each API request is answered: a test acts as
    # another writer at that moment.
    after_request: Callable[[str, str, int], None] | None = None
    releases: dict[str, SimRelease] = field(default_factory=dict)
    workflows: dict[str, SimWorkflow] = field(default_factory=dict)
    runs: dict[int, SimRun] = field(default_factory=dict)
    attestations: list[SimAttestation] = field(default_factory=list)
    artifacts: dict[int, SimArtifact] = field(default_factory=dict)
    runtime_tokens: dict[str, int] = field(default_factory=dict)  # issued runtime token -> its run
    jobs: dict[int, list[dict[str, object]]] = field(default_factory=dict)  # run -> its jobs, as GitHub lists them
    log: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next_id: int = 1
    _by_id: dict[str, SimRelease] = field(default_factory=dict)  # str(id) -> release, as the URLs name it
    base: str = ""

    # -- counting ------------------------------------------------------------------------------
    def count(self, *, content: bool | None = None, status: int | None = None) -> int:
        return sum(1 for r in self.log if (content is None or (r.method in CONTENT) == content)
                   and (status is None or r.status == status))

    def busiest(self, period_s: float, *, content: bool = False, accepted: bool = True) -> int:
        """The most requests (content-creating only, with ``content``) in any ``period_s`` window
        (only those answered without a rate limit, with ``accepted``)."""
        return most_in_window([r.at for r in self.log if (not content or r.method in CONTENT)
                               and (not accepted or r.status not in (403, 429))], period_s)

    def asset_names(self, tag: str) -> list[str]:
        release = self.releases.get(tag)
        return sorted(release.assets) if release else []

    def put_asset(self, tag: str, name: str, data: bytes, *, digest: bool = True) -> None:
        """Place an asset directly (a state left by an earlier run); ``digest=False``: one
        uploaded before GitHub reported digests."""
        with self._lock:
            release = self.releases.get(tag) or self._new_release(tag)
            release.assets[name] = SimAsset(self._id(), name, data, digest)

    def add_run(self, workflow: str, branch: str, status: str, inputs: dict[str, str] | None = None,
                *, title: str | None = None) -> SimRun:
        """A run of ``workflow`` (started by a test: a schedule, another dispatch)."""
        with self._lock:
            flow = self.workflows.get(workflow)
            given = dict(inputs or {})
            name = title if title is not None else render_run_name(flow.run_name, given) if flow else workflow
            run = SimRun(self._id(), workflow, branch, status, name, given)
            self.runs[run.id] = run
            return run

    def runtime_token(self, run_id: int) -> str:
        """The runtime token Actions gives a job of run ``run_id`` (``ACTIONS_RUNTIME_TOKEN``): a
        JWT whose ``scp`` claim carries ``Actions.Results:<run backend id>:<job backend id>``."""
        def part(obj: dict[str, object]) -> str:
            return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

        scope = f"Actions.GenericRead:{run_id} Actions.Results:{_backend(run_id)}:job-{len(self.runtime_tokens)}"
        token = f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part({'scp': scope})}.c2ln"
        self.runtime_tokens[token] = run_id
        return token

    def add_job(self, run_id: int, name: str, conclusion: str | None, minutes: float) -> None:
        """A job of run ``run_id`` that ran ``minutes`` and ended ``conclusion``."""
        end = 1_765_000_000 + 86400
        start = end - round(minutes * 60)

        def iso(t: int) -> str:
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))

        with self._lock:
            self.jobs.setdefault(run_id, []).append({
                "id": self._id(), "run_id": run_id, "name": name, "status": "completed", "conclusion": conclusion,
                "started_at": iso(start), "completed_at": iso(end)})

    def add_artifact(self, run_id: int, name: str, data: bytes, *, expired: bool = False) -> SimArtifact:
        """An artifact of run ``run_id`` (as actions/upload-artifact leaves one)."""
        with self._lock:
            artifact = SimArtifact(self._id(), run_id, name, data, expired)
            self.artifacts[artifact.id] = artifact
            return artifact

    def _dispatch(self, workflow: str, ref: str, inputs: dict[str, str]) -> SimRun:
        """A dispatched run joins its concurrency group (under the lock)."""
        group = [r for r in self.runs.values() if r.workflow == workflow and r.branch == ref]
        busy = any(r.status in ("queued", "in_progress") for r in group)
        for r in group:
            if r.status == "pending":
                r.status, r.conclusion = "completed", "cancelled"
        run = SimRun(self._id(), workflow, ref, "pending" if busy else "queued",
                     render_run_name(self.workflows[workflow].run_name, inputs), dict(inputs))
        self.runs[run.id] = run
        return run

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _new_release(self, tag: str) -> SimRelease:
        release = SimRelease(self._id(), tag)
        self.releases[tag] = release
        self._by_id[str(release.id)] = release
        return release

    # -- limits --------------------------------------------------------------------------------
    def _headers(self, now: float) -> dict[str, str]:
        """The ``x-ratelimit-*`` headers GitHub sends with every answer (primary limit)."""
        with self._lock:
            hour = [r.at for r in self.log if r.status not in (403, 429) and r.rest and r.at > now - 3600]
        used = len(hour) + 1
        reset = (hour[0] if hour else now) + 3600
        return {"x-ratelimit-limit": str(self.limits.primary_per_hour),
                "x-ratelimit-remaining": str(max(0, self.limits.primary_per_hour - used)),
                "x-ratelimit-used": str(used), "x-ratelimit-reset": str(math.ceil(reset)),
                "x-ratelimit-resource": "core"}

    def _limited(self, method: str, now: float) -> tuple[int, dict[str, str]] | None:
        """GitHub's answer when this request is over a limit, else None (and it is counted)."""
        accepted = [r for r in self.log if r.status not in (403, 429) and r.rest]
        hour = [r for r in accepted if r.at > now - 3600]
        if len(hour) >= self.limits.primary_per_hour:
            reset = hour[0].at + 3600
            return 403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(math.ceil(reset))}
        if method in CONTENT:
            content_hour = [r for r in hour if r.method in CONTENT]
            content_minute = [r for r in content_hour if r.at > now - 60]
            if len(content_minute) >= self.limits.content_per_minute:
                return self.secondary_status, {"retry-after": str(math.ceil(content_minute[0].at + 60 - now))}
            if len(content_hour) >= self.limits.content_per_hour:
                return self.secondary_status, {"retry-after": str(math.ceil(content_hour[0].at + 3600 - now))}
        return None


def _handler(sim: GitHubSim) -> type[http.server.BaseHTTPRequestHandler]:
    repo_prefix = f"/repos/{sim.repo}"

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, status: int, body: object = None, headers: dict[str, str] | None = None,
                  raw: bytes | None = None) -> None:
            payload = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
            self.send_response(status)
            for k, v in {**getattr(self, "_limit_headers", {}), **(headers or {})}.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self._status = status

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _handle(self) -> None:
            method = self.command
            url = urllib.parse.urlsplit(self.path)
            path, query = url.path, urllib.parse.parse_qs(url.query)
            self._query = query
            now = sim.clock.now()
            body = self._body() if method in ("POST", "PUT", "PATCH") else b""
            self._status = 0
            try:
                if path.startswith("/_storage/"):
                    self._storage(path)
                    return
                if path.startswith(ARTIFACT_SERVICE):
                    with sim._lock:
                        self._artifact_service(path[len(ARTIFACT_SERVICE):], body)
                    return
                if self.headers.get("Authorization") != f"Bearer {sim.token}":
                    self._send(401, {"message": "Bad credentials"})
                    return
                with sim._lock:
                    limited = sim._limited(method, now)
                self._limit_headers = sim._headers(now)
                if limited is not None:
                    status, headers = limited
                    message = ("API rate limit exceeded" if "x-ratelimit-reset" in headers
                               else "You have exceeded a secondary rate limit. Please wait a few minutes.")
                    self._send(status, {"message": message}, headers)
                    return
                self._api(method, path, query, body)
            finally:
                with sim._lock:
                    sim.log.append(Request(now, method, path, self._status))
                if sim.after_request is not None and Request(now, method, path, 0).rest:
                    sim.after_request(method, path, self._status)

        def _storage(self, path: str) -> None:
            if self.headers.get("Authorization"):
                # S3 refuses a second authorization mechanism beside the signed URL.
                self._send(400, raw=b"Only one auth mechanism allowed")
                return
            asset_id = int(path.rsplit("/", 1)[1])
            if path.startswith("/_storage/artifacts/"):
                expires = float((self._query.get("se") or ["0"])[0])
                if sim.clock.now() > expires:
                    self._send(403, raw=b"AuthenticationFailed: signed expiry time has passed")
                    return
                artifact = sim.artifacts.get(asset_id)
                if artifact is None or artifact.expired:
                    self._send(404, raw=b"BlobNotFound")
                else:
                    self._send(200, raw=artifact.data)
                return
            for release in list(sim.releases.values()):
                for asset in list(release.assets.values()):
                    if asset.id == asset_id:
                        self._send(200, raw=asset.data)
                        return
            self._send(404, raw=b"NoSuchKey")

        def _artifact_service(self, method: str, body: bytes) -> None:
            """The run's artifact service (Twirp JSON; under the sim's lock)."""
            run_id = sim.runtime_tokens.get(self.headers.get("Authorization", "").removeprefix("Bearer "))
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                request = None
            if run_id is None:
                self._send(401, {"code": "unauthenticated", "msg": "invalid runtime token"})
                return
            if not isinstance(request, dict) or request.get("workflow_run_backend_id") != _backend(run_id):
                self._send(403, {"code": "permission_denied", "msg": "the token does not name this run"})
                return
            live = sorted((a for a in sim.artifacts.values() if a.run_id == run_id and not a.expired),
                          key=lambda a: a.id)
            if method == "ListArtifacts":
                name, ident = request.get("name_filter"), request.get("id_filter")
                chosen = [a for a in live if (name is None or a.name == name) and (ident is None or str(a.id) == str(ident))]
                self._send(200, {"artifacts": [
                    {"workflow_run_backend_id": _backend(run_id), "workflow_job_run_backend_id": "job",
                     "database_id": str(a.id), "name": a.name, "size": str(len(a.data)),
                     "created_at": "2026-12-06T00:00:00Z",
                     "digest": "sha256:" + hashlib.sha256(a.data).hexdigest()} for a in chosen]})
                return
            if method == "GetSignedArtifactURL":
                found = [a for a in live if a.name == request.get("name")]
                if not found:
                    self._send(404, {"code": "not_found", "msg": "artifact not found"})
                    return
                expires = math.ceil(sim.clock.now() + STORAGE_URL_TTL_S)
                self._send(200, {"signed_url": f"{sim.base}_storage/artifacts/{found[-1].id}?sig=sim&se={expires}"})
                return
            self._send(404, {"code": "bad_route", "msg": f"no handler for {method}"})

        def _api(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> None:
            uploads = path.startswith("/uploads/")
            if uploads:
                path = path[len("/uploads"):]
            if not path.startswith(repo_prefix):
                self._send(404, {"message": "Not Found"})
                return
            rest = path[len(repo_prefix):]
            parts = [urllib.parse.unquote(p) for p in rest.strip("/").split("/")]
            if parts[0] == "actions" and not uploads:
                with sim._lock:
                    self._actions(method, parts[1:], query, body)
                return
            if parts[0] == "attestations" and not uploads:
                with sim._lock:
                    self._attestations(method, parts[1:], query, body)
                return
            with sim._lock:
                if method == "GET" and parts[:2] == ["releases", "tags"] and len(parts) == 3:
                    release = sim.releases.get(parts[2])
                    if release is None:
                        self._send(404, {"message": "Not Found"})
                    else:
                        self._send(200, {"id": release.id, "tag_name": release.tag})
                    return
                if method == "POST" and parts == ["releases"] and not uploads:
                    tag = json.loads(body)["tag_name"]
                    if tag in sim.releases:
                        self._send(422, {"message": "Validation Failed", "errors": [
                            {"resource": "Release", "code": "already_exists", "field": "tag_name"}]})
                        return
                    release = sim._new_release(tag)
                    self._send(201, {"id": release.id, "tag_name": tag})
                    return
                if len(parts) == 3 and parts[0] == "releases" and parts[2] == "assets":
                    release = sim._by_id.get(parts[1])
                    if release is None:
                        self._send(404, {"message": "Not Found"})
                        return
                    if method == "GET" and not uploads:
                        per_page = min(int(query.get("per_page", ["30"])[0]), 100)
                        page = int(query.get("page", ["1"])[0])
                        items = sorted(release.assets.values(), key=lambda a: a.id)
                        chunk = items[(page - 1) * per_page:page * per_page]
                        self._send(200, [a.to_json(sim.repo, release.tag) for a in chunk])
                        return
                    if method == "POST" and uploads:
                        name = query.get("name", [""])[0]
                        if name in release.assets:
                            self._send(422, {"message": "Validation Failed", "errors": [
                                {"resource": "ReleaseAsset", "code": "already_exists", "field": "name"}]})
                            return
                        if len(release.assets) >= ASSET_CAP:
                            self._send(422, {"message": "Validation Failed", "errors": [
                                {"resource": "ReleaseAsset", "code": "custom", "field": "release",
                                 "message": f"a release may hold at most {ASSET_CAP} assets"}]})
                            return
                        asset = SimAsset(sim._id(), name, body)
                        release.assets[name] = asset
                        hook = sim.on_upload
                        answer = asset.to_json(sim.repo, release.tag)
                    else:
                        self._send(404, {"message": "Not Found"})
                        return
                elif len(parts) == 3 and parts[:2] == ["releases", "assets"]:
                    found = [(r, a) for r in sim.releases.values() for a in r.assets.values()
                             if str(a.id) == parts[2]]
                    if not found:
                        self._send(404, {"message": "Not Found"})
                        return
                    release, asset = found[0]
                    if method == "DELETE":
                        del release.assets[asset.name]
                        self._send(204)
                        return
                    if method == "GET" and self.headers.get("Accept") == "application/octet-stream":
                        self._send(302, headers={"Location": f"{sim.base}_storage/{asset.id}?X-Amz-Signature=sim"})
                        return
                    self._send(200, asset.to_json(sim.repo, release.tag))
                    return
                else:
                    self._send(404, {"message": "Not Found"})
                    return
            if hook is not None:  # outside the lock: the hook may kill the client
                hook(release.tag, asset.name)
            self._send(201, answer)

        def _attestations(self, method: str, parts: list[str], query: dict[str, list[str]], body: bytes) -> None:
            if method == "POST" and not parts:
                try:
                    bundle = json.loads(body)["bundle"]
                    envelope = bundle["dsseEnvelope"]
                    assert envelope["payloadType"] == "application/vnd.in-toto+json"
                    statement = json.loads(base64.b64decode(envelope["payload"]))
                    assert statement["_type"] == "https://in-toto.io/Statement/v1"
                    digests = frozenset(str(x["digest"]["sha256"]) for x in statement["subject"])
                    assert digests
                except (ValueError, KeyError, TypeError, AssertionError):
                    self._send(422, {"message": "Validation Failed: the bundle holds no in-toto statement"})
                    return
                attestation = SimAttestation(sim._id(), bundle, digests)
                sim.attestations.append(attestation)
                self._send(201, {"id": attestation.id})
                return
            if method == "GET" and len(parts) == 1 and parts[0].startswith("sha256:"):
                per_page = min(int(query.get("per_page", ["30"])[0]), 100)
                found = [a for a in sim.attestations if parts[0].removeprefix("sha256:") in a.digests][:per_page]
                self._send(200, {"attestations": [{"bundle": a.bundle, "repository_id": 1, "bundle_url": None}
                                                  for a in found]})
                return
            self._send(404, {"message": "Not Found"})

        def _actions(self, method: str, parts: list[str], query: dict[str, list[str]], body: bytes) -> None:
            """GitHub's Actions endpoints (under the sim's lock)."""
            per_page = max(1, min(int(query.get("per_page", ["30"])[0]), 100))
            page = max(1, int(query.get("page", ["1"])[0]))

            def listing(key: str, items: list[dict[str, object]]) -> None:
                self._send(200, {"total_count": len(items), key: items[(page - 1) * per_page:page * per_page]})

            if method == "GET" and len(parts) == 3 and parts[0] == "runs" and parts[2] == "artifacts":
                run_id = int(parts[1]) if parts[1].isdigit() else -1
                if run_id not in sim.runs:
                    self._send(404, {"message": "Not Found"})
                    return
                held = sorted((a for a in sim.artifacts.values() if a.run_id == run_id), key=lambda a: a.id)
                listing("artifacts", [a.to_json(sim.repo, sim.base) for a in held])
                return
            if method == "GET" and len(parts) == 3 and parts[0] == "runs" and parts[2] == "jobs":
                run_id = int(parts[1]) if parts[1].isdigit() else -1
                if run_id not in sim.runs:
                    self._send(404, {"message": "Not Found"})
                    return
                listing("jobs", list(sim.jobs.get(run_id, [])))
                return
            if method == "GET" and len(parts) == 3 and parts[0] == "artifacts" and parts[2] == "zip":
                artifact = sim.artifacts.get(int(parts[1])) if parts[1].isdigit() else None
                if artifact is None:
                    self._send(404, {"message": "Not Found"})
                elif artifact.expired:
                    self._send(410, {"message": "Artifact has expired"})
                else:
                    expires = math.ceil(sim.clock.now() + STORAGE_URL_TTL_S)
                    self._send(302, headers={"Location": f"{sim.base}_storage/artifacts/{artifact.id}"
                                                         f"?sig=sim&se={expires}"})
                return
            if len(parts) == 3 and parts[0] == "workflows":
                flow = sim.workflows.get(parts[1])
                if flow is None:
                    self._send(404, {"message": "Not Found"})
                    return
                if method == "GET" and parts[2] == "runs":
                    branch, status = query.get("branch", [None])[0], query.get("status", [None])[0]
                    runs = sorted((r for r in sim.runs.values() if r.workflow == parts[1]
                                   and (branch is None or r.branch == branch)
                                   and (status is None or status in (r.status, r.conclusion))),
                                  key=lambda r: -r.id)
                    listing("workflow_runs", [r.to_json() for r in runs])
                    return
                if method == "POST" and parts[2] == "dispatches":
                    request = json.loads(body or b"{}")
                    ref, inputs = request.get("ref"), request.get("inputs") or {}
                    unexpected = sorted(set(inputs) - set(flow.inputs))
                    if not ref:
                        self._send(422, {"message": "Invalid request.\n\n\"ref\" wasn't supplied."})
                    elif unexpected:
                        self._send(422, {"message": f"Unexpected inputs provided: {unexpected}"})
                    elif len(inputs) > MAX_DISPATCH_INPUTS:
                        self._send(422, {"message": f"you may only define up to {MAX_DISPATCH_INPUTS} inputs"})
                    else:
                        sim._dispatch(parts[1], str(ref), {k: str(v) for k, v in inputs.items()})
                        self._send(204)
                    return
            self._send(404, {"message": "Not Found"})

        do_GET = do_POST = do_DELETE = do_PATCH = _handle

    return Handler


@contextmanager
def serve(sim: GitHubSim) -> Iterator[GitHubSim]:
    """Run ``sim`` on 127.0.0.1; ``sim.base`` is its URL (ending in ``/``): the API is at
    ``sim.base`` and the uploads host at ``sim.base + "uploads"``."""
    with loopback.serve(handler=_handler(sim)) as base:
        sim.base = base
        yield sim


@pytest.fixture
def sim() -> Iterator[GitHubSim]:
    """A simulated GitHub on 127.0.0.1, its clock 600 times faster than the wall's."""
    with serve(GitHubSim(clock=ScaledClock(600.0))) as s:
        yield s


# -- what actions/attest-build-provenance does --------------------------------------------------------
MAX_ATTESTED_SUBJECTS = 1024  # the action's cap on the subjects of one statement


def provenance_predicate(run: dict[str, str]) -> dict[str, object]:
    """The SLSA provenance v1 predicate ``@actions/attest`` builds from a workflow run's environment
    (GitHub Actions' workflow build type): ``run`` holds the run's GITHUB_* variables."""
    server, repo = run["GITHUB_SERVER_URL"], run["GITHUB_REPOSITORY"]
    workflow_path = run["GITHUB_WORKFLOW_REF"].split("@", 1)[0].removeprefix(f"{repo}/")
    return {
        "buildDefinition": {
            "buildType": "https://actions.github.io/buildtypes/workflow/v1",
            "externalParameters": {"workflow": {"ref": run["GITHUB_REF"], "repository": f"{server}/{repo}",
                                                "path": workflow_path}},
            "internalParameters": {"github": {"event_name": run["GITHUB_EVENT_NAME"],
                                              "repository_id": run["GITHUB_REPOSITORY_ID"],
                                              "repository_owner_id": run["GITHUB_REPOSITORY_OWNER_ID"],
                                              "runner_environment": "github-hosted"}},
            "resolvedDependencies": [{"uri": f"git+{server}/{repo}@{run['GITHUB_REF']}",
                                      "digest": {"gitCommit": run["GITHUB_SHA"]}}],
        },
        "runDetails": {
            "builder": {"id": f"{server}/{run['GITHUB_WORKFLOW_REF']}"},
            "metadata": {"invocationId": f"{server}/{repo}/actions/runs/{run['GITHUB_RUN_ID']}/attempts/"
                                         f"{run['GITHUB_RUN_ATTEMPT']}"},
        },
    }


def attest_build_provenance(sim: GitHubSim, checksums: Path, run: dict[str, str]) -> dict[str, str]:
    """The action's step on ``subject-checksums: checksums``: one statement naming every line's
    subject, stored on the simulated repository; its outputs (``attestation-id``, ``attestation-url``)."""
    subjects = []
    for line in checksums.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            subjects.append({"name": name.lstrip("*"), "digest": {"sha256": digest}})
    if len(subjects) > MAX_ATTESTED_SUBJECTS:
        raise ValueError(f"{len(subjects)} subjects, more than the action's {MAX_ATTESTED_SUBJECTS}")
    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": subjects,
                 "predicateType": "https://slsa.dev/provenance/v1", "predicate": provenance_predicate(run)}
    bundle = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "verificationMaterial": {},
              "dsseEnvelope": {"payload": base64.b64encode(json.dumps(statement).encode()).decode(),
                               "payloadType": "application/vnd.in-toto+json", "signatures": [{"sig": ""}]}}
    request = urllib.request.Request(f"{sim.base}repos/{sim.repo}/attestations", method="POST",
                                     data=json.dumps({"bundle": bundle}).encode(),
                                     headers={"Authorization": f"Bearer {sim.token}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        made = json.loads(answer.read())
    return {"attestation-id": str(made["id"]),
            "attestation-url": f"https://github.com/{sim.repo}/attestations/{made['id']}"}
